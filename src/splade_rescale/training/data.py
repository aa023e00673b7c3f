"""Streams of SPLADE training examples ``{query, positive, negatives[, qid, pos_id, neg_ids, teacher]}``.

Sources (``training.data`` in the config):

* ``ir_datasets``: ``id`` of a dataset with doc pairs, e.g. ``msmarco-passage/train/triples-small``;
  the pairs are streamed and texts looked up per example (never all triples in RAM).
* ``tsv_triples``: ``path`` to ``query<TAB>positive<TAB>negative`` texts.
* ``beir_local``: a BEIR train split; its BM25 hard negatives are mined once by
  :func:`mine_bm25_examples` into a JSONL file that the spec names as ``examples``.
* ``examples_jsonl``: ``path`` to such a mined file.

The order is a seeded shuffle (buffer of ``shuffle_buffer`` records, reseeded each epoch)
and the stream cycles forever, so example ``i`` is the same on every run. Resuming skips
the first ``start`` records without looking up their texts.

The workflow does not stream an ``ir_datasets`` or ``tsv_triples`` source inside the GPU job:
:func:`prepare_examples` (rule ``prepare_training_data``, a CPU job) writes the first
``steps x batch_size`` examples of a recipe's stream to a local JSONL file, and
:func:`training_stream` reads that file (``prepared`` in the spec) in the same order,
refusing one made for another stream or too short for the run.

Over 400 lines because the sources, their seeded order and the prepared file are one contract (example
``i`` of a stream): split apart, each part would have to restate the others' order.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
from tqdm.auto import tqdm

from splade_rescale.atomic import atomic_file, write_json
from splade_rescale.data.datasets import iter_triples_tsv, load_dataset
from splade_rescale.data.prepare import irds_home

log = logging.getLogger(__name__)

Example = dict[str, Any]


class TrainingDataError(ValueError):
    """A training-data spec or file problem; the message names the key or file and the fix."""


def _read_jsonl_lines(path: Path) -> Iterator[str]:
    if not path.exists():
        raise TrainingDataError(f"{path}: examples file not found; mine it with "
                                "splade_rescale.training.data.mine_bm25_examples")
    with open(path, encoding="utf-8") as fh:
        yield from (line for line in fh if line.strip())


def _irds_dataset(ds_id: str) -> Any:
    import ir_datasets

    try:
        dataset = ir_datasets.load(ds_id)
    except KeyError as e:
        raise TrainingDataError(f"training.data.id = {ds_id!r}: not an ir_datasets id") from e
    if not dataset.has_docpairs():
        raise TrainingDataError(f"training.data.id = {ds_id!r} has no doc pairs; use e.g. "
                                "msmarco-passage/train/triples-small")
    return dataset


def _small_triples(dataset: Any) -> tuple[Any, Any, Any] | None:
    """(mapper, download, local copy) of a doc-pairs handler that ir_datasets builds as MS MARCO's
    triples-small is built: a ``Cache`` of ``MapSmallTriplesQidPid`` over a tar download. None for any
    other handler, or once that Cache exists (reading it is then the fastest way)."""
    from ir_datasets.datasets.msmarco_passage import MapSmallTriplesQidPid
    from ir_datasets.formats import TsvDocPairs
    from ir_datasets.util import Cache, Download, LocalDownload, TarExtract

    handler = dataset.docpairs_handler()
    cache = getattr(handler, "_dlc", None)
    if not (isinstance(handler, TsvDocPairs) and isinstance(cache, Cache)
            and isinstance(cache._streamer, MapSmallTriplesQidPid) and not Path(cache._path).exists()):
        return None
    mapper = cache._streamer
    tar = mapper._streamer
    download = getattr(tar, "_streamer", None)
    if not (isinstance(tar, TarExtract) and isinstance(download, Download)):
        return None
    local = next((m for m in download.mirrors if isinstance(m, LocalDownload)), None)
    return (mapper, download, local) if local is not None and hasattr(download, "_path") else None


def fetch_irds_source(ds_id: str) -> dict[str, Any]:
    """Make ir_datasets download and cache a training source's doc pairs and queries.

    MS MARCO triples-small: its 7.9 GB tar is downloaded (md5-checked) to ir_datasets' local-copy
    place, ``downloads/<md5>``, and not mapped: mapping its 39.8M text triples to ids takes long,
    and a run reads only the first ones (:func:`_irds_source`). Any other source: the first doc
    pair builds ir_datasets' caches. The texts come from the docs store the corpus preparation builds.
    """
    dataset = _irds_dataset(ds_id)
    record: dict[str, Any] = {"id": ds_id, "queries": sum(1 for _ in dataset.queries_iter())}
    small = _small_triples(dataset)
    if small is not None:
        _, download, local = small
        local_path = Path(local._path)
        if not local_path.exists():  # downloaded to a temporary file, md5-checked, then moved in whole
            log.info("downloading %s's doc pairs to %s (not mapped here: each prepared stream maps the triples "
                     "it reads)", ds_id, local_path)
            local_path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_file(local_path) as tmp:
                shutil.move(download.path(), tmp)
        return {**record, "docpairs": "downloaded", "local_copy": str(local_path)}
    if next(iter(dataset.docpairs_iter()), None) is None:
        raise TrainingDataError(f"training.data.id = {ds_id!r}: ir_datasets gives no doc pairs")
    return {**record, "docpairs": "cached"}


class _FirstLines:
    """The first ``n`` lines a stream-maker yields, as a stream ir_datasets' formats read."""

    def __init__(self, lines: Callable[[], Iterable[bytes]], n: int):
        self._lines, self._n = lines, n

    @contextlib.contextmanager
    def stream(self) -> Iterator[Any]:
        from ir_datasets.util import IterStream

        yield io.BufferedReader(IterStream(itertools.islice(self._lines(), self._n)))


