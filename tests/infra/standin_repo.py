#!/usr/bin/env python3
"""Build the signed, local stand-in for NVIDIA's CUDA apt repository.

TEST FIXTURE. The packages built here carry NVIDIA's package names and version strings but
contain no NVIDIA software: each holds a README that says it is a fixture, plus the few files
(headers, directories, units) whose *layout* the roles rely on. Tests may assert on state the
roles create (sources, pins, holds, symlinks, which versions apt installed) but never on text
that a fixture invented.

Layout, as on NVIDIA's server (flat repos, one per distro):
    <www>/repos/<distro>/x86_64/{*.deb,Packages,Packages.gz,Release,InRelease,Release.gpg,3bf863cc.pub}
plus, for Ubuntu's own -server driver packages, a stand-in of Canonical's archive:
    <www>/ubuntu-archive/<distro>/{...same flat layout...}

The signing key is generated at build time (throwaway, no passphrase) and exported as
3bf863cc.pub in every repo directory; its fingerprint is written to <work>/standin.env.

Usage: standin_repo.py --manifest tests/standin/packages.yml --work .work
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

DISTROS = ("ubuntu2004", "ubuntu2204", "ubuntu2404", "debian12", "debian13")
FIXTURE_NOTE = (
    "TEST FIXTURE built by tests/infra/standin_repo.py for the gpustack test suite.\n"
    "It stands in for NVIDIA's package {name} {version} and contains no NVIDIA software.\n"
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


def build_deb(pkg: dict, version: str, distro: str, out: Path) -> Path:
    name = pkg["name"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        debian = root / "DEBIAN"
        debian.mkdir(parents=True)
        doc = root / "usr/share/doc" / name
        doc.mkdir(parents=True)
        (doc / "TEST-FIXTURE").write_text(FIXTURE_NOTE.format(name=name, version=version))
        upstream = version.split("-")[0]
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
            "Maintainer: gpustack test suite <fixtures@invalid>",
            f"Section: {pkg.get('section', 'multiverse/libs')}",
            "Priority: optional",
        ]
        for field in ("depends", "recommends", "provides", "conflicts", "replaces", "breaks"):
            value = pkg.get(field)
            if value:
                value = value if isinstance(value, str) else ", ".join(value)
                control.append(f"{field.capitalize()}: {value.format(**subs)}")
        control.append(f"Description: TEST FIXTURE standing in for {name}")
        control.append(" Built by the gpustack test suite; contains no NVIDIA software.")
        (debian / "control").write_text("\n".join(control) + "\n")
        for script in ("postinst", "prerm", "postrm"):
            if pkg.get(script):
                path = debian / script
                path.write_text("#!/bin/sh\nset -e\n" + pkg[script].format(**subs))
                path.chmod(0o755)
        deb = out / f"{name}_{version}_{pkg.get('architecture', 'amd64')}.deb"
        run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root), str(deb)],
            stdout=subprocess.DEVNULL,
        )
        return deb


def make_key(gnupghome: Path) -> str:
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
            "gpustack test stand-in repo <standin@invalid>",
            "rsa3072",
            "sign",
            "1d",
        ],
        env=env,
    )
    out = run(
        ["gpg", "--batch", "--with-colons", "--list-secret-keys"], env=env, capture_output=True
    ).stdout
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


def index_and_sign(repo: Path, gnupghome: Path, fpr: str, label: str) -> None:
    env = {"GNUPGHOME": str(gnupghome), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    packages = run(
        ["dpkg-scanpackages", "--multiversion", "."], cwd=repo, capture_output=True, env=env
    ).stdout
    (repo / "Packages").write_text(packages)
    with gzip.open(repo / "Packages.gz", "wt") as fh:
        fh.write(packages)
    release = run(
        [
            "apt-ftparchive",
            "-o",
            f"APT::FTPArchive::Release::Origin={label}",
            "-o",
            f"APT::FTPArchive::Release::Label={label}",
            "release",
            ".",
        ],
        cwd=repo,
        capture_output=True,
        env=env,
    ).stdout
    (repo / "Release").write_text(release)
    for args, name in ((["--clearsign"], "InRelease"), (["-abs"], "Release.gpg")):
        target = repo / name
        target.unlink(missing_ok=True)
        run(
            ["gpg", "--batch", "--yes", "--local-user", fpr, *args, "-o", str(target), "Release"],
            cwd=repo,
            env=env,
        )
    armored = run(
        ["gpg", "--batch", "--armor", "--export", fpr], env=env, capture_output=True
    ).stdout
    (repo / "3bf863cc.pub").write_text(armored)


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
    for stale in (www / "repos", www / "ubuntu-archive"):
        shutil.rmtree(stale, ignore_errors=True)
    env_file = args.work / "standin.env"
    if args.new_key or not env_file.exists():
        shutil.rmtree(gnupghome, ignore_errors=True)
        fpr = make_key(gnupghome)
    else:  # keep the key of this work dir so molecule runs already in flight stay valid
        fpr = env_file.read_text().strip().split("=", 1)[1]

    repos: dict[Path, str] = {}
    for section, base, label in (
        ("nvidia", www / "repos", "NVIDIA stand-in"),
        ("ubuntu_archive", www / "ubuntu-archive", "Ubuntu stand-in"),
    ):
        for pkg in manifest.get(section, []):
            distros = pkg.get("distros", DISTROS)
            for distro in distros:
                repo = base / distro / "x86_64"
                repo.mkdir(parents=True, exist_ok=True)
                repos[repo] = label
                for version in pkg["versions"]:
                    build_deb(pkg, expand_version(version, distro), distro, repo)
    for repo, label in repos.items():
        index_and_sign(repo, gnupghome, fpr, label)
    (args.work / "standin.env").write_text(f"STANDIN_KEY_FPR={fpr}\n")
    print(f"standin: {len(repos)} signed repos under {www}, key {fpr}")


if __name__ == "__main__":
    main()
