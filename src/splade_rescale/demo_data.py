"""The demo's MS MARCO collection: one small corpus shared by its DL19 and DL20 query sets.

The paper run encodes and indexes MS MARCO once per model for three query sets; the demo
keeps that shape at CPU size. Subsetting each query set on its own (``subset:``) would give
each its own corpus, so the two subsets are selected here once, their documents joined into
one corpus, and the result committed under ``resources/demo/msmarco-dl19-dl20-demo/``
(``python -m splade_rescale.demo_data`` rebuilds it byte for byte;
``tests/test_datasets.py`` checks that it does).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from splade_rescale.datasets import load_dataset, write_qrels, write_queries

REPO = Path(__file__).resolve().parents[2]
POOL = "resources/demo/msmarco-dl19-dl20-pool"
OUT = "resources/demo/msmarco-dl19-dl20-demo"
# Per query set: the subset drawn from the 28,606-passage pool (judged documents + random others).
SUBSETS = {
    "dl19": {"queries": "queries.dl19.tsv", "qrels": "qrels/qrels.dl19-passage.in-pool.txt",
             "subset": {"max_queries": 43, "max_judged_per_query": 6, "extra_docs": 100, "seed": 0}},
    "dl20": {"queries": "queries.dl20.tsv", "qrels": "qrels/qrels.dl20-passage.in-pool.txt",
             "subset": {"max_queries": 54, "max_judged_per_query": 5, "extra_docs": 100, "seed": 0}},
}


def build(root: Path = REPO, out: str | Path = OUT) -> dict[str, int]:
    """Write corpus.jsonl.gz (union of the subsets' documents, in pool order), queries and qrels."""
    out = root / out
    out.mkdir(parents=True, exist_ok=True)
    keep: set[str] = set()
    counts: dict[str, int] = {}
    for name, files in SUBSETS.items():
        spec = {"source": "trec_local", "corpus": f"{POOL}/corpus.jsonl.gz", "queries": f"{POOL}/{files['queries']}",
                "qrels": f"{POOL}/{files['qrels']}", "subset": files["subset"]}
        ds = load_dataset(name, spec, root)
        keep |= ds.doc_ids or set()
        write_queries(dict(sorted(ds.queries.items())), out / files["queries"])
        write_qrels(ds.qrels, out / f"qrels.{name}.txt")
        counts[f"{name}_queries"] = len(ds.queries)
    written = 0
    # mtime=0: no timestamp in the gzip header, so a rebuild is byte-identical
    with gzip.open(root / POOL / "corpus.jsonl.gz", "rt") as src, \
            gzip.GzipFile(out / "corpus.jsonl.gz", "wb", mtime=0) as raw:
        for line in src:
            if json.loads(line)["_id"] in keep:
                raw.write(line.encode())
                written += 1
    counts["documents"] = written
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT, help=f"folder relative to the repository (default {OUT})")
    print(build(out=parser.parse_args(argv).out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
