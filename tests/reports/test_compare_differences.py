"""compare says first what differs between the two runs' settings and environment (meta.json), in one line
on stdout and on its page: two runs made with --threads 1 and --threads 2 never said "threads" (trial R,
P4), only that their calibrations differed."""

from __future__ import annotations

import json

import synthetic
from conftest import run_cli

from attnbench.reports.compare_load import differences_line, setup_differences


def _rows():
    return [synthetic.cell(v, n, seed=i) for i, v in enumerate(("naive", "chunked")) for n in (256, 512)]


def _threads(run, n: int) -> None:
    """The run's meta.json as `attnbench run --threads n` writes it: the setting, the workers' threads and
    the fingerprint's."""
    meta = json.loads((run / "meta.json").read_text())
    meta["sweep"]["settings"] = {"warmup_ms": 2.0, "budget_ms": 10.0, "threads": n}
    meta["worker_threads"] = n
    meta["fingerprint"]["torch_threads"] = n
    (run / "meta.json").write_text(json.dumps(meta))


def test_two_runs_that_differ_only_in_threads_say_so_first_on_stdout_and_the_page(tmp_path):
    a = synthetic.write_run(tmp_path / "thr1", _rows(), run_id="thr1")
    b = synthetic.write_run(tmp_path / "thr2", _rows(), run_id="thr2")
    _threads(a, 1)
    _threads(b, 2)
    said = run_cli("compare", str(a), str(b), "--out", str(tmp_path / "page"))
    assert said.returncode == 0, said.stderr
    line = "A and B differ in: threads 1 in A, 2 in B"
    lines = said.stdout.splitlines()
    assert lines[:3] == [lines[0], lines[1], line] and lines[1].startswith("B: "), said.stdout[:500]
    page = (tmp_path / "page" / "README.md").read_text().splitlines()
    at = page.index(f"- {line}")
    assert page[at - 1].startswith("- B: ") and page[at - 2].startswith("- A: ")
    assert line in (tmp_path / "page" / "compare.html").read_text()
    _threads(b, 1)  # the same set-up: said so, in the same place
    same = run_cli("compare", str(a), str(b), "--out", str(tmp_path / "page2")).stdout.splitlines()
    assert same[2] == "A and B differ in: nothing their meta.json both record (settings, sweep, environment)"


def test_what_differs_is_named_in_order_and_what_always_differs_is_not():
    """Settings (as their flags), the sweep's axes, the fingerprint (commits short), how the workers ran and
    each shared variant's source; never run_id, created, the calibration, or a GPU's clocks and temperature
    at the fingerprint; a field one run does not record is not compared."""
    gpu = {"name": "NVIDIA H200", "count": 1, "driver": "580.1", "sm_clock": "345 MHz", "temperature": "33 C"}

    def meta(**over):
        base = {
            "run_id": "r1", "created": "2026-01-01T00:00:00+00:00", "cwd": "/a", "gc_frozen_objects": 10,
            "sweep": {"dtypes": ["float32"], "settings": {"rounds": 1, "threads": 0, "budget_ms": 10.0}},
            "fingerprint": {"torch": "2.12.0", "git_commit": "a" * 40, "gpu": dict(gpu),
                            "memory_bytes": 2**34},
            "calibration": {"cpu": {"copy_gbps": 10.0}}, "worker_threads": 2, "executor": "local",
            "variant_capabilities": {"mine": {"source": "defined in __main__, source sha256 1a2b"}},
        }  # fmt: skip
        for key, value in over.items():
            base[key] = {**base[key], **value} if isinstance(value, dict) else value
        return base

    a = meta()
    noise = meta(run_id="r2", created="2026-01-02T00:00:00+00:00", cwd="/b", gc_frozen_objects=11,
                 calibration={"cpu": {"copy_gbps": 20.0}},
                 fingerprint={"gpu": {**gpu, "sm_clock": "1980 MHz", "temperature": "60 C"},
                              "memory_bytes": 2**34 - 4096})  # fmt: skip
    assert setup_differences(a, noise) == {}
    b = meta(
        sweep={"dtypes": ["float32", "bfloat16"], "settings": {"rounds": 3, "threads": 0, "budget_ms": 10.0}},
        fingerprint={"torch": "2.13.0", "git_commit": "b" * 40},
        worker_threads=1,
        variant_capabilities={"mine": {"source": "defined in __main__, source sha256 9f9f"}},
    )
    source = "defined in __main__, source sha256 "
    assert list(setup_differences(a, b).items()) == [
        ("threads", ["2", "1"]),
        ("--rounds", ["1", "3"]),
        ("dtypes", ["float32", "float32,bfloat16"]),
        ("torch", ["2.12.0", "2.13.0"]),
        ("attnbench commit", ["a" * 10, "b" * 10]),
        ("mine's source", [source + "1a2b", source + "9f9f"]),
    ]
    said = differences_line(a, b)
    assert said.startswith("A and B differ in: threads 2 in A, 1 in B; --rounds 1 in A, 3 in B; dtypes ")
    old = {k: v for k, v in b.items() if k != "fingerprint"}  # a run that recorded no fingerprint
    assert "torch" not in setup_differences(a, old)


def test_compare_s_first_screen_names_each_difference_once(tmp_path):
    """B on a new torch and another commit, sampled with another budget: the differences line named torch and
    the commit, and the warnings under it named them again ('set-up differs: torch 2.13.0 -> 2.14.0, ...',
    'sampling settings differ: --budget-ms ...'), so the page said "torch" three times. Each difference is
    named once on the first screen (the terminal's warnings and its first lines, the page above its figure),
    in the differences line; the warnings say what they mean."""
    import re

    runs = [synthetic.write_run(tmp_path / side, _rows(), run_id=side) for side in ("a", "b")]
    sides = zip(runs, ("2.13.0", "2.14.0"), ("a" * 40, "b" * 40), (10.0, 50.0), strict=True)
    for run, torch, commit, budget in sides:
        meta = json.loads((run / "meta.json").read_text())
        meta["sweep"]["settings"] = {"warmup_ms": 2.0, "budget_ms": budget}
        meta["fingerprint"].update(torch=torch, git_commit=commit)
        (run / "meta.json").write_text(json.dumps(meta))
    said = run_cli("compare", *map(str, runs), "--out", str(tmp_path / "page"))
    assert said.returncode == 0, said.stderr
    terminal = said.stderr + said.stdout.split("\n\n", 1)[0]
    page = (tmp_path / "page" / "README.md").read_text().split("![", 1)[0].replace("\\_", "_")
    metas = [json.loads((run / "meta.json").read_text()) for run in runs]
    differ = setup_differences(*metas)
    assert set(differ) == {"--budget-ms", "torch", "attnbench commit"}, differ
    for screen in (terminal, page):
        assert "set-up differs" in screen and "sampling settings differ" in screen, screen
        for name, values in differ.items():
            for said_as in (name, *values, "git_commit"):
                times = len(re.findall(rf"(?<![\w.-]){re.escape(said_as)}(?![\w.-])", screen))
                assert times == (said_as != "git_commit"), (said_as, times, screen)
