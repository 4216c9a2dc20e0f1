"""The history site takes a decode sweep (N_q queries against N_k keys: results.formulas.is_decode) as the
run's report does: a series holds one N_q and grows N_k, so the latest findings give a row per N_q ranked
and fitted over N_k, the cross-machine tables set each N_q side by side at each N_k, and the series figure
colours a line by its N_k. The site grouped a decode cell by its N_k and ranged over its N_q ('fastest at
N = 1'). The committed paged reference run (one N_q, N_k 1024..4096, two page sizes) and a run of two
N_q in real run folders (synthetic.write_run)."""

from __future__ import annotations

import re

import pandas as pd
from conftest import ROOT, run_cli

from attnbench.reports import dashboard, site_findings
from attnbench.reports.fit import combo_key, fit_index, scaling_table
from attnbench.reports.growth import exponent_said
from attnbench.reports.panels.decode import decode_rows, kv_rates
from attnbench.reports.tables import best_variant, length_name, tied_names
from attnbench.results import history, load, load_meta
from attnbench.results.axes import CELL_AXES

PAGED = ROOT / "results" / "reference" / "paged-epyc-2core"
N_KS = (256, 512, 1024, 2048)


def _ok(df):
    return df[((df["status"] == "ok") & (df["time_ms_median"] > 0)).fillna(False).astype(bool)]


def _decode_run(path, **meta):
    """naive leads chunked up to N_k = 512 and chunked leads above at N_q = 1; chunked leads at every N_k at
    N_q = 4 (tests/reports/test_decode_queries.py's sweep); each time linear in N_k."""
    import synthetic

    def ms(v: str, n_q: int, n_k: int) -> float:
        return n_q * n_k / 1000 * (1 if v == "chunked" else 0.7 if n_q == 1 and n_k <= 512 else 1.5)

    rows = [
        synthetic.cell(v, n_q, seq_k=n_k, kv_heads=2, causal=True, causal_align="lower-right",
                       time_ms=ms(v, n_q, n_k))
        for v in ("naive", "chunked")
        for n_q in (1, 4)
        for n_k in N_KS
    ]  # fmt: skip
    return synthetic.write_run(path, rows, **meta)


def _report_front(best, cell) -> list[str]:
    """The run's report's fastest at `cell`'s shape, N_q and N_k, and the names tied with it (`best`:
    tables.best_variant of the run)."""
    axes = [a for a in CELL_AXES if a in best.columns and a in cell.index and a != "variant"]
    at = best[[all(str(r[a]) == str(cell[a]) for a in axes) for _, r in best.iterrows()]]
    (row,) = at.itertuples()
    return [str(row.best), *tied_names(row.tied)]


def _check_as_the_report(run, table) -> set[int]:
    """Each row of the latest findings of `run` is one N_q (its shape's 'n<N_q>', no N_k in it), ranges over
    N_k, names the report's front at every N_k of its range, and gives the report's exponent of its fastest
    (reports.fit: time over N_k). The N_q seen."""
    rows = load(run)
    best, fits = best_variant(rows), fit_index(scaling_table(rows, load_meta(run)))
    shapes = rows["cell_id"].map(site_findings.shape_of)
    assert table.headers[1:5] == (
        "N_k",
        "fastest",
        "its time at the last N_k",
        "its exponent b (time ~ N_k^b)",
    )
    seen = set()
    for shape, span, fastest, _, exponent, _ in table.rows:
        parts = shape.split("|")
        (n_q,) = [int(p[1:]) for p in parts if p[0] == "n" and p[1:].isdigit()]
        assert not any(p.startswith("nk") for p in parts), shape
        lo, _, hi = span.partition("..")
        mine = rows[shapes == shape]
        assert set(mine["seq_len"]) == {n_q}, shape
        within = mine[mine["seq_k"].between(int(lo), int(hi or lo))].drop_duplicates("seq_k")
        assert len(within) and all(
            _report_front(best, c) == fastest.split(" ≈ ") for _, c in within.iterrows()
        )
        variant = fastest.split(" ≈ ")[0]
        cell = mine[mine["variant"] == variant].iloc[0]
        assert exponent == exponent_said(fits[combo_key(cell, variant)][0], length_name("seq_k")), shape
        seen.add(n_q)
    return seen


