"""Vocabulary transfer: the competing fix, moving a backbone to a normalised vocabulary.

Geng & Yang (arXiv 2607.00004) explain the lag of ModernBERT-style encoders in SPLADE by their
raw, case-sensitive BPE vocabulary and move the encoder to one such as BERT's uncased WordPiece.
This is our reading of that fix, so that both explanations run in one DAG on the same data:

* **Initialisation (``init: mean``)** is Fast Vocabulary Transfer (Gee et al. 2022): a new
  token's input-embedding row, decoder row and decoder bias are the mean of the source model's
  rows for the source tokenizer's pieces of the token's surface string. A word-initial token is
  tokenised as it follows a space in running text (byte-level BPE's ``Ġ`` form); a WordPiece
  ``##`` continuation as a word-internal piece (the source's own ``##`` piece where it has it). A
  source that does not mark word starts (WordPiece) maps a token it has to itself first.
  Special tokens map by role ([CLS] to the source's CLS or BOS, [SEP] to SEP or EOS, [PAD],
  [MASK], [UNK]). A token without pieces (its characters all unknown to the source: only
  ``<unk>`` or a bare word-start space) gets the mean of the source tokenizer's rows; their
  count goes in the record. The paper's "semantic initialisation via spatial topology" is not
  available to us.
* **Decoder bias.** A head with a bias transfers it like a row (the mean over the pieces). A
  head without one (a ModernBERT config with ``decoder_bias: false``) gets a zero bias when the
  variant sets ``target_nnz``, since the bias shift needs a bias to move, and none otherwise.
* **Bias shift (``target_nnz``)** is our operational form of the paper's adjustment of the
  activation potential: one constant is added to every decoder bias entry so that, at initialisation,
  the probe passages' mean number of active terms (log(1+ReLU) > 0 after max pooling) equals
  ``target_nnz``. Per passage, pooling commutes with the shift, so the shift is found by
  bisection on the passages' max logits computed once.
* ``factor`` is applied last, as for a constant variant; a positive factor scales logits and
  leaves the active terms, hence the bias shift, unchanged.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Mapping, Sequence

import torch
from transformers import AutoModelForMaskedLM, PreTrainedModel, PreTrainedTokenizerBase

from splade_rescale.model.heads import decoder_biases, mlm_head

log = logging.getLogger(__name__)

CONTINUATION = "##"  # WordPiece's word-internal prefix
# (target role, source roles tried in order)
SPECIAL_ROLES = (("cls_token", ("cls_token", "bos_token")), ("sep_token", ("sep_token", "eos_token")),
                 ("pad_token", ("pad_token",)), ("mask_token", ("mask_token",)), ("unk_token", ("unk_token",)))


class VocabTransferError(ValueError):
    """A transfer that cannot be made; the message names the variant key and the fix."""


def special_token_map(source: PreTrainedTokenizerBase, target: PreTrainedTokenizerBase) -> dict[int, int]:
    """{target special-token id: source id} by role; a role the source lacks is left out."""
    out = {}
    for role, source_roles in SPECIAL_ROLES:
        target_id = getattr(target, f"{role}_id", None)
        source_id = next((i for r in source_roles if (i := getattr(source, f"{r}_id", None)) is not None), None)
        if target_id is not None and source_id is not None:
            out[target_id] = source_id
    return out


def source_pieces(source: PreTrainedTokenizerBase, target: PreTrainedTokenizerBase) -> list[list[int]]:
    """Per target id, the source ids its rows are the mean of (empty: no pieces)."""
    special = special_token_map(source, target)
    source_vocab = source.get_vocab()
    marks_word_starts = source.tokenize(" b") != ["b"]  # byte-level BPE's Ġb, SentencePiece's ▁b
    tokens = target.convert_ids_to_tokens(list(range(len(target))))
    texts, where = [], []
    pieces: list[list[int]] = [[] for _ in tokens]
    for i, token in enumerate(tokens):
        if i in special:
            pieces[i] = [special[i]]
        elif i in target.all_special_ids:
            continue  # a special token of a role the source lacks: the mean row
        elif token.startswith(CONTINUATION) and len(token) > len(CONTINUATION):
            if token in source_vocab:  # a WordPiece source's own continuation piece
                pieces[i] = [source_vocab[token]]
            else:
                texts.append(token[len(CONTINUATION):])
                where.append(i)
        elif not marks_word_starts and token in source_vocab:  # e.g. WordPiece to WordPiece
            pieces[i] = [source_vocab[token]]
        else:
            texts.append(" " + token)  # as it follows a space in running text
            where.append(i)
    if texts:
        encoded = source(texts, add_special_tokens=False)["input_ids"]
        drop = {source.unk_token_id} | set(source.all_special_ids)
        blank: dict[int, bool] = {}  # pieces that are only the word-start space (byte-level BPE's bare Ġ)
        for i, ids in zip(where, encoded):
            kept = [j for j in ids if j not in drop and j < len(source)]
            if all(blank.setdefault(j, not source.decode([j]).strip()) for j in kept):
                kept = []  # nothing of the token's characters is known to the source
            pieces[i] = kept
    return pieces


def _averaging_matrix(pieces: Sequence[Sequence[int]], source_rows: int, source_size: int) -> torch.Tensor:
    """Sparse (new tokens x source rows): row i averages the rows of ``pieces[i]``; an empty
    one averages the source tokenizer's ``source_size`` rows."""
    rows, cols, vals = [], [], []
    for i, ids in enumerate(pieces):
        ids = list(ids) or list(range(source_size))
        rows += [i] * len(ids)
        cols += ids
        vals += [1.0 / len(ids)] * len(ids)
    return torch.sparse_coo_tensor(torch.tensor([rows, cols]), torch.tensor(vals, dtype=torch.float32),
                                   (len(pieces), source_rows), check_invariants=True).coalesce()


