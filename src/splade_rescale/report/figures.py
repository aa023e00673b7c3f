"""The paper's figures (PNG for the report, PDF for print) from the per-backbone summaries.

Over 400 lines because of the label placer the scatter figures share (below); each figure is one
function.

Why these four: the head norm per backbone shows the cause; effectiveness against head norm
shows the effect; the training curves show when and how collapse happens; effectiveness
against FLOPS shows that rescaling is not bought with denser (slower) vectors. Collapsed runs
are drawn as red crosses (at 0 effectiveness) so they are never silently missing.

Point labels of the scatter figures are placed after the final layout so that no two overlap:
points that coincide on screen (e.g. ``minilm/baseline`` and ``minilm-x16/rescaled``, which start
from the same head values) share one label naming each of them; a label that cannot sit next to
its point is moved away and joined to it by a thin line.
"""

from __future__ import annotations

import json
import math
import textwrap
from itertools import product
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FuncFormatter  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from splade_rescale.atomic import atomic_file  # noqa: E402
from splade_rescale.report.provenance import provenance  # noqa: E402
from splade_rescale.report.results import Results, primary_mean  # noqa: E402
from splade_rescale.report.seed_spread import SeedSpread, over_seeds, run_collapsed  # noqa: E402
from splade_rescale.report.summary import runs_of, seeds_of  # noqa: E402
from splade_rescale.report.tables import SWEEP_POLICIES, SWEEP_TABLE, sweep_factor, sweep_shift, table_names  # noqa: E402

FIGURE_NAMES = ("head_norms", "effectiveness_vs_norm", "training_curves", "effectiveness_vs_flops")
FORMATS = ("png", "pdf")
COLLAPSE_STYLE = {"marker": "x", "color": "red", "s": 60, "zorder": 5}
FOOTER_RECT = (0, 0.04, 1, 1)  # the figure area left to the axes; the strip below holds the provenance line
POINT_LABEL = "point-label"    # gid of the scatter figures' point labels
LABEL_FONTSIZE = 6
MERGE_PT = 4.0                 # points closer than this on the page (in pt) share one label
MARKER_HALF_PT = 3.5          # half the width of a scatter marker (default size 36 pt^2)
LABEL_RADII_PT = (4, 9, 15, 22, 30, 40, 52)          # candidate distances of a label from its point ...
LABEL_ANGLES = (45, -45, 135, -135, 0, 180, 90, -90, 22.5, -22.5, 157.5, -157.5, 67.5, -67.5, 112.5, -112.5)
LEADER_FROM_PT = 15            # ... labels this far or farther from their point get a leader line


def figure_names(config: Mapping[str, Any]) -> tuple[str, ...]:
    """Figures this config produces: the factor sweep's only where its table is made."""
    return FIGURE_NAMES + ((SWEEP_TABLE,) if SWEEP_TABLE in table_names(config) else ())


def _load(paths: Iterable[str | Path]) -> dict[str, dict[str, Any]]:
    out = {}
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        out[data["backbone"]] = data
    return out


def _colors(variants: list[str]) -> dict[str, Any]:
    cmap = plt.get_cmap("tab10")
    return {v: cmap(i % 10) for i, v in enumerate(variants)}


def _row_norm(norms: Mapping[str, Any] | None) -> float | None:
    return (norms or {}).get("decoder_row_norm_mean")


def _mean_flops(datasets: Mapping[str, Mapping[str, Any]]) -> float | None:
    values = [(e.get("efficiency") or {}).get("flops") for e in datasets.values()]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _points(config: Mapping[str, Any], summaries: Mapping[str, Any], x_of) -> list[dict[str, Any]]:
    """(backbone, variant, x, y) per trained model; y is a number or ``collapsed``.

    ``x_of(variant, run)``. Over several seeds x and y are means over the seeds that did not
    collapse, and ``yerr`` their spread (:class:`splade_rescale.report.seed_spread.SeedSpread`).
    """
    points = []
    for b in config["backbones"]:
        for v in config["variants"]:
            var = summaries.get(b, {}).get("variants", {}).get(v)
            if var is None:
                continue
            runs = runs_of(var)
            x = over_seeds(runs, lambda run: x_of(var, run))
            y = over_seeds(runs, lambda run: primary_mean(config, run.get("datasets", {})))
            points.append({"backbone": b, "variant": v, "x": x.mean if isinstance(x, SeedSpread) else x,
                           "y": y.mean if isinstance(y, SeedSpread) else y,
                           "yerr": y.error() if isinstance(y, SeedSpread) and len(y.values) > 1 else None})
    return points


