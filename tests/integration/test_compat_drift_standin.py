"""scripts/compat_drift.py against the signed stand-in of NVIDIA's repo ($STANDIN_URL, built and
served by scripts/test.sh) and a local PEP 503 index and PyPI JSON pages served here over HTTP.

The stand-in carries compat.yml's default stack for every distro it serves (tests/unit/
test_compat.py), signed with throwaway keys ($STANDIN_NVIDIA_KEYS), so compat.yml with those
fingerprints must come out clean (exit 0), and a copy pinning what the sources lack must exit 1.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from integration_support import REPO, unavailable

SCRIPT = REPO / "scripts/compat_drift.py"
_spec = importlib.util.spec_from_file_location("compat_drift", SCRIPT)
compat_drift = importlib.util.module_from_spec(_spec)
sys.modules["compat_drift"] = compat_drift  # dataclasses look their module up
_spec.loader.exec_module(compat_drift)
COMPAT = compat_drift.load_compat()
# The distros the stand-in serves (its manifest's key map; ubuntu2604's key is unverified).
STANDIN_DISTROS = list(
    yaml.safe_load((REPO / "tests/standin/packages.yml").read_text())["nvidia_keys"]
)


@pytest.fixture(scope="module")
def standin() -> tuple[str, dict[str, str]]:
    url, keys = os.environ.get("STANDIN_URL"), os.environ.get("STANDIN_NVIDIA_KEYS")
    if not url or not keys:
        unavailable(
            "STANDIN_URL / STANDIN_NVIDIA_KEYS are unset: the stand-in repo is built and served "
            "by scripts/test.sh (infra step)"
        )
    return url.rstrip("/"), json.loads(keys)


def wheel_names(project: str, version: str, variant: str, min_python: str) -> list[str]:
    """Wheel file names as PyTorch's index lists them (fixtures: nothing is downloaded)."""
    minors = range(int(min_python.split(".")[1]), 14)
    return [
        f"{project}-{version}+{variant}-cp3{m}-cp3{m}-manylinux_2_28_x86_64.whl" for m in minors
    ]


def write_sources(root: Path) -> None:
    """<root>/whl/<variant>/<project>/index.html (PEP 503) and <root>/pypi/<project>/json (PyPI's
    JSON API shape) listing exactly compat.yml's pins."""
    pypi: dict[str, set[str]] = {"nvidia-ml-py": {COMPAT["nvidia_ml_py_min"]}}
    for entry in COMPAT["cuda_major"].values():
        variant = entry["torch_index"].rstrip("/").rsplit("/", 1)[-1]
        for project in ("torch", "torchvision"):
            page = root / "whl" / variant / project
            page.mkdir(parents=True)
            names = wheel_names(project, entry[project], variant, entry["torch_min_python"])
            links = "".join(f'<a href="{n.replace("+", "%2B")}">{n}</a><br/>\n' for n in names)
            (page / "index.html").write_text(
                f"<!DOCTYPE html>\n<html><body><h1>Links for {project}</h1>\n{links}</body></html>"
            )
            pypi.setdefault(project, set()).add(entry[project])
        pypi.setdefault(entry["cupy"], set()).add(entry["cupy_version"])
    for project, versions in pypi.items():
        newest = max(versions, key=lambda v: tuple(int(p) for p in v.split(".")))
        releases = {v: [{"filename": f"{project}-{v}.tar.gz", "yanked": False}] for v in versions}
        (root / "pypi" / project).mkdir(parents=True)
        (root / "pypi" / project / "json").write_text(
            json.dumps({"info": {"name": project, "version": newest}, "releases": releases})
        )


@pytest.fixture(scope="module")
def local_sources(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("drift-sources")
    write_sources(root)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def drift(standin, local_sources, tmp_path, compat: dict) -> tuple[int, list[dict], str]:
    url, keys = standin
    compat = copy.deepcopy(compat)
    compat["nvidia_repo_keys"] = keys  # the stand-in's throwaway keys, by the same file names
    path = tmp_path / "compat.yml"
    path.write_text(compat_drift.dump_compat(compat))
    argv = [sys.executable, str(SCRIPT), "--json", "--compat", str(path), "--allow-http"]
    argv += ["--nvidia-base", f"{url}/repos", "--torch-index-base", f"{local_sources}/whl"]
    argv += ["--pypi", f"{local_sources}/pypi", "--python", "3.11"]
    for distro in STANDIN_DISTROS:
        argv += ["--distro", distro]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    assert report["exit"] == done.returncode
    return done.returncode, report["findings"], done.stdout


def subjects(findings: list[dict], severity: str) -> set[tuple[str, str]]:
    return {(f["scope"], f["subject"]) for f in findings if f["severity"] == severity}


def test_compat_yml_against_the_standin_exits_0(standin, local_sources, tmp_path):
    code, findings, out = drift(standin, local_sources, tmp_path, COMPAT)
    assert code == 0, out
    assert not subjects(findings, "UNREACHABLE") and not subjects(findings, "BREAKING")
    ok = subjects(findings, "OK")
    for distro in STANDIN_DISTROS:
        key = COMPAT["distros"][distro]["key"]
        assert (distro, f"key {key}") in ok  # fingerprint computed and compared
        major = COMPAT["distros"][distro]["default"]["cuda"].split(".")[0]
        assert (distro, f"cudnn9-cuda-{major}") in ok and (distro, "libnccl2") in ok


def test_a_cudnn_the_standin_lacks_exits_1(standin, local_sources, tmp_path):
    compat = copy.deepcopy(COMPAT)
    compat["cuda_major"]["13"]["cudnn"] = "9.0.0.1"  # no such cuDNN 9 build was ever published
    code, findings, out = drift(standin, local_sources, tmp_path, compat)
    assert code == 1, out
    on_13 = [d for d in STANDIN_DISTROS if COMPAT["distros"][d]["default"]["cuda"][:3] == "13."]
    assert on_13
    assert {(d, "cudnn9-cuda-13") for d in on_13} <= subjects(findings, "BREAKING")


def test_a_torch_the_index_lacks_exits_1(standin, local_sources, tmp_path):
    compat = copy.deepcopy(COMPAT)
    compat["cuda_major"]["13"]["torch"] = "2.15.99"
    code, findings, out = drift(standin, local_sources, tmp_path, compat)
    assert code == 1, out
    assert subjects(findings, "BREAKING") == {("cuda13", "torch")}
