"""The xformers variant's own code on CPU, against a stand-in `xformers` package that records what it is
handed, imported instead of whatever xformers this machine has (no CUDA here; tests/harness/test_cuda.py runs
the real one through measure_cell).

What is checked: the attention bias is made in the setup hook (key_lengths read there, once), a timed call
makes none and hands the kernel views of the harness's bnhd inputs (the padded path's packing copies
nothing), and the bound callable never answers with a bias made for other key lengths.
"""

from __future__ import annotations

import importlib
import platform
import textwrap

import pytest
import torch
from fakes import stand_in_package

from attnbench import variants
from attnbench.harness.measure.cell import handed

B, H, N, D = 2, 3, 16, 8

FAKE_OPS = """
from types import SimpleNamespace

import torch

MADE = []  # every bias made: (kind, its arguments)
CALLS = []  # every kernel call: (q's data_ptr, q's shape, the bias)


class LowerTriangularMask:
    def __init__(self):
        MADE.append(("causal", {}))


class BlockDiagonalPaddedKeysMask:
    @classmethod
    def from_seqlens(cls, q_seqlen, kv_padding, kv_seqlen, device=None):
        MADE.append(("padded", dict(q_seqlen=q_seqlen, kv_padding=kv_padding, kv_seqlen=kv_seqlen)))
        return cls()


fmha = SimpleNamespace(
    attn_bias=SimpleNamespace(
        LowerTriangularMask=LowerTriangularMask, BlockDiagonalPaddedKeysMask=BlockDiagonalPaddedKeysMask
    )
)


class LowerTriangularFromBottomRightMask:
    def __init__(self):
        MADE.append(("lower-right", {}))


class LowerTriangularFromBottomRightLocalAttentionMask:
    def __init__(self, window):
        MADE.append(("local", {"window": window}))
        self.window = window


fmha.attn_bias.LowerTriangularFromBottomRightMask = LowerTriangularFromBottomRightMask
LOCAL = LowerTriangularFromBottomRightLocalAttentionMask
fmha.attn_bias.LowerTriangularFromBottomRightLocalAttentionMask = LOCAL


class BlockDiagonalMask:
    causal = False

    def __init__(self, lengths):
        self.lengths = lengths

    @classmethod
    def from_seqlens(cls, q_seqlen, device=None):
        MADE.append(("block-diagonal", dict(q_seqlen=q_seqlen, causal=cls.causal)))
        return cls(q_seqlen)


class BlockDiagonalCausalMask(BlockDiagonalMask):
    causal = True


fmha.attn_bias.BlockDiagonalMask = BlockDiagonalMask
fmha.attn_bias.BlockDiagonalCausalMask = BlockDiagonalCausalMask


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None):
    # attention as xformers computes it, unmasked or under the biases above (BMHK, or BMGHK with k and v
    # expanded over each group's heads), so that the variant's views and reshapes are checked by value
    CALLS.append((query.data_ptr(), tuple(query.shape), attn_bias))
    q, k, v = (t.flatten(2, 3) if t.ndim == 5 else t for t in (query, key, value))
    s = torch.einsum("bnhd,bmhd->bhnm", q, k) * (scale or q.shape[-1] ** -0.5)
    n_q, n_k = s.shape[-2:]
    i = torch.arange(n_q)[:, None] + (n_k - n_q)  # bottom-right: the last query sees the last key
    j = torch.arange(n_k)[None, :]
    if isinstance(attn_bias, LowerTriangularMask):
        s = s.masked_fill(j > torch.arange(n_q)[:, None], float("-inf"))
    elif isinstance(attn_bias, LowerTriangularFromBottomRightLocalAttentionMask):
        s = s.masked_fill((j > i) | (j <= i - attn_bias.window), float("-inf"))
    elif isinstance(attn_bias, LowerTriangularFromBottomRightMask):
        s = s.masked_fill(j > i, float("-inf"))
    elif isinstance(attn_bias, BlockDiagonalMask):
        seq = torch.repeat_interleave(torch.arange(len(attn_bias.lengths)), torch.tensor(attn_bias.lengths))
        hide = seq[:, None] != seq[None, :]
        if attn_bias.causal:
            hide = hide | (j > torch.arange(n_q)[:, None])
        s = s.masked_fill(hide, float("-inf"))
    out = torch.einsum("bhnm,bmhd->bnhd", s.softmax(-1), v)
    return out.reshape(*query.shape[:-1], value.shape[-1])
"""


