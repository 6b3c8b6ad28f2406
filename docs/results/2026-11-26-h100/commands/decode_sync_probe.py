"""Does a GPU JPEG decode called on a side stream wait for the work queued on the training
stream? Host time of one call with the GPU idle, and with ~300 ms of matrix products queued on
the default stream first. Decoders: torchvision's batched decode_jpeg (the nvjpeg loader's) and
nvImageCodec's hardware (HW_GPU_ONLY) and CUDA (GPU_ONLY) backends, where that wheel is
present. Also each decoder's throughput on 2,560 files alone. (A diagnosis, not a
bench figure.)"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, ".")
from bench.rank.loaders.augment import augment_batch
from bench.rank.loaders.nvjpeg import JpegDecoder

root = Path(sys.argv[1])
files = sorted(root.rglob("*.JPEG"))[:2560]
raw = [f.read_bytes() for f in files]
tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in raw]
dev = torch.device("cuda")
side = torch.cuda.Stream(dev)
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(10):
    a @ a
torch.cuda.synchronize()
per_mm = (time.perf_counter() - t) / 10
print(f"one 8192^3 bf16 matmul: {per_mm * 1e3:.2f} ms")


def busy(ms: float) -> None:
    for _ in range(int(ms / 1e3 / per_mm)):
        a @ a


def host_time(fn, queue_ms: float) -> float:
    torch.cuda.synchronize()
    if queue_ms:
        busy(queue_ms)
    t = time.perf_counter()
    with torch.cuda.stream(side):
        fn()
    took = time.perf_counter() - t
    torch.cuda.synchronize()
    return took


def report(name, fn, batches):
    fn(batches[0])
    torch.cuda.synchronize()
    t = time.perf_counter()
    for b in batches:
        with torch.cuda.stream(side):
            fn(b)
    torch.cuda.synchronize()
    rate = 256 * len(batches) / (time.perf_counter() - t)
    idle = [host_time(lambda: fn(batches[0]), 0) for _ in range(3)]
    loaded = [host_time(lambda: fn(batches[0]), 300) for _ in range(3)]
    print(
        f"{name}: {rate:,.0f} img/s alone; host time of one call of 256: GPU idle "
        f"{min(idle) * 1e3:.1f} ms, behind 300 ms of queued work {min(loaded) * 1e3:.1f} ms",
        flush=True,
    )


import random  # noqa: E402

rng = random.Random(0)
dec = JpegDecoder(dev)
tb = [tensors[i : i + 256] for i in range(0, len(tensors), 256)]
report("torchvision decode_jpeg (nvjpeg loader)", dec, tb)
report(
    "torchvision decode_jpeg + augment",
    lambda b: augment_batch(dec(b), 224, rng, torch.channels_last),
    tb,
)
report(
    "labels .to(device) from pageable memory",
    lambda b: torch.arange(256).to(dev, non_blocking=True),
    tb,
)
try:
    import numpy as np
    from nvidia import nvimgcodec

    print("nvimgcodec", nvimgcodec.__version__)
    nb = [
        [np.frombuffer(r, dtype=np.uint8) for r in raw[i : i + 256]]
        for i in range(0, len(raw), 256)
    ]
    for kind in ("HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU"):
        try:
            d = nvimgcodec.Decoder(
                device_id=0, backends=[nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, kind))]
            )

            def run(b, d=d):
                imgs = d.decode(b, cuda_stream=side.cuda_stream)
                return [torch.as_tensor(i, device=dev) for i in imgs]

            out = run(nb[0])
            print(kind, "decoded", len(out), tuple(out[0].shape), out[0].dtype)
            report(f"nvimgcodec {kind}", run, nb)
        except Exception as exc:
            print(kind, "failed:", repr(exc)[:300])
except Exception as exc:
    print("nvimgcodec unavailable:", repr(exc)[:300])
