"""Image data sets for `--data`: a synthetic JPEG ImageFolder writer and the layout check.

`python -m bench.datasets make-jpeg-folder DIR --images N --size WxH --classes C` writes
DIR/class_000/img_00000000.JPEG ... with PIL: real JPEG files of a chosen size for tests, demos
and anyone without ImageNet. The images are smooth random gradients plus noise (compressible
like photographs, not like flat colour), and the same arguments and seed write the same files.

Every loader reads the ImageFolder layout, ROOT/<class>/<image>, with classes numbered in
sorted directory order. ImageNet's train split (train/n01440764/n01440764_10026.JPEG ...) is
that layout as extracted, so `--data /path/to/imagenet/train` works as is.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.shared.folder import DatasetError, list_images


def parse_size(text: str) -> tuple[int, int]:
    """ "400x300" -> (400, 300): width x height in pixels."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected WIDTHxHEIGHT, e.g. 400x300, got {text!r}"
        ) from None
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError(f"width and height must be >= 1, got {text!r}")
    return width, height


def make_jpeg_folder(
    root: str | Path,
    images: int,
    size: tuple[int, int],
    classes: int,
    quality: int = 90,
    seed: int = 0,
) -> list[Path]:
    """Write `images` JPEGs of `size` (width, height), spread round-robin over `classes` class
    directories under `root`; returns the paths written. Refuses a non-empty `root`."""
    import numpy as np
    from PIL import Image

    if images < 1 or classes < 1:
        raise DatasetError(f"need >= 1 image and >= 1 class, got {images} and {classes}")
    if classes > images:
        raise DatasetError(f"{classes} classes need at least as many images, got {images}")
    if not 1 <= quality <= 95:
        raise DatasetError(f"JPEG quality must be 1..95, got {quality}")
    root = Path(root)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise DatasetError(f"{root} exists and is not empty: refusing to write into it")
    width, height = size
    rng = np.random.default_rng(seed)
    # A gradient per colour channel plus noise: JPEG files of realistic size and decode cost.
    ys = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    xs = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :, None]
    written = []
    for i in range(images):
        start, slope_x, slope_y = (rng.uniform(0, 255, 3).astype(np.float32) for _ in range(3))
        pixels = start + (slope_x - 128) * xs + (slope_y - 128) * ys
        pixels = pixels + rng.normal(0.0, 12.0, (height, width, 3)).astype(np.float32)
        directory = root / f"class_{i % classes:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"img_{i:08d}.JPEG"
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB").save(
            path, "JPEG", quality=quality
        )
        written.append(path)
    return written


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.datasets",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser(
        "make-jpeg-folder",
        help="write a synthetic JPEG ImageFolder",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    make.add_argument("root", type=Path, help="directory to create (must be absent or empty)")
    make.add_argument("--images", type=int, default=1600, help="number of images")
    make.add_argument("--size", type=parse_size, default="400x300", help="WIDTHxHEIGHT")
    make.add_argument("--classes", type=int, default=10, help="class directories")
    make.add_argument("--quality", type=int, default=90, help="JPEG quality 1..95")
    make.add_argument("--seed", type=int, default=0, help="same seed, same files")
    check = commands.add_parser("check", help="count the classes and images of an ImageFolder")
    check.add_argument("root", type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "make-jpeg-folder":
            written = make_jpeg_folder(
                args.root, args.images, args.size, args.classes, args.quality, args.seed
            )
            total = sum(p.stat().st_size for p in written)
            print(
                f"{args.root}: {len(written)} JPEGs of {args.size[0]}x{args.size[1]} in "
                f"{args.classes} classes, {total / 1e6:.2f} MB"
            )
        else:
            classes, samples = list_images(args.root)
            print(f"{args.root}: {len(samples)} images in {len(classes)} classes")
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
