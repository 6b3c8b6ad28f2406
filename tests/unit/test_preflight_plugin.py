"""filter_plugins/gpurig_preflight.py: which roles site.yml's preflight checks for a run's tags,
and what it says about variables no role declares or that were renamed.

The pure functions are checked against site.yml's own role table;
two real ansible-playbook runs (connection local) show site.yml wiring them to Ansible's
ansible_run_tags / ansible_skip_tags. Neither runs a role, so this machine is left as it was: in
the first, the one role the tags leave is off for every host; the second selects it with --tags
preflight alone, which runs the preflight and nothing else.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
spec = importlib.util.spec_from_file_location(
    "gpurig_preflight", REPO / "filter_plugins/gpurig_preflight.py"
)
preflight = importlib.util.module_from_spec(spec)
spec.loader.exec_module(preflight)

PLAY = yaml.safe_load((REPO / "site.yml").read_text())[0]
GROUPS: dict[str, str] = PLAY["vars"]["site_role_groups"]
PRE_TASKS = {task["name"] for task in PLAY["pre_tasks"] if "preflight" in task.get("tags", [])}
NVIDIA = [role for role, group in GROUPS.items() if group == "nvidia"]
PYTHON = [role for role, group in GROUPS.items() if group == "python"]
DECLARED = ["nvidia_driver_version", "nvidia_driver_source", "nvidia_driver_allow_eol_branch"]


def selected(run_tags, skip_tags=(), disabled=("container_runtime",)):
    return preflight.selected_roles(GROUPS, run_tags, skip_tags, disabled)


# --- which roles a run selects --------------------------------------------------------------------


def test_without_tags_every_role_but_the_ones_off_is_selected():
    # ansible_run_tags is ["all"] when no --tags is given
    assert selected(["all"]) == [role for role in GROUPS if role != "container_runtime"]
    assert selected(["all"], disabled=()) == list(GROUPS)
    assert selected(["preflight"]) == selected(["tagged"]) == selected(["all"])


def test_tags_select_by_role_name_or_group_in_play_order():
    assert selected(["nvidia"]) == NVIDIA
    assert selected(["cudnn"]) == ["cudnn"]
    assert selected(["horovod", "nccl"]) == ["nccl", "horovod"]
    assert selected(["python", "nccl"]) == ["nccl", *PYTHON]
    assert selected(["no_such_tag"]) == []


def test_skip_tags_drop_roles_by_name_or_group():
    assert selected(["all"], ["python"]) == NVIDIA
    assert selected(["nvidia"], ["cudnn"]) == [role for role in NVIDIA if role != "cudnn"]
    assert selected(["python", "nccl"], ["horovod"]) == ["nccl", "conda", "python_env"]
    assert selected(["preflight"], ["nvidia", "python"]) == []
    assert selected(["preflight"], ["nvidia", "python"], disabled=()) == ["container_runtime"]


def test_a_role_off_for_the_host_is_not_selected_even_when_tagged():
    assert selected(["containers"]) == []
    assert selected(["container_runtime", "conda"]) == ["conda"]
    assert selected(["containers"], disabled=()) == ["container_runtime"]
    # ... but the tags did name it: site.yml says so
    assert preflight.tagged_roles(GROUPS, ["containers", "conda"]) == ["container_runtime", "conda"]
    assert preflight.tagged_roles(GROUPS, ["all"]) == []


# --- variables no role declares -------------------------------------------------------------------


def test_prefixes_are_the_first_word_of_each_role():
    assert preflight.role_prefixes(["nvidia_driver", "nvidia_repo", "cudnn", "package_hold"]) == [
        "cudnn",
        "nvidia",
        "package",
    ]


def test_undeclared_names_carry_a_role_prefix_and_no_role_declares_them():
    given = [
        "nvidia_driver_brnach",  # misspelt
        "gpurig_driver_branch",  # declared
        "cuda_tolkit_version",  # misspelt
        "ansible_host",  # not a role's
        "gpurig_strict_vars",  # not a role's
        "nvidia",  # the prefix alone, no underscore
        "scratch_dir",  # no role's prefix, like no declared name: the user's own
    ]
    undeclared = preflight.undeclared_variables(given, DECLARED, ["nvidia_driver", "cuda_toolkit"])
    assert undeclared == ["cuda_tolkit_version", "nvidia_driver_brnach"]


SWITCHES = ["gpurig_strict_vars", "gpurig_container_runtime", "gpurig_contact_checks"]


def test_a_misspelt_prefix_or_switch_is_named_too():
    given = [
        "nvida_driver_branch",  # the role's prefix misspelt
        "nvidiadriver_branch",  # its underscore dropped
        "gpurig_strict_var",  # a switch misspelt
        "gpurig_strict_vars",  # the switch itself
        "gpurig_debug",  # the project's prefix, no such switch
        "ansible_host",
        "scratch_dir",
    ]
    roles = ["nvidia_driver", "cuda_toolkit"]
    undeclared = preflight.undeclared_variables(given, DECLARED, roles, SWITCHES)
    assert undeclared == [
        "gpurig_debug",
        "gpurig_strict_var",
        "nvida_driver_branch",
        "nvidiadriver_branch",
    ]
    known = DECLARED + SWITCHES
    # its former name is the closest: answered with the present one
    assert preflight.misspelling_hint(["nvida_driver_branch"], known) == (
        "nvida_driver_branch: did you mean gpurig_driver_branch? "
    )
    assert preflight.did_you_mean("gpurig_strict_var", known) == ["gpurig_strict_vars"]
    assert preflight.did_you_mean("gpurig_debug", known) == []


def spec_options(role: str) -> list[str]:
    entry_points = yaml.safe_load((REPO / f"roles/{role}/meta/argument_specs.yml").read_text())
    return [name for spec in entry_points["argument_specs"].values() for name in spec["options"]]


def test_the_filters_compare_with_every_role_s_argument_spec():
    filters = preflight.FilterModule().filters()
    # every role with an argument spec, those that only other roles call included
    helpers = [p.parent.parent.name for p in REPO.glob("roles/*/meta/argument_specs.yml")]
    helpers = sorted(set(helpers) - set(GROUPS))
    assert "package_hold" in helpers
    declared = [spec_options(role)[0] for role in [*GROUPS, *helpers]]
    misspelt = [name + "x" for name in declared]
    assert filters["gpurig_undeclared_variables"](declared + misspelt + ["ansible_host"]) == sorted(
        misspelt
    )
    message = filters["gpurig_undeclared_message"](["nvidia_driver_brnach"], strict=True)
    assert message.endswith("nvidia_driver_brnach: did you mean gpurig_driver_branch? ")
    # site.yml passes its switches: a misspelling of one is named, with the switch it may mean
    assert filters["gpurig_undeclared_variables"](["gpurig_strict_var"], SWITCHES) == [
        "gpurig_strict_var"
    ]
    message = filters["gpurig_undeclared_message"](["gpurig_strict_var"], SWITCHES)
    assert "gpurig_strict_var: did you mean gpurig_strict_vars?" in message


def test_a_typing_slip_suggests_only_the_name_with_the_same_letters():
    assert preflight.did_you_mean("nvidia_drvier_source", DECLARED) == ["nvidia_driver_source"]


def test_without_one_the_same_first_and_last_word_are_offered():
    assert preflight.did_you_mean("nvidia_drv_branch", DECLARED) == [
        "nvidia_driver_allow_eol_branch"
    ]


def test_a_name_two_entry_points_declare_is_suggested_once():
    assert preflight.did_you_mean("nvidia_driver_soruce", DECLARED + DECLARED) == [
        "nvidia_driver_source"
    ]


def test_nothing_alike_suggests_nothing():
    assert preflight.did_you_mean("nccl_version", DECLARED) == []


def test_the_warning_names_the_variable_and_what_it_may_mean():
    assert preflight.undeclared_message(["nvidia_driver_brnach"], DECLARED) == (
        "WARNING: nvidia_driver_brnach is set but no role declares it (a misspelling? nothing reads"
        " it). nvidia_driver_brnach: did you mean gpurig_driver_branch? Set gpurig_strict_vars:"
        " true to stop on this."
    )


def test_the_refusal_names_each_variable_and_skips_those_without_a_suggestion():
    names = ["nccl_foo", "nvidia_drv_branch"]
    assert preflight.undeclared_message(names, DECLARED, strict=True) == (
        "nccl_foo, nvidia_drv_branch: set, but no role declares them (gpurig_strict_vars is"
        " true). nvidia_drv_branch: did you mean nvidia_driver_allow_eol_branch or"
        " gpurig_driver_branch? "
    )


# --- variables renamed --------------------------------------------------------------------------


def test_a_former_name_is_refused_with_its_present_one():
    assert preflight.renamed_message(["gpurig_driver_branch", "ansible_host"]) == ""
    assert preflight.renamed_message(
        ["python_env_path", "nvidia_driver_branch", "ansible_host"]
    ) == (
        "nvidia_driver_branch, python_env_path: renamed, so the value given would be ignored"
        " (nvidia_driver_branch is now gpurig_driver_branch; python_env_path is now"
        " gpurig_env_path). Set the new name instead (python_env_name and python_env_venv_root: set"
        " gpurig_env_path to the whole path)."
    )


def test_a_former_name_is_not_called_undeclared_but_its_misspelling_gets_the_present_one():
    assert (
        preflight.undeclared_variables(["nvidia_driver_branch"], DECLARED, ["nvidia_driver"]) == []
    )
    assert preflight.misspelling_hint(["nvidia_driver_brnach"], DECLARED) == (
        "nvidia_driver_brnach: did you mean gpurig_driver_branch? "
    )


def test_every_present_name_is_declared():
    declared = set(preflight.declared_variables())
    assert set(preflight.RENAMED.values()) <= declared
    assert not set(preflight.RENAMED) & declared


# --- site.yml wired to Ansible's tags -------------------------------------------------------------

# Each run: (its hosts, its tags). --tags preflight,containers selects every role and --skip-tags
# leaves only container_runtime, which is off on all three hosts of the first run, so no role runs
# there. The second run's host has it on, and --tags preflight selects it for the preflight without
# running it (no role is tagged preflight).
RUNS = [
    (
        {
            "misspelt": {"nvidia_driver_brnach": "550"},
            "misspelt-strict": {"nvidia_driver_brnach": "550", "gpurig_strict_vars": True},
            "renamed": {"cuda_toolkit_version": "12.2"},
            "misprefixed": {"nvida_driver_branch": "550", "gpurig_strict_var": True},
        },
        ["--tags", "preflight,containers", "--skip-tags", "nvidia,python"],
    ),
    (
        {
            "containers-on": {"gpurig_container_runtime": True},
            "hold-dir-relative": {
                "gpurig_container_runtime": True,
                "package_hold_apt_conf_dir": "etc/apt/apt.conf.d",
            },
        },
        ["--tags", "preflight", "--skip-tags", "nvidia,python"],
    ),
]


CONTACT_OFF = ["-e", "gpurig_contact_checks=false"]


def run_site(inventory: Path, hosts: dict, args: list[str]) -> dict:
    """One site.yml run over HOSTS (connection local): {task name: {host: result}}."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(
        yaml.safe_dump({"gpu_nodes": {"hosts": {h: {**local, **v} for h, v in hosts.items()}}})
    )
    # stdout is parsed as JSON: no callback of the caller's environment may write to it.
    env = {
        **{k: v for k, v in os.environ.items() if k != "ANSIBLE_CALLBACKS_ENABLED"},
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_NOCOLOR": "1",
    }
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), *args, *CONTACT_OFF, str(REPO / "site.yml")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.stdout.startswith("{"), proc.stdout[-2000:] + proc.stderr[-2000:]
    plays = json.loads(proc.stdout)["plays"]
    # Every task after site.yml's preflight (whose checks read and change nothing) was skipped on
    # every host: neither the former name's adoption nor a role ran here. Ansible tags a role's own
    # argument-spec check "always", so --tags preflight runs it; it only reads.
    tasks = plays[0]["tasks"]
    names = [t["task"]["name"] for t in tasks]
    last = max(i for i, name in enumerate(names) if name in PRE_TASKS)
    ran = [
        (t["task"]["name"], host)
        for t in tasks[last + 1 :]
        if "Validating arguments against arg spec" not in t["task"]["name"]
        for host, result in t["hosts"].items()
        if not result.get("skipped")
    ]
    assert not ran, f"a role ran on this machine: {ran}"
    return {task["task"]["name"]: task["hosts"] for task in tasks}


