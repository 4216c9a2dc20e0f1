"""The page of one `attnbench profile`: index.md, index.html and top_ops.md from the files beside them.

Reads profile.json, top_ops.csv and profile.speedscope.json (whichever exist) and links the flame
graph, the speedscope file and the Chrome trace. The pages are page.Page blocks: every string from those
files is data, escaped (and every link checked) by page.py's renderers.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.results.axes import BY_NAME, IDENTITY, filled
from attnbench.results.formulas import bytes_text

from .page import (
    PAGE_FILES,
    Bullets,
    Heading,
    Link,
    Page,
    Para,
    SvgFigure,
    Table,
    Text,
    to_html,
    to_markdown,
    to_notebook_html,
    to_text,
)

TOP_OPS_SHOWN = 25  # rows of top_ops.md (top_ops.csv holds every operator)
TOP_OPS_INDEX = 10  # rows on the index page
TOP_FRAMES = 15
# the cell's call as py-spy names it (harness.measure.cell.timed_call's inner function): frames above it are
# the loop
CELL_FRAME = "timed_call.<locals>.call"
SPEEDSCOPE_URL = "https://www.speedscope.app"
PERFETTO_URL = "https://ui.perfetto.dev"
LOG = "child.log"  # the profiled process's traceback, when the variant raised (harness.tools.profiled_child)


# ---- reading what the profile left -------------------------------------------------------------------


def read_top_ops(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _short_path(file: str) -> str:
    """site-packages/torch/x.py -> torch/x.py; a file under the working directory -> relative to it."""
    if "site-packages/" in file:
        return file.rsplit("site-packages/", 1)[1]
    try:
        return str(Path(file).relative_to(Path.cwd()))
    except ValueError:
        return file


@dataclass(frozen=True)
class Samples:
    """py-spy's samples of the cell, summarised: shares are percent of all samples."""

    n: int
    functions: list[dict[str, Any]]  # function, file, inclusive_pct, self_pct; lines of a function merged
    lines: list[dict[str, Any]]  # function, where (file:line), self_pct: the lines the samples stopped in


def speedscope_summary(path: Path, top: int = TOP_FRAMES, below: str = CELL_FRAME) -> Samples:
    """Per function, the share of samples with it on the stack (inclusive) and on top (self), biggest
    inclusive first; per source line, the share on top. Only the frames under the last `below` frame of
    a stack count (the cell, not the loop around it)."""
    if not path.is_file():
        return Samples(0, [], [])
    data = json.loads(path.read_text())
    frames = data.get("shared", {}).get("frames", [])
    key = [(f.get("name", "?"), _short_path(f.get("file", ""))) for f in frames]
    where = [f"{k[1]}:{f.get('line', '?')}" for k, f in zip(key, frames, strict=True)]
    incl: Counter = Counter()
    self_: Counter = Counter()
    lines: Counter = Counter()
    total = n = 0
    for prof in data.get("profiles", []):
        samples = prof.get("samples", [])
        for stack, w in zip(samples, prof.get("weights") or [1] * len(samples), strict=False):
            n += 1
            total += w  # py-spy weighs every sample by its interval (1 / rate seconds)
            cut = max((i for i, f in enumerate(stack) if key[f][0] == below), default=-1)
            stack = stack[cut + 1 :] if cut >= 0 else stack  # (root ... leaf) below the driver's call
            for k in dict.fromkeys(key[i] for i in stack):  # once per sample, in a stable order
                incl[k] += w
            if stack:
                self_[key[stack[-1]]] += w
                lines[(key[stack[-1]][0], where[stack[-1]])] += w
    if not total:
        return Samples(n, [], [])
    funcs = [
        {
            "function": f,
            "file": file,
            "inclusive_pct": 100 * c / total,
            "self_pct": 100 * self_[(f, file)] / total,
        }
        for (f, file), c in incl.most_common(top)
    ]
    hot = [{"function": f, "where": w, "self_pct": 100 * c / total} for (f, w), c in lines.most_common(top)]
    return Samples(n, funcs, hot)


def _ms(v: Any) -> str:
    try:
        return f"{float(v):.3f}"
    except (TypeError, ValueError):
        return str(v)


def _signed_bytes(v: Any) -> str:
    try:
        b = float(v)
    except (TypeError, ValueError):
        return str(v)
    return bytes_text(b)  # signed: an operator's self memory is negative when it frees more than it allocates


