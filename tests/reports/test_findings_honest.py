"""Findings a newcomer can choose an attention implementation from: no lead between two names of one kernel,
no winner named off a busy machine's cells without saying so, no fit that says nothing in the way of the
workload's own findings."""

from __future__ import annotations

import re

import synthetic

from attnbench.reports import findings, tables, words
from attnbench.reports.render import best_table, findings_of, prepare, render
from attnbench.results import load

SEQ = [256, 512, 1024, 2048, 4096, 8192]


def _sentences(rep) -> list[str]:
    (panel,) = rep.findings.panels
    return list(panel.sentences)


def _one_kernel_rows() -> list[dict]:
    """sdpa dispatched to cuDNN at every N, as sdpa_cudnn is pinned to: one kernel, whose two names trade
    places by 5% from N to N (the H100 reference's 'Crossover: sdpa takes the lead from sdpa_cudnn');
    naive, with no kernel hook, 3× behind."""
    rows = []
    for i, n in enumerate(SEQ):
        x = n / 256
        a, b = (1.0, 1.05) if i % 2 else (1.05, 1.0)
        for v, t in (("sdpa", a * x**2), ("sdpa_cudnn", b * x**2)):
            rows.append(
                synthetic.cell(v, n, time_ms=t, peak_mem_bytes=2**20 * int(x), kernel="CUDNN_ATTENTION")
            )
        rows.append(synthetic.cell("naive", n, time_ms=3 * x**2, peak_mem_bytes=int(2**20 * x**2)))
    return rows


def test_variants_that_ran_one_kernel_are_ranked_as_one(tmp_path):
    run = synthetic.write_run(tmp_path / "run", _one_kernel_rows())
    rep = render(prepare([run]), tmp_path / "report")
    said = _sentences(rep)
    ranking = [
        s for s in said if ("fastest" in s or "Crossover" in s or "lead" in s) and "one kernel" not in s
    ]
    (only,) = ranking  # one sentence: no lead, no crossover between sdpa and sdpa_cudnn
    assert only.startswith("sdpa (= sdpa_cudnn: CUDNN_ATTENTION) is fastest at every N measured"), only
    assert only.endswith("× ahead of naive)."), only
    # and how far apart the one kernel's two names measured: a lead under that is a tie (one_kernel_sentence)
    assert "sdpa and sdpa_cudnn ran one kernel (CUDNN_ATTENTION) and measured up to 1.05× apart" in " ".join(
        said
    )
    # the fastest-per-N table names them as one, and never one ahead of the other
    table = best_table(load(run))
    for row in table.rows:
        assert row[1].startswith("sdpa (= sdpa_cudnn: CUDNN_ATTENTION) "), row
        assert "ahead of naive" in row[1] and "ahead of sdpa" not in row[1], row


def test_one_kernel_under_two_names_takes_no_lead_from_itself(tmp_path):
    """sdpa ran the flash kernel up to N = 1,024 (as sdpa_flash does) and cuDNN above it (as sdpa_cudnn
    does): its twin changes, it takes no lead from itself."""
    rows = []
    for n in SEQ:
        x = n / 256
        kernel = "FLASH_ATTENTION" if n <= 1024 else "CUDNN_ATTENTION"
        flash, cudnn = (1.0, 1.5) if n <= 1024 else (1.5, 1.0)
        rows.append(synthetic.cell("sdpa", n, time_ms=x**2, kernel=kernel))
        rows.append(synthetic.cell("sdpa_flash", n, time_ms=flash * x**2 * 1.01, kernel="FLASH_ATTENTION"))
        rows.append(synthetic.cell("sdpa_cudnn", n, time_ms=cudnn * x**2 * 1.01, kernel="CUDNN_ATTENTION"))
    run = synthetic.write_run(tmp_path / "run", rows)
    text = " ".join(findings.ranking_sentences(load(run)))
    assert "sdpa (= sdpa_flash: FLASH_ATTENTION) is fastest from N = 256 to 1,024" in text, text
    assert "sdpa (= sdpa_cudnn: CUDNN_ATTENTION) is fastest from N = 2,048 to 8,192" in text, text
    assert "Crossover" not in text, text


CPU_FLASH = "FLASH_ATTENTION (CPU)"  # the kernel sdpa and sdpa_flash both run on a CPU: a label with spaces
MERGED = f"sdpa (= sdpa_flash: {CPU_FLASH})"


