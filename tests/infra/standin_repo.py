#!/usr/bin/env python3
"""Build the signed, local stand-ins for NVIDIA's, Canonical's and Docker's apt repositories.

TEST FIXTURE. The packages built here carry the vendors' package names and version strings but
contain none of their software: each holds a README that says it is a fixture, plus the few files
(headers, directories, units) whose *layout* the roles rely on. Tests may assert on state the
roles create (sources, pins, holds, symlinks, which versions apt installed, service restarts) but
never on text that a fixture invented.

Layouts, as on the vendors' servers:
    <www>/repos/<distro>/x86_64/{*.deb,Packages,Packages.gz,Release,InRelease,Release.gpg,<key>.pub}
        NVIDIA's CUDA repos (flat, one per distro, each signed with the key its directory has on
        NVIDIA's server: the manifest's `nvidia_keys`);
    <www>/ubuntu-archive/<distro>/x86_64/{...same flat layout...}
        Canonical's archive, for Ubuntu's own -server driver packages;
    <www>/docker/linux/<debian|ubuntu>/{gpg, dists/<codename>/{Release,InRelease,Release.gpg,
        stable/binary-amd64/Packages[.gz], pool/stable/amd64/*.deb}}
        Docker's repository (deb <base>/<debian|ubuntu> <codename> stable);
    <www>/libnvidia-container/{gpgkey, stable/deb/amd64/{*.deb,Packages,...,InRelease}}
        NVIDIA's container toolkit repository (flat, one for every distro).

The signing keys are generated at build time (throwaway, no passphrase), one per key file name
NVIDIA publishes (3bf863cc.pub, 8793F200.pub, ...), so that a role which assumes one key for every
distro fails here as it would on NVIDIA's server. The key named first in the manifest also signs the
Ubuntu archive, Docker's and the toolkit's stand-ins (as Docker's `gpg` and the toolkit's `gpgkey`).
<work>/standin.env holds STANDIN_KEY_FPR (that first key) and STANDIN_NVIDIA_KEYS (JSON: key file
name -> fingerprint), in shell syntax.

Usage: standin_repo.py --manifest tests/standin/packages.yml --work .work
"""

from __future__ import annotations

import argparse
import gzip
import json
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

# Docker's suites (<debian|ubuntu>/<codename>) and the suffix its versions carry there.
DOCKER_SUITES = {
    "debian/bookworm": "debian.12~bookworm",
    "debian/trixie": "debian.13~trixie",
    "ubuntu/focal": "ubuntu.20.04~focal",
    "ubuntu/jammy": "ubuntu.22.04~jammy",
    "ubuntu/noble": "ubuntu.24.04~noble",
}
FIXTURE_NOTE = (
    "TEST FIXTURE built by tests/infra/standin_repo.py for the gpurig test suite.\n"
    "It stands in for {vendor}'s package {name} {version} and contains no {vendor} software.\n"
)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, **kw)


def distro_family(distro: str) -> str:
    return "ubuntu" if distro.startswith("ubuntu") else "debian"


def expand_version(version: str | dict, distro: str) -> str:
    """A version is either one string or {ubuntu: ..., debian: ...}."""
    if isinstance(version, dict):
        return str(version.get(distro, version[distro_family(distro)]))
    return str(version)


