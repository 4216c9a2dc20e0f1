"""What bench's answer says where its run went wrong in ways the cells alone do not show: a kernel that
crashed or hung the numerics probe, a busy machine, wrong cells of several causes, a baseline that was not
ok, a race whose tally counts more masks than its ends; and its wording (counts, an option's spelling)."""

from __future__ import annotations

import json
import os
import re

import torch.nn.functional as F

import attnbench
from attnbench.reports.answer import _masks, _race, answer
from attnbench.reports.answer_text import PASSES
from tests.conftest import as_a_fresh_process

GATE = "failed the float64 gate"


def aborts(q, k, v):
    """Right at N 64, and kills its process from N 128 on: the numerics probe's N among them."""
    if q.shape[-2] >= 128:
        os.abort()
    return F.scaled_dot_product_attention(q, k, v)


def test_a_kernel_that_crashes_the_numerics_probe_still_gets_its_answer(tmp_path):
    """The probe's record of a crashed worker has no q_scale: the answer raised KeyError: 'q_scale' after the
    whole run, and the user saw a traceback instead of it. Now the crashed cells are counted, the probe's
    crash is said (large logits not gated) and the answer is wrong."""
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(
            aborts, out=tmp_path / "a", seq_len="64,128", dtype="float32", causal="no", padding=0.0,
            budget_ms=5, warmup_ms=1, calibrate_ms=0,
        )  # fmt: skip
        lines = str(bench).splitlines()
    assert lines[1].startswith("correct in 1 of 1 cell gated against float64"), lines
    crashed = "1 cell crashed (float32; no mask; at N = 128): worker killed by SIGABRT"
    assert any(line.startswith(crashed) for line in lines), lines
    probe = (
        "aborts crashed in the numerics probe (q scaled up, against float64), so large logits are not gated: "
    )
    assert any(line.startswith(probe) for line in lines), lines
    assert bench.answer.wrong and len(lines) <= 12


def exits(q, k, v):
    """What a kernel's sys.exit() raises: bench's gate at N = 100 ran in the caller's process, where it ended
    the CLI with exit 0 and no answer (and would have ended a notebook's kernel)."""
    raise SystemExit(0)


def test_a_kernel_that_exits_gets_its_answer_and_it_is_wrong(tmp_path):
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(
            exits, out=tmp_path / "e", seq_len="64", dtype="float32", causal="no", padding=0.0, budget_ms=5,
            warmup_ms=1, calibrate_ms=0,
        )  # fmt: skip
    lines = str(bench).splitlines()
    assert lines[1] == "1 cell error (float32; no mask; at N = 64): SystemExit: 0", lines
    assert bench.answer.wrong


HANGS = """
import time
import torch
from attnbench import register

@register("hangs_ragged")
def hangs_ragged(q, k, v, *, causal=False):
    while q.shape[2] % 64:  # a ragged last block: never leaves
        time.sleep(0.05)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
"""


def test_a_kernel_that_hangs_at_n_100_times_out_under_cell_timeout(tmp_path):
    """Every cell of the sweep (N = 64) was written, then bench hung in the N = 100 gate whatever
    --cell-timeout said; now that gate is a worker's, killed after --cell-timeout, and the answer says so."""
    import time

    from conftest import run_cli

    (tmp_path / "hangs.py").write_text(HANGS)
    t0 = time.monotonic()
    proc = run_cli("bench", "hangs_ragged", "--variant-file", str(tmp_path / "hangs.py"), "--seq-len", "64",
                   "--dtype", "float32", "--padding", "0", "--causal", "no", "--budget-ms", "5",
                   "--warmup-ms", "1", "--cell-timeout", "3", "--out", str(tmp_path / "h"), "-q")  # fmt: skip
    assert time.monotonic() - t0 < 90, proc.stdout
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    timed_out = "TIMED OUT at N 100 (float32; no mask): exceeded --cell-timeout 3 s: no answer after "
    assert any(line.startswith(timed_out) for line in proc.stdout.splitlines()), proc.stdout


def probe_run(tmp_path, probe: list[dict]):
    from synthetic import cell, write_run

    run = write_run(tmp_path / "p", [cell(v, n, time_ms=n / 100) for v in ("sdpa", "fn") for n in (64, 128)])
    (run / "numerics.json").write_text(json.dumps({"probe": probe}))
    return run


def test_a_probe_that_timed_out_for_either_side_is_read_without_its_scale(tmp_path):
    """A timed-out probe record (no dtype, no q_scale) of fn or of the baseline: the answer reads the rest
    of the probe, and says fn's."""
    scaled = [{"variant": "fn", "dtype": "float32", "q_scale": s, "status": "wrong", "finite": True,
               "rel_err": 2e-3, "tolerance": 1e-4} for s in (10.0, 100.0)]  # fmt: skip
    scaled.append({"variant": "fn", "dtype": "float32", "q_scale": 1.0, "status": "ok", "finite": True})
    hung = {"status": "timeout", "message": "no answer after 300 s (numerics); worker killed"}
    run = probe_run(tmp_path, [{"variant": "sdpa", **hung}, *scaled])
    said = answer(run, "fn", "sdpa")
    less = "less accurate on large logits, though finite (float32 from q x 10: relative error 2.0e-03"
    assert any(line.startswith(less) for line in said.lines), said.lines
    assert not said.wrong
    run = probe_run(tmp_path / "2", [{"variant": "fn", **hung}])
    said = answer(run, "fn", "sdpa")
    assert (
        "fn timed out in the numerics probe (q scaled up, against float64), so large logits are not gated: "
        "no answer after 300 s (numerics); worker killed"
    ) in said.lines, said.lines
    assert said.wrong


