"""Shared look of every figure: stable variant colours, log₂ seq_len and byte axes, saving PNG + SVG + CSV."""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
import textwrap
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.results.formulas import bytes_text

WIDTH_IN = 10.0  # 1100 px at DPI: GitHub shows about 880 px, so text is scaled by no less than 0.8
DPI = 110

# One colour (and marker) per variant in every plot of every report, so a reader learns them once: a fixed
# colour for each built-in variant (tab10, then two of tab20b; sdpa_flash a turquoise further from sdpa's blue
# than tab10's cyan), and for any other (a plug-in) one of EXTRA_COLORS, none of which a built-in uses. Inside
# `palette(names)` (a report draws all its figures in one) the others' colours are chosen to stand apart from
# the palette's other colours (color_distance); outside, each is derived from its name.
VARIANT_COLORS = {
    "naive": "#d62728",
    "stable_softmax": "#ff7f0e",
    "unstable_softmax": "#8c564b",
    "chunked": "#2ca02c",
    "sdpa": "#1f77b4",
    "sdpa_math": "#9467bd",
    "sdpa_flash": "#00ced1",
    "sdpa_efficient": "#bcbd22",
    "sdpa_cudnn": "#e377c2",
    "xformers": "#7f7f7f",
    # after the first ten, so that their order and markers stay those of every earlier report
    "chunked_compiled": "#8c6d31",
    "flex": "#393b79",
}
# saturated enough to read on white (no pale tints of the built-ins' colours: a light grey beside xformers'
# grey, a peach beside stable_softmax's orange, read as one variant): tab20b's middle shades, then Dark2's and
# others, 20 colours, none a built-in's
EXTRA_COLORS = (
    "#5254a3",
    "#637939",
    "#843c39",
    "#7b4173",
    "#bd9e39",
    "#ad494a",
    "#a55194",
    "#6b6ecf",
    "#8ca252",
    "#d6616b",
    "#1b9e77",
    "#e7298a",
    "#e6ab02",
    "#66a61e",
    "#d95f02",
    "#7570b3",
    "#008080",
    "#b15928",
    "#000080",
    "#c51b7d",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "*")

STATUS_COLORS = {
    "ok": "#4daf4a",
    "wrong": "#e41a1c",
    "oom": "#984ea3",
    "error": "#ff7f00",
    "crashed": "#a65628",
    "timeout": "#f781bf",
    "unsupported": "#d9d9d9",
    "skipped": "#f0f0f0",
}


def _stable_index(name: str, n: int) -> int:
    # crc32, not hash(): str hashes are salted per process and colours must not change between runs
    return zlib.crc32(name.encode("utf-8", "replace")) % n


_PALETTE: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "attnbench_palette", default=None
)