@pytest.fixture
def fake_xformers(tmp_path, monkeypatch):
    """A stand-in `xformers` package, imported instead of whatever xformers this machine has (installed, or
    imported already by an earlier test in this process): its `xformers.ops` module, for what it recorded."""
    (tmp_path / "xformers" / "ops").mkdir(parents=True)
    (tmp_path / "xformers" / "__init__.py").write_text("")
    (tmp_path / "xformers" / "ops" / "__init__.py").write_text(textwrap.dedent(FAKE_OPS))
    with stand_in_package(monkeypatch, tmp_path, "xformers"):
        import xformers.ops

        yield xformers.ops


def inputs(layout: str = "bnhd", lengths=(12, N)):
    """q, k, v (B, H, N, D) in `layout`, and key lengths, as the harness hands them
    (harness.measure.cell.handed)."""
    g = torch.Generator().manual_seed(0)
    qkv = [torch.randn(B, H, N, D, generator=g) for _ in range(3)]
    return handed((*qkv, torch.tensor(lengths)), layout)


def test_the_padded_bias_is_made_once_in_setup_and_timed_calls_copy_nothing(fake_xformers):
    xf = variants.get("xformers")
    assert xf.cap.layout == "bnhd" and xf.cap.setup is not None
    q, k, v, kl = inputs()
    bound = xf.bind(q, k, v, causal=False, key_lengths=kl)
    assert fake_xformers.MADE == [("padded", dict(q_seqlen=[N, N], kv_padding=N, kv_seqlen=[12, N]))]
    for _ in range(3):  # as the timed calls: the same tensors, the key_lengths tensor setup saw
        out = bound(q, k, v, causal=False, key_lengths=kl)
        assert out.shape == (B, H, N, D)
    assert len(fake_xformers.MADE) == 1  # no bias, no .tolist(), in the timed calls
    packed = {(ptr, shape) for ptr, shape, _ in fake_xformers.CALLS}
    assert packed == {(q.data_ptr(), (1, B * N, H, D))}  # the batch packed as a view of q: no copy


def test_the_bound_callable_never_uses_a_bias_made_for_other_key_lengths(fake_xformers):
    q, k, v, kl = inputs()
    bound = variants.get("xformers").bind(q, k, v, causal=False, key_lengths=kl)
    fresh = kl.clone()  # the harness's fresh-input check: another tensor with the cell's lengths
    bound(q, k, v, causal=False, key_lengths=fresh)
    other = torch.tensor([5, 9])
    bound(q, k, v, causal=False, key_lengths=other)
    kl[0] = 3  # written in place after setup read it
    bound(q, k, v, causal=False, key_lengths=kl)
    made = [args["kv_seqlen"] for _, args in fake_xformers.MADE]
    assert made == [[12, N], [12, N], [5, 9], [3, N]]  # setup, then one bias per call that did not fit
    biases = [bias for _, _, bias in fake_xformers.CALLS]
    assert len(set(map(id, biases))) == 3  # fresh, other and the rewritten kl each got a bias of their own
    bound(q, k, v, causal=True, key_lengths=None)  # other options: a plan of their own, not the padded bias
    assert fake_xformers.MADE[-1] == ("causal", {})


def test_unpadded_calls_hand_the_kernel_contiguous_views_and_bhnd_inputs_still_work(fake_xformers):
    q, k, v, _ = inputs()
    for causal in (False, True):
        bound = variants.get("xformers").bind(q, k, v, causal=causal, key_lengths=None)
        bound(q, k, v, causal=causal, key_lengths=None)
        ptr, shape, _ = fake_xformers.CALLS[-1]
        assert (ptr, shape) == (q.data_ptr(), (B, N, H, D))
    qc, kc, vc, kl = inputs("bhnd")  # (B, H, N, d)-contiguous: right all the same, the packing copies
    out = variants.get("xformers").fn(qc, kc, vc, key_lengths=kl)
    assert out.shape == (B, H, N, D) and fake_xformers.CALLS[-1][0] != qc.data_ptr()


def test_causal_with_padding_is_refused_in_setup_too(fake_xformers):
    q, k, v, kl = inputs()
    with pytest.raises(variants.UnsupportedError, match="bottom-right"):
        variants.get("xformers").bind(q, k, v, causal=True, key_lengths=kl)


