"""Role variables checked by what they are: a version, a count, a path, a URL, a digest, ...

Each role option has a kind: the one its argument spec already says (spec_kind: choice, allow_http,
bool, mapping), or the format variable_kinds.yml (next to this file) gives it where the spec cannot
say it; KINDS below says what each kind accepts. Every role's tasks/validate.yml starts by
including roles/gpurig/tasks/kinds.yml, which checks every variable of that role with

    dict(names | zip(query('ansible.builtin.vars', *names))) | gpurig_kind_problems

(names = '<role>' | gpurig_kind_variables), so a bad value stops the play before any change with a
message that leads with the variable and shows the value as JSON. test_plugins/gpurig_kinds.py
offers each kind as a Jinja test too (`x is gpurig_pep440`). Unit tests:
tests/unit/test_variable_kinds.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import VERSION_PATTERN

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
KINDS_FILE = HERE / "variable_kinds.yml"
OR_EMPTY = " or empty"

# Strings Ansible's argument specs and `| bool` take as booleans
# (ansible.module_utils.parsing.convert_bool).
TRUE_WORDS = {"y", "yes", "on", "1", "true", "t"}
BOOL_WORDS = TRUE_WORDS | {"n", "no", "off", "0", "false", "f"}

PEP440 = re.compile(r"^" + VERSION_PATTERN + r"$", re.VERBOSE | re.IGNORECASE)
DEBIAN_UPSTREAM = re.compile(r"^[0-9][A-Za-z0-9.+~-]*$")
DEBIAN_UPSTREAM_NO_HYPHEN = re.compile(r"^[0-9][A-Za-z0-9.+~]*$")
DEBIAN_REVISION = re.compile(r"^[A-Za-z0-9.+~]+$")
DEBIAN_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
RELEASE = re.compile(r"^[0-9]+(\.[0-9]+)+$")
CUDA_RELEASE = re.compile(r"^[0-9]{2}\.[0-9]+$")
DRIVER_BRANCH = re.compile(r"^[0-9]{3}$")
DRIVER_VERSION = re.compile(r"^[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2})?$")
COMPUTE_CAPABILITY = re.compile(r"^[0-9]{2,3}[af]?$")
HEX = re.compile(r"^[0-9a-fA-F]+$")
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# No query or fragment: the roles append paths to these URLs.
URL = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<host>[^/\s?#]*)(?P<path>/[^\s?#]*)?$")
PROXY_URL = re.compile(r"^https?://[^\s/?#]+/?$")
CONDA_CHANNEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*$")
SERIAL_PERCENT = re.compile(r"^([1-9][0-9]?|100)%$")


def is_str(value) -> bool:
    return isinstance(value, str)


def is_int(value) -> bool:
    """An integer, or a string of digits (what -e gives)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (
        is_str(value) and re.fullmatch(r"-?[0-9]+", value.strip()) is not None
    )


def is_bool(value) -> bool:
    return isinstance(value, bool) or (is_str(value) and value.strip().lower() in BOOL_WORDS)


def is_pep440(value) -> bool:
    # A string only: an unquoted 2.1 would be the float 2.1 (and 2.10 would read as 2.1).
    return (
        is_str(value)
        and value == value.strip()
        and not value[:1].isalpha()
        and bool(PEP440.match(value))
    )


def is_debian_version(value) -> bool:
    """[epoch:]upstream[-revision] as Debian policy 5.6.12 defines it."""
    if not is_str(value) or not value:
        return False
    epoch, colon, rest = value.partition(":")
    if not colon:
        epoch, rest = "", value
    elif not epoch.isdigit():
        return False
    if "-" in rest:
        upstream, _, revision = rest.rpartition("-")
        return bool(DEBIAN_UPSTREAM.match(upstream) and DEBIAN_REVISION.match(revision))
    return bool(DEBIAN_UPSTREAM_NO_HYPHEN.match(rest))


def is_abs_path(value) -> bool:
    return (
        is_str(value)
        and value.startswith("/")
        and ".." not in value.split("/")
        and not any(c.isspace() or c == "\0" for c in value)
    )


def url_scheme(value) -> str | None:
    """The scheme of a URL with a host (file: an absolute path), no query or fragment."""
    match = URL.match(value) if is_str(value) else None
    if not match:
        return None
    scheme = match["scheme"]
    if scheme == "file":
        return scheme if not match["host"] and is_abs_path(match["path"] or "") else None
    return scheme if match["host"] else None


