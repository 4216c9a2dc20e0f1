"""The output contract (harness.measure.contract) and the backward gate, through the real paths:
measure_cell's rows, `attnbench run` and `attnbench check` with the plug-in file
tests/data/contract_variants.py."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import DATA, run_cli
from fakes import FakeTimer

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.harness.measure.cell import InputCache, measure_cell
from attnbench.harness.measure.contract import OutputContractError, check_output
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec
from attnbench.harness.tools import check
from attnbench.variants import in_layout, registry

CONTRACT = DATA / "contract_variants.py"
QUICK = Settings(warmup_ms=5, budget_ms=20, min_ms=5)
TOLERANCE = correctness.TOLERANCE["float32"]


FIRST = '; declare returns="first" to take its first element'  # what adds a function returning (out, ...)
TRANSPOSED = ' ((B, N, H, d_v)): return out.transpose(1, 2), or declare takes="bnhd" if it takes q, k, v so'


def broken(b: int = 1, h: int = 2, n: int = 32, d: int = 16) -> dict[str, str]:
    """Each broken variant, and what its row says, on a (b, h, n, d) float32 problem on cpu."""
    want, transposed = (b, h, n, d), (b, n, h, d)
    tensor = f"{want} float32 tensor on cpu"
    return {
        "contract_float64": f"output contract: returned float64 {want} on cpu; expected float32",
        "contract_tuple": f"output contract: returned a tuple; expected a {tensor}" + FIRST,
        "contract_list": f"output contract: returned a list; expected a {tensor}" + FIRST,
        "contract_transposed": f"output contract: returned float32 {transposed} on cpu; expected {want}"
        + TRANSPOSED,
    }


BROKEN = broken()  # on the cells below


def spec(variant: str, *, pass_: str = "fwd") -> CellSpec:
    return CellSpec(variant, "cpu", "float32", 1, 2, 32, 16, 16, False, 0.0, pass_)


def fake() -> FakeTimer:
    return FakeTimer(median_ms=1.0, seed=7, call=True)  # calls the cell: what it does is checked


@pytest.fixture(scope="module")
def plugin():
    """The plug-in file, loaded as `--variant-file` loads it, and gone from the registry afterwards (it is
    global, and other tests go over every registered variant); its module, for its counters."""
    variants.all_variants()  # the builtins, before the copy
    before = {m for m in sys.modules if m.startswith("attnbench_variant_file_")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
        variants.load_variant_file(CONTRACT)
        yield next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(CONTRACT))
    for name in {m for m in sys.modules if m.startswith("attnbench_variant_file_")} - before:
        del sys.modules[name]


def test_the_rule_takes_heads_from_q_and_width_from_v_whatever_the_layout():
    q, v = torch.zeros(2, 8, 5, 16), torch.zeros(2, 2, 7, 32)  # grouped: k and v have 2 heads of q's 8
    out = in_layout(torch.zeros(2, 8, 5, 32), "bnhd")  # (B, H, N_q, d_v), laid out as (B, N, H, d)
    assert check_output(out, q, v) is out
    with pytest.raises(OutputContractError) as err:
        check_output(torch.zeros(2, 8, 5, 32, device="meta"), q, v)
    assert str(err.value) == "output contract: returned float32 (2, 8, 5, 32) on meta; expected on cpu"
    with pytest.raises(OutputContractError) as err:
        check_output(None, q, v)
    assert str(err.value) == "output contract: returned None; expected a (2, 8, 5, 32) float32 tensor on cpu"
    with pytest.raises(OutputContractError) as err:
        check_output(torch.zeros(3, dtype=torch.int64), q, v)
    assert str(err.value) == "output contract: returned int64 (3,) on cpu; expected float32 (2, 8, 5, 32)"


def test_an_answer_in_a_familiar_other_shape_is_told_the_way_back():
    """Heads merged into the last dimension, as a model's attention returns them, or (B, N, H, d_v): the
    error says the wrapper's one line; where H = N the shapes cannot be told apart and nothing is said."""
    q, v = torch.zeros(2, 8, 5, 16), torch.zeros(2, 2, 7, 32)
    with pytest.raises(OutputContractError) as err:
        check_output(torch.zeros(2, 5, 8 * 32), q, v)
    way = "return out.unflatten(-1, (8, 32)).transpose(1, 2)"
    assert str(err.value).endswith(f"expected (2, 8, 5, 32) (its heads merged, (B, N, H * d_v)): {way}")
    with pytest.raises(OutputContractError) as err:
        check_output(torch.zeros(2, 5, 8, 32), q, v)
    assert str(err.value).endswith(TRANSPOSED)
    square = torch.zeros(2, 8, 8, 16)
    with pytest.raises(OutputContractError) as err:
        check_output(torch.zeros(2, 8, 8 * 16), square, square)
    assert str(err.value).endswith("expected (2, 8, 8, 16)")


@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_an_output_off_the_contract_is_an_error_row_with_expected_and_got(plugin, name, pass_):
    row = measure_cell(spec(name, pass_=pass_), QUICK, InputCache(), timer=fake())
    assert (row["status"], row["message"]) == ("error", BROKEN[name])
    assert row.get("rel_err") is None  # refused before the gate read it


def test_the_fresh_input_call_is_held_to_the_contract(plugin):
    """Right on the gated call, a tuple afterwards: check_after's call on fresh inputs names it."""
    plugin.LATE_CALLS[0] = 0
    row = measure_cell(spec("contract_late"), QUICK, InputCache(), timer=fake())
    assert row["status"] == "error", row
    assert row["message"] == BROKEN["contract_tuple"]
    assert row["rel_err"] <= TOLERANCE  # the gated first call was right, and its numbers stay in the row