def top_ops_table(rows: list[dict[str, str]], limit: int) -> Table:
    cuda = bool(rows) and "self_cuda_ms" in rows[0]
    headers = ["operator", "calls", "self CPU ms", "self CPU %", "total CPU ms", "self CPU memory"]
    if cuda:
        headers = headers[:2] + ["self CUDA ms", "self CUDA %", "total CUDA ms"] + headers[2:3] + headers[4:]
    out = []
    for r in rows[:limit]:
        cpu = (
            [_ms(r.get("self_cpu_ms")), f"{float(r.get('self_cpu_pct', 0) or 0):.1f}"]
            if not cuda
            else [_ms(r.get("self_cpu_ms"))]
        )
        cells = [r.get("name", ""), r.get("calls", "")]
        if cuda:
            cells += [
                _ms(r.get("self_cuda_ms")),
                f"{float(r.get('self_cuda_pct', 0) or 0):.1f}",
                _ms(r.get("total_cuda_ms")),
            ]
        cells += cpu + [_ms(r.get("total_cpu_ms")), _signed_bytes(r.get("self_cpu_mem_bytes"))]
        out.append(tuple(str(c) for c in cells))
    return Table(tuple(headers), tuple(out))


def _flat(d: dict[str, Any] | None, prefix: str = "") -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            items += _flat(v, f"{prefix}{k}.")
        elif k.endswith("memory_bytes") and isinstance(v, (int, float)):
            items.append((prefix + k, bytes_text(v)))
        else:
            items.append((prefix + k, "" if v is None else str(v)))
    return items


# ---- the page as blocks ------------------------------------------------------------------------------


def _title(meta: dict[str, Any]) -> str:
    """The cell in words: its shape, then every axis off its quiet value (results.axes: N_k, H_kv, a window,
    a score mod, a pack's lengths, a paged cache's pages, ...), in the table's words, then the pass."""
    c = filled({k: v for k, v in (meta.get("cell") or {}).items() if k in BY_NAME})
    said = [f"B={c.get('batch')} H={c.get('heads')} N={c.get('seq_len')} d_k={c.get('d_k')}"]
    said += [f"d_v={c.get('d_v')}"] if c.get("d_v") != c.get("d_k") else []
    if c.get("causal"):
        lower = c.get("causal_align") == "lower-right"
        said.append(BY_NAME["causal_align"].show("lower-right") if lower else "causal")
    said += [BY_NAME["padding"].show(c["padding"])] if c.get("padding") else []
    for a in IDENTITY:
        if a.core or a.name in ("d_v", "causal_align") or a.name not in c:
            continue
        if c[a.name] != (c.get(a.follows) if a.follows else a.quiet):
            said.append(a.show(c[a.name]))
    where = f"{c.get('device')} {c.get('dtype')}"
    return f"Profile: {c.get('variant')} · {where} {' '.join(said)} {c.get('pass')}"


def _notes(meta: dict[str, Any]) -> list:
    """Under the title: the command that reproduces the profile, and what failed, was wrong or left out."""
    spy = meta.get("py_spy") or {}
    blocks: list = [Para(("Reproduce with: ", meta.get("command", "")))]
    if meta.get("error"):
        log = (meta.get("failed") or {}).get("log")
        blocks.append(Para(("Failed: ", meta["error"], *((" ", Link(log, log)) if log else ()))))
    wrong = (meta.get("warmup") or {}).get("wrong")
    if wrong:
        blocks.append(Para(f"Wrong answer (profiled anyway; `attnbench run` measures it as wrong): {wrong}"))
    if spy.get("error") or (not spy.get("used") and spy.get("note")):
        blocks.append(Para(f"py-spy: {spy.get('error') or spy.get('note')}"))
    return blocks


