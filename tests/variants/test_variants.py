"""Every variant available here against the float64 reference, over the edge cases of the gate."""

from __future__ import annotations

import math

import pytest
import tensors
import torch

from attnbench import variants
from attnbench.harness.measure import correctness
from attnbench.variants import Problem, UnsupportedError
from attnbench.variants.masks import attention_mask

DTYPES = ["float32", "bfloat16"]
CPU_VARIANTS = [n for n, v in variants.all_variants().items() if v.availability("cpu") is None]


def _inputs(b=2, h=3, n_q=37, n_k=50, d_k=16, d_v=24, dtype="float32", seed=0):
    return tensors.qkv(b=b, h=h, n_q=n_q, n_k=n_k, d_k=d_k, d_v=d_v, dtype=dtype, seed=seed)


def _check_or_skip(name, q, k, v, **opts):
    var = variants.get(name)
    prob = Problem(
        device="cpu",
        dtype=variants.dtype_name(q.dtype),
        batch=q.shape[0],
        heads=q.shape[1],
        seq_len=q.shape[2],
        seq_k=k.shape[2],
        d_k=q.shape[3],
        d_v=v.shape[3],
        causal=opts.get("causal", False),
        padding=0.25 if opts.get("key_lengths") is not None else 0.0,
        pass_="fwdbwd" if opts.get("backward", False) else "fwd",
    )
    reason = var.check(prob)
    if reason:
        pytest.skip(reason)
    try:
        return correctness.check(var, q, k, v, **opts)
    except UnsupportedError as exc:
        pytest.skip(str(exc))


def test_cpu_has_the_core_variants():
    for name in ("naive", "stable_softmax", "unstable_softmax", "chunked", "sdpa", "sdpa_math", "sdpa_flash"):
        assert name in CPU_VARIANTS


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padding", [False, True], ids=["nopad", "pad"])
@pytest.mark.parametrize("name", [n for n in CPU_VARIANTS if variants.get(n).cap.default])
def test_gate_passes(name, dtype, causal, padding):
    # square, power-of-two-free shapes with d_k == d_v so that every backend can take them
    q, k, v = _inputs(n_q=67, n_k=67, d_k=32, d_v=32, dtype=dtype)
    lengths = torch.tensor([50, 67]) if padding else None
    r = _check_or_skip(
        name, q, k, v, causal=causal, key_lengths=lengths, backward=variants.get(name).cap.backward
    )
    assert r.ok, r.describe()