def busy_rows(drifted: int, speed: float = 0.5):
    """fn three times sdpa's time at 4 N (one visit a cell: past the visit-to-visit floor); the first
    `drifted` cells measured at `speed` times the machine's usual speed (by default half)."""
    from synthetic import cell

    rows = [cell(v, n, time_ms=n / 100 * slower) for n in (64, 128, 256, 512)
            for v, slower in (("sdpa", 1.0), ("fn", 3.0))]  # fmt: skip
    return [{**r, "speed_tflops": speed if i < drifted else 1.0} for i, r in enumerate(rows)]


def test_a_busy_machine_is_said_before_the_race(tmp_path):
    """Half the cells measured at half the machine's usual speed (drift): the answer says the machine was
    busy in the report's words, and how to measure again, before the race and the growth it puts in doubt;
    on a steady machine it says nothing of it."""
    from synthetic import write_run

    said = answer(write_run(tmp_path / "busy", busy_rows(3)), "fn", "sdpa").lines
    busy = [i for i, line in enumerate(said) if line.startswith("The machine was busy while this ran: ")]
    race = [i for i, line in enumerate(said) if line.startswith("float32: ")]
    assert busy and race and busy[0] < race[0], said
    assert said[busy[0]] == (
        "The machine was busy while this ran: 3 of 8 ok cells drifted or were noisy, so their times say as "
        "much about the machine as about the variants. Bench again on a quiet machine."
    )
    steady = answer(write_run(tmp_path / "steady", busy_rows(0)), "fn", "sdpa").lines
    assert not any("machine was busy" in line for line in steady), steady
    threaded = [{**r, "threads": 2} for r in busy_rows(3)]  # trial W M1: torch's default threads, 2 cores
    said = answer(write_run(tmp_path / "threaded", threaded), "fn", "sdpa").lines
    assert any(
        line.endswith(
            "Bench again on a quiet machine or with `--threads 1`, which other load slows "
            "far less than the worker's 2 threads."
        )
        for line in said
    ), said


def test_a_race_end_read_off_a_drifted_or_noisy_cell_is_marked(tmp_path):
    """On a busy machine the race led with a ratio whose baseline cell was 16x its calm time, unmarked: an
    end whose cell (fn's or the baseline's) drifted, or was noisy while the machine did not hold its speed,
    says so (the busy-machine line's rule), and so does the growth line fitted through such a cell; a calm
    run's lines do not. (The cells drifted by 15%: one at half speed weighs under 1% of its neighbours in
    the fit, which then rests on two N and gives no exponent to mark.)"""
    from synthetic import write_run

    said = answer(write_run(tmp_path / "busy", busy_rows(3, speed=0.85)), "fn", "sdpa").lines
    (race,) = [line for line in said if line.startswith("float32: ")]
    assert "at N 64 (drifted or noisy) to " in race and "at N 512 than sdpa" in race, race
    # the growth line's fits run over N 128..512: sdpa's through its drifted cell at N 128, marked the same
    # way (it was not: only fn's were), fn's not through its own at N 64, unmarked (it was: any cell counted)
    (grows,) = [line for line in said if line.startswith("grows with N")]
    assert "fitted over N 128, 256, 512" in grows, grows
    assert re.search(r"\(sdpa: N\^[-0-9.]+ \[[^]]*\] \(drifted or noisy\)\)$", grows), grows
    assert re.search(r"time as N\^[-0-9.]+ \[[^]]*\] \(sdpa", grows), grows
    halved = answer(write_run(tmp_path / "halved", busy_rows(3)), "fn", "sdpa").lines
    (grows,) = [line for line in halved if line.startswith("grows with N")]
    assert grows.endswith("(sdpa: time's growth not measured (two N))"), grows
    calm = answer(write_run(tmp_path / "calm", busy_rows(0)), "fn", "sdpa").lines
    assert not any("drifted or noisy" in line for line in calm), calm


def test_two_points_give_no_exponent_for_fn_or_the_baseline_as_the_report_says_it(tmp_path):
    """'time as N^8.15 (no CI) ... (sdpa: N^6.10 (no CI) ...)' from two N, printed as facts where the report
    says 'Time's growth not measured (two N)': the answer says it in the report's words (growth.says_nothing)
    for fn and the baseline alike, and an exponent that says something beside one that does not."""
    from synthetic import cell, write_run

    rows = [cell(v, n, time_ms=n / 100 * s, peak_mem_bytes=n * 1000)
            for n in (128, 256) for v, s in (("sdpa", 1.0), ("fn", 2.0))]  # fmt: skip
    (grows,) = [line for line in answer(write_run(tmp_path / "two", rows), "fn", "sdpa").lines
                if line.startswith("grows with N")]  # fmt: skip
    assert ": time's and peak memory's growth not measured (two N), sdpa's likewise; peak " in grows, grows
    assert "^" not in grows and "no CI" not in grows, grows
    rows.append(cell("fn", 512, time_ms=5.12 * 2, peak_mem_bytes=512 * 1000))  # fn's third N, not sdpa's
    (grows,) = [line for line in answer(write_run(tmp_path / "three", rows), "fn", "sdpa").lines
                if line.startswith("grows with N")]  # fmt: skip
    assert ": time as N^1.00 [" in grows and ", peak memory as N^1.00 [" in grows, grows
    assert "(sdpa: time's and peak memory's growth not measured (two N)); peak " in grows, grows


