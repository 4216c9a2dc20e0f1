"""The local GPU pool and the dispatcher, on CPU: GPUs are faked only as CUDA_VISIBLE_DEVICES strings."""

from __future__ import annotations

import re
import threading

import pytest
from conftest import DATA, run_cli

from attnbench import variants
from attnbench.harness.run import runner
from attnbench.harness.run.executors import local
from attnbench.harness.run.executors.base import Plan
from attnbench.harness.run.executors.dispatch import Dispatcher
from attnbench.harness.run.executors.local import ONE_CPU_WORKER, Slot, parse_devices, run_pool
from attnbench.harness.run.request import RunRequest
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import SweepSpec
from attnbench.results.formulas import where_key
from attnbench.results.store import read_rows

SCALEOUT = DATA / "scaleout_variants.py"
FAST = Settings(warmup_ms=2, budget_ms=5, min_samples=5, min_ms=1, calibrate_ms=0)  # no ceilings


def _pins(text):
    return [s.env.get("CUDA_VISIBLE_DEVICES") for s in parse_devices(text, cuda_count=3)]


def test_devices_parse_into_pinned_slots():
    assert _pins("cuda:0,cuda:2") == ["0", "2"]
    assert _pins("all") == ["0", "1", "2"]
    assert [s.device for s in parse_devices("all,cpu", cuda_count=2)] == ["cuda", "cuda", "cpu"]
    with pytest.raises(ValueError, match=re.escape(ONE_CPU_WORKER)):
        parse_devices("cpu,cpu", cuda_count=0)
    with pytest.raises(ValueError, match="torch sees no CUDA device"):
        parse_devices("all", cuda_count=0)
    with pytest.raises(ValueError, match="cuda:5.: torch sees 3 CUDA"):
        parse_devices("cuda:5", cuda_count=3)
    with pytest.raises(ValueError, match="names cuda:1 twice"):
        parse_devices("cuda:1,cuda:1", cuda_count=3)
    with pytest.raises(ValueError, match="unknown device 'gpu1'"):
        parse_devices("gpu1", cuda_count=3)


def _devices_all_refusal() -> str:
    """Why `--devices all` with the default (cpu) sweep is refused here: no GPU to take, or, on a GPU
    machine, GPUs only where the sweep's cells are cpu ones."""
    import torch

    if torch.cuda.is_available():
        return "the sweep measures cpu cells but --devices has no cpu worker"
    return "--devices all: torch sees no CUDA device on this machine"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--devices", "cpu,cpu"], ONE_CPU_WORKER),
        (["--devices", "all"], _devices_all_refusal()),
        (["--devices", "cpu", "--executor", "ray"], "--devices picks this machine's GPUs"),
        (["--ray-address", "127.0.0.1:1"], "--ray-address names the Ray cluster of --executor ray"),
    ],
)
def test_bad_pool_flags_are_one_line_before_any_work(tmp_path, args, message):
    out = tmp_path / "r"
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", "--out", str(out), *args)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [f"attnbench: error: {message}"] or (
        len(p.stderr.strip().splitlines()) == 1 and message in p.stderr
    )
    assert not out.exists()


def test_dispatcher_spreads_series_and_skips_ahead():
    sweep = SweepSpec(variants=("naive",), heads=(1, 2), seq_len=(16, 32, 64))
    cells = sweep.cells(["naive"])  # two series (heads 1 and 2), N ascending in each
    d = Dispatcher(cells, done=[])
    rows = []
    first = d.take("cpu", rows.append)
    second = d.take("cpu", rows.append)
    assert (first.heads, first.seq_len) == (1, 16) and (second.heads, second.seq_len) == (2, 16)
    third = d.take("cpu", rows.append)  # only busy series left: a free worker still gets work
    assert third.seq_len == 32 and d.take("cuda", rows.append) is None
    d.back(first, {"status": "oom"})
    d.back(third, {"status": "ok"})
    nxt = d.take("cpu", rows.append)  # heads 1, N=64 is skipped: N=16 ran out of memory
    assert [(r["heads"], r["seq_len"], r["status"]) for r in rows] == [(1, 64, "skipped")]
    assert (nxt.heads, nxt.seq_len) == (2, 32)


def _fake_gpus(monkeypatch, n=2):
    """`--devices` of n GPUs, faked at the level of the pins: slots pinned to "0".."n-1" that take the
    sweep's cpu cells, so the pool's queue and pinning run here without CUDA."""
    fake = [Slot(f"cuda:{i}", "cpu", {"CUDA_VISIBLE_DEVICES": str(i)}) for i in range(n)]
    monkeypatch.setattr(local, "parse_devices", lambda text: fake)


