"""docs/datasets.md "Adding a dataset", followed literally: its config blocks and its BM25 command;
and config/README.md, the configuration docs, kept in step with config/ and the pages it links to.

The YAML and bash blocks are parsed out of docs/datasets.md, so this test breaks when the page
drifts from what the workflow accepts. The two local examples get a tiny collection each (TEST
FIXTURES, built here at the paths the page names) and run their BM25 chain in a temporary copy of
the workflow; the ir_datasets example is checked by config validation only (no network).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO
from splade_rescale.config import validate_config
from support.markdown import headings_of
from support.workflow import copy_workflow

PAGE = REPO / "docs/datasets.md"
SECTION = "## Adding a dataset"


def readme_section() -> str:
    """The SECTION of docs/datasets.md, its subsections included, up to the next heading of its level."""
    text = PAGE.read_text(encoding="utf-8")
    assert f"\n{SECTION}\n" in text, f"{PAGE.name} has no {SECTION!r} section"
    body = text[text.index(f"\n{SECTION}\n") + len(SECTION) + 2:]
    level = SECTION.index(" ")
    end = re.search(rf"^#{{1,{level}}} ", body, re.M)
    return body[:end.start()] if end else body


def dataset_blocks() -> dict[str, dict]:
    """{source: the datasets mapping of the page's block for it}."""
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", readme_section(), re.S)]
    out = {}
    for block in blocks:
        (spec,) = block["datasets"].values()
        out[spec["source"]] = block["datasets"]
    assert set(out) == {"beir_local", "trec_local", "ir_datasets"}, sorted(out)
    return out


def readme_commands() -> tuple[list[str], list[str]]:
    """The page's `cp <template> <config>` and `snakemake …` command lines, split."""
    (bash,) = re.findall(r"```bash\n(.*?)```", readme_section(), re.S)
    lines = [shlex.split(line, comments=True) for line in bash.splitlines() if line.strip()]
    (cp,) = [args for args in lines if args[0] == "cp"]
    (snake,) = [args for args in lines if args[0] == "snakemake"]
    return cp, snake


BEIR_CORPUS = [  # the first query matches only a title: the title must be indexed
    {"_id": "d1", "title": "Photosynthesis", "text": "Plants turn light into chemical energy."},
    {"_id": "d2", "title": "Volcano", "text": "Magma erupts through the crust of the earth."},
    {"_id": "d3", "title": "", "text": "The stock market closed higher after strong earnings."},
    {"_id": "d4", "title": "Glacier", "text": "Slow rivers of ice carve deep valleys."},
    {"_id": "d5", "title": "Tea", "text": "A drink brewed from the leaves of Camellia sinensis."},
]
BEIR_QUERIES = [{"_id": "q1", "text": "photosynthesis"}, {"_id": "q2", "text": "magma erupts"},
                {"_id": "q3", "text": "stock market earnings"}, {"_id": "q4", "text": "unjudged tea query"}]
BEIR_QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\nq3\td4\t0\n"

TREC_CORPUS = [  # Pyserini's id/contents keys
    {"id": "7", "contents": "Cranfield experiments on the aerodynamics of slender wings."},
    {"id": "8", "contents": "Boundary layer transition on a heated flat plate."},
    {"id": "9", "contents": "Buckling of thin cylindrical shells under axial load."},
]
TREC_TOPICS = "101\tslender wings aerodynamics\n102\tcylindrical shells buckling\n103\tnot judged\n"
TREC_QRELS = "101 0 7 2\n101 0 8 0\n102 0 9 1\n"


def build_beir(spec: dict, root: Path) -> None:
    folder = root / spec["path"]
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in BEIR_CORPUS))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in BEIR_QUERIES))
    (folder / "qrels" / f"{spec['split']}.tsv").write_text(BEIR_QRELS)