def test_wrong_cells_are_said_by_cause(tmp_path):
    """A function that ignores both causal= and key_lengths=: the causal cells' cause is said of them and
    the padded ones' of them (one line gave the padded cells' cause for every mask); a fourth cause and
    more are counted in the last WRONG line."""
    from synthetic import cell, write_run

    causes = {
        (True, 0.0): f"{GATE}: it ignored causal=True: its answer is attention over every key; rel_err {{e}}",
        (False, 0.25): f"{GATE}: it ignored key_lengths=: the padded keys took part; rel_err {{e}}",
        (True, 0.25): f"{GATE}: rel_err {{e}}",
    }
    rows = []
    for n in (64, 128):
        for (c, p), message in causes.items():
            rows.append(cell("sdpa", n, causal=c, padding=p, time_ms=n / 100))
            rows.append(cell("kw", n, causal=c, padding=p, status="wrong", rel_err=n / 200,
                             message=message.format(e=n / 200)))  # fmt: skip
    run = write_run(tmp_path / "w", rows)
    wrong = [line for line in answer(run, "kw", "sdpa").lines if line.startswith("WRONG")]
    assert wrong == [
        f"WRONG float32 (causal; from N = 64 to 128): {GATE}: it ignored causal=True: its answer is "
        "attention over every key; rel_err 0.32",
        f"WRONG float32 (padded keys; from N = 64 to 128): {GATE}: it ignored key_lengths=: the padded keys "
        "took part; rel_err 0.32",
        f"WRONG float32 (causal, padded keys; from N = 64 to 128): {GATE}: rel_err 0.32",
    ], wrong
    rows = [r for r in rows if not (r["variant"] == "kw" and r["seq_len"] == 128)]
    rows.append(cell("kw", 128, status="wrong", rel_err=1.0, message=f"{GATE}: its output is all zeros"))
    wrong = [line for line in answer(write_run(tmp_path / "m", rows), "kw", "sdpa").lines if "WRONG" in line]
    assert len(wrong) == 3 and wrong[-1].startswith(
        "WRONG float32 (padded keys, with or without causal; at N = 64), 2 more causes: "
    ), wrong


def test_a_baseline_that_was_not_ok_says_why_there_is_no_race(tmp_path):
    """bench(good, baseline=noscale), the baseline missing the 1/sqrt(d) scale: no speed line, and before
    no reason either."""
    from synthetic import cell, write_run

    left_out = f"{GATE}: it left out the 1/sqrt(d_k) scale; rel_err 0.9"
    rows = [cell("good", n, time_ms=n / 100) for n in (64, 128, 256)]
    rows += [cell("noscale", n, time_ms=n / 100, status="wrong", rel_err=0.9, message=left_out)
             for n in (64, 128)]  # fmt: skip
    rows.append(cell("noscale", 256, status="error", message="RuntimeError: boom"))
    said = answer(write_run(tmp_path / "b", rows), "good", "noscale").lines
    assert (
        f"not raced against noscale: it was wrong in 2, error in 1 of the 3 cells good ran ok in: {left_out}"
        in (said)
    ), said


def test_a_race_over_several_masks_says_where_each_verdict_is():
    """A decode kernel slower than its baseline unmasked and faster causal: the line's ends are the unmasked
    cells', its largest speed-up is named with its mask, and its tally, over every mask, says which masks
    were faster ('of 4 cells faster in 2', where unsaid, before)."""
    from attnbench.results.judge import Judged as judged  # no CI: two decimals

    def key(n, causal):
        return {"seq_len": 1, "seq_k": n, "causal": causal, "padding": 0.0,
                "causal_align": "lower-right" if causal else "top-left"}  # fmt: skip

    ratios = {256: 2.47, 2048: 2.23}  # unmasked: slower; causal: twice as fast
    cells = [(key(n, c), judged(ratio=ratios[n] if not c else 0.5, verdict="faster" if c else "slower"))
             for n in (256, 2048) for c in (False, True)]  # fmt: skip
    assert _race(cells, "sdpa") == (
        "2.47x slower at N_k 256 to 2.23x slower at N_k 2,048 than sdpa (no mask); the largest speed-up, "
        "causal lower-right: 2.00x faster at N_k 256; of 4 cells faster in 2 (causal lower-right), slower in "
        "2 (no mask)"
    )


def test_a_race_says_each_ratio_in_the_digits_its_ci_supports():
    """'344.99x slower' off a judged CI [100, 800] read as measured to the hundredth: the race's ends and its
    largest slowdown say the digits the judged cell's CI supports, as compare's change does
    (results.formulas.ratio_change)."""
    from attnbench.results.judge import Judged

    def key(n):
        return {"seq_len": n, "causal": False, "padding": 0.0}

    cells = [
        (key(64), Judged(ratio=2.47, ci_low=2.0, ci_high=3.0, verdict="slower")),  # ±0.5: its tenths
        (key(256), Judged(ratio=344.99, ci_low=100.0, ci_high=800.0, verdict="slower")),  # ±350: its hundreds
        (key(512), Judged(ratio=1.16, ci_low=1.14, ci_high=1.18, verdict="slower")),  # ±0.02: two decimals
    ]
    assert _race(cells, "sdpa") == (
        "2.5x slower at N 64 to 1.16x slower at N 512 than sdpa (no mask); the largest slowdown: 300x slower "
        "at N 256; of 3 cells slower in 3"
    )


def test_masks_that_share_a_part_say_it_once():
    """'unsupported in 16 cells (causal, padded keys; padded keys)' repeated itself."""
    from pandas import DataFrame

    def rows(*masks):
        return DataFrame([{"causal": c, "padding": p} for c, p in masks])

    assert _masks(rows((True, 0.25), (False, 0.25))) == "padded keys, with or without causal"
    assert _masks(rows((True, 0.0), (True, 0.25))) == "causal, with or without padded keys"
    assert _masks(rows((True, 0.0), (False, 0.0))) == "causal; no mask"
    assert (
        _masks(rows((True, 0.0), (False, 0.25), (True, 0.25))) == "causal; causal, padded keys; padded keys"
    )


