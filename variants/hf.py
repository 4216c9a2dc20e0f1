"""transformers' attention functions as variants: hf_eager, hf_sdpa, hf_flex and its FlashAttention entries.

A model built with `attn_implementation="sdpa"` (or "eager", "flex_attention", ...) calls one function of
transformers' attention registry (`transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS`; eager is each model's
own `eager_attention_forward`, here Llama's, the one most models copy) as

    attn_output, attn_weights = fn(module, query, key, value, attention_mask, scaling=..., dropout=..., ...)

with (B, H, N, d) query and (B, H_kv, N, d) key/value, and returns (B, N_q, H, d_v). This module is the glue a
user would otherwise write: a stand-in for the attention layer with the attributes those functions read
(`is_causal`, `training`, `num_key_value_groups`, `config`, `layer_idx`, ...), the mask each implementation
is handed in a model (eager: an additive float mask; sdpa: a boolean mask, or none and `is_causal` for plain
causal attention; flex: a BlockMask; FlashAttention: none, causal from the layer), made once per cell by a
setup hook (setup_ms) as a model makes it once per forward pass, and the output transposed back to
(B, H, N_q, d_v), a view.

transformers is imported in the worker on the first call, never at registration (it takes seconds);
without it (`pip install 'attnbench[transformers]'`) the variants are listed as unavailable, saying so.
Registry entries this module does not know ("paged|eager" needs transformers' paged KV cache, not
(q, k, v) alone) are not variants; a function a user adds with `AttentionInterface.register(key, fn)`
becomes one with `hf.register_interface(key)` in a variant file.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from . import flex
from .adapt import make_mask
from .problem import Problem
from .registry import register

# the mask a model hands each implementation (transformers.masking_utils): "additive" (eager's float mask),
# "sdpa" (a boolean mask, or none and is_causal=True), "block" (flex's BlockMask), "none" (FlashAttention:
# causal from the layer); a function registered by a user gets eager's unless told otherwise
MASK_KINDS = {"eager": "additive", "sdpa": "sdpa", "flex_attention": "block"}
MASK_KINDS.update({f"flash_attention_{n}": "none" for n in (2, 3, 4)})
# the package each FlashAttention entry calls (transformers' own check is is_flash_attn_*_available)
FLASH_PACKAGES = {
    "flash_attention_2": "flash_attn",
    "flash_attention_3": "flash_attn_interface",
    "flash_attention_4": "flash_attn.cute",
}


def installed() -> bool:
    try:
        return importlib.util.find_spec("transformers") is not None
    except (ImportError, ValueError):  # a broken install, or one blocked in sys.modules
        return False


def attention_function(key: str) -> Callable[..., Any]:
    """transformers' function for attn_implementation `key` (imports transformers: seconds, once)."""
    if key == "eager":
        from transformers.models.llama.modeling_llama import eager_attention_forward

        return eager_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if key not in ALL_ATTENTION_FUNCTIONS:
        raise KeyError(
            f"transformers has no attention implementation {key!r}; it has {list(ALL_ATTENTION_FUNCTIONS)}"
        )
    return ALL_ATTENTION_FUNCTIONS[key]


def layer(key: str, q, k, *, causal: bool, dropout_p: float, scale: float) -> SimpleNamespace:
    """A stand-in for a model's attention layer: what transformers' functions read of `module`."""
    heads, kv_heads, d = q.shape[1], k.shape[1], q.shape[3]
    config = SimpleNamespace(
        _attn_implementation=key, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=d,
        attention_dropout=dropout_p, sliding_window=None,
    )  # fmt: skip
    return SimpleNamespace(
        config=config, is_causal=causal, training=dropout_p > 0, num_key_value_groups=heads // kv_heads,
        head_dim=d, scaling=scale, attention_dropout=dropout_p, layer_idx=0, sliding_window=None,
    )  # fmt: skip


def _block_mask(q, k, *, causal, key_lengths, causal_align, window):
    """flex's BlockMask for who sees whom (masks.py's rules), or None when nothing is masked."""
    if not causal and key_lengths is None:
        return None
    from torch.nn.attention.flex_attention import create_block_mask

    # flex.py's mask_mods (masks.py's rules), written as torch's CPU code generator takes them
    mask_mod = flex._structure_mask(q.shape[2], k.shape[2], causal, causal_align, window)
    if key_lengths is not None:
        mask_mod = flex._padded(mask_mod, key_lengths.to(q.device))
    batch = None if key_lengths is None else q.shape[0]
    return create_block_mask(mask_mod, batch, None, q.shape[2], k.shape[2], device=str(q.device))


def _mask(kind: str, q, k, *, causal, key_lengths, causal_align, window):
    """(attention_mask, is_causal) as a model hands them to an implementation taking masks of `kind`."""
    if kind == "additive":
        opts = dict(causal=causal, key_lengths=key_lengths, causal_align=causal_align, window=window)
        return make_mask(q, k, kind="additive", **opts), causal
    if kind == "sdpa":
        # transformers drops is_causal for one query (a decode step sees every key): top-left needs a mask
        plain_causal = causal and causal_align == "top-left" and not window and key_lengths is None
        plain_causal = plain_causal and q.shape[2] > 1
        if plain_causal or (not causal and key_lengths is None):
            return None, causal  # SDPA's is_causal: the fast path transformers takes with no mask
        opts = dict(causal=causal, key_lengths=key_lengths, causal_align=causal_align, window=window)
        return make_mask(q, k, kind="bool", **opts), False
    if kind == "block":
        opts = dict(causal=causal, key_lengths=key_lengths, causal_align=causal_align, window=window)
        return _block_mask(q, k, **opts), causal
    return None, causal  # FlashAttention: causal from the layer (lower-right), no padding declared


