"""Keep every GPU busy for a few seconds and run commands while they are busy.

    python verify_gpu_load.py SECONDS -- COMMAND [ARG...] [-- COMMAND [ARG...]]...

verify.yml's health checks run it with the environment's python (as verify_torch.py): `nvidia-smi
-q -d PERFORMANCE` for the throttling check and nvidia-smi's --query-gpu CSV for the ECC and PCIe
link checks. A clock slowdown shows while the GPU works, and an idle GPU lowers its clocks (the
"Idle" reason) and its PCIe generation anyway. The first half of SECONDS runs float32 matrix
products on every GPU torch sees and times them; then enough products for the rest of SECONDS are
queued on every GPU at once, the commands run one after another while they execute, and the
script waits for them. It prints {"reads": [{"argv", "rc", "stdout", "stderr"}, ...]}, one per
command in order (the shape of what an Ansible command task registers), and exits 0; 3 when torch
sees no GPU. What the load did goes to standard error.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

SIZE = 8192  # one product: 2 * 8192^3 flop, ~1.1 TFLOP: milliseconds on any datacenter GPU
MAX_QUEUED = 800  # below CUDA's launch queue depth, so queuing never blocks on one GPU
SEPARATOR = "--"


def commands(argv: list[str]) -> tuple[float, list[list[str]]]:
    """SECONDS and the commands of `verify_gpu_load.py SECONDS -- CMD... -- CMD...`."""
    found: list[list[str]] = []
    for word in argv[2:]:
        if word == SEPARATOR:
            found.append([])
        elif found:
            found[-1].append(word)
    return float(argv[1]), [command for command in found if command]


def read(argv_list: list[list[str]]) -> str:
    """Run each command once, in order; the JSON report of what each printed."""
    reads = []
    for argv in argv_list:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        reads.append(
            {"argv": argv, "rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        )
    return json.dumps({"reads": reads})


def main(argv: list[str]) -> int:
    # torch only here: the reading above runs without it (the test stand-ins import this file).
    import torch

    seconds, argv_list = commands(argv)
    gpus = torch.cuda.device_count()
    if gpus == 0:
        print("torch sees no GPU: no load, nothing read", file=sys.stderr)
        return 3
    pairs = []
    for index in range(gpus):
        matrix = torch.rand(SIZE, SIZE, device=f"cuda:{index}")
        pairs.append((matrix, torch.empty_like(matrix)))

    def products(count: int) -> None:
        """Queue `count` products on every GPU, one GPU after another in each round."""
        for _ in range(count):
            for matrix, out in pairs:
                torch.mm(matrix, matrix, out=out)

    def synchronize() -> None:
        for index in range(gpus):
            torch.cuda.synchronize(index)

    start = time.monotonic()
    done = 0
    while time.monotonic() - start < seconds / 2 or done == 0:
        products(4)
        synchronize()
        done += 4
    per_product = (time.monotonic() - start) / done
    queued = max(1, min(MAX_QUEUED, int(seconds / 2 / per_product)))
    products(queued)
    report = read(argv_list)
    synchronize()
    print(report)
    print(
        f"{gpus} GPU(s) busy {time.monotonic() - start:.1f} s ({per_product * 1000:.1f} ms per "
        f"{SIZE}x{SIZE} product, {queued} queued while {len(argv_list)} command(s) ran)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
