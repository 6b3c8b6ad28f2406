"""The package's shape: no import cycle in bench, and its layers, lowest first: the vocabulary
(bench.spec, bench.launcher_kinds and bench.shared) imports only itself; the rank side (bench.rank,
started by torchrun, horovodrun and the tf launcher) imports only itself and the vocabulary; the
controller (everything else) imports no rank module: it starts them by module name. Within the
controller, the request's modules (config, options, spec) import none of the machine, the
launchers, admission, the stages or the results, and the launchers import neither admission nor a
stage."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
VOCABULARY = ("bench.spec", "bench.launcher_kinds", "bench.shared")
RANK_MAY_IMPORT = ("bench.rank", *VOCABULARY)
REQUEST = ("bench.config", "bench.options", "bench.spec")
ABOVE_REQUEST = (
    "bench.admission",
    "bench.launchers",
    "bench.machine",
    "bench.stages",
    "bench.scaling",
    "bench.report",
    "bench.results",
)
ABOVE_LAUNCHERS = ("bench.admission", "bench.stages", "bench.scaling")


def module_name(path: Path) -> str:
    parts = path.relative_to(BENCH.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def bench_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(BENCH.rglob("*.py"))}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """bench modules a file imports anywhere (top level, functions, TYPE_CHECKING blocks)."""
    found: set[str] = set()
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    )
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {name for name in found if name in modules and name != module_name(path)}


def within(name: str, packages: tuple[str, ...]) -> bool:
    """Whether module `name` is one of `packages` or inside one (bench.machine is not
    bench.machine_defaults)."""
    return any(name == p or name.startswith(f"{p}.") for p in packages)


def import_graph() -> dict[str, set[str]]:
    modules = bench_modules()
    return {name: imports_of(path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as a path [a, b, ..., a], or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def test_the_graph_sees_the_imports_it_must_see() -> None:
    graph = import_graph()
    assert "bench.rank.worker" in graph and "bench.config" in graph
    assert {"bench.rank.engines", "bench.spec"} <= graph["bench.rank.worker"]
    assert "bench.hosts" in graph["bench.config"]


def test_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_bench_has_no_import_cycle() -> None:
    assert find_cycle(import_graph()) == []


def test_rank_side_imports_no_controller_module() -> None:
    graph = import_graph()
    rank = [name for name in graph if name.startswith("bench.rank")]
    assert len(rank) >= 8
    for name in rank:
        outside = sorted(m for m in graph[name] if not m.startswith(RANK_MAY_IMPORT))
        assert outside == [], f"{name} imports controller modules {outside}"


def test_the_vocabulary_imports_only_itself() -> None:
    graph = import_graph()
    vocabulary = [name for name in graph if name.startswith(VOCABULARY)]
    assert {"bench.spec", "bench.shared.wire", "bench.shared.loaders"} <= set(vocabulary)
    outside = {n: sorted(m for m in graph[n] if not m.startswith(VOCABULARY)) for n in vocabulary}
    assert {n: found for n, found in outside.items() if found} == {}


def test_the_controller_imports_no_rank_module() -> None:
    graph = import_graph()
    controller = [name for name in graph if not name.startswith(RANK_MAY_IMPORT)]
    assert {"bench.rows", "bench.stages", "bench.launchers.local"} <= set(controller)
    inside = {n: sorted(m for m in graph[n] if m.startswith("bench.rank")) for n in controller}
    assert {n: found for n, found in inside.items() if found} == {}


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """The controller's imports that run up its layers, by importing module."""
    above = {n: ABOVE_REQUEST for n in REQUEST}
    above |= {n: ABOVE_LAUNCHERS for n in graph if within(n, ("bench.launchers",))}
    found = {
        n: sorted(m for m in graph.get(n, ()) if within(m, packages))
        for n, packages in above.items()
    }
    return {n: modules for n, modules in found.items() if modules}


def test_upward_imports_finds_what_runs_up() -> None:
    graph = {
        "bench.config": {"bench.spec", "bench.machine_defaults", "bench.launchers.docker"},
        "bench.launchers.local": {"bench.stages", "bench.config"},
    }
    assert upward_imports(graph) == {
        "bench.config": ["bench.launchers.docker"],
        "bench.launchers.local": ["bench.stages"],
    }


def test_the_controller_imports_run_down_its_layers() -> None:
    graph = import_graph()
    assert set(REQUEST) <= set(graph) and "bench.launchers.docker.check" in graph
    assert upward_imports(graph) == {}


MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60  # a screen


def test_every_bench_module_and_function_stays_small() -> None:
    too_long = []
    for module in sorted(BENCH.rglob("*.py")):
        source = module.read_text()
        name = module.relative_to(BENCH.parent)
        if len(source.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}(): {length} lines")
    assert too_long == []


SWEEP_FILES = (
    "sweep.json",
    "sweep.jsonl",
    "controller.lock",
    "report.md",
    ".png",
    ".parquet",
    ".csv",
    "logs",
)
SWEEP_FILES += (".log", ".nodes", ".trace.json", ".profile.json")


def file_names_in_code(path: Path) -> set[str]:
    """The string constants of a module that name a sweep's file (docstrings left out)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and any(node.value == f or node.value.endswith(f) for f in SWEEP_FILES)
    }


def test_a_sweeps_files_are_named_in_one_place() -> None:
    # bench.paths.SweepPaths names every file of a sweep's directory; the rest ask it.
    others = ("bench.paths", "bench.reference", "bench.shared.folder")  # URLs, image suffixes
    named = {
        name: found
        for name, path in bench_modules().items()
        if name not in others and (found := file_names_in_code(path))
    }
    assert file_names_in_code(BENCH / "paths.py") >= {"sweep.jsonl", "controller.lock", "logs"}
    assert named == {}
