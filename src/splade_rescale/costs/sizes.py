"""How much text a config's data holds: documents and queries with their mean words (published
for known collections, counted for local ones), and token-length histograms of the training data,
since a training batch is padded to its longest text."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from splade_rescale.costs.inputs import PlanError
from splade_rescale.data.collection_sizes import CORPUS_SIZES, MSMARCO_TRAIN, QUERY_SIZES, Size

# A query longer than this (in tokens) searches as a BEIR-like long query (ArguAna's arguments).
LONG_QUERY_TOKENS = 64


def _mean_words(texts) -> tuple[int, float]:
    n = words = 0
    for text in texts:
        n += 1
        words += len(text.split())
    return n, (words / n if n else 0.0)


def corpus_size(name: str, spec: Mapping[str, Any], root: Path) -> Size:
    """A corpus spec's documents: the published table, or counted from its local files."""
    if spec["source"] == "ir_datasets" and not spec.get("subset"):
        if spec["id"] not in CORPUS_SIZES:
            raise PlanError(f"corpus {name} (ir_datasets {spec['id']!r}): size unknown; fix: add it to "
                            "splade_rescale.data.collection_sizes.CORPUS_SIZES with its source")
        return CORPUS_SIZES[spec["id"]]
    from splade_rescale.data.datasets import load_corpus

    docs, _ = load_corpus(name, spec, root, count=False)
    return Size(*_mean_words(text for _, text in docs))


def query_size(name: str, spec: Mapping[str, Any], root: Path) -> Size:
    """A dataset's judged queries (the ones the workflow encodes and runs)."""
    if spec["source"] == "ir_datasets" and not spec.get("subset"):
        if spec["id"] not in QUERY_SIZES:
            raise PlanError(f"datasets.{name} (ir_datasets {spec['id']!r}): query count unknown; fix: add it "
                            "to splade_rescale.data.collection_sizes.QUERY_SIZES with its source")
        return QUERY_SIZES[spec["id"]]
    from splade_rescale.data.datasets import load_dataset

    return Size(*_mean_words(load_dataset(name, spec, root).queries.values()))


def training_lengths(data: Mapping[str, Any], root: Path) -> tuple[Size, Size]:
    """Mean query and document words of the training data."""
    if data["source"] == "ir_datasets" and str(data.get("id", "")).startswith("msmarco-passage"):
        return MSMARCO_TRAIN
    if data["source"] == "beir_local":
        spec = {**data, "metrics": "beir"}
        return query_size("training", spec, root), corpus_size("training", spec, root)
    if data["source"] == "tsv_triples":
        from splade_rescale.data.datasets import iter_triples_tsv

        triples = list(iter_triples_tsv(root / data["path"]))
        queries, documents = (q for q, _, _ in triples), (t for _, p, n in triples for t in (p, n))
        return Size(*_mean_words(queries)), Size(*_mean_words(documents))
    raise PlanError(f"training.data.source = {data['source']!r}: lengths unknown to the plan; fix: use MS MARCO "
                    "triples, beir_local or tsv_triples, or extend splade_rescale.costs.sizes.training_lengths")


def tokens(words: float, tokens_per_word: float, max_length: int) -> float:
    """Mean tokens of a text of ``words`` words, special tokens included, cut at ``max_length``."""
    return min(float(max_length), 2 + words * tokens_per_word)


Histogram = list[tuple[int, int]]  # (tokens, texts of that length), ascending


def _histogram(words_per_text: Iterable[int], tokens_per_word: float) -> Histogram:
    counts: dict[int, int] = {}
    for words in words_per_text:
        n = round(2 + words * tokens_per_word)
        counts[n] = counts.get(n, 0) + 1
    return sorted(counts.items())


def expected_longest(histogram: Histogram, n: int, max_length: int) -> float:
    """Expected tokens of the longest of ``n`` texts drawn from ``histogram``, cut at ``max_length``:
    the length a batch of ``n`` texts is padded to."""
    total = sum(c for _, c in histogram)
    out, below = 0.0, 0
    for length, count in histogram:
        out += min(length, max_length) * (((below + count) / total) ** n - (below / total) ** n)
        below += count
    return out


def training_histograms(data: Mapping[str, Any], root: Path, text: Mapping[str, Any]) -> tuple[Histogram, Histogram]:
    """Token-length histograms of the training queries and documents (padding needs the spread, not the mean)."""
    tpw = float(text["tokens_per_word"])
    if data["source"] == "ir_datasets" and str(data.get("id", "")).startswith("msmarco-passage"):
        if "msmarco_query_tokens" in text:
            return ([tuple(x) for x in text["msmarco_query_tokens"]],
                    [tuple(x) for x in text["msmarco_passage_tokens"]])
        q, d = MSMARCO_TRAIN
        return _histogram([round(q.words)], tpw), _histogram([round(d.words)], tpw)
    if data["source"] == "beir_local":
        from splade_rescale.data.datasets import load_corpus, load_dataset

        spec = {**data, "metrics": "beir"}
        docs, _ = load_corpus("training", spec, root, count=False)
        return (_histogram((len(t.split()) for t in load_dataset("training", spec, root).queries.values()), tpw),
                _histogram((len(t.split()) for _, t in docs), tpw))
    if data["source"] == "tsv_triples":
        from splade_rescale.data.datasets import iter_triples_tsv

        triples = list(iter_triples_tsv(root / data["path"]))
        return (_histogram((len(q.split()) for q, _, _ in triples), tpw),
                _histogram((len(t.split()) for _, p, n in triples for t in (p, n)), tpw))
    raise PlanError(f"training.data.source = {data['source']!r}: lengths unknown to the plan; fix: use MS MARCO "
                    "triples, beir_local or tsv_triples, or extend splade_rescale.costs.sizes.training_histograms")