class Mark(NamedTuple):
    """A plotted model: data coordinates and who it is."""

    x: float
    y: float
    backbone: str
    variant: str


def _layout(fig) -> None:
    """The figure's final layout (done once: point labels are placed in it, and saving keeps it)."""
    fig.tight_layout(rect=FOOTER_RECT)


def _scatter(ax, points: list[dict[str, Any]], colors: Mapping[str, Any], xlabel: str, title: str) -> None:
    """Models as coloured points per variant; collapsed ones as red crosses at 0; unplottable ones listed.

    Lays the figure out and then labels the points (:func:`_label_points`).
    """
    unplotted, plotted = [], []
    labelled: set[str] = set()
    for p in points:
        if p["x"] is None or p["y"] is None:
            unplotted.append(f"{p['backbone']}/{p['variant']}" + (f" ({p['y']})" if isinstance(p["y"], str) else ""))
            continue
        if isinstance(p["y"], str):  # no scores: collapsed or too dense to index
            ax.scatter(p["x"], 0.0, label=None if p["y"] in labelled else p["y"], **COLLAPSE_STYLE)
            labelled.add(p["y"])
        else:
            ax.scatter(p["x"], p["y"], color=colors[p["variant"]],
                       label=None if p["variant"] in labelled else p["variant"])
            if p.get("yerr"):  # spread over seeds
                ax.errorbar(p["x"], p["y"], yerr=[[p["yerr"][0]], [p["yerr"][1]]], fmt="none",
                            ecolor=colors[p["variant"]], elinewidth=0.8, capsize=2)
            labelled.add(p["variant"])
        plotted.append(Mark(p["x"], 0.0 if isinstance(p["y"], str) else p["y"], p["backbone"], p["variant"]))
    if any(p["x"] is not None and p["x"] > 0 for p in points):
        ax.set_xscale("log")
        # plain numbers at 1, 2 and 5 x 10^k: matplotlib's default 2x10^1, 3x10^1, 4x10^1 ... collide
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(
            lambda v, _: f"{v:g}" if round(v / 10 ** math.floor(math.log10(v))) in (2, 5) else ""))
    ax.margins(0.1)  # room for the labels of the outermost points
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean primary metric over datasets")
    ax.set_title(title)
    if labelled:  # outside the axes: it can never hide a point or a label
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    if unplotted:
        ax.text(0.01, 0.99, "not plotted (no data): " + ", ".join(unplotted), transform=ax.transAxes,
                fontsize=6, va="top", wrap=True)
    _layout(ax.figure)
    _label_points(ax, plotted)


def _merge_coincident(marks: list[Mark], to_pt) -> list[tuple[list[int], str]]:
    """(indices of the marks, label text) per group of marks closer than :data:`MERGE_PT` on the page.

    A lone point is labelled with its backbone (the colour says the variant); a merged label names
    backbone/variant of each point, since one marker hides the other's colour.
    """
    pts = [to_pt(m) for m in marks]
    groups: list[list[int]] = []
    for i in range(len(marks)):
        near = [g for g in groups if any(math.dist(pts[i], pts[j]) < MERGE_PT for j in g)]
        for g in near[1:]:
            near[0].extend(g)
            groups.remove(g)
        if near:
            near[0].append(i)
        else:
            groups.append([i])
    out = []
    for g in sorted(map(sorted, groups)):
        text = marks[g[0]].backbone if len(g) == 1 else " = ".join(f"{marks[i].backbone}/{marks[i].variant}"
                                                                    for i in g)
        out.append((g, text))
    return out


def _overlap(a: Bbox, b: Bbox) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def _inside(box: Bbox, frame: Bbox) -> bool:
    return frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1


def _distance(point, box: Bbox) -> float:
    return math.hypot(max(box.x0 - point[0], 0, point[0] - box.x1), max(box.y0 - point[1], 0, point[1] - box.y1))


def _crosses(p0, p1, box: Bbox, samples: int = 24) -> bool:
    """Whether the segment p0-p1 passes through ``box`` (sampled; leader lines are short)."""
    return any(box.contains(p0[0] + (p1[0] - p0[0]) * t / samples, p0[1] + (p1[1] - p0[1]) * t / samples)
               for t in range(1, samples))


