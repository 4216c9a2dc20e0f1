"""--model and the llm/decode presets: published models' head shapes, a label that is not identity."""

from __future__ import annotations

import json

import pytest
import synthetic
from conftest import run_cli

from attnbench import results
from attnbench.harness.sweep import models
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.sweep.sweeps import build_sweep
from attnbench.harness.tools.profile import single_cell


def test_the_table_holds_the_published_shapes():
    shapes = {n: (m.heads, m.kv_heads, m.d_k, m.window) for n, m in models.MODELS.items()}
    assert shapes == {
        "llama3-8b": (32, 8, 128, 0),
        "llama3-70b": (64, 8, 128, 0),
        "mistral-7b": (32, 8, 128, 4096),
        "gpt2": (12, 12, 64, 0),
    }
    assert all("config.json" in m.source for m in models.MODELS.values())


def test_a_model_gives_its_four_axes_together_and_labels_its_cells():
    sweep = build_sweep({"model": "gpt2,mistral-7b", "seq_len": "64,128", "causal": "yes"})
    cells = sweep.cells(["naive", "sdpa"])
    assert len(cells) == 2 * 2 * 2  # models x lengths x variants: not a product of heads, d_k, window
    got = {(c.model, c.heads, c.kv_heads, c.d_k, c.window) for c in cells}
    assert got == {("GPT-2 small", 12, 12, 64, 0), ("Mistral-7B", 32, 8, 128, 4096)}


@pytest.mark.parametrize(
    "texts, message",
    [
        ({"model": "gpt2", "heads": "12"}, "--heads conflicts with --model"),
        ({"model": "gpt2", "window": "0"}, "--window conflicts with --model"),
        ({"model": "mistral-7b"}, "model mistral-7b has a sliding window of 4096 keys, which needs causal"),
        ({"model": "mistral-7b", "causal": "both"}, "needs causal masking"),
        ({"model": "llama-9"}, "unknown model 'llama-9'; known: llama3-8b, llama3-70b, mistral-7b, gpt2"),
        ({"model": "gpt2,gpt2"}, "model lists a value twice"),
    ],
)
def test_conflicts_and_bad_names_are_refused(texts, message):
    with pytest.raises(ValueError, match=message):
        build_sweep(texts)


def test_a_flag_over_a_presets_models_is_refused_and_models_replace_a_presets_heads():
    with pytest.raises(ValueError, match="--d-k conflicts with the models of the preset llm"):
        build_sweep({"d_k": "64"}, preset="llm")
    over = build_sweep({"model": "gpt2"}, preset="quick")  # quick's heads 8 and d_k 64 give way
    assert {(c.heads, c.d_k, c.model) for c in over.cells(["sdpa"])} == {(12, 64, "GPT-2 small")}
    chosen = build_sweep({"model": "llama3-8b"}, preset="llm")  # --model picks models of the preset
    assert {c.model for c in chosen.cells(["sdpa"])} == {"Llama-3-8B"}


def test_a_sweep_spec_refuses_explicit_axes_beside_models():
    with pytest.raises(ValueError, match=r"^--heads conflicts with --model: a model gives heads, kv_heads"):
        SweepSpec(model=("gpt2",), heads=(16,))


