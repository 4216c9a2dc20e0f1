"""--timing auto|events|graph on CPU: the setting through text, TOML, meta.json and the CLI; the auto rule,
the calls per replay and the capture fallback's reason (pure functions); CPU rows record perf_counter; runs
written before the columns existed still load. The CUDA paths themselves are in tests/test_cuda.py."""

from __future__ import annotations

import json

import pytest

from attnbench.cli import BadInput, build_parser, sweep_from_args
from attnbench.harness.spec import CellSpec, Settings, SweepSpec, build_sweep, cell_texts, sweep_from_text


def test_timing_defaults_to_auto_and_takes_its_three_words():
    assert Settings().timing == "auto" and build_sweep("quick").settings.timing == "auto"
    for word in ("auto", "events", "graph"):
        assert sweep_from_text({"device": "cuda", "timing": word}).settings.timing == word
    with pytest.raises(ValueError, match=r"^timing must be one of auto, events, graph, got 'fast'$"):
        Settings(timing="fast")
    with pytest.raises(ValueError, match=r"^timing must be one of auto, events, graph, got 'Graph'$"):
        sweep_from_text({"device": "cuda", "timing": "Graph"})


def test_events_or_graph_on_a_cpu_only_sweep_is_refused_with_one_line():
    for word in ("events", "graph"):
        with pytest.raises(ValueError) as exc:
            sweep_from_text({"device": "cpu", "timing": word})
        text = str(exc.value)
        assert "\n" not in text and text.startswith(f"timing '{word}' chooses how CUDA cells are timed")
    # a sweep with a cuda device takes it (its CPU cells still use perf_counter); auto is fine anywhere
    assert sweep_from_text({"device": "cpu,cuda", "timing": "graph"}).settings.timing == "graph"
    assert sweep_from_text({"device": "cpu", "timing": "auto"}).settings.timing == "auto"


def test_the_cli_flag_reaches_the_settings_and_names_a_bad_word():
    parse = build_parser().parse_args
    sweep = sweep_from_args(parse(["run", "--device", "cuda", "--timing", "events"]))
    assert sweep.settings.timing == "events"
    with pytest.raises(BadInput, match="timing must be one of auto, events, graph, got 'fast'"):
        sweep_from_args(parse(["run", "--device", "cuda", "--timing", "fast"]))


def test_toml_settings_table_and_meta_round_trip(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\ndevices = ["cuda"]\nseq_len = [256]\n[settings]\ntiming = "graph"\n')
    sweep = build_sweep(config=str(f))
    assert sweep.settings.timing == "graph"
    kept = json.loads(json.dumps(sweep.to_dict()))  # as meta.json keeps the sweep
    assert kept["settings"]["timing"] == "graph" and SweepSpec.from_dict(kept) == sweep
    del kept["settings"]["timing"]  # a run written before the setting existed: auto (what it amounts to)
    assert SweepSpec.from_dict(kept).settings.timing == "auto"
    f.write_text('[sweep]\nseq_len = [256]\n[settings]\ntiming = "graph"\n')  # devices: cpu
    with pytest.raises(ValueError, match="timing 'graph' chooses how CUDA cells are timed"):
        build_sweep(config=str(f))


def test_cell_texts_carry_timing_for_cuda_cells_and_auto_for_cpu_ones():
    settings = Settings(timing="graph")
    gpu = CellSpec("sdpa", "cuda", "bfloat16", 1, 8, 256, 64, 64, False, 0.0, "fwd")
    texts, left = cell_texts(gpu, settings)
    assert texts["timing"] == "graph" and left == []
    assert sweep_from_text(texts).settings == settings
    cpu = CellSpec("sdpa", "cpu", "float32", 1, 8, 256, 64, 64, False, 0.0, "fwd")
    texts, _ = cell_texts(cpu, settings)  # a cpu,cuda run's CPU cell: its repro line must still parse
    assert texts["timing"] == "auto" and sweep_from_text(texts).cells(["sdpa"]) == [cpu]
