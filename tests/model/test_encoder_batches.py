"""How SpladeEncoder batches texts: length buckets leave little padding, a batch holds one bucket, a batch
without padding does no mask work and gives the same vectors, batch k + 1 queued before batch k is read
back changes nothing, and the compiled backbone has no graph break and a bounded number of graphs over many shapes.

The compile checks use dynamo's ``eager`` backend: the graphs, breaks and recompiles are dynamo's,
whatever the backend; inductor's own code generation takes minutes on a CPU (docs/measurements.md).
"""

from __future__ import annotations

import gzip
import itertools
import json

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from conftest import REPO, tiny_bert, tiny_modernbert
from splade_rescale.encoding.buckets import Batch, BucketBatcher, bucket_length, bucket_rows
from splade_rescale.model.splade import COMPILE_MIN_TEXTS, SpladeEncoder, worth_compiling

PASSAGES = REPO / "resources" / "demo" / "msmarco-dl19-dl20-pool" / "corpus.jsonl.gz"
TEXTS = ["a protein", "the mitochondrial proteins of the human brain and their folding", "cell",
         "sparse retrieval with a rescaled masked language model head", "x y z"]


def test_length_buckets_pad_little_more_than_batches_sorted_by_tokens(minilm_path) -> None:
    """On 5,000 real MS MARCO passages at 256 tokens: sorting by characters (sentence-transformers' order)
    pads 38% of each batch of 256; each text padded to its bucket of 8 tokens pads under 6% (and under 3%
    more tokens than batches sorted by token count, the encode's batching before buckets)."""
    with gzip.open(PASSAGES, "rt") as f:
        texts = [json.loads(line)["text"] for line in itertools.islice(f, 5000)]
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    lengths = np.array([len(ids) for ids in tokenizer(texts, truncation=True, max_length=256)["input_ids"]])
    by_chars = np.argsort([-len(t) for t in texts], kind="stable")
    chars = sum(lengths[b].max() * len(b) for b in (by_chars[i:i + 256] for i in range(0, len(texts), 256)))
    by_tokens = np.sort(lengths)[::-1]
    tokens = sum(by_tokens[i] * len(by_tokens[i:i + 256]) for i in range(0, len(texts), 256))
    buckets = sum(bucket_length(n) for n in lengths)
    assert 1 - lengths.sum() / chars > 0.35 and 1 - lengths.sum() / buckets < 0.06
    assert buckets / tokens - 1 < 0.03, (buckets, tokens)


def test_a_batch_holds_one_bucket_of_at_most_its_rows() -> None:
    assert [bucket_length(n) for n in (1, 8, 9, 16, 17, 256)] == [8, 8, 16, 16, 24, 256]
    assert bucket_rows(64, 32, None) == 32 and bucket_rows(64, 32, 640) == 10 and bucket_rows(512, 4, 100) == 1
    batcher = BucketBatcher(batch_size=2, horizon=7)
    batcher.add([[1] * 5, [1] * 12, [1] * 7, [1] * 3, [1] * 30, [1] * 30, [1] * 40])
    due = list(batcher.due())  # the 8-bucket fills first (0, 2), then the 32-bucket (4, 5); 16, 8 and 40 wait
    assert [(b.positions.tolist(), b.length, b.rows) for b in due] == [([0, 2], 8, 2), ([4, 5], 32, 2)]
    assert batcher.oldest() == 1
    batcher.add([[1] * 2])  # fills the 8-bucket; text 1 has now waited 7 texts (the horizon): its bucket goes
    assert [(b.positions.tolist(), b.length) for b in batcher.due()] == [([3, 7], 8), ([1], 16)]
    batcher.flush()
    assert [(b.positions.tolist(), b.length) for b in batcher.due()] == [([6], 40)]
    filled = BucketBatcher(batch_size=4, fill=True)
    filled.add([[1] * 5])
    filled.flush()
    assert [(len(b.ids), b.rows) for b in filled.due()] == [(1, 4)]


