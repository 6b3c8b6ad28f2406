"""Bad values by kind (a version, a count, a path, an https URL, ...), refused before any change
by site.yml, upgrade-driver.yml and verify.yml.

The same aliasing as test_bad_vars.py (one inventory alias of the Debian 12 container per case, one
ansible-playbook run): each alias must fail with a message that leads with the variable and shows
the value, and the container must be unchanged. upgrade-driver.yml and verify.yml refuse their bad
values in their first tasks. tests/unit/test_variable_kinds.py tries every kind's bad values on
every variable without Ansible; tests/unit/test_preflight_kinds.py runs these playbooks against the
controller itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_bad_vars import INSTANCE, alias, write_inventory

PROJECT = Path(__file__).resolve().parents[3]

# id -> (variables, variable the message leads with, the value as the message shows it)
CASES: dict[str, tuple[dict, str, str]] = {
    "horovod build jobs 0": ({"horovod_build_jobs": 0}, "horovod_build_jobs", "(got 0)"),
    "horovod build jobs -1": ({"horovod_build_jobs": -1}, "horovod_build_jobs", "(got -1)"),
    "nccl-tests build jobs 0": ({"nccl_tests_build_jobs": 0}, "nccl_tests_build_jobs", "(got 0)"),
    "torch version newest": (
        {"python_env_torch_version": "newest"},
        "python_env_torch_version",
        '(got "newest")',
    ),
    "conda version with a command": (
        {"conda_version": "26.3.2-3;reboot"},
        "conda_version",
        '(got "26.3.2-3;reboot")',
    ),
    # The scenario's group_vars allow http for the stand-in's repos; these aliases take it back.
    "conda channel alias over http": (
        {"conda_channel_alias": "http://conda.mirror.example", "conda_installer_allow_http": False},
        "conda_channel_alias",
        '(got "http://conda.mirror.example")',
    ),
    "nccl-tests URL over http": (
        {
            "nccl_tests_url": "http://mirror.example/nccl-tests.tar.gz",
            "nccl_tests_allow_http": False,
        },
        "nccl_tests_url",
        '(got "http://mirror.example/nccl-tests.tar.gz")',
    ),
    "compute capability with a dot": (
        {"horovod_cuda_cc_list": ["9.0"]},
        "horovod_cuda_cc_list",
        '(got ["9.0"])',
    ),
}


@pytest.fixture(scope="module")
def instance(host):
    if host.backend.get_hostname() != INSTANCE:
        pytest.skip("single-instance scenario")
    return host


@pytest.fixture(scope="module")
def site_run(instance, playbook, host_snapshot, tmp_path_factory):
    inventory = write_inventory(
        tmp_path_factory.mktemp("bad_kinds") / "cases.yml",
        {case: variables for case, (variables, _, _) in CASES.items()},
    )
    before = host_snapshot(instance)
    run = playbook(PROJECT / "site.yml", inventories=[inventory], limit="cases")
    return run, before, host_snapshot(instance)


@pytest.mark.parametrize("case", list(CASES))
def test_site_refuses_leading_with_the_variable(site_run, case):
    run, _, _ = site_run
    _, variable, shown = CASES[case]
    message = run.failures.get(alias(case))
    assert message is not None, f"{case}: site.yml did not fail ({run.stderr[-2000:]})"
    assert message.startswith(variable + " "), message
    assert shown in message, message


def test_site_changed_nothing(site_run):
    run, before, after = site_run
    assert run.rc != 0
    assert all(stats["changed"] == 0 for stats in run.stats.values())
    assert after == before


def test_upgrade_driver_refuses_a_bad_serial_before_any_change(instance, refused):
    message = refused(
        instance, PROJECT / "playbooks" / "upgrade-driver.yml", {"upgrade_driver_serial": "abc"}
    )
    assert message.startswith("upgrade_driver_serial must be")
    assert '(got "abc")' in message


def test_verify_refuses_a_bad_value_before_any_check(instance, refused):
    message = refused(instance, PROJECT / "playbooks" / "verify.yml", {"horovod_build_jobs": 0})
    assert message == "horovod_build_jobs must be a whole number, at least 1 (got 0)."