def _irds_source(ds_id: str, reads: int | None = None) -> tuple[Callable[[], Iterable[Any]], Callable[[Any], Example]]:
    dataset = _irds_dataset(ds_id)
    pairs = dataset.docpairs_iter
    small = _small_triples(dataset) if reads else None
    if small is not None and Path(small[2]._path).exists():
        # ir_datasets' own mapping, stopped after the first ``reads`` triples: the same pairs as the
        # first ones of its full cache, without mapping all 39.8M
        from ir_datasets.formats import TsvDocPairs

        mapper, download, local = small
        download._path = Path(local._path)  # read the local copy in place (ir_datasets would copy it first)
        log.info("%s: mapping the first %d triples of %s with ir_datasets' MapSmallTriplesQidPid (its full "
                 "pair cache is not built)", ds_id, reads, local._path)
        pairs = TsvDocPairs(_FirstLines(lambda: iter(mapper), reads), dataset.docpairs_cls()).docpairs_iter
    store = dataset.docs_store()
    queries: dict[str, str] = {}

    def materialise(pair: Any) -> Example:
        if not queries:  # loaded on first use: skipping records never needs texts
            queries.update((q.query_id, q.text) for q in dataset.queries_iter())
        return {"qid": pair.query_id, "query": queries[pair.query_id],
                "pos_id": pair.doc_id_a, "positive": store.get(pair.doc_id_a).text,
                "neg_ids": [pair.doc_id_b], "negatives": [store.get(pair.doc_id_b).text]}

    return pairs, materialise


def _source(spec: Mapping[str, Any], root: Path, reads: int | None = None
            ) -> tuple[Callable[[], Iterable[Any]], Callable[[Any], Example]]:
    """(factory of cheap raw records, record -> example) for a ``training.data`` spec; with ``reads``,
    a factory may stop after that many records."""
    src = spec.get("source")
    if src == "ir_datasets":
        if "id" not in spec:
            raise TrainingDataError("training.data: source ir_datasets needs an 'id' key")
        return _irds_source(str(spec["id"]), reads)
    if src == "tsv_triples":
        path = root / spec["path"]
        return (lambda: iter_triples_tsv(path),
                lambda t: {"query": t[0], "positive": t[1], "negatives": [t[2]]})
    if src in ("beir_local", "examples_jsonl"):
        key = "examples" if src == "beir_local" else "path"
        if key not in spec:
            raise TrainingDataError(
                f"training.data: source {src} needs an '{key}' key naming the mined examples JSONL "
                "(written by splade_rescale.training.data.mine_bm25_examples)")
        path = root / spec[key]
        return lambda: _read_jsonl_lines(path), json.loads
    raise TrainingDataError(f"training.data.source = {src!r}: use ir_datasets, tsv_triples, beir_local "
                            "or examples_jsonl")


