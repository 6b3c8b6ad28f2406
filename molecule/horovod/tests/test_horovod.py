"""State python_env (venv provider) and horovod leave on the host: a venv with CPU torch from the
local wheelhouse, the bench, and a Horovod built in the container that passes its own check and
reduces across two processes."""

import json
import re

import pytest

VENV = "/opt/venvs/train"
PY = f"{VENV}/bin/python"
RUN_ENV = f"env PATH={VENV}/bin:/usr/sbin:/usr/bin:/sbin:/bin OMP_NUM_THREADS=1"


def py(host, code):
    return host.run_expect([0], f"{PY} -c '{code}'").stdout.strip()


def test_venv_uses_the_requested_interpreter(host):
    assert host.file(f"{VENV}/pyvenv.cfg").contains("^home = /usr/bin$")
    assert py(host, "import sys; print(sys.version_info[:2])") == "(3, 11)"


def test_cpu_torch_from_the_wheelhouse(host):
    out = py(host, "import torch; print(torch.__version__, torch.version.cuda)")
    assert out == "2.13.0+cpu None"


@pytest.mark.parametrize(
    ("dist", "version"),
    [("torchvision", "0.28.0"), ("gpustack-bench", None)],
)
def test_distributions_installed(host, dist, version):
    got = py(host, f'import importlib.metadata as m; print(m.version("{dist}"))')
    assert got == version if version else re.fullmatch(r"\d+\.\d+\.\d+.*", got)


def test_training_packages_import(host):
    # torchvision is deliberately not imported (CPU torch cannot register its compiled ops).
    out = py(host, "import pandas, pyarrow, matplotlib, pynvml, tqdm, bench; print(bench.__name__)")
    assert out == "bench"


def test_bench_shipped_without_caches(host):
    src = f"{VENV}/src/gpustack-bench"
    assert host.file(f"{src}/pyproject.toml").is_file
    assert host.file(f"{src}/bench/__init__.py").is_file
    assert host.run_expect([0], f"find {src} -name __pycache__ -o -name '*.pyc'").stdout == ""


def test_build_record_matches_the_environment(host):
    record = json.loads(host.file(f"{VENV}/gpustack-horovod.json").content_string)
    assert record["built_against"] == {
        "horovod_version": "0.28.1",
        "torch_version": "2.13.0+cpu",
        "torch_cuda": None,
        "python_version": "3.11",
        "gpu_operations": "gloo",
        "nccl_home": None,
        "cxx_standard": 17,
    }
    # The wheel was built here (the wheelhouse holds only Horovod's sdist) and cached under its key.
    key = "horovod-0.28.1_torch-2.13.0+cpu_py3.11_gloo"
    wheel = host.file(f"/var/cache/gpustack/horovod-wheels/{key}/{record['wheel']}")
    assert wheel.is_file
    assert wheel.sha256sum == record["wheel_sha256"]
    assert re.fullmatch(r"horovod-0\.28\.1-cp311-cp311-linux_x86_64\.whl", record["wheel"])


def test_installed_horovod_loads_against_this_torch(host):
    installed = py(host, 'import importlib.metadata as m; print(m.version("horovod"))')
    assert installed == "0.28.1"
    # The torch extension only loads if it was compiled against this torch's headers and ABI.
    code = "import horovod.torch as hvd; print(hvd.__name__, hvd.gloo_built(), hvd.nccl_built())"
    out = py(host, code)
    assert out == "horovod.torch True 0"


def test_check_build_lists_pytorch_and_gloo(host):
    out = host.run_expect([0], f"{RUN_ENV} horovodrun --check-build").stdout
    frameworks, rest = out.split("Available Controllers:")
    controllers, operations = rest.split("Available Tensor Operations:")

    def checked(section):
        return re.findall(r"\[X\] (\w+)", section)

    assert checked(frameworks) == ["PyTorch"]
    assert checked(controllers) == ["Gloo"]
    assert checked(operations) == ["Gloo"]


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
