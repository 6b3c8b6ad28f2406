#!/usr/bin/env python3
"""Resolve what a play is about to install against the real sources, changing nothing.

Run on the target by the repo_contact role before any role changes the host (site.yml's preflight,
also under --check). Standard library only, Python >= 3.8 (Ubuntu 20.04's interpreter).

Request (JSON, base64 on the command line):
    {"apt": {"url": <flat repo URL ending in />, "key_name": ..., "key_fingerprint": ...,
             "packages": [{"name", "version", "role"}], "allow_http": bool} | null,
     "apt_host": {"packages": [...]} | null,          # the host's own configured sources
     "pip": {"index_url": <PEP 503 index or "">, "pip_args": [pip options], "python": "3.11",
             "platform": "x86_64", "requirements": [{"name", "version", "role"}]} | null}
pip looks where the install will: index_url, else the --index-url / --find-links in pip_args, else
PyPI. A plain-http source is fetched only when the configuration names it (pip itself needs
--trusted-host for it).
Each item may name the "variable" that chose it, for the message. A package's "version" is an
exact Debian version ("9.28.1.4-1"), a prefix ending in "." or "-" ("580." any of a branch,
"580.105.08-" any Debian revision of an upstream version), or "" (any).
A requirement's "version" is a PEP 440 release; a local label (+cu132) is accepted when none is
given. Answer (JSON on stdout): {"problems": [...], "found": {...}}; each problem is one line that
says what was asked, where, and what is there instead.

apt: the key is downloaded and its fingerprint computed here (OpenPGP v4: SHA-1 over 0x99, the
two-byte length and the public-key packet, RFC 4880 12.2) before anything trusts it; then apt itself
fetches and verifies the repository's signed index with that key, in a scratch directory (its own
sources list, lists and cache), so the host's apt configuration and state are not touched.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

TIMEOUT = 60


def fetch(url: str, allow_http: bool) -> bytes:
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("https", "file") and not (scheme == "http" and allow_http):
        raise ValueError(f"{url}: only https:// (or http:// where allowed) is fetched")
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    if scheme == "file" and os.path.isdir(path):  # as pip reads a local index or find-links dir
        if os.path.isfile(os.path.join(path, "index.html")):
            with open(os.path.join(path, "index.html"), "rb") as fh:
                return fh.read()
        names = sorted(os.listdir(path))
        return "".join(f'<a href="{n}">{n}</a>\n' for n in names).encode()
    with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
        return response.read()


# ---- OpenPGP: fingerprints of the primary keys in an armored key file ----------------------------


def dearmor(text: str) -> bytes:
    lines = text.strip().splitlines()
    if not lines or lines[0].strip() != "-----BEGIN PGP PUBLIC KEY BLOCK-----":
        raise ValueError("not an ASCII-armored OpenPGP public key")
    body = []
    in_body = False
    for line in lines[1:]:
        line = line.strip()
        if line.startswith("-----END"):
            break
        if not in_body:
            in_body = line == ""  # the armor headers end at the first empty line
            if in_body or ":" in line:
                continue
            in_body = True  # no headers at all
        if line.startswith("="):  # CRC-24 checksum line
            break
        body.append(line)
    return base64.b64decode("".join(body))


def packets(data: bytes):
    """(tag, body) of each OpenPGP packet (RFC 4880 4.2: old and new formats)."""
    i = 0
    while i < len(data):
        head = data[i]
        if not head & 0x80:
            raise ValueError("malformed OpenPGP packet header")
        if head & 0x40:  # new format
            tag = head & 0x3F
            first = data[i + 1]
            if first < 192:
                length, i = first, i + 2
            elif first < 224:
                length, i = ((first - 192) << 8) + data[i + 2] + 192, i + 3
            elif first == 255:
                length, i = int.from_bytes(data[i + 2 : i + 6], "big"), i + 6
            else:
                raise ValueError("partial-length packets do not occur in keys")
        else:  # old format
            tag = (head >> 2) & 0x0F
            size = {0: 1, 1: 2, 2: 4}[head & 0x03]
            length = int.from_bytes(data[i + 1 : i + 1 + size], "big")
            i += 1 + size
        yield tag, data[i : i + length]
        i += length


def fingerprints(armored: str) -> list[str]:
    """The v4 fingerprints of the primary public keys (packet tag 6) in an armored key file."""
    found = []
    for tag, body in packets(dearmor(armored)):
        if tag == 6:
            if body[0] != 4:
                raise ValueError(
                    f"OpenPGP key version {body[0]} (only v4 fingerprints are computed)"
                )
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body)
            found.append(digest.hexdigest().upper())
    return found


# ---- Debian package indexes ---------------------------------------------------------------------


def parse_packages(text: str) -> dict[str, list[str]]:
    """{package: [versions]} of a Debian Packages index, in index order."""
    found: dict[str, list[str]] = {}
    for stanza in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^([A-Za-z0-9-]+):[ \t]*(.*)$", stanza, re.M))
        if "Package" in fields and "Version" in fields:
            found.setdefault(fields["Package"], []).append(fields["Version"])
    return found


def version_matches(wanted: str, version: str) -> bool:
    if not wanted:
        return True
    if wanted.endswith((".", "-")):
        return version.startswith(wanted)
    return version == wanted


def who(item: dict) -> str:
    """The role and the variable that asked for a package or wheel: "cudnn (cudnn_version)"."""
    variable = item.get("variable")
    return item.get("role", "?") + (f" ({variable})" if variable else "")


def check_packages(index: dict[str, list[str]], packages: list[dict], where: str) -> list[str]:
    problems = []
    for package in packages:
        name, wanted = package["name"], package.get("version", "")
        offered = index.get(name, [])
        if any(version_matches(wanted, v) for v in offered):
            continue
        asked = f"{name}={wanted}" if wanted and not wanted.endswith((".", "-")) else name
        if wanted.endswith((".", "-")):
            asked = f"{name} {wanted}*"
        if offered:
            there = "available: " + ", ".join(offered[-12:])
        else:
            family = name.rsplit("-", 1)[0] + "-"  # cuda-drivers-620 -> cuda-drivers-*
            similar = sorted(n for n in index if n.startswith(family))[:12]
            there = "no such package; similar: " + (", ".join(similar) or "none")
        problems.append(f"{who(package)}: {asked} is not in {where} ({there})")
    return problems


def apt_sandbox_index(url: str, key: bytes, proxies: dict) -> dict[str, list[str]]:
    """Let apt fetch and verify the repository's signed index with `key`, in a scratch directory."""
    scratch = tempfile.mkdtemp(prefix="gpurig-contact-")
    try:
        os.chmod(scratch, 0o755)  # apt's download sandbox user must reach it
        for sub in ("lists/partial", "cache/archives/partial", "parts", "prefs"):
            os.makedirs(os.path.join(scratch, sub))
        key_path = os.path.join(scratch, "key.asc")
        with open(key_path, "wb") as fh:
            fh.write(key)
        os.chmod(key_path, 0o644)
        with open(os.path.join(scratch, "sources.list"), "w") as fh:
            fh.write(f"deb [signed-by={key_path}] {url} /\n")
        options = []
        for name, value in (
            ("Dir::Etc::SourceList", os.path.join(scratch, "sources.list")),
            ("Dir::Etc::SourceParts", os.path.join(scratch, "parts")),
            ("Dir::Etc::PreferencesParts", os.path.join(scratch, "prefs")),
            ("Dir::State::Lists", os.path.join(scratch, "lists")),
            ("Dir::Cache", os.path.join(scratch, "cache")),
            ("Acquire::GzipIndexes", "false"),
            ("APT::Get::List-Cleanup", "false"),
        ):
            options += ["-o", f"{name}={value}"]
        for scheme, proxy in proxies.items():
            options += ["-o", f"Acquire::{scheme}::Proxy={proxy}"]
        run = subprocess.run(
            ["apt-get", "-q", "update", *options],
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C"},
        )
        errors = [
            line for line in (run.stdout + run.stderr).splitlines() if line[:2] in ("E:", "W:")
        ]
        if run.returncode != 0 or errors:
            raise RuntimeError(" ".join(errors) or f"apt-get update exited {run.returncode}")
        index: dict[str, list[str]] = {}
        lists = os.path.join(scratch, "lists")
        for name in sorted(os.listdir(lists)):
            if name.endswith("_Packages"):
                with open(os.path.join(lists, name)) as fh:
                    for package, versions in parse_packages(fh.read()).items():
                        index.setdefault(package, []).extend(versions)
        return index
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def direct_index(url: str, allow_http: bool) -> dict[str, list[str]]:
    """The flat repository's Packages index, fetched directly (no apt on this machine)."""
    try:
        text = gzip.decompress(fetch(url + "Packages.gz", allow_http)).decode()
    except OSError:
        text = fetch(url + "Packages", allow_http).decode()
    return parse_packages(text)