def test_toml_model_with_heads_in_one_table_is_refused(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text('[sweep]\nmodel = "gpt2"\nheads = [4]\n')
    with pytest.raises(ValueError, match=r"\[sweep\] heads conflicts with \[sweep\] model"):
        build_sweep(config=str(cfg))


def test_the_label_is_not_identity(monkeypatch):
    twin = models.ModelShape("twin", "Twin-8B", 32, 8, 128, 0, 8192, "test")
    monkeypatch.setitem(models.MODELS, "twin", twin)
    cells = build_sweep({"model": "llama3-8b,twin", "seq_len": "64"}).cells(["sdpa"])
    assert len(cells) == 1 and cells[0].model == "Llama-3-8B, Twin-8B"  # one shape, one measurement
    (plain,) = build_sweep({"heads": "32", "kv_heads": "8", "d_k": "128", "seq_len": "64"}).cells(["sdpa"])
    assert plain.cell_id == cells[0].cell_id and "Llama" not in plain.cell_id
    assert plain == cells[0] and hash(plain) == hash(cells[0])  # a rebuilt cell without it is the same
    row = cells[0].to_dict()
    assert row["model"] == "Llama-3-8B, Twin-8B"
    assert CellSpec.from_dict(row).model == "Llama-3-8B, Twin-8B"
    del row["model"]  # a row written before the field existed
    assert CellSpec.from_dict(row) == cells[0]


def test_profile_takes_one_model():
    cell = single_cell("sdpa", {"model": "llama3-70b", "seq_len": "64"})
    assert (cell.heads, cell.kv_heads, cell.d_k, cell.model) == (64, 8, 128, "Llama-3-70B")
    with pytest.raises(ValueError, match="--model takes one value"):
        single_cell("sdpa", {"model": "gpt2,llama3-8b"})


def test_the_presets_expand_and_the_cuda_table_applies_only_to_cuda():
    llm = build_sweep(preset="llm")
    assert llm.dtypes == ("float32",) and llm.seq_len == (512, 1024, 2048, 4096, 8192)
    assert len(llm.cells(["sdpa"])) == 4 * 5
    cuda = build_sweep({"devices": ("cuda",)}, preset="llm")
    assert cuda.dtypes == ("bfloat16",) and cuda.seq_len[0] == 1024 and cuda.seq_len[-1] == 131072
    both = build_sweep({"devices": ("cpu", "cuda")}, preset="llm")  # not exactly cuda: [sweep] alone
    assert both.seq_len == llm.seq_len
    decode = build_sweep(preset="decode")
    cells = decode.cells(["sdpa"])
    assert len(cells) == 4 * 2 * 2 * 6  # models x batch x N_q x N_k 1024..32768
    assert {c.causal_align for c in cells} == {"lower-right"} and max(c.seq_k for c in cells) == 32768
    assert max(build_sweep({"devices": ("cuda",)}, preset="decode").seq_k) == 131072


@pytest.mark.parametrize(
    "table, message",
    [
        ("[sweep.cuda]\nseq_lens = [1]\n", r"unknown sweep key\(s\) \['seq_lens'\] in \[sweep.cuda\]"),
        ('[sweep.cuda]\ndevices = ["cuda"]\n', r"\[sweep.cuda\] cannot set devices"),
        ("[sweep.cuda]\nheads = [4]\n", r"\[sweep.cuda\] heads conflicts with the models"),
    ],
)
def test_a_bad_cuda_table_is_refused(tmp_path, table, message):
    cfg = tmp_path / "s.toml"
    cfg.write_text('[sweep]\nmodel = ["gpt2"]\n' + table)
    with pytest.raises(ValueError, match=message):
        build_sweep({"devices": ("cuda",)}, config=str(cfg))


def test_older_runs_load_with_an_empty_model(tmp_path):
    rows = synthetic.power_law_rows({"naive": (2, 2)}, [256, 512])
    df = results.load(synthetic.write_run(tmp_path / "old", rows))
    assert list(df["model"]) == ["", ""]


def test_a_report_has_a_section_per_model_and_none_without(tmp_path):
    from attnbench.reports.render import prepare, render

    laws = {"naive": (2.0, 2.0), "sdpa": (2.0, 1.0)}
    rows = [
        *synthetic.power_law_rows(laws, [256, 512, 1024], heads=32, model="Llama-3-8B", kv_heads=8),
        *synthetic.power_law_rows(laws, [256, 512, 1024], heads=12, model="GPT-2 small"),
    ]
    for r in rows:  # synthetic cell ids know nothing of kv_heads: keep them apart by heads
        r["cell_id"] += f"|h{r['heads']}"
    page = render(prepare([synthetic.write_run(tmp_path / "m", rows)]), tmp_path / "rm").readme.read_text()
    assert "## cpu · GPT-2 small · float32 · forward" in page
    assert "## cpu · Llama-3-8B · float32 · forward" in page
    plain = synthetic.power_law_rows(laws, [256, 512, 1024])
    report = render(prepare([synthetic.write_run(tmp_path / "p", plain)]), tmp_path / "rp")
    assert "## cpu · float32 · forward (" in report.readme.read_text()  # as before: the model axis is quiet
    assert "model" not in (report.out_dir / "best.csv").read_text().splitlines()[0].split(",")
    assert not [f for f in report.figures if "--" in f.png]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "gpt2", "--heads", "4"], "attnbench: error: --heads conflicts with --model"),
        (["--model", "gpt2", "--kv-heads", "4"], "attnbench: error: --kv-heads conflicts with --model"),
        (["--model", "nope"], "attnbench: error: unknown model 'nope'; known: llama3-8b"),
        (["--model", "mistral-7b", "--causal", "no"], "attnbench: error: --model mistral-7b has a sliding"),
    ],
)
def test_cli_refuses_in_one_line_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "run"
    proc = run_cli("run", *args, "--out", str(out))
    assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


def test_list_presets_shows_llm_and_decode():
    out = run_cli("list", "--presets", check=True).stdout
    assert any(line.startswith("llm ") and "Llama-3-8B" in line for line in out.splitlines())
    assert any(line.startswith("decode ") and "lower-right" in line for line in out.splitlines())


def test_a_real_model_sweep_labels_rows_reports_by_model_and_resumes(tmp_path):
    out = tmp_path / "run"
    budget = ["--warmup-ms", "1", "--budget-ms", "5", "--min-ms", "1"]
    sweep = ["--model", "gpt2,llama3-8b", "--seq-len", "16,32", "--variants", "sdpa"]
    run_cli("run", *sweep, *budget, "--out", str(out), "-q", check=True)
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert {(r["heads"], r["model"], r["status"]) for r in rows} == {
        (12, "GPT-2 small", "ok"),
        (32, "Llama-3-8B", "ok"),
    }
    assert all("GPT" not in r["cell_id"] and "Llama" not in r["cell_id"] for r in rows)
    again = run_cli("run", "--resume", "--out", str(out), "-q", check=True)
    assert "is complete (4 cells)" in again.stderr  # the label does not make a cell new: nothing to resume
    report = tmp_path / "report"
    run_cli("report", str(out), "--out", str(report), check=True)
    page = (report / "README.md").read_text()
    assert "## cpu · GPT-2 small · float32 · forward" in page and "## cpu · Llama-3-8B" in page
