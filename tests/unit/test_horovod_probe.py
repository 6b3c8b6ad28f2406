"""The horovod role's build decisions (roles/horovod/files/horovod_probe.py), each both ways.

`decide` is pure: these tests give it the settings the role passes (vars/main.yml,
horovod_probe_settings) and facts as `gather` reads them, with the outputs of nvcc, nvidia-smi and
dpkg-query in the real tools' formats (sources next to each). The last tests run the probe script
itself with this interpreter and its torch, as the role runs it on a host.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "roles" / "horovod" / "files" / "horovod_probe.py"

_spec = importlib.util.spec_from_file_location("horovod_probe_under_test", PROBE)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)

# `nvcc --version` of CUDA 11.1, verbatim from pytorch/builder#580 (checked 2026-11-25). Only the
# "release X.Y" part is read; NVCC_13_0 is the same text with the numbers of CUDA 13.0.
NVCC_11_1 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2020 NVIDIA Corporation
Built on Mon_Oct_12_20:09:46_PDT_2020
Cuda compilation tools, release 11.1, V11.1.105
Build cuda_11.1.TC455_06.29190527_0
"""
NVCC_13_0 = NVCC_11_1.replace("11.1", "13.0")
# `nvidia-smi --query-gpu=compute_cap --format=csv,noheader`: one line per GPU, as in
# facebookincubator/AITemplate#330; a driver too old for the field answers 'Field "compute_cap"
# is not a valid field to query.' with exit status 2 (canonical/inference-snaps#128)
# (both checked 2026-11-25).
SMI_FOUR_GPUS = "8.6\n8.6\n8.6\n8.6\n"
SMI_OLD_DRIVER = 'Field "compute_cap" is not a valid field to query.\n'
# NVIDIA's libnccl2 package versions end in +cudaX.Y (tests/standin/packages.yml copies them).
DEB_NCCL_CU129 = "2.28.3-1+cuda12.9"
DEB_NCCL_CU130 = "2.28.3-1+cuda13.0"

SITE = "/opt/venvs/train/lib/python3.11/site-packages"
BUNDLE = {
    "dist": "nvidia-nccl-cu13",
    "cuda_major": 13,
    "home": f"{SITE}/nvidia/nccl",
    "include": f"{SITE}/nvidia/nccl/include",
    "lib": f"{SITE}/nvidia/nccl/lib",
    "library": f"{SITE}/nvidia/nccl/lib/libnccl.so.2",
    "version": "2.29.7",
}


def settings(**changes):
    base = {
        "nvidia_gpus": 1,
        "record_path": "/opt/venvs/train/gpurig-horovod.json",
        "env_path": "/opt/venvs/train",
        "version": "0.28.1",
        "gpu_operations": "nccl",
        "cxx": "/usr/bin/g++",
        "cxx_standard": "auto",
        "cuda_cc_list": [],
        "nccl_home": "",
        "nccl_include": "",
        "nccl_lib": "",
        "cuda_home": "/usr/local/cuda",
        "debug_info": True,
        "optimize": True,
        "architecture": "x86_64",
        "check_mode": False,
    }
    assert set(changes) <= set(base)
    assert set(base) == set(probe.SETTINGS)
    return {**base, **changes}


def facts(nccl=None, **changes):
    """A CUDA 13 torch 2.13 with its bundled NCCL, g++ 12, one H100's worth of answers."""
    base = {
        "python_version": "3.11",
        "python_executable": "/opt/venvs/train/bin/python",
        "python_base_prefix": "/usr",
        "python_include": "/usr/include/python3.11",
        "python_headers": True,
        "horovod_version": None,
        "nvidia_gpus": 0,
        "record": None,
        "torch_nccl": BUNDLE,
        "torch_cxx_standard": 17,
        "cxx_version": "12",
        "torch_version": "2.13.0+cu130",
        "torch_cuda": "13.0",
        "torch_error": None,
        "nccl": {
            "files": ["libnccl.so.2", "nccl.h"],
            "header_version": "2.29.7",
            "deb": None,
            "nvcc": {"rc": 0, "stdout": NVCC_13_0},
            "nvidia_smi": {"rc": 0, "stdout": "9.0\n"},
            **(nccl or {}),
        },
    }
    assert set(changes) <= set(base)
    return {**base, **changes}


