"""Attention shapes of published models, by name: what `--model` and the llm and decode presets measure.

A model gives its query heads, key/value heads, head dim and sliding window *together*; the sweep's
other axes (batch, lengths, causal, dtype, pass) still come from the flags or the preset. The label is
for reading only: a cell's identity (`cell_id`) is its shape, so two models of one shape are one cell.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """One model's attention shape, as read from its published config file (`source`)."""

    name: str  # what --model takes
    label: str  # what rows and reports show
    heads: int  # query heads
    kv_heads: int  # key/value heads (grouped-query attention when < heads)
    d_k: int  # head dim = hidden size / query heads (d_v = d_k)
    window: int  # sliding window in keys; 0 = none (full causal attention)
    context: int  # the longest sequence the model was trained for (max_position_embeddings / n_positions)
    source: str  # the config file the figures were read from, and its keys

    def describe(self) -> str:
        """'Llama-3-8B: 32/8 heads, d 128' (plus ', window 4096' where it has one)."""
        window = f", window {self.window}" if self.window else ""
        return f"{self.label}: {self.heads}/{self.kv_heads} heads, d {self.d_k}{window}"


_HF = "https://huggingface.co/{}/blob/main/config.json"
_LLAMA_KEYS = "hidden_size / num_attention_heads, num_key_value_heads, max_position_embeddings"

# The published configs (Hugging Face config.json of each checkpoint), read by hand:
#   meta-llama/Meta-Llama-3-8B:  hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
#                                max_position_embeddings 8192 (no sliding window)
#   meta-llama/Meta-Llama-3-70B: hidden_size 8192, num_attention_heads 64, num_key_value_heads 8,
#                                max_position_embeddings 8192
#   mistralai/Mistral-7B-v0.1:   hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
#                                sliding_window 4096, max_position_embeddings 32768 (v0.2 and later
#                                drop the window: this is v0.1's shape)
#   openai-community/gpt2:       n_embd 768, n_head 12 (multi-head: K/V heads = heads), n_positions 1024
MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape(
            "llama3-8b",
            "Llama-3-8B",
            32,
            8,
            4096 // 32,
            0,
            8192,
            _HF.format("meta-llama/Meta-Llama-3-8B") + ": " + _LLAMA_KEYS,
        ),
        ModelShape(
            "llama3-70b",
            "Llama-3-70B",
            64,
            8,
            8192 // 64,
            0,
            8192,
            _HF.format("meta-llama/Meta-Llama-3-70B") + ": " + _LLAMA_KEYS,
        ),
        ModelShape(
            "mistral-7b",
            "Mistral-7B",
            32,
            8,
            4096 // 32,
            4096,
            32768,
            _HF.format("mistralai/Mistral-7B-v0.1") + ": " + _LLAMA_KEYS + ", sliding_window",
        ),
        ModelShape(
            "gpt2",
            "GPT-2 small",
            12,
            12,
            768 // 12,
            0,
            1024,
            _HF.format("openai-community/gpt2") + ": n_embd / n_head, n_positions",
        ),
    )  # fmt: skip
}


def model(name: str) -> ModelShape:
    """The shape named `name`; ValueError listing the known names."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


# The model rule, in one place: a model gives these four axes together, so a sweep, a sweep file's table or
# a front end's options give either models or these axes, and a layer that names models replaces the shape
# of the layer below it (harness.sweep.sweeps._layer).
MODEL_AXES = ("heads", "kv_heads", "d_k", "window")


def refuse_shape_beside_models(shape: list[str], below: str = "") -> None:
    """ValueError when `shape` (the MODEL_AXES given beside models) is not empty, naming the first as its
    flag ('--heads'; a front end respells it); `below`: the models come from a lower layer (a preset),
    which names them."""
    if not shape:
        return
    rule = "a model gives heads, kv_heads, d_k and window together"
    flag = "--" + shape[0].replace("_", "-")
    if below:
        raise ValueError(
            f"{flag} conflicts with the models of {below}: {rule}; choose models with --model, or drop {flag}"
        )
    raise ValueError(f"{flag} conflicts with --model: {rule}; give one or the other")
