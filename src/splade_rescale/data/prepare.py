"""Data preparation: the CPU jobs that download and cache data before any GPU job reads it.

The rules in ``workflow/rules/data.smk`` call these through ``splade-rescale prepare-*``:

* :func:`prepare_corpus`: an ir_datasets corpus is downloaded and its docs store built in
  ir_datasets' cache (``$IR_DATASETS_HOME``, default ``~/.ir_datasets``), one job per store;
  a local corpus (or a subset) is only counted: it has nothing to download. Either way the
  document count is written; it is the total that encode_corpus's size guard extrapolates to.
* :func:`prepare_queries`: an ir_datasets dataset's queries and qrels fetched into that cache.

An ir_datasets training source's doc pairs and queries are cached once by
:func:`splade_rescale.training.data.prepare_training_source`; its ``prepare_examples`` then writes the
examples each recipe reads to a local file.

Train and encode jobs then read only local files (ir_datasets' cache counts as local once
prepared), and no two jobs build one ir_datasets cache at once (ir_datasets takes no lock).
Nothing here imports torch: :func:`training_corpus` runs when Snakemake builds the DAG.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Mapping

from tqdm.auto import tqdm

from splade_rescale.atomic import atomic_file, write_json
from splade_rescale.data.corpora import corpus_files
from splade_rescale.digests import doc_digest, file_sha256

log = logging.getLogger(__name__)


def irds_home() -> str:
    """ir_datasets' cache folder, as a preparation record names it."""
    import ir_datasets

    return str(ir_datasets.util.home_path())


def _shipped_docs_count(ds_id: str) -> int | None:
    """An ir_datasets corpus's documents from the metadata ir_datasets ships (no download); None if unknown."""
    import ir_datasets

    try:
        return ir_datasets.load(ds_id).docs_count()
    except KeyError:
        return None


def _irds_docs_count(ds_id: str) -> int:
    """Build a dataset's docs store (downloading the corpus first) and count it.

    Stores that cannot be built ahead (no ``build``) are iterated once instead, so that the
    download and any extraction still happen here.
    """
    from splade_rescale.data.datasets import _irds

    dataset = _irds(ds_id)
    store = dataset.docs_store()
    if hasattr(store, "build"):
        store.build()  # ir_datasets shows its own progress bar
        return int(dataset.docs_count())
    return sum(1 for _ in tqdm(dataset.docs_iter(), desc=f"count {ds_id}", unit="doc", mininterval=5))


def prepare_corpus(name: str, spec: Mapping[str, Any], out: str | Path, root: str | Path = ".") -> dict[str, Any]:
    """Make a corpus's documents local and count them; write ``{"corpus", "spec", "docs", ...}`` to ``out``."""
    from splade_rescale.data.datasets import load_corpus

    t0 = time.perf_counter()
    record: dict[str, Any] = {"corpus": name, "spec": dict(spec)}
    if spec["source"] == "ir_datasets" and not spec.get("subset"):
        docs = _irds_docs_count(spec["id"])
        record["ir_datasets_home"] = irds_home()
    else:  # local files, or a subset (one pass over its corpus; ir_datasets downloads it here)
        _, docs = load_corpus(name, spec, root)
    unique_ids(spec, root)
    if not docs:
        raise ValueError(f"corpus {name}: no documents; check its dataset entry in the config")
    # local files by content: an encode resumed after an edit that keeps ids and count must not reuse shards
    record["files_sha256"] = {f: file_sha256(Path(root) / f) for f in corpus_files(spec)}
    record.update(docs=docs, seconds=round(time.perf_counter() - t0, 3))
    write_json(out, record)
    log.info("corpus %s: %d documents (%.0f s)", name, docs, record["seconds"])
    return record


def unique_ids(spec: Mapping[str, Any], root: str | Path = ".") -> int:
    """Count a corpus's documents, refusing a duplicate id in one line that names it and both places
    (a local file's line numbers, an ir_datasets store's document numbers): found here, before any
    GPU job, not by the BM25 index after every model's encode."""
    from splade_rescale.data.datasets import DatasetError, _find, _irds, _jsonl_records, _resolve

    spec = _resolve(spec, Path(root))
    if spec["source"] == "ir_datasets":
        where, unit = spec["id"], "documents"
        ids: Any = ((i, str(d.doc_id)) for i, d in enumerate(_irds(spec["id"]).docs_iter(), 1))
    else:
        path = _find(Path(spec["path"]), "corpus.jsonl", "corpus.jsonl.gz") if spec["source"] == "beir_local" \
            else Path(spec["corpus"])
        where, unit = str(path), "lines"
        ids = ((n, str(r.get("_id", r.get("id", r.get("docid")))) if isinstance(r, dict) else "")
               for n, r in _jsonl_records(path))
    seen: dict[str, int] = {}  # ~1 GB for MS MARCO's 8.8M passages
    for n, docid in ids:
        if (first := seen.setdefault(docid, n)) != n:
            raise DatasetError(f"{where}: duplicate document id {docid!r} ({unit} {first} and {n}); "
                               "deduplicate the corpus")
    return len(seen)


