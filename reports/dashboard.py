"""The history store as a static site (`attnbench history publish`): an index, a page per machine and one
page across machines, plain HTML files and PNGs that open from disk (file://) or any static host.

A machine's page: the latest findings (per shape, the fastest variant over each range of N, from the latest
run that measured the shape, with its fitted exponent), the series `history check` fails on besides steps
(BROKEN and MISSING, reports.site_gate; the index counts them), every series over time (one small-multiple
figure per device, dtype and pass: a panel per variant, a line per cell, its time over the series' median,
each step results.steps found marked), the steps, and the runs, each linked to its report; a latest run
measured on a busy machine says so (reports.busy.machine_busy). The cross-machine page: each variant's
TFLOP/s and % of its device's calibrated matmul peak per machine (a decode cell's K/V GB/s and % of the
calibrated copy bandwidth, as the run's report's decode panel), at the shapes (every axis but the device
and dtype) that two or more machines measured, and which variant leads each shape on each machine, with
those the report's ranking could not tell from it (results.judge.separated). What the store does not keep
(speed probes, samples) is read from the runs' folders (RunRows).

Pages are reports.page Pages. The site is self-contained: a run's report (report_of: where the project
publishes it, in the run's own report/ folder, where `attnbench report RUN` writes it by default, or the
run folder's README.md) is copied into the site's `runs/<run>/` with the files it references, and every
link points at the copy, so the folder opens anywhere on its own. A run with no report is named, not linked,
and so is one whose report was drawn from other rows than the run holds now (rendered_from.stale).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shutil
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from attnbench.results.formulas import counted
from attnbench.results.gate import Gate
from attnbench.results.identity import short_hash
from attnbench.results.judge import TOLERANCE
from attnbench.results.steps_text import calibration_text, cells_text, others_text, what_changed
from attnbench.results.store import is_run_dir
from attnbench.results.whole import written_whole
from attnbench.results.writable import why_no_page_folder

from . import rendered_from, site_calibration, site_files, site_gate
from .page import Figure, Heading, Link, Page, Para, Table, named_reports, to_html, written_by_attnbench
from .rendered_from import Stale
from .run_rows import RunRows
from .site_findings import (
    combination_tolerance,
    contestants,
    findings,
    front_rows,
    left_out_text,
    length_names,
    named,
    range_text,
    ranked_text,
    unfinished_runs,
    unfinished_text,
    unknown_flags,
    unrecorded_text,
    with_series,
)
from .site_gate import run_cell
from .style import (
    empty_panel,
    mpl_style,
    new_figure,
    ratio_axis,
    save,
    seq_text,
    slug,
    variant_order,
)

INDEX = "index.html"
CROSS = "machines.html"
REPORT_FILES = ("report.html", "README.md")  # a run's report, the first found
RUN_FILES = ("README.md",)  # else the run folder's own page
OWN_REPORT = "report"  # a run's report in its own folder: `attnbench report RUN --out RUN/report`
# where `attnbench report RUN` writes by default (attnbench.api.report_dir: reports/out/<run id>), from the
# folder the command runs in: publish, run from the same folder, finds it there
DEFAULT_REPORTS = Path("reports") / "out"
RUNS = "runs"  # the site's own folder of the runs' reports, copied: publish owns everything in it
# in out/runs/, written by publish: the folder is publish's, to empty of what it did not copy. A runs/ folder
# without it that holds anything (`--out .` beside the user's own runs/) is never touched: publish refuses it.
SITE_MARK = ".attnbench-site"
PAGES = (".html", ".md")  # a copied file whose own references are copied too


class Published(NamedTuple):
    """What publish wrote: its pages, the index first, and the runs whose report it found and did not link,
    the report being drawn from other rows than the run holds now (rendered_from.stale)."""

    pages: list[Path]
    stale: list[Stale]


def publish(df, steps: Sequence[Any], out: Path, runs=None, limit: float | None = None) -> Published:
    """Write the site into `out` (made if missing) from a history frame (results.history.frame), its
    steps (results.steps.find) and the store's runs (results.history_runs.runs: a run with no cells is the
    latest of its sweep, MISSING what it lacks; None: the runs with cells in `df`), the pages saying what
    `history check --fail-on-step` at `limit` (a fraction; None: none given) fails on; returns the pages
    written and the stale reports left unlinked. Each run's report is copied into out/runs/ (copy_reports),
    so the folder is the whole site. The site is written whole or not at all
    (results.whole.written_whole): Ctrl-C or a failure leaves `out` as it was. Then the pages and figures
    an earlier publish wrote there that this one does not (a machine gone from the store) are removed
    (site_files), nothing else."""
    with written_whole(out, "the site") as partial:
        written, stale = _publish(df, steps, partial, runs, limit)
    names = site_files.page_files(written)
    site_files.replace(out, names)  # what the last publish wrote, and this one not
    return Published([out / path.relative_to(partial) for _, path in written], stale)


def _publish(df, steps: Sequence[Any], out: Path, runs=None, limit: float | None = None):
    """publish, into the folder `out` (a temporary one, moved into place when complete): each page written
    and its path there, and the stale reports."""
    out.mkdir(parents=True, exist_ok=True)
    reports, stale = copy_reports(df, out)
    loaded = RunRows()
    ok = df[((df["status"] == "ok") & (df["time_ms_median"] > 0)).fillna(False).astype(bool)]
    machines = sorted(str(m) for m in df["machine"].unique())
    pages = machine_pages(machines)
    # what `history check` fails on: its own decision (results.gate), at the threshold given
    gate = Gate.of(df, steps, runs, limit)
    index = Page("attnbench history")
    index.add(
        Para(
            f"{counted(df['run_id'].nunique(), 'run')} on {counted(len(machines), 'machine')}, "
            f"{counted(len(steps), 'step')} found."
        ),
        *map(Para, site_gate.sentences(gate)),
        Heading("Machines"),
        Table(
            ("machine", "runs", "series", "steps", site_gate.slower_header(gate), "broken", "missing"),
            tuple(
                (
                    (Link(m, pages[m]),),
                    str(df[df["machine"] == m]["run_id"].nunique()),
                    str(ok[ok["machine"] == m]["cell_id"].nunique()),
                    str(sum(s.machine == m for s in steps)),
                    *map(str, site_gate.count(gate, m)),
                )
                for m in machines
            ),
        ),
        Heading("Across machines"),
        Para((Link("Each variant's TFLOP/s and % of calibrated peak per machine, and who leads", CROSS),)),
        Para("(A decode step's K/V GB/s and % of the calibrated copy bandwidth there, as its report says.)"),
    )
    written = [(index, out / INDEX)]
    left = unfinished_runs(df, loaded)  # every machine's cells: a run's plan spans them all
    for m in machines:
        mine = [s for s in steps if s.machine == m]
        page = machine_page(m, df[df["machine"] == m], mine, out, reports, loaded, gate, left)
        written.append((page, out / pages[m]))
    written.append((cross_page(ok, loaded), out / CROSS))
    for page, path in written:
        _write(page, path)
    return written, stale


def _write(page: Page, path: Path) -> Path:
    path.write_text(to_html(page, path.parent), encoding="utf-8")
    return path


def _back() -> Para:
    return Para((Link("All machines", INDEX), " · ", Link("Across machines", CROSS)))


# ---- a run's report, copied into the site -----------------------------------------------------------


def report_of(run_path: str | Path, run_id: Any = None) -> Path | None:
    """The page a run links to (report.html, else README.md, in the first folder that has one): its report
    where the project publishes one (results/X/run -> reports/X/run); the report written into the run's own
    OWN_REPORT folder (`attnbench report RUN --out RUN/report`); the one `attnbench report RUN` writes by
    default, DEFAULT_REPORTS/<run_id> from the folder publish runs in, or another folder there that holds a
    report of this run alone (`attnbench report RUN --out reports/out/mine`, as the README writes it); else
    the run folder's own README.md. None where it has none of them."""
    run = Path(run_path)
    parts = run.parts
    folders = []
    if "results" in parts:
        at = len(parts) - 1 - parts[::-1].index("results")
        folders.append(Path(*parts[:at], "reports", *parts[at + 1 :]))
    folders.append(run / OWN_REPORT)
    if run_id is not None and str(run_id):
        folders.append(DEFAULT_REPORTS / slug(run_id))
        folders += named_reports(DEFAULT_REPORTS).get(str(run_id), [])
    for folder in folders:
        for name in REPORT_FILES:
            if (folder / name).is_file():
                return folder / name
    return next((run / n for n in RUN_FILES if (run / n).is_file()), None)


