"""What every section of a report shares: its blocks for the figures and for the tables, apart (a page shows
every section's figures before any section's tables), and how it names its group, its files and numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .style import slug, trim_title
from .tables import GROUP_AXES, fixed_text, label, present


@dataclass
class Section:
    """One section of a report, as the page lays it out: what it shows among the figures (its headings,
    notes and figures), what it shows among the tables, and the figure files it saved. Either part may be
    empty, and an empty part adds nothing to the page, not even its heading."""

    figures: list = field(default_factory=list)
    tables: list = field(default_factory=list)
    files: list = field(default_factory=list)


def ms_text(t: Any) -> str:
    """0.893 ms, 164 ms, 1.25 s."""
    if not present(t):
        return "n/a"
    t = float(t)
    return f"{t / 1000:.3g} s" if t >= 1000 else f"{t:.3g} ms"


def num_text(v: Any, fmt: str = ".2f") -> str:
    """A number in `fmt`, or 'n/a' where it is missing or not finite."""
    return format(float(v), fmt) if present(v) and math.isfinite(float(v)) else "n/a"


def rate_text(v: Any) -> str:
    """A rate (tokens per second) in three digits: 812, 52.3k, 4.1M; 'n/a' where it is missing."""
    if not present(v) or not math.isfinite(float(v)):
        return "n/a"
    v = float(v)
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}"


def seq_count(n: Any) -> str:
    """A length with thousands separators: 4,096; beyond 2^24, as a power of two."""
    if not present(n):
        return "n/a"
    n = int(n)
    return f"{n:,}" if n <= 2**24 else f"2^{n.bit_length() - 1}"


def file_stem(gkey: dict[str, Any], multi: bool) -> str:
    """A group's file-name stem: [run-]device[-device group][-model]-dtype-pass."""
    dgroup = str(gkey["device_group"]) if present(gkey["device_group"]) else ""
    model = str(gkey["model"]) if present(gkey["model"]) else ""
    return slug(
        *([gkey["run_id"]] if multi else []),
        str(gkey["device"]),
        *([dgroup] if dgroup else []),
        *([model] if model else []),
        str(gkey["dtype"]),
        gkey["pass"],
    )


def group_head(gkey: dict[str, Any], group, multi: bool) -> str:
    """A group's section title: 'cpu · float32 · forward (d_k=64 · B=1 · H=8 · no padding)'; in a report of
    several runs, its run and the machine it ran on first ('20261126-062822-vm · NVIDIA H100 80GB HBM3 on vm
    · cuda · ...'), since a run id alone does not say which machine is which."""
    gtitle = label(gkey, [a for a in GROUP_AXES if multi or a != "run_id"])
    machines = group["machine"].dropna().unique() if multi and "machine" in group.columns else []
    if len(machines) == 1 and str(machines[0]) and str(gkey.get("run_id")) in gtitle:
        run = str(gkey["run_id"])
        gtitle = gtitle.replace(run, f"{run} · {machines[0]}", 1)
    fixed_g = fixed_text(group)
    # 'causal' said once: 'lower-right causal' beside it names the same mask with its alignment
    return trim_title(f"{gtitle} ({fixed_g})") if fixed_g else gtitle


def saved_figures(figs, out, stem: str) -> tuple[list, list]:
    """Each drawn figure (kind, title, (fig, data), caption) saved under `out` as KIND-STEM (style.save):
    the page's Figures, in order, and the files written."""
    from . import page as pg
    from .style import save

    files = [
        save(fig, data, out, f"{kind}-{stem}", title, caption) for kind, title, (fig, data), caption in figs
    ]
    return [pg.Figure(f) for f in files], files


def panel_section(figures: list, tables: list, groups_drawn, out, table, stem_of) -> Section:
    """A workload panel's section: after its own headings (`figures`, `tables`), per drawn group (gkey, rows,
    head, figs) its heading and saved figures (saved_figures, named by stem_of(gkey)) among the figures, its
    heading and table(gkey, rows) among the tables."""
    from . import page as pg

    figures, tables, files = list(figures), list(tables), []
    for gkey, group, head, figs in groups_drawn:
        drawn_figures, saved = saved_figures(figs, out, stem_of(gkey))
        figures += [pg.Heading(head, 3), *drawn_figures]
        files += saved
        tables += [pg.Heading(head, 3), table(gkey, group)]
    return Section(figures, tables, files)