def refusal(s, f):
    with pytest.raises(probe.Refusal) as err:
        probe.decide(s, f)
    return str(err.value)


# ---- torch, backend, compiler -----------------------------------------------------------------


def test_refuses_an_environment_whose_torch_does_not_import():
    f = facts(torch_version=None, torch_cuda=None, torch_error="ModuleNotFoundError: torch")
    assert refusal(settings(), f) == (
        "torch cannot be imported with /opt/venvs/train/bin/python (ModuleNotFoundError: torch)."
        " Horovod is built against the environment's torch: install PyTorch first (python_env"
        " role)."
    )
    assert probe.decide(settings(), facts())["operations"] == "nccl"


@pytest.mark.parametrize(
    ("wanted", "gpus", "got"),
    [("auto", 1, "nccl"), ("auto", 0, "gloo"), ("gloo", 8, "gloo"), ("nccl", 0, "nccl")],
)
def test_backend_is_nccl_with_a_gpu_on_the_bus_unless_set(wanted, gpus, got):
    assert probe.operations(settings(gpu_operations=wanted), facts(nvidia_gpus=gpus)) == got


def test_a_missing_compiler_is_installed_first_except_in_check_mode():
    f = facts(cxx_version=None)
    assert probe.decide(settings(), f) == {"install_compiler_first": True}
    # Check mode changes nothing: it decides for "no compiler" (major 0).
    plan = probe.decide(settings(check_mode=True), f)
    assert plan["cxx_major"] == 0
    assert plan["cxx_standard"] == 17
    assert "install_compiler_first" not in probe.decide(settings(), facts())


def test_torch_refusal_comes_before_installing_the_compiler():
    f = facts(torch_version=None, torch_cuda=None, torch_error="E", cxx_version=None)
    assert refusal(settings(), f).startswith("torch cannot be imported")


@pytest.mark.parametrize(("dumped", "major"), [("12", 12), ("9.4.0", 9), ("14", 14), (None, 0)])
def test_compiler_major_from_dumpversion(dumped, major):
    # g++ >= 7 prints the major alone, older ones the full version.
    assert probe.cxx_major(dumped) == major


# ---- C++ standard and compiler flags ----------------------------------------------------------


@pytest.mark.parametrize(
    ("torch_std", "gxx", "wanted", "std"),
    [
        (17, "12", "auto", 17),  # torch <= 2.13's headers, g++ 12
        (17, "14", "auto", 20),  # g++ 14 rejects the vendored flatbuffers span under C++17
        (20, "12", "auto", 20),  # torch >= 2.14's headers ask for C++20
        (17, "12", "20", 20),
        (17, "14", "17", 17),  # as set: the user asked for it
    ],
)
def test_cxx_standard(torch_std, gxx, wanted, std):
    f = facts(torch_cxx_standard=torch_std, cxx_version=gxx)
    assert probe.decide(settings(cxx_standard=wanted), f)["cxx_standard"] == std


def test_refuses_a_standard_below_what_torchs_headers_require():
    f = facts(torch_cxx_standard=20, torch_version="2.14.1+cu129")
    assert refusal(settings(cxx_standard="17"), f) == (
        "horovod_cxx_standard=17, but torch 2.14.1+cu129's headers require C++20: leave it at auto."
    )


@pytest.mark.parametrize(
    ("std", "gxx", "first", "std_span"),
    [(17, 12, "-std=c++17", False), (20, 9, "-std=c++2a", False), (20, 10, "-std=c++20", True)],
)
def test_compiler_flags(std, gxx, first, std_span):
    flags = probe.cxx_flags(std, gxx, debug_info=True)
    assert flags[0] == first
    assert flags[1:7] == ["-include", "string", "-include", "stdexcept", "-include", "cstdint"]
    assert ("-DFLATBUFFERS_USE_STD_SPAN" in flags) is std_span
    assert "-g0" not in flags


def test_without_debug_info_every_compile_ends_with_g0():
    plan = probe.decide(settings(debug_info=False), facts())
    assert plan["cxx_flags"][-1] == "-g0"
    assert plan["nvcc_host_flags"] == ["-g0"]
    plan = probe.decide(settings(debug_info=True), facts())
    assert "-g0" not in plan["cxx_flags"]
    assert plan["nvcc_host_flags"] == []


