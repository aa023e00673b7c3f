"""Evaluation and training collections: streamed corpora, queries, qrels, deterministic subsets.

About 400 lines: one reader per source kind, which the subsets and the BEIR conventions share.

Sources (the ``datasets:`` / ``training.data`` specs of the config):

* ``beir_local``: ``path`` to a BEIR folder (``corpus.jsonl[.gz]`` with ``_id,title,text``,
  ``queries.jsonl``, ``qrels/{split}.tsv`` with a header line);
* ``trec_local``: ``corpus`` (JSONL[.gz], BEIR keys or ``id``/``contents``), ``queries``
  (``qid<TAB>text``, optionally .gz) and ``qrels`` (TREC ``qid 0 docid rel``);
* ``ir_datasets``: ``id`` such as ``msmarco-passage/dev/small`` or ``beir/scifact/test``.

Document text = ``title + " " + text`` when there is a title (the BEIR/Pyserini "flat"
convention), else ``text``. Only queries that have qrels are kept (a BEIR query file holds
every split's queries; DL20's topic file holds 200 queries of which 54 are judged). Qrels
that name a query missing from the query file are dropped with a warning and counted in
``Dataset.stats`` (some BEIR sets have them; such a query cannot be run). Empty documents
are kept (they are part of the real corpora) and counted.

``exclude_self`` (default: on for ``metrics: beir``, off otherwise) drops a document whose id
equals the query id from that query's run and from its evaluation (see :func:`default_exclude_self`).
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import heapq
import io
import json
import logging
import random
from pathlib import Path
from typing import Any, Iterator, Mapping

log = logging.getLogger(__name__)

Qrels = dict[str, dict[str, int]]  # qid -> docid -> grade


class DatasetError(ValueError):
    """A malformed or inconsistent input file; the message names the file, line and fix."""


def _open_text(path: Path) -> io.TextIOBase:
    if not path.exists():
        raise DatasetError(f"{path}: file not found; check the dataset's path in the config")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def doc_text(title: str | None, text: str | None) -> str:
    """Text to encode/index: ``title + " " + text`` if there is a title, else ``text``."""
    title, text = (title or "").strip(), text or ""
    return f"{title} {text}" if title and text else title or text


# ---------------------------------------------------------------------------- local readers


def _find(folder: Path, *names: str) -> Path:
    for n in names:
        if (folder / n).exists():
            return folder / n
    raise DatasetError(f"{folder}: none of {', '.join(names)} found; check the dataset path")


def _jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed record) of each non-blank line; bad JSON names the file and line."""
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}:{lineno}: invalid JSON ({e.msg}); fix or remove that line") from e
            yield lineno, rec


def _iter_jsonl_corpus(path: Path) -> Iterator[tuple[str, str]]:
    for lineno, rec in _jsonl_records(path):
        if not isinstance(rec, dict):
            raise DatasetError(f"{path}:{lineno}: expected a JSON object per line")
        docid = rec.get("_id", rec.get("id", rec.get("docid")))
        if docid is None:
            raise DatasetError(f"{path}:{lineno}: no '_id' (or 'id') key; every document needs an id")
        text = rec.get("text", rec.get("contents"))
        if text is None:
            raise DatasetError(f"{path}:{lineno}: no 'text' (or 'contents') key")
        yield str(docid), doc_text(rec.get("title"), text)


