"""The paper's figures (PNG for the report, PDF for print) from the per-backbone summaries.

Why these four: the head norm per backbone shows the cause; effectiveness against head norm
shows the effect; the training curves show when and how collapse happens; effectiveness
against FLOPS shows that rescaling is not bought with denser (slower) vectors. Collapsed runs
are drawn as red crosses (at 0 effectiveness) so they are never silently missing.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Iterable, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from splade_rescale.atomic import atomic_file  # noqa: E402
from splade_rescale.tables import COLLAPSED, primary_mean, provenance  # noqa: E402

FIGURE_NAMES = ("head_norms", "effectiveness_vs_norm", "training_curves", "effectiveness_vs_flops")
FORMATS = ("png", "pdf")
COLLAPSE_STYLE = {"marker": "x", "color": "red", "s": 60, "zorder": 5}


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
    """(backbone, variant, x, y) per trained model; y is a number or ``collapsed``."""
    points = []
    for b in config["backbones"]:
        for v in config["variants"]:
            var = summaries.get(b, {}).get("variants", {}).get(v)
            if var is None:
                continue
            points.append({"backbone": b, "variant": v, "x": x_of(var),
                           "y": primary_mean(config, var.get("datasets", {}))})
    return points


def _scatter(ax, points: list[dict[str, Any]], colors: Mapping[str, Any], xlabel: str) -> None:
    """Models as coloured points per variant; collapsed ones as red crosses at 0; unplottable ones listed."""
    unplotted = []
    labelled: set[str] = set()
    for p in points:
        if p["x"] is None or p["y"] is None:
            unplotted.append(f"{p['backbone']}/{p['variant']}" + (" (collapsed)" if p["y"] == COLLAPSED else ""))
            continue
        if p["y"] == COLLAPSED:
            ax.scatter(p["x"], 0.0, label=None if "collapsed" in labelled else "collapsed", **COLLAPSE_STYLE)
            labelled.add("collapsed")
        else:
            ax.scatter(p["x"], p["y"], color=colors[p["variant"]],
                       label=None if p["variant"] in labelled else p["variant"])
            labelled.add(p["variant"])
        ax.annotate(p["backbone"], (p["x"], 0.0 if p["y"] == COLLAPSED else p["y"]), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")
    if any(p["x"] is not None and p["x"] > 0 for p in points):
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean primary metric over datasets")
    if labelled:
        ax.legend(fontsize=7)
    if unplotted:
        ax.text(0.01, 0.99, "not plotted (no data): " + ", ".join(unplotted), transform=ax.transAxes,
                fontsize=6, va="top", wrap=True)


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
    return fig


def effectiveness_vs_norm_figure(config: Mapping[str, Any], summaries: Mapping[str, Any]):
    fig, ax = plt.subplots(figsize=(5.5, 4))
    _scatter(ax, _points(config, summaries, lambda var: _row_norm(var.get("norms"))),
             _colors(list(config["variants"])), "decoder row L2 norm at initialisation, mean (log)")
    ax.set_title("Effectiveness against MLM-head norm")
    return fig


def effectiveness_vs_flops_figure(config: Mapping[str, Any], summaries: Mapping[str, Any]):
    fig, ax = plt.subplots(figsize=(5.5, 4))
    _scatter(ax, _points(config, summaries, lambda var: _mean_flops(var.get("datasets", {}))),
             _colors(list(config["variants"])), "FLOPS per query-document pair, mean over datasets (log)")
    ax.set_title("Effectiveness against FLOPS")
    return fig


CURVE_PANELS = (("loss", ("loss",), "training loss"), ("FLOPS", ("flops_q", "flops_d"), "FLOPS (q solid, d dashed)"),
                ("non-zeros", ("nnz_q", "nnz_d"), "non-zeros (q solid, d dashed)"))


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
                curves, training = var.get("curves"), var.get("training") or {}
                if not curves:
                    continue
                collapsed = training.get("status") == "collapsed"
                for key, style in zip(keys, ("-", "--")):
                    pts = [(s, y) for s, y in zip(curves["step"], curves[key]) if s is not None and y is not None]
                    if not pts:
                        continue
                    label = (f"{v} (collapsed, step {training.get('collapse_step')})" if collapsed else v) \
                        if key == keys[0] else None
                    ax.plot(*zip(*pts), style, color=colors[v], label=label)
                    if collapsed:
                        ax.scatter(*pts[-1], **COLLAPSE_STYLE)
            if keys[0] != "loss" and any(line.get_ydata().size and (line.get_ydata() > 0).any()
                                         for line in ax.get_lines()):
                ax.set_yscale("symlog", linthresh=1.0)
            ax.set_xlabel("step", fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_title(b, fontsize=9, loc="left")
                if ax.get_lines():
                    ax.legend(fontsize=7)
    return fig


BUILDERS = {"head_norms": head_norms_figure, "effectiveness_vs_norm": effectiveness_vs_norm_figure,
            "training_curves": training_curves_figure, "effectiveness_vs_flops": effectiveness_vs_flops_figure}


def write_figures(config: Mapping[str, Any], summaries: Iterable[str | Path], out_dir: str | Path) -> list[Path]:
    """All :data:`FIGURE_NAMES` as PNG and PDF; each carries the provenance line at its foot."""
    data = _load(summaries)
    footer = provenance(config)
    out = Path(out_dir)
    written = []
    for name in FIGURE_NAMES:
        fig = BUILDERS[name](config, data)
        width = int(fig.get_figwidth() * 24)  # characters of 5-pt text that fit across the figure
        fig.text(0.005, 0.002, "\n".join(textwrap.wrap(footer, width)), fontsize=5, color="0.4", va="bottom")
        fig.tight_layout(rect=(0, 0.04, 1, 1))
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