def is_https_url(value, allow_http: bool = False) -> bool:
    return url_scheme(value) in ({"https", "http"} if allow_http else {"https"})


def is_download_url(value, allow_http: bool = False) -> bool:
    return url_scheme(value) in ({"https", "file", "http"} if allow_http else {"https", "file"})


def is_hex_digest(value, length: int) -> bool:
    return is_str(value) and len(value) == length and bool(HEX.match(value))


def is_sha256(value) -> bool:
    return is_hex_digest(value, 64)


def is_fingerprint(value) -> bool:
    """An OpenPGP v4 fingerprint: 40 hex digits, spaces and case ignored."""
    return is_str(value) and is_hex_digest(value.replace(" ", ""), 40)


def is_count(value) -> bool:
    return is_int(value) and int(value) >= 1


def is_seconds(value) -> bool:
    return is_int(value) and int(value) >= 0


def is_serial(value) -> bool:
    """Ansible's play `serial`: a number of hosts >= 1, or a percentage."""
    return is_count(value) or (is_str(value) and bool(SERIAL_PERCENT.match(value)))


def is_package_name(value) -> bool:
    return is_str(value) and bool(DEBIAN_PACKAGE.match(value))


def is_apt_package(value) -> bool:
    """name or name=version."""
    if not is_str(value):
        return False
    name, equals, version = value.partition("=")
    return is_package_name(name) and (not equals or is_debian_version(version))


def is_pip_requirement(value) -> bool:
    """A PEP 508 requirement (name and specifier, or an https:// or file:// URL), or an absolute
    path."""
    if not is_str(value) or not value.strip() or "\n" in value:
        return False
    if value.startswith("/"):
        return is_abs_path(value)
    try:
        requirement = Requirement(value)
    except InvalidRequirement:
        return False
    return requirement.url is None or is_download_url(requirement.url)


def is_pip_arg(value) -> bool:
    return is_str(value) and value != "" and not any(c in value for c in "\n\r\0")


def is_compute_capability(value) -> bool:
    """As nvcc's sm_<cc> takes it: 90, 100, 90a, 100f (not "9.0")."""
    return (is_int(value) and not is_str(value) and value > 0) or (
        is_str(value) and bool(COMPUTE_CAPABILITY.match(value))
    )


def is_driver_branch(value) -> bool:
    return (is_int(value) and not is_str(value) and 100 <= value <= 999) or (
        is_str(value) and bool(DRIVER_BRANCH.match(value))
    )


def list_of(check: Callable) -> Callable:
    return lambda value: isinstance(value, list) and all(check(item) for item in value)


def mapping_of(check: Callable) -> Callable:
    return lambda value: isinstance(value, Mapping) and all(check(item) for item in value.values())


@cache
def compat_cupy_packages() -> frozenset[str]:
    """The CuPy wheels compat.yml names, one per CUDA major."""
    # The role gpurig's vars: one variable, gpurig_compat, holding the table.
    table = REPO / "roles/gpurig/vars/main/compat.yml"
    compat = yaml.safe_load(table.read_text())["gpurig_compat"]
    return frozenset(
        entry["cupy"] for entry in compat.get("cuda_major", {}).values() if "cupy" in entry
    )


@dataclass(frozen=True)
class Kind:
    says: str  # "<variable> must be <says>"
    check: Callable[..., bool]
    # Values of this kind that must be refused, for the tests (one per way to be wrong).
    bad: tuple = ()
    # The check takes allow_http= (the role's allow_http switch).
    http_switch: bool = False