def build_trec(spec: dict, root: Path) -> None:
    corpus = root / spec["corpus"]
    for key in ("corpus", "queries", "qrels"):
        (root / spec[key]).parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(d) + "\n" for d in TREC_CORPUS)
    if corpus.suffix == ".gz":
        with gzip.open(corpus, "wt", encoding="utf-8") as f:
            f.write(lines)
    else:
        corpus.write_text(lines)
    (root / spec["queries"]).write_text(TREC_TOPICS)
    (root / spec["qrels"]).write_text(TREC_QRELS)


def test_readme_dataset_examples_run_their_bm25_chain(tmp_path: Path):
    blocks = dataset_blocks()
    (_, template, config_path), snake = readme_commands()
    root = copy_workflow(tmp_path / "work")
    (beir_name, beir_spec), = blocks["beir_local"].items()
    (trec_name, trec_spec), = blocks["trec_local"].items()
    assert "subset" not in beir_spec and "subset" not in trec_spec  # the examples use the full corpus
    build_beir(beir_spec, root)
    build_trec(trec_spec, root)

    # "cp config/demo.yaml config/my.yaml, then add the entries under its datasets:, keeping experiment: demo":
    # the BM25 targets need only the new entries
    experiment = Path(snake[1]).parts[1]  # results/<experiment>/...
    config = yaml.safe_load((root / template).read_text())
    config["experiment"] = experiment
    config["datasets"] = {**blocks["beir_local"], **blocks["trec_local"]}
    (root / config_path).write_text(yaml.safe_dump(config, sort_keys=False))
    targets = [f"results/{experiment}/metrics/bm25/{name}.json" for name in (beir_name, trec_name)]
    assert targets[0] in snake and "--configfile" in snake and config_path in snake, snake

    bin_dir = Path(sys.executable).parent  # splade-rescale, which every rule calls, lives beside python
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [*snake[:2], targets[1], *snake[2:]]  # the page's command, for both datasets
    proc = subprocess.run([sys.executable, "-m", *command], cwd=root, env=env, capture_output=True,
                          text=True, timeout=900)
    logs = "\n".join(p.read_text() for p in (root / "results" / experiment / "logs").rglob("*.log"))
    assert proc.returncode == 0, proc.stderr[-3000:] + (logs[-3000:] if proc.returncode else "")

    beir = json.loads((root / targets[0]).read_text())
    assert beir["metric_set"] == "beir" and set(beir["metrics"]) == {"nDCG@10", "R@100", "R@1000"}
    assert beir["n_queries_evaluated"] == 3      # q4 has no qrels: not run
    assert beir["per_query"]["nDCG@10"]["q1"] == 1.0  # found by its title alone
    assert beir["metrics"] == {"nDCG@10": 1.0, "R@100": 1.0, "R@1000": 1.0}
    assert "dataset_note" not in beir and beir_spec["note"]  # prose: the tables print it from the config
    trec = json.loads((root / targets[1]).read_text())
    assert trec["n_queries_evaluated"] == 2 and trec["metrics"]["nDCG@10"] == 1.0


def test_readme_ir_datasets_example_is_a_valid_config():
    import ir_datasets

    (_, template, _), _ = readme_commands()
    config = yaml.safe_load((REPO / template).read_text())
    config["datasets"] = dataset_blocks()["ir_datasets"]
    validate_config(config)
    (spec,) = config["datasets"].values()
    assert spec["id"] in ir_datasets.registry  # a real id (looked up offline, nothing downloaded)
    dataset = ir_datasets.registry[spec["id"]]
    assert dataset.has_docs() and dataset.has_queries() and dataset.has_qrels()


def test_config_readme_names_every_config_file_and_its_links_resolve():
    """Every config file is named in config/README.md, and its links resolve: the target exists
    (relative to config/) and an anchor names a heading of the .md file it points to."""
    text = (REPO / "config/README.md").read_text(encoding="utf-8")
    for path in sorted((REPO / "config").glob("*.yaml")):
        assert f"`{path.name}`" in text, f"config/README.md does not say what {path.name} is for"
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links
    for link in links:
        target, _, anchor = link.partition("#")
        path = (REPO / "config" / target).resolve() if target else REPO / "config/README.md"
        assert path.exists(), link
        assert not anchor or anchor in headings_of(path), link
