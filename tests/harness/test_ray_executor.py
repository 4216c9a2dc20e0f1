"""--executor ray against a real local Ray cluster (the run starts it, on loopback), through the CLI."""

from __future__ import annotations

import importlib.machinery
import json
import os
import signal
import socket
import subprocess
import sys
import time
import types

import pytest
from conftest import DATA, ROOT, TEST_CALIBRATE_MS, cli_env, ctrl_c_reaches_it, run_cli

from attnbench.harness.run.executors.ray import cluster_slots
from attnbench.results.formulas import where_key
from attnbench.results.store import read_rows

SCALEOUT = DATA / "scaleout_variants.py"
TINY = ["--heads", "1", "--budget-ms", "5", "--warmup-ms", "2", "--min-samples", "5", "--quiet"]
TINY += ["--calibrate-ms", TEST_CALIBRATE_MS]  # as run_cli gives a fresh run


def test_one_cpu_actor_per_node_and_one_per_gpu():
    nodes = [
        {"NodeID": "a", "Alive": True, "Resources": {"CPU": 16.0, "GPU": 2.0}},
        {"NodeID": "b", "Alive": True, "Resources": {"CPU": 8.0}},
        {"NodeID": "c", "Alive": False, "Resources": {"CPU": 8.0}},
    ]
    cpu = cluster_slots(nodes, ("cpu",))
    assert [(s.node_id, s.num_cpus) for s in cpu] == [("a", 16.0), ("b", 8.0)]  # all of each node's CPUs
    gpu = cluster_slots(nodes, ("cuda",))
    assert [(s.node_id, s.label, s.num_gpus) for s in gpu] == [("a", "cuda0", 1), ("a", "cuda1", 1)]


def test_a_long_ray_reason_is_cut_at_a_word_with_an_ellipsis():
    """Ray's crash reason kept to 300 characters: never cut mid-word ("...killed by the OOM k"), which reads
    as the message itself; a short one is kept whole."""
    from attnbench.harness.run.executors.ray import _reason

    said = ("The actor died unexpectedly before finishing this task: the worker was killed by the OOM killer "
            "because the node ran low on memory, ") * 3  # fmt: skip
    reason = _reason(RuntimeError(said + "\nActor ID: 1234\nWorker ID: abcd"))
    assert len(reason) <= 300 and reason.endswith("...") and said.startswith(reason[:-3]), reason
    assert said[len(reason) - 3] == " ", reason  # the cut is at a word boundary
    assert _reason(RuntimeError("The actor died: exit code 9")) == "The actor died: exit code 9"


def test_missing_ray_is_one_line(tmp_path, monkeypatch):
    """Without ray installed, --executor ray is refused before any work, naming the extra to install."""
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is missing
    out = tmp_path / "r"
    p = run_cli("run", "--executor", "ray", "--variants", "naive", "--seq-len", "16", "--out", str(out))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "install 'attnbench[ray]'" in p.stderr and not out.exists()


UNREACHABLE = {
    "127.0.0.1:1": "nothing answers at 127.0.0.1:1 (Connection refused)",
    "no-such-host.invalid:6379": "nothing answers at",
    "127.0.0.1:99999": "99999 is not a port number (1 to 65535)",
}


# Before the tests that join the module's cluster: a process that has joined one is not probed again.
@pytest.mark.parametrize("address", list(UNREACHABLE), ids=["refused", "no-host", "bad-port"])
def test_an_unreachable_ray_address_is_one_line_at_once_with_nothing_written(tmp_path, address):
    pytest.importorskip("ray")
    out = tmp_path / "r"
    started = time.monotonic()
    p = run_cli("run", "--executor", "ray", "--ray-address", address, "--variants", "naive", "--seq-len",
                "16", "--out", str(out))  # fmt: skip
    assert time.monotonic() - started < 30
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"attnbench: error: --ray-address {address}: {UNREACHABLE[address]}"), p.stderr
    assert not out.exists()


