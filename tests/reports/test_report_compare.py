"""compare on real run directories, judged by results.judge: what two single runs can and cannot tell, the
--fail-above gate, calibration and device groups, a control, the A/B in one run, old runs' columns, every
reference run, and the real `attnbench compare` command with its exit statuses and its one rule text."""

from __future__ import annotations

import json
import math
import random
import re
import statistics
from dataclasses import replace

import pytest
import synthetic
from conftest import ROOT, run_cli
from synthetic import rows_in_rounds

from attnbench.reports.compare import (
    accuracy_lines,
    cell_table,
    change_text,
    compare_runs,
    normalize_note,
    verdict_rule,
)
from attnbench.reports.compare_page import text_report, write_page
from attnbench.results import judge
from attnbench.results.judge import RUN_SPREAD_FLOOR
from attnbench.results.thresholds import parse_run_spread, parse_sample_spread, parse_threshold

SEQ = [256, 512, 1024, 2048]
VARIANTS = {"naive": 1.0, "sdpa": 0.4}
GATE = parse_threshold("median:5%")
# two single runs cannot see how far whole runs move (results.judge: blind), nor samples of one visit how far
# the next visit moves; the tests of what their own samples or visits tell state that this synthetic machine
# has no such spread
STATED = {"run_spread": 0.0, "sample_spread": 0.0}


def _rows(factor: float = 1.0, seed: int = 0, device: str = "cpu", shuffle: bool = False, **status):
    rows = []
    for variant, base in VARIANTS.items():
        for n in SEQ:
            s = synthetic.samples(base * (n / 256) ** 2, n=30, spread=0.03, seed=seed + n)
            if shuffle:
                random.Random(n).shuffle(s)
            s = [x * factor for x in s]
            st = status.get(f"{variant}_{n}", "ok")
            rows.append(
                synthetic.cell(
                    variant,
                    n,
                    device=device,
                    sample_ms=s if st == "ok" else None,
                    status=st,
                    peak_mem_bytes=2**20,
                )
            )
    return rows


def _visited(rows, k: int = 3):
    """The rows as measured in k visits of equal shares of their samples (--rounds k)."""
    out = []
    for r in rows:
        s = r.get("samples_ms")
        if s:
            share = len(s) // k
            medians = [statistics.median(s[i * share : (i + 1) * share]) for i in range(k)]
            r = dict(r, visit_medians_ms=medians, visit_samples=[share] * k)
        out.append(r)
    return out


def _pair(tmp_path, rows_a, rows_b, **kw_b):
    a = synthetic.write_run(tmp_path / "a", rows_a, run_id="run-a")
    b = synthetic.write_run(tmp_path / "b", rows_b, run_id="run-b", **kw_b)
    return a, b


# ---- two single runs: what they cannot see ---------------------------------------------------------------


@pytest.mark.parametrize("shift", [1.10, 1.20])
def test_two_single_runs_of_identical_code_pass_both_ways_and_a_2x_slowdown_fails(tmp_path, shift):
    """Identical code, run B on a machine `shift` times slower throughout (what moves between whole runs on
    a shared machine, far beyond each run's own visits): blind, neither order fails median:5%; a 2x
    slowdown on top does in runs made in rounds, and a 3x one (past the largest visit-to-visit ratio
    measured) in runs of one visit a cell."""
    for kind, same, slow in [
        ("rounds", lambda s: rows_in_rounds(VARIANTS, 2, speed=s), {"naive": 2.0, "sdpa": 0.8}),
        ("samples", lambda s: _rows(s, seed=7), None),
    ]:
        a = synthetic.write_run(
            tmp_path / kind / "a", rows_in_rounds(VARIANTS, 1) if slow else _rows(), run_id="a"
        )
        b = synthetic.write_run(tmp_path / kind / "b", same(shift), run_id="b")
        for x, y in ((a, b), (b, a)):
            cmp = compare_runs(x, y, threshold=GATE)
            assert cmp.regressions.empty and cmp.judgement.blind, cmp.cells[["ratio", "ratio_ci_low"]]
            assert cmp.judgement.level == ("visit" if slow else "sample")
        rows = rows_in_rounds(slow, 3, speed=shift) if slow else _rows(3.0 * shift, seed=9)
        doubled = synthetic.write_run(tmp_path / kind / "slow", rows, run_id="slow")
        assert len(compare_runs(a, doubled, threshold=GATE).regressions) == 8
        assert len(compare_runs(b, doubled, threshold=GATE).regressions) == 8  # 2x of the shifted run
    report = text_report(compare_runs(a, b, threshold=GATE))
    assert (
        report.count("BLIND to the spread between runs") == 1
        and f"up to {1 + RUN_SPREAD_FLOOR:.2f} (" in report
    )


def test_a_known_shift_is_significant_once_the_run_spread_is_stated(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(1.10, shuffle=True))
    cmp = compare_runs(a, b, **STATED)
    assert len(cmp.cells) == 8 and cmp.judgement.level == "sample"
    assert cmp.cells["ratio"].to_numpy() == pytest.approx(1.10, rel=1e-9)
    assert cmp.cells["significant"].astype(bool).all() and (cmp.cells["p_value"] < 1e-6).all()
    assert cmp.per_variant["geomean_ratio"].to_numpy() == pytest.approx(1.10, rel=1e-6)
    assert (cmp.per_variant["slower"] == 4).all()
    assert cmp.cells["change"].iloc[0] == "1.10x slower"
    assert "stated with --run-spread" in verdict_rule(cmp)
    blind = compare_runs(a, b)  # the same 10%, and no figure for the spread between runs: can't tell
    assert set(blind.cells["verdict"]) == {"ambiguous"} and (blind.per_variant["ambiguous"] == 4).all()
    # and its change says so, as a change that is not significant does: never a bare "1.10x slower"
    words = "within the run-to-run spread; fewer than 3 visits a side: within the visit-to-visit spread"
    assert set(blind.cells["change"]) == {f"1.10x slower, ambiguous ({words}; measure with --rounds 3)"}


def test_no_shift_is_not_significant(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(shuffle=True))  # the same samples in another order
    cmp = compare_runs(a, b, **STATED)
    assert not cmp.cells["significant"].astype(bool).any()
    assert cmp.cells["ratio"].to_numpy() == pytest.approx(1.0)
    # independent draws from one distribution: the test should (almost) never call them different
    a2, b2 = _pair(tmp_path / "2", _rows(seed=0), _rows(seed=1000))
    cmp2 = compare_runs(a2, b2, **STATED)
    assert cmp2.cells["significant"].astype(bool).sum() <= 1
    assert "not significant" in " ".join(cmp2.cells["change"])


@pytest.mark.parametrize(
    "spec, stat, value, relative",
    [
        ("median:5%", "median", 0.05, True),
        ("min:0.5", "min", 0.5, False),
        ("mean:12.5%", "mean", 0.125, True),
    ],
)
def test_parse_threshold(spec, stat, value, relative):
    t = parse_threshold(spec)
    assert (t.stat, t.relative) == (stat, relative) and t.value == pytest.approx(value)


@pytest.mark.parametrize("spec", ["median:abc", "p99:5%", "5%", "", "median:", "median:-5%"])
def test_parse_threshold_rejects(spec):
    with pytest.raises(ValueError, match="--fail-above"):
        parse_threshold(spec)


def test_parse_run_spread():
    assert parse_run_spread("8")[0] == pytest.approx(0.08)
    assert parse_run_spread("12.5%")[0] == pytest.approx(0.125)
    assert parse_run_spread("0") == (0.0, None)
    for bad in ("-3", "abc", "100", "8%%", ""):
        with pytest.raises(ValueError, match="--run-spread"):
            parse_run_spread(bad)


def test_parse_sample_spread():
    assert parse_sample_spread("158")[0] == pytest.approx(1.58)  # the visit floor may pass 100%
    assert parse_sample_spread("30%")[0] == pytest.approx(0.30)
    for bad in ("-3", "abc", "8%%", ""):
        with pytest.raises(ValueError, match="--visit-spread"):
            parse_sample_spread(bad)


def test_floors_of_the_cpu_vm_applied_to_cuda_cells_say_so(tmp_path):
    """The floors were measured on the CPU reference VM: two blind CUDA runs judged by them say so in the
    rule and beside the page's verdict, with the command that measures one's own; a CPU pair, or floors
    stated with --run-spread and --visit-spread, say nothing of it."""
    said = "The floors were measured on a shared 2-core CPU VM, not on cuda"
    a, b = _pair(tmp_path / "gpu", _rows(device="cuda"), _rows(device="cuda", seed=9))
    cmp = compare_runs(a, b, threshold=GATE)
    assert said in cmp.rule
    assert "`python benchmarks/false_alarm.py --story quick --run-arg=--device=cuda`" in cmp.rule
    write_page(cmp, tmp_path / "page")
    readme = (tmp_path / "page" / "README.md").read_text()
    assert said in readme.split("## ")[0]  # in the verdict section, before the figure and the tables
    assert said not in compare_runs(a, b, threshold=GATE, **STATED).rule
    visit_only = compare_runs(a, b, threshold=GATE, run_spread=0.0).rule  # the visit floor still the VM's
    assert "The visit floor was measured on a shared 2-core CPU VM, not on cuda" in visit_only
    c, d = _pair(tmp_path / "cpu", _rows(), _rows(seed=9))
    assert "not on" not in compare_runs(c, d, threshold=GATE).rule


