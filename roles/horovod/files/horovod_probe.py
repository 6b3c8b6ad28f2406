"""Report what the horovod role needs to know about a Python environment, as one JSON object.

Run by the role with the environment's own interpreter: `python horovod_probe.py RECORD_PATH`.
Never fails on a missing package; the role decides what a missing piece means.
"""

import glob
import importlib.metadata
import json
import os
import re
import sys
import sysconfig

# torch's headers stop a too-old compiler with `#if ... __cplusplus < 201703L` then `#error`
# (C++17 up to torch 2.13; torch >= 2.14 asks for 202002L). The highest such guard is the
# standard the extension must be compiled with.
CXX_GUARD = re.compile(r"__cplusplus\s*<\s*(\d{4})\d{2}L\s*\n\s*#\s*error")
CXX_GUARD_HEADERS = ("ATen/ATen.h", "torch/csrc/api/include/torch/all.h", "c10/macros/Macros.h")


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
        "torch_cxx_standard": torch_cxx_standard(
            os.path.join(os.path.dirname(torch.__file__), "include")
        ),
    }


def torch_cxx_standard(include_dir):
    """The C++ standard torch's headers require (17 when they state nothing newer)."""
    years = [2017]
    for rel in CXX_GUARD_HEADERS:
        try:
            with open(os.path.join(include_dir, rel)) as f:
                years += [int(y) for y in CXX_GUARD.findall(f.read())]
        except OSError:
            continue
    return max(years) % 100


def nccl_header_version(include_dir):
    """NCCL's version as nccl.h states it ("2.29.7"), or None."""
    try:
        with open(os.path.join(include_dir, "nccl.h")) as f:
            text = f.read()
    except OSError:
        return None
    parts = [re.search(rf"#define NCCL_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def bundled_nccl():
    """The NCCL a pip-installed torch depends on (nvidia-nccl-cuNN), or None.

    torch's libraries find it through their RUNPATH ($ORIGIN/../../nvidia/nccl/lib), so it is the
    libnccl.so.2 every torch process loads, whatever the system has.
    """
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        m = re.fullmatch(r"nvidia-nccl-cu(\d+)", name)
        if not m:
            continue
        home = os.path.join(str(dist.locate_file("")), "nvidia", "nccl")
        include, lib = os.path.join(home, "include"), os.path.join(home, "lib")
        libs = sorted(glob.glob(os.path.join(lib, "libnccl.so*")))
        if os.path.isfile(os.path.join(include, "nccl.h")) and libs:
            return {
                "dist": name,
                "cuda_major": int(m.group(1)),
                "home": home,
                "include": include,
                "lib": lib,
                "library": libs[0],
                "version": nccl_header_version(include),
            }
    return None


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
        "torch_nccl": bundled_nccl(),
        "torch_cxx_standard": None,
    }
    report.update(torch_info())
    print(json.dumps(report))


if __name__ == "__main__":
    main()