@pytest.fixture(scope="module")
def preflight_run(tmp_path_factory):
    if not PLAYBOOK.exists():
        pytest.skip("needs ansible-playbook beside this Python")
    results: dict[str, dict] = {}
    for number, (hosts, args) in enumerate(RUNS):
        inventory = tmp_path_factory.mktemp(f"preflight{number}") / "hosts.yml"
        for task, by_host in run_site(inventory, hosts, args).items():
            results.setdefault(task, {}).update(by_host)
    return results


def shown(results: dict, host: str) -> str | None:
    result = results.get(host, {})
    return None if result.get("skipped") or not result else result.get("msg")


def test_site_yml_names_the_misspelling_and_refuses_it_when_strict(preflight_run):
    warned = preflight_run["Name the variables that look like a role's but that no role declares."]
    assert shown(warned, "misspelt") == preflight.undeclared_message(
        ["nvidia_driver_brnach"], spec_options("nvidia_driver")
    )
    assert shown(warned, "misspelt-strict") is None and shown(warned, "renamed") is None
    refused = preflight_run[
        "Refuse variables that look like a role's but that no role declares (gpurig_strict_vars)."
    ]
    assert refused["misspelt-strict"]["failed"]
    assert "did you mean gpurig_driver_branch" in refused["misspelt-strict"]["msg"]


