"""The cost model's text sizes: published and counted collection sizes, token histograms and the
length a training batch is padded to."""

from __future__ import annotations

import pytest

from conftest import REPO
from splade_rescale.costs.sizes import corpus_size, expected_longest, query_size, tokens
from splade_rescale.data.collection_sizes import CORPUS_SIZES


def test_expected_longest_is_the_padded_length_of_a_batch():
    hist = [(10, 3), (100, 1)]
    assert expected_longest(hist, 1, 512) == pytest.approx(32.5)  # one text: the mean
    assert expected_longest(hist, 2, 512) == pytest.approx(10 * 9 / 16 + 100 * 7 / 16)
    assert expected_longest(hist, 200, 512) == pytest.approx(100, rel=1e-9)  # a big batch holds the longest
    assert expected_longest(hist, 200, 64) == pytest.approx(64, rel=1e-9)  # cut at the recipe's maximum


def test_published_and_local_collections_are_sized_alike():
    """A published corpus comes from the table; a local one is counted from its files (SciFact's
    5,183 documents, as published), so the two agree where both exist."""
    published = corpus_size("scifact", {"source": "ir_datasets", "id": "beir/scifact"}, REPO)
    scifact = {"source": "beir_local", "path": "resources/demo/scifact", "split": "test", "metrics": "beir"}
    counted = corpus_size("scifact", scifact, REPO)
    assert published == CORPUS_SIZES["beir/scifact"]
    assert counted.count == published.count
    assert counted.words == pytest.approx(published.words, rel=0.15)
    assert query_size("scifact", scifact, REPO).count == 300


def test_tokens_are_words_times_the_ratio_plus_specials_cut_at_the_maximum():
    assert tokens(10, 1.5, 512) == 17.0
    assert tokens(1000, 1.5, 256) == 256.0