def _shuffled(records: Iterable[Any], rng: random.Random, buffer: int) -> Iterator[Any]:
    """Seeded buffer shuffle: memory O(buffer), order fixed by the RNG's seed."""
    pool: list[Any] = []
    for rec in records:
        if len(pool) < buffer:
            pool.append(rec)
            continue
        j = rng.randrange(buffer)
        yield pool[j]
        pool[j] = rec
    rng.shuffle(pool)
    yield from pool


class TeacherScores:
    """Teacher scores by (qid, docid): two flat arrays (sorted keys, float32 scores), searched by bisection.

    A full MS MARCO teacher file has tens of millions of pairs; as a dict of (qid, docid) tuples
    that is ~250 bytes a pair, gigabytes in every rank. Here a pair costs its key bytes
    (``qid<TAB>docid``, fixed width = the longest key) plus 4 bytes. Lookups compare whole
    keys, so they are exact; a pair listed twice keeps its last score, as a dict would.
    """

    def __init__(self, keys: np.ndarray, scores: np.ndarray):
        self._keys, self._scores = keys, scores

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, pair: tuple[str, str]) -> float:
        key = f"{pair[0]}\t{pair[1]}".encode()
        if len(key) > self._keys.dtype.itemsize:
            raise KeyError(pair)
        i = int(np.searchsorted(self._keys, key, side="right")) - 1
        if i < 0 or self._keys[i] != key:
            raise KeyError(pair)
        return float(self._scores[i])


def load_teacher_scores(path: str | Path) -> TeacherScores:
    """Teacher scores from a ``qid<TAB>docid<TAB>score`` file (two passes: size the arrays, fill them)."""
    n = width = 0
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if len(parts) != 3:
                raise TrainingDataError(f"{path}:{lineno}: expected 'qid<TAB>docid<TAB>score'")
            n, width = lineno, max(width, len(parts[0]) + 1 + len(parts[1]))
    keys, scores = np.empty(n, dtype=f"S{max(width, 1)}"), np.empty(n, dtype=np.float32)
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh):
            qid, docid, score = line.split()
            keys[lineno] = qid + b"\t" + docid
            try:
                scores[lineno] = float(score)
            except ValueError:
                raise TrainingDataError(f"{path}:{lineno + 1}: score {score.decode()!r} is not a number") from None
    order = np.argsort(keys, kind="stable")  # stable: of repeated keys the last line sorts last
    return TeacherScores(keys[order], scores[order])


def _attach_teacher(ex: Example, teacher: TeacherScores) -> Example:
    if "qid" not in ex:
        raise TrainingDataError("distillation needs example ids; the tsv_triples source has none "
                                "(use ir_datasets or mined examples, or drop teacher_scores)")
    try:
        ex["teacher"] = [teacher[(ex["qid"], d)] for d in [ex["pos_id"], *ex["neg_ids"]]]
    except KeyError as e:
        raise TrainingDataError(f"teacher scores have no score for (qid, docid) = {e.args[0]}") from None
    return ex


def examples_read(recipe: Mapping[str, Any]) -> int:
    """Examples a training run reads: ``batch_size`` per step, for any ``grad_accumulation`` and
    number of processes (a step's ``batch_size`` queries are split into micro-batches, and every
    rank reads each whole micro-batch and keeps its share); a resumed run skips the ones before
    its checkpoint, so it never reads further either."""
    return int(recipe["steps"]) * int(recipe["batch_size"])


def run_stream(recipe: Mapping[str, Any]) -> dict[str, Any]:
    """What fixes the examples a run reads, besides ``training.data``: the seed, the shuffle
    buffer, the teacher scores (distillation only) and how many it reads."""
    return {"seed": recipe["seed"], "shuffle_buffer": recipe["shuffle_buffer"],
            "teacher_scores": recipe["teacher_scores"] if recipe["loss"] != "contrastive" else None,
            "examples": examples_read(recipe)}


