"""Each role variable is declared once, and the README shows what the declarations say.

meta/argument_specs.yml holds a variable's type, choices and description; defaults/main.yml its
default (the one Ansible applies). Each README's variables table is generated from the two by
scripts/role_docs.py, and `--check` must find every README current. A role also never reads another
role's variable, but those of gpurig, the values the roles share, which it then names as its one
dependency.
Plain YAML reading; nothing here runs Ansible.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES_DIR = REPO / "roles"
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "meta" / "argument_specs.yml").is_file())
_spec = importlib.util.spec_from_file_location("role_docs", REPO / "scripts/role_docs.py")
role_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_docs)

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


def all_options(role: str) -> dict:
    """Every entry point's options of a role."""
    return {
        name: option
        for point in spec_entry_points(role).values()
        for name, option in (point.get("options") or {}).items()
    }


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_its_default_in_defaults_main_or_is_required(role):
    defaults = set(role_defaults(role))
    options = all_options(role)
    assert set(spec_options(role)) <= set(options)
    no_default = sorted(
        n for n, o in options.items() if n not in defaults and not o.get("required")
    )
    required_with_default = sorted(
        n for n, o in options.items() if n in defaults and o.get("required")
    )
    undeclared = sorted(defaults - set(options))
    assert no_default == [], f"{role}: neither a default in defaults/main.yml nor required"
    assert required_with_default == [], f"{role}: required, yet defaults/main.yml sets them"
    assert undeclared == [], f"{role}: defaults/main.yml sets variables the spec does not declare"


@pytest.mark.parametrize("role", ROLES)
def test_argument_spec_states_no_default(role):
    # Ansible takes a role variable's default from defaults/main.yml only (docs/DEVELOPING.md has
    # the source); a spec `default:` would be a second copy that nothing applies.
    copies = sorted(name for name, option in all_options(role).items() if "default" in option)
    assert copies == [], f"{role}: the spec repeats defaults/main.yml's default of {copies}"


def test_every_readme_table_is_what_the_declarations_say():
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts/role_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (run.returncode, run.stderr) == (0, "")


def test_check_names_the_stale_readme_and_a_run_brings_it_up_to_date(tmp_path, monkeypatch, capsys):
    for role in ("nccl", "package_hold"):
        shutil.copytree(ROLES_DIR / role, tmp_path / role)
    monkeypatch.setattr(role_docs, "ROLES_DIR", tmp_path)
    spec = tmp_path / "nccl/meta/argument_specs.yml"
    spec.write_text(spec.read_text().replace("as packaged,", "as NVIDIA packages it,"))
    assert role_docs.main(["--check"]) == 1
    stderr = capsys.readouterr().err
    assert "roles/nccl/README.md" in stderr and "package_hold" not in stderr
    assert role_docs.main([]) == 0
    assert "NCCL release as NVIDIA packages it," in (tmp_path / "nccl/README.md").read_text()
    assert role_docs.main(["--check"]) == 0


def test_an_option_with_neither_default_nor_required_is_refused(tmp_path, monkeypatch, capsys):
    shutil.copytree(ROLES_DIR / "nccl", tmp_path / "nccl")
    monkeypatch.setattr(role_docs, "ROLES_DIR", tmp_path)
    defaults = tmp_path / "nccl/defaults/main.yml"
    values = yaml.safe_load(defaults.read_text())
    del values["nccl_version"]
    defaults.write_text(yaml.safe_dump(values))
    assert role_docs.main(["--check"]) == 1
    assert "nccl_version has no default in defaults/main.yml" in capsys.readouterr().err


def test_cells_render_markup_templates_and_table_pipes():
    assert role_docs.markdown(["C(<base>/<a|b>) or", "<x> | I(y)"]) == (
        "`<base>/<a\\|b>` or &lt;x> \\| *y*"
    )
    assert role_docs.default_cell("{{ a | default('') }}\n  ~ b") == "`{{ a \\| default('') }} ~ b`"
    assert role_docs.default_cell("3.11") == "`'3.11'`"
    assert (
        role_docs.default_cell({"x86_64": "ab", "aarch64": "cd"}) == "`{x86_64: ab, aarch64: cd}`"
    )
    assert role_docs.type_cell({"type": "list", "elements": "str"}) == "list of str"
    assert role_docs.type_cell({"type": "str", "choices": ["a", "b"]}) == "str, one of `a`, `b`"