def prepare_queries(name: str, spec: Mapping[str, Any], out: str | Path, root: str | Path = ".") -> dict[str, Any]:
    """Fetch a dataset's queries and qrels (ir_datasets caches them); write their counts to ``out``."""
    from splade_rescale.data.datasets import load_dataset

    t0 = time.perf_counter()
    ds = load_dataset(name, spec, root)
    record = {"dataset": name, "queries": len(ds.queries), "qrels": sum(len(v) for v in ds.qrels.values()),
              "seconds": round(time.perf_counter() - t0, 3)}
    if spec["source"] == "ir_datasets":
        record["ir_datasets_home"] = irds_home()
    write_json(out, record)
    log.info("dataset %s: %d judged queries", name, record["queries"])
    return record


def prepared_docs(path: str | Path) -> int:
    """The document count a :func:`prepare_corpus` file records."""
    path = Path(path)
    try:
        return int(json.loads(path.read_text())["docs"])
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{path}: not a corpus preparation record ({e}); rerun the prepare_corpus rule") from None


def prepared_files_digest(path: str | Path) -> dict[str, str]:
    """The local corpus files' SHA-256 a :func:`prepare_corpus` file records (none for ir_datasets)."""
    return dict(json.loads(Path(path).read_text()).get("files_sha256", {}))


def model_documents(corpora: Mapping[str, Mapping[str, Any]], root: str | Path = ".") -> int:
    """Documents of all the corpora one model encodes (``name -> {"spec", "prepared"}``).

    Each count comes from its preparation file. A corpus whose preparation has not finished
    yet (an encode may start before another corpus's preparation ends) is counted from its
    local files, or for ir_datasets taken from the metadata it ships (never downloaded here);
    an ir_datasets corpus of unknown size, or a local one that cannot be read (its own jobs
    fail and say why), is left out, with a warning.
    """
    from splade_rescale.data.datasets import load_corpus

    total = 0
    for name, entry in corpora.items():
        spec, prepared = entry["spec"], Path(root) / entry["prepared"]
        if prepared.is_file():
            total += prepared_docs(prepared)
        elif spec["source"] != "ir_datasets":
            try:
                total += load_corpus(name, spec, root)[1] or 0
            except (ValueError, OSError, EOFError) as exc:  # that corpus's own jobs report it; this one goes on
                log.warning("corpus %s: not prepared yet and unreadable (%s); left out of the model's document total",
                            name, exc)
        elif not spec.get("subset") and (docs := _shipped_docs_count(spec["id"])):
            total += docs
        else:
            log.warning("corpus %s: not prepared yet and of unknown size; left out of the model's document total",
                        name)
    return total


def training_corpus(data: Mapping[str, Any], corpora: Mapping[str, Mapping[str, Any]]
                    ) -> tuple[str, dict[str, Any]] | None:
    """The corpus (name, spec) whose docs store an ir_datasets training source reads, or None.

    It is the evaluation corpus of the same store where there is one (MS MARCO's training
    triples and its dev set share ``msmarco-passage``), so one job builds that store.
    """
    from splade_rescale.data.corpora import corpus_spec

    if data.get("source") != "ir_datasets":
        return None
    if "id" not in data:
        raise ValueError("training.data: source ir_datasets needs an 'id' key, e.g. "
                         "msmarco-passage/train/triples-small")
    spec = corpus_spec({"source": "ir_datasets", "id": data["id"]})
    for name, other in corpora.items():
        if other == spec:
            return name, spec
    return "training-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", spec["id"]).strip("-"), spec


def write_corpus_digests(name: str, spec: Mapping[str, Any], out: str | Path, root: str | Path = ".") -> int:
    """CLI stage: one digest per document of a corpus, in its order, to ``out`` (atomically); the count."""
    from splade_rescale.data.datasets import load_corpus

    docs, total = load_corpus(name, spec, root, count=False)
    n = 0
    with atomic_file(out) as tmp, open(tmp, "wb") as f:
        for docid, text in tqdm(docs, total=total, desc=f"digests {name}", unit="doc", mininterval=5):
            f.write(doc_digest(docid, text))
            n += 1
    log.info("corpus %s: %d document digests", name, n)
    return n
