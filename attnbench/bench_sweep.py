"""What attnbench.bench(fn) measures a kernel on: the bench preset, and where fn runs one workload only (a
pack, a paged cache, a sliding window) or the caller asks for one, that workload's axes and torch's own way
to run it as the baseline; fn's own dtypes where it supports none of the preset's; causal masking aligned
lower-right for a decode step (no mask alone where its one query sees every key either way); one visit a
cell on an executor that measures cells in parallel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DECODE_MASKS = "no,lower-right"  # a decode step's masks: its queries at the end of their context

# bench's sweep for a pack, a paged cache or a sliding window: the axes it fills where the caller gave none,
# and the baseline it races unless told another (torch's own way to run that workload on every device)
WORKLOAD_BENCH = {
    "window": ("sdpa", {"causal": "yes", "window": "16,64"}),
    "packed": ("sdpa_loop", {"lengths": "uniform,longtail", "batch": 8, "padding": 0.0}),
    "paged": (
        "paged_gather",
        {
            "seq_len": 1,
            "seq_k": "256..2048",
            "lengths": "uniform",
            "page_size": "16,128",
            "batch": 8,
            "padding": 0.0,
            "causal": "no,lower-right",  # N_q = 1 (seq_len 1) makes them one: bench_plan races no mask alone
        },
    ),
}


def bench_plan(measured: Any, baseline: Any, keywords: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """bench's baseline and its keywords for run, over the bench preset, where the caller gave none of
    these. A kernel that runs packed batches, paged caches or sliding windows only (or given `lengths=`,
    `page_size=` or `window=`) is benched on that workload (WORKLOAD_BENCH) against sdpa_loop, paged_gather
    or sdpa; any other against sdpa."""
    named = keywords.get("config") or keywords.get("preset")  # a sweep of the caller's: its axes stand
    workload = _workload(measured, {**_sweep_axes(named), **keywords})
    against, axes = WORKLOAD_BENCH.get(workload, ("sdpa", {}))
    axes = {} if named else axes
    planned = _bench_keywords(measured, {**axes, **keywords})
    if "causal" not in keywords and planned.get("causal") == DECODE_MASKS and _one_query(planned):
        planned["causal"] = "no"  # one query sees every key either way: one problem, raced once
    return (against if baseline is None else baseline), planned


def _one_query(keywords: dict[str, Any]) -> bool:
    """Whether every cell of bench's sweep has one query (N_q = 1: `seq_len=1`), where causal lower-right
    and no mask are the same problem. False where seq_len is the preset's or cannot be read (run says why)."""
    from attnbench.harness.sweep.grammar import read_axis
    from attnbench.results.axes import BY_NAME

    if keywords.get("seq_len") is None:
        return False
    try:
        return read_axis(BY_NAME["seq_len"], keywords["seq_len"]) == (1,)
    except ValueError:
        return False


def _sweep_axes(named: Any) -> dict[str, Any]:
    """The axes of a preset (by name) or sweep file (a path) a caller gave bench; {} for none, or one that
    cannot be read (run says why, in its own words)."""
    from attnbench.harness.sweep.sweeps import presets, read_sweep_file

    if not named:
        return {}
    try:
        return dict(read_sweep_file(presets().get(str(named)) or Path(named)))
    except Exception:  # noqa: BLE001 - an unknown preset or a broken file: run refuses it in one line
        return {}


def _workload(measured: Any, keywords: dict[str, Any]) -> str | None:
    """'paged', 'packed' or 'window' where the keywords ask for one (a page size, a length pattern, a
    window) or fn (a Variant, or a registered name, from a variant file too) runs that workload only; None
    otherwise."""
    from attnbench import variants
    from attnbench.variants.handed import only_workload

    def asked(key: str, none: str) -> bool:
        given = keywords.get(key, none)
        words = str(given).split(",") if isinstance(given, str | int | float) else given
        return any(str(w).strip().lower() not in (none, "") for w in words)

    if asked("page_size", "0"):
        return "paged"
    if asked("lengths", "none"):
        return "packed"
    if asked("window", "0"):
        return "window"
    if {"page_size", "lengths", "window"} & set(keywords):  # page_size=0, lengths="none", window=0: plain
        return None
    v = measured
    if isinstance(measured, str):
        try:
            for path in keywords.get("variant_files", ()):
                variants.load_variant_file(path)
        except Exception:  # noqa: BLE001 - run says what is wrong with the file, in its own words
            return None
        v = variants.all_variants().get(measured)
    return None if v is None else only_workload(v)


def _bench_keywords(measured: Any, keywords: dict[str, Any]) -> dict[str, Any]:
    """bench's keywords for run, over its preset, where the caller gave none of these: fn's own dtypes
    where it supports neither of the preset's (a float16 kernel), causal masking aligned lower-right for
    a decode step (`seq_k=`: keys apart from the queries), and one visit a cell on an executor that
    measures cells in parallel (harness.run.plan.once_in_parallel)."""
    from attnbench.harness.run import plan

    keywords = dict(keywords)
    if "dtype" not in keywords:
        keywords.update(_own_dtypes(measured))
    if "seq_k" in keywords and "causal" not in keywords:
        keywords["causal"] = DECODE_MASKS
    return plan.once_in_parallel(keywords)


def _own_dtypes(measured: Any) -> dict:
    """{"dtype": fn's dtypes} where fn (a Variant, or a registered name) supports none of the bench
    preset's dtypes, so that bench measures it in its own rather than in none; {} otherwise, and for a
    name a variant file registers later."""
    from attnbench import variants
    from attnbench.harness.sweep.sweeps import presets, read_sweep_file

    v = measured if not isinstance(measured, str) else variants.all_variants().get(measured)
    if v is None or set(v.cap.dtypes) & set(read_sweep_file(presets()["bench"])["dtype"]):
        return {}
    return {"dtype": list(v.cap.dtypes)}


def resumed_baseline(who: str, baseline: Any, out: Any) -> str:
    """The baseline of the bench run at `out` that bench(fn, out=..., resume=True) finishes: the variant its
    meta.json names beside fn (a resume takes the sweep, settings and variants from the run, as run's does).
    ValueError where fn, or a baseline= given, is not the run's; bench's default where there is no run to
    read (run refuses the resume then, in its own words)."""
    from attnbench.results.store import is_run_dir, read_meta

    given = baseline if baseline is None or isinstance(baseline, str) else getattr(baseline, "name", None)
    if out is None or not is_run_dir(out):
        return given or "sdpa"
    names = [str(n) for n in read_meta(out).get("variants") or []]
    others = [n for n in names if n != who]
    if who not in names or (given is not None and given not in others) or not others:
        said = f"{who!r}" + ("" if given is None else f" against {given!r}")
        raise ValueError(
            f"bench: the run in {str(out)!r} measured {' and '.join(map(repr, names))}, not {said}: resume "
            "it with the fn it benched (and its name=)"
        )
    return given or others[0]