def test_fail_above_gate(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(1.10, shuffle=True))
    assert len(compare_runs(a, b, threshold=GATE, **STATED).regressions) == 8
    assert len(compare_runs(a, b, threshold=parse_threshold("median:20%"), **STATED).regressions) == 0
    assert len(compare_runs(a, b, threshold=parse_threshold("max:1000"), **STATED).regressions) == 0
    faster = compare_runs(b, a, threshold=GATE, **STATED)
    assert len(faster.regressions) == 0 and (faster.cells["change"].str.endswith("faster")).all()
    assert (faster.cells["verdict"] == "faster").all()


def test_ok_to_wrong_is_a_regression(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(shuffle=True, sdpa_1024="wrong", sdpa_2048="unsupported"))
    cmp = compare_runs(a, b, threshold=GATE)
    reg = cmp.regressions
    assert list(zip(reg["variant"], reg["seq_len"], strict=True)) == [("sdpa", 1024)]
    assert "ok -> wrong" in reg["why"].iloc[0]
    assert f"REGRESSION {reg['cell_id'].iloc[0]}: status ok -> wrong" in text_report(cmp)
    assert reg["cell_id"].iloc[0].startswith("sdpa|") and "|n1024|" in reg["cell_id"].iloc[0]
    assert int(cmp.per_variant.set_index("variant").loc["sdpa", "status_changed"]) == 2


def test_cpu_vs_gpu_matches_all_axes_but_device(tmp_path):
    a, b = _pair(
        tmp_path, _rows(), _rows(0.1, device="cuda"), gpu={"name": "Synthetic GPU", "memory_bytes": 2**34}
    )
    cmp = compare_runs(a, b)
    assert "except device (cpu in A, cuda in B)" in cmp.match
    assert len(cmp.cells) == 8 and set(cmp.cells["device_b"]) == {"cuda"}
    assert cmp.per_variant["geomean_ratio"].to_numpy() == pytest.approx(0.1, rel=1e-6)
    assert set(cmp.cells["verdict"]) == {"faster"}  # 10x: beyond any spread between runs


def test_no_common_cells_is_an_error(tmp_path):
    a, b = _pair(tmp_path, _rows(), [synthetic.cell("naive", 99, time_ms=1.0)])
    with pytest.raises(ValueError, match="no cell in common") as caught:
        compare_runs(a, b)
    assert "no value in common on seq_len (256, 512, 1024, ... in A, 99 in B)" in str(caught.value)


def test_no_common_cells_names_every_axis_whose_values_do_not_overlap(tmp_path):
    """A CPU run against a GPU one of other dtypes and shapes read 'matched on every axis except device
    (cpu in A, cuda in B)', as if only the device differed."""
    gpu = [synthetic.cell(v, n, device="cuda", dtype="bfloat16", heads=16, d_k=128, time_ms=0.1)
           for v in VARIANTS for n in SEQ]  # fmt: skip
    a, b = _pair(tmp_path, _rows(), gpu, gpu={"name": "Synthetic GPU", "memory_bytes": 2**34})
    with pytest.raises(ValueError) as caught:
        compare_runs(a, b)
    said = str(caught.value)
    assert "except device (cpu in A, cuda in B)" in said and "\n" not in said, said
    for axis in ("dtype (float32 in A, bfloat16 in B)", "heads (8 in A, 16 in B)", "d_k (64 in A, 128 in B)"):
        assert axis in said, said
    assert "variant (" not in said and "seq_len (" not in said  # those overlap