def check_apt(request: dict, found: dict) -> list[str]:
    url = request["url"]
    key_url = url + request["key_name"]
    try:
        key = fetch(key_url, request.get("allow_http", False))
    except Exception as error:
        return [f"nvidia_repo: cannot download the signing key {key_url}: {error}"]
    try:
        fprs = fingerprints(key.decode("ascii", "replace"))
    except ValueError as error:
        return [f"nvidia_repo: {key_url} is not a usable OpenPGP key: {error}"]
    expected = request["key_fingerprint"].upper().replace(" ", "")
    found["key_fingerprints"] = fprs
    if fprs != [expected]:
        return [
            f"nvidia_repo: the key at {key_url} has fingerprint(s) {', '.join(fprs) or 'none'}, "
            f"expected {expected} (nvidia_repo_keys / nvidia_repo_key_fingerprint)"
        ]
    proxies = {k: v for k, v in (request.get("proxies") or {}).items() if v}
    try:
        if shutil.which("apt-get"):
            index = apt_sandbox_index(url, key, proxies)
            found["apt_verified_signature"] = True
        else:
            index = direct_index(url, request.get("allow_http", False))
            found["apt_verified_signature"] = False
    except Exception as error:
        return [f"nvidia_repo: cannot read the signed index of {url} with that key: {error}"]
    found["apt_packages"] = len(index)
    return check_packages(index, request.get("packages", []), url)