def test_the_api_says_ray_start_head_as_it_is(tmp_path):
    """The keyword respelling leaves another program's command line alone: `ray start --head`."""
    pytest.importorskip("ray")
    import attnbench

    with pytest.raises(ValueError) as caught:
        attnbench.run(
            variants="naive", seq_len=16, executor="ray", ray_address="127.0.0.1:1", out=tmp_path / "r"
        )
    message = str(caught.value)
    assert message.startswith("ray_address=127.0.0.1:1: nothing answers") and "(`ray start --head`" in message


def test_rays_advice_is_said_in_attnbench_words():
    from attnbench.harness.run.executors.ray import _ray_said

    said = _ray_said([
        "2026-12-06 08:37:40,133\tINFO worker.py:1691 -- Connecting to existing Ray cluster",
        "ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by "
        "setting `--address` flag or `RAY_ADDRESS` environment variable.",
        "[2026-12-06 08:39:49,796 W 31352 31352] gcs_client.cc:210: Failed to get cluster ID from GCS server",
    ])  # fmt: skip
    assert said[0] == "Connecting to existing Ray cluster"
    assert "--address` flag" not in said[1] and said[1].endswith("Give it as --ray-address.")
    assert said[2] == "Failed to get cluster ID from GCS server"


class _FakeRay(types.ModuleType):
    """`ray` as far as the executor's session asks it: ray.init's keywords kept, or its refusal raised."""

    def __init__(self, refusal=None):
        super().__init__("ray")
        self.__spec__ = importlib.machinery.ModuleSpec("ray", None)
        self.calls, self.refusal, self.up = [], refusal, False

    def is_initialized(self):
        return self.up

    def init(self, **kw):
        self.calls.append(kw)
        if self.refusal:
            raise ValueError(self.refusal)
        self.up = True

    def shutdown(self):
        self.up = False


def test_without_an_address_the_cluster_is_private_whatever_ray_address_says(monkeypatch):
    """address="local": a new cluster here, never RAY_ADDRESS's (even a dead one) nor one running here."""
    from attnbench.harness.run.executors.ray import RayExecutor

    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6399")
    with RayExecutor().session():
        assert fake.up
    (kw,) = fake.calls
    assert kw["address"] == "local" and kw["_node_ip_address"] == "127.0.0.1" and not fake.up


def test_a_ray_refusal_comes_before_anything_is_written(tmp_path, monkeypatch):
    """What Ray refuses when the cluster starts is one line, before calibration, meta.json or a row."""
    monkeypatch.setitem(sys.modules, "ray", _FakeRay(refusal="the object store needs more /dev/shm"))
    out = tmp_path / "r"
    p = run_cli("run", "--executor", "ray", "--variants", "naive", "--seq-len", "16", "--out", str(out))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "a private Ray cluster on this machine: Ray refused: the object store needs" in p.stderr
    assert not out.exists()


def test_a_resume_asks_the_cluster_once_and_a_complete_run_not_at_all(tmp_path, monkeypatch):
    """`run --resume` looks at what its run has left (a dry run) before it resumes: the executor's cluster is
    asked by the resume alone (a Ray address was joined in a child twice, 2-3 s each), and a run with nothing
    left says so without asking it (here nothing answers at the address)."""
    from attnbench.harness.run.executors import ray as ray_executor

    out = tmp_path / "r"
    run_cli("run", "--variants", "naive", "--seq-len", "16,32", "--out", str(out), check=True)
    ray_args = ["--executor", "ray", "--ray-address", "127.0.0.1:1"]
    p = run_cli("run", "--resume", "--out", str(out), *ray_args)
    assert p.returncode == 0 and f"nothing to resume: {out} is complete" in p.stderr, p.stderr
    rows = (out / "rows.jsonl").read_text().splitlines(keepends=True)
    (out / "rows.jsonl").write_text(rows[0])  # a cell left
    asked = []
    monkeypatch.setattr(ray_executor, "reach", lambda address, timeout: asked.append(address))
    monkeypatch.setitem(sys.modules, "ray", _FakeRay(refusal="refused here"))
    p = run_cli("run", "--resume", "--out", str(out), *ray_args)
    assert p.returncode == 2 and "Ray refused: refused here" in p.stderr, p.stderr
    assert asked == ["127.0.0.1:1"]


