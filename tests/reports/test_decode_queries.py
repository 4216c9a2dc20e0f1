"""A decode sweep of several query lengths (N_q 1 and 4, each against N_k 256..2048, as the decode reference
run measured them) is ranked and fitted over N_k, one series per N_q, as the decode panel draws it: the
report said 'stable_softmax is fastest from N = 1 to 1' and 'Crossover between N = 1 and 1', ranking and
fitting over the query length."""

from __future__ import annotations

import re

import synthetic

from attnbench.reports import findings
from attnbench.reports.render import best_table, prepare, render
from attnbench.results import load

N_KS = (256, 512, 1024, 2048)


def _rows() -> list[dict]:
    """naive leads chunked up to N_k = 512 and chunked leads above, at N_q = 1; at N_q = 4 chunked leads at
    every N_k. Each time grows as N_k (a decode step reads its cache once), N_q = 4 twice N_q = 1's."""

    def ms(v: str, n_q: int, n_k: int) -> float:
        if v == "chunked":
            return n_q * n_k / 1000
        return n_q * n_k / 1000 * (0.7 if n_q == 1 and n_k <= 512 else 1.5)

    return [
        synthetic.cell(v, n_q, seq_k=n_k, kv_heads=2, causal=True, causal_align="lower-right",
                       time_ms=ms(v, n_q, n_k), peak_mem_bytes=n_k * 4096)
        for v in ("naive", "chunked")
        for n_q in (1, 4)
        for n_k in N_KS
    ]  # fmt: skip


def test_a_decode_sweep_of_two_query_lengths_ranks_and_fits_over_n_k_per_n_q(tmp_path):
    run = synthetic.write_run(tmp_path / "run", _rows())
    rep = render(prepare([run]), tmp_path / "report")
    panels = {p.title.rsplit(" · ", 1)[-1]: p.sentences for p in rep.findings.panels}
    assert set(panels) == {"N_q=1", "N_q=4"}, list(panels)
    one, four = " ".join(panels["N_q=1"]), " ".join(panels["N_q=4"])
    assert "naive is fastest from N_k = 256 to 512" in one, one
    assert "chunked is fastest from N_k = 1,024 to 2,048" in one, one
    assert "Crossover between N_k = 512 and 1,024: chunked takes the lead from naive." in one, one
    assert "chunked is fastest at every N_k measured, 256 to 2,048" in four, four
    text = findings.text(rep.findings)
    assert "N = 1 " not in text and "N = 4 " not in text and "two N" not in text, text
    # each series' time fitted over its N_k: linear, one exponent per N_q
    assert "chunked: time grows as N_k^1.00" in one and "chunked: time grows as N_k^1.00" in four, (one, four)
    table = best_table(load(run))
    assert table.headers == ("N_k", "N_q=1", "N_q=4"), table.headers
    assert [r[0] for r in table.rows] == [str(n) for n in N_KS], table.rows
    assert table.rows[0][1].startswith("naive ") and table.rows[-1][1].startswith("chunked "), table.rows


def test_the_scaling_table_gives_one_fit_per_n_q_named_by_it(tmp_path):
    run = synthetic.write_run(tmp_path / "run", _rows())
    rep = render(prepare([run]), tmp_path / "report")
    md = rep.readme.read_text().replace("\\", "")
    scaling = md.split("## Scaling", 1)[1].split("\n## ", 1)[0]
    head = next(line for line in scaling.splitlines() if line.startswith("| variant"))
    assert "| N_q |" in head, head
    lines = [line for line in scaling.splitlines() if line.startswith("| chunked")]
    assert len(lines) == 2 and all("1.00 [" in line for line in lines), lines


def test_a_decode_sweep_of_one_n_k_places_each_n_q_at_that_n_k(tmp_path):
    """N_q 1 and 4 against N_k = 512 alone (a real `--seq-len 1,4 --seq-k 512` sweep): each N_q's panel said
    'no variant can be told apart at N = 1', its N_q as its N, and the accuracy table gave N_q as N. Every
    sentence and table places a cell at its N_k, and the accuracy table tells the N_q apart."""
    rows = [
        synthetic.cell(v, n_q, seq_k=512, kv_heads=2, causal=True, causal_align="lower-right",
                       time_ms=n_q * (1.0 if v == "chunked" else 1.5), rel_err=1e-6)
        for v in ("naive", "chunked")
        for n_q in (1, 4)
    ]  # fmt: skip
    run = synthetic.write_run(tmp_path / "run", rows)
    rep = render(prepare([run]), tmp_path / "report")
    panels = {p.title.rsplit(" · ", 1)[-1]: " ".join(p.sentences) for p in rep.findings.panels}
    assert set(panels) == {"N_q=1", "N_q=4"}, list(panels)
    for said in panels.values():
        assert "chunked is fastest at N_k = 512" in said and "fewer than two N_k" in said, said
    text = findings.text(rep.findings)
    assert "N = 1" not in text and "N = 4" not in text, text
    table = best_table(load(run))
    assert table.headers == ("N_k", "N_q=1", "N_q=4") and [r[0] for r in table.rows] == ["512"], table
    md = rep.readme.read_text().replace("\\", "")
    assert "| variant | dtype | N_q | N_k | K/V GB/s |" in md, md
    # the scaling table's fits, each over one N_k, say so: they said 'n/a (ok at 1 seq_len)'
    scaling = md.split("## Scaling", 1)[1].split("\n## ", 1)[0]
    fits = [line for line in scaling.splitlines() if line.startswith(("| naive", "| chunked"))]
    assert len(fits) == 4 and all("| n/a (ok at 1 N_k) |" in line for line in fits), fits
    assert set(re.findall(r"ok at \w+ ([^)]*)\)", scaling)) == {"N_k"}, scaling  # memory too: 'no N_k'
