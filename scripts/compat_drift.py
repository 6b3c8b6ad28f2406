#!/usr/bin/env python3
"""Is compat.yml current? Compare it with NVIDIA's repo indexes, PyTorch's wheel indexes and PyPI.

The table is roles/gpurig/vars/main/compat.yml (load_compat).

For maintainers, on any machine with network (the roles' own contact checks run on the targets).
Per OS (compat.yml's `distros`, keyed by NVIDIA's repo directory) it reads
<nvidia-base>/<distro>/x86_64/Packages.gz (or Packages) and the directory's signing key; per CUDA
major it reads PyTorch's PEP 503 pages <torch_index>/torch/ and /torchvision/; and PyPI's JSON API
for torch, torchvision, CuPy and nvidia-ml-py. Each finding has a severity:

  BREAKING     a default install would fail: a default-stack package or version missing from
               NVIDIA's index (cuda-drivers-<branch>, cuda-toolkit-<X>-<Y>, cudnn9-cuda-<major> and
               its libraries at <cudnn>-1, libnccl2/libnccl-dev at <nccl>+cuda<release>, and where
               the OS lists dcgm, datacenter-gpu-manager-4-core, -proprietary and -cuda<major> at
               dcgm_version), the listed key file missing or with another fingerprint, the pinned
               torch/torchvision wheel missing for the default Python, the pinned CuPy missing
               from PyPI
  WARNING      worth a look, nothing breaks by default: an unverified key (`key: null`: the role
               already refuses that OS with its own message, so this is not fatal), a wheel
               missing for a non-default Python, a yanked pin
  BEHIND       upstream has more: a newer driver branch or CUDA release, a newer cuDNN/NCCL build
               for the default CUDA, a newer DCGM, a newer torch/torchvision/CuPy on the index or
               PyPI
  STALE        a listed branch or CUDA release that is no longer in the index
  UNREACHABLE  a source could not be read (the URL is named)
  INFO / OK    context, and checks that passed

Exit status: 1 when anything is BREAKING; otherwise 2 when a source was unreachable (the report is
incomplete; --skip-unreachable makes that 0); 2 on bad usage; else 0. Only https:// sources are
read unless --allow-http (the test suite's stand-in is plain http); file:// is local and allowed.

Usage: scripts/compat_drift.py [--json] [--distro ubuntu2204 ...] [--skip-unreachable]
       [--compat FILE] [--nvidia-base URL] [--torch-index-base URL] [--pypi URL]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import math
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import date
from html.parser import HTMLParser
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# The compatibility table: the role gpurig's vars, one variable holding the whole table (the roles
# that read it depend on that role; Python reads the same file here).
COMPAT_FILE = REPO / "roles/gpurig/vars/main/compat.yml"
COMPAT_VARIABLE = "gpurig_compat"
# The parsers the preflight's contact check runs on the hosts (Python 3.8, standard library): one
# copy of the Debian Packages and OpenPGP readers for both.
_CONTACT = importlib.util.spec_from_file_location(
    "repo_contact", REPO / "roles/repo_contact/files/repo_contact.py"
)
contact = importlib.util.module_from_spec(_CONTACT)
_CONTACT.loader.exec_module(contact)


def load_compat(path: Path = COMPAT_FILE) -> dict:
    """The table from a file laid out as the role's vars ({gpurig_compat: {...}})."""
    return yaml.safe_load(path.read_text())[COMPAT_VARIABLE]


def dump_compat(compat: dict) -> str:
    """A table as load_compat reads it (a variant of the table to check, for --compat)."""
    return yaml.safe_dump({COMPAT_VARIABLE: compat})


# NVIDIA's flat apt repos: <base>/<distro>/x86_64/ (docs.nvidia.com/datacenter/tesla/driver-
# installation-guide, "Network repository"; the layout nvidia_repo configures).
NVIDIA_BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
# PyTorch's wheel indexes, one per variant: <base>/cu132/torch/ (compat.yml's torch_index).
TORCH_INDEX_BASE = "https://download.pytorch.org/whl"
# PyPI's JSON API: <base>/<project>/json (docs.pypi.org/api/json/).
PYPI = "https://pypi.org/pypi"
# Newest Python whose torch wheels the report asks for (from compat.yml's oldest Python to this).
NEWEST_PYTHON = "3.13"
# The project's CUDA floor: older branches and releases in NVIDIA's index are not reported.
CUDA_FLOOR = (12, 0)
MIN_BRANCH = 525