def _tied_with_one_kernel_rows() -> list[dict]:
    """An outside trial's quick run: sdpa (= sdpa_flash) fastest at N = 256 tied with naive, naive fastest at
    512 tied with sdpa and chunked, sdpa alone at 1,024. The tie list split the label at its spaces ('sdpa,
    (=, (CPU)), FLASH_ATTENTION and sdpa_flash:'), and so said 'naive leads from N = 256 to 512' where the
    table ranks sdpa first at 256."""
    times = {
        256: {"sdpa": 1.0, "sdpa_flash": 1.005, "naive": 1.01, "chunked": 1.5},
        512: {"naive": 4.0, "sdpa": 4.02, "sdpa_flash": 4.03, "chunked": 4.04},
        1024: {"sdpa": 10.0, "sdpa_flash": 10.05, "naive": 16.0, "chunked": 14.0},
    }
    one = {"kernel": CPU_FLASH}
    return [
        synthetic.cell(v, n, time_ms=t, **(one if v.startswith("sdpa") else {}))
        for n, at in times.items()
        for v, t in at.items()
    ]


def test_a_label_of_one_kernel_stays_whole_in_a_list_of_ties(tmp_path):
    assert tables.tied_names(f"chunked {MERGED} naive") == ["chunked", MERGED, "naive"]
    assert tables.tied_names("") == [] and tables.tied_names(float("nan")) == []
    run = synthetic.write_run(tmp_path / "run", _tied_with_one_kernel_rows())
    rep = render(prepare([run]), tmp_path / "report")
    said = _sentences(rep)
    ranking = [s for s in said if ("lead" in s or "fastest" in s or "apart" in s) and "one kernel" not in s]
    table = {row[0]: row[1] for row in best_table(load(run)).rows}
    assert table["512"].startswith(f"tie: naive ≈ {MERGED} ≈ chunked "), table["512"]
    pages = {"terminal": str(rep.findings), "README.md": rep.readme.read_text(), "html": rep.html.read_text()}
    for where, text in [*pages.items(), *((s, s) for s in ranking), ("table", table["512"])]:
        assert "(=," not in text and "(= ≈" not in text and "sdpa_flash: ≈" not in text, (where, text)
    # the sentences and the table agree on who is first at every N: sdpa at 256, where naive only ties with
    # it; at 512, where every variant ties, nobody is
    assert ranking == [
        f"{MERGED} and naive cannot be told apart at N = 256.",
        f"No variant can be told apart at N = 512 (naive, {MERGED} and chunked).",
        f"{MERGED} is fastest at N = 1,024 (1.40× ahead of chunked).",
    ], ranking
    assert table["256"].startswith(f"tie: {MERGED} ≈ naive "), table["256"]
    assert not any(s.startswith("naive leads") for s in ranking), ranking


def test_a_variant_the_table_ranks_second_is_never_said_to_lead_there(tmp_path):
    """Where a tie's second reaches further along the front than its first, it leads the stretch, but never
    'leads' at the N where the table ranks it second, nor 'takes the lead' there alone."""
    p = findings._Point
    pts = [p(256, "a", ("b", "c"), "b", 1.01), p(512, "b", ("d",), "d", 1.01)]
    (run,) = findings.leader_runs(pts)
    assert findings.run_sentence(*run, every=True) == (
        "b ties for the lead at every N measured, 256 to 512: with a and c at N = 256, d at N = 512."
    )
    pts = [p(256, "a", ("b",), "b", 1.01), p(512, "a", ("c",), "c", 1.01)]
    assert findings.run_sentence("a", pts, every=True) == (
        "a leads at every N measured, 256 to 512, tied with b at N = 256, c at N = 512."
    )  # first at every N: it leads
    times = {
        256: {"a": 1.0, "b": 1.5, "c": 1.5},
        512: {"c": 4.0, "b": 4.02, "a": 6.0},
        1024: {"b": 10.0, "c": 13.0},
        2048: {"b": 40.0, "c": 52.0},
    }
    run = synthetic.write_run(tmp_path / "run", [synthetic.cell(v, n, time_ms=t) for n, at in times.items()
                                                 for v, t in at.items()])  # fmt: skip
    text = findings.ranking_sentences(load(run))
    (b,) = [t for t in text if t.startswith("b is fastest from N = 512 to 2,048 (")]
    assert b.endswith("), except at N = 512, where it ties with c."), b
    assert "Crossover between N = 256 and 512: c and b take the lead from a." in text, (
        text
    )  # c is first at 512
    assert {row[0]: row[1] for row in best_table(load(run)).rows}["512"].startswith("tie: c ≈ b ")


