"""A function whose mask is one per key, (B, N_k) with True = attend, and whose causal masking is its own
causal= (lucidrains' memory-efficient-attention and x-transformers' Attend take theirs so): declared
mask="keys", it is handed key padding as that mask and causal= as itself, and passes every mask; the
refusal says so first; declared mask="bool" instead, bench's answer says which shape it was handed."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import attnbench
from attnbench.variants import Problem
from tests.conftest import as_a_fresh_process

QUICK = dict(heads=1, seq_len="64", dtype="float32", causal="both", padding="0,0.25")
FAST = dict(budget_ms=3, warmup_ms=1, min_ms=1, calibrate_ms=0)
HANDED: list = []  # the mask each call was handed: None, or its dtype and shape


def key_masked(q, k, v, mask=None, causal=False):
    """Attention with a key padding mask of (B, N_k), True = attend, as lucidrains' code takes it."""
    HANDED.append(None if mask is None else (mask.dtype, tuple(mask.shape)))
    if mask is not None and mask.dim() != 2:
        raise ValueError(f"mask must be (b, j), not {tuple(mask.shape)}")
    keep = None if mask is None else mask[:, None, None, :]
    if causal:
        n_q, n_k = q.shape[-2], k.shape[-2]
        tri = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril()
        keep = tri if keep is None else keep & tri
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def test_the_refusal_names_a_mask_per_key_where_it_takes_causal_of_its_own():
    said = attnbench.variant(key_masked).check(Problem(device="cpu", padding=0.25))
    assert said == (
        'key_masked does not support key padding (it takes mask=: declare mask="keys", mask_arg="mask" if '
        'its mask is one per key, (B, N_k); mask="bool" if it is (B, 1, N_q, N_k))'
    ), said
    fn = attnbench.variant(key_masked, mask="keys", mask_arg="mask")
    assert fn.check(Problem(device="cpu", padding=0.25, causal=True)) is None
    assert "does not support a sliding window" in fn.check(Problem(device="cpu", causal=True, window=8))


def test_declared_keys_it_is_handed_its_mask_per_key_and_causal_as_itself(tmp_path):
    fn = attnbench.variant(key_masked, mask="keys", mask_arg="mask")
    q, k, v = (torch.randn(2, 1, 8, 4) for _ in range(3))
    HANDED.clear()
    out = fn.fn(q, k, v, causal=True, key_lengths=torch.tensor([8, 5]))
    assert HANDED == [(torch.bool, (2, 8))]
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(out[0], ref[0], atol=1e-6)  # the first sequence is unpadded: causal alone
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(fn, out=tmp_path / "k", **QUICK, **FAST)
    lines = str(bench).splitlines()
    assert lines[1].startswith("correct in 4 of 4 cells gated against float64"), lines
    assert not bench.answer.wrong


def test_declared_bool_instead_the_answer_says_which_shape_it_was_handed(tmp_path):
    fn = attnbench.variant(key_masked, mask="bool", mask_arg="mask")
    with as_a_fresh_process(tmp_path):
        bench = attnbench.bench(fn, out=tmp_path / "b", **QUICK, **FAST)
    lines = str(bench).splitlines()
    assert lines[1].startswith("correct in 1 of 1 cell"), lines  # its unmasked cell
    assert lines[2].startswith("3 cells error (float32; causal; causal, padded keys; padded keys"), lines
    assert lines[3] == (
        'it raised only where it is handed a mask, as (B, 1, N_q, N_k) (mask="bool"): if its mask is one per '
        'key, (B, N_k), declare mask="keys" (causal masking then reaches it as causal=)'
    ), lines
    assert bench.answer.wrong