def _target_config(model: PreTrainedModel, target: PreTrainedTokenizerBase, with_bias: bool):
    config = copy.deepcopy(model.config)
    config.vocab_size = len(target)
    config.pad_token_id = target.pad_token_id
    if config.model_type == "modernbert":
        config.cls_token_id = config.bos_token_id = target.cls_token_id
        config.sep_token_id = config.eos_token_id = target.sep_token_id
        if with_bias:
            config.decoder_bias = True
    return config


def transfer_vocabulary(model: PreTrainedModel, source: PreTrainedTokenizerBase, target: PreTrainedTokenizerBase,
                        needs_bias: bool = False) -> tuple[PreTrainedModel, dict[str, Any]]:
    """A copy of ``model`` over ``target``'s vocabulary (mean initialisation) and its record.

    Every tensor whose first dimension is the vocabulary (input embeddings, decoder weight and
    bias) is mapped by the same averaging, also between two vocabularies of one size (only the
    same token -> id map is copied as it is); all other weights are copied unchanged.
    """
    head = mlm_head(model)
    old_rows = head.decoder.out_features
    had_bias = head.decoder.bias is not None
    pieces = source_pieces(source, target)
    unmatched = [i for i, p in enumerate(pieces) if not p]
    average = _averaging_matrix(pieces, old_rows, len(source))
    same_vocabulary = source.get_vocab() == target.get_vocab()
    new_model = AutoModelForMaskedLM.from_config(_target_config(model, target, needs_bias and not had_bias))
    new_rows = mlm_head(new_model).decoder.out_features
    old_state = model.state_dict()
    new_state = {}
    for key, value in new_model.state_dict().items():
        old = old_state.get(key)
        if old is None:
            if not key.endswith("bias"):
                raise VocabTransferError(f"{key}: in the target model but not in the source; the architecture "
                                         f"{type(model).__name__} is not supported for vocab_transfer")
            new_state[key] = torch.zeros_like(value)  # a decoder bias the source head did not have
        elif old.shape == value.shape and same_vocabulary:
            new_state[key] = old
        elif old.shape[0] == old_rows and value.shape[0] == new_rows and old.shape[1:] == value.shape[1:]:
            mapped = torch.sparse.mm(average, old.float().reshape(old_rows, -1)).reshape(value.shape)
            new_state[key] = mapped.to(old.dtype)
        elif old.shape == value.shape:
            new_state[key] = old
        else:
            raise VocabTransferError(f"{key}: shape {tuple(old.shape)} cannot be mapped to {tuple(value.shape)}")
    new_model.load_state_dict(new_state)
    tokens = target.convert_ids_to_tokens(unmatched[:20])
    special = special_token_map(source, target)
    record = {
        "init": "mean",
        "source_vocab": len(source), "source_rows": old_rows, "target_vocab": len(target),
        "unmatched_tokens": len(unmatched), "unmatched_examples": tokens,
        "mean_pieces_per_token": sum(len(p) for p in pieces if p) / max(1, len(pieces) - len(unmatched)),
        "special_tokens": {target.convert_ids_to_tokens(t): source.convert_ids_to_tokens(s)
                           for t, s in special.items()},
        "decoder_bias": ("mean of the pieces' source biases" if had_bias else
                         "zero (the source head has none; added for the bias shift)" if needs_bias else "none"),
        "tied": mlm_head(new_model).is_tied(),
    }
    log.info("vocabulary %d -> %d tokens, %d without source pieces", len(source), len(target), len(unmatched))
    return new_model.eval(), record