def stream_name(stream: Mapping[str, Any]) -> str:
    """A file name for a run stream's prepared examples, e.g. ``seed42-buffer10000-90000``."""
    name = f"seed{stream['seed']}-buffer{stream['shuffle_buffer']}-{stream['examples']}"
    if stream["teacher_scores"]:
        name += "-teacher" + hashlib.sha1(str(stream["teacher_scores"]).encode()).hexdigest()[:8]
    return name


def prepared_meta_path(path: str | Path) -> Path:
    """The record beside a prepared examples file: what it was prepared from and how many it holds."""
    return Path(path).with_suffix(".json")


def prepare_examples(spec: Mapping[str, Any], stream: Mapping[str, Any], out: str | Path,
                     root: str | Path = ".") -> dict[str, Any]:
    """Write the first ``stream["examples"]`` examples of ``example_stream`` (texts, ids and any
    teacher scores) to ``out`` as JSONL, and the record beside it; both atomically."""
    root = Path(root)
    teacher = load_teacher_scores(root / stream["teacher_scores"]) if stream["teacher_scores"] else None
    n = int(stream["examples"])
    # the k-th example is drawn once the buffer and k records are read: n examples never read further
    examples = example_stream(spec, stream["seed"], shuffle_buffer=stream["shuffle_buffer"], teacher=teacher,
                              root=root, reads=n + int(stream["shuffle_buffer"]))
    with atomic_file(out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for ex in tqdm(itertools.islice(examples, n), total=n, desc="prepare examples", unit="ex", mininterval=5):
            fh.write(json.dumps(ex, ensure_ascii=False) + "\n")
    record = {"data": dict(spec), **dict(stream), "file": str(out)}
    write_json(prepared_meta_path(out), record)
    log.info("prepared %d examples of %s (seed %s) in %s", n, spec.get("id") or spec.get("path"), stream["seed"], out)
    return record


def _prepared_examples(path: Path, data: Mapping[str, Any], stream: Mapping[str, Any], start: int
                       ) -> Iterator[Example]:
    """The examples of a prepared file from ``start`` on, after checking it is this run's stream."""
    meta_path = prepared_meta_path(path)
    fix = "prepare it again (snakemake reruns prepare_training_data; by hand: splade-rescale prepare-training-data)"
    if not path.is_file() or not meta_path.is_file():
        raise TrainingDataError(f"{path}: prepared examples (or {meta_path.name} beside them) not found; {fix}")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    wanted = {"data": dict(data), **{k: stream[k] for k in ("seed", "shuffle_buffer", "teacher_scores")}}
    differ = [k for k in wanted if meta.get(k) != wanted[k]]
    if differ:
        raise TrainingDataError(f"{path}: prepared for another stream ({', '.join(differ)} differ from this "
                                f"run's); {fix}")
    if meta["examples"] < stream["examples"]:
        raise TrainingDataError(f"{path}: holds {meta['examples']} examples but this run reads "
                                f"{stream['examples']} (steps x batch_size); {fix}")
    with open(path, encoding="utf-8") as fh:
        n = sum(1 for _ in itertools.islice(fh, start))
        for n, line in enumerate(itertools.islice(fh, max(0, meta["examples"] - start)), n + 1):
            yield json.loads(line)
    if n < meta["examples"]:
        raise TrainingDataError(f"{path}: ends after {n} examples (its record says {meta['examples']}); {fix}")


def streamed_files(spec: Mapping[str, Any], recipe: Mapping[str, Any]) -> list[str]:
    """The local files a run with ``recipe`` reads itself (paths as the spec gives them): none from a
    prepared file (it holds the texts and teacher scores), else its examples file and any teacher
    scores. Inputs of its training job and part of its checkpoint's fingerprint, so an edit in place
    retrains it."""
    if spec.get("prepared"):
        return []
    source, stream = spec.get("source"), run_stream(recipe)
    examples = {"beir_local": spec.get("examples"), "examples_jsonl": spec.get("path")}.get(source)
    return [str(f) for f in (examples, stream["teacher_scores"]) if f]


def training_stream(spec: Mapping[str, Any], recipe: Mapping[str, Any], start: int = 0,
                    root: str | Path = ".") -> Iterator[Example]:
    """The examples a run with ``recipe`` reads, from the ``start``-th on: from the prepared file
    the spec names (``prepared``), else streamed from its source with any teacher scores."""
    root, stream = Path(root), run_stream(recipe)
    if spec.get("prepared"):
        data = {k: v for k, v in spec.items() if k != "prepared"}
        return _prepared_examples(root / spec["prepared"], data, stream, start)
    teacher = load_teacher_scores(root / stream["teacher_scores"]) if stream["teacher_scores"] else None
    return example_stream(spec, recipe["seed"], start=start, shuffle_buffer=recipe["shuffle_buffer"],
                          teacher=teacher, root=root)


def example_stream(spec: Mapping[str, Any], seed: int, start: int = 0, shuffle_buffer: int = 10_000,
                   teacher: TeacherScores | None = None, root: str | Path = ".", reads: int | None = None
                   ) -> Iterator[Example]:
    """Endless seeded stream of examples, beginning after the first ``start`` of them. With ``reads``, the
    source may stop after that many records: the first ``reads - shuffle_buffer`` examples are the same."""
    records, materialise = _source(spec, Path(root), reads)
    index, epoch = 0, 0
    while True:
        n_epoch = 0
        for rec in _shuffled(records(), random.Random(f"{seed}:{epoch}"), shuffle_buffer):
            n_epoch += 1
            index += 1
            if index > start:
                ex = materialise(rec)
                yield _attach_teacher(ex, teacher) if teacher is not None else ex
        if n_epoch == 0:
            raise TrainingDataError(f"training.data ({spec.get('source')}) yielded no examples")
        epoch += 1


def mine_bm25_examples(spec: Mapping[str, Any], out_path: str | Path, index_dir: str | Path,
                       negatives: int = 8, depth: int = 100, threads: int = 1,
                       root: str | Path = ".") -> dict[str, Any]:
    """Write one example per (query, relevant document) of a BEIR train split, with BM25 negatives.

    Negatives are the top BM25 hits (Pyserini, default k1/b) that are not judged relevant.
    The JSONL is written atomically; training then streams it.
    """
    from splade_rescale.retrieval.lucene import bm25_negatives, build_bm25_index

    ds = load_dataset("training", {**spec, "split": spec.get("split", "train")}, root=root)
    build_bm25_index(ds.iter_docs(), index_dir, threads=threads)
    positives = {q: {d for d, g in rels.items() if g > 0} for q, rels in ds.qrels.items()}
    negs = bm25_negatives(index_dir, ds.queries, positives, depth=depth, n=negatives, threads=threads)
    wanted = set().union(*positives.values(), *negs.values())
    texts = {d: t for d, t in ds.iter_docs() if d in wanted}
    n_written = n_short = 0
    with atomic_file(out_path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for qid in sorted(positives):
            neg_ids = [d for d in negs.get(qid, []) if d in texts]
            if len(neg_ids) < negatives:
                n_short += 1
                continue
            for pos in sorted(positives[qid]):
                if pos not in texts:
                    continue
                fh.write(json.dumps({"qid": qid, "query": ds.queries[qid], "pos_id": pos, "positive": texts[pos],
                                     "neg_ids": neg_ids, "negatives": [texts[d] for d in neg_ids]},
                                    ensure_ascii=False) + "\n")
                n_written += 1
    if n_short:
        log.warning("mining: %d queries had fewer than %d BM25 negatives (skipped)", n_short, negatives)
    return {"examples": n_written, "queries": len(positives) - n_short, "skipped_queries": n_short,
            "negatives_per_query": negatives, "depth": depth}


def prepare_training_source(spec: Mapping[str, Any], out: str | Path) -> dict[str, Any]:
    """Cache an ir_datasets training source's doc pairs and queries; write what was cached to ``out``."""
    if spec.get("source") != "ir_datasets" or "id" not in spec:
        raise TrainingDataError("training.data: prepare-training-source is for source ir_datasets with an 'id'")
    t0 = time.perf_counter()
    record = {**fetch_irds_source(str(spec["id"])), "ir_datasets_home": irds_home(),
              "seconds": round(time.perf_counter() - t0, 3)}
    write_json(out, record)
    log.info("training source %s cached (%.0f s)", spec["id"], record["seconds"])
    return record
