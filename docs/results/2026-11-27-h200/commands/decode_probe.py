"""The GPU loaders' parts alone, on one GPU, on the JPEG folder given (no training beside them):
img/s of each decoder, of each decoder with the augment (crop, resize, flip, normalise) image by
image (the loader before this session, copied below as `augment_per_image`) and batched
(bench.rank.loaders.augment), and the GPU time one batch of the augment takes. Also which
nvImageCodec backends create a decoder here, and whether the hardware decoder takes a region of
interest. Run from the repository root: python decode_probe.py JPEG_DIR."""

import random
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
from bench.rank.loaders import MEAN, STD
from bench.rank.loaders.augment import augment_batch, random_resized_crop_params
from bench.rank.loaders.nvimgcodec import HardwareJpegDecoder
from bench.rank.loaders.nvjpeg import JpegDecoder

BATCH = int(sys.argv[3]) if len(sys.argv) > 3 else 256
dev = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cuda:0")  # cpu: a dry run of this script
cuda = dev.type == "cuda"
sync = torch.cuda.synchronize if cuda else lambda: None
if cuda:
    torch.cuda.set_device(dev)
files = sorted(Path(sys.argv[1]).rglob("*.JPEG"))[: BATCH * 10]
raw = [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in files]
batches = [raw[i : i + BATCH] for i in range(0, len(raw), BATCH)]
print(f"{len(raw)} files, {sum(len(r) for r in raw) / len(raw) / 1e3:.0f} kB each on average")


def augment_per_image(images, size, rng, memory_format):
    """The augment as it was: an interpolate (antialiased) per image, then flip and normalise."""
    out = torch.empty((len(images), 3, size, size), dtype=torch.float32, device=images[0].device)
    flips = []
    for i, image in enumerate(images):
        _, h, w = image.shape
        top, left, ch, cw = random_resized_crop_params(h, w, rng)
        crop = image[:, top : top + ch, left : left + cw].unsqueeze(0).float()
        out[i] = F.interpolate(crop, size=(size, size), mode="bilinear", antialias=True)[0]
        flips.append(rng.random() < 0.5)
    flip = torch.tensor(flips, device=dev).view(-1, 1, 1, 1)
    out = torch.where(flip, out.flip(-1), out)
    mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=dev).view(1, 3, 1, 1) * 255
    return out.sub_(mean).div_(std).contiguous(memory_format=memory_format)


def rate(name, fn):
    side = torch.cuda.Stream(dev) if cuda else None
    with torch.cuda.stream(side) if cuda else nullcontext():
        fn(batches[0])
        sync()
        t = time.perf_counter()
        for b in batches:
            fn(b)
        sync()
    took = time.perf_counter() - t
    print(
        f"{name}: {len(raw) / took:,.0f} img/s alone ({took / len(batches) * 1e3:.1f} ms a batch)"
    )


rng = random.Random(0)
tv = JpegDecoder(dev)
cl = torch.channels_last
rate("torchvision decode_jpeg", tv)
rate(
    "torchvision decode_jpeg + augment per image", lambda b: augment_per_image(tv(b), 224, rng, cl)
)
rate("torchvision decode_jpeg + batched augment", lambda b: augment_batch(tv(b), 224, rng, cl))
for backends in (
    ("HW_GPU_ONLY",),
    ("HYBRID_CPU_GPU",),
    ("HW_GPU_ONLY", "HYBRID_CPU_GPU", "CPU_ONLY"),
    ("GPU_ONLY",),
):
    try:
        codec = HardwareJpegDecoder(dev, 8, (backends,))  # one decoder allowed these backends
    except Exception as exc:
        print(f"nvimgcodec {'+'.join(backends)}: no decoder: {exc!r}"[:400])
        continue
    rate(f"nvimgcodec {'+'.join(backends)}", codec)
    rate(
        f"nvimgcodec {'+'.join(backends)} + batched augment",
        lambda b, c=codec: augment_batch(c(b), 224, rng, cl),
    )

# The augment's GPU time for one batch, on decoded images (CUDA events), image by image and batched
decoded = tv(batches[0])
sync()
for name, fn in (("per image", augment_per_image), ("batched", augment_batch)):
    fn(decoded, 224, rng, cl)
    sync()
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter()
    if cuda:
        start.record()
    for _ in range(5):
        fn(decoded, 224, rng, cl)
    if cuda:
        end.record()
    host = (time.perf_counter() - t) / 5
    sync()
    gpu = start.elapsed_time(end) / 5 if cuda else float("nan")
    print(f"augment {name}: {gpu:.2f} ms GPU, {host * 1e3:.2f} ms host a batch of {BATCH}")

# Region of interest with the hardware decoder: decode only each image's crop
try:
    from nvidia import nvimgcodec as n

    kind = n.BackendKind.HW_GPU_ONLY if cuda else n.BackendKind.CPU_ONLY
    device_id = 0 if cuda else n.NVIMGCODEC_DEVICE_CPU_ONLY
    hw = n.Decoder(device_id=device_id, max_num_cpu_threads=8, backends=[n.Backend(kind)])
    streams = [n.CodeStream(r.numpy()) for r in batches[0]]
    regions = []
    for s in streams:
        top, left, h, w = random_resized_crop_params(s.height, s.width, rng)
        regions.append(s.get_sub_code_stream(region=n.Region(top, left, top + h, left + w)))
    out = hw.decode(regions)
    ok = [o for o in out if o is not None]
    print(
        f"hardware ROI decode: {len(ok)} of {len(out)} decoded, first {ok[0].shape if ok else None}"
    )
    sync()
    t = time.perf_counter()
    for _ in range(5):
        hw.decode(regions)
    sync()
    print(f"hardware ROI decode: {5 * BATCH / (time.perf_counter() - t):,.0f} img/s")
    print("subsampling of the first files:", sorted({str(s.chroma_subsampling) for s in streams}))
except Exception as exc:
    print("hardware ROI decode failed:", repr(exc)[:400])