@torch.no_grad()
def passage_max_logits(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                       max_length: int, batch_size: int = 16) -> torch.Tensor:
    """(passages x vocab) max over each passage's real tokens of the MLM logits."""
    head = mlm_head(model)
    out = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(list(texts[start:start + batch_size]), padding=True, truncation=True,
                          max_length=max_length, return_tensors="pt")
        logits = head.logits(batch["input_ids"], batch["attention_mask"]).float()
        logits = logits.masked_fill(~batch["attention_mask"].bool().unsqueeze(-1), float("-inf"))
        out.append(logits.max(dim=1).values)
    return torch.cat(out)


def mean_active(max_logits: torch.Tensor, shift: float = 0.0) -> float:
    """Mean active terms per passage after adding ``shift`` to every logit."""
    return float((max_logits + shift > 0).sum(dim=1).float().mean())


def shift_for_target(max_logits: torch.Tensor, target_nnz: float, iterations: int = 60) -> float:
    """The constant added to every logit (a bias shift; ``logit_shift`` subtracts it) whose mean active
    terms per passage is closest to ``target_nnz`` (bisection: the count only grows with the shift); of
    equally close ones, the smallest in magnitude (0 where the passages already have the target)."""
    vocab = max_logits.shape[1]
    if not 0 < target_nnz <= vocab:
        raise VocabTransferError(f"target_nnz = {target_nnz} is outside (0, {vocab}], the vocabulary size")
    finite = max_logits[torch.isfinite(max_logits)]
    low, high = -float(finite.max()) - 1.0, -float(finite.min()) + 1.0  # nothing active; everything
    best = (abs(mean_active(max_logits, 0.0) - target_nnz), 0.0, 0.0)
    for _ in range(iterations):
        middle = (low + high) / 2
        nnz = mean_active(max_logits, middle)
        best = min(best, (abs(nnz - target_nnz), abs(middle), middle))
        if nnz < target_nnz:
            low = middle
        else:
            high = middle
    return best[2]


def fit_bias_shift(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, passages: Sequence[str],
                   max_length: int, target_nnz: float) -> dict[str, Any]:
    """Shift the decoder bias in place so the probe passages' mean active terms equal ``target_nnz``."""
    max_logits = passage_max_logits(model, tokenizer, passages, max_length)
    shift = shift_for_target(max_logits, float(target_nnz))
    with torch.no_grad():
        for bias in decoder_biases(model):
            bias.add_(shift)
    after = mean_active(passage_max_logits(model, tokenizer, passages, max_length))
    record = {"target_nnz": float(target_nnz), "passages": len(passages), "shift": shift,
              "passages_nnz_before": mean_active(max_logits), "passages_nnz_after": after}
    log.info("shifted decoder bias by %+.4g: %.1f -> %.1f active terms per probe passage (target %g)",
             shift, record["passages_nnz_before"], after, target_nnz)
    return record


def resolve_target_nnz(spec: Mapping[str, Any], reference_norms: Mapping[str, Any] | None) -> float | None:
    """``target_nnz`` as a number: ``reference`` reads the reference backbone's probe passages."""
    target = spec.get("target_nnz")
    if target != "reference":
        return target
    if reference_norms is None:
        raise VocabTransferError("target_nnz = reference needs the reference backbone's norms")
    return float(reference_norms["passages"]["mean_nonzeros"])
