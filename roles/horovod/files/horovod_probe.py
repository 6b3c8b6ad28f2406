"""Report what the horovod role needs to know about a Python environment, as one JSON object.

Run by the role with the environment's own interpreter: `python horovod_probe.py RECORD_PATH`.
Never fails on a missing package; the role decides what a missing piece means.
"""

import glob
import importlib.metadata
import json
import os
import sys
import sysconfig


def installed_version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_info():
    try:
        import torch
    except Exception as exc:  # a broken torch is as useless to the build as a missing one
        return {
            "torch_version": None,
            "torch_cuda": None,
            "torch_error": f"{type(exc).__name__}: {exc}",
        }
    return {
        "torch_version": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_error": None,
    }


def nvidia_gpus():
    """NVIDIA display/3D controllers on the PCI bus (vendor 0x10de, class 0x0300xx/0x0302xx)."""
    count = 0
    for dev in glob.glob("/sys/bus/pci/devices/*"):
        try:
            with open(os.path.join(dev, "vendor")) as f:
                vendor = f.read().strip()
            with open(os.path.join(dev, "class")) as f:
                cls = f.read().strip()
        except OSError:
            continue
        if vendor == "0x10de" and cls[:6] in ("0x0300", "0x0302"):
            count += 1
    return count


def read_record(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    include = sysconfig.get_paths()["include"]
    report = {
        "python_version": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "python_executable": sys.executable,
        "python_base_prefix": sys.base_prefix,
        "python_include": include,
        "python_headers": os.path.isfile(os.path.join(include, "Python.h")),
        "horovod_version": installed_version("horovod"),
        "nvidia_gpus": nvidia_gpus(),
        "record": read_record(sys.argv[1]) if len(sys.argv) > 1 else None,
    }
    report.update(torch_info())
    print(json.dumps(report))


if __name__ == "__main__":
    main()
