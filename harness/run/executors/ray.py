"""--executor ray: one long-lived Ray actor per GPU, or per CPU node, each measuring with its own CellRunner.

The driver (the runner's process) plans, hands cells to free actors (`ray.wait`) through the shared
`Dispatcher`, and is the only writer: rows come back as actor results and go to on_row here. An actor
that dies (its process or node killed) turns its cell into a `crashed` row with Ray's reason; it is
replaced on its node while that node lives, and the sweep goes on without it otherwise.

Placement. A GPU actor asks for `num_gpus=1` (Ray pins CUDA_VISIBLE_DEVICES in its process; the worker it
spawns inherits the pin). A CPU actor is pinned to one node (NodeAffinitySchedulingStrategy, hard) and
reserves every CPU that node has: two CPU cells timed at once on one machine corrupt each other, and a
second CPU actor, ours or anyone's task that asks for a CPU, cannot be placed beside it. Node affinity
rather than a `node:<ip>` resource, because nodes that share an address (several raylets on one machine,
as `ray.cluster_utils.Cluster` starts them) would share that resource too.

Ray is an optional dependency (`pip install 'attnbench[ray]'`), imported only here and only when chosen.
Every node needs attnbench (the same version) and the run's variant files at the same path.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench import variants
from attnbench.harness.measure.rows import base_row, finish
from attnbench.harness.run.executors.base import CellsLeft, OnDevice, OnRow, Plan, Say, quiet_loggers
from attnbench.harness.run.executors.dispatch import Dispatcher
from attnbench.harness.sweep.settings import Settings
from attnbench.harness.sweep.spec import CellSpec, SweepSpec
from attnbench.harness.workers.cellrunner import CellRunner

INSTALL = "--executor ray needs Ray, which is not installed: pip install 'attnbench[ray]'"
# --ray-address is checked before anything is written, in this many seconds at most: a TCP connect to the
# address (refused or unroutable: one line at once), then a real ray.init in a child process, killed when
# it runs over (Ray itself retries a wrong address for minutes, printing only its retry lines)
CONNECT_TIMEOUT_S = 20.0
TCP_TIMEOUT_S = 5.0
GCS_PORT, CLIENT_PORT = 6379, 10001  # Ray's defaults: `ray start --head`, and Ray Client's ray://
MAX_DEATHS = 3  # an actor that dies this many times in a row without finishing a cell is not replaced


def _ray(local: bool = False):
    if local and "ray" not in sys.modules:
        # Ray replaces a loopback node address with this machine's outward one unless it believes clusters
        # are off (as on macOS): a private cluster on this machine then stays on 127.0.0.1. Read at import.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise ValueError(INSTALL) from None
    return ray


def host_port(address: str) -> tuple[str, int]:
    """(host, port) of a Ray address: `host:port` (the GCS), `ray://host[:port]` (Ray Client), `[v6]:port`."""
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://").rstrip("/")
    host, sep, port = rest.rpartition(":") if not rest.endswith("]") else ("", "", "")
    if not sep or not port.isdigit():
        host, port = rest, str(CLIENT_PORT if client else GCS_PORT)
    return host.strip("[]"), int(port)


# what Ray's token authentication says when this process has no token, or the wrong one, for the cluster
AUTH_WORDS = ("Unauthenticated", "InvalidAuthToken", "AuthenticationError")
AUTH_HELP = (
    "Ray's token authentication: set RAY_AUTH_MODE=token here with the cluster's token (~/.ray/auth_token, "
    "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH), or start the cluster with RAY_AUTH_MODE=disabled"
)


def reach(address: str, timeout: float) -> None:
    """Return when a Ray cluster answers at `address` within `timeout` seconds; else ValueError in one line
    that says Ray's own cause. Nothing of Ray is imported here (it reads its environment when imported):
    the join is tried in a child."""
    start = time.monotonic()
    where = address
    if address not in ("auto", "local"):  # auto: the cluster this machine started; local: a new one
        host, port = host_port(address)
        where = f"{host}:{port}"
        if not 0 < port < 65536:
            raise ValueError(f"--ray-address {address}: {port} is not a port number (1 to 65535)")
        try:
            socket.create_connection((host, port), timeout=min(TCP_TIMEOUT_S, timeout)).close()
        except OSError as exc:
            why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
            raise ValueError(
                f"--ray-address {address}: nothing answers at {where} ({why}); start the cluster there "
                "(`ray start --head` listens on 6379) or leave --ray-address out for a private one here"
            ) from None
    joined, lines = _join_in_child(address, max(1.0, timeout - (time.monotonic() - start)))
    said = _ray_said(lines)
    if not joined and any(word in line for line in lines for word in AUTH_WORDS):
        auth = next(line for line in reversed(said) if any(word in line for word in AUTH_WORDS))
        why = f"the cluster at {where} refused this process ({auth[:200]})"
        raise ValueError(f"--ray-address {address}: {why}: {AUTH_HELP}")
    if joined is None:
        last = f"; Ray said: {said[-1][:200]}" if said else ""
        raise ValueError(
            f"--ray-address {address}: {where} accepts connections but no Ray cluster answered within "
            f"{timeout:g} s (is it Ray's GCS port, 6379 by default, or ray://host:10001 for Ray Client?)"
            + last
        )
    if not joined:
        cause = next((ln for ln in reversed(said) if "Error" in ln), said[-1] if said else "no message")
        if "Could not find any running Ray instance" in cause:
            cause = "Ray found no cluster started on this machine; give its head as --ray-address HOST:6379"
        raise ValueError(f"--ray-address {address}: Ray could not join the cluster at {where}: {cause[:300]}")


def _join_in_child(address: str, timeout: float) -> tuple[bool | None, list[str]]:
    """ray.init(address) in a child process: (whether it joined, None when it was still trying after
    `timeout` s or gave up for want of a token; the lines Ray wrote to stderr). Ray retries a token it lacks
    for 20 s, saying so each second: the first such line ends the try."""
    code = "import sys, ray; ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR')"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, address], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, errors="replace",
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if any(word in line for line in list(lines) for word in AUTH_WORDS):
            break
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    reader.join(timeout=5)
    return (None if proc.returncode < 0 else proc.returncode == 0), lines


# Ray's advice to use its own CLI's flag, which is not attnbench's
ADVICE = r"Please specify .*?(`--address`|--address) flag or `?RAY_ADDRESS`? environment variable\.?"


def _ray_said(lines: list[str]) -> list[str]:
    """Ray's lines, without their log prefixes (`[time W pid tid] file.cc:210: `, `time INFO file.py:1 -- `),
    and with its advice to use "the `--address` flag" (its own CLI's) in attnbench's words."""
    out = []
    for line in lines:
        line = re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*|^\S+ \S+\s+[A-Z]+ \S+:\d+ -- ", "", line.strip())
        line = re.sub(ADVICE, "Give it as --ray-address.", line)
        if line and not line.startswith(("File ", "Traceback", "^", "~")):
            out.append(line)
    return out


class CellActor:
    """Lives in a Ray actor process: one CellRunner, reused for every cell it is given."""

    def __init__(self, config: dict[str, Any], settings: Settings, label: str) -> None:
        host = socket.gethostname()
        self.problem = None
        self.runner: CellRunner | None = None
        unreadable = [p for p in config.get("variant_files", []) if not os.access(p, os.R_OK)]
        if unreadable:
            self.problem = (
                f"variant file {unreadable[0]} is not readable on Ray node {host}: "
                "put variant files on a path every node shares"
            )
            return
        # the dispatcher's precheck ran on the driver, but the memory guard runs here, next to the device
        for path in config.get("variant_files", []):
            variants.load_variant_file(path)
        # the worker's log goes beside the run's rows where this node sees the run directory, else to /tmp
        run_dir = Path(config["log_path"]).parent
        logs = run_dir if os.access(run_dir, os.W_OK) else Path(tempfile.gettempdir())
        config = {**config, "log_path": str(logs / f"worker-{host}-{label}.log")}
        self.runner = CellRunner(config, settings)

    def describe(self, device: str, dtypes: list[str], known: set[str]) -> dict[str, Any] | None:
        if self.problem:
            raise ValueError(self.problem)
        return self.runner.describe(device, dtypes, known)

    def run(self, spec: CellSpec, measured: dict | None = None) -> dict[str, Any]:
        return self.runner.run(spec, measured=measured)

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()


@dataclass
class _Slot:
    """Where one actor goes: its node, the cells it takes, and its Ray resources."""

    node_id: str
    device: str  # "cuda" or "cpu"
    label: str
    num_cpus: float
    num_gpus: float
    deaths: int = 0


def cluster_slots(nodes: list[dict[str, Any]], devices: tuple[str, ...]) -> list[_Slot]:
    """One slot per GPU of every live node (for cuda cells), one per live node holding all its CPUs (for
    cpu cells). `nodes` as `ray.nodes()` gives them."""
    slots = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        if "cuda" in devices:
            for i in range(int(res.get("GPU", 0))):
                slots.append(_Slot(node["NodeID"], "cuda", f"cuda{i}", num_cpus=0, num_gpus=1))
        if "cpu" in devices and res.get("CPU", 0) >= 1:
            slots.append(_Slot(node["NodeID"], "cpu", "cpu", num_cpus=res["CPU"], num_gpus=0))
    return slots


class RayExecutor:
    name = "ray"
    ordered = False  # cells measured in parallel: one round only (harness.run.plan.check)

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self.notes: list[str] = []  # none: every row comes back through on_row
        self.running: list[str] = []  # none: its workers stop with the run

    def resume(
        self, run_dir: Path, done: dict[str, dict[str, Any]], on_row: OnRow, on_device: OnDevice, message: Say
    ) -> list[str]:
        return []  # nothing is left outside rows.jsonl: actors' rows reach the runner as they are measured

    def check(self, sweep: SweepSpec) -> None:
        # found, not imported: Ray reads its environment when imported, and run() sets it first
        if importlib.util.find_spec("ray") is None:
            raise ValueError(INSTALL)
        ray = sys.modules.get("ray")
        if self.address and not (ray is not None and ray.is_initialized()):  # not joined by this process yet
            reach(self.address, CONNECT_TIMEOUT_S)

    @contextmanager
    def session(self) -> Iterator[None]:
        """The Ray cluster this run measures on, joined (--ray-address, checked by `check`) or started here
        (without it: a private one on loopback, `address="local"`, whatever RAY_ADDRESS says or other
        clusters run on this machine), before anything is written: Ray's refusal is one line; left at the
        end. A process that has joined one already (the API after the user's ray.init) keeps it."""
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            yield
            return
        ray = _ray(local=not self.address)
        quiet = dict(log_to_driver=False, logging_level=logging.ERROR)  # Ray's INFO lines: not the user's
        try:
            if self.address:
                ray.init(address=self.address, **quiet)
            else:
                ray.init(
                    address="local",
                    num_cpus=os.cpu_count(),
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    **quiet,
                )
        except (ValueError, RuntimeError, ConnectionError, OSError) as exc:  # Ray's own, said in one line
            said = _ray_said(str(exc).splitlines()) or [type(exc).__name__]
            where = (
                f"--ray-address {self.address}" if self.address else "a private Ray cluster on this machine"
            )
            raise ValueError(f"--executor ray: {where}: Ray refused: {said[-1][:300]}") from None
        with _held_back():  # until Ray is shut down: its listener prints what comes late, too
            try:
                with quiet_loggers("ray"):
                    yield
            finally:
                ray.shutdown()

    def run(self, plan: Plan, on_row: OnRow, on_device: OnDevice) -> None:
        # the runner's session already (this one then joins nothing); held back again for a cluster the
        # caller had joined (the API after the user's ray.init), whose session is not ours
        with self.session(), _held_back():
            _Driver(sys.modules["ray"], plan, on_row, on_device).run()


@contextmanager
def _held_back() -> Iterator[None]:
    """Ray's own lines to the driver held back while a run uses Ray. `log_to_driver=False` stops the actors'
    output, but not the driver's error listener (ray._private.worker.listen_error_messages), which prints
    what the raylet publishes (a killed actor's "(raylet) A worker died or was killed ... Worker ID ...",
    some 900 characters) to stdout whatever log_to_driver says; the cell's `crashed` row says it, with Ray's
    reason. Its printer's one switch is the one Ray's own debugger turns off (ray.util.rpdb); where a Ray
    version lacks it, nothing is held back."""
    worker = getattr(getattr(sys.modules.get("ray"), "_private", None), "worker", None)
    if worker is None or not hasattr(worker, "_worker_logs_enabled"):
        yield
        return
    was = worker._worker_logs_enabled
    worker._worker_logs_enabled = False
    try:
        yield
    finally:
        worker._worker_logs_enabled = was


class _Driver:
    """The dispatch loop on the driver: start actors, hand out cells, collect rows, replace the dead."""

    def __init__(self, ray, plan: Plan, on_row: OnRow, on_device: OnDevice) -> None:
        self.ray, self.plan, self.on_row, self.on_device = ray, plan, on_row, on_device
        self.remote_cls = ray.remote(max_restarts=0)(CellActor)
        self.slot_of: dict[Any, _Slot] = {}  # actor handle -> its slot
        self.waiting: dict[Any, tuple[str, Any, CellSpec | None]] = {}  # ref -> (kind, actor, cell)

    def start(self, slot: _Slot) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor = self.remote_cls.options(
            num_cpus=slot.num_cpus,
            num_gpus=slot.num_gpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(slot.node_id, soft=False),
        ).remote(self.plan.config, self.plan.sweep.settings, slot.label)
        self.slot_of[actor] = slot
        ref = actor.describe.remote(slot.device, list(self.plan.sweep.dtypes), set(self.plan.described))
        self.waiting[ref] = ("describe", actor, None)

    def run(self) -> None:
        ray, plan = self.ray, self.plan
        slots = cluster_slots(ray.nodes(), plan.sweep.devices)
        kinds = {s.device for s in slots}
        missing = [d for d in plan.sweep.devices if d not in kinds and any(c.device == d for c in plan.cells)]
        if missing:
            what = "GPU" if missing[0] == "cuda" else "node with a CPU"
            raise ValueError(f"the Ray cluster has no {what} for the sweep's {missing[0]} cells")
        self.dispatcher = Dispatcher(plan.cells, plan.done, plan.sweep.settings.max_call_ms)
        self.idle: list[Any] = []
        try:
            for slot in slots:
                self.start(slot)
            while not self.dispatcher.finished:
                for actor in list(self.idle):
                    spec = self.dispatcher.take(self.slot_of[actor].device, self.on_row)
                    if spec is not None:
                        self.idle.remove(actor)
                        measured = self.dispatcher.skip.peaks.of(spec)  # the guard's evidence
                        self.waiting[actor.run.remote(spec, measured)] = ("cell", actor, spec)
                if self.dispatcher.finished:
                    break
                if not self.waiting:
                    left = ", ".join(sorted(self.dispatcher.devices_left()))
                    raise CellsLeft(
                        f"every Ray actor for the {left} cells is gone; cells are left unmeasured"
                    )
                # a bounded wait, so that Ctrl-C reaches the driver between polls
                ready, _ = ray.wait(list(self.waiting), num_returns=1, timeout=1.0)
                for ref in ready:
                    self.collect(ref)
        finally:
            for actor in self.slot_of:
                ray.kill(actor, no_restart=True)  # its worker dies with it (PR_SET_PDEATHSIG)

    def collect(self, ref) -> None:
        """One finished call: a device record or a row (the cell's own, or `crashed` when the actor died)."""
        ray = self.ray
        kind, actor, spec = self.waiting.pop(ref)
        slot = self.slot_of[actor]
        try:
            value = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            if spec is not None:
                self.row(spec, _failed(spec, "crashed", f"Ray actor died ({slot.label}): {_reason(exc)}"))
            self.replace(actor)
            return
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            if kind == "describe":  # e.g. a variant file missing on a node: the run stops, in one line
                raise ValueError(str(cause).strip().splitlines()[-1]) from None
            # a harness error in the actor itself (outside its worker): this cell's row, and on
            value = _failed(spec, "error", f"harness error on a Ray actor: {type(cause).__name__}: {cause}")
        if kind == "describe":
            if value is not None:
                self.plan.described.add(_key(value))
                self.on_device(value)
        else:
            slot.deaths = 0
            self.row(spec, value)
        self.idle.append(actor)

    def row(self, spec: CellSpec, row: dict[str, Any]) -> None:
        self.dispatcher.back(spec, row)
        self.on_row(row)

    def replace(self, actor) -> None:
        """Start a new actor on the dead one's node while that node lives and the slot is not cursed."""
        slot = self.slot_of.pop(actor)
        self.ray.kill(actor, no_restart=True)
        slot.deaths += 1
        alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
        if slot.node_id in alive and slot.deaths < MAX_DEATHS:
            self.start(slot)


def _failed(spec: CellSpec, status: str, message: str) -> dict[str, Any]:
    return finish(base_row(spec), status, _clipped(message, 400))


def _reason(exc: BaseException) -> str:
    """Ray's reason in one line (its messages run to a dozen lines of ids)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    keep = [line for line in lines if "died" in line or "exit" in line.lower() or "killed" in line.lower()]
    return _clipped(" ".join((keep or lines or [type(exc).__name__])[:2]), 300)


def _clipped(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: where longer, cut at the last word boundary before it, with
    "..." saying so (a cut mid-word read as the message itself: "...killed by the OOM k")."""
    if len(text) <= limit:
        return text
    head = text[: limit - 3]
    word = head.rsplit(" ", 1)[0] if " " in head and not text[limit - 3].isspace() else head
    return word.rstrip(" ,;:") + "..."


def _key(record: dict[str, Any]) -> str:
    from attnbench.results.formulas import where_key

    return where_key(record.get("host"), record["device"], record.get("gpu_uuid"))