# `attnbench ARGS` in a fresh process whose `ray` says, as ray.init is called, whether its forkserver
# is running by then, and refuses
SAYS_IF_THE_FORKSERVER_RUNS = """
import importlib.machinery, multiprocessing.forkserver, sys, types

ray = types.ModuleType("ray")
ray.__spec__ = importlib.machinery.ModuleSpec("ray", None)
ray.is_initialized = lambda: False

def init(**kw):
    print("forkserver running:", multiprocessing.forkserver._forkserver._forkserver_pid is not None)
    raise ValueError("refused here")

ray.init = init
sys.modules["ray"] = ray
from attnbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_ray_run_starts_its_workers_forkserver_before_it_joins_the_cluster(tmp_path):
    """The run's own worker (the machine's fingerprint, the numerics probe) forks from the forkserver whatever
    the executor: a Ray driver starts it as it begins, as a local run does, so that its torch import overlaps
    the cluster's start or join instead of following it."""
    out = tmp_path / "r"
    argv = ["run", "--executor", "ray", "--variants", "naive", "--seq-len", "16", "--out", str(out)]
    p = subprocess.run([sys.executable, "-c", SAYS_IF_THE_FORKSERVER_RUNS, *argv], cwd=ROOT, env=cli_env(),
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 2 and "Ray refused: refused here" in p.stderr, p.stderr
    assert p.stdout.strip() == "forkserver running: True" and not out.exists()


def test_a_port_that_is_not_ray_is_one_line_within_the_bound_with_nothing_written(tmp_path, monkeypatch):
    """Something listens but is no Ray cluster: Ray would retry for minutes; the join is tried in a child that
    is killed at the bound (shortened here; 20 s by default)."""
    pytest.importorskip("ray")
    from attnbench.harness.run.executors import ray as ray_executor

    monkeypatch.setattr(ray_executor, "CONNECT_TIMEOUT_S", 3.0)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        out = tmp_path / "r"
        started = time.monotonic()
        p = run_cli("run", "--executor", "ray", "--ray-address", address, "--variants", "naive", "--seq-len",
                    "16", "--out", str(out))  # fmt: skip
    assert time.monotonic() - started < 10
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "accepts connections but no Ray cluster answered within 3 s" in p.stderr and not out.exists()


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module (started here, on loopback; its start costs ~15 s), joined
    by every `attnbench run` below through --ray-address; shut down with the module, and the variables
    ray.init set in this process (RAY_*, PYTHONBREAKPOINT) taken back, as a test leaves what it found
    (they no longer make a later worker spawn: test_what_ray_init_leaves_set_...)."""
    saved = dict(os.environ)
    if "ray" not in sys.modules:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # see harness/run/executors/ray.py
    ray = pytest.importorskip("ray")
    # address="local": a new cluster, never one `ray start` left on this machine (ray_current_cluster)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    RAY_SET.update(k for k in os.environ if os.environ[k] != saved.get(k))
    try:
        yield ["--executor", "ray", "--ray-address", ray.get_runtime_context().gcs_address]
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


RAY_SET: set[str] = set()  # the variables ray.init set or changed in this process (the cluster fixture)


def test_what_ray_init_leaves_set_does_not_make_later_workers_spawn(cluster):
    """Each is per call (harness.workers.isolation): a local run after a Ray one in the same process (a
    notebook) still forks its workers (tests/harness/test_isolation.py)."""
    from attnbench.harness.workers import isolation

    assert RAY_SET and all(isolation._per_call(name) for name in RAY_SET), sorted(RAY_SET)


def test_a_cluster_that_wants_a_token_says_so_in_one_line(tmp_path, cluster, monkeypatch):
    """The cluster (started with Ray's default, token authentication) refuses a process without its token:
    Ray retries for 20 s saying why each second; the one line says it at its first word."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    out = tmp_path / "r"
    started = time.monotonic()
    p = run_cli("run", "--variants", "naive", "--seq-len", "16", *cluster, "--out", str(out), process=True)
    assert time.monotonic() - started < 15
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "refused this process (" in p.stderr and "RAY_AUTH_MODE=token" in p.stderr, p.stderr
    assert not out.exists()


def _statuses(out):
    return {r["cell_id"]: r["status"] for r in read_rows(out)}


@pytest.mark.slow
def test_ray_matches_local_cells_and_statuses(tmp_path, cluster):
    sweep = [
        "--variant-file",
        str(SCALEOUT),
        "--variants",
        "naive,pin_probe,sdpa_efficient",
        "--seq-len",
        "16,32",
    ]
    local, ray = tmp_path / "local", tmp_path / "ray"
    run_cli("run", *sweep, *TINY, "--out", str(local), check=True)
    # in this process, the cluster fixture's driver: the run keeps the cluster it finds joined (as the API's
    # after a user's ray.init); the killed-actor test's driver and resume are real processes
    run_cli("run", *sweep, *TINY, *cluster, "--out", str(ray), check=True)
    assert _statuses(ray) == _statuses(local) and len(_statuses(ray)) == 6
    assert set(_statuses(ray).values()) == {"ok", "error", "unsupported"}
    meta = json.loads((ray / "meta.json").read_text())
    assert meta["executor"] == "ray"
    measured = [r for r in read_rows(ray) if r["status"] == "ok"]
    assert {where_key(r["host"], r["device"], r["gpu_uuid"]) for r in measured} <= set(meta["devices"])


@pytest.mark.slow
def test_a_killed_actor_costs_its_cell_only_and_resume_loses_nothing(tmp_path, cluster):
    out, marker = tmp_path / "r", tmp_path / "killed"
    args = [
        "run", "--variant-file", str(SCALEOUT), "--variants", "kill_actor,sleep_1s",
        "--seq-len", "32,64,96,128",
        "--env", f"ATTNBENCH_TEST_KILL_MARKER={marker}", "--env", "ATTNBENCH_TEST_SLEEP_S=0.5",
        *cluster, *TINY, "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnbench", *args], cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it,
    )  # fmt: skip
    # the actor dies at kill_actor N=64; once two rows past it are in, stop the driver as Ctrl-C would
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        rows = read_rows(out) if (out / "rows.jsonl").is_file() else []
        crashed = [i for i, r in enumerate(rows) if r["status"] == "crashed"]
        if crashed and len(rows) >= crashed[0] + 3:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the run ended or hung before the actor was killed: {proc.communicate()[1]}")
    proc.send_signal(signal.SIGINT)
    said, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    # Ray's own word of the death ("(raylet) A worker died or was killed ..., Worker ID: ...", printed by
    # the driver's error listener) is held back: the cell's crashed row says it
    assert "(raylet)" not in said + err and "A worker died" not in said + err, (said, err)
    before = read_rows(out)
    assert len(before) < 8  # the interrupt left cells to finish
    crashed = [r for r in before if r["status"] == "crashed"]
    assert [(r["variant"], r["seq_len"]) for r in crashed] == [("kill_actor", 64)]
    assert "Ray actor died" in crashed[0]["message"]
    assert all(r["status"] == "ok" for r in before if r is not crashed[0])  # the replacement actor went on

    run_cli("run", "--resume", "--out", str(out), *cluster, "--quiet", check=True, timeout=300, process=True)
    rows = read_rows(out)
    ids = [r["cell_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 8  # 0 lost, 0 duplicated
    assert {r["cell_id"]: r for r in before}.items() <= {r["cell_id"]: r for r in rows}.items()
    assert [r["status"] for r in rows].count("crashed") == 1
