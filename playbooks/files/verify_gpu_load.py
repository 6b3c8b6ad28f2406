"""Keep every GPU busy for a few seconds and run one command while they are busy (issue 24).

    python verify_gpu_load.py SECONDS COMMAND [ARG...]

verify.yml's throttling check runs it with the environment's python (as verify_torch.py) and
`nvidia-smi -q -d PERFORMANCE` as COMMAND: a clock slowdown shows while the GPU works, and an idle
GPU lowers its clocks (the "Idle" reason) and its PCIe generation anyway. The first half of
SECONDS runs float32 matrix products on every GPU torch sees and times them; then enough products
for the rest of SECONDS are queued on every GPU at once, COMMAND runs while they execute, and the
script waits for them. COMMAND's standard output is printed unchanged (the filter parses it), its
exit status is returned; 3 when torch sees no GPU. What the load did goes to standard error.
"""

from __future__ import annotations

import subprocess
import sys
import time

import torch

SIZE = 8192  # one product: 2 * 8192^3 flop, ~1.1 TFLOP: milliseconds on any datacenter GPU
MAX_QUEUED = 800  # below CUDA's launch queue depth, so queuing never blocks on one GPU


def products(pairs: list[tuple[torch.Tensor, torch.Tensor]], count: int) -> None:
    """Queue `count` products on every GPU, one GPU after another in each round."""
    for _ in range(count):
        for matrix, out in pairs:
            torch.mm(matrix, matrix, out=out)


def synchronize(gpus: int) -> None:
    for index in range(gpus):
        torch.cuda.synchronize(index)


def main(argv: list[str]) -> int:
    seconds, command = float(argv[1]), argv[2:]
    gpus = torch.cuda.device_count()
    if gpus == 0:
        print("torch sees no GPU: no load, nothing read", file=sys.stderr)
        return 3
    pairs = []
    for index in range(gpus):
        matrix = torch.rand(SIZE, SIZE, device=f"cuda:{index}")
        pairs.append((matrix, torch.empty_like(matrix)))
    start = time.monotonic()
    done = 0
    while time.monotonic() - start < seconds / 2 or done == 0:
        products(pairs, 4)
        synchronize(gpus)
        done += 4
    per_product = (time.monotonic() - start) / done
    queued = max(1, min(MAX_QUEUED, int(seconds / 2 / per_product)))
    products(pairs, queued)
    read = subprocess.run(command, capture_output=True, text=True, check=False)
    synchronize(gpus)
    sys.stdout.write(read.stdout)
    print(
        f"{gpus} GPU(s) busy {time.monotonic() - start:.1f} s ({per_product * 1000:.1f} ms per "
        f"{SIZE}x{SIZE} product, {queued} queued while `{' '.join(command)}` ran)",
        file=sys.stderr,
    )
    sys.stderr.write(read.stderr)
    return read.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