def test_a_leader_tied_at_half_its_n_is_not_called_fastest_over_them():
    """'sdpa is fastest from N = 1,024 to 2,560 (1.08–1.25× ahead of chunked), except at N = 2,048, 2,560,
    where it ties': tied at half of the range, the sentence opened with 'fastest'."""
    p = findings._Point
    pts = [p(1024, "sdpa", (), "chunked", 1.25), p(1536, "sdpa", (), "chunked", 1.08)]
    pts += [p(2048, "sdpa", ("chunked",), "chunked", 1.01), p(2560, "chunked", ("sdpa",), "sdpa", 1.01)]
    assert findings.run_sentence("sdpa", pts, every=False) == (
        "sdpa and chunked lead from N = 1,024 to 2,560, tied at N = 2,048, 2,560 (sdpa alone at N = 1,024, "
        "1,536: 1.08–1.25× ahead of chunked)."
    )


def _busy_rows() -> list[dict]:
    """naive 4× ahead of chunked at every N, every cell of N = 256 and 512 measured while the machine ran at
    half its usual speed (drifted), those from 1,024 to 8,192 at its usual speed."""
    rows = []
    for n in SEQ:
        x = n / 256
        speed = 0.5 if n <= 512 else 1.0
        rows.append(synthetic.cell("naive", n, time_ms=x**2, peak_mem_bytes=2**20, speed_tflops=speed))
        rows.append(synthetic.cell("chunked", n, time_ms=4 * x**2, peak_mem_bytes=2**20, speed_tflops=speed))
    return rows


def test_a_busy_machine_is_said_before_any_winner_and_marks_the_winners_read_off_its_cells(tmp_path):
    run = synthetic.write_run(tmp_path / "run", _busy_rows())
    found = findings_of(prepare([run]))
    (busy,) = found.busy
    assert busy.startswith("The machine was busy while this ran: 4 of 12 ok cells drifted or were noisy")
    said = findings.text(found)
    assert said.index("The machine was busy") < said.index("naive is fastest"), said
    assert not any("busy" in t for t in found.trust)  # said once, first
    assert findings.headline(found).startswith("(busy machine) ")
    (panel,) = found.panels
    first = panel.sentences[0]
    assert first.startswith(findings.SHAKY + "naive is fastest"), first  # its N = 256 and 512 drifted
    md = render(prepare([run]), tmp_path / "report").readme.read_text()
    assert md.index("The machine was busy") < md.index(findings.SHAKY + "naive is fastest")
    # the fastest-variant table marks the same cells' leads, and only theirs
    from attnbench.reports.render import best_table

    text = {int(r[0]): r[1] for r in best_table(load(run)).rows}
    assert [n for n, t in text.items() if t.endswith("[read off a drifted or noisy cell]")] == [256, 512], (
        text
    )


def test_a_winner_on_settled_cells_of_a_busy_run_is_not_marked(tmp_path):
    """Only the sentences that compare a drifted or noisy cell are marked: where `other` leads, on the
    drifted cells of N = 256 and 512, the sentence is marked; naive's lead over chunked from N = 1,024 on,
    measured at the machine's usual speed, is said plainly."""
    rows = _busy_rows()
    for n in (256, 512):
        rows.append(
            synthetic.cell("other", n, time_ms=0.5 * (n / 256) ** 2, peak_mem_bytes=2**20, speed_tflops=0.5)
        )
    found = findings_of(prepare([synthetic.write_run(tmp_path / "run", rows)]))
    assert found.busy, found
    (panel,) = found.panels
    assert panel.sentences[0].startswith(findings.SHAKY + "other is fastest from N = 256 to 512"), panel
    assert panel.sentences[1].startswith("naive is fastest from N = 1,024 to 8,192"), panel