def _file_items(have: set[str], meta: dict[str, Any], ops: list[dict[str, str]]) -> list[Text]:
    """One line per file beside the page that exists, with what opens it."""
    recs = {r.get("file"): r for r in (meta.get("py_spy") or {}).get("records", [])}
    tp = meta.get("torch_profiler") or {}

    def rec_text(name: str) -> str:
        r = recs.get(name) or {}
        n = f"{r['samples']} samples" if "samples" in r else "samples"
        return f" (py-spy, {n} over {r.get('seconds', 0):g} s)"

    files: list[Text] = []
    if "flame.svg" in have:
        files.append(
            (
                Link("flame.svg", "flame.svg"),
                " flame graph"
                + rec_text("flame.svg")
                + ": open it on its own to click frames (zoom) and search",
            )
        )
    if "profile.speedscope.json" in have:
        files.append(
            (
                Link("profile.speedscope.json", "profile.speedscope.json"),
                " speedscope profile" + rec_text("profile.speedscope.json") + ": open it at ",
                Link(SPEEDSCOPE_URL, SPEEDSCOPE_URL),
                " (the file is read in the browser, not uploaded)",
            )
        )
    if "trace.json" in have:
        files.append(
            (
                Link("trace.json", "trace.json"),
                f" Chrome trace of {tp.get('iterations', '?')} call(s) (torch.profiler, shapes and memory):"
                " open it with chrome://tracing or ",
                Link(PERFETTO_URL, PERFETTO_URL),
            )
        )
    if "top_ops.csv" in have:
        files.append(
            (
                Link("top_ops.md", "top_ops.md"),
                " / ",
                Link("top_ops.csv", "top_ops.csv"),
                f" every operator by self time ({len(ops)} operators)",
            )
        )
    files.append((Link("profile.json", "profile.json"), " the cell, settings, timings and machine as data"))
    if LOG in have:
        files.append((Link(LOG, LOG), " the traceback of what the variant raised"))
    return files


def _files_blocks(have: set[str], meta: dict[str, Any], ops: list[dict[str, str]]) -> list:
    return [Heading("Files"), Bullets(tuple(_file_items(have, meta, ops)))]


def _flame_blocks(have: set[str]) -> list:
    """The py-spy flame graph, kept interactive (SvgFigure), when py-spy wrote one."""
    if "flame.svg" not in have:
        return []
    caption = (
        "py-spy flame graph: width is the share of samples; ",
        Link("open it on its own", "flame.svg"),
        " to zoom and search.",
    )
    return [Heading("Flame graph (py-spy)"), SvgFigure("flame.svg", "flame graph", caption)]


def _samples_blocks(out_dir: Path) -> list:
    """Where py-spy's samples of the cell fell, by function and by source line (speedscope_summary)."""
    spied = speedscope_summary(out_dir / "profile.speedscope.json")
    if not spied.functions:
        return []
    note = f"Percent of {spied.n} samples; only the frames below the call of the cell count."
    funcs = tuple(
        (f["function"], f["file"], f"{f['inclusive_pct']:.1f}", f"{f['self_pct']:.1f}")
        for f in spied.functions
    )
    lines = tuple((f["function"], f["where"], f"{f['self_pct']:.1f}") for f in spied.lines)
    return [
        Heading("Where the samples fell (py-spy)"),
        Para(note + " Inclusive: the function is on the stack; self: it is on top."),
        Table(("function", "file", "inclusive %", "self %"), funcs),
        Para("The source lines the samples stopped in:"),
        Table(("function", "line", "self %"), lines),
    ]


def _top_ops_blocks(ops: list[dict[str, str]], meta: dict[str, Any]) -> list:
    if not ops:
        return []
    tp = meta.get("torch_profiler") or {}
    return [
        Heading(f"Top operators by self time (torch.profiler, {tp.get('iterations', '?')} calls)"),
        top_ops_table(ops, TOP_OPS_INDEX),
    ]


def _calls_blocks(meta: dict[str, Any]) -> list:
    """How many calls each part made, and their time per call: un-profiled in the warm-up, then under each
    profiler (whose overhead is theirs)."""
    warm, loop, tp = meta.get("warmup") or {}, meta.get("loop") or {}, meta.get("torch_profiler") or {}
    timing = []
    if warm:
        timing.append(
            (
                "warm-up, not profiled",
                f"{warm.get('calls')} calls, {warm.get('ms_per_call')} ms per call (median of the last half)",
            )
        )
    failed = (meta.get("py_spy") or {}).get("error")
    if loop and failed:  # the child looped, but py-spy sampled none of it: no flame graph to read
        timing.append(
            ("looped for py-spy, which failed", f"{loop.get('calls')} calls, none sampled: {failed}")
        )
    elif loop:
        ratio = ""
        if warm.get("ms_per_call") and loop.get("ms_per_call"):
            ratio = f", {float(loop['ms_per_call']) / float(warm['ms_per_call']):.1f}x the un-profiled call"
        timing.append(
            (
                "looped under py-spy",
                f"{loop.get('calls')} calls in {loop.get('seconds')} s, {loop.get('ms_per_call')} ms per call"
                f"{ratio} (py-spy stops the process for each sample: with many torch threads, or on a busy "
                "machine, each stop costs more)",
            )
        )
    if tp:
        timing.append(
            (
                "under torch.profiler",
                f"{tp.get('iterations')} calls in {tp.get('seconds')} s, "
                f"{tp.get('ms_per_call')} ms per call (profiler overhead included)",
            )
        )
    return [Heading("Calls"), Table(("where", "calls"), tuple(timing))] if timing else []


