"""A host set up under the project's former name (prepare.yml) keeps no file of ours of that name.

site.yml moves each such file to its present name, or removes it where the present one is already
there; what the files held stays (a cached wheel, here). GPUStack's files, which share the name,
stay as they were.
"""

from __future__ import annotations

import yaml
from conftest import PROJECT_DIR

(ADOPT,) = yaml.safe_load((PROJECT_DIR / "playbooks/tasks/former-name.yml").read_text())
FORMER = ADOPT["vars"]["former_name"]


# GPUStack's, which prepare.yml writes beside ours: another project's, never moved or removed.
GPUSTACK = {
    f"/var/lib/{FORMER}": None,
    f"/var/lib/{FORMER}/initial_admin_password": "not ours\n",
    f"/etc/systemd/system/{FORMER}.service": "[Service]\nExecStart=/usr/local/bin/gpustack start\n",
}


def test_no_file_of_ours_keeps_the_former_name(host) -> None:
    found = host.run(f"find / -xdev -path '*{FORMER}*' -print")
    assert found.rc == 0, found.stderr
    assert sorted(found.stdout.split()) == sorted(GPUSTACK)


def test_gpustacks_own_files_stay_as_they_were(host) -> None:
    for path, content in GPUSTACK.items():
        if content is not None:
            assert host.file(path).content_string == content, path


def test_what_the_former_files_held_stays_under_the_present_name(host) -> None:
    assert host.file("/var/cache/gpurig/horovod-wheels/key/kept.whl").content_string == "kept\n"
    assert host.file("/var/lib/gpurig/nvidia_repo/staged").exists
    assert host.file("/opt/miniforge3/.gpurig-miniforge.json").exists
    # rewritten by the roles after the move
    assert "gpurig role cuda_toolkit" in host.file("/etc/profile.d/gpurig-cuda.sh").content_string
    assert (
        "gpurig, role package_hold"
        in host.file("/etc/apt/apt.conf.d/51gpurig-nvidia-driver-blacklist").content_string
    )