def test_a_workloads_own_findings_come_before_growth_and_fits_that_say_nothing_are_one_sentence(tmp_path):
    """A packed variable-length run of two N: the padding tax first, then per pattern its ranking, and its
    two-point fits in one sentence, never 'chunked: time grows as N^-2.44 (no CI)' each."""
    rows = []
    for n in (128, 256):
        for v, t in (("sdpa_loop", 1.0), ("chunked", 2.0), ("naive", 3.0)):
            rows.append(
                synthetic.cell(v, n, time_ms=t * n / 128, peak_mem_bytes=2**20 * n, lengths="uniform")
            )
    run = synthetic.write_run(tmp_path / "run", rows)
    found = findings_of(prepare([run]))
    titles = [p.title for p in found.panels]
    assert titles[0].endswith("packed variable-length batches"), titles
    growth = [s for p in found.panels for s in p.sentences if "grows as" in s or "growth" in s]
    assert growth == [
        "Time's growth not measured (see the scaling table) for: naive, chunked and sdpa_loop (two N each)."
    ]


def test_the_method_paragraph_says_what_the_fit_does_and_links_what_can_be_linked(tmp_path):
    """It ended 'Every rule in full: docs/method.md ... in attnbench's documentation' with no link (the page
    had no href at all), and said 'the top 2 octaves' where the fit also keeps at least 3 N and fits
    memory over the top octaves whatever time_fit_from says."""
    from attnbench.reports import fit

    run = synthetic.write_run(tmp_path / "run", _one_kernel_rows())
    rep = render(prepare([run]), tmp_path / "report")
    html = rep.html.read_text()
    assert 'href="fits.csv"' in html and (rep.html.parent / "fits.csv").exists()
    md = rep.readme.read_text()
    (para,) = [ln for ln in md.splitlines() if ln.startswith("Method, in short")]
    assert f"at least {fit.MIN_FIT_POINTS} N" in para and "time\\_fit\\_from" in para, para
    assert "[fits.csv](fits.csv)" in para, para
    assert "docs/method.md" in para and "no documentation URL" in para and len(para.split()) < 150, para


def test_a_report_in_the_checkout_links_the_method_and_every_figure_links_its_data(tmp_path, monkeypatch):
    """'In full: docs/method.md' was plain text even in reports/reference/, and each figure's '(data: X.csv)'
    too: inside the project checkout the docs are linked relatively (in the repository and in a copy of it);
    outside it the page names the file."""
    from attnbench.reports import render as render_mod

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "method.md").write_text("# Method\n")
    monkeypatch.setattr(render_mod, "PROJECT_ROOT", tmp_path)
    run = synthetic.write_run(tmp_path / "results" / "run", _one_kernel_rows())
    rep = render(prepare([run]), tmp_path / "reports" / "reference" / "run")
    (para,) = [ln for ln in rep.readme.read_text().splitlines() if ln.startswith("Method, in short")]
    assert "In full: [docs/method.md](../../../docs/method.md) ('Fits', 'Reading a report')." in para, para
    html = rep.html.read_text()
    assert '<a href="../../../docs/method.md">docs/method.md</a>' in html
    csvs = re.findall(r'\(data: <a href="([^"]+)">([^<]+)</a>\)', html)
    assert csvs and all(href == name and (rep.out_dir / href).is_file() for href, name in csvs), csvs
    assert "(data: " not in re.sub(r'\(data: <a href="[^"]+">[^<]+</a>\)', "", html)  # every one linked


def test_a_memory_fit_that_says_something_is_said_when_time_says_nothing(tmp_path):
    """chunked's time CI on the CPU reference is too wide to say; its memory, linear within ±0.01, was
    dropped with it: the O(N²) story's other half."""
    import random

    rng = random.Random(5)
    rows = [
        synthetic.cell("chunked", n, time_ms=n * n / 1e4 * rng.choice((0.3, 3.0)), peak_mem_bytes=4096 * n)
        for n in (1024, 2048, 3072, 4096)
    ]
    sentences = [s for p in findings_of(prepare([synthetic.write_run(tmp_path / "run", rows)])).panels
                 for s in p.sentences]  # fmt: skip
    memory = [s for s in sentences if s.startswith("chunked: memory grows as N^1.00")]
    assert len(memory) == 1 and "time grows" not in memory[0], sentences
    assert any(s.startswith("Time's growth not measured") and "chunked" in s for s in sentences), sentences


