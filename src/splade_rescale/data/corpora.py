"""Which datasets share a corpus, so that corpus work (encoding, impact and BM25 indexes) runs
once per corpus rather than once per query set.

MS MARCO dev, TREC DL 2019 and TREC DL 2020 are three query sets over one 8.8M-passage
corpus; keyed by dataset, the paper run would encode and index it three times per model.
Two datasets share a corpus when their documents come from the same place:

* ``ir_datasets``: the same docs store (``ir_datasets.docs_parent_id``), so
  ``msmarco-passage/dev/small`` and ``msmarco-passage/trec-dl-2019/judged`` both map to
  ``msmarco-passage``;
* ``beir_local`` / ``trec_local``: the same corpus file or folder;
* a dataset with ``subset:`` has its own corpus: the subset's documents depend on its
  queries and qrels.

Corpus names are readable (``msmarco-passage``, ``beir-fiqa``, the local folder's name, or
the dataset's name for a subset); names that would collide get a short hash of the spec.
A dataset's local files (:func:`dataset_files`) are inputs of the rules that read them.
This module imports no torch, so the Snakefile can call it at planning time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

# Keys of a dataset entry that change none of its data (documents, queries, qrels): how it is scored,
# encoded or described.
NOT_DATA = ("metrics", "note", "exclude_self", "query_max_length", "vectors_from")


def docs_store(ds_id: str) -> str:
    """The ir_datasets id that provides a dataset's documents (its docs parent)."""
    import ir_datasets

    try:
        return ir_datasets.docs_parent_id(ds_id)
    except KeyError as e:
        raise ValueError(f"ir_datasets has no dataset {ds_id!r}; see https://ir-datasets.com") from e


def corpus_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a dataset spec that determines its documents (a corpus job's parameters)."""
    if spec.get("subset"):
        return {k: v for k, v in spec.items() if k not in NOT_DATA}
    source = spec["source"]
    if source == "ir_datasets":
        return {"source": source, "id": docs_store(spec["id"])}
    if source == "beir_local":
        return {"source": source, "path": os.path.normpath(spec["path"])}
    if source == "trec_local":
        return {"source": source, "corpus": os.path.normpath(spec["corpus"])}
    raise ValueError(f"unknown dataset source {source!r}; use beir_local, trec_local or ir_datasets")


def query_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a dataset's entry that fixes its queries and qrels (not how they are scored)."""
    return {k: v for k, v in spec.items() if k not in NOT_DATA}


def _base_name(dataset: str, spec: Mapping[str, Any]) -> str:
    if spec.get("subset"):
        return dataset
    if spec["source"] == "ir_datasets":
        name = spec["id"]
    elif spec["source"] == "beir_local":
        name = Path(spec["path"]).name
    else:
        path = Path(spec["corpus"])
        stem = path.name.split(".")[0]
        name = path.parent.name if stem == "corpus" else stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or dataset


def _digest(spec: Mapping[str, Any]) -> str:
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:6]


def corpora(datasets: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """(dataset -> corpus name, corpus name -> corpus spec) for a config's ``datasets``."""
    specs = {name: corpus_spec(spec) for name, spec in datasets.items()}
    names: dict[str, set[str]] = {}  # base name -> distinct specs (as JSON) using it
    for dataset, spec in specs.items():
        base = _base_name(dataset, spec)
        names.setdefault(base, set()).add(json.dumps(spec, sort_keys=True))
    of_dataset: dict[str, str] = {}
    by_name: dict[str, dict[str, Any]] = {}
    for dataset, spec in specs.items():
        base = _base_name(dataset, spec)
        name = base if len(names[base]) == 1 else f"{base}-{_digest(spec)}"
        of_dataset[dataset] = name
        by_name[name] = spec
    return of_dataset, by_name


def dataset_files(spec: Mapping[str, Any], *parts: str) -> list[str]:
    """The local files a dataset entry reads for ``parts`` (``corpus``, ``queries``, ``qrels``), as
    they exist: inputs of the rules that read them, so an edit in place reruns exactly those.

    ir_datasets entries have none (they are keyed by their id); a file that does not exist is left
    out, so the job that reads it fails with the dataset's own message.
    """
    source = spec["source"]
    if source == "beir_local":
        folder = Path(spec["path"])
        split = spec.get("split", "test")
        candidates = {"corpus": [folder / "corpus.jsonl", folder / "corpus.jsonl.gz"],
                      "queries": [folder / "queries.jsonl", folder / "queries.jsonl.gz"],
                      "qrels": [folder / "qrels" / f"{split}.tsv", folder / "qrels" / f"{split}.tsv.gz"]}
    elif source == "trec_local":
        candidates = {part: [Path(spec[part])] if spec.get(part) else [] for part in ("corpus", "queries", "qrels")}
    else:
        return []
    files = []
    for part in parts:
        found = [str(p) for p in candidates[part] if p.is_file()]
        files += found[:1]
    return files


def corpus_files(spec: Mapping[str, Any]) -> list[str]:
    """The local files a corpus spec's documents come from (a subset's also depend on its queries and qrels)."""
    return dataset_files(spec, "corpus", "queries", "qrels") if spec.get("subset") else dataset_files(spec, "corpus")


def known_docs(spec: Mapping[str, Any]) -> int | None:
    """A corpus's document count before any download: ir_datasets' shipped metadata (None for local files,
    a subset, or an id whose metadata has no count)."""
    if spec["source"] != "ir_datasets" or spec.get("subset"):
        return None
    import ir_datasets

    try:
        return ir_datasets.load(spec["id"]).docs_count()
    except (KeyError, AttributeError):
        return None


# Documents of one encode job of a big corpus: a corpus of more is encoded as several GPU jobs over contiguous
# parts, so that the last hours of a run are shared by every GPU (3M: the shortest 8-GPU plan with the fewest
# jobs, docs/measurements.md). A constant, not a setting: the jobs then depend on the corpus alone, and no
# edit of a runtime setting or GPU count replans (and so reruns) a finished corpus's encode.
PART_DOCS = 3_000_000


def corpus_parts(spec: Mapping[str, Any]) -> int:
    """How many GPU jobs encode a corpus: one per :data:`PART_DOCS` documents of its known size; 1 when the
    size is unknown before preparation (a local corpus). Fixed when the workflow is planned: the DAG stays
    static."""
    n = known_docs(spec)
    return max(1, -(-n // PART_DOCS)) if n else 1


def part_range(total: int, part: int, parts: int) -> tuple[int, int]:
    """Documents ``[start, stop)`` of part ``part`` of ``parts``: equal contiguous ranges (a document's
    vector depends on the document alone, so any cut gives the vectors of a one-job encode)."""
    size = -(-total // parts)
    return min(total, part * size), min(total, (part + 1) * size)