KINDS: dict[str, Kind] = {
    "bool": Kind("true or false", is_bool, ("sometimes", "", 2, None, ["true"])),
    "allow_http": Kind("true or false", is_bool, ("sometimes", "", 2, None)),
    "auto_or_bool": Kind(
        '"auto" or true/false', lambda v: v == "auto" or is_bool(v), ("detect", "", 2, None)
    ),
    "mapping": Kind("a mapping (key: value)", lambda v: isinstance(v, Mapping), ("a=b", ["a"], 1)),
    "mappings": Kind(
        "a list of mappings",
        list_of(lambda v: isinstance(v, Mapping)),
        ({"a": 1}, ["a"], [None], "a"),
    ),
    "pep440": Kind(
        'a PEP 440 version such as "2.15.0" (quoted; no "latest", no range)',
        is_pep440,
        ("newest", "26.3.2-3;reboot", ">=2.1", "2.1 ", "", 2.1, "2.15.0 && reboot"),
    ),
    "debian_version": Kind(
        'a Debian package version such as "2.28.3-1" ([epoch:]upstream[-revision])',
        is_debian_version,
        ("latest", "2.28.3-1;reboot", "v2.28", "2.28 3", "", 2.2, "1:-1", "x:1.0"),
    ),
    "release": Kind(
        'a release of numbers and dots such as "29.4.1" (quoted)',
        lambda v: is_str(v) and bool(RELEASE.match(v)),
        ("latest", "29", "29.4.1-1", "v29.4.1", "", 29.4, "29.4.1;reboot"),
    ),
    "cuda_release": Kind(
        'a quoted CUDA release "<major>.<minor>" such as "12.9" (unquoted 12.10 reads as 12.1)',
        lambda v: is_str(v) and bool(CUDA_RELEASE.match(v)),
        (12.9, "12", "12.9.1", "cu129", "", "12.x"),
    ),
    "driver_branch": Kind(
        'a three-digit driver branch such as "580"',
        is_driver_branch,
        ("53", "r580", "5800", "580.95", "", 58, True),
    ),
    "driver_branches": Kind(
        'a list of three-digit driver branches such as ["580"]',
        list_of(is_driver_branch),
        ("580", ["r580"], ["58"], [None]),
    ),
    "driver_version": Kind(
        'an upstream driver version such as "580.95.05" (no Debian revision)',
        lambda v: is_str(v) and bool(DRIVER_VERSION.match(v)),
        ("580", "580.95.05-0ubuntu1", "latest", 580.95, "580.95.05;reboot"),
    ),
    "count": Kind(
        "a whole number, at least 1", is_count, (0, -1, "0", "-1", "two", 1.5, "", True, None)
    ),
    "seconds": Kind(
        "a whole number of seconds, at least 0", is_seconds, (-1, "-60", "1h", 1.5, "", True, None)
    ),
    "serial": Kind(
        'a number of hosts, at least 1, or a percentage such as "25%"',
        is_serial,
        ("abc", 0, -1, "0", "0%", "150%", "", True, None),
    ),
    "abs_path": Kind(
        "an absolute path without '..' or spaces",
        is_abs_path,
        ("opt/x", "/opt/../etc", "/opt/a b", "~/x", "", 1, None, ["/opt"]),
    ),
    "file_name": Kind(
        "a plain file name (letters, digits, '.', '_', '-'; no '/')",
        lambda v: is_str(v) and bool(FILE_NAME.match(v)),
        ("a/b", "../x", ".hidden", "a b", "", 1, None),
    ),
    "file_names": Kind(
        "a list of plain file names (letters, digits, '.', '_', '-'; no '/')",
        list_of(lambda v: is_str(v) and bool(FILE_NAME.match(v))),
        ("docker", ["a/b"], [""], [None]),
    ),
    "abs_paths": Kind(
        "a list of absolute paths without '..' or spaces",
        list_of(is_abs_path),
        ("/opt", ["opt/x"], ["/opt/../etc"], [""], [None]),
    ),
    "text": Kind(
        "a non-empty single-line text",
        lambda v: is_str(v) and bool(v.strip()) and "\n" not in v.strip(),
        ("", " ", "a\nb", 1, None, ["x"]),
    ),
    "https_url": Kind(
        "an https:// URL without query or fragment",
        is_https_url,
        (
            "http://mirror.example/x",
            "ftp://mirror.example/x",
            "mirror.example/x",
            "https://",
            "https://h/x?y",
            "",
        ),
        http_switch=True,
    ),
    "download_url": Kind(
        "an https:// or file:/// URL without query or fragment",
        is_download_url,
        (
            "http://mirror.example/x",
            "ftp://mirror.example/x",
            "file://host/x",
            "file:///a/../b",
            "x.tar.gz",
            "",
        ),
        http_switch=True,
    ),
    "proxy_url": Kind(
        "a proxy URL such as http://proxy.example:3128",
        lambda v: is_str(v) and bool(PROXY_URL.match(v)),
        ("proxy.example:3128", "socks5://proxy.example", "http://proxy.example/path", "", 3128),
    ),
    "sha256": Kind(
        "a sha256 digest, 64 hex digits",
        is_sha256,
        ("abc123", "g" * 64, "a" * 63, "a" * 65, "", 1, None),
    ),
    "sha256_by_arch": Kind(
        "a mapping of architecture to sha256 (64 hex digits)",
        lambda v: (
            isinstance(v, Mapping) and all(is_str(k) and k for k in v) and mapping_of(is_sha256)(v)
        ),
        ({"x86_64": "abc"}, "a" * 64, ["a" * 64]),
    ),
    "fingerprint": Kind(
        "a 40-hex-digit OpenPGP v4 fingerprint",
        is_fingerprint,
        ("3BF863CC", "G" * 40, "A" * 41, "", 1, None),
    ),
    "fingerprints": Kind(
        "a list of 40-hex-digit OpenPGP v4 fingerprints",
        list_of(is_fingerprint),
        ("A" * 40, ["3BF863CC"], [None]),
    ),
    "fingerprints_by_key_file": Kind(
        "a mapping of key file name to 40-hex-digit fingerprint, such as"
        ' {"3bf863cc.pub": "EB69...63CC"}',
        lambda v: (
            isinstance(v, Mapping)
            and all(is_str(k) and FILE_NAME.match(k) for k in v)
            and mapping_of(is_fingerprint)(v)
        ),
        ({"3bf863cc.pub": "3BF863CC"}, {"../k.pub": "A" * 40}, "A" * 40, ["A" * 40]),
    ),
    "package_name": Kind(
        "a Debian package name such as linux-headers-6.1.0-28-amd64",
        is_package_name,
        ("Build Essential", "pkg;reboot", "-x", "pkg=1.0", "", 1, None),
    ),
    "package_names": Kind(
        "a list of Debian package names",
        list_of(is_package_name),
        ("pkg", ["Build Essential"], ["pkg=1.0"], [None]),
    ),
    "apt_packages": Kind(
        "a list of Debian package names, each optionally =<version>",
        list_of(is_apt_package),
        ("pkg", ["build essential"], ["pkg=latest"], ["pkg;reboot"], [None]),
    ),
    "pip_requirement": Kind(
        'a pip requirement such as "horovod==0.28.1" (a name and version specifier, an https:// or '
        "file:/// URL, or an absolute path)",
        is_pip_requirement,
        (
            "horovod==",
            "horovod==0.28.1; reboot",
            "http://mirror.example/h.tar.gz",
            "../h.tar.gz",
            "",
            1,
            None,
        ),
    ),
    "pip_requirements": Kind(
        "a list of pip requirements",
        list_of(is_pip_requirement),
        ("pandas", ["pandas=="], ["pandas\nx"], [None]),
    ),
    "pip_args": Kind(
        "a list of pip options, one argument per item",
        list_of(is_pip_arg),
        ("--no-index", [""], ["--index-url\nx"], [None]),
    ),
    "compute_capabilities": Kind(
        'a list of CUDA compute capabilities as nvcc names them, such as ["90"] or ["90a", "100"]',
        list_of(is_compute_capability),
        ("90", ["9.0"], ["sm_90"], ["compute_90"], [""], [None]),
    ),
    "conda_channels": Kind(
        "a non-empty list of conda channel names (conda-forge) or https:// channel URLs, without "
        '"defaults" (Anaconda\'s channel, under its terms of service)',
        lambda v: (
            bool(v)
            and "defaults" not in v
            and list_of(lambda c: (is_str(c) and bool(CONDA_CHANNEL.match(c))) or is_https_url(c))(
                v
            )
        ),
        (
            "conda-forge",
            [],
            ["conda-forge", "defaults"],
            ["conda forge"],
            ["http://mirror.example/c"],
            [""],
            [None],
        ),
    ),
    "cupy_package": Kind(
        "a CuPy wheel compat.yml names",
        lambda v: is_str(v) and v in compat_cupy_packages(),
        ("cupy", "cupy-cuda11x", "cupy-cuda13x;reboot", "", None),
    ),
}