def test_unoptimized_builds_end_every_compile_with_o0():
    plan = probe.decide(settings(debug_info=False, optimize=False), facts())
    assert plan["cxx_flags"][-2:] == ["-g0", "-O0"]
    assert plan["nvcc_host_flags"] == ["-g0", "-O0"]
    plan = probe.decide(settings(), facts())
    assert "-O0" not in plan["cxx_flags"] + plan["nvcc_host_flags"]


# ---- NCCL -------------------------------------------------------------------------------------


def test_nccl_defaults_to_the_one_torch_bundles():
    nccl = probe.decide(settings(), facts())["nccl"]
    assert nccl == {
        "home": BUNDLE["home"],
        "include": BUNDLE["include"],
        "lib": BUNDLE["lib"],
        "is_torch_bundle": True,
        "names": ["libnccl.so.2", "nccl.h"],
        "version": "2.29.7",
    }


def test_nccl_falls_back_to_the_system_layout_without_a_bundle():
    f = facts(torch_nccl=None, nccl={"deb": {"rc": 0, "stdout": DEB_NCCL_CU130}})
    nccl = probe.decide(settings(architecture="aarch64"), f)["nccl"]
    assert (nccl["home"], nccl["include"], nccl["lib"]) == (
        "/usr",
        "/usr/include",
        "/usr/lib/aarch64-linux-gnu",
    )
    assert nccl["is_torch_bundle"] is False


def test_nccl_paths_as_set():
    s = settings(nccl_home="/opt/nccl")
    assert probe.nccl_paths(s, facts()) == {
        "home": "/opt/nccl",
        "include": "/opt/nccl/include",
        "lib": "/opt/nccl/lib",
        "is_torch_bundle": False,
    }
    s = settings(nccl_include="/srv/inc", nccl_lib="/srv/lib")
    paths = probe.nccl_paths(s, facts())
    assert (paths["include"], paths["lib"], paths["is_torch_bundle"]) == (
        "/srv/inc",
        "/srv/lib",
        True,
    )


def test_refuses_nccl_with_a_cpu_torch():
    f = facts(torch_version="2.13.0+cpu", torch_cuda=None)
    assert refusal(settings(), f) == (
        "torch 2.13.0+cpu in /opt/venvs/train is a CPU-only build, so an NCCL Horovod cannot be"
        " built against it. Install a CUDA build of torch (python_env_torch_index_url) or set"
        " horovod_gpu_operations=gloo."
    )
    assert probe.decide(settings(gpu_operations="gloo"), f)["nccl"] is None


@pytest.mark.parametrize(
    ("files", "ok"),
    [
        (["nccl.h", "libnccl.so.2"], True),
        (["nccl.h", "libnccl.so"], True),
        (["libnccl.so.2"], False),
        (["nccl.h"], False),
    ],
)
def test_refuses_nccl_without_its_header_and_library(files, ok):
    f = facts(nccl={"files": files})
    if ok:
        assert probe.decide(settings(), f)["nccl"]["names"] == files
        return
    assert refusal(settings(), f) == (
        f"NCCL not found: need {BUNDLE['include']}/nccl.h and {BUNDLE['lib']}/libnccl.so(.2)"
        " (torch's nvidia-nccl-cuNN wheel, or Ubuntu's libnccl-dev as the nccl role installs it)."
        " Set horovod_nccl_home, horovod_nccl_include and horovod_nccl_lib if NCCL lives"
        " elsewhere."
    )


@pytest.mark.parametrize(
    ("deb", "ok"),
    [
        ({"rc": 0, "stdout": DEB_NCCL_CU130}, True),
        ({"rc": 0, "stdout": DEB_NCCL_CU129}, False),
        # No libnccl2 package (NCCL from elsewhere): its CUDA is unknown, not refused.
        ({"rc": 1, "stdout": ""}, True),
        ({"rc": None, "stdout": ""}, True),
    ],
)
def test_system_nccl_must_be_built_for_torchs_cuda_major(deb, ok):
    s = settings(nccl_home="/usr")
    f = facts(nccl={"deb": deb})
    if ok:
        assert probe.decide(s, f)["nccl"]["home"] == "/usr"
        return
    assert refusal(s, f) == (
        "NCCL in /usr is built for CUDA 12, torch 2.13.0+cu130 for CUDA 13.0: install NCCL for CUDA"
        " 13 (gpurig_cuda_version) or leave horovod_nccl_home empty (torch's own NCCL)."
    )