def test_a_packed_sentence_read_off_a_busy_machines_cells_says_so(tmp_path):
    """The packed-batch findings follow the busy-machine rule of the rankings: where the cells a pattern's
    sentence compares drifted (bimodal lengths at mean N = 128, measured at half the machine's speed), it
    opens with SHAKY; the sentences of settled cells are said plainly."""
    rows = []
    for pattern in ("uniform", "bimodal"):
        for n in (128, 256):
            speed = 0.5 if (pattern, n) == ("bimodal", 128) else 1.0
            for v, t in (("sdpa_loop", 1.0), ("chunked", 2.0), ("naive", 3.0)):
                row = synthetic.cell(
                    v, n, time_ms=t * n / 128, peak_mem_bytes=2**20 * n, lengths=pattern, speed_tflops=speed
                )
                row["cell_id"] += f"-{pattern}"
                rows.append(row)
    run = synthetic.write_run(tmp_path / "run", rows)
    found = findings_of(prepare([run]))
    assert found.busy, found
    # the fastest-variant table marks the drifted pattern's lead only, not every pattern's at that N
    table = best_table(load(run))
    flagged = {
        (int(r[0]), head): "[read off a drifted or noisy cell]" in cell
        for r in table.rows
        for head, cell in zip(table.headers[1:], r[1:], strict=True)
    }
    assert [k for k, v in flagged.items() if v] == [(128, "bimodal lengths")], flagged
    packed = next(p for p in found.panels if p.title.endswith("packed variable-length batches"))
    marked = [s for s in packed.sentences if s.startswith(findings.SHAKY)]
    assert len(packed.sentences) == 4 and len(marked) == 1, packed.sentences
    assert marked[0].startswith(findings.SHAKY + "on bimodal lengths (B=1, mean N=128"), marked


def test_a_growth_word_names_a_power_only_where_the_scaling_table_agrees_with_it():
    """'naive: time grows as N^1.73 [1.58, 1.89] (quadratic)' and 'N^1.23 [1.01, 1.60] (linear)' named a
    power their CI excludes, one the scaling table's 'vs theory' calls `below` and `above`: the word names a
    power only where fit.agreement says `agrees` with it."""
    from attnbench.reports.fit import PowerFit, agreement

    assert words.growth_word(1.73, 1.58, 1.89) == "between linear and quadratic"
    assert words.growth_word(1.23, 1.01, 1.60) == "between linear and quadratic"
    assert words.growth_word(1.98, 1.95, 2.01) == "quadratic"
    assert words.growth_word(1.85, 1.84, 1.86) == "quadratic"  # within the table's 0.2
    assert words.growth_word(1.30, 0.95, 1.35) == "linear"  # its CI holds 1
    for exp, lo, hi in [(1.73, 1.58, 1.89), (1.23, 1.01, 1.60), (1.98, 1.95, 2.01), (0.9, 0.7, 1.05)]:
        fit = PowerFit(exponent=exp, ci_low=lo, ci_high=hi)
        for word, power in words.GROWTH_WORDS:
            named = words.growth_word(exp, lo, hi) == word
            assert named == (agreement(fit, power) == "agrees"), (exp, lo, hi, word)


def _visited(variant: str, medians: list[float]) -> dict:
    """A cell visited once per round at `medians`, each visit's samples tight around its median."""
    visits = [synthetic.samples(m, n=4, spread=0.01, seed=i) for i, m in enumerate(medians)]
    flat = [s for v in visits for s in v]
    return synthetic.cell(
        variant, 256, sample_ms=flat, visit_medians_ms=medians, visit_samples=[len(v) for v in visits]
    )


