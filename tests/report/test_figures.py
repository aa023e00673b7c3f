"""Readable scatter figures: no two point labels overlap, coinciding points share one label.

Synthetic summaries (TEST FIXTURES, not experiment output): the demo's 4 models, where
minilm/baseline and minilm-x16/rescaled start from the same head values and score alike, and the
paper's 9 backbones x 2 variants, with a cluster of rescaled models, a collapsed run and one more
coinciding pair.
"""

from __future__ import annotations

import json
import re
from itertools import combinations
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

from splade_rescale.report.figures import POINT_LABEL, render_figure, write_figures

SCATTERS = ("effectiveness_vs_norm", "effectiveness_vs_flops")
VARIANTS = {"baseline": {"policy": "constant", "factor": 1}, "rescaled": {"policy": "constant", "factor": "1/16"}}
DEMO_DATASETS = {"scifact": {"metrics": "beir"}, "dl19-pool": {"metrics": "trec-dl"},
                 "dl20-pool": {"metrics": "trec-dl"}}
PAPER_DATASETS = {"msmarco-dev": {"metrics": "msmarco"}, "dl19": {"metrics": "trec-dl"},
                  "scifact": {"metrics": "beir"}, "nfcorpus": {"metrics": "beir"}}


def variant_summary(datasets: dict, row_norm: float, primary: float | None, flops: float) -> dict:
    """One variant's summary entry; ``primary`` None = a collapsed run."""
    primary_name = {"msmarco": "MRR@10", "trec-dl": "nDCG@10", "beir": "nDCG@10"}
    entries = {}
    for i, (d, spec) in enumerate(datasets.items()):
        if primary is None:
            entries[d] = {"status": "collapsed", "metrics": None, "per_query": None}
        else:  # datasets a little apart, with the given mean
            entries[d] = {"status": "ok", "metrics": {primary_name[spec["metrics"]]: primary + 0.01 * (i - 1)},
                          "efficiency": {"flops": flops * (1 + 0.1 * (i - 1))}}
    curves = {"step": [2.0, 4.0], "loss": [1.0, 0.5], "flops_q": [1.0, 1.0], "flops_d": [2.0, 2.0],
              "nnz_q": [10.0, 9.0], "nnz_d": [50.0, 40.0]}
    return {"norms": {"decoder_row_norm_mean": row_norm}, "datasets": entries, "curves": curves,
            "training": {"status": "ok" if primary is not None else "collapsed"}}


def summaries_of(datasets: dict, models: dict) -> dict:
    """{backbone: summary} from {(backbone, variant): (row norm, mean primary metric, FLOPS)}."""
    out: dict = {}
    for (b, v), values in models.items():
        out.setdefault(b, {"backbone": b, "norms": None, "variants": {}})["variants"][v] = \
            variant_summary(datasets, *values)
    return out


def demo_case() -> tuple[dict, dict]:
    """Head norms and metric means as in the demo's printed tables (docs/demo.md) (x16 stand-in rescaled = minilm)."""
    config = {"experiment": "fixture-demo", "backbones": {"minilm": {}, "minilm-x16": {}}, "variants": VARIANTS,
              "reference_backbone": "minilm", "datasets": DEMO_DATASETS}
    models = {("minilm", "baseline"): (1.066, 0.832, 17.0), ("minilm", "rescaled"): (0.0666, 0.795, 40.0),
              ("minilm-x16", "baseline"): (17.05, 0.837, 250.0), ("minilm-x16", "rescaled"): (1.066, 0.8313, 17.0)}
    return config, summaries_of(DEMO_DATASETS, models)


PAPER_NORMS = {"bert-base-uncased": 1.4, "modernbert-base": 9.2, "modernbert-large": 11.5, "ettin-17m": 6.8,
               "ettin-32m": 7.4, "ettin-68m": 8.1, "ettin-150m": 8.9, "ettin-400m": 10.3, "ettin-1b": 11.2}


def paper_case() -> tuple[dict, dict]:
    """9 backbones x 2 variants: rescaled models bunched near 0.48 at norms 0.4-0.7, ettin-1b's baseline
    collapsed, ettin-400m and ettin-1b rescaled on the same spot."""
    config = {"experiment": "fixture-paper", "backbones": {b: {} for b in PAPER_NORMS}, "variants": VARIANTS,
              "reference_backbone": "bert-base-uncased", "datasets": PAPER_DATASETS}
    models = {}
    for i, (b, norm) in enumerate(PAPER_NORMS.items()):
        models[(b, "baseline")] = (norm, None if b == "ettin-1b" else 0.47 - 0.012 * i, 3.0 + 0.4 * i)
        models[(b, "rescaled")] = (norm / 16, 0.46 + 0.004 * i, 1.2 + 0.05 * i)
    models[("ettin-1b", "rescaled")] = models[("ettin-400m", "rescaled")]
    return config, summaries_of(PAPER_DATASETS, models)