def _lab(color: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of a '#rrggbb' colour."""
    rgb = [int(color.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    xyz = (
        (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883,
    )
    fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def color_distance(c1: str, c2: str) -> float:
    """CIEDE2000 ΔE between two '#rrggbb' colours (Sharma, Wu and Dalal 2005): about 2 is just noticeable,
    under about 15 two thin lines read as one colour."""
    (l1, a1, b1), (l2, a2, b2) = _lab(c1), _lab(c2)
    cb = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(cb**7 / (cb**7 + 25**7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1, b1), math.hypot(a2, b2)
    h1, h2 = math.degrees(math.atan2(b1, a1)) % 360, math.degrees(math.atan2(b2, a2)) % 360
    dh = 0.0 if c1p * c2p == 0 else (h2 - h1 + 180) % 360 - 180
    d_l, d_c = l2 - l1, c2p - c1p
    d_h = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    lb, cbp = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        hb = h1 + h2
    elif abs(h1 - h2) <= 180:
        hb = (h1 + h2) / 2
    else:
        hb = (h1 + h2 + (360 if h1 + h2 < 360 else -360)) / 2
    cos = lambda deg: math.cos(math.radians(deg))  # noqa: E731
    t = 1 - 0.17 * cos(hb - 30) + 0.24 * cos(2 * hb) + 0.32 * cos(3 * hb + 6) - 0.20 * cos(4 * hb - 63)
    rc = 2 * math.sqrt(cbp**7 / (cbp**7 + 25**7))
    rt = -math.sin(math.radians(60 * math.exp(-(((hb - 275) / 25) ** 2)))) * rc
    sl = 1 + 0.015 * (lb - 50) ** 2 / math.sqrt(20 + (lb - 50) ** 2)
    sc, sh = 1 + 0.045 * cbp, 1 + 0.015 * cbp * t
    return math.sqrt((d_l / sl) ** 2 + (d_c / sc) ** 2 + (d_h / sh) ** 2 + rt * (d_c / sc) * (d_h / sh))


def assign_colors(names: Iterable[str]) -> dict[str, str]:
    """A colour per name: a built-in's own; each other name, alphabetically, the free EXTRA_COLORS entry
    farthest (color_distance) from every colour already given, searched from the one its name hashes to,
    so no two share one while EXTRA_COLORS lasts and none sits beside a neighbour's hue (a name alone keeps
    the colour variant_color gives it anywhere)."""
    out = {n: VARIANT_COLORS[n] for n in names if n in VARIANT_COLORS}
    taken: set[int] = set()
    for name in sorted({str(n) for n in names} - set(VARIANT_COLORS)):
        i = _stable_index(name, len(EXTRA_COLORS))
        order = [(i + j) % len(EXTRA_COLORS) for j in range(len(EXTRA_COLORS))]
        free = [j for j in order if j not in taken] or order  # beyond 20 plug-ins colours repeat
        used = list(out.values())
        # max keeps the first of equals: with nothing used yet, the name's own colour
        i = max(free, key=lambda j: min((color_distance(EXTRA_COLORS[j], c) for c in used), default=0.0))
        taken.add(i)
        out[name] = EXTRA_COLORS[i]
    return out


@contextlib.contextmanager
def palette(names: Iterable[str]) -> Iterator[dict[str, str]]:
    """Inside, variant_color gives every one of `names` its own colour (assign_colors): a report opens
    it once with all its variants, so a variant has the same colour in every figure of the report."""
    token = _PALETTE.set(assign_colors([str(n) for n in names]))
    try:
        yield _PALETTE.get() or {}
    finally:
        _PALETTE.reset(token)


def variant_color(name: str) -> str:
    """The variant's colour: fixed for the built-in variants; for any other, the palette's (inside
    `palette`), else derived from the name."""
    return (
        VARIANT_COLORS.get(name)
        or (_PALETTE.get() or {}).get(name)
        or EXTRA_COLORS[_stable_index(name, len(EXTRA_COLORS))]
    )


def variant_marker(name: str) -> str:
    known = list(VARIANT_COLORS)
    i = known.index(name) if name in known else _stable_index(name, len(MARKERS))
    return MARKERS[i % len(MARKERS)]


def variant_order(names: Iterable[str]) -> list[str]:
    """Built-in variants in registry order, then any others alphabetically (the same order in every plot)."""
    names = {str(n) for n in names}
    known = [n for n in VARIANT_COLORS if n in names]
    return known + sorted(names - set(known))


def seq_text(n: int) -> str:
    """256, 1k, 64k: short tick labels for powers of two."""
    n = int(n)
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def number_text(v: float) -> str:
    """Plain tick labels for log axes (matplotlib's default ones are mathtext, which is switched off)."""
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e5:
        return f"{v:g}"
    exp = int(math.floor(math.log10(abs(v))))
    mant = v / 10**exp
    return f"1e{exp}" if abs(mant - 1) < 1e-9 else f"{mant:g}e{exp}"


def seq_axis(ax, seq_lens: Iterable[int]) -> None:
    """log₂ x axis with a tick at every seq_len of the sweep: labelled at the powers of two, unlabelled
    in between (3072 and 4096 are too close to label both); every tick labelled if fewer than two are."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ticks = sorted({int(n) for n in seq_lens})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_minor_locator(NullLocator())
    if ticks:
        labelled = [n for n in ticks if n & (n - 1) == 0]
        labelled = labelled if len(labelled) >= 2 else ticks
        ax.xaxis.set_major_locator(FixedLocator(labelled))
        ax.set_xticklabels([seq_text(n) for n in labelled])
        between = [n for n in ticks if n not in labelled]
        if between:
            ax.xaxis.set_minor_locator(FixedLocator(between))
            ax.xaxis.set_minor_formatter(NullFormatter())
        lo, hi = ticks[0], ticks[-1]
        ax.set_xlim(lo / 2**0.3, hi * 2**0.3)
    ax.set_xlabel("sequence length N (tokens, log₂ axis)")


def log_axis(ax, which: str = "y") -> None:
    """log₁₀ axis with plain-number labels at each decade."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(FuncFormatter(lambda v, _: number_text(v)))
    axis.set_minor_formatter(NullFormatter())


def bytes_axis(ax, lo: float, hi: float) -> None:
    """log₂ y axis in binary units, at most about 8 labelled powers of two between lo and hi."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_yscale("log", base=2)
    e0, e1 = math.floor(math.log2(max(lo, 1))), math.ceil(math.log2(max(hi, 2)))
    step = max(1, math.ceil((e1 - e0) / 8))
    ticks = [2.0**e for e in range(e0 - e0 % step, e1 + step, step)]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: bytes_text(v)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylim(2.0 ** (math.log2(max(lo, 1)) - 0.5), 2.0 ** (math.log2(max(hi, 2)) + 0.5))


RATIO_TICKS = (
    1 / 64,
    1 / 32,
    1 / 16,
    1 / 8,
    1 / 4,
    1 / 2,
    2 / 3,
    0.8,
    0.9,
    1.0,
    1.1,
    1.25,
    1.5,
    2.0,
    4.0,
    8.0,
    16.0,
    32.0,
    64.0,
)


def ratio_axis(ax, lo: float, hi: float) -> None:
    """log₂ y axis for ratios around 1, labelled '0.8×', '1×', '2×', at most about 9 ticks."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    lo, hi = min(lo, 0.9), max(hi, 1.1)
    ax.set_yscale("log", base=2)
    gap = max(math.log2(hi / lo) / 8, 0.12)  # fewest log₂ units between labels, so they never overlap
    ticks = [1.0]
    up = [t for t in RATIO_TICKS if 1 < t <= hi * 1.05]
    down = [t for t in RATIO_TICKS[::-1] if lo / 1.05 <= t < 1]
    for side in (up, down):
        last = 1.0
        for t in side:
            if abs(math.log2(t / last)) >= gap:
                ticks.append(t)
                last = t
    ticks.sort()
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}×"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylim(lo / 1.1, hi * 1.1)


