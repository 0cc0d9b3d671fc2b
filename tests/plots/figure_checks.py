"""A figure review that a test can run: :func:`check_figure` draws a matplotlib Figure and
raises ``AssertionError`` listing every defect it finds.

What it checks, on every axes of the figure:

- **offset text**: no axis shows an offset or multiplier beside its ticks (``1e-5+9.9e-1``):
  the tick labels must read as the values;
- **log axes**: a log-scaled axis of an axes with data has at least two labelled ticks
  inside its view limits (one label cannot give a scale);
- **colour identifies a series**: where an axes' legend declares a line style as theory
  ("… (theory)", "prediction"), has labelled series (markers or lines) and unlabelled lines
  of that style without markers in a series' colour (theory beside its measurement), each
  such line lies nearer, at the series' x (log space on a log axis; horizontal lines
  by their height), to the series of its own colour than to a series of another colour;
- **legends**: every legend entry in a non-grey colour has an artist with data of that
  colour in its axes (grey and black entries are style keys: "dashed: theory");
- **dynamics** (when the caller says which dynamics the figure plots, as
  ``rankflow``'s ``dynamics.kind`` names): titles and legends name each of them, no title
  names only dynamics that are not plotted (T4 counts as gradient flow), and no title
  sets a plotted dynamics "vs" one that is not plotted;
- **no noise parameter for noiseless dynamics** (with ``dynamics``): no title sets σ
  (``σ = 0.1``, ``$\\sigma$=0``) when none of the plotted dynamics has one (rankflow's
  ``SIGMA_DYNAMICS``);
- **claims carry their numbers**: a title line with a verb that asserts an effect
  (:data:`CLAIM_VERBS`: "lowers", "reduces", "balances", "decays", "converges", "implies",
  …) is accepted only when it shows numbers and every one of them is a value the figure
  draws, at the precision the title prints it (the data of a line or collection, or a
  tick label: "numerical rank 8 → 8 at λ = 0.1"). Names are not numbers ("T4", "sv_1",
  "float64"); a derived number (a ratio, a percentage) is not accepted. A title that
  says what is plotted needs no number;
- **plurals agree**: no text reads "1 runs", "1 seeds", "2 run" (:data:`COUNTED` nouns;
  "run(s)" is fine);
- **legends cover no line**: no data line of an axes (its segments sampled every 2
  pixels in display space, its markers; not the reference levels ``axhline`` and
  ``axvline`` draw across the axes) passes inside the box of a legend drawn over that
  axes (a legend outside the axes covers nothing); the error names the axes and the
  series;
- **every panel to the run's end** (when the caller passes ``t_end``, the run's final
  time): each line of a time axes (x label "time …", "t", "step …") reaches ``t_end`` to
  within its own save interval (median spacing of its x), and the x view shows it.

:func:`capture_figures` records the figures that ``Figure.savefig`` writes while a
writer runs, so that the checks see the writers' own Figure objects.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import Collection
from matplotlib.colors import to_rgba
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

# How titles and legends name each dynamics (rankflow's dynamics.kind); longer names are
# matched first, so "stochastic gradient flow" is not also "gradient flow".
DYNAMICS_NAMES = {
    "gradient_flow": ("gradient flow", "GF", "gradient_flow"),
    "stochastic_flow": (
        "stochastic gradient flow",
        "stochastic flow",
        "stochastic GF",
        "stochastic_flow",
        "SGF",
    ),
    "momentum_flow": ("momentum flow", "momentum_flow"),
    "gd": ("GD", "gd"),
    "sgd": ("SGD", "sgd"),
    "sgd_gaussian": ("SGD, Gaussian noise", "SGD", "sgd_gaussian"),
    "momentum": ("momentum",),
    "adamw": ("AdamW", "adamw"),
    "sign_gd": ("sign descent", "sign_gd"),
    "lion": ("Lion", "lion"),
    "muon": ("Muon", "muon"),
}
# Results that are statements about one dynamics: a title citing them refers to it.
THEOREM_OF = {"T4": "gradient_flow"}


# --- capture -----------------------------------------------------------------------------


@contextlib.contextmanager
def capture_figures(monkeypatch) -> Iterator[list[Figure]]:
    """Inside the block every ``Figure.savefig`` also appends its figure (once) to the
    yielded list, then writes as before."""
    seen: list[Figure] = []
    original = Figure.savefig

    def recording(self, *args, **kwargs):
        if not any(f is self for f in seen):
            seen.append(self)
        return original(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(Figure, "savefig", recording)
        yield seen


# --- the review --------------------------------------------------------------------------


def check_figure(
    fig: Figure,
    dynamics: Iterable[str] | None = None,
    name: str = "",
    *,
    t_end: float | dict[int, float] | None = None,
) -> None:
    """Draw ``fig`` and raise ``AssertionError`` listing its defects (module docstring);
    ``dynamics``: the ``dynamics.kind`` names that the figure plots, when known;
    ``t_end``: the run's final time (its ``save.t1``, or the table's last ``t``), for
    every axes whose x axis is time, or ``{axes index: final time}`` per panel."""
    problems = figure_problems(fig, dynamics, t_end=t_end)
    if problems:
        head = f"figure {name or _suptitle(fig)[:60]!r}: {len(problems)} defect(s)"
        raise AssertionError("\n  ".join([head, *problems]))


def figure_problems(
    fig: Figure,
    dynamics: Iterable[str] | None = None,
    *,
    t_end: float | dict[int, float] | None = None,
) -> list[str]:
    """The defects of ``fig`` as lines of text (empty: none found)."""
    fig.draw_without_rendering()  # ticks, labels and offsets as a drawing sets them
    problems = []
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison:
            continue
        where = f"axes {i} {ax.get_title()[:50]!r}"
        problems += [f"{where}: {p}" for p in _offset_problems(ax)]
        problems += [f"{where}: {p}" for p in _log_tick_problems(ax)]
        problems += [f"{where}: {p}" for p in _colour_problems(ax)]
        if ax.get_legend() is not None:
            problems += [f"{where}: {p}" for p in _legend_problems(ax.get_legend(), [ax])]
            problems += [f"{where}: {p}" for p in _cover_problems(ax.get_legend(), [ax])]
    for legend in fig.legends:
        problems += [f"figure legend: {p}" for p in _legend_problems(legend, fig.axes)]
        problems += [f"figure legend: {p}" for p in _cover_problems(legend, fig.axes)]
    for i, ax, end in _time_axes(fig, t_end):
        problems += [f"axes {i} {ax.get_title()[:50]!r}: {p}" for p in _t_end_problems(ax, end)]
    problems += _claim_problems(fig) + _plural_problems(fig)
    if dynamics is not None:
        problems += _dynamics_problems(fig, set(dynamics))
        problems += _noise_problems(fig, set(dynamics))
    return problems


def _suptitle(fig: Figure) -> str:
    return fig._suptitle.get_text() if fig._suptitle is not None else ""


def _has_data(ax: Axes) -> bool:
    return any(_points(line)[0].size for line in ax.lines) or any(
        len(c.get_paths()) for c in ax.collections
    )


def _offset_problems(ax: Axes) -> list[str]:
    out = []
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        text = axis.get_offset_text().get_text() if axis.get_offset_text().get_visible() else ""
        formatter = axis.get_major_formatter()
        offset = formatter.get_offset() if hasattr(formatter, "get_offset") else ""
        if text.strip() or str(offset).strip():
            out.append(f"{name} axis shows an offset/multiplier {(text or offset)!r}")
    return out


def _labelled_ticks(axis, lo: float, hi: float) -> list[str]:
    """The texts of the axis' tick labels (major and minor) inside [lo, hi]."""
    index = 0 if axis.axis_name == "x" else 1
    texts = []
    for label in axis.get_majorticklabels() + axis.get_minorticklabels():
        pos = label.get_position()[index]
        text = label.get_text().strip()
        if text and label.get_visible() and lo * (1 - 1e-9) <= pos <= hi * (1 + 1e-9):
            texts.append(text)
    return texts