def build_deb(pkg: dict, version: str, distro: str, out: Path, vendor: str = "NVIDIA") -> Path:
    name = pkg["name"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        debian = root / "DEBIAN"
        debian.mkdir(parents=True)
        doc = root / "usr/share/doc" / name
        doc.mkdir(parents=True)
        (doc / "TEST-FIXTURE").write_text(
            FIXTURE_NOTE.format(vendor=vendor, name=name, version=version)
        )
        upstream = version.split(":")[-1].split("-")[0]
        parts = [*upstream.split("."), "0", "0", "0"][:3]
        subs = {
            "version": version,
            "upstream": upstream,
            "distro": distro,
            "major": parts[0],
            "minor": parts[1],
            "patch": parts[2],
        }
        for path, content in (pkg.get("files") or {}).items():
            target = root / path.format(**subs).lstrip("/")
            if path.endswith("/"):
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(str(content).format(**subs))
            if "/bin/" in path or path.endswith(".sh"):
                target.chmod(0o755)
        control = [
            f"Package: {name}",
            f"Version: {version}",
            "Architecture: " + pkg.get("architecture", "amd64"),
            "Maintainer: gpurig test suite <fixtures@invalid>",
            f"Section: {pkg.get('section', 'multiverse/libs')}",
            "Priority: optional",
        ]
        for field in ("depends", "recommends", "provides", "conflicts", "replaces", "breaks"):
            value = pkg.get(field)
            if value:
                value = value if isinstance(value, str) else ", ".join(value)
                control.append(f"{field.capitalize()}: {value.format(**subs)}")
        control.append(f"Description: TEST FIXTURE standing in for {name}")
        control.append(f" Built by the gpurig test suite; contains no {vendor} software.")
        (debian / "control").write_text("\n".join(control) + "\n")
        for script in ("postinst", "prerm", "postrm"):
            if pkg.get(script):
                path = debian / script
                path.write_text("#!/bin/sh\nset -e\n" + pkg[script].format(**subs))
                path.chmod(0o755)
        # Pool file names drop the epoch, as Debian's and Docker's do.
        filename_version = version.split(":")[-1]
        deb = out / f"{name}_{filename_version}_{pkg.get('architecture', 'amd64')}.deb"
        run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root), str(deb)],
            stdout=subprocess.DEVNULL,
        )
        return deb


def make_key(gnupghome: Path, name: str) -> str:
    """A fresh signing key whose user id names the key file it stands in for; its fingerprint."""
    gnupghome.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {"GNUPGHOME": str(gnupghome), "PATH": "/usr/bin:/bin"}
    run(
        [
            "gpg",
            "--batch",
            "--quiet",
            "--passphrase",
            "",
            "--quick-gen-key",
            f"gpurig test stand-in repo key {name} <standin@invalid>",
            "rsa3072",
            "sign",
            "1d",
        ],
        env=env,
    )
    out = run(
        ["gpg", "--batch", "--with-colons", "--list-secret-keys", f"key {name} <"],
        env=env,
        capture_output=True,
    ).stdout
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


def write_packages(archive: Path, pool: str, target: Path, env: dict) -> None:
    """Packages and Packages.gz in `target` for the debs under archive/pool (paths relative to
    archive, as apt resolves them against the source's URI)."""
    packages = run(
        ["dpkg-scanpackages", "--multiversion", pool], cwd=archive, capture_output=True, env=env
    ).stdout
    target.mkdir(parents=True, exist_ok=True)
    (target / "Packages").write_text(packages)
    with gzip.open(target / "Packages.gz", "wt") as fh:
        fh.write(packages)


