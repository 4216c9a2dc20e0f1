"""Sweep specs: parsing, validation before any work, expansion order, presets."""

from __future__ import annotations

import json

import pytest

from attnbench.harness.sweep.grammar import format_cpus, parse_cpu_list, parse_env, parse_ints, read_axis
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.sweep.sweeps import build_sweep, cell_given, presets
from attnbench.results.axes import axis


def test_parse_ints_lists_and_doubling_ranges():
    assert parse_ints("seq-len", "512,1024") == (512, 1024)
    assert parse_ints("seq-len", "256..2048") == (256, 512, 1024, 2048)
    assert parse_ints("seq-len", "1k..4k,1m") == (1024, 2048, 4096, 1 << 20)  # as plots label them
    assert parse_ints("seq-len", "64..64") == (64,)


@pytest.mark.parametrize("text", ["128..500", "100..500"])
def test_a_doubling_range_that_never_lands_on_its_end_is_refused(text):
    """The range's end is one of its values: '128..500' used to stop at 256, dropping the 500 asked for."""
    with pytest.raises(
        ValueError, match=rf"^--seq-len range '{text}' doubles from \d+ and never lands on 500 "
    ):
        read_axis(axis("seq_len"), text, "--seq-len")
    with pytest.raises(
        ValueError, match=r"^--window range '16..100' doubles .* or list the values \(16,32,64,100\)$"
    ):
        read_axis(axis("window"), "16..100", "--window")


@pytest.mark.parametrize(
    "key, value",
    [
        ("seq_len", "100,100"),
        ("seq_len", "64..256,128"),
        ("heads", [8, 8]),
        ("window", "0,0"),
        ("dtype", "fp32,float32"),
    ],
)
def test_a_value_given_twice_is_refused_on_every_axis(key, value):
    """--seq-len 100,100 was measured once without a word while --dtype float32,float32 was refused."""
    with pytest.raises(ValueError, match=f"^--{key.replace('_', '-')} lists a value twice: "):
        build_sweep({key: value})


@pytest.mark.parametrize("key", ["variants", "seq_len", "seq_k", "model"])
def test_an_empty_list_is_refused_as_empty_text_is(key):
    """variants=[] ran every default variant where variants="" is refused: an empty list is no choice."""
    for empty in ([], ""):
        with pytest.raises(ValueError, match=f"^--{key.replace('_', '-')} needs at least one value"):
            build_sweep({key: empty})


def test_dtypes_read_the_names_reports_print_and_a_typo_gets_a_suggestion():
    assert read_axis(axis("dtype"), "bf16,fp16,fp32") == ("bfloat16", "float16", "float32")
    assert read_axis(axis("dtype"), ["half", "double"]) == ("float16", "float64")
    with pytest.raises(ValueError, match="lists a value twice"):
        read_axis(axis("dtype"), "bf16,bfloat16")
    with pytest.raises(ValueError, match=r"unknown dtype 'bfloat61' \(did you mean 'bfloat16'\?\)"):
        read_axis(axis("dtype"), "bfloat61")


@pytest.mark.parametrize("given", ["float8", "fp8", "float8_e5m2", "torch.float8_e4m3fn"])
def test_a_float8_dtype_says_where_fp8_is_measured(given):
    """dtype=torch.float8_e4m3fn got "did you mean 'float64'?": FP8 is a variant's rounding of its inputs
    inside a cell of another dtype, and the message says which variants."""
    import torch

    value = torch.float8_e4m3fn if given.startswith("torch.") else given
    with pytest.raises(ValueError) as caught:
        read_axis(axis("dtype"), value, "--dtype")
    said = str(caught.value)
    assert said.startswith(f"--dtype {given.removeprefix('torch.')!r}: float8 is not a dtype of a sweep's")
    assert "fp8_emulated" in said and "did you mean" not in said, said


def test_an_axis_takes_the_python_values_a_notebook_has_at_hand():
    """range(...), a numpy array or a tensor of lengths, torch.float32, torch.device("cpu"), numpy's
    integers: each read as the values they hold; a torch.device with an index is not a device attnbench
    knows, and says so."""
    import numpy as np
    import torch

    assert read_axis(axis("seq_len"), range(64, 257, 64)) == (64, 128, 192, 256)
    assert read_axis(axis("seq_len"), np.array([64, 128])) == read_axis(
        axis("seq_len"), torch.tensor([64, 128])
    )
    assert read_axis(axis("heads"), np.int64(8)) == read_axis(axis("heads"), [np.int64(8)]) == (8,)
    assert read_axis(axis("dtype"), [torch.float32, torch.bfloat16]) == ("float32", "bfloat16")
    assert read_axis(axis("device"), torch.device("cpu")) == ("cpu",)
    with pytest.raises(ValueError, match="unknown device 'cuda:1'"):
        read_axis(axis("device"), torch.device("cuda", 1))
    settings = build_sweep({"rounds": np.int64(3), "budget_ms": np.float32(5.0)}).settings
    assert (settings.rounds, settings.budget_ms) == (3, 5.0) and type(settings.rounds) is int