def _log_tick_problems(ax: Axes) -> list[str]:
    if not _has_data(ax):
        return []
    out = []
    for name, axis, scale in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
        if scale != "log":
            continue
        lo, hi = sorted(axis.get_view_interval())
        texts = _labelled_ticks(axis, lo, hi)
        if len(set(texts)) < 2:
            out.append(
                f"log {name} axis on [{lo:.3g}, {hi:.3g}] has {len(set(texts))} labelled "
                f"tick(s) {texts}: at least 2 needed to read values"
            )
    return out


# --- colour identifies a series ------------------------------------------------------------


def _rgb(color) -> tuple[float, float, float]:
    r, g, b, _ = to_rgba(color)
    return round(r, 3), round(g, 3), round(b, 3)


def _neutral(rgb) -> bool:
    return max(rgb) - min(rgb) < 0.05


def _no_marker(line: Line2D) -> bool:
    return line.get_marker() in (None, "None", "none", "", " ")


def _points(line: Line2D) -> tuple[np.ndarray, np.ndarray]:
    """A line's finite data points (x, y) as floats."""
    try:
        x = np.asarray(line.get_xdata(), dtype=float).ravel()
        y = np.asarray(line.get_ydata(), dtype=float).ravel()
    except (TypeError, ValueError):
        return np.array([]), np.array([])
    if x.size != y.size:
        return np.array([]), np.array([])
    ok = np.isfinite(x) & np.isfinite(y)
    return x[ok], y[ok]


