"""The file list of an ImageFolder, shared by every loader (no torch import).

Classes are the sorted subdirectories of the root and files are walked in sorted order, as
torchvision's ImageFolder does, so every loader maps a file to the same label. ImageNet's
train split (train/<wnid>/<wnid>_<n>.JPEG) is this layout as extracted.
"""

from __future__ import annotations

import os
from pathlib import Path

# What torchvision's ImageFolder accepts (compared lower-case).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class DatasetError(Exception):
    """A data set that no loader can read, with the reason."""


def list_images(root: str | Path) -> tuple[list[str], list[tuple[str, int]]]:
    """(class names, [(path, class index)]) of an ImageFolder, both in ImageFolder order."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root} is not a directory (ImageFolder root expected)")
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise DatasetError(f"{root} has no class subdirectories (ImageFolder layout ROOT/<class>/)")
    samples = []
    for index, name in enumerate(classes):
        for directory, _, files in sorted(os.walk(root / name, followlinks=True)):
            for file in sorted(files):
                if file.lower().endswith(IMAGE_EXTENSIONS):
                    samples.append((os.path.join(directory, file), index))
    if not samples:
        raise DatasetError(f"{root}: no image files ({', '.join(IMAGE_EXTENSIONS)}) in its classes")
    return classes, samples
