"""State python_env (venv provider), horovod and nccl_tests leave on the host: a venv with PyPI's
CUDA 13 torch, CuPy for CUDA 13 and CUDA 13 compiler wheels, the bench, and the NCCL variant of
Horovod compiled in the container (C++20 with Debian 13's g++ 14), which passes its own check,
links NCCL, loads torch's NCCL at run time and reduces across two processes (through Gloo: the
container has no GPU); and nccl-tests compiled with the same compiler."""

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from packaging.version import Version

VENV = "/opt/venvs/train"
TF_VENV = f"{VENV}-tf"  # python_env_tensorflow_path's default
PY = f"{VENV}/bin/python"
RUN_ENV = f"env PATH={VENV}/bin:/usr/sbin:/usr/bin:/sbin:/bin OMP_NUM_THREADS=1"
SYSTEM_NCCL = "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
PROJECT = Path(__file__).resolve().parents[3]
BENCH_SRC = f"{VENV}/src/gpurig-bench"  # python_env_bench_dir
BENCH_WHEEL = PROJECT / "roles" / "python_env" / "files" / "bench_wheel.py"


def py(host, code):
    return host.run_expect([0], f"{PY} -c '{code}'").stdout.strip()


# Debian 13: Python 3.13, g++ 14. torch 2.13's headers ask for C++17; g++ >= 14 needs C++20 for
# Horovod 0.28.1's vendored flatbuffers, so the role compiles with the larger of the two.
PYTHON_MINOR = "13"
CXX_STANDARD = 20


def site_packages(host):
    return f"{VENV}/lib/python3.{PYTHON_MINOR}/site-packages"


def extension(host):
    out = host.run_expect([0], f"ls {site_packages(host)}/horovod/torch/mpi_lib_v2*.so").stdout
    return out.split()[0]


def test_venv_uses_the_requested_interpreter(host):
    assert host.file(f"{VENV}/pyvenv.cfg").contains("^home = /usr/bin$")
    assert py(host, "import sys; print(sys.version_info[:2])") == f"(3, {PYTHON_MINOR})"


def test_tensorflow_in_its_own_environment(host, compat):
    # python_env_install_tensorflow: compat.yml's release, in <env>-tf made from the same
    # interpreter, with the Keras it requires and the bench (the tf launcher's ranks run there);
    # no GPU here, so it lists none.
    tensorflow = compat["tensorflow"]
    tf_python = f"{TF_VENV}/bin/python"
    assert host.file(f"{TF_VENV}/pyvenv.cfg").contains("^home = /usr/bin$")
    probe = (
        "import json, sys, bench, keras, tensorflow as tf; print(json.dumps([sys.version_info[1], "
        'tf.__version__, keras.__version__, len(tf.config.list_physical_devices("GPU")), '
        "float(tf.reduce_sum(tf.ones([2, 3])))]))"
    )
    out = host.run_expect([0], f"{tf_python} -c '{probe}'").stdout
    report = json.loads(out)  # TensorFlow logs to stderr
    minor, tf_version, keras_version, gpus, total = report
    assert minor == int(PYTHON_MINOR)
    assert tf_version == tensorflow["version"]
    assert Version(keras_version) >= Version(tensorflow["keras_min"])
    assert (gpus, total) == (0, 6.0)
    # TensorFlow stays out of torch's environment, and torch out of TensorFlow's.
    installed = host.run_expect([0], f"{PY} -m pip list --format=freeze").stdout
    assert "tensorflow" not in installed.lower()
    assert "torch==" not in host.run_expect([0], f"{tf_python} -m pip list --format=freeze").stdout


def test_cuda_torch_from_the_wheelhouse(host):
    out = py(host, "import torch; print(torch.__version__, torch.version.cuda)")
    # PyPI's file is torch-2.13.0-*.whl; the build labels itself with its CUDA release.
    assert out == "2.13.0+cu130 13.0"


