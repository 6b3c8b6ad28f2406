"""Every role variable has a kind, and each kind refuses the bad values of its kind.

filter_plugins/variable_kinds.yml names the kind of every option of every role's
meta/argument_specs.yml; filter_plugins/gpurig_kinds.py holds the checks every role's validate.yml
runs first. These tests call the same functions the play calls, with no Ansible run
(tests/unit/test_preflight_kinds.py runs the real preflight). A new option without a kind fails
test_every_option_has_a_kind.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def load_plugin(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


kinds = load_plugin(REPO / "filter_plugins" / "gpurig_kinds.py", "gpurig_kinds_under_test")

SPECS = kinds.argument_specs()
TABLE = kinds.variable_kinds()
# The playbooks' own switches in the table: not role options.
PLAYBOOK_SWITCHES = {
    "gpurig_strict_vars": "site.yml",
    "gpurig_container_runtime": "site.yml",
    "gpurig_contact_checks": "site.yml",
    "upgrade_driver_serial": "playbooks/upgrade-driver.yml",
}
OPTIONS = sorted({(role, name) for role, options in SPECS.items() for name in options})
# Each role's defaults, from defaults/main.yml (the spec states no default).
DEFAULTS = {
    role: yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    for role in SPECS
}
VARIABLES = sorted({name for _, name in OPTIONS} | set(PLAYBOOK_SWITCHES))

# Values each kind must accept (the bad ones are in KINDS[kind].bad).
GOOD = {
    "bool": [True, False, "true", "no", "yes"],
    "allow_http": [True, False, "false"],
    "auto_or_bool": ["auto", True, False],
    "mapping": [{}, {"a": 1}],
    "mappings": [[], [{"name": "libnccl2"}]],
    "pep440": ["2.15.0", "2.15.0+cu126", "26.3.2-3", "0.28.1", "3.11", "1!2.0rc1.post2.dev3"],
    "debian_version": [
        "2.28.3-1",
        "1.20.0-1",
        "12.9.1-1",
        "5:29.4.1-1~debian.12~bookworm",
        "26.1.5+dfsg1-9+deb13u1",
    ],
    "release": ["29.4.1", "9.13.0.50", "3.11", "2.19.6"],
    "cuda_release": ["12.9", "13.0", "12.10"],
    "driver_branch": ["580", 580, "595"],
    "driver_branches": [[], ["535", 580]],
    "driver_version": ["580.95.05", "535.183.01", "580.105"],
    "count": [1, 16, "4"],
    "seconds": [0, 3600, "60"],
    "serial": [1, "3", "25%", "100%"],
    "abs_path": ["/opt/miniforge3", "/etc/apt/keyrings/nvidia-cuda.asc", "/"],
    "file_name": ["nvidia-cuda", "3bf863cc.pub", "train"],
    "file_names": [[], ["docker", "nvidia-container-toolkit"], ["amd64"], ["172.17.0.1"]],
    "abs_paths": [[], ["/usr/share/keyrings/docker-archive-keyring.gpg"]],
    "text": ["/", "bookworm", "(download\\.docker\\.com/linux/)", "NCCL 2.28.3-1 (nccl_version)"],
    "https_url": [
        "https://developer.download.nvidia.com/compute/cuda/repos",
        "https://mirror.example:8443/x/",
    ],
    "download_url": ["https://github.com/x/y.tar.gz", "file:///srv/Miniforge3.sh"],
    "proxy_url": ["http://proxy.example:3128", "https://proxy.example/"],
    "sha256": ["85c65a240432a5bd8bf8598ac235582921a96e8a968a8a675d23419478a4ab9c", "A" * 64],
    "sha256_by_arch": [{"x86_64": "a" * 64}, {}],
    "fingerprint": [
        "EB693B3035CD5710E231E123A4B469963BF863CC",
        "eb69 3b30 35cd 5710 e231 e123 a4b4 6996 3bf8 63cc",
    ],
    "fingerprints": [[], ["AE09FE4BBD223A84B2CCFCE3F60F4B3D7FA2AF80"]],
    "fingerprints_by_key_file": [{"3bf863cc.pub": "EB693B3035CD5710E231E123A4B469963BF863CC"}],
    "package_name": ["linux-headers-6.1.0-28-amd64", "build-essential", "g++"],
    "package_names": [[], ["nvidia-driver-580", "libnccl2"]],
    "apt_packages": [[], ["build-essential", "pkg-config=1.8.1-1"]],
    "pip_requirement": [
        "horovod==0.28.1",
        "bench @ file:///srv/bench",
        "/srv/horovod-0.28.1.tar.gz",
        "pandas>=2",
    ],
    "pip_requirements": [[], ["nvidia-ml-py", "pandas", "setuptools<81"]],
    "pip_args": [[], ["--index-url", "http://mirror.example/simple", "--no-index"]],
    "compute_capabilities": [[], ["90"], ["80", "90a", "100f"], [90]],
    "conda_channels": [
        ["conda-forge"],
        ["conda-forge", "bioconda", "https://conda.mirror.example/c"],
    ],
    "cupy_package": ["cupy-cuda12x", "cupy-cuda13x"],
}

# The examples users reported: role variables accepted although they fail later.
ISSUE_EXAMPLES = [
    ("horovod_build_jobs", 0, {}),
    ("horovod_build_jobs", -1, {}),
    ("nccl_tests_build_jobs", 0, {}),
    ("nccl_tests_build_jobs", -1, {}),
    ("python_env_torch_version", "newest", {}),
    ("conda_version", "26.3.2-3;reboot", {}),
    ("conda_channel_alias", "http://conda.mirror.example", {"conda_installer_allow_http": False}),
    ("nccl_tests_url", "http://mirror.example/nccl-tests.tar.gz", {"nccl_tests_allow_http": False}),
    ("upgrade_driver_serial", "abc", {}),
]


def kind_of(name: str) -> str:
    return kinds.split_kind(TABLE[name])[0]


def role_of(name: str) -> str | None:
    return next((role for role, options in SPECS.items() if name in options), None)


def allow_http_switch(role: str | None) -> str | None:
    switches = [n for n in SPECS.get(role, {}) if TABLE.get(n) == "allow_http"]
    assert len(switches) <= 1, f"{role} has more than one allow_http switch: {switches}"
    return switches[0] if switches else None


def bad_values(name: str) -> list:
    kind = kind_of(name)
    if kind == "choice":
        return ["not-a-choice", "", None, ["x"]]
    bad = list(kinds.KINDS[kind].bad)
    if kinds.split_kind(TABLE[name])[1]:
        bad = [value for value in bad if value != ""]
    return bad


def refusal(name: str, value, others: dict | None = None) -> list[str]:
    return kinds.kind_problems({**(others or {}), name: value})


# ---- the table covers exactly the options ------------------------------------------------------


def test_every_option_has_a_kind():
    missing = [f"{role}: {name}" for role, name in OPTIONS if name not in TABLE]
    assert missing == [], (
        "options without a kind (add them to filter_plugins/variable_kinds.yml): "
        + ", ".join(missing)
    )


def test_the_table_repeats_no_kind_the_argument_spec_says():
    listed = yaml.safe_load(kinds.KINDS_FILE.read_text())
    repeated = [
        name
        for role, name in OPTIONS
        if name in listed and listed[name] == kinds.spec_kind(name, SPECS[role][name])
    ]
    assert repeated == [], f"variable_kinds.yml repeats what the argument spec says: {repeated}"
    assert TABLE["conda_shell_init"] == "bool" and TABLE["nvidia_repo_allow_http"] == "allow_http"
    assert "conda_shell_init" not in listed


def test_every_kind_in_the_table_names_an_option_or_a_playbook_switch():
    declared = {name for _, name in OPTIONS}
    stale = sorted(set(TABLE) - declared - set(PLAYBOOK_SWITCHES))
    assert stale == [], f"variable_kinds.yml names variables no argument spec declares: {stale}"


@pytest.mark.parametrize("name", VARIABLES)
def test_kind_is_known(name):
    kind = kind_of(name)
    if kind == "choice":
        role = role_of(name)
        assert role and SPECS[role][name].get("choices"), (
            f"{name}: kind choice but no choices in its spec"
        )
    else:
        assert kind in kinds.KINDS, f"{name}: unknown kind {kind!r}"
        assert kinds.KINDS[kind].bad, f"kind {kind} has no bad values to try"


@pytest.mark.parametrize("role", sorted(SPECS))
def test_a_role_has_at_most_one_allow_http_switch_and_its_urls_use_it(role):
    switch = allow_http_switch(role)
    urls = [n for n in SPECS[role] if kinds.KINDS.get(kind_of(n), kinds.KINDS["bool"]).http_switch]
    if switch:
        assert urls, f"{role}: {switch} switches no URL"


@pytest.mark.parametrize("name", VARIABLES)
def test_choices_in_the_spec_mean_kind_choice(name):
    role = role_of(name)
    if role and SPECS[role][name].get("choices"):
        assert kind_of(name) == "choice", f"{name} has choices in its spec: its kind is choice"


# ---- each kind refuses bad values, naming the variable and showing the value -------------------


@pytest.mark.parametrize("name", VARIABLES)
def test_bad_values_are_refused_naming_the_variable(name):
    for value in bad_values(name):
        problems = refusal(name, value)
        assert len(problems) == 1, f"{name}={value!r} was accepted"
        (message,) = problems
        assert message.startswith(name + " must be "), message
        assert f"(got {json.dumps(value, ensure_ascii=False, default=str)}" in message, message


@pytest.mark.parametrize("name", VARIABLES)
def test_good_values_are_accepted(name):
    kind = kind_of(name)
    role = role_of(name)
    good = SPECS[role][name]["choices"] if kind == "choice" else GOOD[kind]
    for value in good:
        assert refusal(name, value) == [], f"{name}={value!r} refused"
    if kinds.split_kind(TABLE[name])[1]:
        assert refusal(name, "") == []


@pytest.mark.parametrize(("role", "name"), OPTIONS)
def test_plain_defaults_pass_their_kind(role, name):
    default = DEFAULTS[role][name]
    templated = (
        [default] if isinstance(default, str) else default if isinstance(default, list) else []
    )
    if any(isinstance(item, str) and "{{" in item for item in templated):
        pytest.skip("templated: checked where the role renders it (test_preflight_kinds.py)")
    assert refusal(name, default) == []


@pytest.mark.parametrize(
    "name", sorted(n for n in TABLE if kinds.KINDS.get(kind_of(n), kinds.KINDS["bool"]).http_switch)
)
def test_plain_http_needs_the_roles_switch(name):
    url = "http://mirror.example/x"
    switch = allow_http_switch(role_of(name))
    if switch is None:
        assert refusal(name, url) != []
        assert "no switch for plain http" in refusal(name, url)[0]
        return
    refused = refusal(name, url, {switch: False})
    assert refused and f"http:// only with {switch}: true" in refused[0]
    assert refusal(name, url, {switch: True}) == []
    assert refusal(name, url, {switch: "yes"}) == []
    # the switch allows http, never any scheme
    assert refusal(name, "ftp://mirror.example/x", {switch: True}) != []


@pytest.mark.parametrize(("name", "value", "others"), ISSUE_EXAMPLES, ids=lambda v: str(v))
def test_the_issues_examples_are_refused(name, value, others):
    problems = refusal(name, value, others)
    assert len(problems) == 1 and problems[0].startswith(name)
    assert json.dumps(value) in problems[0]


def test_several_bad_values_give_one_message_each_in_order():
    problems = kinds.kind_problems(
        {"horovod_build_jobs": 0, "horovod_version": "0.28.1", "horovod_cxx": "g++"}
    )
    assert [p.split()[0] for p in problems] == ["horovod_build_jobs", "horovod_cxx"]


def test_a_variable_without_a_kind_is_left_to_test_every_option_has_a_kind():
    # At run time it is not checked (the play does not crash on an option added a moment ago).
    assert kinds.kind_problems({"horovod_new_knob": 1, "horovod_build_jobs": 0}) == [
        "horovod_build_jobs must be a whole number, at least 1 (got 0)."
    ]


def test_an_unquoted_cuda_release_is_named_a_float():
    (message,) = refusal("gpurig_cuda_version", 12.2)
    assert "12.2, a float: quote it" in message


# ---- the checks run where the roles are checked -----------------------------------------------


@pytest.mark.parametrize(
    "role",
    sorted(role for role in SPECS if (REPO / "roles" / role / "tasks" / "validate.yml").exists()),
)
def test_validate_runs_the_kind_check_first_or_after_the_os_check(role):
    """Each role's validate.yml includes the one kind check, roles/gpurig/tasks/kinds.yml, which
    checks the variables of the role including it (the first of ansible_parent_role_names)."""
    text = (REPO / "roles" / role / "tasks" / "validate.yml").read_text()
    tasks = yaml.safe_load(text)
    names = [task["name"] for task in tasks]
    index = names.index("Check each variable by its kind (roles/gpurig/tasks/kinds.yml).")
    task = tasks[index]["ansible.builtin.include_role"]
    assert task == {"name": "gpurig", "tasks_from": "kinds"}
    # Only what makes the role's defaults renderable (the OS, compat.yml's entry) comes before.
    assert index <= 2, f"{role}: the kind check is task {index + 1} of validate.yml"


def test_the_test_plugin_offers_the_same_checks():
    tests = load_plugin(
        REPO / "test_plugins" / "gpurig_kinds.py", "gpurig_kinds_tests"
    ).TestModule()
    offered = tests.tests()
    assert offered["gpurig_pep440"]("2.15.0") and not offered["gpurig_pep440"]("newest")
    assert offered["gpurig_https_url"]("http://x.example/", True)
    assert not offered["gpurig_https_url"]("http://x.example/")
    assert offered["gpurig_hex_digest"]("ab" * 32, 64)
    assert set(offered) == {"gpurig_" + name for name in kinds.JINJA_TESTS}


def test_plugins_are_registered_in_ansible_cfg_and_for_molecule():
    cfg = (REPO / "ansible.cfg").read_text()
    assert re.search(r"^filter_plugins = filter_plugins$", cfg, re.M)
    assert re.search(r"^test_plugins = test_plugins$", cfg, re.M)
    env = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())["provisioner"][
        "env"
    ]
    assert env["ANSIBLE_FILTER_PLUGINS"].endswith("/filter_plugins")
    assert env["ANSIBLE_TEST_PLUGINS"].endswith("/test_plugins")


def test_counts(record_property):
    """What the table covers (kept in the test log: pytest -rA shows it)."""
    tried = sum(len(bad_values(name)) for name in VARIABLES)
    kinds_used = {kind_of(name) for name in VARIABLES}
    record_property("variables", len(VARIABLES))
    record_property("kinds", len(kinds_used))
    record_property("bad_values_tried", tried)
    print(f"{len(VARIABLES)} variables, {len(kinds_used)} kinds, {tried} bad values tried")
    assert len(VARIABLES) >= len(OPTIONS)