def check_apt_host(request: dict, found: dict, lists: str = "/var/lib/apt/lists") -> list[str]:
    """Packages from the host's own sources (Canonical's archive), as apt sees them now. With no
    package lists yet (a fresh image), nothing can be said without changing the host: noted."""
    if not os.path.isdir(lists) or not any(n.endswith("_Packages") for n in os.listdir(lists)):
        found["apt_host_unchecked"] = (
            f"{lists} holds no package lists yet (apt-get update never ran)"
        )
        return []
    index: dict[str, list[str]] = {}
    for package in request.get("packages", []):
        run = subprocess.run(
            ["apt-cache", "madison", package["name"]], capture_output=True, text=True
        )
        versions = [line.split("|")[1].strip() for line in run.stdout.splitlines() if "|" in line]
        index[package["name"]] = versions
    return check_packages(index, request.get("packages", []), "the host's apt sources")


# ---- Python wheel indexes (PEP 503 pages and find-links directory listings) --------------------


class Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href") or ""
            self.links.append(urllib.parse.unquote(href.split("#")[0].rsplit("/", 1)[-1]))


def wheel_files(page: str) -> list[str]:
    parser = Links()
    parser.feed(page)
    return [link for link in parser.links if link.endswith(".whl")]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_fits(filename: str, name: str, version: str, python: str, machine: str) -> bool:
    """Does a wheel (PEP 427 file name) install `name==version` on CPython `python`, `machine`?"""
    parts = filename[: -len(".whl")].split("-")
    if len(parts) not in (5, 6) or normalize(parts[0]) != normalize(name):
        return False
    wheel_version, python_tags, abi_tags, platforms = parts[1], parts[-3], parts[-2], parts[-1]
    if wheel_version != version and wheel_version.split("+")[0] != version:
        return False
    cp = "cp" + python.replace(".", "")
    pythons = python_tags.split(".")
    if not (cp in pythons or "py3" in pythons or ("abi3" in abi_tags.split(".") and pythons)):
        return False
    return any(p == "any" or p.endswith("_" + machine) for p in platforms.split("."))


def pip_sources(index_url: str, pip_args: list[str]) -> list[dict]:
    """Where pip looks: index_url, else pip_args' --index-url / --find-links, else PyPI."""
    if index_url:
        return [{"url": index_url, "kind": "index"}]
    kinds = {
        "--index-url": "index",
        "-i": "index",
        "--find-links": "find_links",
        "-f": "find_links",
    }
    words = [w for arg in pip_args for w in (arg.split("=", 1) if arg.startswith("--") else [arg])]
    # (this file runs on Python 3.8: no itertools.pairwise, no zip(strict=))
    sources = [
        {"url": words[i + 1], "kind": kinds[words[i]]}
        for i in range(len(words) - 1)
        if words[i] in kinds
    ]
    if "--no-index" in words:
        return [s for s in sources if s["kind"] == "find_links"]
    if not any(s["kind"] == "index" for s in sources):
        sources.insert(0, {"url": "https://pypi.org/simple/", "kind": "index"})
    return sources


def check_pip(request: dict, found: dict) -> list[str]:
    problems = []
    python, machine = request["python"], request.get("platform", "x86_64")
    request = {
        **request,
        "sources": pip_sources(request.get("index_url", ""), request.get("pip_args", [])),
    }
    found["pip_sources"] = request["sources"]
    for requirement in request.get("requirements", []):
        name, version = requirement["name"], requirement["version"]
        seen: list[str] = []
        fits = False
        for source in request["sources"]:
            url = source["url"].rstrip("/") + "/"
            if source.get("kind", "index") == "index":  # PEP 503: <index>/<normalized name>/
                url += re.sub(r"[-_.]+", "-", name).lower() + "/"
            try:
                files = wheel_files(fetch(url, allow_http=True).decode())
            except Exception as error:
                problems.append(f"{who(requirement)}: cannot read {url}: {error}")
                continue
            mine = [f for f in files if normalize(f.split("-")[0]) == normalize(name)]
            seen += sorted({f.split("-")[1] for f in mine})
            fits = fits or any(wheel_fits(f, name, version, python, machine) for f in mine)
        found.setdefault("pip", {})[name] = seen
        if not fits:
            problems.append(
                f"{who(requirement)}: no {name}=={version} wheel for CPython {python} "
                f"on {machine} at {', '.join(s['url'] for s in request['sources'])} "
                f"(versions there: {', '.join(seen[-12:]) or 'none'})"
            )
    return problems


def main() -> None:
    request = json.loads(base64.b64decode(sys.argv[1]))
    found: dict = {}
    problems: list[str] = []
    if request.get("apt"):
        problems += check_apt(request["apt"], found)
    if request.get("apt_host"):
        problems += check_apt_host(request["apt_host"], found)
    if request.get("pip"):
        problems += check_pip(request["pip"], found)
    print(json.dumps({"problems": problems, "found": found}))


if __name__ == "__main__":
    main()