def site_name(run_id: Any, run_key: Any) -> str:
    """The folder of a run's report in the site's runs/: its run_id made file-name safe, and 8 hex digits of
    its store identity (run_id@created), so two runs never share one and a run keeps its own."""
    digest = hashlib.sha256(str(run_key).encode()).hexdigest()[:8]
    return f"{slug(run_id)[:80]}-{digest}"


class _Refs(HTMLParser):
    """The targets of a page's href, src and data (an <object>'s) attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found += [v for k, v in attrs if k in ("href", "src", "data") and v]


_MD_TARGET = re.compile(r"\]\(\s*<?([^)\s>]+)")  # a Markdown link's or image's target: [text](target)


def references(page: Path) -> list[str]:
    """The link and image targets a page names, as written: HTML's attributes, and in Markdown its
    [text](target) and any raw HTML in it."""
    text = page.read_text(encoding="utf-8", errors="replace")
    parser = _Refs()
    parser.feed(text)
    parser.close()
    return parser.found + (_MD_TARGET.findall(text) if page.suffix == ".md" else [])


def report_files(page: Path) -> list[Path]:
    """The report page and every file inside its folder that it references, and theirs (a page it links to),
    relative to that folder: what a copy needs. A target that is a URL, absolute, not a file, a hidden
    name, or out of the folder (`..`, a link leading out) is left out: the copy never takes anything else."""
    folder = page.parent.resolve()
    found, todo = {Path(page.name)}, [page]
    while todo:
        current = todo.pop()
        for ref in references(current):
            parts = urlsplit(ref)
            if parts.scheme or parts.netloc or not parts.path or parts.path.startswith("/"):
                continue
            target = (current.parent / unquote(parts.path)).resolve()
            if not target.is_file() or not target.is_relative_to(folder):
                continue
            rel = target.relative_to(folder)
            if rel in found or any(p.startswith(".") for p in rel.parts):
                continue
            found.add(rel)
            if target.suffix in PAGES:
                todo.append(target)
    return sorted(found)


def machine_pages(machines: Sequence[str]) -> dict[str, str]:
    """Each machine's page in the site, by machine: machine-<slug>.html."""
    return {m: f"machine-{slug(m)}.html" for m in machines}