def test_a_tie_never_names_a_variant_the_ranking_puts_behind_one_told_apart(tmp_path):
    """An outside trial's varlen run in 3 rounds: flex fastest, team_varlen 2.4× behind on every visit (told
    apart), sdpa_loop 4.7× behind by median but one visit as fast as flex's (too wide for its paired test).
    The table read 'tie: flex ≈ sdpa_loop 47.8 ms (2.41×, p = 0.011)', team_varlen's ratio and p beside
    sdpa_loop's name, and the findings said flex and sdpa_loop cannot be told apart, where the ranking beside
    them puts sdpa_loop behind team_varlen."""
    rows = [
        _visited("flex", [1.0, 1.02, 0.98]),
        _visited("team_varlen", [2.4, 2.5, 2.3]),
        _visited("sdpa_loop", [1.0, 4.7, 6.0]),
    ]
    run = synthetic.write_run(tmp_path / "run", rows)
    df = load(run)
    (best,) = [b for _, b in tables.best_variant(df).iterrows()]
    assert (best["best"], best["runner_up"], best["tied"]) == ("flex", "team_varlen", "")
    (cell,) = [row[1] for row in best_table(df).rows]
    assert cell.startswith("flex ") and "× ahead of team_varlen" in cell and "tie:" not in cell, cell
    assert "ranking: flex › team_varlen " in cell, cell
    text = " ".join(findings.ranking_sentences(df))
    assert "flex is fastest at N = 256 (" in text and "× ahead of team_varlen)" in text, text
    assert "apart" not in text and "sdpa_loop" not in text, text
    # a tie that holds names the runner-up, whose ratio and p the cell shows, right after the fastest
    rows[1] = _visited("team_varlen", [1.0, 1.3, 0.9])
    run = synthetic.write_run(tmp_path / "tied", rows)
    (cell,) = [row[1] for row in best_table(load(run)).rows]
    assert cell.startswith("tie: flex ≈ team_varlen ≈ sdpa_loop "), cell


def test_a_front_stops_at_the_first_variant_told_apart():
    told_apart = {("a", "b")}  # a is told apart from b alone: c, slower than b, is behind b, so behind a
    rule = lambda first, other: (first, other) not in told_apart  # noqa: E731
    assert tables.front(["a", "b", "c"], rule) == ["a"]
    assert tables.front(["a", "c", "b"], rule) == ["a", "c"]
    assert tables.front([], rule) == [] and tables.front(["a"], rule) == ["a"]


def test_a_variant_tied_to_the_leader_but_behind_one_told_apart_is_never_at_the_front(tmp_path):
    """flex fastest; sdpa as fast (a tie); team_varlen 2.4× behind on every visit (told apart); sdpa_loop 4.7×
    behind by median with one visit as fast as flex's, too wide for its paired test to tell it from flex. The
    front is flex ≈ sdpa, and sdpa_loop, behind team_varlen, joins it nowhere: not in the best-variant
    table's tie, not in the ranking's group 0, not in the history site's front (results.ranks.rank_groups,
    the one walk of all three)."""
    from attnbench.reports import site_findings
    from attnbench.reports.run_rows import RunRows
    from attnbench.results.judge import separated

    times = {
        "flex": [1.0, 1.02, 0.98],
        "sdpa": [1.01, 1.02, 1.0],
        "team_varlen": [2.4, 2.5, 2.3],
        "sdpa_loop": [1.0, 4.7, 6.0],
    }
    run = synthetic.write_run(tmp_path / "run", [_visited(v, m) for v, m in times.items()])
    df = load(run)
    rows = {str(r["variant"]): r for _, r in df.iterrows()}
    assert not separated(rows["flex"], rows["sdpa"]) and separated(rows["flex"], rows["team_varlen"])
    assert not separated(rows["flex"], rows["sdpa_loop"])  # tied to the leader by the test alone
    (best,) = [b for _, b in tables.best_variant(df).iterrows()]
    assert (best["best"], best["tied"]) == ("flex", "sdpa"), best
    ranks = tables.ranking(df)
    assert dict(zip(ranks["variant"], ranks["group"], strict=True)) == {
        "flex": 0, "sdpa": 0, "team_varlen": 1, "sdpa_loop": 1
    }  # fmt: skip
    assert tables.ranking_text(ranks).startswith("flex ≈ sdpa › team_varlen "), tables.ranking_text(ranks)
    at = df.assign(path=str(run)).sort_values(["time_ms_median", "variant"], kind="stable")
    assert [r["variant"] for r in site_findings.front_rows(at, RunRows())] == ["flex", "sdpa"]