def release_and_sign(
    directory: Path, gnupghome: Path, fpr: str, label: str, fields: dict[str, str] | None = None
) -> None:
    """Release (with `fields` such as Suite and Codename), InRelease and Release.gpg."""
    env = {"GNUPGHOME": str(gnupghome), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    options = []
    for field, value in {"Origin": label, "Label": label, **(fields or {})}.items():
        options += ["-o", f"APT::FTPArchive::Release::{field}={value}"]
    release = run(
        ["apt-ftparchive", *options, "release", "."], cwd=directory, capture_output=True, env=env
    ).stdout
    (directory / "Release").write_text(release)
    for args, name in ((["--clearsign"], "InRelease"), (["-abs"], "Release.gpg")):
        target = directory / name
        target.unlink(missing_ok=True)
        run(
            ["gpg", "--batch", "--yes", "--local-user", fpr, *args, "-o", str(target), "Release"],
            cwd=directory,
            env=env,
        )


def export_key(gnupghome: Path, fpr: str, target: Path) -> None:
    env = {"GNUPGHOME": str(gnupghome), "PATH": "/usr/bin:/bin"}
    armored = run(
        ["gpg", "--batch", "--armor", "--export", fpr], env=env, capture_output=True
    ).stdout
    target.write_text(armored)


def index_and_sign(repo: Path, gnupghome: Path, key: tuple[str, str], label: str) -> None:
    """A flat repository (NVIDIA's layout): Packages, Release and the key (file name, fingerprint)
    in one directory."""
    name, fpr = key
    env = {"GNUPGHOME": str(gnupghome), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    write_packages(repo, ".", repo, env)
    release_and_sign(repo, gnupghome, fpr, label)
    export_key(gnupghome, fpr, repo / name)


def build_docker(manifest: list[dict], www: Path, gnupghome: Path, fpr: str) -> int:
    """Docker's layout: <www>/docker/linux/<distro>/dists/<codename>/ with the pool inside it, one
    `stable` component, the key as <www>/docker/linux/<distro>/gpg. A version may carry {suffix}
    (Docker's per-suite "debian.12~bookworm"); a package without `suites` is in every suite."""
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    built = 0
    for suite, suffix in DOCKER_SUITES.items():
        distro, codename = suite.split("/")
        archive = www / "docker/linux" / distro
        dist = archive / "dists" / codename
        pool = dist / "pool/stable/amd64"
        pool.mkdir(parents=True, exist_ok=True)
        for pkg in manifest:
            if suite not in pkg.get("suites", DOCKER_SUITES):
                continue
            for version in pkg["versions"]:
                build_deb(pkg, str(version).format(suffix=suffix), suite, pool, vendor="Docker")
        write_packages(
            archive,
            str(pool.relative_to(archive)),
            dist / "stable/binary-amd64",
            env,
        )
        fields = {
            "Suite": codename,
            "Codename": codename,
            "Components": "stable",
            "Architectures": "amd64",
        }
        release_and_sign(dist, gnupghome, fpr, "Docker stand-in", fields)
        export_key(gnupghome, fpr, archive / "gpg")
        built += 1
    return built


def build_toolkit(manifest: list[dict], www: Path, gnupghome: Path, fpr: str) -> int:
    """NVIDIA's libnvidia-container layout: one flat repository per architecture for every
    distro, <www>/libnvidia-container/stable/deb/amd64/, the key as
    <www>/libnvidia-container/gpgkey."""
    base = www / "libnvidia-container"
    repo = base / "stable/deb/amd64"
    repo.mkdir(parents=True, exist_ok=True)
    for pkg in manifest:
        for version in pkg["versions"]:
            build_deb(pkg, str(version), "all", repo)
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    write_packages(repo, ".", repo, env)
    release_and_sign(repo, gnupghome, fpr, "NVIDIA container toolkit stand-in")
    export_key(gnupghome, fpr, base / "gpgkey")
    return 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument(
        "--new-key",
        action="store_true",
        help="generate a fresh throwaway signing key (the test suite does, once per run)",
    )
    args = ap.parse_args()

    args.work = args.work.resolve()
    manifest = yaml.safe_load(args.manifest.read_text())
    www = args.work / "www"
    gnupghome = args.work / "gnupg"
    for stale in (
        www / "repos",
        www / "ubuntu-archive",
        www / "docker",
        www / "libnvidia-container",
    ):
        shutil.rmtree(stale, ignore_errors=True)
    env_file = args.work / "standin.env"
    key_names = list(dict.fromkeys(manifest["nvidia_keys"].values()))
    if args.new_key or not env_file.exists():
        shutil.rmtree(gnupghome, ignore_errors=True)
        keys = {name: make_key(gnupghome, name) for name in key_names}
    else:  # keep the keys of this work dir so molecule runs already in flight stay valid
        keys = json.loads(shlex.split(env_file.read_text().split("STANDIN_NVIDIA_KEYS=", 1)[1])[0])
    fpr = keys[key_names[0]]

    repos: dict[Path, tuple[str, tuple[str, str]]] = {}
    for section, base, label in (
        ("nvidia", www / "repos", "NVIDIA stand-in"),
        ("ubuntu_archive", www / "ubuntu-archive", "Ubuntu stand-in"),
    ):
        for pkg in manifest.get(section, []):
            distros = pkg.get("distros", list(manifest["nvidia_keys"]))
            for distro in distros:
                repo = base / distro / "x86_64"
                repo.mkdir(parents=True, exist_ok=True)
                name = manifest["nvidia_keys"][distro] if section == "nvidia" else key_names[0]
                repos[repo] = (label, (name, keys[name]))
                for version in pkg["versions"]:
                    build_deb(pkg, expand_version(version, distro), distro, repo)
    for repo, (label, key) in repos.items():
        index_and_sign(repo, gnupghome, key, label)
    count = len(repos)
    count += build_docker(manifest.get("docker", []), www, gnupghome, fpr)
    count += build_toolkit(manifest.get("nvidia_container_toolkit", []), www, gnupghome, fpr)
    env_file.write_text(
        f"STANDIN_KEY_FPR={fpr}\nSTANDIN_NVIDIA_KEYS={shlex.quote(json.dumps(keys))}\n"
    )
    print(f"standin: {count} signed repos under {www}, keys {keys}")


if __name__ == "__main__":
    main()
