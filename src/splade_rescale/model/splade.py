"""The SPLADE encoder: MLM logits -> log(1 + ReLU) -> max-pool over the input's tokens.

A model whose config carries an activation shift s (``logit_shift`` variants) gets
``log(1 + ReLU(logit - s))`` instead, in either head.

Queries and documents share one model. The pooling is done either by the naive head
(materialises batch x length x vocab logits) or by the fused head of
:mod:`splade_rescale.model.fused_head` (vocabulary chunks, argmax-only backward); both give
the same vectors.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Iterable, Iterator, Literal, Protocol, Sequence

import numpy as np
import torch
from torch import nn
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from splade_rescale.gpus import check_devices
from splade_rescale.model.fused_head import fused_splade_pool, naive_splade_pool
from splade_rescale.model.heads import load_masked_lm, logit_shift, mlm_head
from splade_rescale.model.sparse_rows import SparseRows, sparsify

HeadImpl = Literal["fused", "naive"]


class Batch(Protocol):
    """Texts of one length bucket (:class:`splade_rescale.encoding.buckets.Batch` is one)."""

    ids: Sequence[Sequence[int]]
    length: int
    rows: int


Precision = Literal["auto", "bf16", "fp32"]

# A job compiles its backbone (torch.compile) on CUDA when it encodes at least this many texts
# (documents of a corpus; queries and documents over a training run). Compiling costs about a minute
# per job; below this the uncompiled backbone finishes first. The GPU gain is pending a GPU run.
COMPILE_MIN_TEXTS = 200_000


def worth_compiling(device: torch.device, texts: int | None) -> bool:
    """Whether a job that encodes ``texts`` texts on ``device`` compiles its backbone (on CPUs the
    compile takes minutes for a few percent: never)."""
    return device.type == "cuda" and (texts or 0) >= COMPILE_MIN_TEXTS


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``auto``/None -> CUDA when available, else CPU, unless this process was handed GPU ids
    (:func:`splade_rescale.gpus.check_devices` stops it then); logs the devices the process sees."""
    auto = device is None or device == "auto"
    check_devices(torch.cuda.device_count(), torch.__version__, refuse_cpu=auto)
    if auto:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_has_amx() -> bool:
    """AMX tiles (Intel Sapphire Rapids and later), where bf16 matmuls outrun fp32."""
    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def uses_bf16(device: torch.device, precision: Precision, amx: bool | None = None) -> bool:
    """``bf16`` always; ``fp32`` never; ``auto`` on CUDA and on CPUs with AMX (``amx``: detected if None).

    CPUs without AMX (or avx512_bf16) run bf16 matmuls ~100x slower than fp32, so ``auto`` keeps
    fp32 there; on an AMX CPU bf16 autocast is the faster of the two (docs/measurements.md,
    "bf16 autocast against fp32 on the AMX CPU").
    """
    if precision != "auto":
        return precision == "bf16"
    if device.type == "cuda":
        return True
    return device.type == "cpu" and (cpu_has_amx() if amx is None else amx)