def _read_jsonl_queries(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, rec in _jsonl_records(path):
        try:
            qid, text = str(rec["_id"]), str(rec["text"])
        except (KeyError, TypeError) as e:
            raise DatasetError(f"{path}:{lineno}: expected a JSON object with '_id' and 'text' ({e})") from e
        if qid in out:
            raise DatasetError(f"{path}:{lineno}: duplicate query id {qid!r}; remove one of them")
        out[qid] = text
    return out


def _read_tsv_queries(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 2:
                raise DatasetError(f"{path}:{lineno}: expected 'qid<TAB>text' (2 fields), got {len(parts)}")
            if parts[0] in out:
                raise DatasetError(f"{path}:{lineno}: duplicate query id {parts[0]!r}; remove one of them")
            out[parts[0]] = parts[1]
    return out


def _add_qrel(qrels: Qrels, qid: str, docid: str, rel: str, where: str) -> None:
    try:
        grade = int(float(rel))
    except ValueError as e:
        raise DatasetError(f"{where}: relevance {rel!r} is not a number") from e
    if docid in qrels.setdefault(qid, {}) and qrels[qid][docid] != grade:
        raise DatasetError(f"{where}: query {qid!r} judges document {docid!r} twice with different grades")
    qrels[qid][docid] = grade


def _read_beir_qrels(path: Path) -> Qrels:
    qrels: Qrels = {}
    with _open_text(path) as fh:
        for lineno, row in enumerate(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if lineno == 1 and not row[-1].lstrip("-").isdigit():
                continue  # header "query-id corpus-id score"
            if len(row) != 3:
                raise DatasetError(f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>score', "
                                   f"got {len(row)} fields")
            _add_qrel(qrels, row[0], row[1], row[2], f"{path}:{lineno}")
    return qrels


def _read_trec_qrels(path: Path) -> Qrels:
    qrels: Qrels = {}
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4:
                raise DatasetError(f"{path}:{lineno}: expected TREC qrels 'qid 0 docid rel', got {len(parts)} fields")
            _add_qrel(qrels, parts[0], parts[2], parts[3], f"{path}:{lineno}")
    return qrels


# ---------------------------------------------------------------------------- ir_datasets


def _irds(ds_id: str) -> Any:
    import ir_datasets

    try:
        return ir_datasets.load(ds_id)
    except KeyError as e:
        raise DatasetError(f"ir_datasets has no dataset {ds_id!r}; see https://ir-datasets.com") from e


def _irds_docs(ds_id: str) -> Iterator[tuple[str, str]]:
    for d in _irds(ds_id).docs_iter():
        # The text field where the record has one, even if empty: default_text() already
        # holds the title, so an empty BEIR text must not fall back to it (title twice).
        text = d.text if hasattr(d, "text") else d.default_text()
        yield str(d.doc_id), doc_text(getattr(d, "title", None), text)


def _irds_queries(ds_id: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for q in _irds(ds_id).queries_iter():
        text = getattr(q, "text", None)
        out[str(q.query_id)] = text if text is not None else q.default_text()
    return out


def _irds_qrels(ds_id: str) -> Qrels:
    qrels: Qrels = {}
    for r in _irds(ds_id).qrels_iter():
        _add_qrel(qrels, str(r.query_id), str(r.doc_id), str(r.relevance), f"ir_datasets {ds_id}")
    return qrels


# ---------------------------------------------------------------------------- dataset


@dataclasses.dataclass
class Dataset:
    """One collection: judged queries and qrels in memory, documents streamed from disk."""

    name: str
    spec: dict
    queries: dict[str, str]
    qrels: Qrels
    doc_ids: frozenset[str] | None  # the subset's documents; None = the whole corpus
    metrics: str
    exclude_self: bool
    stats: dict

    def iter_docs(self) -> Iterator[tuple[str, str]]:
        """Stream (docid, text) in corpus order (subset applied); duplicate ids are an error."""
        return _checked_docs(self.name, self.spec, self.stats, self.doc_ids)


def _checked_docs(name: str, spec: Mapping, stats: dict, keep: frozenset[str] | None = None
                  ) -> Iterator[tuple[str, str]]:
    """(docid, text) of a corpus in order, restricted to ``keep``; counts into ``stats``."""
    seen: set[str] = set()  # ids only: ~0.8 GB for MS MARCO's 8.8M passages
    n = n_empty = 0
    for docid, text in _raw_docs(spec):
        if keep is not None and docid not in keep:
            continue
        if docid in seen:
            raise DatasetError(f"{_corpus_where(spec)}: duplicate document id {docid!r} "
                               f"(document #{n + 1}); deduplicate the corpus")
        seen.add(docid)
        n += 1
        n_empty += not text.strip()
        yield docid, text
    if n_empty:
        log.warning("%s: %d of %d documents have empty text (kept)", name, n_empty, n)
    stats.update(n_docs=n, n_empty_docs=n_empty)


def load_corpus(name: str, spec: Mapping, root: str | Path = ".", count: bool = True
                ) -> tuple[Iterator[tuple[str, str]], int | None]:
    """A corpus's (docid, text) stream and its document count, from a corpus spec
    (:func:`splade_rescale.data.corpora.corpus_spec`): a dataset's subset, or a whole corpus.

    ``count=False`` skips the extra pass over a local corpus that counting needs (the count
    is then None unless it is free: a subset's size, ir_datasets' docs_count).
    """
    if spec.get("subset"):
        ds = load_dataset(name, spec, root)
        return ds.iter_docs(), len(ds.doc_ids or ())
    spec = _resolve(spec, Path(root))
    if spec["source"] == "ir_datasets":
        total = _irds(spec["id"]).docs_count()  # from the metadata ir_datasets ships: no download
    else:  # one cheap pass over the ids, so progress and size estimates know the total
        total = sum(1 for _ in _raw_docs(spec)) if count else None
    return _checked_docs(name, spec, {}), total


def _corpus_where(spec: Mapping) -> str:
    return str(spec.get("corpus") or spec.get("path") or spec.get("id"))


def _raw_docs(spec: Mapping) -> Iterator[tuple[str, str]]:
    src = spec["source"]
    if src == "beir_local":
        return _iter_jsonl_corpus(_find(Path(spec["path"]), "corpus.jsonl", "corpus.jsonl.gz"))
    if src == "trec_local":
        return _iter_jsonl_corpus(Path(spec["corpus"]))
    if src == "ir_datasets":
        return _irds_docs(spec["id"])
    raise DatasetError(f"unknown dataset source {src!r}; use beir_local, trec_local or ir_datasets")


def _queries_and_qrels(spec: Mapping) -> tuple[dict[str, str], Qrels]:
    src = spec.get("source")
    if src == "beir_local":
        folder = Path(spec["path"])
        split = spec.get("split", "test")
        return (_read_jsonl_queries(_find(folder, "queries.jsonl", "queries.jsonl.gz")),
                _read_beir_qrels(_find(folder / "qrels", f"{split}.tsv", f"{split}.tsv.gz")))
    if src == "trec_local":
        qpath = Path(spec["queries"])
        queries = (_read_jsonl_queries(qpath) if ".jsonl" in qpath.name else _read_tsv_queries(qpath))
        return queries, _read_trec_qrels(Path(spec["qrels"]))
    if src == "ir_datasets":
        return _irds_queries(spec["id"]), _irds_qrels(spec["id"])
    raise DatasetError(f"unknown dataset source {src!r}; use beir_local, trec_local or ir_datasets")


def _resolve(spec: Mapping, root: Path) -> dict:
    out = dict(spec)
    for key in ("path", "corpus", "queries", "qrels"):
        if key in out and out[key] and not Path(out[key]).is_absolute():
            out[key] = str(root / out[key])
    return out


def default_exclude_self(name: str, spec: Mapping) -> bool:
    """Whether to drop a document whose id equals the query id from that query's results: the
    spec's ``exclude_self`` if set, else on for ``metrics: beir``, as Pyserini's BEIR runs
    (``--remove-query``) and BEIR's evaluator (``ignore_identical_ids=True``) do on every BEIR set."""
    value = spec.get("exclude_self")
    if value is None:
        return str(spec.get("metrics", "beir")) == "beir"
    if not isinstance(value, bool):
        raise DatasetError(f"datasets.{name}.exclude_self: {value!r} is not true or false; "
                           "write exclude_self: true or false")
    return value


def load_dataset(name: str, spec: Mapping, root: str | Path = ".") -> Dataset:
    """Build a :class:`Dataset` from a config spec (relative paths resolved against ``root``).

    With ``subset: {max_queries, max_judged_per_query, extra_docs, seed}`` the queries, qrels
    and documents are reduced deterministically (see :func:`select_subset`); that needs one
    pass over the corpus ids.
    """
    if "source" not in spec:
        raise DatasetError(f"datasets.{name}: no 'source' key; use beir_local, trec_local or ir_datasets")
    spec = _resolve(spec, Path(root))
    all_queries, qrels = _queries_and_qrels(spec)
    unknown = sorted(set(qrels) - set(all_queries))
    if unknown:
        log.warning("%s: %d qrels queries are not in the query file (dropped), e.g. %s",
                    name, len(unknown), unknown[:3])
    qrels = {q: d for q, d in qrels.items() if q in all_queries}
    if not qrels:
        raise DatasetError(f"datasets.{name}: no qrels left for the queries; check the split/qrels file")
    queries = {q: all_queries[q] for q in all_queries if q in qrels}
    empty_q = [q for q, t in queries.items() if not t.strip()]
    if empty_q:
        log.warning("%s: %d queries have empty text, e.g. %s", name, len(empty_q), empty_q[:3])
    stats = {"n_queries_in_file": len(all_queries), "n_qrels_queries_unknown": len(unknown),
             "n_empty_queries": len(empty_q)}
    doc_ids = None
    if spec.get("subset"):
        queries, qrels, doc_ids = select_subset(queries, qrels, (d for d, _ in _raw_docs(spec)), **spec["subset"])
        stats["n_subset_docs"] = len(doc_ids)
    stats.update(n_queries=len(queries), n_qrels=sum(len(v) for v in qrels.values()))
    exclude_self = default_exclude_self(name, spec)
    return Dataset(name=name, spec=spec, queries=queries, qrels=qrels,
                   doc_ids=frozenset(doc_ids) if doc_ids is not None else None,
                   metrics=str(spec.get("metrics", "beir")), exclude_self=exclude_self, stats=stats)


def select_subset(queries: Mapping[str, str], qrels: Qrels, corpus_ids: Iterator[str], max_queries: int,
                  max_judged_per_query: int, extra_docs: int = 0, seed: int = 0
                  ) -> tuple[dict[str, str], Qrels, set[str]]:
    """Deterministic subset: queries, qrels restricted to the kept docs, kept doc ids.

    Keeps ``max_queries`` queries with at least one relevant (grade > 0) judgment (seeded
    sample), their judged docs (highest grades
    first, at most ``max_judged_per_query`` each; ties in a seeded order), plus ``extra_docs``
    other corpus docs drawn by seeded reservoir sampling (one pass, memory O(extra_docs)).
    Judged docs missing from the corpus are dropped.
    """
    rng = random.Random(seed)
    judged_q = sorted(q for q in queries if any(g > 0 for g in qrels.get(q, {}).values()))
    kept_q = sorted(rng.sample(judged_q, min(max_queries, len(judged_q))))
    wanted: set[str] = set()
    for q in kept_q:
        docs = sorted(qrels[q].items())
        rng.shuffle(docs)
        docs.sort(key=lambda kv: -kv[1])  # stable: seeded order within a grade
        wanted.update(d for d, _ in docs[:max_judged_per_query])
    present: set[str] = set()
    reservoir: list[tuple[float, str]] = []  # (random key, id): keep the extra_docs largest keys
    extra_rng = random.Random(seed + 1)
    for docid in corpus_ids:
        if docid in wanted:
            present.add(docid)
            continue
        key = extra_rng.random()
        if len(reservoir) < extra_docs:
            heapq.heappush(reservoir, (key, docid))
        elif extra_docs and key > reservoir[0][0]:
            heapq.heapreplace(reservoir, (key, docid))
    if len(present) < len(wanted):
        log.warning("subset: %d judged documents are not in the corpus (dropped)", len(wanted) - len(present))
    doc_ids = present | {d for _, d in reservoir}
    sub_qrels = {q: {d: g for d, g in qrels[q].items() if d in doc_ids} for q in kept_q}
    sub_qrels = {q: v for q, v in sub_qrels.items() if v}
    return {q: queries[q] for q in kept_q if q in sub_qrels}, sub_qrels, doc_ids


def iter_triples_tsv(path: str | Path) -> Iterator[tuple[str, str, str]]:
    """MS MARCO training triples ``query<TAB>positive<TAB>negative`` (texts)."""
    path = Path(path)
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 3:
                raise DatasetError(f"{path}:{lineno}: expected 'query<TAB>positive<TAB>negative', "
                                   f"got {len(parts)} fields")
            yield parts[0], parts[1], parts[2]


def write_qrels(qrels: Qrels, path: str | Path) -> None:
    """Write qrels in TREC format (``qid 0 docid rel``), atomically."""
    from splade_rescale.atomic import write_text

    write_text(path, "".join(f"{q} 0 {d} {g}\n" for q in qrels for d, g in qrels[q].items()))


def write_queries(queries: Mapping[str, str], path: str | Path) -> None:
    """Write queries as ``qid<TAB>text`` (tabs/newlines in texts replaced by spaces), atomically."""
    from splade_rescale.atomic import write_text

    write_text(path, "".join(f"{q}\t{' '.join(t.split())}\n" for q, t in queries.items()))