def test_site_yml_names_a_misspelt_prefix_and_a_misspelt_switch(preflight_run):
    warned = preflight_run["Name the variables that look like a role's but that no role declares."]
    message = shown(warned, "misprefixed")
    assert "nvida_driver_branch: did you mean gpurig_driver_branch?" in message
    assert "gpurig_strict_var: did you mean gpurig_strict_vars?" in message


def test_site_yml_refuses_a_former_name_before_any_role_runs(preflight_run):
    refused = preflight_run[
        "Refuse variables given under a former name (their value would be ignored)."
    ]
    assert refused["renamed"]["failed"]
    assert "cuda_toolkit_version is now gpurig_cuda_version" in refused["renamed"]["msg"]
    assert not refused["misspelt"].get("failed")


def test_site_yml_checks_only_the_roles_the_tags_leave(preflight_run):
    noted = preflight_run["Say that the tags select a role that is off for this host."]
    assert shown(noted, "misspelt").startswith("NOTE: --tags selects container_runtime")
    assert shown(noted, "containers-on") is None
    checked = preflight_run[
        "Check the variables given for each role against the role's argument spec."
    ]
    roles = {
        host: [item["item"] for item in result.get("results", [])]
        for host, result in checked.items()
    }
    # the selected role, then the helper roles it calls (their given variables only)
    assert roles["containers-on"] == ["container_runtime", "gpurig", "package_hold", "apt_source"]
    assert roles["misspelt"] == [] and "renamed" not in roles


def test_site_yml_refuses_a_helper_role_s_variable_before_any_role_runs(preflight_run):
    kinds = preflight_run["Check the variables given for each role by their kind."]
    refused = kinds["hold-dir-relative"]
    assert refused["failed"]
    message = " ".join(r.get("msg", "") for r in refused["results"] if r.get("failed"))
    assert "package_hold_apt_conf_dir" in message and "etc/apt/apt.conf.d" in message
    assert not kinds["containers-on"].get("failed")