SEVERITIES = ("BREAKING", "UNREACHABLE", "WARNING", "STALE", "BEHIND", "INFO", "OK")
TIMEOUT_S = 20.0


# ---- findings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    scope: str  # an OS ("ubuntu2204"), a CUDA major ("cuda13") or "pypi"
    severity: str  # one of SEVERITIES
    subject: str  # what was checked: a package, a key file, a wheel
    message: str
    url: str = ""


def exit_code(findings: list[Finding], skip_unreachable: bool = False) -> int:
    """1 on anything breaking; 2 when a source was unreachable (unless skipped); else 0."""
    severities = {f.severity for f in findings}
    if "BREAKING" in severities:
        return 1
    if "UNREACHABLE" in severities and not skip_unreachable:
        return 2
    return 0


# ---- versions ------------------------------------------------------------------------------


def debian_version_key(version: str) -> tuple[int, ...]:
    """Order NVIDIA's Debian versions (580.95.05-0ubuntu1, 9.28.1.4-1, 2.32.3-1+cuda13.4) by their
    numeric fields, epoch first; the +cuda<release> build suffix is not part of the order. Enough
    for NVIDIA's all-numeric versions, not a general dpkg comparison."""
    epoch, _, rest = version.rpartition(":")
    return (int(epoch or 0), *(int(n) for n in re.findall(r"\d+", rest.split("+", 1)[0])))


_PEP440_RELEASE = re.compile(r"^v?(\d+(?:\.\d+)*)((?:\.post\d+)?)(?:\+[a-z0-9.]+)?$", re.I)


def release_key(version: str) -> tuple[int, ...] | None:
    """The release tuple of a final PEP 440 version (2.15.0, 2.15.0+cu132, 13.615.71); None for a
    pre-release or dev release (2.16.0rc1, 2.16.0.dev20261101), which the report never proposes."""
    found = _PEP440_RELEASE.match(version.strip())
    if not found:
        return None
    return tuple(int(n) for n in found.group(1).split("."))


def public_version(version: str) -> str:
    return version.split("+", 1)[0]


def python_range(low: str, high: str = NEWEST_PYTHON) -> list[str]:
    """Python minor versions from low to high: "3.10", "3.13" -> 3.10, 3.11, 3.12, 3.13."""
    major, lo = (int(p) for p in low.split(".")[:2])
    hi = int(high.split(".")[1])
    return [f"{major}.{minor}" for minor in range(lo, hi + 1)]


# ---- parsers (pure) ------------------------------------------------------------------------


def parse_packages(text: str) -> dict[str, set[str]]:
    """{package: versions} from a Debian Packages index (github.com/NVIDIA/cuda-repo-management,
    README "Packages.gz"), read by the parser the preflight's contact check runs on the hosts."""
    return {name: set(versions) for name, versions in contact.parse_packages(text).items()}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def parse_links(html: str) -> list[str]:
    """File names an HTML page links to: a PEP 503 project page (peps.python.org/pep-0503: one
    anchor per file, its text the file name) or a directory listing. The name is the href's last
    path segment, unquoted (%2B -> +), without #sha256=..."""
    parser = _Links()
    parser.feed(html)
    names = []
    for href, text in parser.links:
        path = urllib.parse.urlsplit(href).path
        name = urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1]) if path else text
        if name:
            names.append(name)
    return names


@dataclass(frozen=True)
class Wheel:
    project: str
    version: str  # with its local label: 2.15.0+cu132
    python: str  # cp311
    abi: str  # cp311, cp313t, abi3, none
    platform: str  # manylinux_2_28_x86_64

    def runs_on(self, python: str) -> bool:
        """A CPython wheel for Linux x86_64 that this Python (3.11) installs (not free-threaded)."""
        tag = "cp" + python.replace(".", "")
        linux = "linux" in self.platform and self.platform.endswith("x86_64")
        exact = self.python == tag and self.abi == tag
        stable = self.abi == "abi3" and self.python.startswith("cp") and self.python <= tag
        return linux and (exact or stable or (self.python == "py3" and self.abi == "none"))


