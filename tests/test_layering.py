"""The import contract: data flows one way, variants -> harness -> results -> reports, with the CLI on top.

Read from the source with `ast` (no imports run), so `nox -s lint` checks it without torch:
    variants -> nothing of attnbench;  results -> nothing;  harness -> variants, results;
    reports -> results;  attnbench (cli, api) -> anything.
Every import counts, the ones inside functions too.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "variants": set(),
    "results": set(),
    "harness": {"variants", "results"},
    "reports": {"results"},
}
OLD_NAMES = set(ALLOWED)  # top-level names these packages had before 0.2


def _module(path: Path, layer: str) -> list[str]:
    """attnbench.<layer>.<sub>... as a list of parts, for resolving relative imports."""
    parts = list(path.relative_to(ROOT / layer).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        parts.append("")  # a package's __init__: its own name is the package for relative imports
    return ["attnbench", layer, *parts]


def imported_layers(path: Path, layer: str) -> list[tuple[int, str]]:
    """(line, what) for every attnbench package (or old top-level name) the file imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module(path, layer)
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [mod] if mod != "attnbench" else [f"attnbench.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "attnbench":
                target = parts[1] if len(parts) > 1 and parts[1] in ALLOWED else "attnbench (cli, api)"
                out.append((node.lineno, target))
            elif parts[0] in OLD_NAMES:
                out.append((node.lineno, f"top-level {parts[0]!r} (write attnbench.{parts[0]})"))
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer):
    bad = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for line, target in imported_layers(path, layer):
            if target != layer and target not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    allowed = ", ".join(sorted(ALLOWED[layer])) or "nothing of attnbench"
    assert not bad, f"{layer} may import {allowed}:\n" + "\n".join(bad)


# harness/ by job: each folder imports only the folders before it (tools are the front ends' own)
HARNESS_JOBS = {
    "sweep": set(),
    "measure": {"sweep"},
    "workers": {"sweep", "measure"},
    "run": {"sweep", "measure", "workers"},
    "tools": {"sweep", "measure", "workers", "run"},
}


def harness_folder(module: str) -> str | None:
    """The job folder of an attnbench.harness module name (None: not one, or the package itself)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["attnbench", "harness"] else None


def test_harness_folders_import_only_the_jobs_before_them():
    modules = _modules()
    bad = []
    for name, path in sorted(modules.items()):
        here = harness_folder(name)
        if here is None:
            continue
        assert here in HARNESS_JOBS, f"{path.relative_to(ROOT)}: harness/ holds only {sorted(HARNESS_JOBS)}"
        for target in sorted(_imports_of(name, path, set(modules))):
            there = harness_folder(target)
            if there is not None and there != here and there not in HARNESS_JOBS[here]:
                bad.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not bad, "harness folders import only the jobs before them:\n" + "\n".join(bad)


def test_harness_has_no_module_outside_a_job_folder():
    loose = [p.name for p in (ROOT / "harness").glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"harness/ keeps its modules in job folders ({sorted(HARNESS_JOBS)}): {loose}"


def test_the_contract_sees_imports(tmp_path, monkeypatch):
    """The checker itself: relative, absolute, from-package and function-level imports are all found."""
    fake = tmp_path / "reports"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "x.py").write_text(
        "from ..harness import spec\nfrom attnbench import variants\nimport attnbench.results\n"
        "def f():\n    from . import page\n    import harness\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = [t for _, t in sorted(imported_layers(fake / "x.py", "reports"))]
    assert found[:4] == ["harness", "variants", "results", "reports"]
    assert found[4].startswith("top-level 'harness'")


def _modules() -> dict[str, Path]:
    """attnbench.<layer>.<module> -> its file, for every module that is not a package's __init__."""
    out = {}
    for layer in (*ALLOWED, "attnbench"):
        for path in (ROOT / layer).rglob("*.py"):
            if path.name != "__init__.py":
                parts = _module(path, layer) if layer != "attnbench" else ["attnbench", path.stem]
                out[".".join(parts)] = path
    return out


def _imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` imports, anywhere in it (function-level imports too)."""
    package = name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            found |= {mod} | {f"{mod}.{a.name}" for a in node.names}
    return (found & known) - {name}


def test_no_module_imports_itself_back():
    """No import cycle between modules (a package's __init__ aside), counting imports inside functions: a
    cycle means two modules share one job, and the shared part belongs in a module both import."""
    modules = _modules()
    graph = {name: _imports_of(name, path, set(modules)) for name, path in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt] if nxt in path else [*path, nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name, [name])):
            pytest.fail("import cycle: " + " -> ".join(cycle))
    assert len(graph) > 50  # the walk saw the package


# ---- the shape of the code: small modules and functions, and repetition in few places ----------------------

PRODUCT = ("harness", "variants", "results", "reports", "attnbench")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 700, 80
# repetition (sample < visit < run) lives in these modules alone: the settings that ask for it, the planner
# that orders visits, the one entry point that measures one, the row as their summary and the columns that
# hold them, the judge that picks a level, the fit that reads a cell's visits, the estimate that counts them
REPETITION = {
    "harness/sweep/settings.py", "harness/run/plan.py", "harness/measure/cell.py", "harness/run/estimate.py",
    "results/visits.py", "results/schema.py", "results/judge.py", "reports/fit.py",
}  # fmt: skip
_REPETITION_WORD = re.compile(r"(^|_)(rounds?|visits?|settle\w*)(_|$)")
# pytest-benchmark's own words: its pedantic(rounds=), its JSON's stats["rounds"], its options
_NOT_OURS = {"rounds", "warmup_rounds", "benchmark_min_rounds"}
_NOT_OURS_IN = {"harness/tools/pytest_plugin.py", "results/pytest_benchmark.py"}


def _product_files() -> list[Path]:
    return [
        p for layer in PRODUCT for p in sorted((ROOT / layer).rglob("*.py")) if "reference" not in p.parts
    ]


def _code_names(tree: ast.AST) -> set[str]:
    """Every name the code itself uses: variables, attributes, arguments, keywords, definitions, imports,
    and identifier-like string constants (column names); not docstrings, comments or help text."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            out.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            out |= {node.module or "", *(a.name for a in node.names)}
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"[a-z_]+", node.value)
        ):
            out.add(node.value)
    out.discard("round")  # the builtin
    return out


def test_repetition_lives_in_few_modules():
    """The concept of repeated visits is named in the code of REPETITION's modules and no other (issue 38:
    it had spread to 29): a new way to repeat is a plan shape, not a mechanism beside the planner."""
    found = set()
    for path in _product_files():
        rel = str(path.relative_to(ROOT))
        names = {n for n in _code_names(ast.parse(path.read_text())) if _REPETITION_WORD.search(n)}
        if rel in _NOT_OURS_IN:
            names -= _NOT_OURS
        if names:
            found.add(rel)
    assert found == REPETITION, (
        f"named outside: {sorted(found - REPETITION)}; gone: {sorted(REPETITION - found)}"
    )
    assert len(REPETITION) <= 8


def test_modules_and_functions_stay_small():
    big, long = [], []
    for path in _product_files():
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            big.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not big and not long, "\n".join(big + long)