def test_cli_compare_exit_statuses_and_the_one_rule(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(4.0, shuffle=True))
    out = tmp_path / "out"
    proc = run_cli("compare", str(a), str(b), "--fail-above", "median:5%", "--out", str(out), timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "4.00x slower" in proc.stdout and "8 regressions" in proc.stdout
    assert proc.stdout.count("Rule: Judged at the sample level") == 1 and "BLIND" in proc.stdout
    assert (out / "compare.html").stat().st_size > 0 and (out / "compare.png").stat().st_size > 0
    page = (out / "README.md").read_text()
    assert (
        page.count("Judged at the sample level") == 1 and page.count("BLIND to the spread between runs") == 1
    )
    assert "Cliff" not in page and "bootstrap" not in page
    a, c = _pair(tmp_path / "visited", _visited(_rows()), _visited(_rows(1.10, shuffle=True)))
    args = ("compare", str(a), str(c), "--fail-above", "median:5%")
    blind = run_cli(*args, "--out", str(tmp_path / "o2"), timeout=120)
    assert blind.returncode == 0 and "no regression" in blind.stdout
    stated = run_cli(*args, "--run-spread", "2%", "--out", str(tmp_path / "o3"), timeout=120)
    assert (
        stated.returncode == 1
        and "8 regressions" in stated.stdout
        and "stated with --run-spread" in stated.stdout
    )


@pytest.mark.parametrize("case", ["spec", "missing", "not_a_run", "alpha", "run_spread", "visit_spread"])
def test_cli_compare_bad_input(tmp_path, case):
    a, b = _pair(tmp_path, _rows(), _rows())
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    args = {
        "spec": [str(a), str(b), "--fail-above", "median:abc"],
        "missing": [str(a), str(tmp_path / "nope")],
        "not_a_run": [str(tmp_path / "empty"), str(b)],
        "alpha": [str(a), str(b), "--alpha", "2"],
        "run_spread": [str(a), str(b), "--run-spread", "lots"],
        "visit_spread": [str(a), str(b), "--visit-spread=-5%"],
    }[case]
    proc = run_cli("compare", *args, "--out", str(out), timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("attnbench: error:")
    assert proc.stdout == "" and not out.exists()


def test_cells_only_one_run_has_are_counted_and_b_s_broken_ones_named(tmp_path):
    """A: naive and chunked at 3 N; B: naive at one of them, and a variant A never ran, broken at 3 N and
    ok at a fourth. The one shared cell is judged; the rest are counted by side and status, B's broken
    ones named by cell_id, in the terminal and on the page; they cannot regress against A: no failure."""
    rows_a = [synthetic.cell(v, n, time_ms=n / 100) for v in ("naive", "chunked") for n in (128, 256, 512)]
    broken = [("error", 128), ("timeout", 256), ("wrong", 512)]
    rows_b = [synthetic.cell("naive", 128, time_ms=1.28), synthetic.cell("sdpa", 1024, time_ms=3.0)]
    rows_b += [synthetic.cell("sdpa", n, status=st, message="boom") for st, n in broken]
    a, b = _pair(tmp_path, rows_a, rows_b)
    cmp = compare_runs(a, b, threshold=GATE)
    assert len(cmp.cells) == 1 and (len(cmp.only_a), len(cmp.only_b)) == (5, 4) and cmp.regressions.empty
    named = [f"{r['cell_id']} ({r['status']})" for r in rows_b[2:]]
    lines = [
        "not compared, the other run has no such cell: 5 cells only in A (5 ok) and 4 cells only in B (1 ok, "
        "1 wrong, 1 error, 1 timeout); the 5 ok only in A are MISSING from B, which --fail-above fails on",
        "broken only in B, not gated (no cell of A to regress from): " + ", ".join(named),
    ]
    text = text_report(cmp)
    assert all(line in text for line in lines)
    assert text.rstrip().endswith(
        "FAILED: 5 cells ok in A missing from B (MISSING), no regression; 5 of A's 6 cells have no ok row "
        "in B; 3 cells broken only in B, not gated (above)"
    )
    assert all(f"MISSING {r['cell_id']}: ok in A, no row in B" in text for r in rows_a[1:])
    readme, _ = write_page(cmp, tmp_path / "page")
    assert "5 cells only in A (5 ok)" in readme.read_text() and "(timeout)" in readme.read_text()
    # the same cells both sides: no such line
    assert "not compared" not in text_report(compare_runs(*_pair(tmp_path / "same", _rows(), _rows())))


def test_a_run_compared_with_itself_is_refused(tmp_path):
    """compare RUN RUN (the same directory, however spelled) would judge every cell at 1.000 against itself:
    refused in one line, as report refuses it; an A/B of two of its variants is still the way to compare in
    one run."""
    run = synthetic.write_run(tmp_path / "run", _rows())
    with pytest.raises(ValueError, match="the same run is given twice"):
        compare_runs(run, run)
    out = tmp_path / "out"
    proc = run_cli("compare", str(run), str(tmp_path / "." / "run" / ".." / "run"), "--out", str(out))
    assert (
        proc.returncode == 2 and proc.stderr.count("\n") == 1 and "the same run is given twice" in proc.stderr
    )
    assert proc.stdout == "" and not out.exists()
    assert len(compare_runs(run, run, variant_a="naive", variant_b="sdpa").cells) == len(SEQ)


def test_runs_sampled_with_different_settings_are_warned_about(tmp_path):
    """One run with warm-up 50 / budget 1000 / min_ms 100 ms, the other 20 / 300 / 50: compare said nothing,
    as it says when the calibrations differ. The differences line names each setting on both sides, and
    one warning line says what that means for the ratios, without naming them again."""
    a, b = _pair(tmp_path, _rows(), _rows())

    def settings(run, **values):
        meta = json.loads((run / "meta.json").read_text())
        meta["sweep"]["settings"] = {"warmup_ms": 20, "budget_ms": 300, "min_ms": 50, "seed": 0, **values}
        (run / "meta.json").write_text(json.dumps(meta))

    settings(a, warmup_ms=50, budget_ms=1000, min_ms=100)
    settings(b, seed=1)  # not a sampling setting
    # a warning is on stderr, one `attnbench: warning:` line, as every command's; the report is stdout's
    said = run_cli("compare", str(a), str(b), "--out", str(tmp_path / "page"))
    assert said.returncode == 0, said.stderr
    (line,) = [x for x in said.stderr.splitlines() if "sampling settings differ" in x]
    assert line.startswith(
        "attnbench: warning: sampling settings differ (said in 'A and B differ in'): a cell's time depends "
    ), line
    assert "--" not in line  # each setting is the differences line's to name
    named = "--warmup-ms 50 in A, 20 in B; --budget-ms 1000 in A, 300 in B; --min-ms 100 in A, 50 in B"
    assert f"A and B differ in: {named}; --seed 0 in A, 1 in B\n" in said.stdout, said.stdout[:600]
    assert "settings differ" not in said.stdout and "WARNING" not in said.stdout
    settings(a)
    assert not any("sampling settings differ" in w for w in compare_runs(a, b).warnings)


def test_runs_on_another_set_up_say_so_as_a_resume_would_refuse_them(tmp_path):
    """A new torch, another commit, huge pages and an allocator tunable on B's side: --resume refuses to mix
    them (results.identity), yet compare said nothing. The differences line names each on both sides, and
    one warning line, on stderr and on the page, says what it means for the ratios without naming them
    again; the same set-up (or a key one run did not record) says none."""
    a, b = _pair(tmp_path, _rows(), _rows())

    def setup(run, **fp):
        meta = json.loads((run / "meta.json").read_text())
        meta["fingerprint"].update(fp)
        (run / "meta.json").write_text(json.dumps(meta))

    setup(a, git_commit="ffcbb917-dirty", allocator_env="none", THP_MEM_ALLOC_ENABLE=None)
    setup(b, torch="2.14.0+cpu", git_commit="deadbeef", allocator_env="MALLOC_MMAP_MAX_=0")
    setup(b, THP_MEM_ALLOC_ENABLE="1")
    said = run_cli("compare", str(a), str(b), "--out", str(tmp_path / "page"))
    assert said.returncode == 0, said.stderr
    (line,) = [x for x in said.stderr.splitlines() if "set-up differs" in x]
    assert line.startswith(
        "attnbench: warning: set-up differs in what a resume refuses to mix (said in 'A and B differ in'): "
    ), line
    assert "not the code alone" in line and not re.search(r"torch|commit|allocator|THP|->", line), line
    named = (
        "torch 0.0 in A, 2.14.0+cpu in B; attnbench commit ffcbb917-dirty in A, deadbeef in B; "
        "allocator_env none in A, MALLOC_MMAP_MAX_=0 in B; THP_MEM_ALLOC_ENABLE not set in A, 1 in B"
    )
    assert f"A and B differ in: {named}\n" in said.stdout, said.stdout[:600]
    assert "set-up differs" in (tmp_path / "page" / "README.md").read_text()
    setup(b, torch="0.0", git_commit="ffcbb917-dirty", allocator_env="none", THP_MEM_ALLOC_ENABLE=None)
    assert not any("set-up differs" in w for w in compare_runs(a, b).warnings)
    meta = json.loads((b / "meta.json").read_text())
    meta["fingerprint"] = {"hostname": "synthetic-host"}  # an old run that recorded none of them
    (b / "meta.json").write_text(json.dumps(meta))
    assert not any("set-up differs" in w for w in compare_runs(a, b).warnings)


def test_a_copy_of_a_run_compared_with_it_is_refused(tmp_path):
    """compare runs/n1 /tmp/n1copy (a copied directory: the same run_id and created in meta.json) printed
    a comparison of identical data: refused in one line, exit 2, as the same directory is; an A/B of two
    of its variants still pairs by round."""
    import shutil

    run = synthetic.write_run(tmp_path / "run", _rows())
    copy = shutil.copytree(run, tmp_path / "elsewhere" / "copy")
    with pytest.raises(
        ValueError, match=r"copy is a copy of the run .*\(the run_id \S+ and created \S+ in meta\.json\)"
    ):
        compare_runs(run, copy)
    out = tmp_path / "out"
    proc = run_cli("compare", str(run), str(copy), "--out", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "is a copy of the run" in proc.stderr and "in meta.json" in proc.stderr
    assert proc.stdout == "" and not out.exists()
    ab = compare_runs(run, copy, variant_a="naive", variant_b="sdpa")
    assert len(ab.cells) == len(SEQ) and ab.judgement.design.same_run


def _verdict_pair(tmp_path, samples_a, samples_b):
    """One naive cell at N=1024 in each run, with the given raw samples."""
    a = synthetic.write_run(tmp_path / "a", [synthetic.cell("naive", 1024, sample_ms=samples_a)], run_id="a")
    b = synthetic.write_run(tmp_path / "b", [synthetic.cell("naive", 1024, sample_ms=samples_b)], run_id="b")
    return a, b


@pytest.mark.parametrize(
    "factor_b, spread, n, expected",
    [
        (1.00, 0.01, 30, "same"),  # independent draws, one distribution: CI well inside ±2%
        (0.80, 0.02, 30, "faster"),
        (1.25, 0.02, 30, "slower"),
        (1.05, 0.30, 5, "ambiguous"),  # overlapping wide samples: CI spans 1 and leaves ±2%
    ],
)
def test_verdicts_on_seeded_samples(tmp_path, factor_b, spread, n, expected):
    sa = synthetic.samples(10.0, n=n, spread=spread, seed=1)
    sb = synthetic.samples(10.0 * factor_b, n=n, spread=spread, seed=2)
    cmp = compare_runs(*_verdict_pair(tmp_path, sa, sb), **STATED)
    row = cmp.cells.iloc[0]
    assert row["verdict"] == expected and row["basis"] == "sample"
    assert row["ratio_ci_low"] <= row["ratio"] <= row["ratio_ci_high"]
    assert row["ratio"] == pytest.approx(row["time_ms_b"] / row["time_ms_a"])  # B ms / A ms: the ratio
    assert int(cmp.per_variant.iloc[0][expected]) == 1


def test_same_band_follows_the_threshold(tmp_path):
    # a significant 3% slowdown: beyond the default ±2% band it is 'slower'; inside --fail-above 5% 'same'
    sa = synthetic.samples(10.0, n=30, spread=0.005, seed=5)
    sb = synthetic.samples(10.3, n=30, spread=0.005, seed=6)
    pair = _verdict_pair(tmp_path, sa, sb)
    assert compare_runs(*pair, **STATED).cells.iloc[0]["verdict"] == "slower"
    gated = compare_runs(*pair, threshold=GATE, **STATED)
    assert gated.cells.iloc[0]["verdict"] == "same" and len(gated.regressions) == 0


def test_a_significant_change_within_a_wide_gate_says_it_is_one(tmp_path):
    """SLOW_FRAC=0.3 against its twin under median:50%: B/A 1.32, CI [1.27, 1.38], p 0.001, a bare 'same'. A
    CI that excludes 1 is 'same' only saying so; a tolerance of 100% or more is a band in ratio terms (from
    1 / (1 + t) to 1 + t), so a 20x speed-up under median:1500% is 'faster', not 'same' (1 - 15 < 0.05)."""
    sa = synthetic.samples(10.0, n=30, spread=0.01, seed=5)
    pair = _verdict_pair(tmp_path, sa, synthetic.samples(13.2, n=30, spread=0.01, seed=6))
    row = compare_runs(*pair, threshold=parse_threshold("median:50%"), **STATED).cells.iloc[0]
    assert row["verdict"] == "same" and row["ratio_ci_low"] > 1.2, row
    assert row["change"] == "1.32x slower, significant but within the tolerance (0.667 to 1.5): same"
    fast = _verdict_pair(tmp_path / "fast", sa, synthetic.samples(0.5, n=30, spread=0.01, seed=7))
    wide = compare_runs(*fast, threshold=parse_threshold("median:1500%"), **STATED)
    assert wide.cells.iloc[0]["verdict"] == "faster"
    assert "'same' when the CI lies from 0.0625 to 16 (1500% either way, as a ratio)" in verdict_rule(wide)


def test_gate_ignores_a_slowdown_it_cannot_tell(tmp_path):
    # +30% on the median, but 4 wide samples a side: the CI spans 1, so --fail-above does not fire
    sa = [10.0, 6.0, 14.0, 9.0]
    sb = [13.0, 7.0, 15.0, 12.0]
    cmp = compare_runs(*_verdict_pair(tmp_path, sa, sb), threshold=GATE, **STATED)
    row = cmp.cells.iloc[0]
    assert row["ratio"] > 1.05 and row["verdict"] == "ambiguous"
    assert len(cmp.regressions) == 0


def test_the_gates_median_is_the_rows_median_and_is_shown_as_one(tmp_path):
    """B's calls: 16 at 1.6x A's and 14 at 10x (a heavy tail): the judge's B/A (geometric means) is about
    3.8 (past the visit-to-visit floor), the rows' medians (time_ms_median, as run and report show them)
    1.6x apart. median:80% does not fail; median:50% does, and the REGRESSION line and the table's median
    columns show the rows' medians."""
    sa = synthetic.samples(1.0, n=30, spread=0.01, seed=1)
    pair = _verdict_pair(tmp_path, sa, [1.6] * 16 + [10.0] * 14)
    from attnbench import results

    medians = [float(results.load(run)["time_ms_median"].iloc[0]) for run in pair]
    cmp = compare_runs(*pair, threshold=parse_threshold("median:80%"), **STATED)
    row = cmp.cells.iloc[0]
    assert row["verdict"] == "slower" and row["ratio"] > 3.5 and cmp.regressions.empty
    assert [row["median_ms_a"], row["median_ms_b"]] == pytest.approx(medians)
    assert medians[1] / medians[0] == pytest.approx(1.6, rel=0.02)
    args = ("compare", *map(str, pair), "--run-spread", "0", "--fail-above")
    proc = run_cli(*args, "median:50%", "--out", str(tmp_path / "o"), timeout=120)
    assert proc.returncode == 1, proc.stderr
    said = f"REGRESSION naive|cpu|float32|b1|h8|n1024|dk64|dv64|full|pad0|fwd: median {medians[0]:.4g} -> "
    said += f"{medians[1]:.4g} ms (+60%)"
    assert said in proc.stdout and "gate: A median ms" in proc.stdout
    assert "its median (each side's time_ms_median" in proc.stdout


def test_a_rows_times_and_its_change_are_one_quantity(tmp_path):
    """A's calls: 16 at 1 ms and 14 at 4 ms (a heavy tail), B's all at 1.2 ms: the medians rose (1 -> 1.2)
    while the geometric means the judge compares fell (1.9 -> 1.2). The row shows the geometric means beside
    B/A; its change names no direction (trial L read '1.46x slower' beside gate medians that fell): it says
    the medians and the samples disagree, with both ratios. Without a median gate no median column."""
    pair = _verdict_pair(tmp_path, [1.0] * 16 + [4.0] * 14, [1.2] * 30)
    table = cell_table(compare_runs(*pair, **STATED))
    row = dict(zip(table.headers, table.rows[0], strict=True))
    assert float(row["B ms"]) < float(row["A ms"])
    assert float(row["B ms"]) / float(row["A ms"]) == pytest.approx(float(row["B/A"]), abs=1e-3)
    assert row["change"].startswith(f"medians and samples disagree (1.20 vs {float(row['B/A']):.2f})")
    assert not re.search(r"x (faster|slower)", row["change"]), row["change"]  # the verdict only, named as one
    assert not any("median" in h for h in table.headers)
    gated = cell_table(compare_runs(*pair, threshold=GATE, **STATED))
    row = dict(zip(gated.headers, gated.rows[0], strict=True))
    assert "gate: A median ms" in gated.headers and "gate: B median ms" in gated.headers
    assert float(row["gate: B median ms"]) / float(row["gate: A median ms"]) == pytest.approx(1.2, rel=0.01)
    assert row["change"].startswith("medians and samples disagree (1.20 vs")


@pytest.mark.parametrize(
    "ratio, significant, said",
    [
        (1.003, False, "no change (1.00x), not significant"),
        (0.998, None, "no change (1.00x) (no test)"),
        (1.0, True, "no change (1.00x)"),
        (1.006, True, "1.01x slower"),
        (0.5, True, "2.00x faster"),
    ],
)
def test_a_change_that_shows_as_1_00x_is_no_change(ratio, significant, said):
    assert change_text(ratio, significant) == said


@pytest.mark.parametrize(
    "ratio, ci, said",
    [
        (344.99, (100.0, 800.0), "300x slower"),  # ±350: its hundreds alone
        (1 / 13.16, (1 / 16.0, 1 / 11.0), "13x faster"),  # A/B 13.16, ±19%: its units
        (1.16, (1.14, 1.18), "1.16x slower"),  # ±0.02: two decimals, the most it says
        (1.464, (0.5, 4.0), "1.5x slower"),  # ±1.75 reaches its units, but '1x slower' would say nothing
        (1.04, (0.5, 2.0), "1.04x slower"),  # nor would '1.0x slower'
        (1.003, (0.5, 2.0), "no change (1.00x)"),
        (2.0, (math.nan, math.nan), "2.00x slower"),  # no CI: no spread known, two decimals
    ],
)
def test_a_change_is_said_in_the_digits_its_ci_supports(ratio, ci, said):
    """compare's change, as the findings' leads: '344.99x slower' off a CI [100, 800] read as a measured
    figure; it says the digits the judged cell's CI supports (results.formulas.ratio_change)."""
    judged = judge.Judged(
        ratio=ratio, ci_low=ci[0], ci_high=ci[1], verdict="slower" if ratio > 1 else "faster"
    )
    assert change_text(ratio, True, judged) == said


@pytest.mark.parametrize(
    "verdict, blind, ci, said",
    [
        ("slower", False, (1.5, 1.9), "1.7x slower"),  # a CI ±0.2 wide: its tenths, not its hundredths
        ("ambiguous", True, (1.509, 1.889), "1.7x slower, ambiguous (within the run-to-run spread)"),
        ("ambiguous", False, (0.99, 2.9), "1.7x slower, ambiguous"),
        ("same", False, (1.001, 1.012), "1.01x slower, significant but within the tolerance: same"),
        ("same", False, (0.99, 1.012), "1.01x slower, same (within the tolerance)"),
    ],
)
def test_a_significant_change_the_verdict_does_not_confirm_says_its_verdict(verdict, blind, ci, said):
    """The trial's row: ratio 1.689, CI [1.509, 1.889], ambiguous under the blind floor, read '1.69x slower'
    beside rows that say '..., not significant'."""
    ratio = 1.689 if verdict != "same" else 1.006
    judged = judge.Judged(ratio=ratio, ci_low=ci[0], ci_high=ci[1], verdict=verdict, blind=blind)
    assert change_text(ratio, True, judged) == said
    assert change_text(ratio, False, judged).endswith(", not significant")


@pytest.mark.parametrize(
    "verdict, significant, said",
    [
        ("ambiguous", False, "medians and visits disagree (0.58 vs 1.46), not significant"),
        ("ambiguous", True, "medians and visits disagree (0.58 vs 1.46), ambiguous"),
        ("slower", True, "medians and visits disagree (0.58 vs 1.46); judged slower by the test"),
    ],
)
def test_a_change_whose_medians_point_the_other_way_names_no_direction(verdict, significant, said):
    """Trial L's row read '1.46x slower' while its gate columns read 1.174 -> 0.6861 ms."""
    judged = judge.Judged(
        ratio=1.464, ci_low=0.5, ci_high=4.0, verdict=verdict, level="visit", median_ratio=0.6861 / 1.174
    )
    assert change_text(1.464, significant, judged) == said
    assert change_text(1.464, significant, replace(judged, median_ratio=1.1)).startswith("1.5x slower")


def test_runs_on_two_gpu_models_say_so_in_how_cells_were_matched(tmp_path):
    """An H100 run against an H200 run said 'cells matched by cell_id (same devices in both runs)'."""

    def rows(factor: float) -> list[dict]:
        return [
            synthetic.cell(v, n, device="cuda", time_ms=factor * n / 256)
            for v in VARIANTS
            for n in (256, 512)
        ]

    runs = {
        name: synthetic.write_run(
            tmp_path / name, rows(1.0), run_id=name, gpu={"name": gpu, "memory_bytes": 2**34}
        )
        for name, gpu in (("h100", "NVIDIA H100"), ("h200", "NVIDIA H200"), ("h100b", "NVIDIA H100"))
    }
    across = compare_runs(runs["h100"], runs["h200"])
    assert across.match == (
        "cells matched by cell_id (cuda in both runs, on other models: NVIDIA H100 in A, NVIDIA H200 in B)"
    )
    assert (
        compare_runs(runs["h100"], runs["h100b"]).match
        == "cells matched by cell_id (same devices in both runs)"
    )


# ---- calibration: the machine's speed apart from the code's --------------------------------------


def _machine_pair(tmp_path, variant: str, slower: float, a_tflops: float = 0.05, **b_machine):
    """The same cells on machine A (a_tflops, 10 GB/s) and on machine B (A's calibration, changed by
    b_machine), B's times `slower`x A's."""
    rows_a, rows_b = [], []
    for n in (256, 512, 1024):
        t = 2.0 * (n / 256) ** 2
        rows_a.append(synthetic.cell(variant, n, sample_ms=synthetic.samples(t, spread=0.005, seed=n)))
        rows_b.append(
            synthetic.cell(variant, n, sample_ms=synthetic.samples(t * slower, spread=0.005, seed=n + 1))
        )
    a = synthetic.write_run(tmp_path / "a", rows_a, run_id="a", peak_tflops=a_tflops, copy_gbps=10.0)
    b_cal = {"peak_tflops": a_tflops, "copy_gbps": 10.0, **b_machine}
    b = synthetic.write_run(tmp_path / "b", rows_b, run_id="b", **b_cal)
    return a, b


def test_a_slower_machine_is_not_a_slower_code_once_normalised(tmp_path):
    # chunked (linear memory) at 0.05 TFLOP/s and 10 GB/s is compute-bound: B's matmul ceiling is 0.8x A's
    a, b = _machine_pair(tmp_path, "chunked", 1.25, peak_tflops=0.04)
    gate = parse_threshold("median:5%")
    raw = compare_runs(a, b, threshold=gate, **STATED)
    assert set(raw.cells["verdict"]) == {"slower"} and len(raw.regressions) == 3
    assert any("matmul float32 TFLOP/s" in w and "0.80x" in w for w in raw.calibration_warnings)
    norm = compare_runs(a, b, threshold=gate, normalize="calibration", **STATED)
    assert set(norm.cells["bound"]) == {"compute"} and norm.cells["norm_factor"].tolist() == pytest.approx(
        [0.8] * 3
    )
    assert set(norm.cells["verdict"]) == {"same"} and len(norm.regressions) == 0
    assert norm.cells["ratio"].tolist() == pytest.approx([1.0] * 3, rel=0.03)


def test_a_calibration_that_moved_on_one_machine_does_not_recommend_normalising(tmp_path):
    """Identical code, one host, its 1 s calibration run while the machine was loaded (0.8x): the warning
    recommended --normalize calibration, which then called the code 1.25x faster. On one machine it says
    the machine was loaded and recommends no --normalize; on two it still points there; and a normalised
    comparison says how far apart the calibrations it multiplied by lie."""
    same = _machine_pair(tmp_path / "same", "chunked", 1.0, peak_tflops=0.04)
    (said,) = compare_runs(*same, **STATED).calibration_warnings
    assert "0.80x" in said and "--normalize calibration" not in said, said
    # what matched, not 'the same machine' as a fact: VMs that share a host name match too
    assert ": same host name and device model in both (one machine, or VMs that share a name)" in said, said
    assert "the same machine" not in said, said
    other = _machine_pair(tmp_path / "other", "chunked", 1.0, peak_tflops=0.04, hostname="another-host")
    (there,) = compare_runs(*other, **STATED).calibration_warnings
    assert there.endswith("see --normalize calibration"), there
    norm = compare_runs(*same, normalize="calibration", **STATED)
    assert "The calibrations differ by 0.8x (B's over A's)" in normalize_note(norm), normalize_note(norm)


def test_memory_bound_cells_are_priced_by_copy_bandwidth(tmp_path):
    # naive materialises the scores: at 10 GB/s against 1 TFLOP/s its cells are memory-bound
    a, b = _machine_pair(tmp_path, "naive", 2.0, a_tflops=1.0, copy_gbps=5.0)
    norm = compare_runs(a, b, normalize="calibration", **STATED)
    assert set(norm.cells["bound"]) == {"memory"} and set(norm.cells["verdict"]) == {"same"}
    code_slower = compare_runs(
        *_machine_pair(tmp_path / "2", "naive", 3.0, a_tflops=1.0, copy_gbps=5.0),
        normalize="calibration",
        **STATED,
    )
    assert set(code_slower.cells["verdict"]) == {"slower"}  # 3x slower on a 2x slower machine: 1.5x the code


def test_same_calibration_gives_no_warning_and_normalize_is_refused_without_one(tmp_path):
    a, b = _machine_pair(tmp_path, "chunked", 1.0)
    assert compare_runs(a, b).calibration_warnings == []
    meta = json.loads((b / "meta.json").read_text())
    del meta["calibration"]
    (b / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="needs both runs' calibration"):
        compare_runs(a, b, normalize="calibration")


H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"


def _mixed_run(path, run_id, on_h100, on_a100, factor=1.0):
    """A run whose seq_lens `on_h100` ran on node1's H100 and `on_a100` on node2's A100 (3x slower)."""
    h100 = synthetic.device("node1", gpu_name=H100, gpu_uuid="GPU-aaa", tflops=600.0)
    a100 = synthetic.device("node2", gpu_name=A100, gpu_uuid="GPU-bbb", tflops=250.0)

    def rows(ns, scale):
        return [
            synthetic.cell(
                v, n, sample_ms=synthetic.samples(base * scale * factor * n / 256, spread=0.01, seed=n)
            )
            for v, base in VARIANTS.items()
            for n in ns
        ]

    cells = synthetic.on(h100, rows(on_h100, 1.0)) + synthetic.on(a100, rows(on_a100, 3.0))
    return synthetic.write_run(path, cells, run_id=run_id, devices=[h100, a100])


def test_compare_pairs_device_groups_of_one_model_and_says_so(tmp_path):
    # N = 2048 ran on A's A100 but B's H100, N = 4096 the other way round: those cells are not paired
    a = _mixed_run(tmp_path / "a", "run-a", [256, 1024, 4096], [512, 2048, 8192])
    b = _mixed_run(tmp_path / "b", "run-b", [256, 1024, 2048], [512, 4096, 8192], factor=1.1)
    cmp = compare_runs(a, b)
    assert sorted(cmp.cells["seq_len"].unique().tolist()) == [256, 512, 1024, 8192]
    assert cmp.cells["ratio"].to_numpy() == pytest.approx(1.10, rel=0.01)  # never 3x or 1/3x
    assert (cmp.cells["where_a"] == cmp.cells["where_b"]).all()
    assert "within one device model" in cmp.match
    h100, a100 = f"{H100} (1 device: node1:cuda:GPU-aaa)", f"{A100} (1 device: node2:cuda:GPU-bbb)"
    assert sorted(cmp.pairing) == [
        f"paired A cuda {a100} with B cuda {a100}: 4 cells",
        f"paired A cuda {h100} with B cuda {h100}: 4 cells",
    ]
    text = text_report(cmp)
    assert all(line in text for line in cmp.pairing)
    ceilings = {(c.device, c.what): (c.a, c.b) for c in cmp.ceilings}
    assert ceilings[(f"cuda {A100}", "matmul float32 TFLOP/s")] == (250.0, 250.0)  # each group's own


def test_a_device_group_without_counterpart_is_named_unpaired(tmp_path):
    a = _mixed_run(tmp_path / "a", "run-a", [256, 1024, 4096], [512, 2048, 8192])
    h100 = synthetic.device("node1", gpu_name=H100, gpu_uuid="GPU-aaa", tflops=600.0)
    only = [
        synthetic.cell(v, n, sample_ms=synthetic.samples(base * n / 256, seed=n))
        for v, base in VARIANTS.items()
        for n in (256, 512)
    ]
    b = synthetic.write_run(tmp_path / "b", synthetic.on(h100, only), run_id="run-b", devices=[h100])
    cmp = compare_runs(a, b)  # B's N = 512 ran on an H100, A's on an A100: not paired
    assert cmp.cells["seq_len"].tolist() == [256, 256] and len(cmp.pairing) == 2
    assert (
        cmp.pairing[1] == f"unpaired: A cuda {A100} (1 device: node2:cuda:GPU-bbb) has no cell the other run "
        "measured on its model"
    )


def test_a_single_device_compare_names_no_pairing(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(1.10))
    assert compare_runs(a, b).pairing == []


def test_cells_timed_in_different_modes_are_warned_about(tmp_path):
    """events in A against graph in B: the ratio is partly the mode's, and compare says so once per pair."""
    gpu = {"gpu": {"name": "Synthetic GPU", "memory_bytes": 2**34}}  # two variants: naive and sdpa
    rows_a = [dict(r, timing_mode="events") for r in _rows(device="cuda")]
    rows_b = [dict(r, timing_mode="graph" if r["seq_len"] == SEQ[0] else "events")
              for r in _rows(device="cuda")]  # fmt: skip
    a = synthetic.write_run(tmp_path / "a", rows_a, run_id="run-a", **gpu)
    b = synthetic.write_run(tmp_path / "b", rows_b, run_id="run-b", **gpu)
    cmp = compare_runs(a, b)
    assert cmp.timing_warnings == [
        "2 paired cells timed by events in A and by graph in B: their ratios are partly the timing mode's (a "
        "CUDA graph leaves out launch gaps); run both with the same --timing"
    ]
    assert cmp.timing_warnings[0] in cmp.warnings
    same = compare_runs(a, synthetic.write_run(tmp_path / "c", rows_a, run_id="run-c", **gpu))
    assert same.timing_warnings == []
    assert compare_runs(*_pair(tmp_path / "old", _rows(), _rows())).timing_warnings == []  # no column


# ---- runs written before the visit columns' names --------------------------------------------------------


def _process_rows(factor: float, spread: float, seed: int, k: int = 3):
    """Rows as `--processes K` wrote them: each process's samples tight (±1%) around its own median, the
    medians spread by ±spread around base·factor, in process_medians_ms."""
    rng = random.Random(seed)
    rows = []
    for variant, base in VARIANTS.items():
        for n in SEQ:
            medians = [base * (n / 256) ** 2 * factor * (1 + rng.uniform(-spread, spread)) for _ in range(k)]
            pooled = [
                s for i, m in enumerate(medians) for s in synthetic.samples(m, n=20, spread=0.01, seed=i)
            ]
            rows.append(synthetic.cell(variant, n, sample_ms=pooled, process_medians_ms=medians))
    return rows


def test_process_medians_of_old_runs_are_judged_as_visits_that_never_pair(tmp_path):
    """--processes 3 (removed): its process medians load as visit medians without sample counts, so they
    are the replicates compare judges by (a ±10% spread between processes does not cry wolf where the
    pooled samples would), and never pair, not even in one run; a 30% slowdown is still caught."""
    failing = 0
    for seed in range(5):
        pair = _pair(
            tmp_path / str(seed), _process_rows(1.0, 0.10, seed), _process_rows(1.0, 0.10, 100 + seed)
        )
        cmp = compare_runs(*pair, threshold=GATE, **STATED)
        assert cmp.judgement.level == "visit" and set(cmp.cells["basis"]) == {"visit"}
        failing += bool(len(cmp.regressions))
    assert failing <= 1
    slow = _pair(tmp_path / "slow", _process_rows(1.0, 0.01, 0), _process_rows(1.30, 0.01, 1))
    cmp = compare_runs(*slow, threshold=GATE, **STATED)
    assert len(cmp.regressions) == 8 and (cmp.cells["ratio_ci_low"] > 1.2).all()
    one = slow[0]
    ab = compare_runs(one, one, variant_a="naive", variant_b="sdpa")
    assert set(ab.cells["basis"]) == {"visit"} and "Unpaired" in verdict_rule(ab)
    two = _pair(tmp_path / "two", _process_rows(1.0, 0.01, 0, k=2), _process_rows(1.0, 0.01, 1, k=2))
    assert compare_runs(*two).judgement.level == "sample"  # 2 processes a side: too few to judge by


def _legacy(rows):
    """The rows as runs in rounds wrote them before the visit columns' names."""
    names = {"visit_medians_ms": "round_medians_ms", "visit_samples": "round_samples"}
    return [{names.get(k, k): v for k, v in r.items()} for r in rows]


def test_runs_with_the_old_round_columns_compare_with_new_ones(tmp_path):
    from attnbench import results

    rows = rows_in_rounds({"chunked": 1.0, "chunked_planted": 1.10}, 4, rounds=6, swing=0.2)
    old = synthetic.write_run(tmp_path / "old", _legacy(rows), run_id="old")
    df = results.load(old)
    assert "round_medians_ms" not in df.columns and all(len(v) == 6 for v in df["visit_medians_ms"])
    assert all(v == [4] * 6 for v in df["visit_samples"])
    ab = compare_runs(old, old, threshold=GATE, variant_a="chunked", variant_b="chunked_planted")
    assert set(ab.cells["basis"]) == {"visit paired"} and len(ab.regressions) == len(SEQ)
    new = synthetic.write_run(tmp_path / "new", rows, run_id="new")
    assert compare_runs(old, new).judgement.level == "visit"


# ---- a control variant ---------------------------------------------------------------------------------


def test_a_control_variant_takes_out_a_machine_that_ran_slower_through_a_whole_run(tmp_path):
    """Identical code, run B on a machine 15% slower throughout: relative to naive (--control), no cell is
    a regression, and naive itself, compared as measured, never fails the gate; stating that the machine
    has no spread between runs, as measured every cell is one. A real 10% slowdown of sdpa on top of it
    is still caught relative to naive, cell by cell."""
    a, b = _pair(tmp_path, rows_in_rounds(VARIANTS, 1), rows_in_rounds(VARIANTS, 2, speed=1.15))
    assert len(compare_runs(a, b, threshold=GATE, **STATED).regressions) >= 6
    cmp = compare_runs(a, b, threshold=GATE, control_variant="naive")
    assert cmp.regressions.empty
    sdpa = cmp.cells[cmp.cells["variant"] == "sdpa"]
    assert sdpa["ratio"].to_numpy() == pytest.approx(1.0, abs=0.02) and not sdpa["blind"].any()
    assert sdpa["control_ratio"].to_numpy() == pytest.approx(1.15, abs=0.1)
    naive = cmp.cells[cmp.cells["variant"] == "naive"]
    assert (
        naive["control_ratio"].isna().all()
        and (naive["why"] == "the control (its change is the machine's)").all()
    )
    report = text_report(cmp)
    assert "Relative to the control variant naive" in report and "geometric mean" in report

    slower_sdpa = {"naive": 1.0, "sdpa": 0.4 * 1.10}
    planted = _pair(
        tmp_path / "planted", rows_in_rounds(VARIANTS, 1), rows_in_rounds(slower_sdpa, 2, speed=1.15)
    )
    caught = compare_runs(*planted, threshold=GATE, control_variant="naive")
    assert sorted(caught.regressions["variant"]) == ["sdpa"] * 4
    judged = caught.regressions
    assert (judged["ratio"] > 1.07).all()
    assert ((judged["ratio_ci_low"] <= judged["ratio"]) & (judged["ratio"] <= judged["ratio_ci_high"])).all()


def test_a_control_across_machines_says_its_own_time_moved_with_the_machine(tmp_path):
    """H100 against H200 --control naive: the memory-bound control ran 1.4x faster on B's bandwidth, so
    every other cell, the same time on both, read 1.4x slower. compare says, in one line, that the control
    crossed machines and moved with the machine; the table's B column says it is rescaled, not measured."""
    moved = {"naive": 1.0 / 1.4, "sdpa": 0.4}
    a = synthetic.write_run(tmp_path / "a", rows_in_rounds(VARIANTS, 1), run_id="a", hostname="h100-box")
    b = synthetic.write_run(tmp_path / "b", rows_in_rounds(moved, 2), run_id="b", hostname="h200-box")
    cmp = compare_runs(a, b, control_variant="naive")
    (line,) = [w for w in cmp.warnings if w.startswith("--control naive crosses machines")]
    assert "on h100-box in A" in line and "on h200-box in B" in line, line
    assert re.search(r"naive's own time moved 0\.7\dx with the machine", line), line
    assert "--normalize calibration" in line
    assert "B ms rescaled by naive" in cell_table(cmp).headers and "B ms" not in cell_table(cmp).headers
    assert line not in text_report(cmp)  # said on stderr (test_runs_sampled_with_different_settings_...)
    # one machine whose control moved (a slower run throughout): what a control is for, said nothing of
    same = synthetic.write_run(tmp_path / "c", rows_in_rounds(VARIANTS, 2, speed=1.15), run_id="c",
                               hostname="h100-box")  # fmt: skip
    assert not compare_runs(a, same, control_variant="naive").control_warnings
    assert not compare_runs(a, b).control_warnings and "B ms" in cell_table(compare_runs(a, b)).headers
    normalized = compare_runs(a, b, normalize="calibration")
    assert "B ms rescaled by calibration" in cell_table(normalized).headers


def test_a_control_without_a_cell_of_a_shape_leaves_that_cell_as_measured(tmp_path):
    rows_a, rows_b = _rows(), _rows(1.10, shuffle=True, naive_2048="oom")
    cmp = compare_runs(*_pair(tmp_path, rows_a, rows_b), control_variant="naive")
    at = cmp.cells.set_index(["variant", "seq_len"])
    assert at.loc[("sdpa", 1024), "ratio"] == pytest.approx(1.0, rel=1e-6)
    assert (
        at.loc[("sdpa", 2048), "ratio"] == pytest.approx(1.10, rel=1e-6) and at.loc[("sdpa", 2048), "blind"]
    )
    assert "no ok naive cell of this shape in both runs" in at.loc[("sdpa", 2048), "why"]


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"control_variant": "flex"}, "--control 'flex' is not a variant of run A (it has: naive, sdpa)"),
        ({"control_variant": "naive", "normalize": "calibration"}, "--control and --normalize"),
    ],
)
def test_a_control_that_is_not_in_both_runs_is_refused(tmp_path, kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compare_runs(*_pair(tmp_path, _rows(), _rows()), **kw)


def test_with_a_control_the_gates_median_columns_show_what_the_gate_judged(tmp_path):
    """The machine 1.3x slower through B (the control naive moved so) and sdpa 1.2x slower besides: the
    table's gate columns showed B's median as measured (1.56x A's) beside a REGRESSION of B's relative to
    the control (1.2x); they show the gate's values, B's over the control's median in A's units."""
    rows_b = [dict(r) for r in _rows(1.3, shuffle=True)]
    for r in rows_b:
        if r["variant"] == "sdpa":
            r.update(synthetic.cell("sdpa", r["seq_len"], sample_ms=[x * 1.2 for x in r["samples_ms"]]))
    cmp = compare_runs(*_pair(tmp_path, _rows(), rows_b), threshold=GATE, control_variant="naive")
    reg = cmp.regressions
    assert len(reg) == 4 and set(reg["variant"]) == {"sdpa"}
    for _, row in reg.iterrows():
        assert row["median_ms_b"] / row["median_ms_a"] == pytest.approx(1.2, rel=0.03)
        said = f"median {row['median_ms_a']:.4g} -> {row['median_ms_b']:.4g} ms (+20%, B's relative to naive)"
        assert row["why"] == said, (row["why"], said)


def test_cli_compare_control(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(3.0, shuffle=True))  # past the visit-to-visit floor, as measured
    gate = ("--fail-above", "median:5%")
    as_measured = run_cli(
        "compare", str(a), str(b), *gate, "--run-spread", "0", "--out", str(tmp_path / "o1")
    )
    assert as_measured.returncode == 1
    relative = run_cli("compare", str(a), str(b), *gate, "--control", "naive", "--out", str(tmp_path / "o2"))
    assert relative.returncode == 0, relative.stdout + relative.stderr
    bad = run_cli("compare", str(a), str(b), "--control", "nope", "--out", str(tmp_path / "o3"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--control 'nope'" in bad.stderr
    assert not (tmp_path / "o3").exists()


# ---- an A/B in one run ----------------------------------------------------------------------------------

AB = {"chunked": 1.0, "chunked_twin": 1.0, "chunked_planted": 1.10}  # a run's A/B: a twin and a plant


def test_an_ab_in_one_run_pairs_each_rounds_visits(tmp_path):
    """compare RUN RUN --variant-a chunked --variant-b X: each round's visit of X against the same round's
    of chunked (a paired t on their log ratios), so a ±20% swing of the machine between rounds neither
    hides a 10% slowdown nor cries wolf on a twin of the same code; across two runs nothing pairs."""
    for seed in range(5):
        run = synthetic.write_run(
            tmp_path / str(seed), rows_in_rounds(AB, seed, rounds=6, swing=0.2), run_id=f"ab-{seed}"
        )
        twin = compare_runs(run, run, threshold=GATE, variant_a="chunked", variant_b="chunked_twin")
        assert twin.regressions.empty and set(twin.cells["basis"]) == {"visit paired"}
        assert (
            set(twin.cells["variant"]) == {"chunked_twin"}
            and "chunked_twin in B against chunked in A" in twin.match
        )
        planted = compare_runs(run, run, threshold=GATE, variant_a="chunked", variant_b="chunked_planted")
        assert len(planted.regressions) == len(SEQ), planted.cells[["seq_len", "ratio", "ratio_ci_low"]]
        assert planted.cells["ratio"].to_numpy() == pytest.approx(1.10, abs=0.02)
        assert "paired t-test" in verdict_rule(planted) and "BLIND" not in verdict_rule(planted)
    other = synthetic.write_run(
        tmp_path / "other", rows_in_rounds({"chunked_planted": 1.10}, 99, rounds=6, swing=0.2)
    )
    across = compare_runs(run, other, threshold=GATE, variant_a="chunked", variant_b="chunked_planted")
    assert set(across.cells["basis"]) == {"visit"} and "paired t-test" not in verdict_rule(across)
    assert across.judgement.blind


def _visited_again(rows, variant: str, factors: list[float]) -> list[dict]:
    """The rows with `variant`'s cells visited len(factors) more times (settle rounds, harness.run.settle),
    each such visit at its cell's first visit median times its factor."""
    out = []
    for row in rows:
        if row["variant"] == variant:
            first = row["visit_medians_ms"][0]
            extra = [synthetic.samples(first * f, n=4, spread=0.01, seed=i) for i, f in enumerate(factors)]
            row = {
                **row,
                "samples_ms": row["samples_ms"] + [s for v in extra for s in v],
                "visit_medians_ms": row["visit_medians_ms"] + [first * f for f in factors],
                "visit_samples": row["visit_samples"] + [len(v) for v in extra],
            }
        out.append(row)
    return out


def test_visits_of_settle_rounds_are_paired_only_with_visits_of_the_same_rounds(tmp_path):
    """A settle round visits again only some variants: an A/B in one run pairs the rounds both were visited
    in, and --control divides each visit by the control's visit of the same round, both over the visits
    the two cells share; two visits of the plant's alone, met at a machine twice as fast, change neither."""
    rows = rows_in_rounds(AB, 3, rounds=6, swing=0.2)
    run = synthetic.write_run(tmp_path / "ab", _visited_again(rows, "chunked_planted", [0.5, 0.5]))
    planted = compare_runs(run, run, threshold=GATE, variant_a="chunked", variant_b="chunked_planted")
    assert set(planted.cells["basis"]) == {"visit paired"} and len(planted.regressions) == len(SEQ)
    assert (
        planted.cells["ratio"].to_numpy() == pytest.approx(1.10, abs=0.02)
        and (planted.cells["n_b"] == 6).all()
    )
    a, b = _pair(
        tmp_path,
        _visited_again(rows_in_rounds(VARIANTS, 1), "naive", [0.5]),
        rows_in_rounds(VARIANTS, 2, speed=1.15),
    )
    cmp = compare_runs(a, b, threshold=GATE, control_variant="naive")
    assert cmp.regressions.empty
    sdpa = cmp.cells[cmp.cells["variant"] == "sdpa"]
    assert sdpa["ratio"].to_numpy() == pytest.approx(1.0, abs=0.015)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"variant_a": "naive"}, "--variant-a and --variant-b go together"),
        ({"variant_a": "naive", "variant_b": "naive"}, "are both 'naive' in one run"),
        ({"variant_a": "naive", "variant_b": "flex"}, "--variant-b 'flex' is not a variant of run B"),
        ({"variant_a": "naive", "variant_b": "sdpa", "control_variant": "naive"}, "--control does not apply"),
    ],
)
def test_an_ab_that_cannot_be_made_is_refused(tmp_path, kw, message):
    run = synthetic.write_run(tmp_path / "run", _rows())
    with pytest.raises(ValueError, match=message):
        compare_runs(run, run, **kw)