@pytest.mark.parametrize("role", ROLES)
def test_role_reads_no_other_roles_variables(role):
    # Calling package_hold with its variables passes values *to* it (YAML keys): no read.
    readers = {}
    for path in sorted((ROLES_DIR / role).rglob("*")):
        if path.is_file() and (path.suffix in {".yml", ".yaml"} or path.suffix == ".j2"):
            others = {n for n in variables_read(path) if role_of(n) not in (None, role, "gpurig")}
            if others:
                readers[str(path.relative_to(REPO))] = sorted(others)
    assert readers == {}, (
        f"{role} reads other roles' variables (shared ones belong to gpurig): {readers}"
    )


@pytest.mark.parametrize("role", ROLES)
def test_meta_declares_no_dependency_but_gpurig(role):
    # The one dependency is roles/gpurig, the values the roles share and the compatibility table
    # (docs/DEVELOPING.md; which roles need it: tests/unit/test_compat.py).
    assert load(ROLES_DIR / role / "meta" / "main.yml").get("dependencies") in ([], ["gpurig"])


def test_site_runs_every_role_with_its_group_tag():
    site = load(REPO / "site.yml")
    (play,) = site
    groups = play["vars"]["site_role_groups"]
    roles = [(entry["role"], entry["tags"]) for entry in play["roles"]]
    assert [name for name, _ in roles] == list(groups), (
        "site_role_groups must list the play's roles in order"
    )
    assert all(tags == [name, groups[name]] for name, tags in roles)
    # The helper roles are called by the other roles with the values they compute.
    helpers = {"apt_source", "gpurig", "package_hold", "repo_contact"}
    assert set(groups) == set(ROLES) - helpers


def test_developing_md_maps_every_role_playbook_and_plugin():
    """docs/DEVELOPING.md's Layout table names each role, playbook, shared task or vars file and
    plugin the repository holds, and nothing that is gone."""
    text = (REPO / "docs/DEVELOPING.md").read_text()
    layout = text[text.index("## Layout") : text.index("\n## ", text.index("## Layout") + 1)]
    named = set(re.findall(r"`([^`\s]+)`", layout))
    tracked = subprocess.run(
        ["git", "ls-files", "roles", "playbooks", "filter_plugins", "test_plugins", "*.yml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    expected = set()
    for path in tracked:
        parts = Path(path).parts
        if parts[0] == "roles":
            expected.add("/".join(parts[:2]))
        elif (
            parts[0] in ("filter_plugins", "test_plugins")
            or (parts[0] == "playbooks" and path.endswith(".yml"))
            or (len(parts) == 1 and not path.startswith("."))
        ):
            expected.add(path)
    assert expected - named == set(), "missing from docs/DEVELOPING.md's Layout"
    mapped = {n for n in named if n.split("/")[0] in ("roles", "filter_plugins", "test_plugins")}
    mapped |= {n for n in named if n.startswith("playbooks/") and n.endswith(".yml")}
    assert mapped - expected == set(), "docs/DEVELOPING.md's Layout names what is gone"


BOOL_OPTIONS = sorted(
    {
        name
        for role in ROLES
        for name, option in all_options(role).items()
        if option.get("type") == "bool"
    }
)
# A bool option read as a truth value: not piped (| bool, | to_json, ...) nor compared (==, is, in).
NOT_A_TRUTH_TEST = r"(?!\s*(?:\||==|!=|\bis\b|\bin\b|\.|\[))"
BOOL_NAME = r"\b(?:" + "|".join(map(re.escape, BOOL_OPTIONS)) + r")\b"
BARE_TRUTH = re.compile(BOOL_NAME + NOT_A_TRUTH_TEST)


@pytest.mark.parametrize("role", ROLES)
def test_bool_options_are_read_through_the_bool_filter(role):
    # `-e name=false` gives the string "false", which ansible-core 2.19 refuses as a conditional
    # ("Conditional result (True) was derived from value of type 'str'"): every truth test of a bool
    # option goes through | bool, so the string and the YAML boolean mean the same.
    bare = {}
    for path in sorted((ROLES_DIR / role).rglob("*.yml")):
        for expr in expressions(yaml.safe_load(path.read_text())):
            found = BARE_TRUTH.findall(QUOTED.sub("", expr))
            if found:
                bare.setdefault(str(path.relative_to(REPO)), set()).update(found)
    assert bare == {}
