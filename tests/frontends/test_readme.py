"""The README stays true: its variant example runs through the real CLI, its links point at files."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout

import pytest
from conftest import ROOT, as_a_fresh_process, run_cli

README = (ROOT / "README.md").read_text()
MARKER = "<!-- variant-example"


def example(marker: str = MARKER) -> str:
    """The python block right after a marker."""
    after = README[README.index(marker) :]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match, f"no python block after {marker}"
    return match.group(1)


def variant_example() -> str:
    return example(MARKER)


@pytest.mark.slow
def test_variant_example_is_short_and_passes_the_gate(tmp_path):
    code = variant_example()
    assert len(code.strip().splitlines()) <= 16  # the README promises a ~15-line example
    f = tmp_path / "my_attention.py"
    f.write_text(code)
    run = tmp_path / "run"
    run_cli(
        "run", "--variant-file", str(f), "--variants", "einsum", "--seq-len", "32,48", "--heads", "2",
        "--causal", "both", "--padding", "0,0.25", "--warmup-ms", "1", "--budget-ms", "5",
        "--out", str(run), "-q", check=True,
    )  # fmt: skip
    rows = json.loads(run_cli("export", str(run), "--format", "json", check=True).stdout)
    status = {(r["seq_len"], r["causal"], r["padding"]): r["status"] for r in rows}
    assert len(status) == 8
    # the example declares padding=False: those cells are refused with the reason, the others pass
    assert all(s == "ok" for (_, _, pad), s in status.items() if pad == 0), status
    assert all(s == "unsupported" for (_, _, pad), s in status.items() if pad > 0), status


def test_readme_links_point_at_files():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if target.startswith("http"):
            continue
        path = ROOT / target
        assert path.exists(), f"README links to {target}, which does not exist"


@pytest.mark.slow
def test_python_api_example_runs_and_writes_what_it_says(tmp_path):
    """The block as a script of its own: a fresh namespace, run from an empty folder (in this process, which
    has torch and pandas imported already; the workers it starts are real processes all the same)."""
    code = compile(example("<!-- api-example"), "README.md (api-example)", "exec")
    with as_a_fresh_process(tmp_path), redirect_stdout(io.StringIO()) as out:
        exec(code, {"__name__": "__main__"})
    assert "{'ok': 6}" in out.getvalue()  # the count the README's comment shows
    assert (tmp_path / "runs" / "nb" / "rows.jsonl").is_file()
    assert (tmp_path / "reports" / "out" / "nb" / "report.html").is_file()
    assert "chunked" in out.getvalue() and "naive" in out.getvalue()  # the pivot table's columns
