"""How SpladeEncoder batches texts: token-sorted batches leave little padding, a batch without padding
does no mask work and gives the same vectors, batch k + 1 queued before batch k is read back changes
nothing, and the compiled backbone has no graph break and a bounded number of graphs over many shapes.

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
from splade_rescale.encoding.corpus import token_batches
from splade_rescale.model.splade import COMPILE_MIN_TEXTS, SpladeEncoder, worth_compiling

PASSAGES = REPO / "resources" / "demo" / "msmarco-dl19-dl20-pool" / "corpus.jsonl.gz"
TEXTS = ["a protein", "the mitochondrial proteins of the human brain and their folding", "cell",
         "sparse retrieval with a rescaled masked language model head", "x y z"]


def _padding(lengths: np.ndarray, batches: list[np.ndarray]) -> float:
    return 1 - sum(lengths[b].sum() for b in batches) / sum(len(b) * lengths[b].max() for b in batches)


def test_token_sorted_batches_leave_little_padding(minilm_path) -> None:
    """On 5,000 real MS MARCO passages at 256 tokens, batches of 256: sorting by characters (the old
    order) leaves 38% of each batch padding, by tokens 8% (2% on a whole chunk of 20,000:
    docs/measurements.md)."""
    with gzip.open(PASSAGES, "rt") as f:
        texts = [json.loads(line)["text"] for line in itertools.islice(f, 5000)]
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    lengths = np.array([len(ids) for ids in tokenizer(texts, truncation=True, max_length=256)["input_ids"]])
    by_chars = np.argsort([-len(t) for t in texts], kind="stable")
    old = _padding(lengths, [by_chars[i:i + 256] for i in range(0, len(texts), 256)])
    new = _padding(lengths, token_batches(lengths, 256, 256 * 256))
    assert old > 0.35 and new < 0.10, (old, new)


def test_token_batches_cut_by_count_and_by_token_budget() -> None:
    lengths = [5, 100, 7, 60, 60, 3, 100]
    batches = token_batches(lengths, 3, 10_000)
    assert [b.tolist() for b in batches] == [[1, 6, 3], [4, 2, 0], [5]]  # most tokens first, stable
    by_budget = token_batches(lengths, 3, 200)  # a batch of 100-token texts holds two; of 60, three
    assert [b.tolist() for b in by_budget] == [[1, 6], [3, 4, 2], [0, 5]]
    assert [b.tolist() for b in token_batches([300], 4, 100)] == [[0]]  # a text over the budget alone


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
    rows = list(encoder.encode_sparse([ids[:3], ids[3:], ids[:1]], 100))
    alone = [next(encoder.encode_sparse([[i]], 100)) for i in ids]
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