def test_skipped_cells_are_counted_and_their_option_said_in_the_callers_spelling(tmp_path):
    """A row's message names max_call_ms as the CLI's flag: the Python API's answer says `max_call_ms=`, the
    command's keeps the flag; one cell is '1 cell'. The line names the skipped cells' pass (trial T: only
    the forward+backward cell was skipped, and the line did not say which)."""
    from synthetic import cell, write_run

    from attnbench.api import Bench

    skip = "skipped: fn would take about 1,600 ms a call here (400.0 ms at N 128), over --max-call-ms 1000"
    rows = [cell(v, n, time_ms=n / 100, pass_=p) for v in ("sdpa", "fn") for n in (64, 128) for p in PASSES]
    rows += [cell("sdpa", 256, time_ms=2.56, pass_=p) for p in PASSES]
    rows += [cell("fn", 256, time_ms=2.56), cell("fn", 256, status="skipped", message=skip, pass_="fwdbwd")]
    run = write_run(tmp_path / "s", rows)
    bench = Bench(run, {}, variant="fn", baseline="sdpa")
    api = [line for line in str(bench).splitlines() if line.startswith("skipped")]
    assert api == [
        "skipped in 1 cell (float32; no mask; forward+backward; at N = 256): fn would take about 1,600 ms a "
        "call here (400.0 ms at N 128), over max_call_ms=1000"
    ], api
    cli = [line for line in answer(run, "fn", "sdpa").lines if line.startswith("skipped")]
    assert cli and cli[0].endswith("over --max-call-ms 1000"), cli


def test_rows_without_peak_memory_say_time_alone_and_an_even_race_is_as_fast(tmp_path):
    """'peak memory as N^n/a (ok at no N)' where no row had a peak; '1.00x slower' at a ratio of 1."""
    from synthetic import cell, write_run

    from attnbench.reports.answer_text import ratio_text as _ratio_text

    rows = [cell(v, n, time_ms=n * n / 1e4 * s, peak_mem_bytes=None)
            for n in (128, 256, 512) for v, s in (("sdpa", 1.0), ("fn", 2.0))]  # fmt: skip
    (grows,) = [line for line in answer(write_run(tmp_path / "nomem", rows), "fn", "sdpa").lines
                if line.startswith("grows with N")]  # fmt: skip
    assert "peak memory" not in grows and "n/a" not in grows, grows
    assert "(sdpa: N^" in grows and " and N^" not in grows, grows
    assert _ratio_text(1.001) == "as fast (1.00x)" and _ratio_text(1.01) == "1.01x slower"


def test_a_timeout_at_n_100_is_said_in_the_callers_spelling():
    """bench(fn)'s answer said `--cell-timeout` to a Python caller, whose keyword is cell_timeout=."""
    from attnbench.api import keyword
    from attnbench.harness.measure.gate_rows import GateRow
    from attnbench.harness.sweep.sweeps import respell
    from attnbench.reports.answer import Declared, at_n, workloads

    why = "exceeded --cell-timeout 3 s: no answer after 3.0 s"
    hung = GateRow("fn", "cpu", "float32", False, False, "timeout", reason=why)
    declared = Declared(gated=(GateRow("fn", "cpu", "float32", False, False, "timeout", reason=why,
                                       workload="kv_heads=2"),), n=100, masks=(hung,))  # fmt: skip
    spell = lambda text: respell(text, keyword)  # noqa: E731 (as Bench.answer spells)
    (line,) = at_n(declared, spell=spell)
    assert "cell_timeout=3" in line and "--cell-timeout" not in line, line
    (line,) = workloads(declared, spell)
    assert "cell_timeout=3" in line and "--cell-timeout" not in line, line
    assert "--cell-timeout 3" in at_n(declared)[0]  # the command line's own


def visits_rows(slower: dict[int, float], peak=None, seq=(64, 128, 256, 512, 1024)):
    """fn and sdpa in three rounds, sdpa N²: fn `slower[n]` times sdpa's time at n (1 elsewhere) in every
    visit; `peak(variant, n)`: each cell's peak bytes."""
    from synthetic import cell

    rows = []
    for n in seq:
        for variant, factor in (("sdpa", 1.0), ("fn", slower.get(n, 1.0))):
            visits = [0.25 * (n / 256) ** 2 * factor * (1 + 0.005 * i) for i in range(3)]
            samples = [m * (1 + 0.002 * j) for m in visits for j in range(4)]
            mem = {"peak_mem_bytes": peak(variant, n)} if peak else {"peak_mem_bytes": None}
            rows.append(cell(variant, n, heads=2, sample_ms=samples, visit_medians_ms=visits,
                             visit_samples=[4] * 3, **mem))  # fmt: skip
    return rows


def test_a_slowdown_at_one_n_is_named_and_no_exponent_is_fitted_through_it(tmp_path):
    """slow_at_256: 20x sdpa's time at N 256 alone, about as fast at the ends; the answer named only the
    ends ('1.10x faster at N 64 ... to 1.07x slower at N 1,024') and 'time as N^-0.29'. It names the largest
    slowdown and speed-up with their N, and says that no power law fits where a point lies far off the
    line (and the exponent of a kernel without such an N still)."""
    from synthetic import write_run

    run = write_run(tmp_path / "s", visits_rows({64: 1 / 1.1, 256: 20.0, 1024: 1.07}))
    said = answer(run, "fn", "sdpa").lines
    (race,) = [line for line in said if line.startswith("float32: ")]
    assert race.startswith("float32: 1.10x faster at N 64 to 1.07x slower at N 1,024 than sdpa (no mask); "
                           "the largest slowdown: 20.00x slower at N 256; of 5 cells "), race  # fmt: skip
    (grows,) = [line for line in said if line.startswith("grows with N")]
    assert "time fits no power law of N (a point " in grows, grows
    assert "time as N^-" not in grows, grows
    steady = answer(write_run(tmp_path / "q", visits_rows({})), "fn", "sdpa").lines
    (grows,) = [line for line in steady if line.startswith("grows with N")]
    assert "time as N^2.00 [" in grows, grows
    assert not any("largest" in line for line in steady), steady