def site_problem(out: Path, store: Path | None = None, machines: Sequence[str] = ()) -> str | None:
    """Why publish cannot write its site into `out`, else None; asked before anything is written. `out` is
    a run directory; or it holds a page of the site's names (index.html, machines.html, a page of one of
    `machines`) that attnbench did not write (reports.page.written_by_attnbench: the user's own index.html);
    or `out`/runs, the folder publish empties of what it did not copy, is a file, a link (which may lead out
    of the site), or a folder publish did not make (no SITE_MARK) that holds anything; or `out` holds the
    user's runs (a run directory in it, or in a folder in it: a run set) or the history `store`: publish
    would write its pages and figures among them; or it is named as a page's file (`--out site.html`), which
    `report` refuses alike (results.writable.why_no_page_folder)."""
    if is_run_dir(out):
        return "is a run directory; publish the site somewhere else"
    for name in (INDEX, CROSS, *machine_pages(machines).values()):
        if (out / name).exists() and not written_by_attnbench(out / name):
            return (
                f"holds a page {name} that attnbench did not write, and publish writes its own {name} there; "
                "publish the site somewhere else"
            )
    runs = out / RUNS
    what = "a link" if runs.is_symlink() else "a file" if runs.exists() and not runs.is_dir() else None
    if what:
        return f"has {RUNS} as {what}; publish keeps its copies of the runs' reports in a folder there"
    held = sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []
    if held and SITE_MARK not in held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        return (
            f"has a {RUNS}/ folder that publish did not make (it holds {shown}); publish replaces what its "
            f"{RUNS}/ holds, so publish the site somewhere else"
        )
    if store is not None and out.is_dir() and store.resolve().is_relative_to(out.resolve()):
        return f"holds the history store {store}; publish the site into a folder of its own"
    return why_no_page_folder(out, "site")  # named as a page's file (`--out site.html`), or holding runs