@pytest.mark.parametrize(
    ("dist", "version"),
    [
        ("torchvision", "0.28.0"),
        ("nvidia-nccl-cu13", "2.29.7"),
        ("nvidia-cuda-nvcc", "13.0.88"),
        ("gpurig-bench", None),
    ],
)
def test_distributions_installed(host, dist, version):
    got = py(host, f'import importlib.metadata as m; print(m.version("{dist}"))')
    assert got == version if version else re.fullmatch(r"\d+\.\d+\.\d+.*", got)


def test_compiler_is_the_platforms(host):
    assert host.check_output("g++ -dumpversion").split(".")[0] == "14"


CUPY = """
import importlib.metadata as md, json, re, cupy
names = [d.metadata["Name"] for d in md.distributions()]
wheels = sorted(n for n in names if re.match("cupy", n))
print(json.dumps({"wheels": wheels, "module": cupy.__version__,
                  "runtime": cupy.cuda.runtime.runtimeGetVersion()}))
"""


def test_cupy_for_torchs_cuda_major(host):
    # python_env picked compat.yml's CuPy wheel for CUDA 13 (the torch wheel's major); it imports
    # without a GPU and reports the CUDA runtime it was built with. Device calls need a GPU and
    # are left to verify.yml on a real server.
    host.run_expect([0], f"cat > /tmp/cupy_state.py <<'PY'\n{CUPY}PY")
    got = json.loads(host.check_output(f"{PY} /tmp/cupy_state.py"))
    assert got["wheels"] == ["cupy-cuda13x"]
    assert got["module"] == "14.2.0"
    assert got["runtime"] // 1000 == 13


def test_training_packages_import(host):
    out = py(
        host,
        "import pandas, pyarrow, matplotlib, pynvml, tqdm, scipy, bench; print(bench.__name__)",
    )
    assert out == "bench"


