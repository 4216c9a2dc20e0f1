"""Callables as variants (attnbench.run(variants=[fn, ...]), attnbench.variant, @register in a notebook or a
script), shipped to real spawned workers by value, kept in the run (variants.pkl) for a resume and a rerun."""

from __future__ import annotations

import io
import json
import linecache
import os
import re
import subprocess
import sys
import threading
from contextlib import redirect_stdout
from pathlib import Path

import pytest

import attnbench
from attnbench.results.store import read_rows
from tests.conftest import MINE, ROOT, TEST_CALIBRATE_MS, as_a_fresh_process, run_cli
from tests.frontends.test_readme import example

QUICK = dict(heads=1, seq_len="64", budget_ms=3, warmup_ms=1, min_ms=1, calibrate_ms=0)

# what a notebook cell holds: run in a namespace named __main__, as IPython runs cells
CELL = """
import torch

def cell_attn(q, k, v, *, scale=None):
    # (B, H, N, d): plain softmax attention, no causal mask, no key padding
    s = (q @ k.transpose(-2, -1)) * (scale or q.shape[-1] ** -0.5)
    return s.softmax(-1) @ v
"""


def notebook_function(name: str = "cell_attn"):
    """A function as a notebook cell defines it (its module is __main__, which no worker can import)."""
    namespace, cell = {"__name__": "__main__"}, "<ipython-input-1>"
    linecache.cache[cell] = (len(CELL), None, CELL.splitlines(keepends=True), cell)  # as IPython keeps it
    exec(compile(CELL, cell, "exec"), namespace)
    return namespace[name]


def statuses(run_dir: Path) -> dict[tuple[str, bool], str]:
    return {(r["variant"], r["causal"]): r["status"] for r in read_rows(run_dir)}


def test_a_notebook_callable_runs_resumes_and_reruns(tmp_path):
    """A callable from a notebook cell with no declared capabilities: measured in the spawned worker, its
    causal cells `unsupported` with the reason (it takes no causal=), named in meta.json as defined in
    __main__, and measured again from the run's variants.pkl by a resume and a rerun once the notebook's
    own definition is gone and the run has moved."""
    out, again = tmp_path / "nb", tmp_path / "again"
    with as_a_fresh_process(tmp_path):
        run = attnbench.run(variants={"mine": notebook_function()}, causal="both", out=out, **QUICK)
        assert statuses(out) == {("mine", False): "ok", ("mine", True): "unsupported"}, run.counts
        message = {r["causal"]: r["message"] for r in read_rows(out)}[True]
        assert message == "mine does not support causal masking (a variant that does takes causal=)"
        meta = json.loads((out / "meta.json").read_text())
        source = meta["variant_capabilities"]["mine"]["source"]
        assert source.startswith("defined in __main__") and "text sha256 " in source, source
        assert meta["variant_files"] == [str((out / "variants.pkl").resolve())]
    out = out.rename(tmp_path / "moved")  # copied to another folder (or machine): its callables go with it
    rows = (out / "rows.jsonl").read_text().splitlines(keepends=True)
    (out / "rows.jsonl").write_text("".join(r for r in rows if '"status":"ok"' not in r))  # one cell lost
    with as_a_fresh_process(tmp_path):  # a new session: nothing registers "mine" but the run's file
        assert "mine" not in attnbench.variants.all_variants()
        resumed = attnbench.run(out=out, resume=True)
        # the run's cells, the one the resume found done too (counts was {} where none was left to measure)
        assert resumed.counts == {"ok": 1, "unsupported": 1} and statuses(out)[("mine", False)] == "ok"
        assert attnbench.run(out=out, resume=True).counts == {"ok": 1, "unsupported": 1}
    run_cli("run", "--rerun", str(out), "--status", "ok", "--out", str(again), "-q", check=True)
    assert statuses(again) == {("mine", False): "ok"}
    assert (again / "variants.pkl").is_file()


def test_callables_are_refused_before_any_work(tmp_path):
    """Every refusal comes before a directory is made: one line, naming the keyword."""
    out = tmp_path / "never"
    lock = threading.Lock()

    def holds_a_lock(q, k, v, **kw):
        with lock:
            return q

    holds_a_lock.__module__ = "__main__"  # as a notebook's: it goes by value, and a lock cannot
    cases = [
        (dict(variants={"sdpa": notebook_function()}), "variants= 'sdpa' is the name of a built-in variant"),
        (dict(variants=[lambda q, k, v: q]), "variants=: a lambda has no name"),
        (dict(variants=[holds_a_lock]), "variant 'holds_a_lock' (defined in __main__"),
        (dict(variants={"two": lambda q, k: q}), "variant 'two' is called as fn(q, k, v, ...), but its"),
        (
            dict(variants=[type("Attn", (), {"__init__": lambda self, heads=8: None})]),
            "variant 'Attn' is a class",
        ),
    ]
    with as_a_fresh_process(tmp_path):
        for kwargs, words in cases:
            with pytest.raises(ValueError) as caught:
                attnbench.run(out=out, **kwargs, **QUICK)
            assert words in str(caught.value) and "\n" not in str(caught.value), caught.value
        with pytest.raises(ValueError, match="'cell_attn' declares causal=True, but takes no causal="):
            attnbench.variant(notebook_function(), causal=True)
        with pytest.raises(ValueError, match="^name= 'naive' is the name of a built-in variant"):
            attnbench.variant(notebook_function(), name="naive")
        with pytest.raises(ValueError, match=r"capability 'casual' \(did you mean 'causal'\?\); known: desc"):
            attnbench.variant(notebook_function(), casual=True)
        with pytest.raises(ValueError, match=r"unknown capability 'dtype' \(did you mean 'dtypes'\?\)"):
            attnbench.variant(notebook_function(), dtype=("float32",))  # trial: dtypes= is the keyword
        with pytest.raises(ValueError, match=r"^bench: mask= says what fn takes, not what to sweep: give it"):
            attnbench.bench(notebook_function(), mask="bool", out=out)  # a variant's keyword, given to bench
        with pytest.raises(ValueError, match=r"^approximate= says what a variant takes, not what to sweep"):
            attnbench.run(variants=[notebook_function()], approximate=0.9, out=out)  # ... and to run
        with pytest.raises(ValueError, match=r"^bench: fn and baseline= are both named 'cell_attn': give fn"):
            attnbench.bench(notebook_function(), baseline=notebook_function(), out=out)  # an edited cell
        planned = attnbench.bench(notebook_function(), name="new", baseline=notebook_function(), dry_run=True)
        assert (planned.variant, planned.baseline) == ("new", "cell_attn")  # your previous version, by name
        shown = (str(planned), repr(planned), planned._repr_html_())  # a notebook shows a dry run too
        assert all("new against cell_attn: a dry run, nothing measured" in text for text in shown), shown
        assert "estimated time: about" in str(planned) and str(planned).count("\n") >= 2
        declared = attnbench.variant(notebook_function(), name="mine", dtypes=("float32",), backward=False)
        assert (declared.name, declared.cap.dtypes, declared.cap.backward) == ("mine", ("float32",), False)
        assert (declared.cap.causal, declared.cap.padding) == (False, False)  # from its signature
    assert not out.exists()