@pytest.mark.parametrize("name", ["naive", "stable_softmax", "chunked", "sdpa", "sdpa_math"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cross_attention_and_different_value_dim(name, causal):
    q, k, v = _inputs(b=2, h=3, n_q=37, n_k=50, d_k=16, d_v=24)
    r = _check_or_skip(name, q, k, v, causal=causal, key_lengths=torch.tensor([50, 13]), backward=True)
    assert r.ok, r.describe()


@pytest.mark.parametrize("name", ["naive", "stable_softmax", "chunked", "sdpa", "sdpa_math", "sdpa_flash"])
def test_fully_masked_rows_are_reported(name):
    q, k, v = _inputs(n_q=20, n_k=20, d_k=16, d_v=16)
    r = _check_or_skip(name, q, k, v, key_lengths=torch.tensor([0, 7]))
    assert r.masked_rows in ("zeros", "nan", "other")
    assert r.passed, r.describe()  # the rows that see keys are right whatever happens in the empty ones
    if name in ("naive", "stable_softmax", "chunked"):
        assert r.masked_rows == "zeros"  # attnbench's own variants keep the documented convention


def test_fully_masked_rows_are_reported_on_sampled_rows_too():
    """The gate on a sample of the rows (N above check_rows, or the fresh-input re-check) reads the empty
    rows among the sampled ones (it used to index the full output with the sample's mask: IndexError)."""
    q, k, v = _inputs(n_q=20, n_k=20, d_k=16, d_v=16)
    kl = torch.tensor([0, 7])
    r = correctness.check(variants.get("naive"), q, k, v, key_lengths=kl, max_rows=6)
    assert r.passed and r.rows_checked == 6 and r.masked_rows == "zeros"


def test_reference_gives_zeros_for_rows_without_keys():
    q, k, v = _inputs(n_q=5, n_k=6)
    ref = correctness.reference(q, k, v, key_lengths=torch.tensor([0, 6]))
    assert torch.all(ref[0] == 0)
    assert torch.isfinite(ref).all()


@pytest.mark.parametrize("bq,bk", [(1, 1), (3, 5), (16, 7), (64, 64)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_chunked_block_sizes(bq, bk, causal):
    q, k, v = _inputs(n_q=29, n_k=41)
    chunked = variants.get("chunked")
    lengths = torch.tensor([41, 17])
    with torch.no_grad():
        out = chunked(q, k, v, causal=causal, key_lengths=lengths, block_q=bq, block_k=bk)
    r = correctness.gate(out, q, k, v, causal=causal, key_lengths=lengths)
    assert r.passed, r.describe()


def test_chunked_backward_matches_reference_with_small_blocks():
    q, k, v = _inputs(b=1, h=2, n_q=33, n_k=33, d_k=8, d_v=8)
    chunked = variants.get("chunked").fn

    def small_blocks(q, k, v, **kw):
        return chunked(q, k, v, block_q=8, block_k=5, **kw)

    for causal in (False, True):
        err = correctness.grad_errors(small_blocks, q, k, v, causal=causal, key_lengths=torch.tensor([20]))
        assert err < 1e-5


def test_chunked_causal_skips_blocks_above_the_diagonal(monkeypatch):
    calls = []
    real_bmm = torch.bmm

    def counting_bmm(*a, **kw):
        calls.append(a[0].shape)
        return real_bmm(*a, **kw)

    q, k, v = _inputs(b=1, h=1, n_q=64, n_k=64, d_k=8, d_v=8)
    monkeypatch.setattr(torch, "bmm", counting_bmm)
    with torch.no_grad():
        variants.get("chunked").fn(q, k, v, causal=False, block_q=16, block_k=16)
        full = len(calls)
        calls.clear()
        variants.get("chunked").fn(q, k, v, causal=True, block_q=16, block_k=16)
    # 4 query blocks x 4 key blocks, one Q K^T per block; causal keeps the 10 blocks on or below the diagonal
    assert full == 16
    assert len(calls) == 10


def test_naive_returns_weights_that_respect_the_masks():
    q, k, v = _inputs(b=1, h=1, n_q=6, n_k=6, d_k=4, d_v=4)
    out, w = variants.get("naive").fn(
        q, k, v, causal=True, key_lengths=torch.tensor([4]), return_weights=True
    )
    assert w.shape == (1, 1, 6, 6)
    assert torch.all(w[..., 4:] == 0)  # padded keys
    assert torch.all(w[0, 0].triu(1) == 0)  # future keys
    assert torch.allclose(w.sum(-1), torch.ones(1, 1, 6))


def test_dropout_changes_output_only_when_asked():
    q, k, v = _inputs(b=1, h=2, n_q=16, n_k=16, d_k=8, d_v=8)
    naive = variants.get("naive")
    torch.manual_seed(0)
    a = naive(q, k, v, dropout_p=0.0)
    b = naive(q, k, v, dropout_p=0.5)
    assert not torch.allclose(a, b)
    assert torch.allclose(a, naive(q, k, v))
    with pytest.raises(ValueError, match=r"dropout_p must lie in \[0, 1\), got 1.0"):
        variants.get("chunked")(q, k, v, dropout_p=1.0)


def _chunked_masks(seed, q, k, p, bq, bk):
    """The full (B, H, N_q, N_k) Z = M / (1 - p) chunked draws with this seed, assembled tile by tile from
    its own _Dropout (unfolding the grouped-query rows: head = k/v head * G + group member)."""
    from attnbench.variants.chunked import _Dropout

    b, h, n_q, _ = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    group, bq, bk = h // h_kv, min(bq, n_q), min(bk, n_k)
    drop = _Dropout(p, seed, b * h_kv, bq, bk, group, n_k, torch.float64, "cpu")
    z = torch.empty(b * h_kv, group, n_q, n_k, dtype=torch.float64)
    for i0 in range(0, n_q, bq):
        i1 = min(i0 + bq, n_q)
        for j0 in range(0, n_k, bk):
            j1 = min(j0 + bk, n_k)
            tile = drop.block(i0, i1, j0, j1).reshape(b * h_kv, i1 - i0, group, j1 - j0)
            z[:, :, i0:i1, j0:j1] = tile.transpose(1, 2)
    return z.reshape(b, h, n_q, n_k)


@pytest.mark.parametrize(
    "h_kv, n_q, n_k, opts",
    [
        (3, 29, 41, dict(causal=False, key_lengths=torch.tensor([41, 17]))),
        (1, 29, 41, dict(causal=True, causal_align="lower-right", key_lengths=torch.tensor([41, 30]))),
        (1, 41, 29, dict(causal=True, causal_align="lower-right")),
        (3, 37, 37, dict(causal=True, window=9, key_lengths=torch.tensor([37, 25]))),
    ],
    ids=["pad", "gqa-lower-right", "gqa-more-queries", "window"],
)
def test_chunked_dropout_is_exact_for_its_own_masks(h_kv, n_q, n_k, opts):
    """Forward and backward with dropout equal float64 attention whose weights are multiplied by the very
    masks chunked drew (rebuilt from its seed), over many unaligned blocks: GQA, lower-right, window,
    padding. So the backward regenerates the forward's masks, block by block, whatever its loop order."""
    from attnbench.variants.chunked import _SEED_SPAN

    p, bq, bk = 0.3, 8, 5
    q, k, v = (t.double() for t in _inputs(b=2, h=3, n_q=n_q, n_k=n_k, d_k=8, d_v=8))
    q, k, v = q.requires_grad_(), k[:, :h_kv].clone().requires_grad_(), v[:, :h_kv].clone().requires_grad_()
    torch.manual_seed(7)
    out = variants.get("chunked").fn(q, k, v, dropout_p=p, block_q=bq, block_k=bk, **opts)
    torch.manual_seed(7)
    z = _chunked_masks(int(torch.randint(0, _SEED_SPAN, ()).item()), q, k, p, bq, bk)
    assert 0.2 < float((z == 0).double().mean()) < 0.4
    group = q.shape[1] // h_kv
    kr, vr = (t.repeat_interleave(group, dim=1) for t in (k, v))
    vis = attention_mask(n_q, n_k, device="cpu", **{"key_lengths": None, **opts})
    s = q @ kr.transpose(-2, -1) * 8**-0.5
    s = s if vis is None else s.masked_fill(~vis, -math.inf)
    w = torch.softmax(s, -1).nan_to_num(0.0)  # rows that see no key: 0
    ref = (w * z) @ vr
    assert torch.allclose(out, ref, atol=1e-12), float((out - ref).abs().max())
    d_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), d_out)
    want = torch.autograd.grad(ref, (q, k, v), d_out)
    for name, a, b in zip("qkv", got, want, strict=True):
        assert torch.allclose(a, b, atol=1e-10), (name, float((a - b).abs().max()))


def test_chunked_dropout_repeats_with_the_seed_and_not_without():
    q, k, v = _inputs(b=1, h=2, n_q=40, n_k=40, d_k=8, d_v=8)
    chunked = variants.get("chunked").fn
    torch.manual_seed(3)
    a = chunked(q, k, v, dropout_p=0.2, block_q=16, block_k=16)
    torch.manual_seed(3)
    assert torch.equal(a, chunked(q, k, v, dropout_p=0.2, block_q=16, block_k=16))
    assert not torch.equal(a, chunked(q, k, v, dropout_p=0.2, block_q=16, block_k=16))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_numerics_probe_shows_why_the_max_is_subtracted(dtype):
    from attnbench.harness.measure.numerics import probe

    recs = probe(["stable_softmax", "unstable_softmax", "chunked"], ["cpu"], [dtype])
    by = {(r["variant"], r["q_scale"]): r for r in recs}
    for scale in (1.0, 10.0, 100.0):
        assert math.isfinite(by[("stable_softmax", scale)]["rel_err"])
        assert math.isfinite(by[("chunked", scale)]["rel_err"])
    assert by[("unstable_softmax", 1.0)]["status"] == "ok"
    assert by[("unstable_softmax", 100.0)]["finite"] is False  # exp overflows: NaN out
    if dtype == "float16":
        assert by[("unstable_softmax", 10.0)]["finite"] is False  # float16 overflows past exp(11)


def test_sdpa_backend_refusal_is_unsupported_with_torch_reason():
    q, k, v = _inputs(b=1, h=1, n_q=8, n_k=8, d_k=8, d_v=16)  # the CPU flash kernel wants d_k == d_v
    with pytest.raises(UnsupportedError, match="FLASH_ATTENTION"):
        variants.get("sdpa_flash")(q, k, v)


SDPA_KERNELS = """
import json, sys, torch
from attnbench import variants

q = torch.ones(1, 2, 8, 16)
kernel = variants.get("sdpa").cap.kernel
said = [kernel(q, q, q), kernel(q, q, q, causal=True), kernel(q, q, q, key_lengths=torch.tensor([5]))]
dynamo = "torch._dynamo" in sys.modules
k = torch.ones(1, 2, 12, 16)
said.append(kernel(q, k, k, causal=True, causal_align="lower-right"))
from attnbench.variants import sdpa
from torch.nn.attention.bias import causal_lower_right

bias = sdpa._lower_right_kernel(q, k, k, causal_lower_right(8, 12), False)  # CausalBias's own dispatch
print(json.dumps({"said": said, "dynamo": dynamo, "bias": bias}))
"""


def test_sdpas_kernel_hook_imports_dynamo_only_for_a_lower_right_call():
    """The kernel hook (the row's `kernel`, asked at every cell's first call) told a lower-right CausalBias
    apart by importing torch.nn.attention.bias, which imports torch._dynamo: about 1 CPU-s in every worker
    of a run with sdpa (every bench's baseline). Now only a lower-right call, whose mask is one, imports
    it, and it still names the kernel CausalBias's own dispatch picks."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SDPA_KERNELS], capture_output=True, text=True, timeout=120)
    got = json.loads(done.stdout.splitlines()[-1]) if done.stdout else done.stderr[-2000:]
    assert got["dynamo"] is False and all(got["said"]) and got["said"][3] == got["bias"], got