def test_shipped_bench_is_the_checkouts_wheel(host, tmp_path):
    # python_env builds a wheel of the controller's checkout once (files/bench_wheel.py), copies it
    # into BENCH_SRC and installs it; the stamp beside it names the wheel installed by its sha256.
    (name,) = host.check_output(f"ls -A {BENCH_SRC}").split()
    shipped = host.file(f"{BENCH_SRC}/{name}").sha256sum
    assert host.file(f"{BENCH_SRC}.installed").content_string.strip() == shipped
    # The same sources give the same wheel: built again here from the checkout, byte for byte.
    built = subprocess.run(
        [sys.executable, str(BENCH_WHEEL), str(PROJECT), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    wheel = json.loads(built.stdout.strip().splitlines()[-1])
    assert (wheel["name"], wheel["sha256"]) == (name, shipped)
    # What is installed is the checkout's modules, without caches from the controller.
    want = sorted(
        str(path.relative_to(PROJECT))
        for path in (PROJECT / "bench").rglob("*.py")
        if "__pycache__" not in path.parts
    )
    files = 'm.files("gpurig-bench")'
    listed = py(host, f'import importlib.metadata as m; print("\\n".join(str(f) for f in {files}))')
    got = sorted(f for f in listed.splitlines() if f.startswith("bench/") and f.endswith(".py"))
    assert got == want


def test_build_record_matches_the_environment(host):
    record = json.loads(host.file(f"{VENV}/gpurig-horovod.json").content_string)
    minor = PYTHON_MINOR
    assert record["built_against"] == {
        "horovod_version": "0.28.1",
        "torch_version": "2.13.0+cu130",
        "torch_cuda": "13.0",
        "python_version": f"3.{minor}",
        "gpu_operations": "nccl",
        # Built against the NCCL torch bundles, not the system's 2.28.3.
        "nccl_include": f"{site_packages(host)}/nvidia/nccl/include",
        "nccl_version": "2.29.7",
        "cuda_cc_list": ["90"],
        "cxx_standard": CXX_STANDARD,
        # converge.yml builds without debug information and unoptimized (horovod_debug_info and
        # horovod_optimize false).
        "debug_info": False,
        "optimize": False,
    }
    std = CXX_STANDARD
    key = f"horovod-0.28.1_torch-2.13.0+cu130_py3.{minor}_nccl_cxx{std}_sm90_nodebug_O0"
    wheel = host.file(f"/var/cache/gpurig/horovod-wheels/{key}/{record['wheel']}")
    assert wheel.is_file
    assert wheel.sha256sum == record["wheel_sha256"]
    tag = f"cp3{minor}"
    assert re.fullmatch(rf"horovod-0\.28\.1-{tag}-{tag}-linux_x86_64\.whl", record["wheel"])


def test_check_build_lists_pytorch_nccl_and_gloo(host):
    out = host.run_expect([0], f"{RUN_ENV} horovodrun --check-build").stdout
    frameworks, rest = out.split("Available Controllers:")
    controllers, operations = rest.split("Available Tensor Operations:")

    def checked(section):
        return re.findall(r"\[X\] (\w+)", section)

    assert checked(frameworks) == ["PyTorch"]
    assert checked(controllers) == ["Gloo"]
    assert checked(operations) == ["NCCL", "Gloo"]


def test_extension_links_nccl_and_cuda_kernels(host):
    ext = extension(host)
    dynamic = host.check_output(f"readelf -d {ext}")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert "libnccl.so.2" in needed
    # The CUDA kernels are compiled in: nvcc's fatbinary section carries the device code.
    sections = host.check_output(f"readelf -S -W {ext}")
    assert ".nv_fatbin" in sections
    # Built with horovod_debug_info: false: the wrapper's -g0 overrode RelWithDebInfo's -g.
    assert ".debug_info" not in sections


NCCL_MAPS = """
import horovod.torch as hvd, torch
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l})
print(json.dumps({"maps": maps, "torch": ".".join(map(str, torch.cuda.nccl.version())),
                  "nccl_built": int(hvd.nccl_built())}))
"""


def test_torch_process_runs_torchs_nccl_not_the_systems(host):
    bundled = f"{site_packages(host)}/nvidia/nccl/lib/libnccl.so.2"
    # Even alone, the extension resolves libnccl.so.2 through its RUNPATH to torch's NCCL, not to
    # the system's copy in the linker's default path...
    ldd = host.check_output(f"ldd {extension(host)}")
    nccl = re.findall(r"libnccl\.so\.2 => (\S+)", ldd)
    assert [host.check_output(f"readlink -f {p}") for p in nccl] == [bundled], ldd
    # ...and in a process torch has already loaded its bundled libnccl.so.2 (through its own
    # RUNPATH): exactly one NCCL is mapped, torch's, version 2.29.7.
    host.run_expect([0], f"cat > /tmp/nccl_maps.py <<'PY'\nimport json\n{NCCL_MAPS}PY")
    got = json.loads(host.check_output(f"{RUN_ENV} {PY} /tmp/nccl_maps.py"))
    assert got["maps"] == [bundled]
    assert got["torch"] == "2.29.7"
    assert got["nccl_built"] != 0
    # The other NCCL really is there, where libnccl2 puts it.
    assert host.file(SYSTEM_NCCL).linked_to == f"{SYSTEM_NCCL}.28.3"


ALLREDUCE = """
import horovod.torch as hvd, torch
hvd.init()
t = torch.full((4,), float(hvd.rank() + 1))
s = hvd.allreduce(t, op=hvd.Sum, name="t")
total = ",".join("%g" % v for v in s.tolist())
print("rank=%d size=%d sum=%s" % (hvd.rank(), hvd.size(), total), flush=True)
"""


def test_two_process_allreduce(host):
    host.run_expect([0], f"cat > /tmp/allreduce.py <<'PY'\n{ALLREDUCE}PY")
    out = host.run_expect(
        [0],
        f"cd /tmp && {RUN_ENV} timeout 180 horovodrun -np 2 -H localhost:2 python allreduce.py",
    ).stdout
    results = sorted(re.findall(r"rank=(\d) size=(\d) sum=([\d.,]+)", out))
    # Ranks contribute 1 and 2: every element of the sum is 3 on both ranks.
    assert results == [("0", "2", "3,3,3,3"), ("1", "2", "3,3,3,3")]


NCCL_TESTS = "/opt/nccl-tests/2.19.6"


def build_record(host, path, tool):
    """The build record, naming the sha256 served beside our stand-in source (TEST FIXTURE)."""
    url = f"{os.environ['STANDIN_URL']}/installers/{tool}-standin.tar.gz.sha256"
    served = urllib.request.urlopen(url, timeout=10)
    record = json.loads(host.file(path).content_string)
    assert (record["sha256"], record["cuda_release"]) == (served.read().decode().split()[0], "13.0")
    return record


def test_nccl_tests_built_from_the_checksummed_tarball(host):
    record = build_record(host, f"{NCCL_TESTS}/gpurig-nccl-tests.json", "nccl-tests")
    assert record["version"] == "2.19.6"
    assert record["nvcc_gencode"] == "-gencode=arch=compute_90,code=sm_90"
    for name in ("all_reduce_perf", "all_gather_perf", "broadcast_perf", "sendrecv_perf"):
        binary = f"{NCCL_TESTS}/bin/{name}"
        assert host.file(binary).mode == 0o755
        dynamic = host.check_output(f"readelf -d {binary}")
        assert "Shared library: [libnccl.so.2]" in dynamic
        # The kernels are compiled in (nvcc's fatbinary section).
        assert ".nv_fatbin" in host.check_output(f"readelf -S -W {binary}")
    # cudart is linked shared; a real server finds it through the cuda_toolkit role's ld.so entry,
    # the container through LD_LIBRARY_PATH at the wheel's lib directory (which holds no NCCL).
    cudart = f"env LD_LIBRARY_PATH={site_packages(host)}/nvidia/cu13/lib"
    # Outside torch, the system's libnccl2 is the NCCL nccl-tests runs with.
    ldd = host.check_output(f"{cudart} ldd {NCCL_TESTS}/bin/all_reduce_perf")
    # ld.so may name it through /lib (merged /usr): compare the files it resolves to.
    found = re.search(r"libnccl\.so\.2 => (\S+) ", ldd)
    assert found, ldd
    resolved = host.check_output(f"readlink -f {found.group(1)}")
    assert resolved == host.check_output(f"readlink -f {SYSTEM_NCCL}"), ldd
    # It starts and finds its libraries (the stand-in's output is not asserted on).
    host.run_expect([0], f"{cudart} {NCCL_TESTS}/bin/all_reduce_perf")


NVBANDWIDTH = "/opt/nvbandwidth/0.8"


def test_nvbandwidth_built_from_the_checksummed_tarball(host):
    record = build_record(host, f"{NVBANDWIDTH}/gpurig-nvbandwidth.json", "nvbandwidth")
    assert record["version"] == "0.8" and record["cuda_architectures"] == ["90"]
    binary = f"{NVBANDWIDTH}/bin/nvbandwidth"
    assert host.file(binary).mode == 0o755
    # Compiled by nvcc for sm_90 through CMake, and linked with Boost's program_options.
    assert ".nv_fatbin" in host.check_output(f"readelf -S -W {binary}")
    assert "libboost_program_options" in host.check_output(f"readelf -d {binary}")
    # -j prints nvbandwidth's JSON layout, one entry per -t testcase (the stand-in measures
    # nothing).
    names = ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce"]
    out = host.check_output(f"{binary} -j -t {' '.join(names)}")
    testcases = json.loads(out)["nvbandwidth"]["testcases"]
    assert [t["name"] for t in testcases] == names
    assert {t["status"] for t in testcases} == {"Waived"}


def test_check_mode_on_the_provisioned_host_fails_nothing_and_would_change_nothing(
    host, playbook, scenario_dir
):
    """`--check` on a host the roles already provisioned, as an operator asks what a run would
    change. python_env's interpreter read and import check, and horovod's `--check-build`, are
    commands that check mode skips: their asserts used to read no output and fail the play."""
    name = host.backend.get_hostname()
    run = playbook(scenario_dir / "converge.yml", limit=name, args=["--check"], timeout=900)
    assert run.rc == 0 and not run.failures, (run.failures, run.stderr[-3000:])
    assert run.stats[name]["changed"] == 0, run.stdout[-3000:]