def test_the_peak_at_the_largest_n_is_said_against_the_baselines_and_the_scores(tmp_path):
    """A kernel building a (B, H, N, N, d) temporary and a plain N² kernel both read 'peak memory as
    N^2.00'; the answer says each one's peak at the largest N, its ratio to the baseline's and to one
    score matrix, so that the two differ by their 64x and 3x."""
    from synthetic import write_run

    def peak(times):  # fn: `times` score matrices of (1, 2, N, N) float32; sdpa: one (1, 2, N, 64) tensor
        return lambda variant, n: (times * 2 * n * n * 4) if variant == "fn" else 2 * n * 64 * 4

    said = {}
    for name, times in (("fat", 64), ("plain", 3)):
        run = write_run(tmp_path / name, visits_rows({}, peak(times), seq=(128, 256, 512)))
        (said[name],) = [line for line in answer(run, "fn", "sdpa").lines if line.startswith("grows with N")]
    assert said["fat"].endswith("; peak 128 MiB at N 512: 512x sdpa's, 64x the N×N scores (2 MiB)"), said
    assert said["plain"].endswith("; peak 6 MiB at N 512: 24x sdpa's, 3x the N×N scores (2 MiB)"), said


def test_approximate_is_offered_only_where_no_masking_mistake_is_in_sight(tmp_path):
    """An off-by-one in key padding (`j <= key_lengths`) got no cause, and the answer suggested declaring
    approximate=R, 'its cells are then measured as ok': hiding a masking bug. Not where fn is wrong only in
    masked cells while right unmasked, nor where a gate at N = 100 named a mistake; still where it errs
    unmasked and nothing is named (an approximation by design)."""
    from synthetic import cell, write_run

    from attnbench.harness.measure.gate_rows import GateRow
    from attnbench.reports.answer import Declared

    def run(name, wrong_where):
        rows = []
        for n in (64, 128):
            for padding in (0.0, 0.25):
                rows.append(cell("sdpa", n, padding=padding, time_ms=n / 100))
                bad = wrong_where(padding)
                message = f"{GATE}: rel_err 5.00e-02 (tol 1e-04), max_abs_err 3e-01" if bad else ""
                rows.append(cell("fn", n, padding=padding, time_ms=n / 100, status="wrong" if bad else "ok",
                                 rel_err=0.05 if bad else 1e-7, message=message))  # fmt: skip
        return write_run(tmp_path / name, rows)

    offer = "if it approximates attention by design, declare approximate=R"
    padded = answer(run("padded", lambda p: p > 0), "fn", "sdpa").lines
    assert any(line.startswith("WRONG float32 (padded keys;") for line in padded), padded
    assert not any(line.startswith(offer) for line in padded), padded
    everywhere = run("everywhere", lambda p: True)
    assert any(line.startswith(offer) for line in answer(everywhere, "fn", "sdpa").lines)
    named = GateRow("fn", "cpu", "float32", True, True, "FAIL", rel_err=0.05, reason=(
        "its key padding mask shows one key past each length: key j is seen where j <= key_lengths[b], not "
        "j < key_lengths[b]; output rel_err 5.0e-02 > tolerance 1e-04"))  # fmt: skip
    said = answer(everywhere, "fn", "sdpa", declared=Declared(n=100, masks=(named,))).lines
    assert any(
        line.startswith("WRONG at N 100 (float32; causal, padded keys): its key padding mask")
        for line in said
    )
    assert not any(line.startswith(offer) for line in said), said
    unnamed = GateRow("fn", "cpu", "float32", False, True, "FAIL", rel_err=0.05,
                      reason="output rel_err 5.0e-02 > tolerance 1e-04")  # fmt: skip
    said = answer(everywhere, "fn", "sdpa", declared=Declared(n=100, masks=(unnamed,))).lines
    assert any(line.startswith(offer) for line in said), said


def test_a_long_message_is_cut_at_a_words_end_and_kept_whole_beside(tmp_path):
    """'... gradient rel_...': a reason over MESSAGE_CHARS was cut inside a word. A line now ends ' ...'
    after a whole word, and the answer keeps the whole line (`full`), which the notebook's HTML shows."""
    from synthetic import cell, write_run

    from attnbench.harness.measure.gate_rows import GateRow
    from attnbench.reports.answer import Declared
    from attnbench.reports.answer_text import MESSAGE_CHARS

    reason = ("it took the softmax over the queries (dim=-2), not over the keys (dim=-1); output rel_err "
              "9.1e-01 > tolerance 1e-04; at query rows 64 to 99 (36 of 100 checked); gradient rel_err "
              "1.0e+00 > tolerance 4e-04")  # fmt: skip
    assert len(reason) > MESSAGE_CHARS
    row = GateRow("fn", "cpu", "float32", False, False, "FAIL", rel_err=0.91, reason=reason)
    run = write_run(tmp_path / "r", [cell(v, n, time_ms=n / 100) for v in ("sdpa", "fn") for n in (64, 128)])
    said = answer(run, "fn", "sdpa", declared=Declared(n=100, masks=(row,)))
    (line,) = [line for line in said.lines if line.startswith("WRONG at N 100")]
    shown = line.removeprefix("WRONG at N 100 (float32; no mask): ")
    assert shown.endswith(" ...") and reason.startswith(shown.removesuffix(" ...") + " "), line
    assert len(shown) <= MESSAGE_CHARS + 1, line
    (whole,) = [line for line in said.full if line.startswith("WRONG at N 100")]
    assert whole == f"WRONG at N 100 (float32; no mask): {reason}"
    assert reason.replace(">", "&gt;") in said.html() and len(said.full) == len(said.lines)


