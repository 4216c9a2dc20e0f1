"""A float32 answer that errs by a lower precision's rounding says so (harness.measure.lowered), and a known
mistake is named in it too, as in that precision's own cells (trial L: a kernel computing in bfloat16 and
casting back got a bare "rel_err 3.55e-03 (tol 1e-04)", and its fp32 padded cells lost "it ignored
key_lengths=", which its bf16 cells had)."""

import pytest
import torch
import torch.nn.functional as F

from attnbench.harness.measure import correctness

B, H, N, D = 2, 2, 64, 32
LENGTHS = torch.tensor([N, 40])


def qkv():
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, N, D, generator=g) for _ in range(3))


def computed_in(dtype, *, padded: bool = True):
    """SDPA on q, k, v rounded to dtype, its answer cast back: key padding honoured when `padded`."""

    def fn(q, k, v, *, causal=False, key_lengths=None, scale=None):
        mask = None
        if padded and key_lengths is not None:
            mask = (torch.arange(k.shape[2]) < key_lengths[:, None])[:, None, None, :]
        low = (t.to(dtype) for t in (q, k, v))
        return F.scaled_dot_product_attention(*low, attn_mask=mask, is_causal=causal).to(q.dtype)

    return fn


@pytest.mark.parametrize("dtype, name", [(torch.bfloat16, "bfloat16"), (torch.float16, "float16")])
@pytest.mark.parametrize("causal", [False, True])
def test_an_answer_computed_in_a_lower_precision_says_so(dtype, name, causal):
    result = correctness.check(computed_in(dtype), *qkv(), causal=causal)
    assert not result.passed
    assert result.hint.startswith(
        f"its error is about {name}'s rounding (the inputs and the output rounded"
    ), result.hint
    assert result.hint.endswith("does it compute in a lower precision?")


def test_a_mistake_in_a_lower_precision_is_named_in_a_float32_cell():
    """Ignored key_lengths= in bfloat16 arithmetic: its answer is the mistake's to within bfloat16's rounding,
    not float32's tolerance, which the readings were held to."""
    result = correctness.check(computed_in(torch.bfloat16, padded=False), *qkv(), key_lengths=LENGTHS)
    said = "it ignored key_lengths=: the padded keys took part, to within about bfloat16's rounding"
    assert result.hint.startswith(said), result.hint
    exact = correctness.check(computed_in(torch.float32, padded=False), *qkv(), key_lengths=LENGTHS)
    assert exact.hint == "it ignored key_lengths=: the padded keys took part"  # no precision to name


def test_an_error_of_another_size_or_kind_names_no_precision():
    """An answer 1% off errs by three times bfloat16's rounding, and a right answer passes: neither is said
    to be a lower precision's."""
    off = correctness.check(lambda q, k, v, **kw: computed_in(torch.float32)(q, k, v, **kw) * 1.01, *qkv())
    assert not off.passed and "precision" not in off.hint, off.hint
    assert correctness.check(computed_in(torch.float32), *qkv()).passed