# What the test plugin offers: `x is gpurig_<name>`.
JINJA_TESTS: dict[str, Callable[..., bool]] = {
    "pep440": is_pep440,
    "debian_version": is_debian_version,
    "abs_path": is_abs_path,
    "https_url": is_https_url,
    "download_url": is_download_url,
    "sha256": is_sha256,
    "hex_digest": is_hex_digest,
    "fingerprint": is_fingerprint,
    "count": is_count,
    "package_name": is_package_name,
    "compute_capability": is_compute_capability,
    "pip_requirement": is_pip_requirement,
}


def spec_kind(name: str, option: Mapping) -> str | None:
    """The kind an option's argument spec already says: choice (it lists choices), allow_http (a
    bool named *_allow_http, its role's switch for plain http), bool, mapping (a dict); None where
    the spec's type cannot say the format."""
    if option.get("choices"):
        return "choice"
    if option.get("type") == "bool" and name.endswith("_allow_http"):
        return "allow_http"
    return {"bool": "bool", "dict": "mapping"}.get(option.get("type"))


@cache
def variable_kinds() -> dict[str, str]:
    """variable -> kind (with its " or empty"): variable_kinds.yml's, and for an option it does not
    list, the kind its argument spec says (spec_kind)."""
    derived = {
        name: kind
        for options in argument_specs().values()
        for name, option in options.items()
        if (kind := spec_kind(name, option))
    }
    return {**derived, **yaml.safe_load(KINDS_FILE.read_text())}