def _label_points(ax, marks: list[Mark]) -> None:
    """Label each point (or group of coinciding points) where its text overlaps no other label.

    Greedy, in plot order: the nearest free spot among :data:`LABEL_RADII_PT` x :data:`LABEL_ANGLES`,
    inside the axes, clear of placed labels and their leader lines, of other markers and of the axes'
    other texts, and (without a leader line) nearer its own point than any other; if no spot is free,
    the least bad one (overlapping a label costs most). Works in display pixels of the final layout.
    """
    if not marks:
        return
    fig = ax.figure
    fig.canvas.draw()  # final limits and text metrics
    renderer = fig.canvas.get_renderer()
    px = fig.dpi / 72.0  # pixels per point
    centres = [ax.transData.transform((m.x, m.y)) for m in marks]
    half = MARKER_HALF_PT * px
    markers = [Bbox.from_extents(x - half, y - half, x + half, y + half) for x, y in centres]
    others = [t.get_window_extent(renderer) for t in ax.texts if t.get_gid() != POINT_LABEL]
    frame = ax.get_window_extent(renderer)
    placed: list[Bbox] = []
    leaders: list[tuple[Any, Any]] = []
    for members, text in _merge_coincident(marks, lambda m: ax.transData.transform((m.x, m.y)) / px):
        probe = fig.text(0, 0, text, fontsize=LABEL_FONTSIZE)
        size = probe.get_window_extent(renderer)
        probe.remove()
        w, h = size.width + 3 * px, size.height + 3 * px  # 1.5 pt of clearance all round
        origin = centres[members[0]]
        foreign = [b for i, b in enumerate(markers) if i not in members] + others
        best = None
        for r, angle in product(LABEL_RADII_PT, LABEL_ANGLES):
            ux, uy = math.cos(math.radians(angle)), math.sin(math.radians(angle))
            ha = "left" if ux > 0.3 else "right" if ux < -0.3 else "center"
            va = "bottom" if uy > 0.3 else "top" if uy < -0.3 else "center"
            anchor = (origin[0] + ux * r * px, origin[1] + uy * r * px)
            left = anchor[0] - {"left": 0, "center": w / 2, "right": w}[ha]
            bottom = anchor[1] - {"bottom": 0, "center": h / 2, "top": h}[va]
            box = Bbox.from_bounds(left, bottom, w, h)
            leader = (origin, anchor) if r >= LEADER_FROM_PT else None
            ambiguous = not leader and any(_distance(c, box) <= _distance(origin, box) for i, c in
                                           enumerate(centres) if i not in members)
            cost = (100 * sum(_overlap(box, b) for b in placed) + sum(_overlap(box, b) for b in foreign)
                    + 300 * ambiguous
                    + (0.0 if _inside(box, frame) else w * h - _overlap(box, frame))
                    + 500 * sum(_crosses(*line, box) for line in leaders)
                    + (500 * sum(_crosses(*leader, b) for b in placed + foreign) if leader else 0))
            if best is None or cost < best[0]:
                best = (cost, r, ux, uy, ha, va, box, leader)
            if cost == 0:
                break
        _, r, ux, uy, ha, va, box, leader = best
        placed.append(box)
        if leader:
            leaders.append(leader)
        ax.annotate(text, (marks[members[0]].x, marks[members[0]].y), xytext=(ux * r, uy * r),
                    textcoords="offset points", fontsize=LABEL_FONTSIZE, ha=ha, va=va, gid=POINT_LABEL,
                    arrowprops={"arrowstyle": "-", "color": "0.55", "lw": 0.5, "shrinkA": 0, "shrinkB": 1}
                    if leader else None).set_in_layout(False)


