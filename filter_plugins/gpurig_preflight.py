"""site.yml's preflight, worked out in Python: which roles a run selects, and which given variables
no role reads. Unit tests: tests/unit/test_preflight_plugin.py.

    site_selected_roles: >-
      {{ site_role_groups | gpurig_selected_roles(ansible_run_tags, ansible_skip_tags,
                                                    site_disabled_roles) }}
    site_undeclared_variables: >-
      {{ hostvars[inventory_hostname] | list | gpurig_undeclared_variables(site_switches) }}
    msg: "{{ site_undeclared_variables | gpurig_undeclared_message(site_switches) }}"

Each role in site.yml carries two tags: its own name and its group (nvidia, containers, python).
The functions take what they compare as arguments; the filters for undeclared variables compare
with every role's argument spec (roles/*/meta/argument_specs.yml, read by gpurig_kinds.py), the
roles that only other roles call (package_hold, apt_source, ...) included.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

# --tags values that select every role:
# - 'all': what ansible_run_tags holds when no --tags is given (ansible_skip_tags is then []):
#   ansible/ansible#69619, documented by ansible/ansible#70939; the special variables page,
#   https://docs.ansible.com/ansible/latest/reference_appendices/special_variables.html (checked
#   2026-11-25; seen with ansible-core 2.19.14 here too);
# - 'tagged': runs every task that has a tag, and every role here has two (Ansible's special tags,
#   https://docs.ansible.com/ansible/2.9/user_guide/playbooks_tags.html, checked 2026-11-25);
# - 'preflight': site.yml's own tag, to check the variables of every role.
EVERYTHING = frozenset({"all", "tagged", "preflight"})


def tagged_roles(groups: Mapping[str, str], run_tags: Iterable[str]) -> list[str]:
    """The roles --tags names, by the role's own tag or its group's, in play order."""
    tags = set(run_tags)
    return [role for role, group in groups.items() if role in tags or group in tags]


def selected_roles(
    groups: Mapping[str, str],
    run_tags: Iterable[str],
    skip_tags: Iterable[str],
    disabled: Iterable[str] = (),
) -> list[str]:
    """The roles a run with these --tags / --skip-tags reaches, less those off for the host.

    `groups` is role -> group tag, in play order; --tags preflight selects every role (its variables
    are checked, nothing else runs).
    """
    run_tags = set(run_tags)
    chosen = list(groups) if run_tags & EVERYTHING else tagged_roles(groups, run_tags)
    skipped = set(skip_tags)
    off = set(disabled)
    return [
        role
        for role in chosen
        if role not in skipped and groups[role] not in skipped and role not in off
    ]


def role_prefixes(roles: Iterable[str]) -> list[str]:
    """The first word of each role's name: what makes a variable name look like a role's."""
    return sorted({role.split("_")[0] for role in roles})


# How alike (difflib's ratio) a name must be to a known one to count as its misspelling: one letter
# dropped or doubled in a 20-letter name is about 0.97; two unrelated names of one role about 0.6.
ALIKE = 0.9


def undeclared_variables(
    given: Iterable[str],
    declared: Iterable[str],
    roles: Iterable[str],
    switches: Iterable[str] = (),
) -> list[str]:
    """The given names that look like a role's or the project's own but that nothing declares: those
    with a role's prefix (nvidia_, cuda_, ...) or the project's (gpurig_, its switches'), and those
    so alike a declared name or switch that they are its misspelling (nvida_driver_branch). A former
    name (RENAMED) is not one of them: renamed_message refuses it."""
    known = set(declared) | set(switches) | set(RENAMED)
    prefixes = set(role_prefixes(roles)) | {name.split("_")[0] for name in switches}
    return sorted(
        name
        for name in set(given) - known
        if ("_" in name and name.split("_")[0] in prefixes)
        or difflib.get_close_matches(name, known, n=1, cutoff=ALIKE)
    )


def did_you_mean(name: str, declared: Iterable[str]) -> list[str]:
    """The declared names `name` may be a misspelling of.

    A name with the same letters in another order (a typing slip) is the best suggestion; then names
    with the same first and last word (nvidia_..._branch); then the most alike names (a letter
    dropped or added: nvida_driver_branch, gpurig_strict_var).
    """
    others = {known for known in declared if known != name}
    anagrams = [known for known in others if sorted(known) == sorted(name)]
    if anagrams:
        return sorted(anagrams)
    words = name.split("_")
    ends = (words[0], words[-1])
    same_ends = sorted(
        known for known in others if (known.split("_")[0], known.split("_")[-1]) == ends
    )
    return same_ends or sorted(difflib.get_close_matches(name, others, n=3, cutoff=ALIKE))


def misspelling_hint(names: Iterable[str], declared: Iterable[str]) -> str:
    """'<name>: did you mean <a> or <b>? ' for each name with a suggestion, in the order given. A
    misspelt former name (RENAMED) is answered with its present one."""
    known = list(declared) + list(RENAMED)
    hints = []
    for name in names:
        alike = list(
            dict.fromkeys(RENAMED.get(known, known) for known in did_you_mean(name, known))
        )
        if alike:
            hints.append(f"{name}: did you mean {' or '.join(alike)}? ")
    return "".join(hints)


def _is_are(names: list[str]) -> tuple[str, str]:
    return ("is", "it") if len(names) == 1 else ("are", "them")


def undeclared_message(names: Iterable[str], declared: Iterable[str], strict: bool = False) -> str:
    """The warning (or, with gpurig_strict_vars, the refusal) naming undeclared variables."""
    names = list(names)
    verb, pronoun = _is_are(names)
    hint = misspelling_hint(names, declared)
    if strict:
        return (
            f"{', '.join(names)}: set, but no role declares {pronoun} (gpurig_strict_vars is "
            f"true). {hint}"
        )
    return (
        f"WARNING: {', '.join(names)} {verb} set but no role declares {pronoun} (a misspelling? "
        f"nothing reads {pronoun}). {hint}Set gpurig_strict_vars: true to stop on this."
    )


# Variables the roles read under another name since the values several roles share moved into the
# role gpurig (2026-11-28): old name -> present name. Given under the old name, a value would be
# ignored (the roles would install their defaults), so every playbook's preflight stops on one and
# names the new one.
RENAMED = {
    "nvidia_driver_branch": "gpurig_driver_branch",
    "cuda_toolkit_driver_branch": "gpurig_driver_branch",
    "dcgm_driver_branch": "gpurig_driver_branch",
    "cuda_toolkit_version": "gpurig_cuda_version",
    "cudnn_cuda_version": "gpurig_cuda_version",
    "nccl_cuda_version": "gpurig_cuda_version",
    "python_env_cuda_version": "gpurig_cuda_version",
    "conda_prefix": "gpurig_conda_prefix",
    "python_env_conda_prefix": "gpurig_conda_prefix",
    "conda_channels": "gpurig_conda_channels",
    "python_env_conda_channels": "gpurig_conda_channels",
    "python_env_path": "gpurig_env_path",
    "python_env_name": "gpurig_env_path",
    "python_env_venv_root": "gpurig_env_path",
    "horovod_env_path": "gpurig_env_path",
    "python_env_pip_extra_args": "gpurig_pip_extra_args",
    "horovod_pip_extra_args": "gpurig_pip_extra_args",
    "gpu_prereqs_secure_boot_modules_signed": "nvidia_driver_secure_boot_modules_signed",
    "gpu_prereqs_driver_modules_signed": "nvidia_driver_distro_signed_modules",
}


def renamed_message(given: Iterable[str]) -> str:
    """'' when no given variable has a former name; else the refusal naming each with its new
    name."""
    old = sorted(set(given) & set(RENAMED))
    if not old:
        return ""
    pairs = "; ".join(f"{name} is now {RENAMED[name]}" for name in old)
    return (
        f"{', '.join(old)}: renamed, so the value given would be ignored ({pairs}). "
        "Set the new name instead (python_env_name and python_env_venv_root: set gpurig_env_path "
        "to the whole path)."
    )


def argument_specs() -> dict[str, dict]:
    """role -> its declared variables, from filter_plugins/gpurig_kinds.py (loaded once, under the
    name test_plugins/gpurig_kinds.py gives it)."""
    name = "gpurig_kinds_checks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).resolve().parent / "gpurig_kinds.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].argument_specs()


def declared_variables() -> list[str]:
    """Every variable some role's argument spec declares."""
    return sorted({name for options in argument_specs().values() for name in options})


class FilterModule:
    def filters(self):
        return {
            "gpurig_selected_roles": selected_roles,
            "gpurig_tagged_roles": tagged_roles,
            "gpurig_undeclared_variables": lambda given, switches=(): undeclared_variables(
                given, declared_variables(), argument_specs(), switches
            ),
            "gpurig_undeclared_message": lambda names, switches=(), strict=False: (
                undeclared_message(names, declared_variables() + list(switches), strict)
            ),
            "gpurig_renamed_message": renamed_message,
        }