def point_labels(fig) -> list[Text]:
    fig.canvas.draw()
    return [t for ax in fig.axes for t in ax.texts if t.get_gid() == POINT_LABEL]


def overlap_area(a, b) -> float:
    w, h = min(a.x1, b.x1) - max(a.x0, b.x0), min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


@pytest.mark.parametrize("case,figure,plotted,merged", [
    (demo_case, "effectiveness_vs_norm", 4, "minilm/baseline = minilm-x16/rescaled"),
    (demo_case, "effectiveness_vs_flops", 4, "minilm/baseline = minilm-x16/rescaled"),
    (paper_case, "effectiveness_vs_norm", 18, "ettin-400m/rescaled = ettin-1b/rescaled"),
    (paper_case, "effectiveness_vs_flops", 17, "ettin-400m/rescaled = ettin-1b/rescaled")])  # collapsed: no FLOPS
def test_point_labels_do_not_overlap_and_coincident_points_share_one(case, figure, plotted, merged):
    config, summaries = case()
    fig = render_figure(figure, config, summaries, "FIXTURE provenance line")
    labels = point_labels(fig)
    renderer = fig.canvas.get_renderer()
    boxes = [Text.get_window_extent(t, renderer) for t in labels]  # the text, not its leader line
    clashes = [(labels[i].get_text(), labels[j].get_text()) for i, j in combinations(range(len(labels)), 2)
               if overlap_area(boxes[i], boxes[j]) > 0]
    assert not clashes, clashes
    page = fig.bbox
    assert all(page.x0 <= b.x0 and b.x1 <= page.x1 and page.y0 <= b.y0 and b.y1 <= page.y1
               for b in boxes), "a label is cut off at the figure's edge"
    ax = labels[0].axes
    ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)
             if t.get_visible() and t.get_text() and ax.xaxis.get_view_interval()[0] <= t.get_position()[0]
             <= ax.xaxis.get_view_interval()[1]]
    assert ticks and not any(overlap_area(a, b) > 0 for a, b in combinations(ticks, 2)), "x tick labels collide"
    # one merged label for the coinciding pair, one label for every other plotted point
    texts = [t.get_text() for t in labels]
    assert [t for t in texts if " = " in t] == [merged]
    assert len(labels) == plotted - 1
    named = sorted(part.split("/")[0] for t in texts for part in t.split(" = "))
    assert len(named) == plotted and set(named) == set(config["backbones"])


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height in pixels, from the PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _pdf_page(path: Path) -> tuple[float, float]:
    """Width and height in points of the PDF's one page."""
    (box,) = re.findall(rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", path.read_bytes())
    return float(box[0]), float(box[1])


def _legend(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def test_write_figures_keeps_the_labelled_layout(tmp_path: Path, monkeypatch):
    """The saved files are the rendered figures, laid out and labelled: each figure saved (PNG and
    PDF) is captured as it is written and its panels, titles, axis labels, ticks, legends and point
    labels are those of the paper fixture's 9 backbones x 2 variants."""
    config, summaries = paper_case()
    paths = []
    for b, summary in summaries.items():
        paths.append(tmp_path / f"summary/{b}.json")
        paths[-1].parent.mkdir(exist_ok=True)
        paths[-1].write_text(json.dumps(summary))
    saved: dict[str, list] = {}
    placed: dict[int, list[tuple[str, object]]] = {}  # id(figure) -> its point labels and their boxes
    real_savefig = Figure.savefig

    def capture(fig, fname, *args, **kwargs):
        before = [ax.get_position().bounds for ax in fig.axes]
        real_savefig(fig, fname, *args, **kwargs)
        assert [ax.get_position().bounds for ax in fig.axes] == before, "saving moved the panels"
        saved.setdefault(kwargs["format"], []).append(fig)
        if kwargs["format"] == "png":  # as drawn by the saving canvas, before the figure is closed
            labels = point_labels(fig)
            renderer = fig.canvas.get_renderer()
            placed[id(fig)] = [(t.get_text(), Text.get_window_extent(t, renderer)) for t in labels]

    monkeypatch.setattr(Figure, "savefig", capture)
    written = write_figures(config, paths, tmp_path / "figures")
    names = ("head_norms", "effectiveness_vs_norm", "training_curves", "effectiveness_vs_flops")
    assert written == [tmp_path / f"figures/{n}.{ext}" for n in names for ext in ("png", "pdf")]
    assert saved["png"] == saved["pdf"] and len(saved["png"]) == 4  # one figure, saved twice
    figs = dict(zip(names, saved["png"]))
    backbones = list(PAPER_NORMS)
    variants = ["baseline", "rescaled"]

    for name, fig in figs.items():
        # the whole page at 150 dpi (PNG) and 72 pt per inch (PDF): nothing cropped after the layout
        w, h = fig.get_size_inches()
        assert _png_size(tmp_path / f"figures/{name}.png") == (round(w * 150), round(h * 150)), name
        assert _pdf_page(tmp_path / f"figures/{name}.pdf") == pytest.approx((w * 72, h * 72)), name
        assert (tmp_path / f"figures/{name}.png").stat().st_size > 10_000
        (footer,) = fig.texts  # the provenance line at the foot
        assert footer.get_text().startswith("Made by config 'fixture-paper' (sha256 of its experiment, backbones, ")

    # head norms: one panel, a pair of bars per backbone at the fixture's norms (rescaled = norm / 16;
    # ettin-1b's rescaled model sits on ettin-400m's, 10.3 / 16)
    (ax,) = figs["head_norms"].axes
    assert ax.get_title() == "MLM-head norm at SPLADE initialisation"
    assert ax.get_ylabel() == "decoder row L2 norm, mean (log)" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == backbones
    assert _legend(ax) == variants
    norms = list(PAPER_NORMS.values())
    assert [p.get_height() for p in ax.patches] == pytest.approx(norms + [n / 16 for n in norms[:-1]] + [10.3 / 16])

    # the two scatters: one panel each, the collapsed ettin-1b baseline a cross on the norm axis and
    # left out of the FLOPS one (it has no FLOPS), the coinciding rescaled pair under one label
    for name, title, xlabel, legend, labelled in (
            ("effectiveness_vs_norm", "Effectiveness against MLM-head norm",
             "decoder row L2 norm at initialisation, mean (log)", variants + ["collapsed"], 18),
            ("effectiveness_vs_flops", "Effectiveness against FLOPS",
             "FLOPS per query-document pair, mean over datasets (log)", variants, 17)):
        fig = figs[name]
        (ax,) = fig.axes
        assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == (
            title, xlabel, "mean primary metric over datasets"), name
        assert ax.get_xscale() == "log" and _legend(ax) == legend, name
        labels = placed[id(fig)]
        # a label per plotted point, by backbone; the coinciding pair under one
        expected = sorted([b for b in backbones for _ in variants if b not in ("ettin-400m", "ettin-1b")]
                          + ["ettin-400m", "ettin-400m/rescaled = ettin-1b/rescaled"]
                          + (["ettin-1b"] if labelled == 18 else []))
        assert sorted(text for text, _ in labels) == expected and len(expected) == labelled - 1, name
        assert all(box.width > 0 and box.height > 0 for _, box in labels), name  # drawn, not empty
        assert not [(a, b) for (a, box_a), (b, box_b) in combinations(labels, 2) if overlap_area(box_a, box_b) > 0]
        page = fig.bbox
        assert all(page.x0 <= b.x0 and b.x1 <= page.x1 and page.y0 <= b.y0 and b.y1 <= page.y1
                   for _, b in labels), f"{name}: a label is cut off at the figure's edge"
    notes = [t.get_text() for t in figs["effectiveness_vs_flops"].axes[0].texts if t.get_gid() != POINT_LABEL]
    assert notes == ["not plotted (no data): ettin-1b/baseline (collapsed)"]

    # training curves: a row per backbone, loss / FLOPS / non-zeros columns; a legend in the first
    axes = figs["training_curves"].axes
    assert len(axes) == 9 * 3
    rows = [axes[3 * i:3 * i + 3] for i in range(9)]
    assert [row[0].get_title(loc="left") for row in rows] == backbones
    for b, row in zip(backbones, rows):
        assert [ax.get_ylabel() for ax in row] == [
            "training loss", "FLOPS (q solid, d dashed, log)", "non-zeros (q solid, d dashed, log)"], b
        assert [ax.get_xlabel() for ax in row] == ["step"] * 3
        assert [ax.get_yscale() for ax in row] == ["linear", "log", "log"], b
        first, *rest = map(_legend, row)
        assert rest == [[], []]
        if b == "ettin-1b":  # its baseline collapsed: said in the legend
            assert first[0].startswith("baseline (collapsed") and first[1:] == ["rescaled"]
        else:
            assert first == variants, b