@pytest.mark.parametrize("text", ["0", "-5", "abc", "1.5", "", "8..4", "16777217", "1.5k", "2g", "0k", "17m"])
def test_an_axis_reader_rejects_naming_the_option(text):
    with pytest.raises(ValueError, match="--seq-len"):
        read_axis(axis("seq_len"), text, "--seq-len")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(seq_len=(0,)), "seq_len must be positive"),
        (dict(batch=(-1,)), "batch must be positive"),
        (dict(dtypes=("float16x",)), "unknown dtype 'float16x'"),
        (dict(devices=("tpu",)), "unknown device 'tpu'"),
        (dict(passes=("bwd",)), "unknown pass 'bwd'"),
        (dict(padding=(1.0,)), "padding must be a fraction"),
        (dict(dtypes=("float32", "float32")), "lists a value twice"),
        (dict(seq_len=(True,)), "seq_len must be positive"),
    ],
)
def test_sweep_validation_names_the_bad_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SweepSpec(**kwargs)


def test_settings_validation():
    with pytest.raises(ValueError, match="budget_ms"):
        Settings(budget_ms=0)
    with pytest.raises(ValueError, match="min_samples"):
        Settings(min_samples=3)


def test_cells_interleave_variants_and_ascend_in_seq_len():
    sweep = SweepSpec(seq_len=(1024, 256), causal=(False, True))
    cells = sweep.cells(["a", "b"])
    assert len(cells) == 2 * 2 * 2
    assert [c.variant for c in cells[:4]] == ["a", "b", "a", "b"]
    assert [c.seq_len for c in cells[:4]] == [256, 256, 1024, 1024]
    assert len({c.cell_id for c in cells}) == len(cells)


def test_cell_roundtrip_and_identity():
    c = CellSpec("naive", "cpu", "float32", 2, 4, 128, 64, 32, True, 0.25, "fwdbwd")
    assert CellSpec.from_dict(c.to_dict()) == c
    assert c.to_dict()["pass"] == "fwdbwd"
    assert c.cell_id == "naive|cpu|float32|b2|h4|n128|dk64|dv32|causal|pad0.25|fwdbwd"
    assert hash(c) == hash(CellSpec.from_dict(c.to_dict()))
    assert c.key_lengths() == [112, 96]


def test_presets_load_and_validate():
    names = presets()
    assert {"quick", "cpu", "gpu"} <= set(names)
    quick = build_sweep(preset="quick")
    assert quick.devices == ("cpu",) and max(quick.seq_len) == 2560 and quick.settings.rounds == 3
    assert all(n % 512 == 0 for n in quick.seq_len if n >= 512)  # chunked's staircase in ceil(N / 512)
    assert quick.settings.time_fit_from == 512 and build_sweep(preset="cpu").settings.time_fit_from == 0
    assert max(build_sweep(preset="cpu").seq_len) == 16384
    gpu = build_sweep(preset="gpu")
    assert gpu.devices == ("cuda",) and gpu.seq_len[0] == 1024 and gpu.seq_len[-1] == 32768
    assert set(gpu.d_k) == {128} and set(gpu.passes) == {"fwd", "fwdbwd"} and set(gpu.dtypes) == {"bfloat16"}


def test_preset_descriptions_say_what_a_preset_is_not_what_a_run_of_it_once_did():
    """`list --presets` said decode's history ('364 of 960 cells took 14.5 min, all batch 1'), llm's and
    gpu's measured times: a description is present tense, and a time it gives is an estimate ('about'),
    or it points to --dry-run, which estimates it on the user's machine."""
    import re

    from attnbench.harness.sweep.sweeps import preset_description

    for name, path in presets().items():
        said = preset_description(path)
        history = re.search(r"\b(took|measured|was|were)\b|\d{4}-\d\d-\d\d| of \d+ cells", said)
        assert not history, (name, history.group(0))
        for time in re.finditer(r"(\S+ )(\S+ )\d+(\.\d+)? (s|min|h)\b|an hour", said):
            assert "about" in time.group(0) or "--dry-run" in said, (name, time.group(0))


def test_flags_override_the_preset():
    s = build_sweep({"seq_len": (128,), "budget_ms": 10.0}, preset="quick")
    assert s.seq_len == (128,) and s.settings.budget_ms == 10.0 and s.settings.warmup_ms == 20