def test_bundled_nccl_must_be_built_for_torchs_cuda_major():
    f = facts(torch_nccl={**BUNDLE, "cuda_major": 12})
    assert "NCCL in " + BUNDLE["home"] + " is built for CUDA 12," in refusal(settings(), f)
    assert probe.decide(settings(), facts())["nccl"]["is_torch_bundle"] is True


@pytest.mark.parametrize(
    ("nvcc", "said"),
    [
        ({"rc": None, "stdout": ""}, "does not run"),
        ({"rc": 0, "stdout": NVCC_11_1}, "reports CUDA 11.1"),
        ({"rc": 1, "stdout": ""}, "does not run"),
    ],
)
def test_refuses_an_nvcc_that_is_missing_or_of_another_cuda_major(nvcc, said):
    f = facts(nccl={"nvcc": nvcc})
    assert refusal(settings(), f) == (
        f"/usr/local/cuda/bin/nvcc {said}; torch 2.13.0+cu130 is built for CUDA 13.0. Install the"
        " CUDA toolkit of that major (cuda_toolkit role) or point horovod_cuda_home at one."
    )
    f = facts(nccl={"nvcc": {"rc": 0, "stdout": NVCC_13_0}})
    assert probe.decide(settings(), f)["operations"] == "nccl"


# ---- CUDA architectures, cache key, build record ----------------------------------------------


@pytest.mark.parametrize(
    ("given", "smi", "ccs"),
    [
        (["90"], None, ["90"]),
        ([90, "80"], None, ["90", "80"]),
        ([], {"rc": 0, "stdout": SMI_FOUR_GPUS}, ["86"]),
        ([], {"rc": 0, "stdout": "9.0\n8.0\n9.0\n"}, ["80", "90"]),
        ([], {"rc": 2, "stdout": SMI_OLD_DRIVER}, []),
        ([], {"rc": None, "stdout": ""}, []),
    ],
)
def test_cuda_architectures_as_set_else_the_gpus_present_else_all(given, smi, ccs):
    f = facts(nccl={"nvidia_smi": smi})
    assert probe.decide(settings(cuda_cc_list=given), f)["cuda_ccs"] == ccs


def test_key_and_record_of_an_nccl_build():
    plan = probe.decide(settings(cuda_cc_list=["90"]), facts())
    assert plan["key"] == "horovod-0.28.1_torch-2.13.0+cu130_py3.11_nccl_cxx17_sm90"
    assert plan["built_against"] == {
        "horovod_version": "0.28.1",
        "torch_version": "2.13.0+cu130",
        "torch_cuda": "13.0",
        "python_version": "3.11",
        "gpu_operations": "nccl",
        "nccl_include": BUNDLE["include"],
        "nccl_version": "2.29.7",
        "cuda_cc_list": ["90"],
        "cxx_standard": 17,
    }
    plan = probe.decide(settings(), facts(nccl={"nvidia_smi": {"rc": 9, "stdout": ""}}))
    assert plan["key"].endswith("_nccl_cxx17_small")
    assert plan["built_against"]["cuda_cc_list"] == "all"


def test_only_builds_without_debug_info_say_so_in_key_and_record():
    plan = probe.decide(settings(cuda_cc_list=["90"], debug_info=False), facts())
    assert plan["key"] == "horovod-0.28.1_torch-2.13.0+cu130_py3.11_nccl_cxx17_sm90_nodebug"
    assert plan["built_against"]["debug_info"] is False
    plan = probe.decide(settings(cuda_cc_list=["90"]), facts())
    assert "debug_info" not in plan["built_against"]


def test_only_unoptimized_builds_say_so_in_key_and_record():
    plan = probe.decide(settings(cuda_cc_list=["90"], debug_info=False, optimize=False), facts())
    assert plan["key"] == "horovod-0.28.1_torch-2.13.0+cu130_py3.11_nccl_cxx17_sm90_nodebug_O0"
    assert plan["built_against"]["optimize"] is False
    assert "optimize" not in probe.decide(settings(cuda_cc_list=["90"]), facts())["built_against"]


