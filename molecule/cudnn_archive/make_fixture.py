#!/usr/bin/env python3
"""Build a TEST FIXTURE shaped like NVIDIA's cuDNN tarball, for the cudnn role's archive route.

cudnn-linux-x86_64-<version>_cuda12-archive.tar.xz holding <top>/include/cudnn_version.h (only
the CUDNN_MAJOR/MINOR/PATCHLEVEL defines, as in cuDNN's header), <top>/lib/libcudnn.so.<x.y.z>
with the libcudnn.so.<major> and libcudnn.so links, and a LICENSE that says it is a fixture. No
NVIDIA content. Members belong to uid/gid 1000, as in a tarball built on someone's workstation.

Prints {"path": ..., "sha256": ...} as JSON.

  make_fixture.py --out DIR --version 8.9.7.29 [--header-version 8.9.5] [--no-header]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
from pathlib import Path


def add(
    tar: tarfile.TarFile, name: str, data: bytes | None = None, link: str | None = None
) -> None:
    info = tarfile.TarInfo(name)
    info.uid = info.gid = 1000
    info.uname = info.gname = "builder"
    info.mtime = 1_700_000_000
    if link is not None:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, link, 0o777
        tar.addfile(info)
    elif data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    else:
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))


def build(out: Path, version: str, header_version: str | None, with_header: bool) -> dict:
    major, minor, patch = (header_version or version).split(".")[:3]
    lib_major, lib_minor, lib_patch = version.split(".")[:3]
    top = f"cudnn-linux-x86_64-{version}_cuda12-archive"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{top}.tar.xz"
    header = (
        "/* TEST FIXTURE: same #define layout as cuDNN's cudnn_version.h, no NVIDIA content */\n"
        f"#define CUDNN_MAJOR {major}\n"
        f"#define CUDNN_MINOR {minor}\n"
        f"#define CUDNN_PATCHLEVEL {patch}\n\n"
        "#define CUDNN_VERSION (CUDNN_MAJOR * 1000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n"
    )
    library = f"libcudnn.so.{lib_major}.{lib_minor}.{lib_patch}"
    with tarfile.open(path, "w:xz") as tar:
        add(tar, top)
        add(tar, f"{top}/LICENSE", b"TEST FIXTURE built by the gpurig test suite; not cuDNN.\n")
        add(tar, f"{top}/include")
        if with_header:
            add(tar, f"{top}/include/cudnn_version.h", header.encode())
        add(tar, f"{top}/lib")
        add(tar, f"{top}/lib/{library}", b"TEST FIXTURE, not a library\n")
        add(tar, f"{top}/lib/libcudnn.so.{lib_major}", link=library)
        add(tar, f"{top}/lib/libcudnn.so", link=f"libcudnn.so.{lib_major}")
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--version", required=True, help="four-part cuDNN version in the file name")
    ap.add_argument("--header-version", help="version the header states (default: --version)")
    ap.add_argument("--no-header", action="store_true", help="leave include/cudnn_version.h out")
    args = ap.parse_args()
    print(json.dumps(build(args.out, args.version, args.header_version, not args.no_header)))


if __name__ == "__main__":
    main()