@pytest.fixture(params=["bert", "modernbert"])
def encoder(request, minilm_path) -> SpladeEncoder:
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    model = tiny_bert() if request.param == "bert" else tiny_modernbert()
    return SpladeEncoder(model, tokenizer, precision="fp32").eval()


def test_a_batch_without_padding_has_no_mask_and_the_same_vectors(encoder: SpladeEncoder) -> None:
    ids = encoder.tokenize(TEXTS, 32)
    same_length = [i for i in ids if len(i) == len(ids[0])] * 3
    unpadded = encoder.pad(same_length)
    assert "attention_mask" not in unpadded
    with_mask = {**unpadded, "attention_mask": torch.ones_like(unpadded["input_ids"])}
    torch.testing.assert_close(encoder._reps(unpadded), encoder._reps(with_mask), rtol=0, atol=1e-6)
    padded = encoder.pad(ids)
    assert padded["attention_mask"].sum(1).tolist() == [len(i) for i in ids]
    assert encoder.tokenizer.padding_side == "right"
    assert all(padded["input_ids"][k, :len(i)].tolist() == i for k, i in enumerate(ids))


def test_each_text_gets_the_vector_it_gets_alone(encoder: SpladeEncoder) -> None:
    """Batches of mixed lengths (padding masked in the backbone and the head) and the next batch queued
    before a batch is read back: every row equals the text encoded alone, without padding."""
    ids = encoder.tokenize(TEXTS, 32)
    def batch(texts):
        return Batch(np.arange(len(texts)), texts, bucket_length(max(map(len, texts))), len(texts))

    rows = list(encoder.encode_sparse([batch(ids[:3]), batch(ids[3:]), batch(ids[:1])], 100))
    alone = [next(encoder.encode_sparse([batch([i])], 100)) for i in ids]
    got = [r.row(k) for r in rows for k in range(r.n_rows)]
    assert got == [a.row(0) for a in alone[:3] + alone[3:] + alone[:1]]
    assert all(len(g) > 0 for g in got)


def test_compiled_backbone_has_no_graph_break_and_few_graphs(minilm_path) -> None:
    """Over 12 batch shapes (lengths 2 to 40, one to nine texts, with and without padding) the
    ModernBERT backbone compiles to at most four graphs, with no graph break, and gives the uncompiled
    vectors. (BERT's backbone traces the same way; one architecture keeps the test under a minute.)"""
    from torch._dynamo.utils import counters

    encoder = SpladeEncoder(tiny_modernbert(), AutoTokenizer.from_pretrained(minilm_path), precision="fp32").eval()

    ids = torch.randint(1000, 2000, (3, 17))
    explained = torch._dynamo.explain(encoder._head.encoder)(input_ids=ids, attention_mask=None)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    torch._dynamo.reset()
    counters.clear()
    plain = {}
    shapes = [(4, 40), (4, 17), (3, 9), (9, 33), (2, 5), (1, 2), (6, 12), (1, 30), (5, 23), (8, 3), (2, 39), (7, 26)]
    rng = np.random.default_rng(0)
    batches = [[rng.integers(1000, 2000, int(n)).tolist() for n in rng.integers(2, length + 1, size)]
               if k % 2 else [rng.integers(1000, 2000, length).tolist()] * size
               for k, (size, length) in enumerate(shapes)]
    for k, batch in enumerate(batches):
        plain[k] = encoder._reps(encoder.pad(batch))
    encoder.compile_backbone(backend="eager")
    for k, batch in enumerate(batches):
        torch.testing.assert_close(encoder._reps(encoder.pad(batch)), plain[k], rtol=0, atol=1e-5)
    assert 1 < counters["stats"]["unique_graphs"] <= 4, dict(counters["stats"])
    assert not counters["graph_break"]
    torch._dynamo.reset()


def test_compile_only_pays_on_a_gpu_for_a_large_job() -> None:
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert worth_compiling(cuda, COMPILE_MIN_TEXTS) and not worth_compiling(cuda, COMPILE_MIN_TEXTS - 1)
    assert not worth_compiling(cuda, None) and not worth_compiling(cpu, 10**9)