def test_one_kernel_label_never_merges_two_recipes_or_two_times(tmp_path):
    """An outside trial's FP8 run: fp8_emulated and fp8_emulated_head record one kernel string (SDPA MATH
    on FP8-rounded inputs) but round by two recipes, and ran 3× apart; the rankings named them as one,
    'fp8_emulated (= fp8_emulated_head: ...)', at the faster's time. Two recipes, or one kernel string on
    cells further apart than SAME_KERNEL_RATIO, are ranked apart; one recipe close together stays one."""
    emulated = "MATH (float32 on FP8-rounded inputs, emulated)"
    rows = [
        synthetic.cell("fp8_emulated", 256, time_ms=1.0, kernel=emulated, quant_recipe="e4m3fn:tensor"),
        synthetic.cell("fp8_emulated_head", 256, time_ms=1.05, kernel=emulated, quant_recipe="e4m3fn:head"),
        synthetic.cell("sdpa", 512, time_ms=1.0, kernel=CPU_FLASH),
        synthetic.cell("sdpa_flash", 512, time_ms=3.0, kernel=CPU_FLASH),
        synthetic.cell("fp8_emulated", 1024, time_ms=16.0, kernel=emulated, quant_recipe="e4m3fn:tensor"),
        synthetic.cell(
            "fp8_emulated_head", 1024, time_ms=16.3, kernel=emulated, quant_recipe="e4m3fn:tensor"
        ),
    ]
    df = load(synthetic.write_run(tmp_path / "run", rows))
    ranks = tables.ranking(df)
    named = {n: sorted(map(str, ranks[ranks["seq_len"] == n]["variant"])) for n in (256, 512, 1024)}
    assert named[256] == ["fp8_emulated", "fp8_emulated_head"], named
    assert named[512] == ["sdpa", "sdpa_flash"], named
    assert named[1024] == [f"fp8_emulated (= fp8_emulated_head: {emulated})"], named


def test_a_growth_sentence_read_off_a_busy_machines_cells_says_so(tmp_path):
    """The trial's 'sdpa: time grows as N^3.30 [3.01, 3.60]' stood unmarked beside rankings that opened
    'Read off drifted or noisy cells:' on the same cells. On a busy machine (N = 1,024 drifted at half
    speed), naive's and chunked's cells at N = 4,096, inside their time fits, are noisy while the probes did
    not hold: their growth sentences open with SHAKY; sdpa's cells inside its fit are settled, and its
    sentence is said plainly."""
    rows = []
    for n in (1024, 2048, 4096, 8192):
        x = n / 1024
        for v, t in (("naive", 1.0), ("chunked", 2.0), ("sdpa", 0.5)):
            noisy = n == 4096 and v != "sdpa"  # IQR 20% of the median, the median on the line
            spread = (0.8, 0.9, 1.0, 1.1, 1.2) if noisy else (0.995, 1.0, 1.005)
            rows.append(
                synthetic.cell(
                    v,
                    n,
                    sample_ms=[t * x**2 * f for f in spread * 6],
                    peak_mem_bytes=2**20 * n,
                    speed_tflops=0.5 if n == 1024 else 1.0,
                )
            )
    found = findings_of(prepare([synthetic.write_run(tmp_path / "run", rows)]))
    assert found.busy, found
    growth = [s for p in found.panels for s in p.sentences if "grows as" in s]
    by = {
        v: [s for s in growth if s.removeprefix(findings.SHAKY).startswith(v + ":")]
        for v in ("naive", "chunked", "sdpa")
    }
    assert all(len(said) == 1 for said in by.values()), growth
    assert by["naive"][0].startswith(findings.SHAKY + "naive: time grows as N^2.0"), growth
    assert by["chunked"][0].startswith(findings.SHAKY + "chunked: time grows as N^2.0"), growth
    assert by["sdpa"][0].startswith("sdpa: time grows as N^2.0"), growth