def test_the_race_counts_the_verdicts_holm_allows_over_the_family_it_names(tmp_path):
    """fn about 15% slower than sdpa in each of 3 rounds at 4 N, each cell's paired p about 0.03: 'slower'
    cell by cell, but not one survives Holm over the 4 cells the line names; the race counted them
    'slower in 4 (..., Holm over 4 cells)'. It counts what Holm allows: ambiguous in 4."""
    from synthetic import cell, write_run

    rows = []
    for n in (64, 128, 256, 512):
        for variant, ratios in (("sdpa", (1.0, 1.0, 1.0)), ("fn", (1.10, 1.20, 1.15))):
            medians = [n / 100 * r for r in ratios]
            samples = [m * f for m in medians for f in (0.995, 1.0, 1.005)]
            rows.append(cell(variant, n, sample_ms=samples, visit_medians_ms=medians, visit_samples=[3] * 3))
    said = answer(write_run(tmp_path / "run", rows), "fn", "sdpa").lines
    (race,) = [line for line in said if line.startswith("float32: ")]
    assert race.endswith("of 4 cells ambiguous in 4 (visits paired by round, Holm over 4 cells)"), race


def test_a_quantising_variant_is_said_correct_against_its_rounded_inputs_and_its_error_end_to_end(tmp_path):
    """bench('fp8_emulated') said 'correct in 16 of 16 cells gated against float64 (worst relative error:
    float32 3.4e-07)', as if FP8 cost nothing: its gate judges its kernel against float64 of its rounded
    inputs. The line says so, and its worst error end to end per dtype with its SQNR, the error the report's
    speed-accuracy panel draws it at (results.formulas.end_to_end_rel_err, from sqnr_db); a variant that
    does not round is said as before."""
    from synthetic import cell, write_run

    quant = {"quant_recipe": "e4m3fn:tensor", "quant_rel_err": 0.045}
    rows = [cell("sdpa", n, time_ms=n / 100, rel_err=3e-7) for n in (64, 128)]
    rows += [cell("fp8", n, time_ms=n / 50, rel_err=3.4e-7, sqnr_db=sqnr, **quant)
             for n, sqnr in ((64, 28.0), (128, 26.4))]  # fmt: skip
    rows += [cell("fp8", 64, dtype="bfloat16", time_ms=0.6, rel_err=1.7e-3, sqnr_db=27.0, **quant)]
    run = write_run(tmp_path / "fp8", rows)
    said = answer(run, "fp8", "sdpa").lines
    assert said[1] == (
        "correct in 3 of 3 cells gated against float64 of its rounded inputs (worst kernel error: bfloat16 "
        "1.7e-03, float32 3.4e-07); end to end, against float64 of the inputs it was given (its rounding, "
        "e4m3fn:tensor, and its kernel together): worst rel_err bfloat16 4.5e-02 (SQNR 27.0 dB), float32 "
        "4.8e-02 (SQNR 26.4 dB)"
    ), said  # 10^(-27 / 20), 10^(-26.4 / 20)
    plain = answer(run, "sdpa", "fp8").lines
    assert plain[1] == "correct in 2 of 2 cells gated against float64 (worst relative error: float32 3.0e-07)"


def test_a_quantising_variants_gate_lines_say_its_error_end_to_end_as_its_cell_line_does():
    """Trial: bench's N 100/300 gate line of an FP8 variant gave its kernel's error alone (its GateRow had no
    sqnr_db), where its cell line gives the error end to end too. Both gate lines say it now, by one rule
    (results.formulas.end_to_end_rel_err); a variant that does not round is said as before."""
    from attnbench.harness.measure.gate_rows import GateRow
    from attnbench.reports.answer import Declared, at_n, workloads

    def row(dtype, n, sqnr, quant="e4m3fn:tensor", workload=""):
        return GateRow("fp8", "cpu", dtype, False, False, "pass", rel_err=3.4e-7, n=n, quant=quant,
                       sqnr_db=sqnr, workload=workload)  # fmt: skip

    masks = (row("float32", 100, 28.0), row("float32", 300, 26.4), row("bfloat16", 100, 27.0))
    e2e = (
        "; end to end, against float64 of the inputs it was given (its rounding, e4m3fn:tensor, and its "
        "kernel together): worst rel_err bfloat16 4.5e-02 (SQNR 27.0 dB), float32 4.8e-02 (SQNR 26.4 dB)"
    )  # 10^(-27 / 20), 10^(-26.4 / 20): the cell line's words
    (line,) = at_n(Declared(n=100, masks=masks, mask_ns=(100, 300)))
    assert line == (
        f"correct at N 100 and 300 too, forward (float32, bfloat16; no mask): worst kernel error 3.4e-07{e2e}"
    ), line
    gated = tuple(row(d, 100, db, workload="kv_heads=2") for d, db in (("float32", 26.4), ("bfloat16", 27.0)))
    (line,) = workloads(Declared(gated=gated, n=100))
    assert f"worst kernel error 3.4e-07{e2e}): kv_heads=2" in line, line
    plain = tuple(row(r.dtype, r.n, None, quant="") for r in masks)
    (line,) = at_n(Declared(n=100, masks=plain, mask_ns=(100, 300)))
    assert line.endswith("(float32, bfloat16; no mask): worst relative error 3.4e-07"), line