def test_config_file(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\nseq_len = "64..128"\ncausal = "both"\npass = "both"\n[settings]\nbudget_ms = 5\n')
    s = build_sweep(config=str(f))
    assert s.seq_len == (64, 128) and s.causal == (False, True) and s.passes == ("fwd", "fwdbwd")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweep\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        build_sweep(config=str(bad))
    typo = tmp_path / "typo.toml"
    typo.write_text("[sweep]\nseqlen = [1]\n")
    with pytest.raises(ValueError, match="unknown sweep key"):
        build_sweep(config=str(typo))
    with pytest.raises(ValueError, match="unknown preset"):
        build_sweep(preset="nope")
    with pytest.raises(ValueError, match="not both"):
        build_sweep(preset="quick", config=str(f))


def test_env_table_and_env_flags(tmp_path):
    """[env] sets worker environment variables; --env adds to it or overrides one; meta.json keeps it."""
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\nseq_len = [64]\n[env]\nTHP_MEM_ALLOC_ENABLE = "1"\nOMP_WAIT_POLICY = "PASSIVE"\n')
    s = build_sweep(config=str(f))
    assert s.settings.env == (("OMP_WAIT_POLICY", "PASSIVE"), ("THP_MEM_ALLOC_ENABLE", "1"))
    s = build_sweep({"env": ["THP_MEM_ALLOC_ENABLE=0", "X=a=b"]}, config=str(f))
    assert dict(s.settings.env) == {"THP_MEM_ALLOC_ENABLE": "0", "OMP_WAIT_POLICY": "PASSIVE", "X": "a=b"}
    assert SweepSpec.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert SweepSpec.from_dict({"seq_len": [64]}).settings.env == ()  # runs written before [env] existed
    assert dict(build_sweep(preset="cpu").settings.env) == {"THP_MEM_ALLOC_ENABLE": "1"}


@pytest.mark.parametrize(
    "env,match",
    [
        ({"1BAD": "x"}, "not a valid environment variable name"),
        ({"A": True}, "must be a string or an integer"),
        ({"A": [1]}, "must be a string or an integer"),
    ],
)
def test_env_validation(env, match):
    with pytest.raises(ValueError, match=match):
        Settings(env=env)


def test_env_flag_parsing():
    assert parse_env("env", ["A=1", "B="]) == (("A", "1"), ("B", ""))
    for bad in ("A", "=1", "A-B=1"):
        with pytest.raises(ValueError, match="--env takes NAME=VALUE"):
            parse_env("--env", [bad])  # the front end's spelling: the CLI's flag


def test_cpu_affinity_text_and_its_round_trip():

    assert parse_cpu_list("cpu-affinity", "0-3,6,2") == (0, 1, 2, 3, 6)
    assert format_cpus((0, 1, 2, 3, 6)) == "0-3,6"
    sweep = build_sweep({"cpu_affinity": "1,0"})
    assert sweep.settings.cpu_affinity == (0, 1)
    assert SweepSpec.from_dict(json.loads(json.dumps(sweep.to_dict()))) == sweep  # as meta.json keeps it
    with pytest.raises(ValueError, match="CPU numbers"):
        Settings(cpu_affinity=(-1,))


def test_cell_given_read_back_as_exactly_that_cell_and_its_settings():

    cell = CellSpec("chunked", "cpu", "bfloat16", 2, 3, 96, 32, 16, True, 0.1, "fwdbwd")
    settings = Settings(warmup_ms=1.5, budget_ms=7, min_ms=0.3, threads=1, seed=9, env=(("A", "x y"),))
    texts, left = cell_given(cell, settings)
    assert left == []
    sweep = build_sweep(texts)
    assert sweep.cells([cell.variant]) == [cell] and sweep.settings == settings
    _, left = cell_given(cell, Settings(check_rows=7, memory_guard=0.5))
    assert left == ["check_rows", "memory_guard"]  # no flag says these: the caller must not pretend it does


def test_cell_given_of_a_paged_cell_keeps_its_context_length():
    """A paged cell's --lengths draws its contexts around --seq-k: cell_given left --seq-k out (as a pack's
    must be), so a repro line gave another cell and a profile's command raised KeyError."""
    sweep = build_sweep(
        {"seq_len": "1", "seq_k": "512", "lengths": "uniform", "page_size": "16", "batch": "2"}
    )
    (cell,) = sweep.cells(["paged_gather"])
    texts, _ = cell_given(cell, sweep.settings)
    assert texts["seq_k"] == "512" and build_sweep(texts).cells(["paged_gather"]) == [cell]
