"""verify.yml's NCCL runtime check: the libnccl files a torch + Horovod process maps.

Run with the training environment's interpreter, VERIFY_ENV naming the environment (where the
horovod role writes gpurig-horovod.json); prints one JSON object (the playbook decides).
"""

import json
import os

import torch

report = {"torch_nccl": ".".join(map(str, torch.cuda.nccl.version())), "horovod": False}
try:
    import horovod.torch  # noqa: F401  (loads Horovod's extension and its libnccl.so.2)

    report["horovod"] = True
except ImportError:
    pass
with open("/proc/self/maps") as maps:
    report["mapped"] = sorted(
        {os.path.realpath(line.split()[-1]) for line in maps if "libnccl" in line and "/" in line}
    )
try:
    with open(os.path.join(os.environ["VERIFY_ENV"], "gpurig-horovod.json")) as f:
        report["horovod_built_against"] = json.load(f)["built_against"].get("nccl_version")
except (OSError, ValueError, KeyError):
    report["horovod_built_against"] = None
print(json.dumps(report))