# The record the role wrote before the decisions moved into the probe (this repository's .venv,
# a Gloo build against PyPI's CPU torch 2.13.0): still valid, so nothing is rebuilt.
GLOO_RECORD = {
    "built_against": {
        "cuda_cc_list": None,
        "cxx_standard": 17,
        "gpu_operations": "gloo",
        "horovod_version": "0.28.1",
        "nccl_include": None,
        "nccl_version": None,
        "python_version": "3.11",
        "torch_cuda": None,
        "torch_version": "2.13.0+cpu",
    },
    "wheel": "horovod-0.28.1-cp311-cp311-linux_x86_64.whl",
    "wheel_sha256": "0f3d6ec970bd9ae6f4d4adc83eed6a70ab40e4a98b59d6a2db7a38c59808fce8",
}


def gloo_facts(**changes):
    base = {"torch_version": "2.13.0+cpu", "torch_cuda": None, "torch_nccl": None, "nccl": None}
    return facts(**{**base, **changes})


def test_an_existing_record_of_the_same_build_is_kept():
    s = settings(gpu_operations="gloo")
    plan = probe.decide(s, gloo_facts(record=GLOO_RECORD, horovod_version="0.28.1"))
    assert plan["key"] == "horovod-0.28.1_torch-2.13.0+cpu_py3.11_gloo_cxx17"
    assert plan["needs_install"] is False


@pytest.mark.parametrize(
    "changes",
    [
        {"horovod_version": None},  # Horovod not installed
        {"horovod_version": "0.28.0"},
        {"torch_version": "2.13.1+cpu"},
        {"python_version": "3.12"},
        {"cxx_version": "14"},  # C++20 now
        {"record": None},
    ],
)
def test_a_changed_environment_is_rebuilt(changes):
    f = gloo_facts(**{"record": GLOO_RECORD, "horovod_version": "0.28.1", **changes})
    assert probe.decide(settings(gpu_operations="gloo"), f)["needs_install"] is True


def test_a_build_without_debug_info_replaces_a_debug_build():
    f = gloo_facts(record=GLOO_RECORD, horovod_version="0.28.1")
    assert probe.decide(settings(gpu_operations="gloo", debug_info=False), f)["needs_install"]


def test_an_unoptimized_build_replaces_an_optimized_one():
    f = gloo_facts(record=GLOO_RECORD, horovod_version="0.28.1")
    assert probe.decide(settings(gpu_operations="gloo", optimize=False), f)["needs_install"]


def test_answer_carries_the_facts_and_one_outcome():
    out = probe.answer(settings(), facts())
    assert (out["refusal"], out["install_compiler_first"]) == (None, False)
    assert out["build"]["key"].startswith("horovod-0.28.1_")
    assert out["python_include"] == "/usr/include/python3.11"  # build-deps.yml reads the facts
    out = probe.answer(settings(), facts(torch_cuda=None))
    assert out["build"] is None and out["refusal"].startswith("torch 2.13.0+cu130 in ")
    out = probe.answer(settings(), facts(cxx_version=None))
    assert out["build"] is None and out["install_compiler_first"] is True


# ---- the script itself, with this interpreter's torch -----------------------------------------


def run_probe(tmp_path, **changes):
    s = settings(record_path=str(tmp_path / "record.json"), env_path=sys.prefix, **changes)
    done = subprocess.run(
        [sys.executable, str(PROBE), json.dumps(s)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_probe_script_reads_this_environment(tmp_path):
    import torch

    out = run_probe(tmp_path, gpu_operations="gloo", cxx="/nonexistent/g++", check_mode=True)
    assert out["python_version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert out["torch_version"] == torch.__version__
    assert out["torch_cxx_standard"] in (17, 20)
    assert out["cxx_version"] is None
    assert out["refusal"] is None
    assert out["build"]["key"].startswith(f"horovod-0.28.1_torch-{torch.__version__}_py")
    assert out["build"]["needs_install"] is True  # no record at record_path
    out = run_probe(tmp_path, gpu_operations="gloo", cxx="/nonexistent/g++")
    assert out["install_compiler_first"] is True and out["build"] is None


def test_probe_script_refuses_nccl_only_against_a_cpu_torch(tmp_path):
    import torch

    out = run_probe(tmp_path, gpu_operations="nccl", cxx="/nonexistent/g++", check_mode=True)
    cpu_only = f"torch {torch.__version__} in {sys.prefix} is a CPU-only"
    assert (out["refusal"] or "").startswith(cpu_only) is (torch.version.cuda is None)