MODULE_CELL = """
import torch

class Attn(torch.nn.Module):  # a model's attention module: called as Attn()(q, k, v)
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

def plain(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
"""


def test_code_written_elsewhere_is_handed_only_the_keywords_it_takes(tmp_path):
    """torch's own SDPA (a builtin: no signature to read) and a torch.nn.Module (whose __call__ takes
    *args, **kwargs; its forward says what it takes) run as they are, their causal cells `unsupported`; a
    builtin is handed the keywords of what is declared for it. A torch.compile'd function, which cannot
    travel to the workers, is refused in one line that gives the setup hook that compiles it there, and
    that hook's callable is handed only the keywords the function takes."""
    import torch

    from attnbench.variants.shipped import pack

    namespace = {"__name__": "__main__"}
    exec(compile(MODULE_CELL, "<ipython-input-2>", "exec"), namespace)
    sdpa_fn = torch.nn.functional.scaled_dot_product_attention
    with as_a_fresh_process(tmp_path):
        out = tmp_path / "run"
        attnbench.run(variants={"torch_sdpa": sdpa_fn, "module": namespace["Attn"]()}, causal="both", out=out,
                      **QUICK)  # fmt: skip
        assert statuses(out) == {
            ("torch_sdpa", False): "ok", ("torch_sdpa", True): "unsupported",
            ("module", False): "ok", ("module", True): "unsupported",
        }  # fmt: skip
        builtin = {r["causal"]: r["message"] for r in read_rows(out) if r["variant"] == "torch_sdpa"}[True]
        assert builtin.endswith('(its signature cannot be read: declare causal=True if it takes causal=, or '
                                'mask="bool" if it takes attn_mask=)'), builtin  # fmt: skip
        with_dropout = attnbench.variant(sdpa_fn, name="torch_sdpa_dropout", dropout=True)
        assert (with_dropout.cap.causal, with_dropout.cap.padding, with_dropout.cap.dropout) == (
            False,
            False,
            True,
        )
        q = torch.randn(1, 1, 8, 4)
        opts = dict(causal=False, key_lengths=None, dropout_p=0.0, scale=None)  # as a cell calls it
        assert torch.allclose(with_dropout.fn(q, q, q, **opts), sdpa_fn(q, q, q))
        plain = namespace["plain"]
        hooked = attnbench.variant(plain, name="hooked", setup=lambda q, k, v, **_: plain)
        assert torch.allclose(
            hooked.bind(q, q, q, causal=False, key_lengths=None)(q, q, q, **opts), plain(q, q, q)
        )
        attnbench.variants.registry.add(attnbench.variant(torch.compile(plain), name="compiled"))
        with pytest.raises(ValueError) as caught:
            pack(["compiled"])
        assert "\n" not in str(caught.value)
        assert str(caught.value).endswith(
            "attnbench.variant(plain, setup=lambda q, k, v, **_: torch.compile(plain))"
        ), caught.value


def test_bench_of_a_lambda_is_told_the_keyword_bench_takes(tmp_path):
    """bench takes no variants=: a nameless lambda is told name=, and an empty name is no name."""
    for kw, words in (
        ({}, "a lambda has no name: give it one, name='mine'"),
        ({"name": ""}, "name='' names"),
    ):
        with pytest.raises(ValueError, match=re.escape(words)):
            attnbench.bench(lambda q, k, v: q, out=tmp_path / "never", dry_run=True, **kw)
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    "kw",
    [
        {"rounds": 1.5},
        {"settle_rounds": 1.5},
        {"threads": 1.5},
        {"workers": 2.0},
        {"seed": 0.5},
        {"max_call_ms": 2.5},
        {"check_rows": 3.5},
    ],  # fmt: skip
)
def test_a_fraction_for_a_whole_number_setting_is_refused_before_any_work(tmp_path, kw):
    """rounds=1.5 passed its rule (>= 1), calibrated, wrote meta.json, numerics.json, an empty visits.jsonl
    and a writer.lock, then died in the planner with a traceback: every whole-number setting is refused in
    one line naming its keyword, by run and bench alike, and nothing is written."""
    (key, value) = next(iter(kw.items()))
    said = f"{key} must be an integer, got {value!r}"
    with pytest.raises(ValueError, match=re.escape(said)):
        attnbench.run(variants="sdpa", seq_len="64,128", out=tmp_path / "run", **kw)
    with pytest.raises(ValueError, match=re.escape(said)):
        attnbench.bench("sdpa_math", out=tmp_path / "bench", dry_run=True, **kw)
    assert not (tmp_path / "run").exists() and not (tmp_path / "bench").exists()