def _cell_blocks(meta: dict[str, Any]) -> list:
    cell = [(k, str(v)) for k, v in (meta.get("cell") or {}).items()]
    cell += [("cell_id", str(meta.get("cell_id", ""))), ("torch threads", str(meta.get("threads", "")))]
    return [Heading("Cell"), Table(("field", "value"), tuple(cell))]


def _machine_blocks(meta: dict[str, Any]) -> list:
    if not meta.get("fingerprint"):
        return []
    return [Heading("Machine"), Table(("key", "value"), tuple(_flat(meta["fingerprint"])))]


def index_page(out_dir: Path, meta: dict[str, Any]) -> Page:
    """The index page, from the files in out_dir and profile.json's contents `meta`: one builder per
    section, in page order."""
    have = {p.name for p in out_dir.iterdir() if p.is_file()}
    ops = read_top_ops(out_dir / "top_ops.csv")
    page = Page(_title(meta))
    page.add(
        *_notes(meta),
        *_files_blocks(have, meta, ops),
        *_flame_blocks(have),
        *_samples_blocks(out_dir),
        *_top_ops_blocks(ops, meta),
        *_calls_blocks(meta),
        *_cell_blocks(meta),
        *_machine_blocks(meta),
        Para(f"Written {meta.get('created', '')} by attnbench profile."),
    )
    return page


def top_ops_page(meta: dict[str, Any], ops: list[dict[str, str]]) -> Page:
    """top_ops.md: the first TOP_OPS_SHOWN operators (top_ops.csv has them all)."""
    tp = meta.get("torch_profiler") or {}
    page = Page(f"Top operators by self time: {_title(meta).removeprefix('Profile: ')}")
    page.add(
        Para(
            f"torch.profiler, {tp.get('iterations', '?')} calls; the first {TOP_OPS_SHOWN} of "
            f"{len(ops)} operators (all of them in top_ops.csv)."
        ),
        top_ops_table(ops, TOP_OPS_SHOWN),
    )
    return page


# ---- writing ------------------------------------------------------------------------------------------


def write_pages(out_dir: str | Path) -> tuple[Path, Path]:
    """Write top_ops.md (when top_ops.csv exists), index.md and index.html into out_dir; their paths."""
    out_dir = Path(out_dir)
    meta = json.loads((out_dir / "profile.json").read_text())
    ops = read_top_ops(out_dir / "top_ops.csv")
    md, htm, top = (out_dir / name for name in PAGE_FILES["profile"])
    if ops:
        top.write_text(to_markdown(top_ops_page(meta, ops)), encoding="utf-8")
    page = index_page(out_dir, meta)
    md.write_text(to_markdown(page), encoding="utf-8")
    htm.write_text(to_html(page, out_dir), encoding="utf-8")
    return md, htm


def top_ops_text(out_dir: str | Path, limit: int = 5) -> str:
    """The first `limit` operators as aligned text for the terminal ("" when there are none)."""
    ops = read_top_ops(Path(out_dir) / "top_ops.csv")
    return to_text(top_ops_table(ops, limit)) if ops else ""


def notebook_html(out_dir: str | Path) -> str:
    """What a notebook shows of a profile: its pages, linked from the notebook's folder, its notes (py-spy
    missing, a failed part), the calls and the top operators."""
    out_dir = Path(out_dir)
    meta = json.loads((out_dir / "profile.json").read_text())
    ops = read_top_ops(out_dir / "top_ops.csv")
    have = {p.name for p in out_dir.iterdir() if p.is_file()}
    head = [Heading(_title(meta)), Para(("the whole profile: ", Link("index.html", "index.html")))]
    blocks = [*head, *_notes(meta), *_files_blocks(have, meta, ops), *_calls_blocks(meta)]
    return to_notebook_html([*blocks, *_top_ops_blocks(ops, meta)], out_dir)