def _labelled_series(ax: Axes) -> dict[tuple, list[tuple[np.ndarray, np.ndarray]]]:
    """Colour → data of the labelled series of an axes (lines with a legend label, and
    the data lines of labelled error bars)."""
    series: dict[tuple, list] = {}
    for line in ax.lines:
        if not line.get_label().startswith("_"):
            x, y = _points(line)
            if x.size:
                series.setdefault(_rgb(line.get_color()), []).append((x, y))
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer) and not str(c.get_label()).startswith("_"):
            data_line = c.lines[0]
            if data_line is not None:
                x, y = _points(data_line)
                if x.size:
                    series.setdefault(_rgb(data_line.get_color()), []).append((x, y))
    return series


def _horizontal(ax: Axes, line: Line2D) -> bool:
    """Whether ``line`` is an ``axhline`` (x in axes coordinates)."""
    return line.get_transform() != ax.transData and _points(line)[0].size == 2


def _distance(ax: Axes, theory: Line2D, x: np.ndarray, y: np.ndarray) -> float:
    """Median distance (log10 on a log y axis) from the points (x, y) to ``theory`` at
    their x; NaN when no point lies in the line's x range."""
    logy, logx = ax.get_yscale() == "log", ax.get_xscale() == "log"
    tx, ty = _points(theory)
    if _horizontal(ax, theory):
        at = np.full(x.size, ty[0])
    else:
        order = np.argsort(tx)
        tx, ty = tx[order], ty[order]
        inside = (x >= tx[0]) & (x <= tx[-1])
        x, y = x[inside], y[inside]
        if not x.size:
            return np.nan
        if logx and (tx > 0).all() and (x > 0).all():
            at = np.interp(np.log(x), np.log(tx), ty)
        else:
            at = np.interp(x, tx, ty)
    if logy:
        ok = (at > 0) & (y > 0)
        d = np.abs(np.log10(at[ok]) - np.log10(y[ok]))
    else:
        d = np.abs(at - y)
    return float(np.median(d)) if d.size else np.nan


def _theory_styles(ax: Axes) -> set[str]:
    """The line styles that the axes' legend declares as theory ("… (theory)",
    "prediction …")."""
    legend = ax.get_legend()
    if legend is None:
        return set()
    styles = set()
    for handle, text in zip(legend.legend_handles, legend.get_texts()):
        if isinstance(handle, Line2D) and re.search(r"theory|prediction", text.get_text(), re.I):
            styles.add(handle.get_linestyle())
    return styles - {"None", "none", "", " "}