_WHEEL = re.compile(
    r"^(?P<project>[A-Za-z0-9_.]+)-(?P<version>[^-]+)(?:-\d[^-]*)?"
    r"-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)


def parse_wheel_name(filename: str) -> Wheel | None:
    """torch-2.15.0+cu132-cp311-cp311-manylinux_2_28_x86_64.whl -> Wheel (PEP 427 file names)."""
    found = _WHEEL.match(filename)
    if not found:
        return None
    project = re.sub(r"[-_.]+", "-", found["project"]).lower()
    return Wheel(project, found["version"], found["python"], found["abi"], found["platform"])


@dataclass(frozen=True)
class PypiProject:
    newest: str  # PyPI's own "latest" (info.version): the newest final release not yanked
    releases: dict[str, bool] = field(default_factory=dict)  # version -> every file yanked


def parse_pypi_json(data: dict) -> PypiProject:
    """PyPI's JSON API (docs.pypi.org/api/json/): info.version and releases {version: [files]}; a
    version with no files is not installable, so it does not count."""
    releases = {
        version: all(f.get("yanked", False) for f in files)
        for version, files in (data.get("releases") or {}).items()
        if files
    }
    return PypiProject(str(data["info"]["version"]), releases)


# ---- comparisons (pure) --------------------------------------------------------------------


def newest(versions: set[str] | list[str], key=debian_version_key) -> str | None:
    ranked = [v for v in versions if key(v) is not None]
    return max(ranked, key=key) if ranked else None


def offered(versions: set[str], limit: int = 6) -> str:
    ranked = sorted(versions, key=debian_version_key)
    shown = ", ".join(ranked[-limit:]) or "none"
    return f"offered: {'..., ' if len(ranked) > limit else ''}{shown}"


def dcgm_cuda_major(compat: dict, branch: str) -> str:
    """The CUDA major of a driver branch, whose DCGM package roles/dcgm installs: that of the newest
    release in compat.yml's cuda table that ships with the branch or an older one (R580 -> 13.0 ->
    "13"; roles/dcgm/vars/main.yml's dcgm_cuda_major)."""
    shipped = [r for r, e in compat["cuda"].items() if int(e["ships_with"]) <= int(branch)]
    return shipped[-1].split(".")[0] if shipped else ""


DCGM_COMMON = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary")


def default_stack(compat: dict, distro: str) -> dict[str, str]:
    """{package: version} a default install takes from NVIDIA's repo on this OS ("" = any
    version): the default branch's cuda-drivers, the default CUDA's toolkit, cuDNN 9 for its major
    and the NCCL build for it, and where the OS has DCGM (compat.yml's distros.<os>.dcgm) its
    three packages for the branch's CUDA major at dcgm_version (the roles' package names:
    roles/cudnn/vars, roles/nccl/vars, roles/dcgm/vars)."""
    entry = compat["distros"][distro]
    default = entry["default"]
    cuda = default["cuda"]
    major, minor = cuda.split(".")
    cudnn = f"{compat['cuda_major'][major]['cudnn']}-1"
    stack = {f"cuda-drivers-{default['branch']}": "", f"cuda-toolkit-{major}-{minor}": ""}
    for name in (f"cudnn9-cuda-{major}", f"libcudnn9-cuda-{major}", f"libcudnn9-dev-cuda-{major}"):
        stack[name] = cudnn
    nccl = compat["cuda"][cuda].get("nccl")
    if nccl:
        stack["libnccl2"] = stack["libnccl-dev"] = f"{nccl}+cuda{cuda}"
    dcgm = compat["cuda_major"].get(dcgm_cuda_major(compat, default["branch"]), {})
    if entry.get("dcgm") and "dcgm" in dcgm:
        for name in (*DCGM_COMMON, dcgm["dcgm"]):
            stack[name] = dcgm["dcgm_version"]
    return stack


def check_nvidia_index(
    compat: dict, distro: str, packages: dict[str, set[str]], url: str
) -> list[Finding]:
    """One OS's compat.yml entry against its NVIDIA Packages index."""
    entry = compat["distros"][distro]
    default = entry["default"]
    found: list[Finding] = []

    def add(severity: str, subject: str, message: str) -> None:
        found.append(Finding(distro, severity, subject, message, url))

    for name, version in default_stack(compat, distro).items():
        versions = packages.get(name, set())
        if not versions:
            add("BREAKING", name, "default-stack package not in the index")
        elif version and version not in versions:
            add("BREAKING", name, f"{version} not in the index ({offered(versions)})")
        else:
            add("OK", name, f"{version or 'present'} ({offered(versions, 2)})")

    branches = {int(m[1]) for n in packages if (m := re.fullmatch(r"cuda-drivers-(\d{3})", n))}
    listed = {int(b) for b in entry["branches"]}
    for branch in sorted(listed - branches):
        if str(branch) != default["branch"]:
            add("STALE", f"cuda-drivers-{branch}", "listed branch no longer in the index")
    newer = sorted(b for b in branches - listed if b > max(listed))
    for branch in newer:
        known = compat["branches"].get(str(branch))
        note = f" (compat.yml's branches: {known['designation']})" if known else ""
        add("BEHIND", f"cuda-drivers-{branch}", f"newer driver branch published{note}")
    others = sorted(b for b in branches - listed if MIN_BRANCH <= b < max(listed))
    if others:
        add("INFO", "cuda-drivers-*", "also published, not offered: " + ", ".join(map(str, others)))

    releases = {
        (int(m[1]), int(m[2]))
        for n in packages
        if (m := re.fullmatch(r"cuda-toolkit-(\d+)-(\d+)", n))
    }
    listed_cuda = {tuple(int(p) for p in r.split(".")) for r in entry["cuda"]}
    for release in sorted(listed_cuda - releases):
        name = "cuda-toolkit-{}-{}".format(*release)
        if "{}.{}".format(*release) != default["cuda"]:
            add("STALE", name, "listed CUDA release no longer in the index")
    for release in sorted(r for r in releases - listed_cuda if r >= CUDA_FLOOR):
        text = "{}.{}".format(*release)
        where = "" if text in compat["cuda"] else "; not in compat.yml's cuda table either"
        add("BEHIND", "cuda-toolkit-{}-{}".format(*release), f"CUDA {text} published{where}")

    cuda = default["cuda"]
    major = cuda.split(".")[0]
    pinned = f"{compat['cuda_major'][major]['cudnn']}-1"
    cudnn = newest(packages.get(f"cudnn9-cuda-{major}", set()))
    if cudnn and debian_version_key(cudnn) > debian_version_key(pinned):
        add("BEHIND", f"cudnn9-cuda-{major}", f"{cudnn} is newer than the pinned {pinned}")
    for name in packages:
        new_major = re.fullmatch(rf"cudnn(\d+)-cuda-{major}", name)
        if new_major and int(new_major[1]) > 9:
            add("BEHIND", name, f"cuDNN {new_major[1]} published ({offered(packages[name], 2)})")
    nccl = compat["cuda"][cuda].get("nccl")
    builds = {v for v in packages.get("libnccl2", set()) if v.endswith(f"+cuda{cuda}")}
    top = newest(builds)
    if nccl and top and debian_version_key(top) > debian_version_key(nccl):
        add("BEHIND", "libnccl2", f"{top} is newer than the pinned {nccl}+cuda{cuda}")
    dcgm = compat["cuda_major"].get(dcgm_cuda_major(compat, default["branch"]), {})
    latest = newest(packages.get(DCGM_COMMON[0], set()))
    pin = dcgm.get("dcgm_version") if entry.get("dcgm") else None
    if pin and latest and debian_version_key(latest) > debian_version_key(pin):
        add("BEHIND", DCGM_COMMON[0], f"{latest} is newer than the pinned {pin}")
    return found


def check_key(
    distro: str,
    key_name: str,
    expected: str | None,
    fingerprints: list[str],
    url: str,
) -> Finding:
    """The directory's key file against compat.yml's fingerprint."""
    subject = f"key {key_name}"
    if expected is None:
        return Finding(
            distro, "BREAKING", subject, "compat.yml's nvidia_repo_keys has no fingerprint", url
        )
    if expected.upper().replace(" ", "") in fingerprints:
        return Finding(distro, "OK", subject, f"fingerprint {expected}", url)
    got = ", ".join(fingerprints) or "no key in the file"
    return Finding(
        distro, "BREAKING", subject, f"fingerprint {got}, compat.yml says {expected}", url
    )


def check_wheels(
    scope: str,
    project: str,
    pin: str,
    files: list[str],
    pythons: list[str],
    default_python: str,
    fatal: bool,
    url: str,
) -> list[Finding]:
    """A pinned torch/torchvision on one PEP 503 page: a Linux x86_64 wheel for every Python in
    `pythons` (BREAKING for the default Python where `fatal`), and newer releases on the page."""
    wheels = [w for f in files if (w := parse_wheel_name(f)) and w.project == project]
    pinned = [w for w in wheels if pin in (w.version, public_version(w.version))]
    found: list[Finding] = []
    for python in pythons:
        builds = sorted({w.version for w in pinned if w.runs_on(python)})
        if builds:
            found.append(Finding(scope, "OK", project, f"{', '.join(builds)} for Python {python}"))
            continue
        severity = "BREAKING" if python == default_python and fatal else "WARNING"
        versions = sorted(
            {public_version(w.version) for w in wheels if w.runs_on(python)},
            key=lambda v: release_key(v) or (),
        )
        tail = f"; on the page: {', '.join(versions[-4:])}" if versions else ""
        found.append(
            Finding(
                scope,
                severity,
                project,
                f"{pin} has no Linux x86_64 wheel for Python {python}{tail}",
                url,
            )
        )
    top = newest([public_version(w.version) for w in wheels], key=release_key)
    if top and (release_key(pin) or ()) < (release_key(top) or ()):
        found.append(Finding(scope, "BEHIND", project, f"{top} on the index (pinned {pin})", url))
    return found


def check_pypi_pin(
    scope: str, project: str, pin: str, info: PypiProject, missing: str, url: str
) -> list[Finding]:
    """A pinned release on PyPI: missing (severity `missing`), yanked, or behind the newest."""
    found: list[Finding] = []
    pin_public = public_version(pin)
    if pin_public not in info.releases:
        found.append(Finding(scope, missing, project, f"{pin_public} is not on PyPI", url))
    elif info.releases[pin_public]:
        found.append(Finding(scope, "WARNING", project, f"{pin_public} is yanked on PyPI", url))
    else:
        found.append(Finding(scope, "OK", project, f"{pin_public} on PyPI"))
    if (release_key(info.newest) or ()) > (release_key(pin_public) or ()):
        found.append(
            Finding(scope, "BEHIND", project, f"{info.newest} on PyPI (pinned {pin_public})", url)
        )
    return found


# ---- sources (I/O) -------------------------------------------------------------------------


class SourceError(Exception):
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url, self.reason = url, reason


class NotFound(SourceError):
    """The server answered and has no such file (HTTP 404/410, or no such local file)."""


class Unreachable(SourceError):
    """The source could not be read: a refused scheme, a network error, a timeout, an HTTP error."""


class Fetcher:
    """urllib with a timeout. Once a host fails to answer, later requests to it fail at once."""

    def __init__(self, allow_http: bool = False, timeout: float = TIMEOUT_S) -> None:
        self.allow_http = allow_http
        self.timeout = timeout
        self.dead_hosts: dict[str, str] = {}

    def get(self, url: str) -> bytes:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "file":
            path = Path(urllib.parse.unquote(parts.path))
            path = path / "index.html" if path.is_dir() else path
            if not path.is_file():
                raise NotFound(url, "no such file")
            return path.read_bytes()
        if parts.scheme == "http" and not self.allow_http:
            raise Unreachable(url, "plain http refused (pass --allow-http for a local stand-in)")
        if parts.scheme not in ("http", "https"):
            raise Unreachable(url, "unsupported scheme")
        if parts.netloc in self.dead_hosts:
            raise Unreachable(url, self.dead_hosts[parts.netloc])
        request = urllib.request.Request(url, headers={"User-Agent": "gpurig-compat-drift"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            if error.code in (404, 410):
                raise NotFound(url, f"HTTP {error.code}") from error
            raise Unreachable(url, f"HTTP {error.code}") from error
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            reason = str(getattr(error, "reason", error))
            self.dead_hosts[parts.netloc] = f"host did not answer ({reason})"
            raise Unreachable(url, reason) from error


def key_fingerprints(key: bytes) -> list[str]:
    """Fingerprints of the primary keys in an armored OpenPGP key file, computed as the preflight's
    contact check computes them (RFC 4880 12.2); [] for a file that is not such a key."""
    try:
        return contact.fingerprints(key.decode("ascii", "replace"))
    except ValueError:
        return []


def read_packages(fetcher: Fetcher, directory: str) -> tuple[dict[str, set[str]], str]:
    """The Packages index of a flat repo directory: Packages.gz, else Packages."""
    try:
        url = directory + "Packages.gz"
        return parse_packages(gzip.decompress(fetcher.get(url)).decode("utf-8", "replace")), url
    except NotFound:
        url = directory + "Packages"
        return parse_packages(fetcher.get(url).decode("utf-8", "replace")), url


def unreachable(scope: str, subject: str, error: SourceError) -> Finding:
    message = f"not found ({error.reason})" if isinstance(error, NotFound) else error.reason
    return Finding(scope, "UNREACHABLE", subject, message, error.url)


def survey_distro(fetcher: Fetcher, compat: dict, distro: str, nvidia_base: str) -> list[Finding]:
    directory = f"{nvidia_base.rstrip('/')}/{distro}/x86_64/"
    try:
        packages, url = read_packages(fetcher, directory)
    except SourceError as error:
        found = [unreachable(distro, "Packages index", error)]
    else:
        found = check_nvidia_index(compat, distro, packages, url)
    key_name = compat["distros"][distro].get("key")
    if key_name:
        url = directory + key_name
        try:
            key = fetcher.get(url)
        except NotFound:
            found.append(Finding(distro, "BREAKING", f"key {key_name}", "key file not served", url))
        except Unreachable as error:
            found.append(unreachable(distro, f"key {key_name}", error))
        else:
            expected = compat.get("nvidia_repo_keys", {}).get(key_name)
            found.append(check_key(distro, key_name, expected, key_fingerprints(key), url))
        return found
    # key: null. The role refuses this OS until a key is verified out of band, with its own
    # message: say what the directory serves, as a warning (a default install stops cleanly).
    try:
        names = [n for n in parse_links(fetcher.get(directory).decode()) if n.endswith(".pub")]
    except SourceError as error:
        found.append(unreachable(distro, "directory listing", error))
        found.append(
            Finding(distro, "WARNING", "key (none)", "key unverified (compat.yml key: null)")
        )
        return found
    served = []
    for name in sorted(set(names)):
        try:
            fingerprints = key_fingerprints(fetcher.get(directory + name))
        except SourceError:
            fingerprints = []
        shown = ", ".join(fingerprints) or "not an OpenPGP key"
        served.append(f"{name} ({shown})")
    message = "key unverified (compat.yml key: null); the directory serves " + (
        "; ".join(served) if served else "no *.pub file"
    )
    found.append(Finding(distro, "WARNING", "key (none)", message, directory))
    return found


def rebase(url: str, default_base: str, base: str | None) -> str:
    """compat.yml's https://download.pytorch.org/whl/cu132 under another base: <base>/cu132."""
    if not base:
        return url
    tail = url[len(default_base) :] if url.startswith(default_base) else "/" + url.rsplit("/")[-1]
    return base.rstrip("/") + tail


def survey_torch(
    fetcher: Fetcher,
    compat: dict,
    major: str,
    torch_index_base: str | None,
    default_python: str,
    fatal: bool,
) -> list[Finding]:
    entry = compat["cuda_major"][major]
    scope = f"cuda{major}"
    index = rebase(entry["torch_index"], TORCH_INDEX_BASE, torch_index_base).rstrip("/")
    pythons = python_range(entry["torch_min_python"])
    python = default_python if default_python in pythons else pythons[0]
    found = []
    for project in ("torch", "torchvision"):
        url = f"{index}/{project}/"
        try:
            files = parse_links(fetcher.get(url).decode("utf-8", "replace"))
        except SourceError as error:
            found.append(unreachable(scope, f"{project} index", error))
            continue
        found += check_wheels(scope, project, entry[project], files, pythons, python, fatal, url)
    return found


def read_pypi(fetcher: Fetcher, pypi: str, project: str) -> tuple[PypiProject, str]:
    url = f"{pypi.rstrip('/')}/{project}/json"
    return parse_pypi_json(json.loads(fetcher.get(url))), url


def survey_pypi(fetcher: Fetcher, compat: dict, pypi: str, fatal_majors: set[str]) -> list[Finding]:
    """CuPy per CUDA major (installed from PyPI: a missing pin breaks), torch/torchvision (installed
    from PyTorch's index: PyPI only tells what is newer), and the nvidia-ml-py floor."""
    found: list[Finding] = []
    cache: dict[str, tuple[PypiProject, str] | SourceError] = {}

    def project(name: str) -> tuple[PypiProject, str] | None:
        if name not in cache:
            try:
                cache[name] = read_pypi(fetcher, pypi, name)
            except SourceError as error:
                cache[name] = error
            except (ValueError, KeyError) as error:  # not PyPI's JSON
                cache[name] = Unreachable(f"{pypi.rstrip('/')}/{name}/json", f"unreadable: {error}")
        got = cache[name]
        if isinstance(got, SourceError):
            if not any(f.subject == f"PyPI {name}" for f in found):
                found.append(unreachable("pypi", f"PyPI {name}", got))
            return None
        return got

    for major, entry in compat["cuda_major"].items():
        if got := project(entry["cupy"]):
            info, url = got
            missing = "BREAKING" if major in fatal_majors else "WARNING"
            found += check_pypi_pin(
                f"cuda{major}", entry["cupy"], entry["cupy_version"], info, missing, url
            )
    for name in ("torch", "torchvision"):
        if got := project(name):
            info, url = got
            # Each major's pin should be a PyPI release too (compat.yml cites PyPI for it); the
            # newest on PyPI is compared with the newest pin (an older major stays behind on
            # purpose: PyTorch stopped building its wheels).
            pins = sorted(
                {public_version(e[name]) for e in compat["cuda_major"].values()},
                key=lambda v: release_key(v) or (),
            )
            for pin in pins:
                found += [
                    f
                    for f in check_pypi_pin("pypi", name, pin, info, "WARNING", url)
                    if f.severity != "BEHIND" or pin == pins[-1]
                ]
    floor = compat.get("nvidia_ml_py_min")
    if floor and (got := project("nvidia-ml-py")):
        info, url = got
        if floor not in info.releases:
            found.append(
                Finding("pypi", "WARNING", "nvidia-ml-py", f"floor {floor} not on PyPI", url)
            )
        # A floor, not a pin: a newer release is context (raise the floor with the oldest branch).
        found.append(
            Finding("pypi", "INFO", "nvidia-ml-py", f"newest {info.newest}, floor {floor}")
        )
    return found


# ---- report --------------------------------------------------------------------------------


def default_python_version() -> str:
    """python_env's default Python (roles/python_env/defaults/main.yml), the one a default install
    creates its environment with; "" when it cannot be read."""
    defaults = REPO / "roles/python_env/defaults/main.yml"
    try:
        value = yaml.safe_load(defaults.read_text()).get("python_env_python_version", "")
    except (OSError, yaml.YAMLError, AttributeError):
        return ""
    return str(value) if re.fullmatch(r"3\.\d+", str(value)) else ""


def render_text(findings: list[Finding], compat: dict, code: int) -> str:
    lines = [f"compat.yml drift report, {date.today().isoformat()}"]
    order = [*compat["distros"], *(f"cuda{m}" for m in compat["cuda_major"]), "pypi"]
    scopes = sorted({f.scope for f in findings}, key=order.index)
    for scope in scopes:
        if scope in compat["distros"]:
            title = f"{scope} ({compat['distros'][scope]['name']})"
        elif scope.startswith("cuda"):
            title = (
                f"CUDA {scope[4:]} (torch index {compat['cuda_major'][scope[4:]]['torch_index']})"
            )
        else:
            title = "PyPI"
        lines.append(f"\n== {title}")
        rows = sorted(
            (f for f in findings if f.scope == scope), key=lambda f: SEVERITIES.index(f.severity)
        )
        width = max(len(f.subject) for f in rows)
        for f in rows:
            where = f"  <{f.url}>" if f.url and f.severity not in ("OK", "INFO") else ""
            lines.append(f"  {f.severity:<11} {f.subject:<{width}}  {f.message}{where}")
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES[:5]}
    summary = ", ".join(f"{n} {s.lower()}" for s, n in counts.items())
    lines.append(f"\nsummary: {summary}; exit {code}")
    return "\n".join(lines)


def seconds(text: str) -> float:
    """--timeout: a finite number of seconds above 0 (float() takes "nan" and "inf" too)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Report where compat.yml is behind or wrong against NVIDIA's repo indexes, "
        "PyTorch's wheel indexes and PyPI.",
        epilog="Exit: 0 nothing breaking, 1 breaking, 2 bad usage or an unreachable source.",
    )
    ap.add_argument(
        "--compat",
        type=Path,
        default=COMPAT_FILE,
        help=f"the table to check, laid out as {COMPAT_FILE.relative_to(REPO)}",
    )
    ap.add_argument("--nvidia-base", default=NVIDIA_BASE, help=f"default: {NVIDIA_BASE}")
    ap.add_argument(
        "--torch-index-base", help=f"replaces {TORCH_INDEX_BASE} in compat.yml's torch_index"
    )
    ap.add_argument("--pypi", default=PYPI, help=f"PyPI's JSON API base (default: {PYPI})")
    ap.add_argument("--distro", action="append", help="only this OS (repeatable)")
    ap.add_argument(
        "--python",
        default=default_python_version(),
        help="the default install's Python (default: python_env's default)",
    )
    ap.add_argument("--allow-http", action="store_true", help="read plain http:// sources")
    ap.add_argument(
        "--skip-unreachable", action="store_true", help="exit 0/1 despite unread sources"
    )
    ap.add_argument("--timeout", type=seconds, default=TIMEOUT_S, help="seconds per request")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    return ap.parse_args(argv)


def survey(fetcher: Fetcher, compat: dict, distros: list[str], args) -> list[Finding]:
    """Every finding for DISTROS: their NVIDIA repos, the PyTorch indexes, PyPI."""
    findings: list[Finding] = []
    for distro in distros:
        findings += survey_distro(fetcher, compat, distro, args.nvidia_base)
    default_majors = {compat["distros"][d]["default"]["cuda"].split(".")[0] for d in distros}
    for major in compat["cuda_major"]:
        if major in default_majors or not args.distro:
            findings += survey_torch(
                fetcher,
                compat,
                major,
                args.torch_index_base,
                args.python,
                major in default_majors,
            )
    return findings + survey_pypi(fetcher, compat, args.pypi, default_majors)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        compat = load_compat(args.compat)
        distros = args.distro or list(compat["distros"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as error:
        print(f"compat_drift: cannot read {args.compat}: {error}", file=sys.stderr)
        return 2
    unknown = [d for d in distros if d not in compat["distros"]]
    bases = [args.nvidia_base, args.pypi, args.torch_index_base or TORCH_INDEX_BASE]
    bad = [b for b in bases if urllib.parse.urlsplit(b).scheme not in ("https", "http", "file")]
    bad += [b for b in bases if b.startswith("http:") and not args.allow_http]
    if unknown or bad:
        what = f"unknown --distro {', '.join(unknown)}" if unknown else ""
        what += f"{'; ' if what else ''}refused URL {', '.join(bad)}" if bad else ""
        print(f"compat_drift: {what} (http:// needs --allow-http)", file=sys.stderr)
        return 2

    fetcher = Fetcher(args.allow_http, args.timeout)
    try:
        findings = survey(fetcher, compat, distros, args)
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        # A table that is YAML but not laid out as compat.yml: which entry, not a traceback.
        print(
            f"compat_drift: {args.compat} is not laid out as "
            f"{COMPAT_FILE.relative_to(REPO)}: {type(error).__name__}: {error}",
            file=sys.stderr,
        )
        return 2

    code = exit_code(findings, args.skip_unreachable)
    if args.json:
        report = {
            "date": date.today().isoformat(),
            "compat": str(args.compat),
            "sources": {
                "nvidia": args.nvidia_base,
                "torch_index": args.torch_index_base or TORCH_INDEX_BASE,
                "pypi": args.pypi,
            },
            "exit": code,
            "findings": [asdict(f) for f in findings],
        }
        print(json.dumps(report, indent=2))
    else:
        print(render_text(findings, compat, code))
    return code


if __name__ == "__main__":
    sys.exit(main())
