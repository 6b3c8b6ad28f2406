"""Each role documents its variables three times, and the three must agree.

defaults/main.yml (the values), meta/argument_specs.yml (what the play checks) and the README's
variables table (what users read) name the same variables with the same defaults. A role also never
reads another role's variable: site.yml passes shared values into each role's own variable
(playbooks/vars/shared.yml), so every meta/main.yml can truthfully say `dependencies: []`.
Plain YAML reading; nothing here runs Ansible.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES_DIR = REPO / "roles"
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "meta" / "argument_specs.yml").is_file())

# A README table row: | `name` | default | description |
README_ROW = re.compile(r"^\|\s*`([a-z][a-z0-9_]*)`\s*\|\s*(.*?)\s*\|(?!\s*$)", re.M)
CODE_SPAN = re.compile(r"`([^`]*)`")
# Jinja inside a YAML string, and the keys whose values are bare Jinja expressions.
JINJA_BLOCK = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
EXPRESSION_KEYS = {"when", "that", "failed_when", "changed_when", "until"}
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
IDENTIFIER = re.compile(r"\b[a-z][a-z0-9_]*\b")


def load(path: Path):
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def role_defaults(role: str) -> dict:
    return load(ROLES_DIR / role / "defaults" / "main.yml") or {}


def spec_entry_points(role: str) -> dict:
    return load(ROLES_DIR / role / "meta" / "argument_specs.yml")["argument_specs"]


def spec_options(role: str) -> dict:
    return spec_entry_points(role)["main"].get("options") or {}


def readme_rows(role: str) -> list[tuple[str, str]]:
    """(variable, default cell) of each row of the README's "## Variables" table."""
    text = (ROLES_DIR / role / "README.md").read_text()
    match = re.search(r"^## Variables\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"roles/{role}/README.md has no '## Variables' section"
    return README_ROW.findall(match.group(1))


def templated(value) -> bool:
    return isinstance(value, str) and "{{" in value


def normalized(value):
    """Strings compared without layout (folded YAML, line breaks inside a template)."""
    return " ".join(value.split()) if isinstance(value, str) else value


def leaves(value) -> list:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def role_of(name: str) -> str | None:
    """The role whose prefix a variable name carries (the longest: nccl_tests_x is nccl_tests')."""
    owners = [role for role in ROLES if name.startswith(role + "_")]
    return max(owners, key=len) if owners else None


def expressions(node, key: str | None = None):
    """Every Jinja expression in a parsed YAML document: {{ }} / {% %} in strings, and the bare
    expressions of when/that/failed_when/changed_when/until."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from expressions(v, k)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item, key)
    elif isinstance(node, str):
        if key in EXPRESSION_KEYS:
            yield node
        for block in JINJA_BLOCK.findall(node):
            yield "".join(block)
    elif isinstance(node, bool) or node is None:
        return


def variables_read(path: Path) -> set[str]:
    """Names a role file reads in its expressions (string literals inside them are not reads)."""
    if path.suffix in {".yml", ".yaml"}:
        found = expressions(yaml.safe_load(path.read_text()))
    else:  # templates: the whole file is Jinja around text
        found = ("".join(block) for block in JINJA_BLOCK.findall(path.read_text()))
    return {name for expr in found for name in IDENTIFIER.findall(QUOTED.sub("", expr))}


@pytest.mark.parametrize("role", ROLES)
def test_defaults_spec_and_readme_name_the_same_variables(role):
    defaults = set(role_defaults(role))
    spec = set(spec_options(role))
    rows = [name for name, _ in readme_rows(role)]
    assert len(rows) == len(set(rows)), (
        f"{role}: README rows repeat {sorted(n for n in rows if rows.count(n) > 1)}"
    )
    assert spec == defaults, (
        f"{role}: argument spec only {sorted(spec - defaults)}, "
        f"defaults/main.yml only {sorted(defaults - spec)}"
    )
    assert set(rows) == defaults, (
        f"{role}: README only {sorted(set(rows) - defaults)}, "
        f"defaults/main.yml only {sorted(defaults - set(rows))}"
    )
    for entry, options in spec_entry_points(role).items():
        extra = set(options.get("options") or {}) - defaults
        assert not extra, (
            f"{role}: entry point {entry} declares {sorted(extra)}, which defaults/main.yml lacks"
        )


@pytest.mark.parametrize("role", ROLES)
def test_argument_spec_defaults_are_the_role_defaults(role):
    defaults = role_defaults(role)
    wrong = {
        name: (option.get("default", "<none>"), defaults[name])
        for name, option in spec_options(role).items()
        if name in defaults
        and normalized(option.get("default", "<none>")) != normalized(defaults[name])
    }
    assert wrong == {}, f"{role}: spec default != defaults/main.yml (spec, defaults): {wrong}"


@pytest.mark.parametrize("role", ROLES)
def test_readme_states_the_defaults(role):
    """A plain default is stated in the README cell's first code span; a templated one may be
    described in words, but a cell that is only a code span must be the template itself."""
    defaults = role_defaults(role)
    wrong = {}
    for name, cell in readme_rows(role):
        if name not in defaults:
            continue
        value = defaults[name]
        spans = CODE_SPAN.findall(cell)
        if templated(value):
            if (
                re.fullmatch(r"`[^`]*`", cell)
                and "{{" in cell
                and normalized(spans[0]) != normalized(value)
            ):
                wrong[name] = (cell, value)
        elif isinstance(value, dict):
            if not all(str(leaf) in cell for leaf in leaves(value)):
                wrong[name] = (cell, value)
        elif not spans or yaml.safe_load(spans[0] or '""') != value:
            wrong[name] = (cell, value)
    assert wrong == {}, f"{role}: README default cell vs defaults/main.yml: {wrong}"


@pytest.mark.parametrize("role", ROLES)
def test_role_reads_no_other_roles_variables(role):
    # Calling package_hold with its variables passes values *to* it (YAML keys): no read.
    readers = {}
    for path in sorted((ROLES_DIR / role).rglob("*")):
        if path.is_file() and (path.suffix in {".yml", ".yaml"} or path.suffix == ".j2"):
            others = {n for n in variables_read(path) if role_of(n) not in (None, role)}
            if others:
                readers[str(path.relative_to(REPO))] = sorted(others)
    assert readers == {}, (
        f"{role} reads other roles' variables (pass them at the play instead): {readers}"
    )


@pytest.mark.parametrize("role", ROLES)
def test_meta_declares_no_dependencies(role):
    assert load(ROLES_DIR / role / "meta" / "main.yml").get("dependencies") == []


def test_shared_values_go_into_variables_the_taking_roles_declare():
    shared = load(REPO / "playbooks" / "vars" / "shared.yml")
    declared = {name for role in ROLES for name in role_defaults(role)}
    for taker, expression in shared.items():
        assert taker in declared, f"playbooks/vars/shared.yml sets {taker}, which no role declares"
        sources = {n for n in IDENTIFIER.findall(QUOTED.sub("", expression)) if role_of(n)}
        assert sources and sources <= declared, f"{taker}: {expression} reads {sources}"
        assert all(role_of(n) != role_of(taker) for n in sources), (
            f"{taker} is passed its own role's variable"
        )


def test_site_runs_every_role_with_its_group_tag():
    site = load(REPO / "site.yml")
    (play,) = site
    groups = play["vars"]["site_role_groups"]
    roles = [(entry["role"], entry["tags"]) for entry in play["roles"]]
    assert [name for name, _ in roles] == list(groups), (
        "site_role_groups must list the play's roles in order"
    )
    assert all(tags == [name, groups[name]] for name, tags in roles)
    # package_hold and repo_contact are called by the other roles with the values they compute.
    assert set(groups) == set(ROLES) - {"package_hold", "repo_contact"}