def head_norms_figure(config: Mapping[str, Any], summaries: Mapping[str, Any]):
    backbones = [b for b in config["backbones"] if b in summaries]
    variants = list(config["variants"])
    colors = _colors(variants)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(backbones) + 2), 3.5))
    width = 0.8 / max(1, len(variants))
    for i, v in enumerate(variants):
        heights = [_row_norm(summaries[b]["variants"].get(v, {}).get("norms")) for b in backbones]
        xs = [j + (i - (len(variants) - 1) / 2) * width for j in range(len(backbones))]
        ax.bar([x for x, h in zip(xs, heights) if h is not None], [h for h in heights if h is not None],
               width=width, color=colors[v], label=v)
    ax.set_xticks(range(len(backbones)), backbones, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("decoder row L2 norm, mean (log)")
    ax.set_title("MLM-head norm at SPLADE initialisation")
    ax.legend(fontsize=8)
    _layout(fig)
    return fig


def effectiveness_vs_norm_figure(config: Mapping[str, Any], summaries: Mapping[str, Any]):
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    _scatter(ax, _points(config, summaries, lambda var, run: _row_norm(var.get("norms"))),
             _colors(list(config["variants"])), "decoder row L2 norm at initialisation, mean (log)",
             "Effectiveness against MLM-head norm")
    return fig


def effectiveness_vs_flops_figure(config: Mapping[str, Any], summaries: Mapping[str, Any]):
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    _scatter(ax, _points(config, summaries, lambda var, run: _mean_flops(run.get("datasets", {}))),
             _colors(list(config["variants"])), "FLOPS per query-document pair, mean over datasets (log)",
             "Effectiveness against FLOPS")
    return fig


CURVE_PANELS = (("loss", ("loss",), "training loss"),
                ("FLOPS", ("flops_q", "flops_d"), "FLOPS (q solid, d dashed, log)"),
                ("non-zeros", ("nnz_q", "nnz_d"), "non-zeros (q solid, d dashed, log)"))


def training_curves_figure(config: Mapping[str, Any], summaries: Mapping[str, Any]):
    backbones = [b for b in config["backbones"] if b in summaries] or ["(none)"]
    variants = list(config["variants"])
    colors = _colors(variants)
    fig, axes = plt.subplots(len(backbones), len(CURVE_PANELS), figsize=(11, 2.4 * len(backbones)),
                             squeeze=False)
    for row, b in enumerate(backbones):
        for col, (_, keys, ylabel) in enumerate(CURVE_PANELS):
            ax = axes[row][col]
            for v in variants:
                var = summaries.get(b, {}).get("variants", {}).get(v) or {}
                seeds = seeds_of(var)
                for i, run in enumerate(runs_of(var)):
                    _plot_run(ax, run, keys, v, colors[v], seeds[i] if seeds else None, first=i == 0)
            ys = [y for line in ax.get_lines() for y in line.get_ydata()]
            if keys[0] != "loss" and any(y > 0 for y in ys):
                # log: a collapse to a few terms is a decade below a healthy run, not a flat line at 0
                ax.set_yscale("log") if all(y > 0 for y in ys) else ax.set_yscale("symlog", linthresh=1.0)
            ax.set_xlabel("step", fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_title(b, fontsize=9, loc="left")
                if ax.get_lines():
                    ax.legend(fontsize=7)
    _layout(fig)
    return fig


def _plot_run(ax, run: Mapping[str, Any], keys: tuple[str, ...], variant: str, color: Any, seed: str | None,
              first: bool) -> None:
    """One training run's curves; a multi-seed variant's seeds as thin lines, labelled once."""
    curves, training = run.get("curves"), run.get("training") or {}
    if not curves:
        return
    collapsed = run_collapsed(run)
    width = 1.5 if seed is None else 0.8
    for key, style in zip(keys, ("-", "--")):
        pts = [(s, y) for s, y in zip(curves["step"], curves[key]) if s is not None and y is not None]
        if not pts:
            continue
        name = variant if seed is None else f"{variant}, seed {seed}"
        label = (f"{name} (collapsed, step {training.get('collapse_step')})" if collapsed else
                 name if seed is None else f"{variant} (each seed)" if first else None) if key == keys[0] else None
        ax.plot(*zip(*pts), style, color=color, label=label, lw=width)
        if collapsed:
            ax.scatter(*pts[-1], **COLLAPSE_STYLE)


def _factor_label(factor: float, _=None) -> str:
    return "1" if factor == 1 else f"1/{1 / factor:.3g}" if factor < 1 else f"{factor:.3g}"


def factor_sweep_figure(config: Mapping[str, Any], summaries: Mapping[str, Any]):
    """Effectiveness and non-zeros per document against the head factor, one line per backbone:
    where each head fails, where it recovers, and that the right factor depends on its norm. Variants
    that match the reference's norm (stars) or shift the logits (triangles) are points at their factor."""
    results = Results(config, [], [])
    results.summaries = dict(summaries)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    cmap = plt.get_cmap("tab10")
    for i, backbone in enumerate(b for b in config["backbones"] if b in summaries):
        color = cmap(i % 10)
        constant, matched, shifted = [], [], []
        for v, spec in config["variants"].items():
            if spec["policy"] not in SWEEP_POLICIES or (factor := sweep_factor(results, (backbone, v))) is None:
                continue
            runs = runs_of(summaries[backbone]["variants"].get(v))
            y = over_seeds(runs, lambda run: primary_mean(config, run.get("datasets", {})))
            nnz = [((r.get("training") or {}).get("last_log") or {}).get("nnz_d") for r in runs]
            nnz = [n for n in nnz if n is not None]
            point = (factor, y.mean if isinstance(y, SeedSpread) else y, sum(nnz) / len(nnz) if nnz else None, v)
            {"constant": constant, "match_reference": matched, "logit_shift": shifted}[spec["policy"]].append(point)
        constant.sort()
        for ax, idx in ((left, 1), (right, 2)):
            pts = [(f, val) for f, *vals, _ in constant if isinstance(val := vals[idx - 1], float)]
            if pts:
                ax.plot(*zip(*pts), "-o", color=color, label=backbone, ms=4)
            for f, *vals, v in matched:
                if isinstance(val := vals[idx - 1], float):
                    ax.scatter([f], [val], marker="*", s=120, color=color, edgecolor="black", lw=0.5, zorder=4,
                               label=f"{backbone}/{v} (match_reference)")
            for f, *vals, v in shifted:
                shift = sweep_shift(results, (backbone, v))
                if isinstance(val := vals[idx - 1], float):
                    ax.scatter([f], [val], marker="^", s=60, color=color, edgecolor="black", lw=0.5, zorder=4,
                               label=f"{backbone}/{v} (logit shift {shift:.3g})" if shift is not None else
                               f"{backbone}/{v} (logit shift)")
        for f, y, _, _ in constant + matched + shifted:
            if isinstance(y, str):  # collapsed: not encoded, drawn at 0 so it is never silently missing
                left.scatter([f], [0.0], **COLLAPSE_STYLE)
    left.set_ylabel("mean primary metric (nDCG@10 / MRR@10) over datasets", fontsize=8)
    left.set_title("Effectiveness against head factor (x = collapsed)", fontsize=9)
    right.set_ylabel("non-zeros per training document, end of training (log)", fontsize=8)
    right.set_title("Sparsity against head factor", fontsize=9)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(_factor_label))
        ax.set_xlabel("head factor (x1/16 = the paper's k = 16, log)", fontsize=8)
        ax.tick_params(labelsize=7)
    if any(line.get_ydata().size for line in right.get_lines()) or right.collections:
        right.set_yscale("log")
    if left.get_lines() or left.collections:
        left.legend(fontsize=7)
    _layout(fig)
    return fig


BUILDERS = {"head_norms": head_norms_figure, "effectiveness_vs_norm": effectiveness_vs_norm_figure,
            "training_curves": training_curves_figure, "effectiveness_vs_flops": effectiveness_vs_flops_figure,
            SWEEP_TABLE: factor_sweep_figure}


def render_figure(name: str, config: Mapping[str, Any], summaries: Mapping[str, Any], footer: str):
    """One figure as it is saved: laid out by its builder, the provenance line in the strip below."""
    fig = BUILDERS[name](config, summaries)
    width = int(fig.get_figwidth() * 24)  # characters of 5-pt text that fit across the figure
    fig.text(0.005, 0.002, "\n".join(textwrap.wrap(footer, width)), fontsize=5, color="0.4", va="bottom")
    return fig


def write_figures(config: Mapping[str, Any], summaries: Iterable[str | Path], out_dir: str | Path) -> list[Path]:
    """All :func:`figure_names` as PNG and PDF; each carries the provenance line at its foot."""
    data = _load(summaries)
    footer = provenance(config, data.values())
    out = Path(out_dir)
    written = []
    for name in figure_names(config):
        fig = render_figure(name, config, data, footer)
        for ext in FORMATS:
            path = out / f"{name}.{ext}"
            # no creation date: the same inputs give the same PDF bytes
            meta = {"Subject": footer, "CreationDate": None} if ext == "pdf" else {"Description": footer}
            with atomic_file(path) as tmp:
                fig.savefig(tmp, format=ext, dpi=150, metadata=meta)
            written.append(path)
        plt.close(fig)
    return written


def run_figures(config: dict, summaries: list[Path], out_dir: Path) -> list[Path]:
    """CLI stage ``splade-rescale figures``."""
    return write_figures(config, summaries, out_dir)
