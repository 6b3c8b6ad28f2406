"""Read a Python environment and decide the Horovod build for it: one JSON object on stdout.

Run by the role with the environment's own interpreter:
    python horovod_probe.py SETTINGS_JSON
SETTINGS_JSON holds the role's variables the decisions need (see `SETTINGS`), with the number of
NVIDIA GPUs on the PCI bus (gpurig_pci, read once for every role). The answer has the facts read
from the host (Python, torch, the installed Horovod and its build record, the compiler, NCCL,
nvcc) and then either
  - "refusal": the first reason the build cannot go ahead, worded for the user, or
  - "install_compiler_first": true, when the compiler is missing and may be installed (the role
    installs the build dependencies and runs the probe again: the C++ standard is decided for the
    compiler the build will really use), or
  - "build": everything the tasks use (backend, C++ standard and compiler flags, NCCL paths,
    CUDA architectures, the wheel cache key, the build record and whether to install).
The facts are gathered by `gather` (I/O only); `decide` is pure, so each decision is unit-tested
(tests/unit/test_horovod_probe.py). A missing package never raises: `decide` says what it means.
"""

import glob
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig

# The role variables the probe is given (without the horovod_ prefix), plus the NVIDIA GPUs on
# the PCI bus (gpurig_pci), the host's architecture (ansible_facts) and whether Ansible runs in
# check mode.
SETTINGS = (
    "nvidia_gpus",
    "record_path",
    "env_path",
    "version",
    "gpu_operations",
    "cxx",
    "cxx_standard",
    "cuda_cc_list",
    "nccl_home",
    "nccl_include",
    "nccl_lib",
    "cuda_home",
    "debug_info",
    "optimize",
    "architecture",
    "check_mode",
)

# torch's headers stop a too-old compiler with `#if ... __cplusplus < 201703L` then `#error`
# (C++17 up to torch 2.13; torch >= 2.14 asks for 202002L). The highest such guard is the
# standard the extension must be compiled with.
CXX_GUARD = re.compile(r"__cplusplus\s*<\s*(\d{4})\d{2}L\s*\n\s*#\s*error")
CXX_GUARD_HEADERS = ("ATen/ATen.h", "torch/csrc/api/include/torch/all.h", "c10/macros/Macros.h")

# The names the role looks for in NCCL's include and lib directories.
NCCL_FILES = ("nccl.h", "libnccl.so", "libnccl.so.2")


class Refusal(Exception):
    """The build cannot go ahead; the message tells the user what to change."""


# ---- facts ------------------------------------------------------------------------------------


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


def read_record(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run(argv):
    """{"rc", "stdout"} of a command; rc None when it cannot be started at all."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError:
        return {"rc": None, "stdout": ""}
    return {"rc": done.returncode, "stdout": done.stdout}


def nccl_files(dirs):
    """Which of NCCL_FILES the directories hold (by name, like the role's find did)."""
    names = set()
    for d in dirs:
        try:
            names.update(n for n in os.listdir(d) if n in NCCL_FILES)
        except OSError:
            continue
    return sorted(names)


def gather(settings):
    """Everything `decide` reads from the host. Commands run only where a decision needs them."""
    include = sysconfig.get_paths()["include"]
    facts = {
        "python_version": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "python_executable": sys.executable,
        "python_base_prefix": sys.base_prefix,
        "python_include": include,
        "python_headers": os.path.isfile(os.path.join(include, "Python.h")),
        "horovod_version": installed_version("horovod"),
        # The role reads the PCI bus once for every role (roles/gpurig/tasks/pci.yml, gpurig_pci).
        "nvidia_gpus": int(settings["nvidia_gpus"]),
        "record": read_record(settings["record_path"]),
        "torch_nccl": bundled_nccl(),
        "torch_cxx_standard": None,
        "cxx_version": None,
        "nccl": None,
    }
    facts.update(torch_info())
    cxx = run([settings["cxx"], "-dumpversion"])
    if cxx["rc"] == 0:
        facts["cxx_version"] = cxx["stdout"].strip()
    if operations(settings, facts) == "nccl" and facts["torch_version"] is not None:
        paths = nccl_paths(settings, facts)
        facts["nccl"] = {
            "files": nccl_files([paths["include"], paths["lib"]]),
            "header_version": nccl_header_version(paths["include"]),
            "deb": None
            if paths["is_torch_bundle"]
            else run(["dpkg-query", "-W", "-f=${Version}", "libnccl2"]),
            "nvcc": run([os.path.join(settings["cuda_home"], "bin", "nvcc"), "--version"]),
            "nvidia_smi": None
            if settings["cuda_cc_list"]
            else run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]),
        }
    return facts