def test_the_gradient_check_is_held_to_the_contract(plugin):
    """A tensor under no_grad, (out, lse) when autograd records: its fwd cell is ok, its fwd+bwd one not."""
    fwd = measure_cell(spec("contract_grad_tuple"), QUICK, InputCache(), timer=fake())
    assert fwd["status"] == "ok", fwd
    bwd = measure_cell(spec("contract_grad_tuple", pass_="fwdbwd"), QUICK, InputCache(), timer=fake())
    assert (bwd["status"], bwd["message"]) == ("error", BROKEN["contract_tuple"])


def test_reentrant_checkpointing_passes_the_backward_gate(plugin):
    """torch.autograd.grad refuses it (the old gate made every fwd+bwd cell of it an error); .backward()
    does not, and its gradients are naive's."""
    q, k, v = (torch.randn(1, 2, 32, 16, requires_grad=True) for _ in range(3))
    out = variants.get("checkpointed").fn(q, k, v)
    with pytest.raises(RuntimeError, match="use_reentrant=True"):
        torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    for pass_ in ("fwd", "fwdbwd"):
        row = measure_cell(spec("checkpointed", pass_=pass_), QUICK, InputCache(), timer=fake())
        assert (row["status"], row["message"]) == ("ok", ""), row
    assert 0 < row["grad_rel_err"] <= TOLERANCE * correctness.GRAD_TOLERANCE_FACTOR


def test_attnbench_run_records_each_broken_variant_and_passes_the_checkpointed_one(plugin, tmp_path):
    names = [*sorted(BROKEN), "checkpointed"]
    proc = run_cli(
        "run", "--variant-file", str(CONTRACT), "--variants", ",".join(names), "--seq-len", "32",
        "--heads", "2", "--d-k", "16", "--batch", "1", "--pass", "both", "--warmup-ms", "1",
        "--budget-ms", "5", "--min-ms", "1", "--out", str(tmp_path / "run"), "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "rows.jsonl").read_text().splitlines()]
    got = {(r["variant"], r["pass"]): (r["status"], r["message"]) for r in rows}
    assert len(got) == len(names) * 2
    for name, message in BROKEN.items():
        assert got[(name, "fwd")] == got[(name, "fwdbwd")] == ("error", message)
    assert got[("checkpointed", "fwd")][0] == got[("checkpointed", "fwdbwd")][0] == "ok", got
    (bwd,) = [r for r in rows if (r["variant"], r["pass"]) == ("checkpointed", "fwdbwd")]
    assert bwd["grad_rel_err"] <= TOLERANCE * correctness.GRAD_TOLERANCE_FACTOR


def test_attnbench_check_fails_each_broken_variant_with_its_reason(plugin):
    """`check`'s own problems, (2, 4, 16, 64): every broken variant is an error row with the contract's words
    and the command exits 1 without a traceback; the checkpointed variant passes with its gradients."""
    names = ["checkpointed", *sorted(BROKEN)]
    rows = list(check.gate_all(check.prepare(names, ["cpu"], ["float32"], 16)))
    for name, message in broken(check.BATCH, check.HEADS, 16, check.HEAD_DIM).items():
        mine = [r for r in rows if r.variant == name and not r.workload]  # (2, 4, 16, 64) problems
        assert {(r.status, r.reason) for r in mine} == {("error", message)}
    passed = [r for r in rows if r.variant == "checkpointed"]
    assert {r.status for r in passed} == {"pass"}
    assert all(r.grad_rel_err is not None for r in passed if not r.no_key)

    proc = run_cli("check", "--variant-file", str(CONTRACT), "--variants", ",".join(names), "--seq-len", "16",
                   "--dtype", "float32")  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    shown = " ".join(proc.stdout.split())  # the reasons as `check` wraps them to the terminal
    for message in broken(check.BATCH, check.HEADS, 16, check.HEAD_DIM).values():
        assert message in shown


def _sdpa(q, k, v, **kw):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(kw.get("causal")))


def detached(q, k, v, **kw):
    return _sdpa(q, k, v, **kw).detach()  # or an answer kept from an earlier call: no grad_fn either


def in_place(q, k, v, **kw):
    out = _sdpa(q, k, v, **kw)
    q.mul_(2.0)  # q as scratch space, after its answer
    return out


def test_a_cut_graph_and_an_in_place_write_are_said_as_what_they_are():
    """The gradient check of a detached answer said autograd's "element 0 of tensors does not require grad
    and does not have a grad_fn", and an in-place q.mul_ autograd's "a leaf Variable that requires grad is
    being used in an in-place operation": what each means, in the words a run's row says it with."""
    from attnbench.harness.measure.contract import NO_GRAPH
    from attnbench.harness.measure.gate_rows import gate_one

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
    with pytest.raises(OutputContractError) as err:
        correctness.check(detached, q, k, v, backward=True)
    assert str(err.value) == NO_GRAPH and "declare backward=False if it has no backward" in NO_GRAPH
    wrote = correctness.check(in_place, q.clone(), k, v, backward=True)
    assert wrote.changed == ("q",) and not wrote.ok and wrote.passed  # judged on the inputs it was handed

    for fn, status, reason in [(detached, "error", NO_GRAPH), (in_place, "FAIL", "modifies its inputs in "
                               "place (q changed)")]:  # fmt: skip
        row = gate_one(attnbench_variant(fn), [q.clone(), k, v], causal=False, key_lengths=None)
        assert (row.status, row.reason) == (status, reason)


def attnbench_variant(fn):
    import attnbench

    return attnbench.variant(fn, name=fn.__name__, padding=False)