@contextlib.contextmanager
def mpl_style() -> Iterator[None]:
    """rcParams for every figure. Mathtext is off: variant names, dtypes and run ids are data and a '$'
    in one must print as '$', not start a formula (and not crash the renderer)."""
    import matplotlib

    rc = {
        "text.parse_math": False,
        "font.size": 10,
        "axes.titlesize": 11,
        "legend.fontsize": 9,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "svg.hashsalt": "attnbench",
        # an SVG's text stays text (<text>, in the font named), not glyph outlines: selectable and searchable,
        # a third smaller, and a third less time to write (a report's SVGs were a quarter of its render)
        "svg.fonttype": "none",
        "figure.dpi": DPI,
        "figure.autolayout": False,  # lay_out() places the axes: no engine from a user's matplotlibrc
        "figure.constrained_layout.use": False,
    }
    with matplotlib.rc_context(rc):
        yield


def new_figure(n_panels: int, *, ncols: int = 2, panel_h: float = 4.2, width: float = WIDTH_IN):
    """A constrained-layout Figure (no pyplot: no GUI backend, no global figure list) and its axes."""
    from matplotlib.figure import Figure

    n = max(1, n_panels)
    ncols = 1 if n == 1 else min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig_w = width if ncols > 1 else min(width, 8.5)
    fig = Figure(figsize=(fig_w, panel_h * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def legend_below(ax, ncol: int = 2, axes=()) -> None:
    """A legend under the panel: inside, it would hide the lines that grow towards a corner. With `axes`,
    one legend for them all (each label once): a series absent from this panel is still named."""
    from matplotlib.transforms import offset_copy

    found: dict[str, Any] = {}  # label -> its first handle
    for each in (ax, *axes):
        for handle, label in zip(*each.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    labels, handles = list(found), list(found.values())
    if handles:
        # anchored a fixed distance below the axes (room for tick labels and the x label), whatever its height
        below = offset_copy(ax.transAxes, fig=ax.figure, y=-40, units="points")
        ax.legend(
            handles,
            labels,
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            bbox_transform=below,
            ncol=ncol,
            frameon=False,
        )


def coincident(series: dict[str, tuple[list[float], list[float]]], tol: float = 0.05) -> dict[str, str]:
    """{variant: how the legend says what hides it} for each series (in draw order) that another drawn
    later covers: the same x and every y within `tol` of it (on a log axis, a pixel or two apart): '= flex'
    where every y is the same, '≈ flex' where only close. Six linear-memory kernels would otherwise read as
    one line."""
    names, out = list(series), {}
    for i, v in enumerate(names):
        xv, yv = series[v]
        for w in reversed(names[i + 1 :]):  # the topmost one that covers it
            xw, yw = series[w]
            ratios = [a / b if b > 0 else math.nan for a, b in zip(yv, yw, strict=True)] if xv == xw else []
            if ratios and all(abs(r - 1) <= tol for r in ratios):  # a NaN is never within tol
                out[v] = f"{'=' if all(r == 1 for r in ratios) else '≈'} {w}"
                break
    return out


def under_text(label: str, top: str | None) -> str:
    """A legend entry, with '(= top, under it)' where another series hides this one (coincident)."""
    return label if top is None else f"{label} ({top}, under it)"


def trim_title(text: str, drop: Iterable[str] = ()) -> str:
    """A title without the parts another part repeats, 'causal' beside 'lower-right causal' (the group
    heading names both the causal axis and its alignment), nor the parts in `drop` (those that do not
    apply to the figure: 'no padding' over a figure of the padding tax)."""
    parts = {p.strip() for p in re.split(r" · |\(|\)|\n", text) if p.strip()}
    for part in parts:
        if part in drop or any(other.endswith(" " + part) for other in parts - {part}):
            word = re.escape(part)
            text = re.sub(rf"(?<=\(){word} · | · {word}(?= · |\)|\n|$)|^{word} · | \({word}\)", "", text)
    return text


def wrap_title(text: str, width: int) -> str:
    """Lines of at most about `width` characters, broken before the ' (' of the fixed axes where what comes
    before fits, then after a ' · ' (never inside a part such as 'lower-right causal'); a part longer than a
    line is broken at its spaces."""
    head, paren, rest = text.partition(" (")
    if paren and len(head) <= width and len(text) > width:
        return head + "\n" + wrap_title("(" + rest, width)
    pieces = [p for p in re.split(r"(?<= · )", text) if p]
    lines: list[str] = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(textwrap.fill(line.rstrip(), width, break_long_words=False) for line in lines)


def fit_title(fig) -> None:
    """A figure's title without repeated parts (trim_title), each line wider than the figure wrapped at
    its separators: centred, it would be cut at both edges (the group heading of a run with many axes runs
    long). Measured with the figure's renderer."""
    title = getattr(fig, "_suptitle", None)
    text = title.get_text() if title is not None else ""
    if not text:
        return
    from matplotlib.backends.backend_agg import RendererAgg

    renderer = RendererAgg(fig.bbox.width, fig.bbox.height, fig.dpi)
    room = 0.96 * fig.bbox.width
    lines = []
    for line in trim_title(text).split("\n"):
        title.set_text(line)
        width = title.get_window_extent(renderer).width
        lines.append(wrap_title(line, max(20, int(len(line) * room / width))) if width > room else line)
    title.set_text("\n".join(lines))


def ceiling_line(ax, y: float, text: str, ls: str = "-") -> None:
    """A horizontal black line at `y` (a device's memory, a calibrated bandwidth) with its label just under
    it at the panel's left edge."""
    ax.axhline(y, color="black", lw=1.2, ls=ls)
    ax.annotate(
        text,
        (0.01, y),
        xycoords=("axes fraction", "data"),
        xytext=(0, -4),
        textcoords="offset points",
        va="top",
        fontsize=9,
    )


def empty_panel(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666")


_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def slug(*parts: Any) -> str:
    """A file-name-safe stem from data strings (which may hold anything)."""
    text = "-".join(_SLUG.sub("-", str(p)).strip("-.") for p in parts if str(p))
    return text[:120] or "figure"


@dataclass(frozen=True)
class FigureFiles:
    """A saved figure: PNG and SVG beside the CSV it was drawn from (paths relative to the report)."""

    stem: str
    title: str
    caption: str
    png: str
    svg: str
    csv: str


def lay_out(fig) -> None:
    """Place every axes once, at the PNG's dpi, then take the layout engine off. With an engine, savefig
    draws each file twice (a draw that only lays out, then the one it writes): four draws for PNG + SVG,
    where one layout pass and two draws give the same picture (the SVG shares the PNG's layout; its
    positions differ from a fresh layout at 72 dpi by under a point)."""
    engine = fig.get_layout_engine()
    if engine is None:
        return
    dpi = fig.dpi
    fig.dpi = DPI
    try:
        engine.execute(fig)
    finally:
        fig.dpi = dpi
    fig.set_layout_engine(None)  # mpl_style turns rcParams' own layouts off: None is no engine


def save(fig, data, out_dir: Path, stem: str, title: str, caption: str = "") -> FigureFiles:
    """Write stem.png, stem.svg and stem.csv into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg, csv = (out_dir / f"{stem}.{ext}" for ext in ("png", "svg", "csv"))
    with mpl_style():
        fit_title(fig)
        lay_out(fig)
        fig.savefig(png, dpi=DPI)
        fig.savefig(svg, metadata={"Date": None})  # no timestamp: the same data gives the same file
    data.to_csv(csv, index=False)
    return FigureFiles(stem, title, caption, png.name, svg.name, csv.name)


def png_bytes(fig) -> bytes:
    """The figure as PNG, as save() writes it, for a notebook's output (nothing written to disk)."""
    import io

    buf = io.BytesIO()
    engine = fig.get_layout_engine()
    with mpl_style():
        fit_title(fig)
        lay_out(fig)
        try:
            fig.savefig(buf, format="png", dpi=DPI)
        finally:
            fig.set_layout_engine(engine)  # the user's figure keeps its engine: an axes added later is placed
    return buf.getvalue()