def _setup(key: str, kind: str):
    def setup(q, k, v, *, causal=False, key_lengths=None, causal_align="top-left", window=0, **_):
        """transformers' function, the layer and the mask for inputs of this shape; a call with other inputs
        (shape, options or key_lengths tensor) makes its own."""
        fn = attention_function(key)
        opts = dict(causal=causal, key_lengths=key_lengths, causal_align=causal_align, window=window)
        mask, is_causal = _mask(kind, q, k, **opts)
        made_for = _made_for(q, k, causal, key_lengths, causal_align, window)

        def bound(
            q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, causal_align="top-left",
            window=0,
        ):  # fmt: skip
            opts = dict(causal=causal, key_lengths=key_lengths, causal_align=causal_align, window=window)
            if key_lengths is made_for[0] and _made_for(q, k, **opts) == made_for:
                this_mask, this_causal = mask, is_causal
            else:  # not the inputs setup made the mask for (the harness's fresh-input check makes new ones)
                this_mask, this_causal = _mask(kind, q, k, **opts)
            scaling = q.shape[-1] ** -0.5 if scale is None else scale
            module = layer(key, q, k, causal=this_causal, dropout_p=dropout_p, scale=scaling)
            extra = {"dropout": dropout_p} if dropout_p else {}
            if kind == "sdpa":
                extra["is_causal"] = this_causal
            out, _weights = fn(module, q, k, v, this_mask, scaling=scaling, **extra)
            return out.transpose(1, 2)  # (B, N_q, H, d_v) -> (B, H, N_q, d_v)

        return bound

    return setup


def _made_for(q, k, causal, key_lengths, causal_align, window) -> tuple:
    """What a mask depends on, without reading key_lengths' values (a device->host sync): the very tensor,
    unwritten since."""
    lengths = None if key_lengths is None else getattr(key_lengths, "_version", None)
    return (key_lengths, q.shape[0], q.shape[2], k.shape[2], q.device, causal, causal_align, window, lengths)


def _available(key: str) -> Callable[[str], str | None]:
    def available(device: str) -> str | None:
        if not installed():
            return "transformers is not installed (pip install 'attnbench[transformers]')"
        package = FLASH_PACKAGES.get(key)
        if package is not None:
            try:
                found = importlib.util.find_spec(package) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                return f"transformers' {key} needs the {package} package, which is not installed"
        if key == "flex_attention":
            return flex._available(device)
        return None

    return available


def _flash_supports(p: Problem) -> str | None:
    if p.causal and p.seq_q != p.seq_k and not p.lower_right:
        return (
            "FlashAttention's causal mask is lower-right where N_q != N_k (attnbench's default is top-left)"
        )
    return None


def register_interface(key: str, name: str | None = None, mask: str | None = None, **capability: Any) -> None:
    """Register transformers' attention function `key` (a built-in one, or one added with
    AttentionInterface.register) as variant `name` (hf_<key> by default), handed masks of kind `mask`
    (MASK_KINDS' values; eager's additive mask by default)."""
    name = name or "hf_" + "".join(c if c.isalnum() else "_" for c in key)
    kind = mask or MASK_KINDS.get(key, "additive")
    if kind not in set(MASK_KINDS.values()) | {"additive"}:
        raise ValueError(f"variant {name}: mask must be one of additive, sdpa, block, none; not {kind!r}")
    setup = _setup(key, kind)

    def call(q, k, v, *, causal=False, key_lengths=None, dropout_p=0.0, scale=None, **opts):
        extra = {o: opts[o] for o in ("causal_align", "window") if o in opts}
        bound = setup(q, k, v, causal=causal, key_lengths=key_lengths, **extra)
        return bound(
            q, k, v, causal=causal, key_lengths=key_lengths, dropout_p=dropout_p, scale=scale, **extra
        )

    call.__name__ = name
    defaults = dict(
        description=f"transformers' attention function {key!r} (attn_implementation={key!r})",
        default=False, gqa=True, lower_right=True, window=True, available=_available(key), setup=setup,
    )  # fmt: skip
    register(name, **{**defaults, **capability})(call)


# Registered whether or not transformers is installed, as xformers is: without it each is listed, and its
# cells recorded, as unavailable with the command that installs it.
register_interface("eager", "hf_eager", memory="quadratic")
register_interface("sdpa", "hf_sdpa", memory="linear")


def _flex_supports(p: Problem) -> str | None:
    """flex's rules, and on a CPU no key padding: transformers compiles flex_attention with automatic dynamic
    shapes, so a padded cell after a cell of another shape recompiles with symbolic sizes, which torch's CPU
    code generator fails to compile ("'cur_qSplitSize8' was not declared"): the cell's fate would depend on
    the cells before it in its worker (flex.py keeps padded masks static for the same reason)."""
    if p.device == "cpu" and p.padding:
        return "transformers' flex on CPU: a padded mask recompiled with dynamic shapes fails to compile"
    return flex._supports(p)


register_interface(
    "flex_attention", "hf_flex", memory="linear", dropout=False, dtypes=flex.DTYPES, supports=_flex_supports
)
for _key in ("flash_attention_2", "flash_attention_3", "flash_attention_4"):
    register_interface(
        _key, "hf_fa" + _key[-1], devices=("cuda",), dtypes=("float16", "bfloat16"), padding=False,
        lower_right=True, window=False, supports=_flash_supports, memory="linear",
    )  # fmt: skip