def test_the_latest_findings_of_two_query_lengths_rank_and_fit_each_over_n_k(tmp_path):
    run = _decode_run(tmp_path / "run")
    (table,) = site_findings.findings(_ok(history.frame_of([run])), {}, dashboard.RunRows())
    assert [(r[1], r[2]) for r in table.rows] == [
        ("256..512", "naive"),
        ("1024..2048", "chunked"),
        ("256..2048", "chunked"),
    ], table.rows
    assert _check_as_the_report(run, table) == {1, 4}
    # a decode step reads its cache once: chunked's time linear in N_k at each N_q
    assert [r[4][:5] for r in table.rows if r[2] == "chunked"] == ["1.00 ", "1.00 "], table.rows
    assert "ranked and fitted over N_k" in table.caption


def test_the_paged_reference_is_one_row_per_page_size_over_its_n_k():
    (table,) = site_findings.findings(_ok(history.frame_of([PAGED])), {}, dashboard.RunRows())[:1]
    assert [r[1] for r in table.rows] == ["1024..4096", "1024..4096"], table.rows
    assert [r[0].rsplit("|", 1)[1] for r in table.rows] == ["page256", "page32"]
    assert _check_as_the_report(PAGED, table) == {1}


def test_a_table_of_plain_and_decode_shapes_names_the_n_k_of_its_decode_rows(tmp_path):
    """A store of a plain run and a decode run: the N column is N, and a decode row's range says N_k."""
    import synthetic

    plain = synthetic.write_run(
        tmp_path / "plain",
        [
            synthetic.cell(v, n, time_ms=t * n / 256)
            for v, t in (("naive", 2.0), ("sdpa", 1.0))
            for n in (256, 512)
        ],
    )
    ok = _ok(history.frame_of([plain, _decode_run(tmp_path / "decode")]))
    (table,) = site_findings.findings(ok, {}, dashboard.RunRows())
    spans = [(r[0], r[1]) for r in table.rows]
    assert table.headers[1] == "N" and ("cpu|float32|b1|h8|dk64|dv64|full|pad0|fwd", "256..512") in spans
    decode = [s for shape, s in spans if "|n1|" in shape or "|n4|" in shape]
    assert sorted(decode) == ["N_k 1024..2048", "N_k 256..2048", "N_k 256..512"], spans


def test_the_cross_machine_tables_set_each_n_q_side_by_side_at_each_n_k():
    """The paged reference on two machines (the second a copy whose folder is gone): each N_k is a row of
    its N_q's shape, under an N_k column; the site gave one row per N_k at 'N = 1'."""
    ok = _ok(history.frame_of([PAGED]))
    both = pd.concat([ok, ok.assign(machine="other", path="/gone/other")], ignore_index=True)
    common = dashboard.latest_cells(both)
    machines = sorted(str(m) for m in common["machine"].unique())
    table = dashboard.lead_table(common, machines, dashboard.RunRows())
    assert table.headers[:2] == ("shape", "N_k")
    assert sorted((r[0].rsplit("|", 1)[1], r[1]) for r in table.rows) == sorted(
        (p, str(k)) for p in ("page256", "page32") for k in (1024, 2048, 4096)
    ), table.rows
    assert all("|n1|" in r[0] and "|nk" not in r[0] for r in table.rows), table.rows
    shown = dashboard.variant_table(common.assign(cal_note=""), machines)
    assert shown.headers[:2] == ("shape", "N_k") and {r[1] for r in shown.rows} == {"1024", "2048", "4096"}