def test_a_refusal_names_each_operator_and_its_first_reason(fake_xformers, tmp_path):
    """xformers' 'No operator found' text (its dispatch.py layout) cut to what decides; the inputs' long
    description is left out (the row has the shape). Where its C++/CUDA operators did not load (as the
    0.0.35 wheel's on another torch or Python), that comes first: the stand-in has no `_cpp_lib`, then
    one whose load failed."""
    from attnbench.variants import xformers_mea

    text = (
        "No operator found for `memory_efficient_attention_forward` with inputs:\n"
        "     query       : shape=(1, 512, 16, 128) (torch.bfloat16)\n"
        "     attn_bias   : <class 'NoneType'>\n"
        "`fa3F@0.0.0` is not supported because:\n"
        "    xFormers wasn't build with CUDA support\n"
        "    operator wasn't built - see `python -m xformers.info` for more info\n"
        "`cutlassF-pt` is not supported because:\n"
        "    requires device with capability <= (9, 0) but your GPU has capability (9, 0) (too new)"
    )
    operators = (
        "fa3F@0.0.0: xFormers wasn't build with CUDA support; "
        "cutlassF-pt: requires device with capability <= (9, 0) but your GPU has capability (9, 0) (too new)"
    )
    reason = xformers_mea._no_operator_reason(NotImplementedError(text))
    assert reason == f"no xformers operator takes these inputs ({operators})"
    (tmp_path / "xformers" / "_cpp_lib.py").write_text(
        "from types import SimpleNamespace\n"
        "_cpp_library_load_exception = RuntimeError('built for another torch')\n"
        "_cpp_library_load_exception.build_info = SimpleNamespace(\n"
        "    torch_version='2.10.0+cu128', cuda_version='1208', python_version='3.10.19'\n"
        ")\n"
    )
    importlib.invalidate_caches()
    reason = xformers_mea._no_operator_reason(NotImplementedError(text))
    head = "'s CUDA operators did not load: built for torch 2.10.0+cu128 (CUDA 1208), Python 3.10.19; "
    assert head in reason and reason.endswith(f"; no operator takes these inputs ({operators})")
    assert f"this is torch {torch.__version__}, Python {platform.python_version()}" in reason


@pytest.mark.parametrize(
    "kv_heads, options",
    [
        (1, {"causal": False}),
        (3, {"causal": True, "causal_align": "lower-right"}),
        (1, {"causal": True, "window": 5}),
        (3, {"causal": True, "causal_align": "lower-right", "window": 4}),
    ],
)
def test_grouped_heads_and_masks_reach_xformers_in_its_own_forms(fake_xformers, kv_heads, options):
    """Grouped-query heads as BMGHK (q reshaped into groups, k and v expanded without a copy), lower-right
    causal and windows as its bottom-right biases: the answer is naive's (the stand-in computes attention
    as xformers defines those biases; the real kernels are gated on a GPU)."""
    heads, n_q, n_k = 6, 12, 16 if options.get("causal_align") else 12
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, heads, n_q, D, generator=g)
    k, v = (torch.randn(B, kv_heads, n_k, D, generator=g) for _ in range(2))
    q, k, v, _ = handed((q, k, v, None), "bnhd")
    out = variants.get("xformers").bind(q, k, v, key_lengths=None, **options)(
        q, k, v, key_lengths=None, **options
    )
    expected = variants.get("naive").fn(q, k, v, key_lengths=None, **options)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    shapes = {shape for _, shape, _ in fake_xformers.CALLS}
    if kv_heads != heads:
        assert shapes == {(B, n_q, kv_heads, heads // kv_heads, D)}  # BMGHK


def test_xformers_refuses_what_its_biases_cannot_say():
    from attnbench.variants import xformers_mea
    from attnbench.variants.problem import Problem

    refuses = xformers_mea._supports  # the capability's rule, apart from this machine's missing CUDA
    assert "bottom-right" in refuses(Problem(causal=True, window=4, seq_len=8, seq_k=16))
    assert refuses(Problem(causal=True, window=4, seq_len=8, seq_k=16, causal_align="lower-right")) is None
    assert "grouped-query" in refuses(Problem(heads=4, kv_heads=2, padding=0.25))


@pytest.mark.parametrize("kv_heads", [1, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_a_packed_batch_is_one_sequence_under_a_block_diagonal_bias_made_once(
    fake_xformers, causal, kv_heads
):
    """The pack's bias made in setup from its offsets and reused for the very tensor; the answer is
    naive's under the block-diagonal mask."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 3, 30, D, generator=g)
    k, v = (torch.randn(1, kv_heads, 30, D, generator=g) for _ in range(2))
    q, k, v, _ = handed((q, k, v, None), "bnhd")
    cu = torch.tensor([0, 4, 5, 21, 30], dtype=torch.int32)
    bound = variants.get("xformers").bind(q, k, v, key_lengths=None, causal=causal, cu_seqlens=cu)
    outs = [bound(q, k, v, key_lengths=None, causal=causal, cu_seqlens=cu) for _ in range(3)]
    expected = variants.get("naive").fn(q, k, v, causal=causal, cu_seqlens=cu)
    torch.testing.assert_close(outs[-1], expected, rtol=1e-5, atol=1e-5)
    assert fake_xformers.MADE == [("block-diagonal", {"q_seqlen": [4, 1, 16, 9], "causal": causal})]
    bound(q, k, v, key_lengths=None, causal=causal, cu_seqlens=cu.clone())  # another tensor: its own bias
    assert len(fake_xformers.MADE) == 2
