"""verify.yml's torch check: a CUDA op on every GPU and an NCCL all-reduce across them.

Run with the training environment's interpreter; prints one JSON object (the playbook decides
pass/fail from it). A torch that cannot be imported fails here with its traceback on stderr.
"""

import json

import torch

n = torch.cuda.device_count() if torch.cuda.is_available() else 0
report = {"torch": torch.__version__, "cuda": torch.version.cuda, "devices": n, "nccl": None}
if n:
    # A kernel on each GPU: CUDA error 802 (no Fabric Manager) and dead GPUs fail here.
    report["ones"] = [int(torch.ones(8, device=f"cuda:{i}").sum().item()) for i in range(n)]
    report["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    tensors = [torch.ones(1024, device=f"cuda:{i}") for i in range(n)]
    torch.cuda.nccl.all_reduce(tensors)
    report["allreduce"] = [float(t[0].item()) for t in tensors]
print(json.dumps(report))