# ---- decisions (pure) -------------------------------------------------------------------------


def operations(settings, facts):
    """The tensor operations backend: as set, or nccl when an NVIDIA GPU is on the PCI bus."""
    if settings["gpu_operations"] != "auto":
        return settings["gpu_operations"]
    return "nccl" if facts["nvidia_gpus"] > 0 else "gloo"


def cxx_major(cxx_version):
    """g++'s major version from `-dumpversion` ("12" or "9.4.0"); 0 when there is none."""
    try:
        return int(re.sub(r"\..*$", "", cxx_version or "0"))
    except ValueError:
        return 0


def cxx_standard(settings, facts, major):
    """The C++ standard of the whole build (torch extension and gloo alike)."""
    torch_std = facts["torch_cxx_standard"]
    if str(settings["cxx_standard"]) != "auto":
        std = int(settings["cxx_standard"])
    else:
        # g++ >= 14 rejects 0.28.1's vendored flatbuffers span ("assignment of read-only member
        # flatbuffers::span::count_"); C++20 builds make flatbuffers use std::span instead.
        std = max(torch_std, 20 if major >= 14 else 17)
    if std < torch_std:
        raise Refusal(
            f"horovod_cxx_standard={settings['cxx_standard']}, but torch {facts['torch_version']}'s"
            f" headers require C++{torch_std}: leave it at auto."
        )
    return std


def cxx_flags(std, major, debug_info, optimize=True):
    """What the compiler wrapper appends to each of Horovod's C++ compiles (see cxx.sh.j2).

    GCC honours the last -std= and the last -g level it is given, so appending overrides what
    Horovod's CMake passes (-std=c++14; -g of its RelWithDebInfo build type).
    """
    # g++ 9 knows C++20 only by its draft name.
    flags = ["-std=" + ("c++2a" if std == 20 and major < 10 else f"c++{std}")]
    # Headers 0.28.1's sources use without including them, which g++ >= 13 no longer pulls in.
    flags += ["-include", "string", "-include", "stdexcept", "-include", "cstdint"]
    if std == 20 and major >= 10:
        # C++20 builds make 0.28.1's vendored flatbuffers use std::span (libstdc++ has <span>
        # from g++ 10): its own span emulation assigns to a const member, which g++ >= 14
        # rejects under any standard.
        flags.append("-DFLATBUFFERS_USE_STD_SPAN")
    return flags + build_flags(debug_info, optimize)


def build_flags(debug_info, optimize=True):
    """-g0 negates the -g of Horovod's RelWithDebInfo build, and -O0 its -O3, for C++ and nvcc's
    host steps alike.

    Horovod 0.28.1's setup.py passes -DCMAKE_BUILD_TYPE=RelWithDebInfo (Debug with HOROVOD_DEBUG=1;
    nothing selects Release), whose flags are CMake's "-O2 -g -DNDEBUG" for g++ and nvcc
    (Modules/Compiler/GNU.cmake, NVIDIA-CUDA.cmake), -O2 raised to -O3 by Horovod's CMakeLists.txt.
    They come after CXXFLAGS on the command line, so only the wrapper's appended -g0 wins: GCC's
    manual, "Level 0 produces no debug information at all. Thus, -g0 negates -g." (all checked
    2026-11-25 in horovod/horovod v0.28.1, Kitware/CMake and gcc.gnu.org's Debugging Options.)
    Likewise the appended -O0 wins over -O3: "If you use multiple -O options, with or without
    level numbers, the last such option is the one that is effective" (GCC's Optimize Options, as
    quoted in gcc.gnu.org/legacy-ml/gcc-patches/2001-03/msg01216.html; checked 2026-11-25).
    Unoptimized host code, for builds that only show Horovod compiles and links (CI); nvcc's
    device code keeps its own optimization.
    """
    return ([] if debug_info else ["-g0"]) + ([] if optimize else ["-O0"])