def copy_reports(runs, out: Path) -> tuple[dict[str, str], list[Stale]]:
    """Copy each run's report (report_of, with report_files) into out/runs/<site_name>/, anew, and remove
    whatever else out/runs holds (the copies of runs no longer in the store): publish owns that folder and
    never touches anything out of it. A report drawn from other rows than its run holds now
    (rendered_from.stale: the run was resumed or measured again since) is not copied. Returns {run path: the
    link from a page at the site's root} and the stale reports."""
    why = site_problem(out)
    if why:
        raise ValueError(f"--out {out} {why}")
    root = out / RUNS
    root.mkdir(exist_ok=True)
    (root / SITE_MARK).write_text("attnbench history publish made this folder; it replaces what it holds\n")
    links: dict[str, str] = {}
    stale: list[Stale] = []
    for _, r in runs.drop_duplicates("run_key").iterrows():
        page = report_of(str(r["path"]), r["run_id"])
        if page is None:
            continue
        if rendered_from.stale(page, r["path"], r["run_id"]):
            stale.append(Stale(str(r["run_id"]), str(r["path"]), page))
            continue
        name = site_name(r["run_id"], r["run_key"])
        dest = root / name
        _remove(dest)
        for rel in report_files(page):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            if rel.suffix in PAGES:  # its links out of its folder (docs/method.md in a checkout) lead nowhere
                text = (page.parent / rel).read_text(encoding="utf-8")
                (dest / rel).write_text(unlinked_outside(text, rel), encoding="utf-8")
            else:
                shutil.copyfile(page.parent / rel, dest / rel)
        links[str(r["path"])] = f"{RUNS}/{name}/{page.name}"
    kept = {href.split("/")[1] for href in links.values()} | {SITE_MARK}
    for entry in root.iterdir():
        if entry.name not in kept:
            _remove(entry)
    return links, stale


_OUT_HTML = re.compile(r'<a href="(\.\./[^"]*)">(.*?)</a>')  # a link up, maybe out of the report's folder
_OUT_MD = re.compile(r"(?<!!)\[([^\]]*)\]\((\.\./[^)]*)\)")


def unlinked_outside(text: str, page: Path) -> str:
    """A copied report page (`page`: its path inside the report's folder) with each link out of that folder
    (a report in the project's checkout links its docs/method.md so) as its text alone: the copy in the
    site has nothing there to lead to."""

    def out(href: str) -> bool:
        return posixpath.normpath(posixpath.join(page.parent.as_posix(), href)).startswith("..")

    text = _OUT_HTML.sub(lambda m: m[2] if out(m[1]) else m[0], text)
    return _OUT_MD.sub(lambda m: m[1] if out(m[2]) else m[0], text)


