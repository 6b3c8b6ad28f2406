"""Where the nvjpeg loader's time goes on the GPU machine: decode, augment, both; and the CPU
decoders per core. Prints img/s for each (a diagnosis, not a bench figure)."""

import random
import sys
import time
from pathlib import Path

import torch
import torchvision
from torchvision.io import ImageReadMode, decode_jpeg

sys.path.insert(0, ".")
from bench.rank.loaders.augment import augment_batch

root = Path(sys.argv[1])
files = sorted(root.rglob("*.JPEG"))[:2560]
data = [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in files]
batches = [data[i : i + 256] for i in range(0, len(data), 256)]
dev = torch.device("cuda")
rng = random.Random(0)
print("torchvision", torchvision.__version__, "files", len(files))


def rate(name, fn, reps=None):
    reps = reps or len(batches)
    fn(batches[0])
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(reps):
        fn(batches[i % len(batches)])
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(
        f"{name:55s} {256 * reps / dt:9.0f} img/s  ({dt / reps * 1e3:.1f} ms per 256)", flush=True
    )


decoded = decode_jpeg(batches[0], mode=ImageReadMode.RGB, device=dev)
rate(
    "gpu decode_jpeg batched (list of 256)",
    lambda b: decode_jpeg(b, mode=ImageReadMode.RGB, device=dev),
)
rate(
    "gpu augment_batch only (decoded once)",
    lambda b: augment_batch(decoded, 224, rng, torch.channels_last),
    reps=10,
)
rate(
    "gpu decode + augment",
    lambda b: augment_batch(
        decode_jpeg(b, mode=ImageReadMode.RGB, device=dev), 224, rng, torch.channels_last
    ),
)
with torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
) as prof:
    augment_batch(
        decode_jpeg(batches[1], mode=ImageReadMode.RGB, device=dev), 224, rng, torch.channels_last
    )
    torch.cuda.synchronize()
print(
    prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60)
)
print(
    prof.key_averages().table(
        sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=60
    )
)
# CPU decoders, one core
torch.set_num_threads(1)
t = time.perf_counter()
for d in data[:256]:
    decode_jpeg(d, mode=ImageReadMode.RGB)
print(f"{'cpu torchvision decode_jpeg, 1 thread':55s} {256 / (time.perf_counter() - t):9.0f} img/s")
from PIL import Image  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

tf = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()])
t = time.perf_counter()
for f in files[:256]:
    with Image.open(f) as im:
        tf(im.convert("RGB"))
label = "cpu PIL open+convert+RandomResizedCrop, 1 thread"
print(f"{label:55s} {256 / (time.perf_counter() - t):9.0f} img/s")
t = time.perf_counter()
for f in files[:256]:
    with Image.open(f) as im:
        im.convert("RGB").load()
print(f"{'cpu PIL decode only, 1 thread':55s} {256 / (time.perf_counter() - t):9.0f} img/s")