@pytest.mark.slow  # three workers start (torch import each): ~20 s on a quiet 2-core machine
def test_pool_pins_each_worker_and_shares_the_queue(tmp_path, monkeypatch):
    """Both workers take cells from the one queue, each pinned as its slot says. Whichever starts first could
    take every pin_probe cell before the other is up (seen on a 16-core machine under pytest-xdist), so a
    pin_probe call in a pinned worker waits until one has come from each pin (ATTNBENCH_TEST_PIN_MEET): a
    worker that never takes one leaves the other waiting 120 s, and its pin missing below."""
    _fake_gpus(monkeypatch)
    (tmp_path / "met").mkdir()
    monkeypatch.setenv("ATTNBENCH_TEST_PIN_MEET", str(tmp_path / "met"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # pinned: the pool's workers only
    sweep = SweepSpec(variants=("pin_probe", "naive"), heads=(1, 2), seq_len=(16, 32), settings=FAST)
    out = tmp_path / "r"
    summary = runner.run(
        RunRequest(sweep=sweep, out=out, variant_files=(str(SCALEOUT),), executor_options={"devices": "x"})
    )
    rows = read_rows(out)
    ids = [r["cell_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 8 and summary.counts == {"error": 4, "ok": 4}
    probes = [
        re.search(r"CUDA_VISIBLE_DEVICES=(\S+) pid=(\d+)", r["message"])
        for r in rows
        if r["variant"] == "pin_probe"
    ]
    pid_of = {}
    for m in probes:
        pid_of.setdefault(m.group(1), set()).add(m.group(2))
    assert set(pid_of) == {"0", "1"}  # both workers took cells, each pinned as its slot says
    assert all(len(pids) == 1 for pids in pid_of.values())  # one long-lived worker per slot
    assert (out / "worker-cuda0.log").is_file() and (out / "worker-cuda1.log").is_file()


@pytest.mark.slow  # two workers start and calibrate
def test_pool_describes_each_device_and_writes_from_one_thread(tmp_path):
    variants.load_variant_file(str(SCALEOUT))
    sweep = SweepSpec(variants=("instant",), seq_len=(16, 32, 48), settings=FAST)
    config = {"threads": 1, "env": {}, "variant_files": [str(SCALEOUT)], "cpu_affinity": [], "log_path": ""}
    plan = Plan(sweep=sweep, cells=sweep.cells(["instant"]), config=config, run_dir=tmp_path)
    slots = [Slot(f"cuda:{i}", "cpu", {"CUDA_VISIBLE_DEVICES": str(i)}) for i in range(2)]
    rows, devices, threads = [], [], set()

    def on_row(row):
        threads.add(threading.current_thread())
        rows.append(row)

    def on_device(record):
        threads.add(threading.current_thread())
        devices.append(record)

    run_pool(plan, slots, on_row, on_device)
    assert threads == {threading.main_thread()}
    assert sorted(r["seq_len"] for r in rows) == [16, 32, 48] and {r["status"] for r in rows} == {"ok"}
    # both fake GPUs are this host's cpu: one key, described at least once and never twice by one slot
    keys = [where_key(d["host"], d["device"], d["gpu_uuid"]) for d in devices]
    assert 1 <= len(keys) <= 2 and set(keys) == {where_key(rows[0]["host"], "cpu")}
    assert devices[0]["calibration"] == {"budget_ms": 0.0}  # as FAST asks: none


def test_a_pool_whose_workers_cannot_start_ends_the_run_incomplete(tmp_path, monkeypatch):
    """Cells left unmeasured for any reason end a run the same way: a note saying why, `run incomplete` with
    the cells not measured and the command that finishes them, and exit status 3 (not a traceback)."""
    from attnbench.harness.workers.isolation import WorkerDied

    def no_worker(*args, **kwargs):
        raise WorkerDied("worker exited with code 1 before it was ready")

    _fake_gpus(monkeypatch)
    monkeypatch.setattr(local, "CellRunner", no_worker)  # the pool's workers; the run's own starts as usual
    out = tmp_path / "r"
    p = run_cli("run", "--devices", "x", "--variants", "naive", "--seq-len", "16,32", "--out", str(out))
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
    assert "attnbench: note: no worker of the pool could start; the cells left are not measured" in p.stderr
    said = f"run incomplete: {out} (no cells run, 2 not measured: attnbench run --resume --out {out})"
    assert said in p.stderr and "run complete" not in p.stderr, p.stderr