def autocast_for(device: torch.device, precision: Precision) -> contextlib.AbstractContextManager:
    """bf16 autocast (fp32 weights) when :func:`uses_bf16`, else plain fp32."""
    if uses_bf16(device, precision):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class SpladeEncoder(nn.Module):
    """Shared query/document SPLADE encoder over any masked-LM model (:func:`~splade_rescale.model.heads.mlm_head`)."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 head: HeadImpl = "fused", chunk_size: int = 8192, precision: Precision = "auto"):
        super().__init__()
        if head not in ("fused", "naive"):
            raise ValueError(f"encoding head must be 'fused' or 'naive', got {head!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.head_impl: HeadImpl = head
        self.chunk_size = chunk_size
        self.precision: Precision = precision
        self._head = mlm_head(model)
        self.compiled = False

    def compile_backbone(self, backend: str = "inductor") -> None:
        """Compile the backbone for every batch shape: batch and length are symbolic (``dynamic``), so
        new lengths never recompile; its graphs are at most four (with and without an attention mask,
        one text or more). Forward and backward both run compiled."""
        self._head.encoder.compile(dynamic=True, backend=backend)  # in place: the head's forward runs it
        self.compiled = True

    @classmethod
    def from_pretrained(cls, path: str | Path, head: HeadImpl = "fused", device: str | torch.device | None = None,
                        precision: Precision = "auto", chunk_size: int = 8192,
                        texts: int | None = None) -> "SpladeEncoder":
        """Load a saved model with fp32 weights (``precision`` only sets the autocast); compiled when
        :func:`worth_compiling` for a job of ``texts`` texts."""
        model, _ = load_masked_lm(path)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        encoder = cls(model, tokenizer, head=head, chunk_size=chunk_size, precision=precision)
        encoder = encoder.to(resolve_device(device))
        if worth_compiling(encoder.device, texts):
            encoder.compile_backbone()
        return encoder

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def logit_shift(self) -> float:
        """The activation shift s of ``log1p(relu(logit - s))``, from the model's config (0: none)."""
        return logit_shift(self.model)

    @property
    def vocab_size(self) -> int:
        return self._head.decoder.out_features

    def tokenize(self, texts: Sequence[str], max_length: int) -> list[list[int]]:
        """Token ids per text (special tokens added, cut at ``max_length``), unpadded.

        A chunk is tokenised once and then sorted and batched by token count (:meth:`pad` makes a
        batch). A fast tokenizer encodes the list on its own threads (``TOKENIZERS_PARALLELISM``,
        ``RAYON_NUM_THREADS``); safe to call from another thread while the model runs."""
        return self.tokenizer(list(texts), truncation=True, max_length=max_length,
                              return_attention_mask=False)["input_ids"]

    def pad(self, ids: Sequence[Sequence[int]], length: int | None = None,
            rows: int | None = None) -> dict[str, torch.Tensor]:
        """A batch of token ids padded to ``length`` tokens (None: its longest, with no
        ``attention_mask`` when no text is padded: nothing to mask) and filled to ``rows`` rows with
        copies of its last text (a fixed shape per length bucket: :mod:`splade_rescale.encoding.buckets`;
        a fixed length always carries the mask). Pinned when the model is on CUDA, for asynchronous copies."""
        ids = list(ids) + [ids[-1]] * ((rows or len(ids)) - len(ids))
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        longest = length or int(lengths.max())
        input_ids = np.full((len(ids), longest), self.tokenizer.pad_token_id, dtype=np.int64)
        mask = np.arange(longest) < lengths[:, None]
        if self.tokenizer.padding_side == "left":
            mask = mask[:, ::-1]
        input_ids[mask] = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        features = {"input_ids": torch.from_numpy(input_ids)}
        if length or (lengths < longest).any():
            features["attention_mask"] = torch.from_numpy(mask.astype(np.int64))
        if self.device.type == "cuda":
            features = {k: v.pin_memory() for k, v in features.items()}
        return features

    def features(self, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
        """:meth:`pad` of :meth:`tokenize`: the model's inputs for one batch of texts."""
        return self.pad(self.tokenize(texts, max_length))

    def on_device(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Tokenised features moved to the model's device (non-blocking from pinned memory)."""
        return {k: v.to(self.device, non_blocking=True) for k, v in features.items()}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """B x V SPLADE weights; ``attention_mask`` None: no padding, and no mask work in the backbone or head."""
        hidden = self._head.hidden_states(input_ids, attention_mask)
        decoder = self._head.decoder
        if self.head_impl == "fused":
            return fused_splade_pool(hidden, decoder.weight, decoder.bias, attention_mask, self.chunk_size,
                                     self.logit_shift)
        return naive_splade_pool(hidden, decoder.weight, decoder.bias, attention_mask, self.logit_shift)

    @torch.inference_mode()
    def _reps(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        """B x V SPLADE weights on the model's device, in eval mode and the configured precision."""
        was_training = self.training
        self.eval()
        try:
            with autocast_for(self.device, self.precision):
                return self(**self.on_device(features))
        finally:
            self.train(was_training)

    def encode_batch(self, texts: Sequence[str], max_length: int) -> torch.Tensor:
        """Dense SPLADE vectors (len(texts) x vocab, float32, on CPU) for one batch of texts."""
        return self._reps(self.features(texts, max_length)).float().cpu()

    def encode_sparse(self, batches: Iterable[Batch], quantization: float,
                      max_active_dims: int | None = None) -> Iterator[SparseRows]:
        """Quantised non-zeros of each batch of one length bucket (``ids``, padded to ``length``, filled
        to ``rows``: :class:`splade_rescale.encoding.buckets.Batch`), in order; rounding, top-k and the
        scan run on the device. Batch k + 1 is queued on the device before batch k's non-zeros are read
        back (the read waits for the device), so the device never waits for the host between batches."""
        queued: tuple[torch.Tensor, int] | None = None
        for batch in batches:
            reps = self._reps(self.pad(batch.ids, batch.length, batch.rows))
            if queued is not None:
                yield sparsify(queued[0][:queued[1]], quantization, max_active_dims)
            queued = reps, len(batch.ids)
        if queued is not None:
            yield sparsify(queued[0][:queued[1]], quantization, max_active_dims)