@cache
def entry_points() -> dict[str, dict]:
    """role -> its meta/argument_specs.yml's argument_specs (entry point -> spec)."""
    return {
        path.parent.parent.name: yaml.safe_load(path.read_text())["argument_specs"]
        for path in sorted(REPO.glob("roles/*/meta/argument_specs.yml"))
    }


def role_options(role: str, entry_point: str = "main") -> dict:
    """The options of one entry point of a role's argument spec."""
    return entry_points()[role][entry_point].get("options") or {}


@cache
def argument_specs() -> dict[str, dict]:
    """role -> {variable: option}, every entry point's options together."""
    specs = {}
    for role, entries in entry_points().items():
        options: dict[str, dict] = {}
        for entry_point in entries.values():
            options.update(entry_point.get("options") or {})
        specs[role] = options
    return specs


def split_kind(kind: str) -> tuple[str, bool]:
    """('sha256 or empty') -> ('sha256', True)."""
    return (kind[: -len(OR_EMPTY)], True) if kind.endswith(OR_EMPTY) else (kind, False)


def to_json(value) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def problem(
    name: str, value, allow_http: bool = False, allow_http_switch: str | None = None
) -> str | None:
    """The message for a bad value of `name`, or None when its kind accepts it."""
    kind_name, empty_ok = split_kind(variable_kinds()[name])
    if empty_ok and value == "":
        return None
    if kind_name == "choice":
        choices = next(spec[name]["choices"] for spec in argument_specs().values() if name in spec)
        as_text = str(value) if is_str(value) or is_int(value) else None
        if value in choices or as_text in map(str, choices):
            return None
        says = "one of " + ", ".join(to_json(choice) for choice in choices)
    else:
        kind = KINDS[kind_name]
        if kind.check(value, allow_http=allow_http) if kind.http_switch else kind.check(value):
            return None
        says = kind.says
        if kind.http_switch and allow_http_switch:
            says += f" (http:// only with {allow_http_switch}: true)"
        elif kind.http_switch:
            says += " (this role has no switch for plain http)"
    if empty_ok:
        says = f'"" or {says}'
    # An unquoted 12.10 in YAML is the float 12.1: say so.
    note = ", a float: quote it" if isinstance(value, float) else ""
    return f"{name} must be {says} (got {to_json(value)}{note})."


def http_switch(name: str) -> str | None:
    """The allow_http switch of the role that declares `name`, if it has one."""
    options = next((spec for spec in argument_specs().values() if name in spec), {})
    table = variable_kinds()
    return next((option for option in options if table.get(option) == "allow_http"), None)


def kind_problems(values: Mapping) -> list[str]:
    """One message per variable whose value its kind refuses, in the order given.

    A URL's allow_http switch is read from `values` when it is there, else taken as its default
    (false). A variable with no kind in the table is not checked here:
    tests/unit/test_variable_kinds.py fails until it has one.
    """
    kinds = variable_kinds()
    found = []
    for name, value in values.items():
        if name not in kinds:
            continue
        switch = http_switch(name)
        allowed = (
            switch in values
            and is_bool(values[switch])
            and str(values[switch]).strip().lower() in TRUE_WORDS
        )
        found.append(problem(name, value, allowed, switch))
    return [message for message in found if message]


def kind_variables(role: str) -> list[str]:
    """The variables a role declares (all its entry points), in the order of its argument spec."""
    return list(argument_specs()[role])


class FilterModule:
    def filters(self):
        return {
            "gpurig_kind_problems": kind_problems,
            "gpurig_kind_variables": kind_variables,
            "gpurig_role_options": role_options,
        }