def test_a_layout_bug_is_said_once_and_its_other_failures_point_to_it(tmp_path):
    """Trial: a kernel written for (B, N, H, d) gave three lines for one bug: the no-mask line named it, the
    causal line was a bare rel_err and the N_q 25 / N_k 100 gate an ERROR of tensor sizes. The bare ones now
    point to it; a failure of its own (another cause, an exception about something else) is left as it is."""
    from synthetic import cell, write_run

    from attnbench.harness.measure.gate_rows import GateRow
    from attnbench.reports.answer import Declared

    bnhd = f'{GATE}: it computed attention over (B, N, H, d) inputs: declare takes="bnhd"; rel_err 3.99e+00'
    rows = []
    for n in (64, 128):
        rows += [cell("sdpa", n, time_ms=n / 100), cell("sdpa", n, causal=True, time_ms=n / 100)]
        rows.append(cell("kw", n, status="wrong", rel_err=4.0, message=bnhd))
        rows.append(cell("kw", n, causal=True, status="wrong", rel_err=2.56, message=f"{GATE}: rel_err 2.56"))
    sizes = "RuntimeError: The size of tensor a (25) must match the size of tensor b (100) at dimension 2"
    other = "NotImplementedError: no kernel for this head dim"
    rows.append(cell("kw", 64, padding=0.25, status="error", message=other))
    gated = (GateRow("kw", "cpu", "float32", True, False, "error", reason=sizes, workload="causal top-left",
                     implied=True),)  # fmt: skip
    run = write_run(tmp_path / "w", rows)
    lines = answer(run, "kw", "sdpa", declared=Declared(gated=gated, n=100)).full
    said = [line for line in lines if line.startswith(("WRONG", "ERROR"))]
    pointer = "(likely the same cause: it reads (B, N, H, d))"
    assert said[0].startswith("WRONG float32 (no mask;") and pointer not in said[0], said
    assert said[1].startswith("WRONG float32 (causal;") and said[1].endswith(f"rel_err 2.56 {pointer}"), said
    assert said[2].startswith("ERROR causal top-left") and said[2].endswith(f"{sizes} {pointer}"), said
    assert any(line.endswith(f": {other}") for line in lines), lines  # an exception of its own, as it is
    # without the layout named, the same failures are said as they are
    plain = [r for r in rows if r["message"] != bnhd]
    lines = answer(write_run(tmp_path / "p", plain), "kw", "sdpa", declared=Declared(gated=gated, n=100)).full
    assert not any(pointer in line for line in lines), lines


def test_a_workload_wrong_in_any_line_is_never_said_correct(tmp_path):
    """bench said `WRONG float32 (...): it read every slot of each sequence's last page` of its paged
    sweep's cells (N_q 1) and, two lines on, 'declared workloads correct against float64 ...: paged, causal
    lower-right, pages of 16' (the gate's N_q 4 cell, whose causal mask hides those slots). A workload is now
    said correct only where no line of it is wrong: neither a sweep cell of it nor another of its gate
    cells."""
    from synthetic import cell, write_run

    from attnbench.harness.measure.gate_rows import GateRow
    from attnbench.reports.answer import Declared

    said = "it read every slot of each sequence's last page: the context lengths (key_lengths=) ignored"
    paged = dict(seq_k=256, batch=8, page_size=16, lengths="uniform", causal=True, causal_align="lower-right")
    rows = [cell("paged_gather", 1, time_ms=1.0, **paged)]
    rows += [cell("fn", 1, time_ms=1.0, status="wrong", rel_err=0.2, message=f"{GATE}: {said}", **paged)]
    run = write_run(tmp_path / "r", rows)
    label = "paged, causal lower-right, pages of 16"
    gqa = "paged, causal lower-right, 2 k/v heads for 4"
    right = [GateRow("fn", "cpu", "float32", True, False, "pass", rel_err=2e-7, workload=w, kind="paged")
             for w in (label, gqa)]  # fmt: skip
    lines = answer(run, "fn", "paged_gather", declared=Declared(gated=tuple(right), n=100)).lines
    assert any(line.startswith("WRONG float32") and said in line for line in lines), lines
    assert not any("workloads correct" in line for line in lines), lines
    # the gate's own decode step wrong, the sweep right: its N_q 4 cells are not said correct either
    run = write_run(tmp_path / "ok", [cell(v, 1, time_ms=1.0, **paged) for v in ("paged_gather", "fn")])
    decode = "paged decode step, N_q 1 of N_k 100, causal lower-right, pages of 16"
    step = GateRow("fn", "cpu", "float32", True, False, "FAIL", rel_err=0.2, reason=said, workload=decode,
                   kind="paged")  # fmt: skip
    window = GateRow("fn", "cpu", "float32", True, False, "pass", rel_err=2e-7, workload="window 16",
                     kind="window")  # fmt: skip
    gated = (*right, step, window)
    lines = answer(run, "fn", "paged_gather", declared=Declared(gated=gated, n=100)).lines
    assert any(line.startswith("WRONG declared paged decode step") for line in lines), lines
    (correct,) = [line for line in lines if "workloads correct" in line]
    assert correct.endswith("): window 16"), lines  # a workload of its own, right in every line


def test_a_one_query_bench_says_once_why_it_raced_no_mask_alone(tmp_path):
    """Trial V (L4): bench on a paged decode kernel raced causal lower-right and no mask at N_q = 1, one
    problem twice; its plan now races no mask alone (bench_sweep.bench_plan), and the answer says why once."""
    from synthetic import cell, write_run

    paged = dict(seq_k=256, batch=8, page_size=16, lengths="uniform")
    rows = [cell(v, 1, time_ms=t, **paged) for v, t in (("paged_gather", 2.0), ("fn", 1.0))]
    full = answer(write_run(tmp_path / "one", rows), "fn", "paged_gather").full
    said = [line for line in full if "causal lower-right is the same problem as no mask" in line]
    assert len(said) == 1 and said[0].startswith("N_q = 1 in every cell: "), full
    rows = [cell(v, 4, time_ms=t, **paged) for v, t in (("paged_gather", 2.0), ("fn", 1.0))]
    full = answer(write_run(tmp_path / "four", rows), "fn", "paged_gather").full
    assert not any("same problem as no mask" in line for line in full), full