def _remove(path: Path) -> None:
    """A file or folder inside the site's runs/: a link is removed itself, never what it leads to."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


# ---- a machine's page ------------------------------------------------------------------------------


def machine_page(
    machine: str,
    df,
    steps: Sequence[Any],
    out: Path,
    reports: dict[str, str],
    loaded: RunRows | None = None,
    gate: Gate | None = None,
    left: dict[str, tuple[int, int]] | None = None,
) -> Page:
    """A machine's page; `loaded` reads its runs' own rows (the latest findings' busy machine); `gate` what
    `history check` fails on (results.gate.Gate, found in `df` and `steps` without a threshold where not
    given): said at the top, its BROKEN and MISSING series in tables, its steps marked;
    `left` the unfinished runs (site_findings.unfinished_runs over every machine's cells), which the latest
    findings pass over and the runs table marks."""
    runs = df.drop_duplicates("run_key").sort_values(["created", "run_id"], kind="stable")
    number = {key: i + 1 for i, key in enumerate(runs["run_key"])}
    ok = df[((df["status"] == "ok") & (df["time_ms_median"] > 0)).fillna(False).astype(bool)]
    page = Page(f"attnbench history: {machine}")
    said = f"{counted(len(runs), 'run')}, {ok['cell_id'].nunique()} series, {counted(len(steps), 'step')}."
    gate = gate or Gate.of(df, steps)
    page.add(_back(), Para(said), *map(Para, site_gate.sentences(gate, machine)))
    page.add(Heading("Latest findings"), *findings(ok, reports, loaded, left))
    page.add(*site_gate.blocks(gate, machine, reports))
    page.add(Heading("Every series over time"))
    page.add(
        Para(
            f"A panel per variant, a line per cell (its shape; colour: {_colour_name(ok)}, dark short, light "
            "long, named by the colour bar): each run's median time over the series' median, against the "
            "run's number on this machine (the runs table below), on one y range in every panel of a figure. "
            "A red triangle marks the first run after a step. Cells measured in one run only are counted, "
            "not drawn."
        )
    )
    for (device, dtype, pass_), group in ok.groupby(["device", "dtype", "pass"], sort=True):
        runs_of = group.groupby("cell_id")["run_key"].transform("nunique")
        once = sorted(set(group["variant"]) - set(group[runs_of >= 2]["variant"]))
        if once:
            page.add(
                Para(f"{device} {dtype} {pass_}: measured in one run only, not drawn: {', '.join(once)}.")
            )
        if len(once) < group["variant"].nunique():
            group = group[~group["variant"].isin(once)]
            files = series_figure(machine, group, steps, number, out, f"{device} {dtype} {pass_}")
            page.add(Figure(files, embed=False))
    page.add(Heading("Steps"), steps_table(steps, reports, gate))
    page.add(Heading("Runs"), runs_table(runs, df, number, reports, left))
    return page


def series_figure(machine: str, group, steps: Sequence[Any], number: dict[str, int], out: Path, title: str):
    """One small-multiple figure: a panel per variant, a line per cell over the machine's runs, coloured by
    its N (a colour bar says which), on one y range in every panel."""
    import matplotlib as mpl
    import pandas as pd
    from matplotlib.ticker import MaxNLocator

    variants = variant_order(group["variant"].unique())
    cmap = mpl.colormaps["viridis"]
    group = with_series(group)  # its colour: the length the cell's series grows, a decode cell's N_k
    lengths = sorted({int(n) for n in group["seq"]})
    shade = {n: cmap(0.85 * i / max(1, len(lengths) - 1)) for i, n in enumerate(lengths)}
    marked = {(s.cell_id, s.after.get("run_id")) for s in steps}
    data, shown = [], []
    with mpl_style():
        fig, axes = new_figure(len(variants), ncols=3, panel_h=2.4)
        drawn = []
        for ax, variant in zip(axes, variants, strict=True):
            here = len(shown)
            for cell, series in group[group["variant"] == variant].groupby("cell_id", sort=True):
                series = series.sort_values(["created", "run_id"], kind="stable")
                ys = series["time_ms_median"].astype(float)
                x = [number[k] for k in series["run_key"]]
                y = (ys / float(ys.median())).tolist()
                data += [
                    (cell, r, xi, t, yi) for r, xi, t, yi in zip(series["run_id"], x, ys, y, strict=True)
                ]
                if len(series) < 2:
                    continue
                shown += y
                ax.plot(x, y, color=shade[int(series["seq"].iloc[0])], lw=1, marker=".", ms=3)
                hits = [
                    (xi, yi) for xi, yi, r in zip(x, y, series["run_id"], strict=True) if (cell, r) in marked
                ]
                if hits:
                    ax.plot([h[0] for h in hits], [h[1] for h in hits], "v", color="#d62728", ms=7, zorder=5)
            ax.set_title(variant, fontsize=9, fontweight="bold")  # black: a pale variant colour is unreadable
            drawn.append(len(shown) > here)
        for i, (ax, has) in enumerate(zip(axes, drawn, strict=True)):
            if has:  # one range in every panel, so a step reads the same size in each
                ratio_axis(ax, min(shown), max(shown))  # labelled 0.9x, 1x, 1.25x: a step reads off it
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a run's number: no run 1.25
                ax.set_xlabel("run", fontsize=8)
                if i % 3 == 0:
                    ax.set_ylabel("time / series median", fontsize=8)
            else:
                empty_panel(ax, "every cell measured once")
        _length_bar(fig, axes, lengths, shade, _colour_name(group))
        fig.suptitle(f"{machine}: {title}", fontsize=10)
    frame = pd.DataFrame(data, columns=["cell_id", "run_id", "run", "time_ms_median", "over_series_median"])
    stem = slug("series", machine, title)
    return save(fig, frame, out, stem, f"{machine}: {title}", "Time over the series' median, per run.")


def _colour_name(cells) -> str:
    """What a series figure's colour counts (site_findings.with_series's length): N, a decode cell's N_k
    (its N_q is in its shape), 'N (N_k for a decode cell)' where both are drawn."""
    lengths = set(with_series(cells)["length"]) if len(cells) else set()
    if lengths == {"seq_k"}:
        return "N_k"
    return "N (N_k for a decode cell)" if "seq_k" in lengths else "N"


def _length_bar(fig, axes, lengths: list[int], shade: dict[int, Any], name: str) -> None:
    """A colour bar naming the N of each line's colour (dark: short, light: long); `name`: what it counts,
    _colour_name's."""
    if not lengths:
        return
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm, ListedColormap

    cmap = ListedColormap([shade[n] for n in lengths])
    norm = BoundaryNorm(range(len(lengths) + 1), cmap.N)
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, shrink=0.8, aspect=30)
    bar.set_ticks([i + 0.5 for i in range(len(lengths))], labels=[seq_text(n) for n in lengths])
    said = {"N": "sequence length N of the line", "N_k": "keys N_k of the line"}
    bar.set_label(said.get(name, "N of the line (N_k for a decode cell)"))