def _colour_problems(ax: Axes) -> list[str]:
    styles = _theory_styles(ax)
    if not styles:
        return []
    series = _labelled_series(ax)
    colours = [c for c in series if not _neutral(c)]
    if len(colours) < 2:
        return []
    out = []
    for line in ax.lines:
        colour = _rgb(line.get_color())
        if (
            colour not in colours
            or not line.get_label().startswith("_")
            or not _no_marker(line)
            or line.get_linestyle() not in styles
            or not _points(line)[0].size
        ):
            continue
        dist = {}
        for c in colours:
            ds = [_distance(ax, line, x, y) for x, y in series[c]]
            ds = [d for d in ds if np.isfinite(d)]
            if ds:
                dist[c] = min(ds)
        if colour not in dist:
            continue
        own = dist[colour]
        nearer = {c: d for c, d in dist.items() if c != colour and d < own / 2}
        if nearer and own > 1e-12:
            other = min(nearer, key=nearer.get)
            out.append(
                f"an unlabelled line coloured {colour} lies nearer the series coloured {other} "
                f"(median distance {nearer[other]:.3g}) than its own colour's ({own:.3g}): "
                "its colour names the wrong series"
            )
    return out


# --- legends -------------------------------------------------------------------------------


def _artist_colours(ax: Axes) -> set[tuple]:
    """The colours of the artists with data in an axes."""
    colours = set()
    for line in ax.lines:
        if _points(line)[0].size:
            for c in (line.get_color(), line.get_markeredgecolor(), line.get_markerfacecolor()):
                if c is not None and str(c) not in ("none", "None"):
                    colours.add(_rgb(c))
    for coll in ax.collections:
        if isinstance(coll, Collection) and len(coll.get_paths()):
            for c in list(coll.get_facecolors()) + list(coll.get_edgecolors()):
                colours.add(_rgb(c))
    for patch in ax.patches:
        colours.add(_rgb(patch.get_facecolor()))
        colours.add(_rgb(patch.get_edgecolor()))
    return colours


def _handle_colour(handle):
    if isinstance(handle, Line2D):
        if handle.get_linestyle() in ("None", "none", "", " ") and not _no_marker(handle):
            return handle.get_markeredgecolor()
        return handle.get_color()
    if isinstance(handle, Patch):
        return handle.get_facecolor()
    if isinstance(handle, Collection) and len(handle.get_facecolors()):
        return handle.get_facecolors()[0]
    return None


def _legend_problems(legend: Legend, axes: list[Axes]) -> list[str]:
    plotted = set().union(*(_artist_colours(ax) for ax in axes)) if axes else set()
    out = []
    for handle, text in zip(legend.legend_handles, legend.get_texts()):
        colour = _handle_colour(handle)
        if colour is None:
            continue
        rgb = _rgb(colour)
        if not _neutral(rgb) and rgb not in plotted:
            out.append(
                f"legend entry {text.get_text()!r} in colour {rgb} matches no plotted artist"
            )
    return out


# --- titles: claims with their numbers, plurals, noise parameters ---------------------------

# Verbs that assert an effect: a title line using one must show the numbers that bear it out.
CLAIM_VERBS = (
    "lowers", "reduces", "raises", "increases", "decreases", "balances", "decays",
    "converges", "vanishes", "implies", "shrinks", "grows", "improves", "removes",
    "eliminates", "suppresses", "collapses", "causes", "prevents", "drives", "falls",
    "rises", "drops", "stops", "settles",
)  # fmt: skip
# A number in text: not part of a name ("T4", "sv_1", "float64", "W_Q^h").
_NUMBER = re.compile(r"(?<![A-Za-z_\d.^{])[-−]?\d+(?:\.\d+)?(?:[eE][-+−]?\d+)?(?![A-Za-z_\d])")
# Counted nouns whose plural a count must agree with.
COUNTED = ("run", "seed", "head", "path", "layer", "step", "point", "sample", "save", "λ value")
# A noise parameter set to a value: "σ = 0.1", "$\sigma$=0", "sigma=0".
_NOISE_SETTING = re.compile(r"(σ|\\sigma|\bsigma)\$?\s*=\s*\$?\s*[-−]?\d")