def test_a_gate_rows_workload_is_told_by_its_kind_not_its_labels_words(tmp_path):
    """Which gate cells share a paged cache (or a pack), and which sweep cells are a workload's, is the gate
    row's `kind` (harness.measure.gate_rows.workload_kind, from its cell), not the first word of its label:
    a cache's cells labelled without 'paged' are still one cache, and a dense cell labelled 'paged ...' is
    none of it."""
    from synthetic import cell, write_run

    from attnbench.harness.measure.gate_rows import GateRow
    from attnbench.reports.answer import Declared

    def row(label, kind, status="pass"):
        failed = status == "FAIL"
        return GateRow("fn", "cpu", "float32", True, False, status, rel_err=0.2 if failed else 2e-7,
                       reason="it read every slot" if failed else "", workload=label, kind=kind)  # fmt: skip

    run = write_run(tmp_path / "ok", [cell(v, 64, time_ms=1.0) for v in ("sdpa", "fn")])
    gated = (row("cache, pages of 16", "paged"), row("one query of the cache", "paged", "FAIL"),
             row("paged-looking dense cell", "dense"))  # fmt: skip
    lines = answer(run, "fn", "sdpa", declared=Declared(gated=gated, n=100)).lines
    (correct,) = [line for line in lines if "workloads correct" in line]
    assert correct.endswith("): paged-looking dense cell"), lines  # the cache's other cell is not said right
    # a sweep's wrong paged cell makes the paged kind's gate rows suspect, whatever their labels say
    paged = dict(seq_k=256, batch=8, page_size=16, lengths="uniform", causal=True, causal_align="lower-right")
    rows = [cell("sdpa", 64, time_ms=1.0), cell("fn", 64, time_ms=1.0)]
    rows += [cell("fn", 1, time_ms=1.0, status="wrong", rel_err=0.2, message=f"{GATE}: wrong", **paged)]
    gated = (row("cache, pages of 16", "paged"), row("paged-looking dense cell", "dense"))
    lines = answer(write_run(tmp_path / "w", rows), "fn", "sdpa", declared=Declared(gated=gated, n=100)).lines
    (correct,) = [line for line in lines if "workloads correct" in line]
    assert correct.endswith("): paged-looking dense cell"), lines


def test_the_growth_line_is_never_cut_and_the_full_answer_keeps_every_line(tmp_path):
    """The trial's bench with pass_="both" on a busy machine: correctness, its gates at N 100 and 300, its
    declared workloads, unsupported and skipped cells, the busy machine and a race per dtype and pass made
    13 lines, and the cut to 12 kept the first 11 and the run's line: no 'grows with N' line at all, in
    `lines` or in `full`. The cut now leaves out the last race (its dtype and pass named in the run's line)
    and keeps the growth line; `full` keeps every line."""
    from synthetic import cell, write_run

    from attnbench.harness.measure.gate_rows import GateRow
    from attnbench.reports.answer import Declared

    rows = []
    for dtype in ("float32", "bfloat16"):
        for pass_ in ("fwd", "fwdbwd"):
            for n in (64, 128, 256, 512):
                for v, s in (("sdpa", 1.0), ("fn", 3.0)):
                    rows.append(cell(v, n, dtype=dtype, pass_=pass_, time_ms=n / 100 * s,
                                     peak_mem_bytes=n * 1000, rel_err=1e-7))  # fmt: skip
            rows.append(cell("fn", 64, dtype=dtype, pass_=pass_, padding=0.25, status="unsupported",
                             message="fn does not support key padding"))  # fmt: skip
    rows = [{**r, "speed_tflops": 0.5 if i < 6 else 1.0} for i, r in enumerate(rows)]  # a busy machine
    skip = "skipped: fn would take about 1,600 ms a call here (400.0 ms at N 512), over --max-call-ms 1000"
    rows.append(cell("fn", 1024, status="skipped", message=skip))

    def gate(dtype, n, causal=False, workload=""):
        return GateRow("fn", "cpu", dtype, causal, False, "pass", rel_err=3.4e-7, n=n, workload=workload)

    masks = tuple(gate(d, n, c) for d in ("float32", "bfloat16") for n in (100, 300) for c in (False, True))
    gated = tuple(gate(d, 100, workload="kv_heads=2") for d in ("float32", "bfloat16"))
    declared = Declared(gated=gated, n=100, masks=masks, mask_ns=(100, 300))
    said = answer(write_run(tmp_path / "r", rows), "fn", "sdpa", declared=declared)
    assert len(said.lines) == 12 and len(said.full) == 13, said.full
    assert any(line.startswith("The machine was busy while this ran: ") for line in said.lines), said.lines
    (grows,) = [line for line in said.lines if line.startswith("grows with N (float32, forward, ")]
    assert "; peak 500 KiB at N 512: " in grows and grows in said.full, grows
    races = [line.split(":")[0] for line in said.lines if line.startswith(("float32 ", "bfloat16 "))]
    assert races == ["float32 forward", "float32 forward+backward", "bfloat16 forward"], said.lines
    left = "1 line left out here: the race of bfloat16 forward+backward"
    assert said.lines[-1].startswith(f"run: {tmp_path / 'r'} · {left} · the full report"), said.lines[-1]
    assert any(line.startswith("bfloat16 forward+backward: 3.0") for line in said.full), said.full
    assert said.full[-1] == f"run: {tmp_path / 'r'} · the full report: run.report() · every cell: run.table()"