def steps_table(steps: Sequence[Any], reports: dict[str, str], gate: Gate | None = None) -> Any:
    """A row per step: the series, marked as `history check`'s line is (site_gate.step_badge: FAIL where
    `gate` fails on it), its size with interval, the first run after it (linked), what changed (as `history
    check`'s line says it: steps_text.what_changed), and the gate's word on it (site_gate.step_mark)."""
    if not steps:
        return Para("No step in any series of this machine.")
    gate = gate or Gate(None, tuple(steps), (), (), 0)  # without one: no threshold, steps only
    rows = []
    for s in steps:
        size = f"{s.change:+.1%}" + (f" [{s.low - 1:+.1%}, {s.high - 1:+.1%}]" if s.low == s.low else "")
        after = s.after.get("run_id") or "?"
        link = run_cell(after, s.after.get("path"), reports)
        place = f"{s.at + 1} of {s.runs}"
        if s.cells > 1:  # placed with the other cells of its variant that stepped there, its way or not
            place += f", with {cells_text(s)}"
        if s.first[0] != s.first[1]:  # the runs it may be at: the range to bisect
            place += f" (any of {s.first[0] + 1}-{s.first[1] + 1})"
        cal = calibration_text(s).removeprefix("calibration ")
        others = "unknown" if s.others is None else f"x{s.others:.2f}; this one {others_text(s)} beyond them"
        series = f"{site_gate.step_badge(gate, s)} {s.cell_id}".lstrip()  # as check's line starts
        rows.append((series, size, link, place, what_changed(s), others, cal, site_gate.step_mark(gate, s)))
    headers = (
        "series",
        "step",
        "first run after",
        "place",
        "what changed",
        "the other variants",
        "calibration",
        "the gate",
    )
    return Table(headers, tuple(rows), site_gate.steps_caption(gate))