def _title_lines(fig: Figure) -> list[str]:
    return [line for title in _titles(fig) for line in title.split("\n") if line.strip()]


def _plotted_values(fig: Figure) -> np.ndarray:
    """Every number drawn: the data of lines and collections, and the tick labels."""
    vals = [np.array([])]
    for ax in fig.axes:
        for line in ax.lines:
            vals += list(_points(line))
        for coll in ax.collections:
            offsets = np.asarray(coll.get_offsets(), dtype=float)
            vals.append(offsets.ravel())
        for label in ax.get_xticklabels() + ax.get_yticklabels():
            vals += [np.array([_number(m)]) for m in _NUMBER.findall(label.get_text())]
    out = np.concatenate([np.ravel(v) for v in vals])
    return out[np.isfinite(out)]


def _number(text: str) -> float:
    return float(text.replace("−", "-"))


def _shown(text: str, values: np.ndarray) -> bool:
    """Whether a plotted value rounds to the number ``text`` at the precision it shows."""
    mantissa = re.split(r"[eE]", text)[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    value = _number(text)
    scale = 10.0 ** int(re.split(r"[eE]", text)[1].replace("−", "-")) if "e" in text.lower() else 1
    return bool(np.any(np.abs(values - value) <= 0.5 * 10.0**-decimals * scale * (1 + 1e-9)))


def _claim_problems(fig: Figure) -> list[str]:
    """A title line with a claim verb must carry numbers, each a value the figure draws."""
    verbs = re.compile(rf"\b({'|'.join(CLAIM_VERBS)})\b", re.I)
    values = None
    out = []
    for line in _title_lines(fig):
        verb = verbs.search(line)
        if verb is None:
            continue
        values = _plotted_values(fig) if values is None else values
        numbers = _NUMBER.findall(line)
        unshown = [n for n in numbers if not _shown(n, values)]
        if not numbers or unshown:
            why = f"{unshown} drawn nowhere in the figure" if numbers else "no number"
            out.append(
                f"title {line!r} asserts an effect ({verb.group(0)!r}) with {why}: say what "
                "is plotted, or show the measured numbers that bear the claim out"
            )
    return out


def _figure_texts(fig: Figure) -> list[str]:
    """Every visible text of the figure (titles, labels, legends, annotations, ticks)."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _plural_problems(fig: Figure) -> list[str]:
    """A count agrees with its noun: "1 runs" and "2 run" fail ("run(s)" is fine)."""
    nouns = "|".join(re.escape(n) for n in COUNTED)
    count = re.compile(rf"(?<![\d.,])(\d+)\s+({nouns})(s?)\b(?!\(s\)|\s*\d|-)")
    out = []
    for text in dict.fromkeys(_figure_texts(fig)):
        for m in count.finditer(text):
            if (m.group(1) == "1") == bool(m.group(3)):
                out.append(
                    f"text {text[:70]!r}: {m.group(0)!r} (count and noun disagree in number)"
                )
    return out


def _noise_problems(fig: Figure, plotted: set[str]) -> list[str]:
    """No noise parameter σ in a title when no plotted dynamics has one."""
    from rankflow.core.vocabulary import SIGMA_DYNAMICS

    if plotted & set(SIGMA_DYNAMICS):
        return []
    return [
        f"title {line!r} sets a noise parameter ({m.group(0)!r}) but the plotted dynamics "
        f"{sorted(plotted)} have none"
        for line in _title_lines(fig)
        for m in [_NOISE_SETTING.search(line)]
        if m
    ]


# --- legends cover no line -------------------------------------------------------------------


def _display_samples(ax: Axes, line: Line2D, step_px: float = 2.0) -> np.ndarray:
    """Display-space points along a line's drawn segments (markers: the points), every
    ``step_px`` pixels, inside the axes' box; shape (k, 2)."""
    x, y = (np.asarray(v, dtype=float).ravel() for v in (line.get_xdata(), line.get_ydata()))
    if x.size != y.size or not x.size:
        return np.empty((0, 2))
    xy = line.get_transform().transform(np.column_stack([x, y]))
    pieces = [xy[np.isfinite(xy).all(axis=1)]]
    if line.get_linestyle() not in ("None", "none", "", " "):
        a, b = xy[:-1], xy[1:]
        ok = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
        a, b = a[ok], b[ok]
        n = np.ceil(np.hypot(*(b - a).T) / step_px).astype(int) + 1
        n = np.minimum(n, 5000)
        f = np.concatenate([np.linspace(0, 1, k) for k in n]) if n.size else np.array([])
        i = np.repeat(np.arange(n.size), n)
        pieces.append(a[i] + f[:, None] * (b[i] - a[i]))
    elif _no_marker(line):
        return np.empty((0, 2))
    pts = np.concatenate(pieces)
    box = ax.bbox
    inside = (pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1)
    return pts[inside & (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1)]


def _cover_problems(legend: Legend, axes: list[Axes]) -> list[str]:
    """The data lines whose drawn points fall inside the legend's box (display space)."""
    box = legend.get_window_extent().padded(-1.0)
    out = []
    for ax in axes:
        if not ax.get_visible() or not box.overlaps(ax.bbox):
            continue
        covered = []
        for line in ax.lines:
            # Reference levels drawn across the axes (axhline, axvline) stay readable on
            # both sides of a legend: data lines only.
            if not line.get_visible() or line.get_transform() != ax.transData:
                continue
            pts = _display_samples(ax, line)
            hit = (pts[:, 0] > box.x0) & (pts[:, 0] < box.x1)
            hit &= (pts[:, 1] > box.y0) & (pts[:, 1] < box.y1)
            if hit.sum() >= 2:
                label = line.get_label()
                unlabelled = f"unlabelled line coloured {_rgb(line.get_color())}"
                covered.append(unlabelled if label.startswith("_") else label)
        if covered:
            names = sorted(set(covered))
            out.append(
                f"the legend covers {len(covered)} line(s) of axes {ax.get_title()[:40]!r}: "
                f"{names[:4]}" + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            )
    return out


# --- every panel to the run's end ---------------------------------------------------------------

# An x axis of time: the label starts with "time", "t", "step(s)" or "optimizer step".
_TIME_LABEL = re.compile(
    r"^\s*(time\b|\$?t\$?\b|steps?\b|optimi[sz]er steps?\b|training steps?\b)", re.I
)


def _time_axes(fig: Figure, t_end) -> list[tuple[int, Axes, float]]:
    """(index, axes, final time) of the axes the caller's ``t_end`` asks to check: every
    axes with a time x label for a number, the listed indices for a mapping."""
    if t_end is None:
        return []
    if isinstance(t_end, dict):
        return [(i, fig.axes[i], float(v)) for i, v in t_end.items()]
    return [(i, ax, float(t_end)) for i, ax in enumerate(fig.axes)
            if ax.get_visible() and _TIME_LABEL.search(ax.get_xlabel())]  # fmt: skip


def _t_end_problems(ax: Axes, t_end: float) -> list[str]:
    """Each line of a time axes reaches ``t_end`` to within its own save interval, and
    the view shows it. Theory drawn over a fitted window (gid ``theory…``, rankflow.plots'
    ``plot --theory`` overlays) stops at the window's end on purpose and is not a run."""
    out = []
    lo, hi = sorted(ax.get_xlim())
    for line in ax.lines:
        if str(line.get_gid() or "").startswith("theory"):
            continue
        x = np.asarray(line.get_xdata(), dtype=float).ravel()
        x = np.unique(x[np.isfinite(x)])
        if line.get_transform() != ax.transData or x.size < 2 or _no_line(line):
            continue
        dx = float(np.median(np.diff(x)))
        if t_end - x.max() > dx * (1 + 1e-9) + 1e-12 * abs(t_end):
            out.append(
                f"line {line.get_label()!r} ends at t = {x.max():g}, before the run's end "
                f"t = {t_end:g} (its save interval {dx:g})"
            )
    if hi < t_end * (1 - 1e-9) and ax.lines:
        out.append(f"the x view ends at {hi:g}, before the run's end t = {t_end:g}")
    return out


def _no_line(line: Line2D) -> bool:
    return line.get_linestyle() in ("None", "none", "", " ")


# --- dynamics in titles --------------------------------------------------------------------


def _mentions(text: str) -> set[str]:
    """The dynamics a text names (longest names first, each span counted once)."""
    names = sorted(
        ((alias, kind) for kind, aliases in DYNAMICS_NAMES.items() for alias in aliases),
        key=lambda p: -len(p[0]),
    )
    found = set()
    for alias, kind in names:
        pattern = rf"(?<![A-Za-z_]){re.escape(alias)}(?![A-Za-z_])"
        if re.search(pattern, text, re.I):
            found.add(kind)
            text = re.sub(pattern, " ", text, flags=re.I)
    return found


def _titles(fig: Figure) -> list[str]:
    return [t for t in [_suptitle(fig)] + [ax.get_title() for ax in fig.axes] if t]


def _legend_texts(fig: Figure) -> list[str]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return [t.get_text() for lg in legends + list(fig.legends) for t in lg.get_texts()]


def _dynamics_problems(fig: Figure, plotted: set[str]) -> list[str]:
    out = []
    titles = _titles(fig)
    named = set().union(*(_mentions(t) for t in titles + _legend_texts(fig)))
    for kind in sorted(plotted - named):
        out.append(f"no title or legend names the plotted dynamics {kind!r}")
    for title in titles:
        said = _mentions(title)
        cited = said | {k for t, k in THEOREM_OF.items() if re.search(rf"\b{t}\b", title)}
        if cited - plotted and not said & plotted:
            out.append(
                f"title {title!r} names {sorted(cited - plotted)}, not plotted "
                f"(plotted: {sorted(plotted)})"
            )
        if " vs " in title:
            after = _mentions(title.split(" vs ", 1)[1].split("\n")[0])
            if after - plotted:
                out.append(f"title {title!r} sets the plot against {sorted(after - plotted)}")
    return out


# --- theory lines in their measured line's colour (rankflow plot --theory) ----------------


def theory_colour_problems(fig: Figure, gid: str = "theory") -> list[str]:
    """Each line marked ``gid`` (a theory line) has the colour of the measured line it
    starts on: the labelled line of its colour exists and, at the theory line's first x,
    is the measured line nearest to it (log space on a log axis), within 1% there
    (anchored). Empty: no defect; a figure with no theory line is one."""
    fig.draw_without_rendering()
    problems, found = [], 0
    for i, ax in enumerate(fig.axes):
        measured = [
            ln
            for ln in ax.get_lines()
            if ln.get_gid() != gid and not ln.get_label().startswith("_") and len(ln.get_xdata())
        ]
        for th in (ln for ln in ax.get_lines() if ln.get_gid() == gid):
            found += 1
            x0, y0 = float(th.get_xdata()[0]), float(th.get_ydata()[0])
            if not measured:
                problems.append(f"axes {i}: a theory line but no measured line")
                continue
            gaps = [_gap_at(ax, ln, x0, y0) for ln in measured]
            nearest = measured[int(np.argmin(gaps))]
            if _rgb(nearest.get_color()) != _rgb(th.get_color()):
                problems.append(
                    f"axes {i}: theory line from x={x0:g} in {th.get_color()} starts on "
                    f"{nearest.get_label()!r}, drawn in {nearest.get_color()}"
                )
            elif min(gaps) > 0.01 * (1 if ax.get_yscale() == "log" else abs(y0)):
                problems.append(f"axes {i}: theory line from x={x0:g} not anchored on its line")
    if not found:
        problems.append("no theory line (gid 'theory') in the figure")
    return problems


def _gap_at(ax: Axes, line: Line2D, x0: float, y0: float) -> float:
    """How far ``line`` passes from ``(x0, y0)`` vertically (in log on a log axis)."""
    xs, ys = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
    y = float(np.interp(x0, xs, ys))
    return abs(np.log(y / y0)) if ax.get_yscale() == "log" else abs(y - y0)
