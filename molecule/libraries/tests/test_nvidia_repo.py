"""State nvidia_repo leaves on a host that older NVIDIA setups had configured."""

import json
import os

from apt_sources import deb822  # molecule/apt_sources.py, beside molecule/conftest.py

SOURCE = "/etc/apt/sources.list.d/nvidia-cuda.sources"
KEYRING = "/etc/apt/keyrings/nvidia-cuda.asc"


def distro(host):
    return "debian12" if host.system_info.distribution == "debian" else "ubuntu2004"


def repo_url(host):
    return f"{os.environ['STANDIN_URL']}/repos/{distro(host)}/x86_64/"


def test_source_is_one_deb822_entry_signed_by_the_keyring(host):
    source = host.file(SOURCE)
    assert source.is_file
    assert source.mode == 0o644
    fields = deb822(source.content_string)
    assert fields["Types"] == "deb"
    assert fields["URIs"] == repo_url(host)
    assert fields["Suites"] == "/"
    assert "Components" not in fields
    assert fields["Signed-By"] == KEYRING


def test_keyring_holds_exactly_the_expected_key(host, fingerprints, compat):
    keyring = host.file(KEYRING)
    assert keyring.is_file
    assert keyring.user == "root"
    assert keyring.mode == 0o644
    # The stand-in's throwaway key for the key file compat.yml names for this distro.
    keys = json.loads(os.environ["STANDIN_NVIDIA_KEYS"])
    assert fingerprints(host, KEYRING) == [keys[compat["distros"][distro(host)]["key"]]]


def test_apt_uses_the_repository_without_errors(host, apt_problems):
    assert apt_problems(host) == []
    # apt only lists packages from a repository whose signature it verified.
    policy = host.run_expect([0], "apt-cache policy cuda-drivers-535").stdout
    # Flat repositories are listed without the trailing slash: "500 <url-without-/>  Packages".
    assert f"500 {repo_url(host).rstrip('/')}  Packages" in policy
    assert "Candidate: (none)" not in policy


def test_repository_defined_exactly_once(host):
    targets = host.run_expect(
        [0], "apt-get indextargets --format '$(REPO_URI) $(TARGET_OF)'"
    ).stdout
    assert sorted(
        set(line for line in targets.splitlines() if line.startswith(repo_url(host)))
    ) == [f"{repo_url(host)} deb"]
    defining = host.run(
        f"grep -rlF '/{distro(host)}/x86_64' /etc/apt/sources.list /etc/apt/sources.list.d"
    ).stdout
    assert defining.split() == [SOURCE]


def test_older_definitions_removed(host):
    assert not host.file(f"/etc/apt/sources.list.d/cuda-{distro(host)}-x86_64.list").exists
    assert not host.file(
        f"/etc/apt/sources.list.d/developer_download_nvidia_com_compute_cuda_repos_{distro(host)}_x86_64.list"
    ).exists
    main_list = host.file("/etc/apt/sources.list").content_string
    assert "machine-learning" not in main_list
    # The distribution's own lines stay.
    assert "bookworm main" in main_list


def test_legacy_key_removed_and_unrelated_key_kept(host, fingerprints):
    legacy = host.file("/root/legacy-key.fpr").content_string.strip()
    unrelated = host.file("/root/unrelated-key.fpr").content_string.strip()
    assert fingerprints(host, "/etc/apt/trusted.gpg") == [unrelated]
    assert legacy not in fingerprints(host, "/etc/apt/trusted.gpg")
    assert not host.file("/etc/apt/trusted.gpg.d/cuda-legacy.gpg").exists


def test_downloads_went_through_the_configured_proxy(host, compat):
    conf = host.run_expect([0], "apt-config dump Acquire::http::Proxy").stdout
    assert 'Acquire::http::Proxy::172.17.0.1 "http://127.0.0.1:3128";' in conf
    log = host.file("/var/log/standin-forward-proxy.log").content_string.splitlines()
    assert f"GET {repo_url(host)}{compat['distros'][distro(host)]['key']}" in log
    assert any(line.startswith(f"GET {repo_url(host)}") and "Release" in line for line in log)