def test_a_mask_spelled_another_librarys_way_is_named_with_the_declaration_that_hands_it_over():
    """A function with SDPA's keywords (attn_mask=, is_causal=) is handed neither, and its refusals say
    how it would be: mask="bool" or mask="additive" for attn_mask=, with how to tell them apart (a function
    that adds its mask, told mask="bool" alone, failed the gate with no cause), and that causal= is
    attnbench's name for is_causal=. torch's key_padding_mask= (True = padded) is told the wrapper that
    inverts it for mask="keys"."""
    from attnbench.variants.problem import Problem

    def sdpa_like(q, k, v, attn_mask=None, is_causal=False):
        return q

    def flag_only(q, k, v, is_causal=False):
        return q

    causal, padded = Problem(device="cpu", causal=True), Problem(device="cpu", padding=0.25)
    hint = (
        '(it takes attn_mask=: declare attnbench.variant(fn, mask="bool") if its mask is True where a key is '
        'seen (as SDPA\'s), mask="additive" if it adds the mask to the scores (0 where seen, -inf where '
        "hidden); @attnbench.register(name, mask=...) in a variant file)"
    )
    assert attnbench.variant(sdpa_like).check(causal) == f"sdpa_like does not support causal masking {hint}"
    assert attnbench.variant(sdpa_like).check(padded) == f"sdpa_like does not support key padding {hint}"
    assert attnbench.variant(flag_only).check(causal) == (
        "flag_only does not support causal masking (it takes is_causal=: attnbench hands causal=)"
    )
    for kind in ("bool", "additive"):  # what the hint says works
        assert attnbench.variant(sdpa_like, mask=kind).check(causal) is None

    def mask_and_bias(query, key, value, mask=None, bias=None):  # memory-efficient-attention's signature
        return query

    def bias_only(q, k, v, attn_bias=None):  # xformers'
        return q

    said = attnbench.variant(mask_and_bias).check(causal)  # it hinted mask_arg="bias", the first by name
    assert said.endswith(
        '(it takes mask=: declare attnbench.variant(fn, mask="bool", mask_arg="mask") if its mask is True '
        'where a key is seen (as SDPA\'s), mask="additive", mask_arg="mask" if it adds the mask to the '
        'scores (0 where seen, -inf where hidden); @attnbench.register(name, mask=..., mask_arg="mask") in a '
        "variant file)"
    ), said
    said = attnbench.variant(bias_only).check(causal)
    assert said.endswith('(it takes attn_bias=: declare mask="additive", mask_arg="attn_bias" to be handed '
                         "the mask, added to the scores)"), said  # fmt: skip

    def mha_padded(q, k, v, key_padding_mask=None, causal=False):  # nn.MultiheadAttention's: True = padded
        return q

    said = attnbench.variant(mha_padded).check(padded)
    assert said.endswith(
        '(it takes key_padding_mask=, True where a key is padded, as nn.MultiheadAttention\'s: mask="keys" '
        "hands a (B, N_k) mask True where a key is seen, so a wrapper that takes mask= and hands "
        'key_padding_mask=~mask, declared attnbench.variant(wrapper, mask="keys", mask_arg="mask"), gates '
        "and measures it)"
    ), said


def test_torchs_key_padding_mask_is_gated_right_through_the_wrapper_its_hint_gives():
    """key_padding_mask= is True where a key is padded (nn.MultiheadAttention's), mask="keys" hands True
    where a key is seen: the wrapper the hint gives, which inverts it, is right on a padded causal cell."""
    import torch

    from attnbench.harness.measure import correctness

    def mha_padded(q, k, v, key_padding_mask=None, causal=False):
        s = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -torch.inf)
        if key_padding_mask is not None:
            s = s.masked_fill(key_padding_mask[:, None, None, :], -torch.inf)
        return s.softmax(-1) @ v

    def wrapper(q, k, v, mask=None, causal=False):
        return mha_padded(q, k, v, key_padding_mask=None if mask is None else ~mask, causal=causal)

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 16, 8, generator=g) for _ in range(3))
    lengths = torch.tensor([16, 9])
    mine = attnbench.variant(wrapper, mask="keys", mask_arg="mask")
    call = mine.bind(q, k, v, causal=True, key_lengths=lengths)
    out = call(q, k, v, causal=True, key_lengths=lengths, dropout_p=0.0, scale=None)
    assert correctness.gate(out, q, k, v, causal=True, key_lengths=lengths).passed