def nccl_paths(settings, facts):
    """Where the build finds NCCL: the NCCL torch bundles unless horovod_nccl_home says otherwise.

    One NCCL per process: torch's libraries load their bundled libnccl.so.2 through their
    RUNPATH, and Horovod's extension (linked by the SONAME libnccl.so.2) then binds to that
    already-loaded copy. Building against the same copy's nccl.h keeps the headers and the
    library that runs identical.
    """
    bundle = facts["torch_nccl"]
    prefix = settings["nccl_home"] or (bundle["home"] if bundle else "/usr")
    if settings["nccl_lib"]:
        lib = settings["nccl_lib"]
    elif prefix == "/usr":
        lib = f"/usr/lib/{settings['architecture']}-linux-gnu"
    else:
        lib = prefix + "/lib"
    return {
        "home": prefix,
        "include": settings["nccl_include"] or prefix + "/include",
        "lib": lib,
        "is_torch_bundle": bundle is not None and prefix == bundle["home"],
    }


def check_nccl(settings, facts, paths):
    """Refuse an NCCL build that would silently lose NCCL or target another CUDA than torch's."""
    torch = f"torch {facts['torch_version']}"
    if facts["torch_cuda"] is None:
        raise Refusal(
            f"{torch} in {settings['env_path']} is a CPU-only build, so an NCCL Horovod cannot be"
            " built against it. Install a CUDA build of torch (python_env_torch_index_url) or set"
            " horovod_gpu_operations=gloo."
        )
    found = facts["nccl"]
    if "nccl.h" not in found["files"] or not {"libnccl.so", "libnccl.so.2"} & set(found["files"]):
        raise Refusal(
            f"NCCL not found: need {paths['include']}/nccl.h and {paths['lib']}/libnccl.so(.2)"
            " (torch's nvidia-nccl-cuNN wheel, or Ubuntu's libnccl-dev as the nccl role installs"
            " it). Set horovod_nccl_home, horovod_nccl_include and horovod_nccl_lib if NCCL lives"
            " elsewhere."
        )
    torch_cuda_major = facts["torch_cuda"].split(".")[0]
    if paths["is_torch_bundle"]:
        nccl_cuda_major = str(facts["torch_nccl"]["cuda_major"])
    else:
        # NVIDIA's libnccl2 versions end in +cudaX.Y ("2.28.3-1+cuda13.0").
        m = re.search(r"\+cuda([0-9]+)", found["deb"]["stdout"])
        nccl_cuda_major = m.group(1) if m else ""
    if nccl_cuda_major not in ("", torch_cuda_major):
        raise Refusal(
            f"NCCL in {paths['home']} is built for CUDA {nccl_cuda_major}, {torch} for CUDA"
            f" {facts['torch_cuda']}: install NCCL for CUDA {torch_cuda_major}"
            " (gpurig_cuda_version) or leave horovod_nccl_home empty (torch's own NCCL)."
        )
    nvcc = found["nvcc"]
    m = re.search(r"release ([0-9.]+)", nvcc["stdout"])
    release = m.group(1) if m else "none"
    if nvcc["rc"] != 0 or release.split(".")[0] != torch_cuda_major:
        said = f"reports CUDA {release}" if nvcc["rc"] == 0 else "does not run"
        raise Refusal(
            f"{settings['cuda_home']}/bin/nvcc {said}; {torch} is built for CUDA"
            f" {facts['torch_cuda']}. Install the CUDA toolkit of that major (cuda_toolkit role)"
            " or point horovod_cuda_home at one."
        )