def runs_table(runs, df, number: dict[str, int], reports: dict[str, str], left=None) -> Table:
    """A row per run: its number on the page, its report, when, its code and torch, and its cells here,
    with the cells it measured of those it planned where it is unfinished (`left`: unfinished_runs)."""
    rows = []
    cells_of = df["run_key"].value_counts()  # counted once: a comparison per run is runs x rows
    for _, r in runs.iterrows():
        cells = str(int(cells_of.get(r["run_key"], 0)))
        stopped = (left or {}).get(str(r["path"]))
        rows.append(
            (
                str(number[r["run_key"]]),
                run_cell(str(r["run_id"]), r["path"], reports),
                str(r["created"])[:19],
                _code_text(r.get("git_commit"), r.get("code_sha256")),
                str(r["torch"] or "?"),
                cells + (f" ({unfinished_text(stopped)})" if stopped else ""),
            )
        )
    return Table(("#", "run (its report)", "made", "code", "torch", "cells"), tuple(rows))


def _code_text(commit: Any, sha: Any) -> str:
    """The code a run was measured with: its commit, else its code's sha256 (a `pip install` of a folder
    records no commit), else '?'."""
    known = [v for v in (commit, sha) if isinstance(v, str) and v]
    if not known:
        return "?"
    return ("" if known[0] is commit else "sha256 ") + short_hash(known[0])


# ---- across machines -------------------------------------------------------------------------------


def latest_cells(ok):
    """Each machine's latest ok measurement of each cell, with its series across devices and dtypes
    (site_findings.with_series: its shape, and its N, a decode cell's N_k, its N_q in its shape)."""
    latest = ok.sort_values(["created", "run_id"], kind="stable").drop_duplicates(
        ["machine", "cell_id"], keep="last"
    )
    return with_series(latest, keep=3)


def cross_page(ok, loaded: RunRows | None = None) -> Page:
    """Each variant's TFLOP/s and % of calibrated peak per machine (a decode cell's K/V GB/s and % of the
    calibrated copy bandwidth: site_calibration.rate_text) at the shapes two or more machines measured, and
    which variant leads each shape where (`loaded`: the runs' own rows, for the tie rule)."""
    page = Page("attnbench history: across machines")
    page.add(_back())
    if not len(ok):
        page.add(Para("No ok cells."))
        return page
    cells = latest_cells(ok)
    machines = sorted(str(m) for m in cells["machine"].unique())
    shared = cells.groupby(["shape", "seq"])["machine"].nunique()
    keys = set(shared[shared >= 2].index)
    common = cells[[(s, n) in keys for s, n in zip(cells["shape"], cells["seq"], strict=True)]]
    page.add(
        Para(
            f"{len(keys)} shapes (every axis but device and dtype, with N; a decode shape's N_k, its N_q in "
            "the shape) measured on two or more of "
            f"{len(machines)} machines, each machine's latest run of each. TFLOP/s, and in brackets the % "
            "of the device's calibrated matmul peak for the cell's dtype (meta.json's calibration); a "
            "decode shape's K/V GB/s and the % of the device's calibrated copy bandwidth, as its run's "
            "report gives them, a decode step being bound by reading its cache, not by FLOPs. The "
            "calibrations table below gives each peak and the N of the matmul that measured it; "
            f"{site_calibration.MARK} marks a % against a smaller matmul than its device's usual one or "
            "another machine's here, which reads high beside theirs."
        )
    )
    if not keys:
        page.add(Para("No shape was measured on two machines: nothing to set side by side."))
        return page
    apart = [m for m in machines if m not in set(common["machine"])]
    if apart:
        page.add(Para(f"Measured no shape another machine measured (not shown): {', '.join(apart)}."))
    machines = [m for m in machines if m not in apart]
    loaded = loaded or RunRows()
    cals, notes = site_calibration.calibrations(common, loaded.meta)
    keys = zip(*(common[c].astype(str) for c in ("path", "where_key", "dtype")), strict=True)
    common = common.assign(cal_note=[notes[k] for k in keys])
    table, unrecorded = lead_blocks(common, machines, loaded)
    page.add(Heading("Who leads where"), table, *unrecorded, *unknown_flags(common))
    page.add(Heading("Every variant at the shared shapes"), variant_table(common, machines))
    page.add(Heading("The calibrations"), cals)
    return page