def test_cli_compare_ab_in_one_run(tmp_path):
    rows = rows_in_rounds(AB, 7, rounds=6, swing=0.2)
    run = str(synthetic.write_run(tmp_path / "run", rows))
    args = ("compare", run, run, "--fail-above", "median:5%", "--variant-a", "chunked")
    assert run_cli(*args, "--variant-b", "chunked_twin", "--out", str(tmp_path / "o1")).returncode == 0
    assert run_cli(*args, "--variant-b", "chunked_planted", "--out", str(tmp_path / "o2")).returncode == 1
    bad = run_cli("compare", run, run, "--variant-a", "chunked", "--out", str(tmp_path / "o3"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not (tmp_path / "o3").exists()


def test_a_compare_records_holm_adjusted_p_values(tmp_path):
    cmp = compare_runs(*_pair(tmp_path, _rows(), _rows(1.10, shuffle=True)), threshold=GATE, **STATED)
    assert (cmp.cells["p_holm"] >= cmp.cells["p_value"]).all() and len(cmp.regressions) == 8
    assert "Holm-adjusted over the 8 cells judged" in verdict_rule(cmp)


# ---- every published run ----------------------------------------------------------------------------------


def _rerun_of(run, to):
    """A copy of `run` made at another moment (its meta.json's created one second on): the same data as
    another run, which compare judges (a copy with the same created is refused)."""
    import shutil
    from datetime import datetime, timedelta

    copy = shutil.copytree(run, to)
    meta = json.loads((copy / "meta.json").read_text())
    if meta.get("created"):
        meta["created"] = (datetime.fromisoformat(meta["created"]) + timedelta(seconds=1)).isoformat()
        (copy / "meta.json").write_text(json.dumps(meta))
    return copy


def test_every_reference_run_compares_with_itself_and_with_another(tmp_path):
    """Every run under results/reference/ (old columns and all) compares with a copy of itself, with every
    judged cell at B/A 1 and nothing failing, and with the next run that shares cells with it; one page is
    written."""
    import warnings

    from attnbench import results

    runs = sorted(p for p in (ROOT / "results" / "reference").iterdir() if (p / "meta.json").is_file())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # which runs share cells: their rows' cell_ids as stored, which results.load keeps as they are (a
        # second full load of every run, with its derived columns, cost seconds for these sets alone)
        cells = {run: {r["cell_id"] for r in results.read_rows(run)} for run in runs}
        for i, run in enumerate(runs):
            itself = compare_runs(run, _rerun_of(run, tmp_path / "copies" / run.name), threshold=GATE)
            judged = itself.cells.dropna(subset=["ratio"])
            assert (
                len(judged) and judged["ratio"].to_numpy() == pytest.approx(1.0) and itself.regressions.empty
            )
            other = next((o for o in runs[i + 1 :] + runs[:i] if cells[o] & cells[run]), None)
            if other is not None:
                assert len(compare_runs(run, other, threshold=GATE).cells)
        write_page(compare_runs(runs[0], runs[1]), tmp_path / "page")
    assert (tmp_path / "page" / "README.md").read_text().count("Rule: Judged at the") == 1


def test_an_approximation_compared_says_its_error_on_both_sides(tmp_path):
    """A faster approximation may owe its speed to a coarser answer: compare says, per variant declared
    approximate, its worst rel_err in A and in B beside the time ratios; an exact variant gets no line."""

    def rows(err: float, factor: float):
        out = _rows(factor)
        for r in out:
            r["rel_err"] = err if r["variant"] == "sdpa" else 1e-7
            if r["variant"] == "sdpa":
                r["approximate"] = 0.9
        return out

    a, b = _pair(tmp_path, rows(0.4, 1.0), rows(0.8, 0.5))
    cmp = compare_runs(a, b, **STATED)
    said = "sdpa is approximate: worst rel_err against float64 0.4 in A (held to 0.9), 0.8 in B (held to 0.9)"
    assert accuracy_lines(cmp) == [said]
    assert said in text_report(cmp)
    readme, _ = write_page(cmp, tmp_path / "page")
    assert said in readme.read_text().replace("\\_", "_")  # Markdown escapes rel_err


def test_a_cell_ok_in_a_that_b_lacks_fails_the_gate_and_a_regression_names_its_cell(tmp_path):
    """A nightly whose sweep shrank passed the gate (the lost cell said only near the top): a cell ok in A
    with no row in B is MISSING, a line naming it, and fails --fail-above; the last line counts A's cells
    with no ok row in B. A REGRESSION names its cell_id (dtype, causal, pass...), not its variant and N."""
    rows_a = [
        synthetic.cell("naive", n, sample_ms=synthetic.samples(n / 100, n=30, seed=n)) for n in (128, 256)
    ]
    rows_b = [
        synthetic.cell("naive", 128, sample_ms=[3 * x for x in synthetic.samples(1.28, n=30, seed=128)])
    ]
    a, b = _pair(tmp_path, rows_a, rows_b)
    proc = run_cli("compare", str(a), str(b), "--fail-above", "median:5%", "--run-spread", "0", "--out",
                   str(tmp_path / "o1"), timeout=120)  # fmt: skip
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout
    assert f"REGRESSION {rows_a[0]['cell_id']}: median " in proc.stdout
    assert f"MISSING {rows_a[1]['cell_id']}: ok in A, no row in B" in lines
    assert lines[-1] == (
        "--fail-above median:5%: FAILED: 1 cell ok in A missing from B (MISSING), and 1 regression; "
        "1 of A's 2 cells has no ok row in B"
    )
    same = [synthetic.cell("naive", 128, sample_ms=synthetic.samples(1.28, n=30, seed=128))]
    a, b = _pair(tmp_path / "lost", rows_a, same)
    proc = run_cli("compare", str(a), str(b), "--fail-above", "median:5%", "--out", str(tmp_path / "o2"),
                   timeout=120)  # fmt: skip
    assert proc.returncode == 1
    assert "FAILED: 1 cell ok in A missing from B (MISSING), no regression" in proc.stdout
    proc = run_cli("compare", str(a), str(b), "--out", str(tmp_path / "o3"), timeout=120)
    assert proc.returncode == 0 and "MISSING" not in proc.stdout
    assert (
        proc.stdout.splitlines()[-1]
        == "no --fail-above given: nothing can fail; 1 of A's 2 cells has no ok row in B"
    )


def test_cli_compare_notes_a_bare_fraction_and_refuses_a_repeated_gate(tmp_path):
    a, b = _pair(tmp_path, _rows(), _rows(shuffle=True))
    base = ("compare", str(a), str(b), "--out", str(tmp_path / "o"))
    proc = run_cli(*base, "--fail-above", "median:0.05", "--run-spread", "0.1", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "note: --fail-above median:0.05 is 0.05 ms; for 5% write median:5%" in proc.stderr.splitlines()
    assert "note: --run-spread 0.1 is 0.1%; for 10% write 10%" in proc.stderr.splitlines()
    assert run_cli(*base, "--fail-above", "median:0.01ms", timeout=120).returncode == 0
    proc = run_cli(*base, "--fail-above", "median:5%", "--fail-above", "median:500%", timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1
    assert "--fail-above given twice (median:5% and median:500%): give it once" in proc.stderr


# ---- a busy machine, a run with no cells, the page's order (an outside trial) ----------------------------


def _busy_rows(factor: float = 1.0):
    """_rows with every cell's speed probe read: 3 of the 8 ok cells measured while the machine ran at half
    its usual speed (drift: a busy machine by results.drift.is_busy), the others at its usual 0.1."""
    rows = _rows(factor)
    for i, r in enumerate(rows):
        r["speed_tflops"] = 0.05 if i < 3 else 0.1
    return rows


def _probed_rows(factor: float = 1.0):
    """_rows with every cell's speed probe read at the machine's usual 0.1: judged for drift, none drifted."""
    return [{**r, "speed_tflops": 0.1} for r in _rows(factor)]


def test_cli_compare_says_which_run_was_measured_on_a_busy_machine(tmp_path):
    """An outside trial: compare of a run that `report` calls busy printed 10 REGRESSION lines and FAILED
    and said "busy" nowhere. One warning line on stderr, before the report and its gate's result, and the
    page's first sentence, say which run the machine was busy for (the one rule: results.drift.is_busy);
    the gate's exit status stays."""
    from attnbench.results import drift

    a, b = _pair(tmp_path, _probed_rows(), _busy_rows(4.0))  # 4x: past the visit floor of one visit a side
    assert drift.is_busy(*drift.busy_cells(synthetic_records(b)))  # the rule that run and report say it by
    out = tmp_path / "out"
    proc = run_cli("compare", str(a), str(b), "--fail-above", "median:5%", "--out", str(out))
    assert proc.returncode == 1, proc.stderr  # still FAILED: a busy machine never passes a gate
    busy = [line for line in proc.stderr.splitlines() if "busy" in line]
    assert len(busy) == 1 and busy[0].startswith("attnbench: warning: run B ("), proc.stderr
    assert str(b) in busy[0] and "the machine was busy during this run (3 of 8 cells drifted" in busy[0], busy
    assert "busy" not in proc.stderr.split(busy[0])[0]  # only B's
    first = (out / "README.md").read_text().replace("\\_", "_").split("\n- ", 1)[1]
    assert first.startswith(f"run B ({b}): the machine was busy during this run"), first[:200]
    # a quiet pair says nothing of the kind
    quiet = run_cli("compare", str(a), str(_pair(tmp_path / "q", _rows(), _rows(2.0))[1]), "--out", str(out))
    assert "busy" not in quiet.stderr + quiet.stdout


def test_cli_compare_says_which_run_has_no_speed_probes(tmp_path):
    """An outside trial: a run made before the speed probe (the reference quick-epyc-2core) compared with a
    new one said nothing of it, as if neither had drifted. One warning line on stderr and on the page names
    the side whose drift was not measured; two probed runs say nothing of the kind."""
    a, b = _pair(tmp_path, _rows(), _probed_rows(1.02))
    out = tmp_path / "out"
    proc = run_cli("compare", str(a), str(b), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "speed probes" in line]
    assert said == [
        f"attnbench: warning: run A ({a}) has no speed probes (made before them): whether the machine "
        "drifted during it was not measured, so a cell timed while the machine slowed reads as the code's"
    ], proc.stderr
    assert f"run A ({a}) has no speed probes" in (out / "README.md").read_text().replace("\\_", "_")
    probed = run_cli("compare", *map(str, _pair(tmp_path / "p", _probed_rows(), _probed_rows(1.02))), "--out",
                     str(tmp_path / "out2"))  # fmt: skip
    assert probed.returncode == 0 and "speed probes" not in probed.stderr + probed.stdout


def synthetic_records(run) -> list[dict]:
    from attnbench import results

    return results.scalar_records(results.load(run))


def test_compare_with_a_run_of_no_cells_says_so(tmp_path):
    """An outside trial: a run stopped before its first cell, compared, was refused as 'no cell in common
    (... on the devices both runs used (none); every axis has a value in both ...)'. It is said as `history
    add` says it (results.store.no_cells_text), whichever side it is on."""
    a = synthetic.write_run(tmp_path / "good", _rows(), run_id="good")
    empty = synthetic.write_run(tmp_path / "empty", [], run_id="empty")
    meta = json.loads((empty / "meta.json").read_text())
    (empty / "meta.json").write_text(json.dumps({**meta, "planned_cells": 12}))
    for x, y in ((a, empty), (empty, a)):
        proc = run_cli("compare", str(x), str(y), "--out", str(tmp_path / "out"))
        assert proc.returncode == 2, proc.stderr
        assert f"{empty} has no measured cells (unfinished: 0 of 12 planned)" in proc.stderr, proc.stderr
        assert "in common" not in proc.stderr and not (tmp_path / "out").exists()


def test_the_compare_page_reads_verdict_figure_tables_then_method(tmp_path):
    """The report rule (issue: the page opened with a 230-word 'Rule:' paragraph, then two tables, and
    only then the figure): the verdict first, then the figure, then the tables, then the rule as one
    paragraph naming the docs' section; and the legend shows each variant's marker, as the plot draws it."""
    from attnbench.reports.plots import compare_figure
    from attnbench.reports.style import variant_marker

    cmp = compare_runs(*_pair(tmp_path, _rows(), _rows(2.0)), threshold=GATE)
    readme, html = write_page(cmp, tmp_path / "page")
    for text in (readme.read_text(), html.read_text()):
        order = [
            text.index("verdicts: "),  # the verdict's lines
            text.index("compare.png" if text.startswith("#") else "<figure>"),
            text.index("Per variant"),
            text.index("Per cell"),
            text.index("Rule: Judged at the"),
            text.index("docs/reports-and-compare.md#how-compare-judges"),
        ]
        assert order == sorted(order), order
    fig, _ = compare_figure(cmp.cells, "t", "A", "B")
    legend = fig.axes[0].get_legend()
    markers = {
        t.get_text(): h.get_marker() for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)
    }
    assert markers == {v: variant_marker(v) for v in VARIANTS}, markers


def test_a_bare_fail_above_number_is_echoed_with_its_unit(tmp_path):
    """An outside trial: `--fail-above median:5` (5 ms, pytest-benchmark's reading) was echoed as
    `median:5` in the last line and the rule, which reads as 5%. Wherever it is printed it carries its
    unit: `median:5 ms`; a threshold written with its unit is echoed as written."""
    a, b = _pair(tmp_path, _rows(), _rows(2.0, shuffle=True))
    proc = run_cli("compare", str(a), str(b), "--fail-above", "median:5", "--out", str(tmp_path / "out"))
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("--fail-above median:5 ms: "), last
    assert "Gate (--fail-above median:5 ms)" in proc.stdout
    assert "median:5:" not in proc.stdout and "median:5)" not in proc.stdout
    assert parse_threshold("median:5").text == "median:5 ms"
    assert (
        parse_threshold("median:5ms").text == "median:5ms"
        and parse_threshold("median:5%").text == "median:5%"
    )


def test_the_committed_reference_compare_words_the_floor_and_the_calibration_as_compare_does_today():
    """reports/reference/cpu-4k-pages-vs-thp (compare of two committed reference runs) is quoted by the docs:
    its calibration lines and its rule are today's, so that it neither says a time moved by '±158%' (a time
    cannot move by -158%: the floor is a factor either way) nor states 'the same machine' as a fact."""
    from attnbench.reports.page import md_escape

    runs = ROOT / "results" / "reference"
    cmp = compare_runs(runs / "cpu-epyc-2core-4k-pages", runs / "cpu-epyc-2core")
    page = (ROOT / "reports" / "reference" / "cpu-4k-pages-vs-thp" / "README.md").read_text()
    assert cmp.calibration_warnings and all(md_escape(w) in page for w in cmp.calibration_warnings)
    assert md_escape(f"Rule: {cmp.rule}") in page and "±" not in page
