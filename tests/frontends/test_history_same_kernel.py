"""The history site ranks the runs' cells as their reports do where two names may be one kernel
(reports.tables.contestants): sdpa is not ranked beside a pinned SDPA backend where its run did not record
which kernel it ran, two names of one recorded kernel are one contestant, and the gap they measured apart is
the tie margin. Real run folders (synthetic.write_run) in a real store (`history add`)."""

from __future__ import annotations

from pathlib import Path

import synthetic

from attnbench.reports import dashboard, site_findings
from attnbench.reports.tables import best_variant, tied_names
from attnbench.results import history, load

NS = (256, 512)


def _run(path: Path, host: str, times: dict[str, float], kernel: dict[str, str]) -> Path:
    """One run on `host`: each variant at NS, its median `times[v]` × N/256, its kernel where given."""
    rows = [
        synthetic.cell(
            v,
            n,
            sample_ms=synthetic.samples(t * n / 256, n=20, spread=0.005, seed=n),
            **({"kernel": kernel[v]} if v in kernel else {}),
        )
        for v, t in times.items()
        for n in NS
    ]
    return synthetic.write_run(path, rows, run_id=path.name, hostname=host)


def _store(tmp_path: Path) -> tuple[object, list[Path]]:
    """Two machines, one shape: on 'old' nothing records a kernel and sdpa is 3% ahead of sdpa_cudnn (it may
    have run sdpa_cudnn's kernel); on 'new' sdpa and sdpa_cudnn record one kernel and measured 1.06x apart,
    and flex is 4% behind sdpa: under that gap, a tie in the report."""
    runs = [
        _run(tmp_path / "old", "old", {"sdpa": 1.0, "sdpa_cudnn": 1.03, "naive": 3.0}, {}),
        _run(
            tmp_path / "new",
            "new",
            {"sdpa": 1.0, "sdpa_cudnn": 1.06, "flex": 1.04},
            {"sdpa": "CUDNN_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION"},
        ),
    ]
    store = tmp_path / "h.sqlite"
    history.add(store, runs)
    df = history.frame(store)
    return df[((df["status"] == "ok") & (df["time_ms_median"] > 0)).fillna(False).astype(bool)], runs


def _report_front(run: Path) -> dict[int, list[str]]:
    """Per N, the run's report's fastest and the names tied with it (tables.best_variant)."""
    best = best_variant(load(run))
    cells = zip(best["seq_len"], best["best"], best["tied"], strict=True)
    return {int(n): [str(b), *tied_names(t)] for n, b, t in cells}


def test_who_leads_ranks_sdpa_beside_a_pinned_backend_only_as_the_runs_report_does(tmp_path):
    ok, runs = _store(tmp_path)
    common = dashboard.latest_cells(ok)
    machines = sorted(str(m) for m in common["machine"].unique())
    table = dashboard.lead_table(common, machines, dashboard.RunRows())
    old = next(i for i, m in enumerate(machines) if "old" in m) + 2
    new = 5 - old
    fronts = {run.name: _report_front(run) for run in runs}
    for row in table.rows:
        n = int(row[1])
        assert fronts["old"][n] == ["sdpa_cudnn"] and row[old].startswith("sdpa_cudnn "), row
        assert "sdpa " not in row[old] and "tied" not in row[old], row
        merged = "sdpa (= sdpa_cudnn: CUDNN_ATTENTION)"
        assert fronts["new"][n] == [merged, "flex"], fronts["new"]
        assert row[new].startswith(merged) and row[new].endswith(", tied with flex"), row
    (sentence,) = dashboard.lead_blocks(common, machines, dashboard.RunRows())[1]
    assert sentence.text.startswith("sdpa is not ranked where its run did not record which kernel it chose")
    assert "sdpa_cudnn ran beside it" in sentence.text, sentence.text
    page = dashboard.cross_page(ok, dashboard.RunRows())
    assert sentence in page.blocks


def test_a_machines_latest_findings_rank_sdpa_only_as_the_runs_report_does(tmp_path):
    ok, runs = _store(tmp_path)
    for run in runs:
        mine = ok[ok["path"] == str(run)]
        table, *paras = site_findings.findings(mine, {}, dashboard.RunRows())
        ((_, span, fastest, *_),) = table.rows  # one front over both N
        assert span == f"{NS[0]}..{NS[-1]}", table.rows
        assert fastest.split(" ≈ ") == _report_front(run)[NS[0]] == _report_front(run)[NS[-1]], fastest
        unranked = [p for p in paras if p.text.startswith("sdpa is not ranked")]
        assert len(unranked) == (run.name == "old"), paras


def test_a_run_whose_folder_is_gone_leaves_sdpa_unranked_beside_a_pinned_backend(tmp_path):
    """The store keeps no kernel: where the run's folder cannot be read, none is known to be recorded, and
    the built-in sdpa (results.load.picks_among, by its name) is not ranked beside sdpa_cudnn."""
    ok, runs = _store(tmp_path)
    mine = ok[ok["path"] == str(runs[0])].assign(path=str(tmp_path / "gone"))
    table, *paras = site_findings.findings(mine, {}, dashboard.RunRows())
    assert [r[2] for r in table.rows] == ["sdpa_cudnn"], table.rows
    assert any(p.text.startswith("sdpa is not ranked") for p in paras), paras