def lead_table(common, machines: list[str], loaded: RunRows) -> Table:
    """The table of lead_blocks."""
    return lead_blocks(common, machines, loaded)[0]


def lead_blocks(common, machines: list[str], loaded: RunRows) -> tuple[Table, list[Para]]:
    """Per shared shape and machine: the fastest variant with its TFLOP/s (a decode cell's K/V GB/s), and the
    variants tied with it, as the run's report ranks them (site_findings.contestants: one row per kernel, no
    variant that may have run one of theirs unrecorded, at the tolerance of the machine's cells of that shape
    here, site_findings.combination_tolerance); a suspect cell is never ranked, and is named
    (site_findings.ranked_text, the report's words); then a sentence per variant so left out
    (site_findings.unrecorded_text)."""
    common = _with_length(common)
    rows, unsure, column = [], {}, length_names(common)
    by_machine = common.groupby(["shape", "machine"], sort=True)
    tolerances = {key: combination_tolerance(sub, loaded) for key, sub in by_machine}
    for (shape, n), at in common.groupby(["shape", "seq"], sort=True):
        row: list[Any] = [shape, range_text(n, n, at["length"].iloc[0], column)]
        for m in machines:
            mine = at[at["machine"] == m]
            if not len(mine):
                row.append("-")
                continue
            ranked, suspects, left = contestants(mine, loaded)
            for picker, others in left.items():
                unsure.setdefault(picker, set()).update(others)
            ranked = ranked.sort_values("time_ms_median", kind="stable")
            if not len(ranked):
                row.append(ranked_text((), suspects, False))
                continue
            best = ranked.iloc[0]
            ties = [named(r) for r in front_rows(ranked, loaded, tolerances[(shape, m)])[1:]]
            text = f"{named(best)} {site_calibration.rate_text(best)}" + (
                f", tied with {', '.join(ties)}" if ties else ""
            )
            row.append(text + left_out_text(suspects, ranked["variant"].nunique() == 1))
        rows.append(tuple(row))
    caption = (
        f"the fastest variant, its {site_calibration.RATE_WORDS}, and the variants the report's ranking "
        f"cannot tell from it (under {TOLERANCE:.0%} slower, or more where two names of one kernel measured "
        "further apart, or not judged slower by its test; none behind a variant it can tell from it); a "
        "suspect cell (too fast to believe) is never ranked, as in the run's report, nor a variant that may "
        "have run the kernel of one beside it unrecorded"
    )
    return Table(("shape", column, *machines), tuple(rows), caption), unrecorded_text(unsure)


def _with_length(common):
    """latest_cells' rows, a frame made without their `length` (a plain N: seq_len) given it."""
    return common if "length" in common.columns else common.assign(length="seq_len")


def variant_table(common, machines: list[str]) -> Table:
    common = _with_length(common)
    rows, column = [], length_names(common)
    for (shape, n, _variant), at in common.groupby(["shape", "seq", "variant"], sort=True):
        row: list[Any] = [shape, range_text(n, n, at["length"].iloc[0], column), named(at.iloc[0])]
        for m in machines:
            mine = at[at["machine"] == m]
            row.append(site_calibration.rate_text(mine.iloc[0]) if len(mine) else "-")
        rows.append(tuple(row))
    return Table(("shape", column, "variant", *machines), tuple(rows), site_calibration.RATE_WORDS)