def test_a_declared_shape_is_handed_only_the_keywords_its_function_takes():
    """What the hints say works, with functions that take no more than they need: one of flash-attn's
    layout taking q, k, v alone (takes="bnhd": its causal cells unsupported, from its signature), one
    taking its mask as mask= (mask="bool", mask_arg="mask"), each called as a cell calls it."""
    import torch
    import torch.nn.functional as F

    def bnhd(q, k, v):  # (B, N, H, d), as flash_attn_func
        return F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)

    def masked(q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
    opts = dict(dropout_p=0.0, scale=None, key_lengths=None)
    flash = attnbench.variant(bnhd, takes="bnhd")
    assert (flash.cap.causal, flash.cap.padding, flash.cap.dropout) == (False, False, False)
    assert torch.allclose(flash.fn(q, k, v, causal=False, **opts), F.scaled_dot_product_attention(q, k, v))
    mine = attnbench.variant(masked, mask="bool", mask_arg="mask")
    assert (mine.cap.causal, mine.cap.padding, mine.cap.dropout) == (True, True, False)  # through the mask
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(
        mine.bind(q, k, v, causal=True, key_lengths=None)(q, k, v, causal=True, **opts), want
    )


SCRIPT = """
import attnbench
import torch

with open({marker!r}, "a") as fh:  # the body's every run leaves a line
    fh.write("ran\\n")


@attnbench.register("scripted", causal=False, padding=False, dropout=False)
def scripted(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return torch.softmax((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5, -1) @ v


def main():
    run = attnbench.run(variants="scripted,naive", out={out!r}, **{quick!r})
    print(run.counts)

{call}
"""


@pytest.mark.parametrize("guarded", [False, True], ids=["no-main-guard", "main-guard"])
def test_a_script_runs_once(tmp_path, guarded):
    """A real script run by python, with @register and with or without `if __name__ == "__main__":`: its
    body runs once (no worker imports it again), and its variant's rows are ok."""
    marker, out = tmp_path / "ran.txt", tmp_path / "run"
    call = 'if __name__ == "__main__":\n    main()' if guarded else "main()"
    script = tmp_path / "bench.py"
    script.write_text(SCRIPT.format(marker=str(marker), out=str(out), quick=QUICK, call=call))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "ran\n"
    assert statuses(out) == {("scripted", False): "ok", ("naive", False): "ok"}, proc.stdout
    meta = json.loads((out / "meta.json").read_text())
    source = meta["variant_capabilities"]["scripted"]["source"]
    assert source.startswith("defined in __main__ (script bench.py), file sha256 "), source


def test_bench_answers_in_a_few_lines_what_a_kernel_author_asks(tmp_path):
    """attnbench.bench(fn): fn and sdpa over causal no/yes and padding none/25%, each cell gated, in three
    rounds; its answer (at most 12 lines): correct or not with the worst error, what fn cannot do (it takes
    neither causal= nor key_lengths=) and what would add it, the race against sdpa judged visit by visit,
    how time and memory grow; in a notebook the same lines."""
    out = tmp_path / "bench"
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(
            notebook_function(), out=out, seq_len="64,128,256", dtype="float32", calibrate_ms=0
        )
        lines = str(bench).splitlines()
        html = bench._repr_html_()
    seen = {(r["variant"], r["causal"], r["padding"] > 0, r["status"]) for r in read_rows(out)}
    fn = {(c, p): s for v, c, p, s in seen if v == "cell_attn"}
    assert fn == {(False, False): "ok", (True, False): "unsupported", (False, True): "unsupported",
                  (True, True): "unsupported"}  # fmt: skip
    assert len(lines) <= 12 and lines[0].startswith("cell_attn against sdpa: 12 cells of cell_attn"), lines
    assert lines[1].startswith("correct in 3 of 3 cells gated against float64 (worst relative error: float32")
    unsupported = [line for line in lines if line.startswith("unsupported in ")]
    assert any("takes causal=" in line for line in unsupported), lines
    race = [line for line in lines if line.startswith("float32: ")]
    assert race and "than sdpa (no mask)" in race[0] and "(visits paired by round" in race[0], lines
    assert any(line.startswith("grows with N (float32, no mask") for line in lines), lines
    assert lines[-1].startswith(f"run: {out}") and html.startswith("<pre") and "cell_attn against" in html


def test_a_wrong_function_is_said_wrong_with_where_it_fails(tmp_path):
    """The answer of a function wrong at every mask it runs (a run's rows as bench's sweep leaves them,
    written here): WRONG per dtype with its masks, N and what the gate found; a wrong cell is never raced."""
    from synthetic import cell, write_run

    from attnbench.reports.answer import answer

    gate = "failed the float64 gate: rel_err 4.69e+00 (tol 1e-04), max_abs_err 3.80e+00"
    rows = [cell("sdpa", n, causal=c, time_ms=n / 100) for n in (64, 128, 256) for c in (False, True)]
    rows += [cell("forgot", n, causal=c, time_ms=n / 50, status="wrong", message=gate, rel_err=4.69)
             for n in (64, 128, 256) for c in (False, True)]  # fmt: skip
    run = write_run(tmp_path / "w", rows)
    lines = answer(run, "forgot", "sdpa").lines
    wrong = [line for line in lines if line.startswith("WRONG float32")]
    assert wrong == [f"WRONG float32 (causal; no mask; from N = 64 to 256): {gate}"], lines
    assert not any(line.startswith("float32: ") for line in lines)  # a wrong cell is never raced


WINDOWED = """
import torch

def windowed(q, k, v, *, causal=False, window=0):
    # flash-attn's window_size=(W, 0): W keys before a query and its own, one more than window=W holds
    i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
    hidden = (j > i) | (j < i - window) if window else (j > i) if causal else torch.zeros_like(i > j)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=~hidden)
"""


def test_bench_gates_the_workloads_fn_declares(tmp_path):
    """A function declared to take windows is gated on a window too, as `attnbench check` gates it, though
    the bench sweep has none: its answer names the window it got wrong and why, beside the masks it got
    right."""
    namespace = {"__name__": "__main__"}
    exec(WINDOWED, namespace)
    fn = attnbench.variant(namespace["windowed"], window=True)
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(fn, out=tmp_path / "b", seq_len="64", dtype="float32", calibrate_ms=0)
    lines = str(bench).splitlines()
    assert lines[1].startswith("correct in 2 of 2 cells gated against float64"), lines
    wrong = [line for line in lines if line.startswith("WRONG declared window 16 (float32, N 100): ")]
    assert wrong and "holds 17 keys, its own and 16 before it" in wrong[0], lines
    gated = [(r.workload, r.status) for r in bench.declared.gated]
    assert gated == [("causal top-left, N_q 25 of N_k 100", "pass"), ("window 16", "FAIL")]
    assert bench.declared.undeclared == ()
    # the same function undeclared: no cell hands it a window, and the answer says how to declare one
    plain = attnbench.variant(namespace["windowed"])
    assert plain.undeclared() == (("window", "window=True"),)
    # read from the function through a declared shape's bridge too (variants.adapt)
    for shape in ({"takes": "bnhd"}, {"causal": "lower-right"}):
        assert attnbench.variant(namespace["windowed"], **shape).undeclared() == (("window", "window=True"),)


ZERO_GRAD = """
import torch

class ZeroGrad(torch.autograd.Function):  # a hand-written backward that returns nothing of use
    @staticmethod
    def forward(ctx, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    @staticmethod
    def backward(ctx, grad):
        return grad * 0, None, None

def zero_grad(q, k, v):
    return ZeroGrad.apply(q, k, v)

def blocked(q, k, v):  # a kernel that assumes N % 64 == 0: the last rows of any other N are never written
    out, n = torch.zeros_like(q), q.shape[2] // 64 * 64
    out[:, :, :n] = torch.nn.functional.scaled_dot_product_attention(q[:, :, :n], k, v)
    return out
"""


def _bench_of(tmp_path, name: str, **capability):
    namespace = {"__name__": "__main__"}
    exec(ZERO_GRAD, namespace)
    fn = attnbench.variant(namespace[name], **capability)
    with as_a_fresh_process(tmp_path):
        return attnbench.bench(fn, out=tmp_path / name, seq_len="64", dtype="float32", calibrate_ms=0)


def test_bench_gates_the_backward_its_forward_sweep_never_runs(tmp_path):
    """bench's sweep times the forward alone: a function with a wrong hand-written backward was 'correct in
    1 of 1 cells'. Every mask it takes is gated at N = 100 and 300 forward and backward, as `attnbench check`
    gates it, and the answer says the gradients are wrong (at both N: the first named, the other counted)."""
    bench = _bench_of(tmp_path, "zero_grad")
    lines = str(bench).splitlines()
    assert lines[1].startswith("correct in 1 of 1 cell gated against float64"), lines
    said = "WRONG at N 100 (float32; no mask) (and 1 more): gradient rel_err 1.0e+00 > tolerance 4e-04, "
    said += "in dq, dk and dv"
    assert lines[2] == said, lines
    assert sorted(r.n for r in bench.declared.masks if r.status == "FAIL") == [100, 300]
    assert {(r.causal, r.padding, r.status) for r in bench.declared.masks} == {
        (False, False, "FAIL"), (True, False, "unsupported"), (False, True, "unsupported"),
        (True, True, "unsupported")}  # fmt: skip


def test_bench_gates_a_length_no_block_divides(tmp_path):
    """The sweep's N are powers of two: a kernel that never writes the rows past the last full block of 64
    passed all of them. At N = 100 it is wrong, forward alone too."""
    bench = _bench_of(tmp_path, "blocked", backward=False)
    lines = str(bench).splitlines()
    assert lines[1].startswith("correct in 1 of 1 cell gated against float64"), lines
    said = "WRONG at N 100 (float32; no mask) (and 1 more): it left query rows unwritten (zeros where the "
    said += "answer is not); "
    assert lines[2].startswith(said + "output rel_err ") and "at query rows 64 to 99" in lines[2], lines
    assert all(r.grad_rel_err is None for r in bench.declared.masks)


FLASH_CAUSAL = """
import torch

def flash_causal(q, k, v, causal=False):  # FlashAttention's causal: aligned to the last key
    mask = None
    if causal:
        shift = k.shape[2] - q.shape[2]
        mask = torch.arange(k.shape[2])[None, :] <= torch.arange(q.shape[2])[:, None] + shift
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
"""


def test_a_decode_bench_aligns_causal_masking_as_decoding_does(tmp_path):
    """bench(fn, seq_k=...): a decode step's causal cells are lower-right (top-left would show its queries
    the first keys alone); a function whose causal=True is FlashAttention's, declared so, is right there."""
    namespace = {"__name__": "__main__"}
    exec(FLASH_CAUSAL, namespace)
    fn = attnbench.variant(namespace["flash_causal"], causal="lower-right")
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(
            fn, out=tmp_path / "d", seq_len="4", seq_k="64", dtype="float32", calibrate_ms=0
        )
    rows = [r for r in read_rows(tmp_path / "d") if r["variant"] == "flash_causal" and not r["padding"]]
    assert {(r["causal"], r["causal_align"], r["status"]) for r in rows} == {
        (False, "top-left", "ok"), (True, "lower-right", "ok")}  # fmt: skip
    assert str(bench).splitlines()[1].startswith("correct in 2 of 2 cells gated against float64"), str(bench)


def test_a_bench_on_executors_that_measure_in_parallel_visits_each_cell_once(tmp_path):
    """bench's preset visits in 3 rounds, which ray, slurm and --devices (cells in parallel) cannot follow:
    there it visits each cell once instead of refusing the keyword its docs name (a dry run: the same
    rules, nothing started)."""
    with as_a_fresh_process(tmp_path):
        for scale_out in ({"executor": "ray"}, {"executor": "slurm", "slurm_local": True}):
            ran = attnbench.bench("sdpa_math", **scale_out, dry_run=True, seq_len=[64], out=tmp_path / "d")
            assert str(ran).startswith("bench sdpa_math against sdpa: a dry run, nothing measured")
        with pytest.raises(ValueError, match="rounds=3 visits the whole sweep in one order on one worker"):
            attnbench.bench("sdpa_math", executor="ray", rounds=3, dry_run=True, seq_len=[64])


def test_a_bench_of_a_kernel_of_other_dtypes_measures_it_in_its_own(tmp_path):
    """A kernel declared float16 alone: the bench preset's float32 and bfloat16 would measure none of its
    cells ('unsupported' twice); it is benched in float16 instead."""
    namespace = {"__name__": "__main__"}
    exec(FLASH_CAUSAL, namespace)
    fn = attnbench.variant(namespace["flash_causal"], dtypes=("float16",))
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(
            fn, out=tmp_path / "h", seq_len="64", causal="no", padding="0", calibrate_ms=0
        )
    assert {(r["variant"], r["dtype"], r["status"]) for r in read_rows(tmp_path / "h")} == {
        ("flash_causal", "float16", "ok"), ("sdpa", "float16", "ok")}  # fmt: skip
    assert str(bench).splitlines()[1].startswith("correct in 1 of 1 cell gated against float64"), str(bench)


def test_bench_measures_the_baseline_only_in_the_cells_fn_runs(tmp_path):
    """A function without causal= or key_lengths=, declared float32 alone: every causal, padded or bfloat16
    cell is unsupported for it, and bench measured sdpa there all the same, rows its answer races against
    nothing, at the caller's time. The baseline runs only where fn does, decided by fn's capabilities before
    the sweep; fn's own rows, and the answer's unsupported lines, still name every cell it could not run. A
    resume keeps the run's cells."""
    fn = attnbench.variant(notebook_function(), dtypes=("float32",))
    out, small = tmp_path / "b", dict(seq_len="64", dtype="float32,bfloat16", budget_ms=5, warmup_ms=1)
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(fn, out=out, calibrate_ms=0, **small)
    rows = [(r["variant"], r["dtype"], r["causal"], r["padding"] > 0, r["status"]) for r in read_rows(out)]
    assert sorted(r for r in rows if r[0] == "sdpa") == [("sdpa", "float32", False, False, "ok")]
    mine = {r[1:] for r in rows if r[0] == "cell_attn"}
    ran = ("float32", False, False, "ok")
    masks = {(d, c, p) for d in ("float32", "bfloat16") for c in (False, True) for p in (False, True)}
    assert mine == {ran} | {(*m, "unsupported") for m in masks if m != ran[:3]}
    meta = json.loads((out / "meta.json").read_text())
    assert meta["planned_cells"] == len(meta["cells"]) == len(rows) == 9
    lines = str(bench).splitlines()
    assert lines[0].startswith("cell_attn against sdpa: 8 cells of cell_attn, 9 in all, measured"), lines
    unsupported = [line for line in lines if line.startswith("unsupported in ")]
    assert any(line.startswith("unsupported in 4 cells (") and "bfloat16" in line for line in unsupported)
    assert any("takes causal=" in line for line in unsupported), lines
    assert any(line.startswith("float32: ") and "than sdpa (no mask)" in line for line in lines), lines
    with as_a_fresh_process(tmp_path):  # nothing left to measure: the run's own cells, not the sweep's
        assert attnbench.run(out=out, resume=True, progress=False).resumed == 9


def test_the_gate_at_n_right_on_every_mask_is_one_line():
    from types import SimpleNamespace as gated

    from attnbench.reports.answer import Declared, at_n

    def row(dtype, causal, err, grad):
        return gated(dtype=dtype, causal=causal, padding=False, status="pass", rel_err=err, grad_rel_err=grad)

    rows = (
        row("float32", False, 3e-7, 4e-7),
        row("float32", True, 2e-7, 5e-7),
        row("bfloat16", False, 2e-3, 3e-3),
    )
    assert at_n(Declared(n=100, masks=rows)) == [
        "correct at N 100 too, forward and backward (float32, bfloat16; no mask; causal): worst relative "
        "error 2.0e-03, gradients 3.0e-03"
    ]
    forward = (row("float32", False, 3e-7, None),)  # no backward to gate
    assert at_n(Declared(n=100, masks=forward)) == [
        "correct at N 100 too, forward (float32; no mask): worst relative error 3.0e-07"
    ]
    assert at_n(Declared()) == []
    # check's N (harness.tools.check.SEQ_LENS): a tile's partial last block shows at 300, not at 100
    at_both = (
        row("float32", False, 3e-7, None),
        gated(**{**vars(row("float32", False, 4e-7, None)), "n": 300}),
    )
    assert at_n(Declared(n=100, masks=at_both, mask_ns=(100, 300))) == [
        "correct at N 100 and 300 too, forward (float32; no mask): worst relative error 4.0e-07"
    ]
    late = gated(
        **{**vars(at_both[1]), "status": "FAIL", "reason": "output rel_err 5.0e-01 > tolerance 1e-04"}
    )
    assert at_n(Declared(n=100, masks=(at_both[0], late), mask_ns=(100, 300))) == [
        "WRONG at N 300 (float32; no mask): output rel_err 5.0e-01 > tolerance 1e-04"
    ]
    # a mask wrong at N = 100 that the sweep found wrong already: its WRONG line says it, nothing more here
    failed = gated(dtype="float32", causal=True, padding=False, status="FAIL", rel_err=1.0, grad_rel_err=None,
                   reason="it ignored causal=True: its answer is attention over every key")  # fmt: skip
    assert at_n(Declared(n=100, masks=(*rows, failed)), {("float32", "causal")}) == []
    assert at_n(Declared(n=100, masks=(*rows, failed))) == [
        "WRONG at N 100 (float32; causal): it ignored causal=True: its answer is attention over every key"
    ]
    # a kernel that takes only N its tile divides refuses 100 and 300: the answer says nothing was gated there
    # (it said only 'correct in 16 of 16 cells' of a sweep at powers of two)
    limited = "needs N divisible by 128, got N_q=100 N_k=100"
    refused = tuple(gated(**{**vars(r), "status": "unsupported", "reason": limited}) for r in at_both)
    assert at_n(Declared(n=100, masks=refused, mask_ns=(100, 300))) == [
        f"not gated at N 100 and 300, unsupported in every mask: {limited}"
    ]


def test_declared_workloads_answer_in_three_lines():
    """A line for the right ones with the worst error, one for the first wrong one, one for a refused one."""
    from types import SimpleNamespace as gated

    from attnbench.reports.answer import Declared, workloads

    def row(label, status, dtype="float32", rel_err=None, reason=""):
        kind = "packed" if label == "uniform lengths" else "window" if label.startswith("window") else "dense"
        return gated(workload=label, kind=kind, status=status, dtype=dtype, rel_err=rel_err, reason=reason)

    rows = [row("window 16", "pass", rel_err=2e-7), row("window 16", "pass", "bfloat16", 3e-3),
            row("alibi", "FAIL", reason="it ignored the score mod"), row("alibi", "FAIL", "bfloat16"),
            row("softcap:5", "error", reason="RuntimeError: boom"),
            row("uniform lengths", "unsupported", reason="no cu_seqlens")]  # fmt: skip
    assert workloads(Declared(tuple(rows), 100)) == [
        "declared workloads correct against float64 at N 100 (float32, bfloat16; worst relative error "
        "3.0e-03): window 16",
        "WRONG declared alibi (float32, N 100) (and 2 more): it ignored the score mod",
        "declared uniform lengths, but refused it: no cu_seqlens",
    ]
    assert workloads(Declared()) == []
    untaken = (("window", "window=True"), ("mod", 'mods=("alibi", "softcap")'))
    assert workloads(Declared(undeclared=untaken)) == [
        "takes window=, mod= but declares no such workload, so no cell hands it one: "
        'attnbench.variant(fn, window=True, mods=("alibi", "softcap")) gates and measures it'
    ]


def test_declared_workloads_of_cells_measured_elsewhere_are_said_ungated(tmp_path):
    """bench's cells measured on a device this process lacks (a cluster's GPU, through ray or slurm): its
    declared workloads cannot be gated here, and the answer says so and where they can be, not nothing."""
    from synthetic import cell, write_run

    from attnbench.api import _declared
    from attnbench.reports.answer import at_n, workloads
    from attnbench.variants.registry import add

    namespace = {"__name__": "__main__"}
    exec(WINDOWED, namespace)
    run = write_run(tmp_path / "gpu", [cell("windowed", 64, device="cuda", dtype="bfloat16", time_ms=0.1)])
    with as_a_fresh_process(tmp_path):
        add(attnbench.variant(namespace["windowed"], window=True))
        declared = _declared("windowed", run)
    assert declared.gated == declared.masks == () and [d for d, _, _ in declared.elsewhere] == ["cuda"]
    assert workloads(declared) == []
    (line,) = at_n(declared)
    said = "not gated on cuda, which this process lacks ("
    assert line.startswith(said) and line.endswith(
        "`attnbench check --device cuda` gates every mask at N 100 and 300 and each workload it declares "
        "where the cells ran"
    ), line


@pytest.mark.parametrize(
    ("axis", "values", "said"),
    [
        ("pass_", ("fwd", "fwdbwd"), ("forward", "forward+backward")),
        ("d_k", (64, 128), ("d_k=64", "d_k=128")),
    ],
)
def test_a_bench_of_two_passes_or_shapes_races_each_apart(tmp_path, axis, values, said):
    """bench(fn, pass_="both") or bench(fn, d_k=[64, 128]): a race line per pass or shape, in their order
    (one line over both read '1.42x slower at N 64 to 1.11x faster at N 512', which of them unsaid), and the
    growth of the first's series, named."""
    from synthetic import cell, write_run

    from attnbench.reports.answer import answer

    rows = []
    for n in (128, 256, 512):
        for value, slower in zip(values, (3.0, 0.3), strict=True):  # one visit a cell: past the visits' floor
            rows.append(cell("sdpa", n, **{axis: value}, time_ms=n / 100, peak_mem_bytes=n * 64))
            rows.append(cell("two", n, **{axis: value}, time_ms=n / 100 * slower, peak_mem_bytes=n * n))
    lines = answer(write_run(tmp_path / "p", rows), "two", "sdpa").lines
    races = [
        re.sub(r"\d\.\d\dx", "Rx", line.split(" than sdpa")[0]) for line in lines if line.startswith("float")
    ]
    assert races == [
        f"float32 {said[0]}: Rx slower at N 128 to Rx slower at N 512",
        f"float32 {said[1]}: Rx faster at N 128 to Rx faster at N 512",
    ], lines
    growth = next(line for line in lines if line.startswith("grows with"))
    assert growth.startswith(f"grows with N (float32, {said[0]}, no mask, fitted over N "), growth


def test_a_kernel_that_overflows_on_large_logits_is_said_wrong_there(tmp_path):
    """The run's numerics probe scales q by 1, 10 and 100: an unstable softmax, right in every cell of the
    sweep, gives NaN at x 100; the answer says so (it said 'correct in 2 of 2 cells' and nothing more)."""
    from synthetic import cell, write_run

    from attnbench.reports.answer import answer

    rows = [cell(v, n, time_ms=n / 100) for v in ("sdpa", "unstable") for n in (64, 128)]
    run = write_run(tmp_path / "u", rows)
    probe = [{"variant": v, "dtype": "float32", "q_scale": s, "status": "wrong" if bad else "ok",
              "finite": not bad} for v in ("sdpa", "unstable") for s in (1.0, 10.0, 100.0)
             for bad in [v == "unstable" and s == 100.0]]  # fmt: skip
    (run / "numerics.json").write_text(json.dumps({"probe": probe}))
    lines = answer(run, "unstable", "sdpa").lines
    said = (
        "WRONG on large logits (float32 from q x 100): NaN or inf, where the numerics probe scales q by 1, "
        "10 and 100"
    )
    assert said in lines, lines
    assert not any("large logits" in line for line in answer(run, "sdpa", "unstable").lines)


@pytest.mark.parametrize("finite", [True, False])
def test_large_logits_are_wrong_where_fn_overflows_and_less_accurate_where_it_stays_finite(tmp_path, finite):
    """Scores rounded to bfloat16 before the softmax (naive, chunked, an eager kernel) miss bfloat16's
    tolerance at q x 100 by a little, finite: that is said with the baseline's error, not as WRONG, and
    the command exits 0; NaN there is WRONG."""
    from synthetic import cell, write_run

    from attnbench.reports.answer import answer

    rows = [cell(v, n, dtype="bfloat16", time_ms=n / 100) for v in ("sdpa", "eager") for n in (64, 128)]
    run = write_run(tmp_path / "u", rows)
    probe = [{"variant": v, "dtype": "bfloat16", "q_scale": s, "status": "wrong" if bad else "ok",
              "finite": finite or not bad, "tolerance": 0.025,
              "rel_err": (0.034 if finite else float("inf")) if bad else 6e-4}
             for v in ("sdpa", "eager") for s in (1.0, 10.0, 100.0)
             for bad in [v == "eager" and s == 100.0]]  # fmt: skip
    (run / "numerics.json").write_text(json.dumps({"probe": probe}))
    said = answer(run, "eager", "sdpa")
    line = next(line for line in said.lines if "large logits" in line)
    if finite:
        assert line.startswith(
            "less accurate on large logits, though finite (bfloat16 from q x 100: relative error 3.4e-02 "
            "over the tolerance 2.5e-02; sdpa 6.0e-04), where the numerics probe scales q by 1, 10 and 100"
        ), line
    else:
        assert line.startswith("WRONG on large logits (bfloat16 from q x 100): NaN or inf"), line
    assert said.wrong is not finite


def test_a_kernel_wrong_at_every_scale_has_no_large_logits_line(tmp_path):
    """The probe's first scale is the sweep's own logits: a kernel wrong there (its inputs read in another
    layout) is WRONG in its cells, and 'less accurate on large logits ... from q x 1' said nothing more."""
    from synthetic import cell, write_run

    from attnbench.reports.answer import answer

    rows = [cell("sdpa", 64, time_ms=1.0), cell("bnhd", 64, status="wrong", rel_err=4.0, message="wrong")]
    run = write_run(tmp_path / "u", rows)
    probe = [{"variant": "bnhd", "dtype": "float32", "q_scale": s, "status": "wrong", "finite": True,
              "rel_err": 5.5, "tolerance": 1e-4} for s in (1.0, 10.0, 100.0)]  # fmt: skip
    (run / "numerics.json").write_text(json.dumps({"probe": probe}))
    said = answer(run, "bnhd", "sdpa")
    assert not [line for line in said.lines if "large logits" in line] and said.wrong, said.lines


def test_cells_that_raised_are_said_with_where(tmp_path):
    """A function that raises past some N: how many cells, which dtypes, masks and N, and what it raised."""
    from synthetic import cell, write_run

    from attnbench.reports.answer import answer

    raised = "RuntimeError: shared memory exceeded: N > 256 not supported"
    rows = [
        cell("sdpa", n, dtype=d, time_ms=n / 100) for n in (128, 256, 512) for d in ("float32", "bfloat16")
    ]
    rows += [cell("limited", n, dtype=d, time_ms=n / 90) for n in (128, 256) for d in ("float32", "bfloat16")]
    rows += [cell("limited", 512, dtype=d, status="error", message=raised) for d in ("float32", "bfloat16")]
    lines = answer(write_run(tmp_path / "e", rows), "limited", "sdpa").lines
    assert f"2 cells error (float32, bfloat16; no mask; at N = 512): {raised}" in lines, lines


def test_a_decode_answer_speaks_of_the_keys_it_grows(tmp_path):
    """A decode sweep (one query, N_k growing): where it is wrong, the race's ends and the growth are said at
    N_k, not at the N = 1 every cell shares ('8.6x slower at N 1 to 3.9x slower at N 1', before)."""
    from synthetic import cell, write_run

    from attnbench.reports.answer import answer

    ignored = "failed the float64 gate: it ignored causal=True: its answer is attention over every key"
    rows = []
    for nk in (1024, 2048, 4096):
        rows += [cell("sdpa", 1, seq_k=nk, causal=c, time_ms=nk / 1000, peak_mem_bytes=nk,
                      causal_align="lower-right" if c else "top-left") for c in (False, True)]  # fmt: skip
        rows.append(
            cell("dec", 1, seq_k=nk, time_ms=nk / 1000 * 3, peak_mem_bytes=nk * 64)
        )  # past the visits' floor
        rows.append(cell("dec", 1, seq_k=nk, causal=True, causal_align="lower-right", status="wrong",
                         message=ignored, rel_err=1.0))  # fmt: skip
    lines = answer(write_run(tmp_path / "d", rows), "dec", "sdpa").lines
    assert f"WRONG float32 (causal lower-right; from N_k = 1,024 to 4,096): {ignored}" in lines, lines
    race = next(line for line in lines if line.startswith("float32: "))
    assert re.match(r"float32: 3\.0\dx slower at N_k 1,024 to 3\.0\dx slower at N_k 4,096 than sdpa", race), (
        race
    )
    growth = next(line for line in lines if line.startswith("grows with"))
    assert growth.startswith(
        "grows with N_k (float32, no mask, fitted over N_k 1024, 2048, 4096): time as N_k^1"
    )


def test_a_ratio_the_judge_did_not_call_carries_its_verdict():
    """A race's ends are the judge's ratios; one it calls neither faster nor slower says so beside it."""
    from attnbench.reports.answer import _race
    from attnbench.results.judge import Judged as judged  # no CI: two decimals

    def key(n):
        return {"seq_len": n, "causal": False, "padding": 0.0}

    cells = [
        (key(64), judged(ratio=2.0, verdict="slower")),
        (key(512), judged(ratio=1.26, verdict="ambiguous")),
    ]
    assert _race(cells, "sdpa") == (
        "2.00x slower at N 64 to 1.26x slower at N 512 (ambiguous) than sdpa (no mask);"
        " of 2 cells slower in 1, ambiguous in 1"
    )


def test_the_docs_example_runs(tmp_path):
    """docs/api.md's callables example, as a script of its own (its function is __main__'s), prints what
    its comment says, and its function passes bench's gate: the run's cells have N_q = N_k, where a causal
    mask built n x n from q alone is right; bench's gate at N = 100 adds N_q 25 of N_k 100: it raised."""
    # the tests' runs take no calibration (conftest.TEST_CALIBRATE_MS): the default 1000 ms was 6 s of its 10
    source = example("<!-- callables-example")
    assert "budget_ms=5," in source
    source = source.replace("budget_ms=5,", f"budget_ms=5, calibrate_ms={TEST_CALIBRATE_MS},")
    code = compile(source, "docs/api.md (callables-example)", "exec")
    script = {"__name__": "__main__"}
    with as_a_fresh_process(tmp_path), redirect_stdout(io.StringIO()) as out:
        exec(code, script)
        bench = attnbench.bench(script["my_attn"], out=tmp_path / "bench", dtype="float32", **QUICK)
    assert "{'ok': 12, 'unsupported': 4}" in out.getvalue()
    assert (tmp_path / "runs" / "from-python" / "variants.pkl").is_file()
    gated = dict((r.workload, r.status) for r in bench.declared.gated)
    assert gated.get("causal top-left, N_q 25 of N_k 100") == "pass", (gated, str(bench))
    assert not bench.answer.wrong and "ERROR" not in str(bench), str(bench)


REGISTERED_CELL = """
import attnbench
import torch


@attnbench.register("nb_inline", causal=False, padding=False, dropout=False)
def nb_inline(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None):
    return torch.softmax((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5, -1) @ v
"""


def test_notebook_registered_and_session_loaded_variants_reach_the_workers(tmp_path):
    """The issue's notebook: @register in a cell (its module is __main__), and a variant file loaded in the
    session by hand, then both named: the workers measure both (never `error` rows 'unknown variant')."""
    plugin, out = tmp_path / "mine.py", tmp_path / "run"
    plugin.write_text(MINE)
    with as_a_fresh_process(tmp_path):
        exec(compile(REGISTERED_CELL, "<ipython-input-2>", "exec"), {"__name__": "__main__"})
        attnbench.variants.load_variant_file(plugin)
        attnbench.run(variants={"nb_inline": "nb_inline", "mine": "mine"}, out=out, **QUICK)
    assert statuses(out) == {("nb_inline", False): "ok", ("mine", False): "ok"}
    meta = json.loads((out / "meta.json").read_text())
    assert meta["variant_files"] == [str(plugin.resolve()), str((out / "variants.pkl").resolve())]
    assert meta["variant_capabilities"]["nb_inline"]["source"].startswith("defined in __main__")


def test_a_slow_kernel_skips_its_longer_cells_in_rounds_and_the_answer_says_so(tmp_path):
    """max_call_ms (the bench preset's: 1000) reads each visit as it is made: a run in rounds gets a cell's
    row only in its last round, where every first visit the skip decides is long made. A kernel that sleeps
    N^2 / 400 ms a call (10 ms at N 64, 41 ms at 128) skips N 256 (at least 164 ms predicted: the sleeps are
    a floor) at max_call_ms 150; N 128 (41 ms predicted) runs unless N 64's calls take over 37 ms. At
    max_call_ms 80, CI's busy worker once measured N 64 over 20 ms a call and skipped N 128 too."""
    import time

    import torch.nn.functional as F

    def sleepy(q, k, v):
        time.sleep(q.shape[2] ** 2 / 4e5)
        return F.scaled_dot_product_attention(q, k, v)

    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(
            sleepy, out=tmp_path / "s", seq_len="64,128,256", dtype="float32", causal="no", padding=0.0,
            max_call_ms=150, budget_ms=20, warmup_ms=1, calibrate_ms=0,
        )  # fmt: skip
    rows = {r["seq_len"]: r for r in read_rows(tmp_path / "s") if r["variant"] == "sleepy"}
    assert [rows[n]["status"] for n in (64, 128, 256)] == ["ok", "ok", "skipped"], rows
    lines = str(bench).splitlines()
    skipped = [
        line
        for line in lines
        if line.startswith("skipped in 1 cell (float32; no mask; forward; at N = 256): ")
    ]
    assert skipped and "over max_call_ms=150" in skipped[0], lines  # the API's keyword, not the CLI's flag


def test_a_workload_keyword_in_flash_attns_spelling_is_named_with_the_wrapper_that_hands_it():
    """flash-attn's window_size=(left, right) and softcap= are never handed (attnbench hands window= and
    mod=): bench's answer and check's notes say how a wrapper hands them on, and declaring the workload on
    the function itself is refused saying the same."""
    from attnbench.reports.answer import Declared, workloads

    def flash_like(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0):
        return q

    said = attnbench.variant(flash_like).foreign()
    assert said == (
        "takes window_size= (flash-attn's (left, right) window), which attnbench never hands: a wrapper that "
        "takes window= and hands it window_size=(window - 1, 0), declared window=True, gates and measures it",
        "takes softcap= (a logit soft-cap), which attnbench never hands: a wrapper that takes mod= and "
        'hands it softcap=C for mod="softcap:C", declared mods=("softcap",), gates and measures it',
    )
    assert workloads(Declared(foreign=said)) == list(said)
    with pytest.raises(ValueError, match=r"takes no window= keyword \(it takes window_size=, flash-attn's"):
        attnbench.variant(flash_like, window=True)