def test_a_series_figure_colours_a_decode_line_by_its_n_k(tmp_path, monkeypatch):
    """The paged reference's cells in two runs: one colour per N_k, the bar naming the keys; the figure
    coloured every line by its N_q (one colour, '1')."""
    ok = _ok(history.frame_of([PAGED]))
    group = pd.concat([ok.assign(run_key=f"r{k}", run_id=f"r{k}", created=f"t{k}") for k in (1, 2)])
    drawn = []
    monkeypatch.setattr(dashboard, "save", lambda fig, *a, **k: drawn.append(fig) or [])
    dashboard.series_figure("m", group, [], {"r1": 1, "r2": 2}, tmp_path, "cpu float32 fwd")
    (fig,) = drawn
    (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert [t.get_text() for t in bar.get_yticklabels()] == ["1k", "2k", "4k"]
    assert bar.get_ylabel() == "keys N_k of the line"


def test_the_latest_findings_of_one_n_k_say_the_fit_has_one_n_k(tmp_path):
    """N_q 1 and 4 against N_k = 512 alone: each row's exponent says its fit's one length as the report's
    scaling table does, 'n/a (ok at 1 N_k)'; it said 'n/a (ok at 1 seq_len)'."""
    import synthetic

    rows = [
        synthetic.cell(v, n_q, seq_k=512, kv_heads=2, causal=True, causal_align="lower-right",
                       time_ms=n_q * (1.0 if v == "chunked" else 1.5))
        for v in ("naive", "chunked")
        for n_q in (1, 4)
    ]  # fmt: skip
    run = synthetic.write_run(tmp_path / "run", rows)
    (table,) = site_findings.findings(_ok(history.frame_of([run])), {}, dashboard.RunRows())
    said = [(r[1], r[2], r[4]) for r in table.rows]
    assert said == [("512", "chunked", "n/a (ok at 1 N_k)")] * 2, table.rows


def _cells(html: str, heading: str) -> list[list[str]]:
    """The rows of the table under `heading` on a published page, each a list of its cells' text."""
    table = html.split(f">{heading}</h2>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, re.S)]
            for r in rows]  # fmt: skip


def test_the_cross_machine_page_gives_a_decode_cells_kv_bandwidth_and_its_share_of_copy(tmp_path):
    """The decode run on two machines of copy bandwidths 10 and 40 GB/s, added and published: each decode
    cell reads its K/V GB/s and % of its machine's calibrated copy bandwidth, as the run's report's decode
    panel computes them (kv_rates), and the calibrations give each copy bandwidth. The page gave TFLOP/s and
    % of the matmul peak, which a decode step, bound by reading its cache, never nears."""
    copy = {"a": 10.0, "b": 40.0}
    runs = {
        h: _decode_run(tmp_path / h, run_id=f"decode-{h}", hostname=h, copy_gbps=g) for h, g in copy.items()
    }
    store = str(tmp_path / "store.sqlite")
    run_cli("history", "add", *map(str, runs.values()), "--store", store, check=True)
    run_cli("history", "publish", "--store", store, "--out", str(tmp_path / "site"), check=True)
    html = (tmp_path / "site" / dashboard.CROSS).read_text()
    head, *rows = _cells(html, "Every variant at the shared shapes")
    machines = head[3:]
    assert head[1] == "N_k" and len(machines) == 2 and len(rows) == 2 * 2 * len(N_KS), (head, rows)
    for host, run in runs.items():
        (col,) = [i for i, m in enumerate(head) if m.endswith(f"on {host}")]
        rated = kv_rates(decode_rows(load(run)))
        for _, r in rated.iterrows():
            (row,) = [x for x in rows if x[1] == str(r["seq_k"]) and x[2] == r["variant"]
                      and f"|n{r['seq_len']}|" in x[0]]  # fmt: skip
            pct = 100 * r["kv_gbps"] / copy[host]
            assert row[col] == f"{r['kv_gbps']:.3g} GB/s ({pct:.1f}% of copy)", (host, row)
    lead = _cells(html, "Who leads where")
    assert all("GB/s" in c and "TFLOP" not in c for r in lead[1:] for c in r[2:]), lead
    head, *cals = _cells(html, "The calibrations")
    at = head.index("copy GB/s")
    assert sorted(r[at] for r in cals) == ["10", "40"], (head, cals)