def test_an_n_where_no_variant_is_told_apart_crowns_nobody(tmp_path):
    """The trial's 'chunked, sdpa, flex and tiled lead from N = 256 to 512, tied at N = 512' for cells at
    68.6, 19.7, 93.9 and 78.0 ms on a busy machine: at N = 512 every variant is at the front, and four
    leaders read as four winners. Such an N is said plainly as no verdict, and takes no part in a stretch;
    chunked's clear lead at N = 256 and flex's at 1,024 are said on their own."""
    times = {
        256: {"chunked": 1.0, "flex": 16.0, "sdpa": 24.0, "tiled": 309.0},
        512: {"chunked": 68.6, "flex": 19.7, "sdpa": 93.9, "tiled": 78.0},
        1024: {"chunked": 866.0, "flex": 20.4, "sdpa": 48.6, "tiled": 1282.0},
    }
    rows = []
    for n, at in times.items():
        busy = n == 512  # the machine at half speed, each cell's calls spread 25x
        spread = (0.2, 0.5, 1.0, 2.0, 5.0) if busy else (0.99, 1.0, 1.01)
        rows += [synthetic.cell(v, n, sample_ms=[t * f for f in spread], speed_tflops=0.5 if busy else 1.0)
                 for v, t in at.items()]  # fmt: skip
    run = synthetic.write_run(tmp_path / "run", rows)
    text = findings.ranking_sentences(load(run), busy=True)
    assert text == [
        "chunked is fastest at N = 256 (16.0× ahead of flex).",  # in the digits its ±1% bears
        findings.SHAKY + "no variant can be told apart at N = 512 (flex, chunked, tiled and sdpa).",
        "flex is fastest at N = 1,024 (2.38× ahead of sdpa).",
        "Crossover between N = 256 and 1,024: flex takes the lead from chunked.",
    ], text
    assert {row[0]: row[1] for row in best_table(load(run)).rows}["512"].startswith("tie: flex ≈ "), text
    # at every N: said once over the range, a variant at the front at some of them with its N
    even = {n: {"a": 1.0, "b": 1.0, "c": 1.0} for n in (256, 512)}
    even[512].pop("c")
    rows = [synthetic.cell(v, n, time_ms=t * n / 256) for n, at in even.items() for v, t in at.items()]
    text = findings.ranking_sentences(load(synthetic.write_run(tmp_path / "even", rows)))
    assert len(text) == 1 and text[0].startswith(
        "No variant can be told apart at every N measured, 256 to 512 ("
    ), text
    assert text[0].endswith("; with them: c at N = 256).") and " lead" not in text[0], text


def test_a_fit_through_two_n_prints_no_r2_and_a_packed_table_says_what_its_n_is(tmp_path):
    """Trial V (M5): the scaling table printed 'sdpa_padded | -1.68 (no CI) | R² 1.000' for a line through
    two N, which any two points give, beside findings that said the growth was not measured; and a pack's
    exponent in mean N read as one batch growing, where each N draws its own lengths. A fit with no CI shows
    '–' for R², one with a CI its R²; a table of packed series says once what their N is."""
    from attnbench.reports import fit as fitmod
    from attnbench.reports import page as pg
    from attnbench.reports.render import _scaling_blocks, summary_table

    two = [
        synthetic.cell(v, n, time_ms=t * n / 128, peak_mem_bytes=2**20 * n, lengths="uniform")
        for n in (128, 256)
        for v, t in (("sdpa_loop", 1.0), ("chunked", 2.0))
    ]
    inputs = prepare([synthetic.write_run(tmp_path / "two", two)])
    table = summary_table(fitmod.scaling_table(inputs.df, inputs.metas))
    r2 = [i for i, h in enumerate(table.headers) if h == "R²"]
    assert len(r2) == 2 and len(table.rows) == 2
    for row in table.rows:
        assert "(no CI)" in row[r2[0] - 1] and [row[i] for i in r2] == ["–", "–"], row
    from attnbench.reports.panels.varlen import PACKED_N  # after: a name the code before had not

    blocks = _scaling_blocks(inputs.df, table, inputs.metas)
    assert [b for b in blocks if isinstance(b, pg.Para) and b.text == PACKED_N], blocks
    # dense cells over four N: a fit with a CI keeps its R², and nothing is said of packs
    dense = [
        synthetic.cell("chunked", n, time_ms=n * n / 1e4, peak_mem_bytes=2**20 * n)
        for n in (256, 512, 1024, 2048)
    ]
    inputs = prepare([synthetic.write_run(tmp_path / "dense", dense)])
    table = summary_table(fitmod.scaling_table(inputs.df, inputs.metas))
    [row] = table.rows
    assert "[" in row[table.headers.index("R²") - 1] and re.fullmatch(
        r"-?\d\.\d{3}", row[table.headers.index("R²")]
    )
    blocks = _scaling_blocks(inputs.df, table, inputs.metas)
    assert not [b for b in blocks if isinstance(b, pg.Para) and b.text == PACKED_N]
