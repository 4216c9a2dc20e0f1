"""The report opens with its findings (issue 26): who is fastest where and where the lead changes, the
fitted exponents, the memory wall and how much of the run to trust, in README.md, report.html and on the
terminal; wide tables scroll in their own box; every variant has its own colour."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import synthetic
from conftest import run_cli

from attnbench.reports import findings, growth, page, style, words
from attnbench.reports.render import findings_of, prepare, render
from attnbench.results.spreads import VISIT_SPREAD_FLOOR

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "runs" / "cpu-small"
SEQ = [256, 512, 1024, 2048, 4096, 8192]


def _crossover_rows(**extra):
    """naive ∝ N² from 1 ms, chunked ∝ N^1.5 from 3 ms: naive leads up to N = 2,048 (x = N/256 = 8: 64 ms
    against 68 ms), chunked from 4,096 on (256 against 192 ms). Memory: naive ∝ N², chunked ∝ N."""
    rows = []
    for n in SEQ:
        x = n / 256
        rows.append(synthetic.cell("naive", n, time_ms=x**2, peak_mem_bytes=int(2**20 * x**2), **extra))
        rows.append(synthetic.cell("chunked", n, time_ms=3 * x**1.5, peak_mem_bytes=int(2**20 * x), **extra))
    return rows


@pytest.fixture(scope="module")
def crossover_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("crossover")
    # every cell with its speed probe, at the machine's usual speed: judged for drift, and none drifted
    rows = _crossover_rows(speed_tflops=1.0)
    run = synthetic.write_run(tmp / "run", rows, memory_bytes=2 * synthetic.GIB)
    return render(prepare([run]), tmp / "report")


def _sentences(rep) -> list[str]:
    """The one panel's sentences of a rendered report, or of findings_of's findings (no figures drawn)."""
    (panel,) = getattr(rep, "findings", rep).panels
    return list(panel.sentences)


def test_findings_name_the_fastest_per_range_and_the_crossover(crossover_report):
    s = _sentences(crossover_report)
    assert s[0].startswith("naive is fastest from N = 256 to 2,048 (") and "ahead of chunked" in s[0]
    assert s[1].startswith("chunked is fastest from N = 4,096 to 8,192 (") and "ahead of naive" in s[1]
    assert s[2] == "Crossover between N = 2,048 and 4,096: chunked takes the lead from naive."


def test_findings_give_the_exponents_in_words_and_the_memory_wall(crossover_report):
    text = " ".join(_sentences(crossover_report))
    naive = r"naive: time grows as N\^2\.00 \[\d\.\d\d, \d\.\d\d\] \(quadratic\), memory as N\^2\.00"
    chunked = r"chunked: time grows as N\^1\.50 \[1\.4\d, 1\.5\d\] \(between linear and quadratic\)"
    assert re.search(naive, text) and re.search(chunked, text)
    assert "memory as N^1.00 [1.00, 1.00] (linear)" in text
    # 2 GiB: naive's memory 2^20·(N/256)² reaches it at N ≈ 11,585 (8,192 as a power of two); chunked's only
    # far beyond what was measured
    assert "Memory wall (2 GiB of device memory" in text
    assert "naive fits up to N = 8,192" in text
    assert "chunked fits past N = 65,536 (8× the largest measured N, as far as the fit is read)" in text


def test_no_memory_wall_is_read_off_a_memory_fit_too_uncertain_to_say(tmp_path):
    """A memory exponent of 1.28 [-5.64, 8.21] (three N of a packed bench, each pack's longest sequence
    moving its peak) said a wall 'beyond N = 4,096': its upper bound reaches the device at N = 1,000."""
    rows = []
    for n, noise in zip(SEQ, (1.0, 9.0, 0.2, 30.0, 0.05, 50.0), strict=True):
        x = n / 256
        rows.append(synthetic.cell("wild", n, time_ms=x**2, peak_mem_bytes=int(2**20 * x * noise)))
        rows.append(synthetic.cell("naive", n, time_ms=x**2, peak_mem_bytes=int(2**20 * x**2)))
    run = synthetic.write_run(tmp_path / "run", rows, memory_bytes=2 * synthetic.GIB)
    text = " ".join(_sentences(findings_of(prepare([run]))))
    # its time says something, its memory nothing: the sentence leaves the memory out
    wild = text.split("wild: ")[1].split(". ")[0]
    assert wild.startswith("time grows as") and "memory" not in wild, text
    assert (
        "Memory wall (2 GiB of device memory, memory fit extrapolated): naive fits up to N = 8,192." in text
    )


def test_the_memory_wall_never_contradicts_the_cells_that_ran_or_were_refused(tmp_path):
    """'naive fits up to N = 16,384' beside a memory-guard skip of naive at 16,384 (reports/reference/
    cpu-epyc-2core): where a variant's own cells contradict its memory fit (refused at an N the fit says
    fits, or ok beyond the fit's wall), the wall is the largest N it ran ok, said as measured."""
    guard = "memory guard: predicted peak 2.10 GiB exceeds 90% of the 1.80 GiB available"
    rows = [r for r in _crossover_rows() if (r["variant"], r["seq_len"]) != ("naive", 8192)]
    rows.append(synthetic.cell("naive", 8192, status="skipped", message=guard))
    run = synthetic.write_run(tmp_path / "guarded", rows, memory_bytes=2 * synthetic.GIB)
    text = " ".join(s for p in findings_of(prepare([run])).panels for s in p.sentences)
    assert "naive fits up to" not in text, text  # its fit reads 8,192, where the guard skipped it
    assert "Measured, where the cells contradict the memory fit: naive ran ok up to N = 4,096." in text
    assert "Skipped by the memory guard: naive at N = 8,192." in text
    assert "chunked fits past N = 65,536" in text  # a fit no cell contradicts is read as before
    # the other way: ok at N = 8,192 (1 GiB) on a device whose fit reads the wall lower (0.5 GiB)
    small = synthetic.write_run(tmp_path / "small", _crossover_rows(), memory_bytes=synthetic.GIB // 2)
    text = " ".join(s for p in findings_of(prepare([small])).panels for s in p.sentences)
    assert "naive fits up to" not in text and "naive ran ok up to N = 8,192" in text, text


def test_an_exponent_without_a_ci_names_no_growth(tmp_path):
    """Two N: 'blk_new: time grows as N^0.16 (no CI, flat)' of an O(N²) kernel. Two noisy points name no
    class, and no exponent either (the varlen findings opened with 28 of them, 'chunked: N^-2.44 (no CI)'):
    the variants are named in one sentence, their exponents left to the scaling table."""
    times = {"blk": (10.0, 11.2), "naive": (1.0, 4.0)}
    rows = [
        synthetic.cell(v, n, time_ms=t, peak_mem_bytes=2**20 * n // 256)
        for v, ts in times.items()
        for n, t in zip((256, 512), ts, strict=True)
    ]
    text = " ".join(_sentences(findings_of(prepare([synthetic.write_run(tmp_path / "run", rows)]))))
    assert "Time's growth not measured (see the scaling table) for: naive and blk (two N each)." in text, text
    assert "grows as" not in text and "N^" not in text, text
    assert "Memory wall" not in text, text  # nor a wall read off a memory fit through two points


def _ran_until(variant: str, last: int, times: dict[int, dict[str, float]]) -> list[dict]:
    """`times` (N -> variant -> ms) as rows, `variant` an error past N = `last`."""
    rows = []
    for n, at in times.items():
        for v, t in at.items():
            broken = v == variant and n > last
            rows.append(
                synthetic.cell(v, n, status="error", message="boom")
                if broken
                else synthetic.cell(v, n, time_ms=t)
            )
    return rows


def test_a_tie_names_a_variant_only_at_the_n_where_it_ran_ok(tmp_path):
    """'m_nocausal, sdpa, m_crash, m_detach, m_raises and m_tail cannot be told apart from N = 128 to 256',
    with m_raises an error at 256: a variant at the front at only some N of the stretch is named with
    those N."""
    rows = _ran_until("z", 128, {n: {"x": n / 100, "y": n / 100, "z": n / 100} for n in (128, 256)})
    (first, *_) = _sentences(findings_of(prepare([synthetic.write_run(tmp_path / "r", rows)])))
    assert first == (
        "No variant can be told apart at every N measured, 128 to 256 (y and x; with them: z at N = 128)."
    ), first


def test_a_crossover_names_only_variants_ranked_on_both_sides_of_it(tmp_path):
    """'Crossover between N = 256 and 512: m_sleepy and sdpa take the lead from ... m_crash ... m_raises',
    neither of them run at 512: a variant that stopped was not overtaken."""
    rows = _ran_until(
        "gone", 256, {256: {"a": 1.0, "gone": 1.0, "b": 1.5}, 512: {"a": 8.0, "b": 4.0, "gone": 0}}
    )
    text = _sentences(findings_of(prepare([synthetic.write_run(tmp_path / "r", rows)])))
    assert "Crossover between N = 256 and 512: b takes the lead from a." in text, text


def test_a_tie_inside_a_lead_does_not_break_it():
    p = findings._Point
    pts = [p(256, "a", (), "b", 1.2), p(512, "b", ("a",), "a", 1.01), p(1024, "a", (), "b", 1.3)]
    (run,) = findings.leader_runs(pts)
    assert run[0] == "a"
    assert findings.run_sentence("a", run[1], every=True) == (
        "a is fastest at every N measured, 256 to 1,024 (1.20–1.30× ahead of b), except at N = 512, where "
        "it ties with b."
    )
    assert findings.run_sentence("a", [pts[1]], every=False) == "a and b cannot be told apart at N = 512."
    mostly_tied = [pts[0], pts[1], p(1024, "a", ("b",), "b", 1.01)]
    assert findings.run_sentence("a", mostly_tied, every=True) == (
        "a and b lead at every N measured, 256 to 1,024, tied at N = 512, 1,024 (a alone at N = 256: 1.20×"
        " ahead of b)."
    )
    runs = findings.leader_runs([p(256, "c", (), "a", 1.5), *pts[1:2]])
    assert [r[0] for r in runs] == ["c", "b"]  # b leads at 512 (a ties with it there)
    pts = [p(256, "c", (), "a", 1.5), p(512, "a", ("b",), "b", 1.01), p(1024, "b", ("a",), "a", 1.01)]
    runs = findings.leader_runs(pts)
    assert (
        findings.run_sentence(*runs[1], every=False) == "a and b cannot be told apart from N = 512 to 1,024."
    )


def test_findings_are_the_first_section_of_both_pages(crossover_report):
    md = crossover_report.readme.read_text()
    headings = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert headings[0] == "## Findings" and headings[1].startswith("## cpu · float32 · forward")
    assert md.index("naive is fastest") < md.index("](time-") < md.index("## Scaling") < md.index("## Runs")
    html = crossover_report.html.read_text()
    body = html[html.index("<body>") :]
    assert re.match(r"<body>\s*<h1>[^<]*</h1>\s*<h2>Findings</h2>", body)
    assert body.index("naive is fastest") < body.index("<figure>") < body.index("<h2>Scaling")


def test_a_clean_run_says_nothing_is_flagged(crossover_report):
    trust, visits = crossover_report.findings.trust
    assert trust == (
        "Trust: 12 of 12 cells ran ok; none is suspect, drifted, noisy or wrong, "
        "and none errored, crashed or timed out."
    )  # no 'throttled': a CPU run records no clock (a GPU run's rows do: test_a_gpu_run_says_none_throttled)
    assert visits.startswith("Each cell was measured in fewer than 3 visits: the leads in these findings")
    assert f"up to {1 + VISIT_SPREAD_FLOOR:.2f}×" in visits and "--rounds 3` ranks across visits" in visits


def test_a_gpu_run_says_none_throttled(tmp_path):
    """Where rows record the clock (a GPU's telemetry: `throttled`), a clean Trust line says none throttled;
    where none does (a CPU), it claims nothing of a clock it never read."""
    run = synthetic.write_run(tmp_path / "run", _crossover_rows(speed_tflops=1.0, throttled=False))
    trust = findings_of(prepare([run])).trust[0]
    assert "none is suspect, drifted, throttled, noisy or wrong" in trust


def test_a_run_without_speed_probes_says_drift_was_not_measured(tmp_path):
    """A run made before the speed probe was never judged for drift: its Trust line said "none is ...
    drifted"; it says drift was not measured, and names the cells where only some were probed."""
    run = synthetic.write_run(tmp_path / "run", _crossover_rows(), memory_bytes=2 * synthetic.GIB)
    trust = findings_of(prepare([run])).trust[0]
    assert trust == (
        "Trust: 12 of 12 cells ran ok; none is suspect, noisy or wrong, and none errored, "
        "crashed or timed out; drift was not measured (no speed probes in this run)."
    )
    rows = _crossover_rows()
    for r in rows[3:]:
        r["speed_tflops"] = 1.0
    run = synthetic.write_run(tmp_path / "some", rows, memory_bytes=2 * synthetic.GIB)
    trust = findings_of(prepare([run])).trust[0]
    assert "drifted" in trust and trust.endswith("; drift was not measured on 3 of them (no speed probe).")


def test_a_run_in_rounds_or_of_one_variant_has_no_one_visit_sentence(tmp_path):
    """The leads of a run in rounds are judged across its visits (results.judge.separation), and a run of
    one variant ranks nothing: neither says what one visit cannot see."""
    rounds = synthetic.rows_in_rounds({"naive": 1.0, "chunked": 1.5}, seed=3)
    alone = [r for r in _crossover_rows() if r["variant"] == "naive"]
    for name, rows in (("rounds", rounds), ("alone", alone)):
        found = findings_of(prepare([synthetic.write_run(tmp_path / name, rows)]))
        assert not any("fewer than 3 visits" in t for t in found.trust), name


def test_a_busy_run_counts_its_flags_and_says_what_to_do(tmp_path):
    rows = _crossover_rows()
    for i, r in enumerate(rows):
        r["speed_tflops"] = 0.5 if i % 3 == 0 else 1.0  # 4 of 12 cells measured at half the usual speed
    noisy = synthetic.samples(50.0, spread=0.4, seed=1)  # IQR/median about 0.4: noisy
    rows.append(synthetic.cell("sdpa", 1024, sample_ms=noisy, peak_mem_bytes=2**20, speed_tflops=1.0))
    rows.append(synthetic.cell("sdpa", 2048, status="error", message="boom"))
    rows.append(synthetic.cell("sdpa", 4096, status="unsupported", message="no"))
    run = synthetic.write_run(tmp_path / "busy run", rows)
    rep = render(prepare([run]), tmp_path / "report")
    first, visits = rep.findings.trust
    assert visits.startswith("Each cell was measured in fewer than 3 visits")
    (busy,) = rep.findings.busy  # said before the winners (test_findings_honest)
    assert first == (
        "Trust: 13 of 15 cells ran ok (1 unsupported); flagged: 4 drifted, "
        "1 noisy (IQR over 10% of the median), 1 error."
    )
    assert busy.startswith("The machine was busy while this ran: 5 of 13 ok cells drifted or were noisy")
    assert f"attnbench run --resume --redo-drift --out '{run}'" in busy
    assert "quiet machine" in busy
    md = rep.readme.read_text()
    assert md.index("The machine was busy") < md.index("## Runs")


def test_a_busy_run_whose_worker_used_several_threads_is_told_of_threads_1(tmp_path):
    """Trial W M1: with torch's default threads on a loaded 2-core machine a cell came out 20-230x too slow
    yet tight; the advice named a quiet machine and --redo-drift, never `--threads 1`. A worker of one thread
    is not told it."""
    said = {}
    for threads in (2, 1):
        rows = _crossover_rows()
        for i, r in enumerate(rows):
            r["speed_tflops"] = 0.5 if i % 3 == 0 else 1.0  # 4 of 12 cells measured at half the usual speed
            r["threads"] = threads
        run = synthetic.write_run(tmp_path / f"t{threads}", rows)
        (said[threads],) = findings_of(prepare([run])).busy
    assert (
        "or rerun the sweep on a quiet machine or with `--threads 1`, which other load slows far less "
        "than the worker's 2 threads." in said[2]
    )
    assert "--threads" not in said[1] and "on a quiet machine." in said[1]


def test_two_runs_on_two_machines_get_a_busy_verdict_each(tmp_path):
    """A quiet GPU run beside a busy CPU run: the busy sentence names the CPU run alone, with its own folder
    in the command (not a literal RUN), counts its cells alone, and the calibration section says the two
    share no device instead of an empty table."""
    busy_rows = _crossover_rows()
    for i, r in enumerate(busy_rows):
        r["speed_tflops"] = 0.5 if i % 3 == 0 else 1.0  # 4 of 12 cells measured at half the usual speed
    busy = synthetic.write_run(tmp_path / "runs" / "busy-cpu-run", busy_rows, run_id="busy-cpu")
    gpu = {"name": "Synthetic GPU", "memory_bytes": 80 * synthetic.GIB, "capability": "9.0", "count": 1}
    quiet_rows = [{**r, "device": "cuda"} for r in _crossover_rows(speed_tflops=1.0)]
    quiet = synthetic.write_run(tmp_path / "gpu", quiet_rows, run_id="h100", gpu=gpu)
    rep = render(prepare([quiet, busy]), tmp_path / "report")
    (said,) = rep.findings.busy
    assert said.startswith(
        "The machine was busy while run busy-cpu ran: 4 of 12 ok cells drifted or were noisy"
    )
    assert f"`attnbench run --resume --redo-drift --out {busy}`" in said and "--out RUN" not in said
    md = rep.readme.read_text().replace("\\", "")
    calibration = md[md.index("## Calibration of each run, against the first") :]
    assert "| run | device |" not in calibration
    assert "Run h100 shares no calibrated device with busy-cpu: there is no ceiling to compare" in calibration


def test_noisy_cells_while_the_speed_probe_held_are_said_to_be_their_own_spread(tmp_path):
    rows = _crossover_rows(speed_tflops=1.0)
    for n in (256, 512, 1024):  # three of twelve cells spread wide; the machine's probe never moved
        rows.append(
            synthetic.cell("sdpa", n, sample_ms=synthetic.samples(5.0, spread=0.4, seed=n), speed_tflops=1.0)
        )
    found = findings_of(prepare([synthetic.write_run(tmp_path / "run", rows)]))
    first, own, _visits = found.trust
    assert "3 noisy" in first and "busy" not in own and "quiet machine" not in own
    assert own.startswith("3 of 15 cells were noisy while the machine held its speed")


def test_a_run_with_no_ok_cell_says_so(tmp_path):
    rows = [synthetic.cell("naive", n, status="oom", message="out of memory") for n in (256, 512)]
    found = findings_of(prepare([synthetic.write_run(tmp_path / "run", rows)]))
    assert found.panels == ()
    assert "No cell ran ok" in findings.text(found)
    assert found.trust[0].startswith("Trust: 0 of 2 cells ran ok (2 oom)")


def _planned(run: Path, planned: int | None) -> Path:
    """The run's meta.json saying it planned `planned` cells (None: as runs made before they said so)."""
    meta = json.loads((run / "meta.json").read_text())
    meta.pop("planned_cells", None)
    if planned is not None:
        meta["planned_cells"] = planned
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def test_an_unfinished_run_says_so_first_and_in_its_trust_section(tmp_path):
    """A run that stopped after 2 of the 15 cells it planned: the findings open with it and the command
    that finishes it, and the page's Runs section says it; a run of every planned cell, or one whose
    meta.json does not say what it planned (made before runs did), says nothing."""
    rows = _crossover_rows()[:2]
    run = _planned(synthetic.write_run(tmp_path / "intr", rows), 15)
    said = f"Unfinished: 2 of 15 planned cells measured; finish with `attnbench run --resume --out {run}`."
    rep = render(prepare([run]), tmp_path / "report")
    assert rep.findings.unfinished == (said,) and findings.headline(rep.findings).startswith("(unfinished)")
    assert findings.text(rep.findings).splitlines()[1].startswith("Unfinished: 2 of 15 planned cells")
    md = rep.readme.read_text().replace("\\", "")
    runs = md.index("## Runs")
    assert md.index("Unfinished: 2 of 15") < md.index("## cpu") and "Unfinished: 2 of 15" in md[runs:]
    for planned in (2, None):
        done = _planned(synthetic.write_run(tmp_path / f"done-{planned}", rows), planned)
        found = findings_of(prepare([done]))
        assert found.unfinished == () and "nfinished" not in findings.text(found)
    # several runs: each unfinished one is named
    other = _planned(synthetic.write_run(tmp_path / "other", rows, run_id="other"), 4)
    both = findings_of(prepare([run, other]))
    # in the run ids' order, as every part of the page
    assert [t.split(":")[0] for t in both.unfinished] == ["Unfinished run other", "Unfinished run synthetic"]


def test_a_run_still_being_written_says_who_writes_it_not_how_to_resume_it(tmp_path):
    """A run whose writer lock a live process holds (a run still measuring): its report says so, with the
    cells so far, and gives no `--resume` that the lock would refuse; once the lock is let go, the resume."""
    import fcntl

    run = _planned(synthetic.write_run(tmp_path / "live", _crossover_rows()[:2]), 15)
    with (run / "writer.lock").open("w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # as RunWriter holds it while it writes
        lock.write("pid 4242 on host box since 2026-01-01T00:00:00+00:00\n")
        lock.flush()
        live = findings_of(prepare([run]))
        md = render(prepare([run]), tmp_path / "rep").readme.read_text().replace("\\", "")
    said = "Still being written: by pid 4242 on host box since 2026-01-01T00:00:00+00:00 (2 of 15 planned"
    assert live.unfinished[0].startswith(said) and "--resume" not in findings.text(live)
    assert "--resume" not in md and md.count("(2 of 15 planned cells so far)") == 2  # findings and Runs
    after = findings_of(prepare([run]))
    assert after.unfinished[0].startswith("Unfinished: 2 of 15 planned cells measured; finish with")


def test_a_run_stopped_early_is_reported_unfinished_until_resumed(tmp_path):
    """A real run records the cells it planned; killed after its first cell (its rows.jsonl holds that
    row alone), `attnbench report` says so first, and once `--resume` finished it, no more."""
    out = tmp_path / "run"
    args = ("--heads", "2", "--warmup-ms", "1", "--budget-ms", "5", "--min-ms", "1")  # uncalibrated
    made = run_cli("run", "--variants", "naive", "--seq-len", "32,64", *args, "-q", "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert json.loads((out / "meta.json").read_text())["planned_cells"] == 2
    first = (out / "rows.jsonl").read_text().splitlines()[0]
    (out / "rows.jsonl").write_text(first + "\n")
    (out / "visits.jsonl").unlink(missing_ok=True)
    (out / "written.json").unlink()  # the cut stands in for a kill, not an edit: as a run made before it
    report = run_cli("report", str(out), "--out", str(tmp_path / "rep"))
    assert report.returncode == 0, report.stderr
    assert report.stdout.splitlines()[1].startswith("Unfinished: 1 of 2 planned cells measured; finish with")
    assert f"`attnbench run --resume --out {out}`" in " ".join(report.stdout.split())
    resumed = run_cli("run", "--resume", "--out", str(out), "-q")
    assert resumed.returncode == 0, resumed.stderr
    again = run_cli("report", str(out), "--out", str(tmp_path / "rep2"))
    assert again.returncode == 0 and "nfinished" not in again.stdout


def test_the_fixture_has_findings_per_panel():
    """tests/data/runs/cpu-small: causal and non-causal panels, a wrong variant; every panel is found, its
    wrong variant said first (findings.wrong_sentence), then who is fastest."""
    found = findings_of(prepare([FIXTURE]))
    titles = [p.title for p in found.panels]
    assert len(titles) == 2 and {t.split(" · ")[-1] for t in titles} == {"causal", "non-causal"}
    for p in found.panels:
        assert (
            p.sentences[0].startswith(findings.WRONG_HEAD)
            and "fault_wrong at every N measured (rel_err " in p.sentences[0]
        )
        assert "is fastest" in p.sentences[1] or "cannot be told apart" in p.sentences[1]
        assert any("time grows as N^" in s or s.startswith("Time's growth not measured") for s in p.sentences)
    assert "wrong (failed the float64 check)" in found.trust[0]


def test_the_terminal_gets_the_findings_within_100_columns_then_the_path(tmp_path):
    run = synthetic.write_run(tmp_path / "run", _crossover_rows())
    p = run_cli("report", str(run), "--out", str(tmp_path / "report"))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "Findings" and any("Crossover between N = 2,048 and 4,096" in ln for ln in lines)
    assert max(len(ln) for ln in lines) <= 100 and len(lines) < 20
    assert "time exponent [95% CI]" not in p.stdout  # the wide fits table stays in the report
    assert p.stderr.strip().startswith("report: ")
    text = findings.text(findings_of(prepare([run])), width=60)
    assert max(len(ln) for ln in text.splitlines()) <= 60


def test_wide_tables_scroll_in_their_own_box(crossover_report):
    html = crossover_report.html.read_text()
    assert ".scroll { overflow-x: auto;" in html
    tables = re.findall(r'<div class="([^"]*)"><table>', html)
    assert tables and all("scroll" in t.split() for t in tables)
    # the fits table (13 columns) is wide: unwrapped rows, the variant column sticky
    assert "scroll wide" in tables
    fits = html[html.index("<h2>Scaling") :]
    assert fits.index('<div class="scroll wide">') < fits.index("time exponent")
    narrow = page.Table(("a", "b"), (("1", "2"),))
    assert '<div class="scroll"><table>' in page.to_html(page.Page("t", [narrow]), Path("."))


BUILTINS = ["naive", "stable_softmax", "unstable_softmax", "chunked", "chunked_compiled", "flex", "sdpa",
            "sdpa_math", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "xformers"]  # fmt: skip


def test_every_built_in_variant_has_its_own_colour():
    colours = [style.variant_color(v) for v in BUILTINS]
    assert len(set(colours)) == 12
    assert style.variant_color("chunked") != style.variant_color("flex")  # they shared one green
    assert not set(style.EXTRA_COLORS) & set(style.VARIANT_COLORS.values())


def test_plug_ins_get_distinct_colours_stable_across_figures():
    plugins = [f"plugin_{i}" for i in range(12)]
    with style.palette([*BUILTINS, *plugins]):
        first = [style.variant_color(v) for v in [*BUILTINS, *plugins]]
        again = [style.variant_color(v) for v in reversed([*BUILTINS, *plugins])][::-1]
    assert len(set(first)) == 24 and first == again
    # a plug-in alone keeps the colour its name gives it anywhere, inside a palette or not
    with style.palette(["mine"]):
        assert style.variant_color("mine") == style.variant_color("mine")
        inside = style.variant_color("mine")
    assert inside == style.variant_color("mine")


def test_a_report_draws_each_variant_in_one_colour(crossover_report):
    """Every figure of the report: chunked's line has chunked's colour (the SVG keeps the stroke)."""
    colour = style.variant_color("chunked")
    svgs = [crossover_report.out_dir / f.svg for f in crossover_report.figures if f.stem.split("-")[0] in
            ("time", "memory", "throughput")]  # fmt: skip
    assert svgs and all(colour in svg.read_text() for svg in svgs)


def test_a_leader_that_shared_the_front_takes_it_from_the_others_only(monkeypatch):
    """The quick preset's report said 'sdpa_flash takes the lead from sdpa, naive and sdpa_flash': three
    tied at the front up to 1,536, sdpa_flash alone from 2,048."""
    import pandas as pd

    P = findings._Point
    tied = [P(n, "sdpa", ("naive", "sdpa_flash"), "naive", 1.0) for n in (1024, 1536)]
    alone = [P(n, "sdpa_flash", (), "sdpa", 1.05) for n in (2048, 2560)]
    monkeypatch.setattr(findings, "length_axis", lambda rows: "seq_len")
    monkeypatch.setattr(findings, "best_variant", lambda rows: pd.DataFrame({"x": [1]}))
    monkeypatch.setattr(findings, "_points", lambda best, length, ranked=None: tied + alone)
    monkeypatch.setattr(findings, "leader_runs", lambda pts: [("sdpa", tied), ("sdpa_flash", alone)])
    s = findings.ranking_sentences(pd.DataFrame())
    assert s[-1] == "Crossover between N = 1,536 and 2,048: sdpa_flash takes the lead from sdpa and naive."


def test_a_decode_panels_sentences_name_n_k_where_they_are_built(tmp_path):
    """A decode panel's length is its keys: its ranking, growth and memory-wall sentences say N_k as each
    builder writes them (from the panel's length axis), with no rewrite of the finished text after."""
    from attnbench import results
    from attnbench.reports import fit as fitmod

    rows = []
    for nk in SEQ:  # naive ∝ N_k², chunked ∝ N_k^1.5: naive leads up to 2,048, chunked from 4,096
        x, decode = nk / 256, {"seq_k": nk, "causal": True, "causal_align": "lower-right", "kv_heads": 2}
        rows.append(synthetic.cell("naive", 1, time_ms=x**2, peak_mem_bytes=int(2**20 * x**2), **decode))
        rows.append(synthetic.cell("chunked", 1, time_ms=3 * x**1.5, peak_mem_bytes=int(2**20 * x), **decode))
    rows.append(synthetic.cell("flex", 1, seq_k=256, causal=True, causal_align="lower-right", kv_heads=2,
                               time_ms=50.0))  # fmt: skip
    rows.append(synthetic.cell("flex", 1, seq_k=512, causal=True, causal_align="lower-right", kv_heads=2,
                               status="oom"))  # fmt: skip
    run = synthetic.write_run(tmp_path / "run", rows, memory_bytes=2 * synthetic.GIB)
    df = results.load(run)
    fits = fitmod.scaling_table(df, results.load_meta(run))
    ranking = findings.ranking_sentences(df)
    grows = growth.growth_sentences(fits, "seq_k")
    wall = growth.wall_sentence(fits, df)
    assert ranking[0].startswith("naive is fastest from N_k = 256 to 2,048 (")
    assert ranking[2] == "Crossover between N_k = 2,048 and 4,096: chunked takes the lead from naive."
    assert grows[0].startswith("naive: time grows as N_k^2.00 [")
    assert "No fit (ok at fewer than two N_k): flex (1 ok, 1 oom)." in grows
    assert "naive fits up to N_k = 8,192" in wall and "(8× the largest measured N_k," in wall
    assert "Measured out of memory: flex at N_k = 512." in wall
    for sentence in (*ranking, *grows, wall):
        assert not re.search(r"\bN\b", sentence), sentence  # never a bare N in a decode panel
    # the same builders on a square panel say N
    assert growth.growth_sentences(fits)[0].startswith("naive: time grows as N^2.00 [")
    assert words.range_text([256, 512], name="N_k") == "from N_k = 256 to 512"


def test_a_variant_alone_among_suspects_is_never_called_fastest(tmp_path):
    """An outside trial: chunked and sdpa marked suspect at N = 256 left naive the only ranked variant
    there, and the findings said "naive is fastest ... (the only variant with a ranked cell)" and that sdpa
    took the lead from naive. At such an N the sentence says the others are suspect, never ranked, and why;
    the N takes no part in a lead or a crossover."""
    from attnbench import results

    rows = []
    for n in (256, 512, 1024):
        usual = 10.0 * (n / 256) ** 2
        naive_ms = usual * 8 if n == 256 else usual  # steady, so its word holds: 32x and 48x are suspect
        rows.append(synthetic.cell("naive", n, time_ms=naive_ms))
        rows += [synthetic.cell(v, n, time_ms=usual / f) for v, f in (("chunked", 4.0), ("sdpa", 6.0))]
    df = results.load(synthetic.write_run(tmp_path / "run", rows, peak_tflops=100.0))
    said = findings.ranking_sentences(df)
    text = " ".join(said)
    assert "naive is fastest" not in text and "only variant with a ranked cell" not in text, said
    assert "from naive" not in text, said  # no crossover out of an N nobody won
    alone = [s for s in said if s.startswith("At N = 256 naive is the only variant ranked")]
    assert len(alone) == 1, said
    assert "chunked and sdpa are suspect there, never ranked" in alone[0]
    assert "faster than naive on the same cell" in alone[0]
    assert any(s.startswith("sdpa is fastest from N = 512 to 1,024") for s in said), said


def test_a_lead_is_said_in_the_digits_its_spread_supports(tmp_path):
    """A lead of 344.99x read off cells spread ±1463% is '300×' in the findings and the ranking, not a
    two-decimal figure the spread cannot bear; a lead off quiet cells keeps its two decimals; a ratio of
    two medians spreads by their half-IQRs added."""
    from attnbench.reports.tables import ranking, ranking_text
    from attnbench.reports.words import ratio_range
    from attnbench.results import load
    from attnbench.results.formulas import ratio_number, ratio_spread

    assert ratio_spread(0.04, 0.08) == pytest.approx(0.06)
    assert ratio_number(344.99, ratio_spread(29.2, 0.06)) == "300"
    assert ratio_number(13.16, 0.2) == "13" and ratio_number(1.16, 0.04) == "1.16"
    assert ratio_number(1.16, float("nan")) == "1.16"  # a spread not known: as before
    assert ratio_range([344.99, 1.16], [14.63, 0.04]) == "1.16–300×"
    assert ratio_range([1.05, 1.16]) == "1.05–1.16×"
    # the slow cell's samples spread from a tenth of its median to 60x it: IQR/median 29.2 (±1463%)
    slow = [34.5, 34.5, 34.5, 344.99, 344.99, 344.99, 10418.7, 10418.7, 10418.7]
    rows = [
        synthetic.cell("fast", 256, sample_ms=[0.98, 1.0, 1.0, 1.0, 1.02]),
        synthetic.cell("slow", 256, sample_ms=slow),
    ]
    run = synthetic.write_run(tmp_path / "run", rows)
    df = load(run)
    assert df.set_index("variant").loc["slow", "rel_iqr"] > 10
    text = ranking_text(ranking(df))
    assert "slow 300×" in text and "344.99" not in text, text
    said = " ".join(_sentences(findings_of(prepare([run]))))
    assert "(300× ahead of slow)" in said and "344.99" not in said, said