def cuda_ccs(settings, facts):
    """Compute capabilities to build kernels for: as set, else the GPUs the driver reports.

    Empty means every architecture the toolkit's nvcc supports (Horovod's own default).
    """
    if settings["cuda_cc_list"]:
        return [str(cc) for cc in settings["cuda_cc_list"]]
    smi = facts["nccl"]["nvidia_smi"]
    if smi["rc"] != 0:
        return []
    caps = (line for line in smi["stdout"].splitlines() if re.match(r"^[0-9]+\.[0-9]+$", line))
    return sorted({cap.replace(".", "") for cap in caps})


def decide(settings, facts):
    """The build the facts call for, or why there is none (the first refusal, in task order)."""
    if facts["torch_version"] is None:
        raise Refusal(
            f"torch cannot be imported with {settings['env_path']}/bin/python"
            f" ({facts['torch_error']}). Horovod is built against the environment's torch: install"
            " PyTorch first (python_env role)."
        )
    ops = operations(settings, facts)
    if facts["cxx_version"] is None and not settings["check_mode"]:
        return {"install_compiler_first": True}
    major = cxx_major(facts["cxx_version"])
    std = cxx_standard(settings, facts, major)
    nccl = None
    ccs = []
    if ops == "nccl":
        nccl = nccl_paths(settings, facts)
        check_nccl(settings, facts, nccl)
        nccl["names"] = facts["nccl"]["files"]
        nccl["version"] = facts["nccl"]["header_version"]
        ccs = cuda_ccs(settings, facts)
    built_against = {
        "horovod_version": settings["version"],
        "torch_version": facts["torch_version"],
        "torch_cuda": facts["torch_cuda"],
        "python_version": facts["python_version"],
        "gpu_operations": ops,
        "nccl_include": nccl["include"] if nccl else None,
        "nccl_version": nccl["version"] if nccl else None,
        "cuda_cc_list": (ccs or "all") if nccl else None,
        "cxx_standard": std,
    }
    key = (
        f"horovod-{settings['version']}_torch-{facts['torch_version']}"
        f"_py{facts['python_version']}_{ops}_cxx{std}"
    )
    if nccl:
        key += "_sm" + ("-".join(ccs) if ccs else "all")
    if not settings["debug_info"]:
        # Only builds without debug info say so: records and cache directories written before
        # the choice existed are debug builds and stay valid.
        built_against["debug_info"] = False
        key += "_nodebug"
    if not settings["optimize"]:
        # Likewise: only unoptimized builds say so, and never share a cache entry with the rest.
        built_against["optimize"] = False
        key += "_O0"
    record = facts["record"] or {}
    return {
        "operations": ops,
        "cxx_major": major,
        "cxx_standard": std,
        "cxx_flags": cxx_flags(std, major, settings["debug_info"], settings["optimize"]),
        "nvcc_host_flags": build_flags(settings["debug_info"], settings["optimize"]),
        "nccl": nccl,
        "cuda_ccs": ccs,
        "key": key,
        "built_against": built_against,
        "needs_install": facts["horovod_version"] != settings["version"]
        or record.get("built_against") != built_against,
    }


def answer(settings, facts):
    """The probe's output: the facts with the refusal, or the compiler step, or the build."""
    out = dict(facts, refusal=None, install_compiler_first=False, build=None)
    try:
        plan = decide(settings, facts)
    except Refusal as refusal:
        out["refusal"] = str(refusal)
        return out
    if plan.get("install_compiler_first"):
        out["install_compiler_first"] = True
    else:
        out["build"] = plan
    return out


def main():
    given = json.loads(sys.argv[1])
    settings = {name: given[name] for name in SETTINGS}
    print(json.dumps(answer(settings, gather(settings))))


if __name__ == "__main__":
    main()
