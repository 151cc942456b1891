"""The pieces both searches share: what a model must provide, the paper's decoding settings (:data:`DECODING`), the
length penalty, each sentence's output budget, and the stepper that feeds the decoder with or without its cache.

:mod:`workbench.translation.decode` builds greedy and beam search from them (and re-exports the public names).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workbench.errors import DecodingError, InputTextError
from workbench.model.attention import KVCache
from workbench.model.config import validate


class Seq2Seq(Protocol):
    """What decoding needs from a model (both :class:`Transformer` and :class:`RNNSeq2Seq` provide it)."""

    pad_id: int
    cfg: Any

    def src_mask(self, src: Tensor) -> Tensor: ...
    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor: ...
    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, cache: Any = None) -> Tensor: ...
    def init_cache(self, memory: Tensor | None = None, src_mask: Tensor | None = None) -> Any: ...


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode: the paper's settings (section 6.1) by default."""

    beam: int = 4  # beam size (1: greedy search)
    alpha: float = 0.6  # GNMT length penalty exponent, lp(Y) = ((5 + |Y|) / 6) ** alpha (0: no penalty)
    max_extra: int = 50  # output budget beyond the source length, in tokens (the paper's "input length + 50")

    def __post_init__(self) -> None:
        validate(isinstance(self.beam, int) and self.beam >= 1, "beam", self.beam, "use 1 (greedy) or more (paper: 4)")
        validate(isinstance(self.alpha, (int, float)) and self.alpha >= 0, "alpha", self.alpha,
                 "use 0 or more (paper: 0.6)")
        validate(isinstance(self.max_extra, int) and self.max_extra >= 0, "max_extra", self.max_extra,
                 "use 0 or more tokens (paper: 50)")


DECODING = DecodeConfig()  # the defaults of every decoding function, command and card


def length_penalty(length: Tensor, alpha: float) -> Tensor:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha, in float32.

    Computed in float64 and rounded, so a length gets the same value wherever it is computed: float32's vectorised
    ``pow`` can differ in the last bit with the element's place in the tensor, which would let the size of a batch
    decide a near-tie (MPS has no float64: float32 there).
    """
    wide = torch.float32 if length.device.type == "mps" else torch.float64
    return (((5.0 + length.to(wide)) / 6.0) ** alpha).float()


def _step_limits(model: Seq2Seq, src: Tensor, max_extra: int, max_len: int | None) -> Tensor:
    """Per-sentence output budget: source length + ``max_extra``, capped by the positional table."""
    if max_len is None and (not isinstance(max_extra, int) or isinstance(max_extra, bool) or max_extra < 0):
        raise DecodingError(f"max_extra={max_extra!r} is invalid: use a whole number of tokens >= 0 allowed beyond "
                            "the source length (the paper uses 50)")
    if max_len is not None and (not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1):
        raise DecodingError(f"max_len={max_len!r} is invalid: use a whole number of output tokens >= 1 (eos "
                            "included), or None for the source length + max_extra")
    src_len = (src != model.pad_id).sum(-1)  # (B,)
    limits = src_len + max_extra if max_len is None else torch.full_like(src_len, max_len)
    cap = model.cfg.max_len - 1  # the bos token takes position 0
    return limits.clamp(min=1, max=cap)


class PreallocatedKVCache(KVCache):
    """A decoder self-attention cache whose keys and values live in buffers allocated once for the whole output
    budget: each step writes its keys and values into the next free positions (no ``torch.cat`` and no new
    allocation per step, as :class:`~workbench.model.attention.KVCache` does). ``k`` and ``v`` are views of the
    filled positions, so attention sees exactly the tensors the growing cache would hold.

    Shapes:
        buffers (N, H, capacity, d_head); k, v: (N, H, length, d_head) views of them
    """

    def __init__(self, capacity: int) -> None:
        super().__init__(static=False)
        self.capacity = max(int(capacity), 1)
        self.filled = 0  # positions written
        self._k: Tensor | None = None
        self._v: Tensor | None = None

    @property
    def length(self) -> int:
        return self.filled

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        end = self.filled + k.shape[-2]
        if self._k is None or self._v is None or end > self._k.shape[-2] or self._k.dtype != k.dtype:
            self._allocate(k.shape[0], k, v, max(self.capacity, end))
        assert self._k is not None and self._v is not None
        self._k[:, :, self.filled : end] = k
        self._v[:, :, self.filled : end] = v
        self.filled = end
        self.k, self.v = self._k[:, :, :end], self._v[:, :, :end]  # (N, H, length, d_head)
        return self.k, self.v

    def reorder(self, index: Tensor) -> None:
        """Select batch rows ``index`` (N',): in place when the batch keeps its size (beam search's reordering),
        into new buffers of N' rows otherwise (a batch that drops or copies rows)."""
        if self._k is None or self._v is None:
            return
        L = self.filled
        if index.shape[0] == self._k.shape[0]:
            self._k[:, :, :L] = self._k[:, :, :L].index_select(0, index)  # the right side is a copy: no aliasing
            self._v[:, :, :L] = self._v[:, :, :L].index_select(0, index)
        else:
            k, v = self._k[:, :, :L].index_select(0, index), self._v[:, :, :L].index_select(0, index)
            self._k = self._v = None
            self.filled = 0
            self.append(k, v)
            return
        self.k, self.v = self._k[:, :, :L], self._v[:, :, :L]

    def _allocate(self, rows: int, k: Tensor, v: Tensor, capacity: int) -> None:
        """New buffers of ``capacity`` positions, holding what the old ones held."""
        old_k, old_v, L = self._k, self._v, self.filled
        self._k = k.new_empty((rows, k.shape[1], capacity, k.shape[-1]))  # (N, H, capacity, d_head)
        self._v = v.new_empty((rows, v.shape[1], capacity, v.shape[-1]))
        if old_k is not None and old_v is not None and L:
            self._k[:, :, :L], self._v[:, :, :L] = old_k[:, :, :L], old_v[:, :, :L]


class _Stepper:
    """Feeds tokens to the decoder, with or without the key/value cache, and returns last-position logits.

    ``capacity`` (the most tokens the search will feed) keeps a Transformer's self-attention keys and values in
    :class:`PreallocatedKVCache` buffers of that many positions; None keeps the growing cache of ``model.init_cache``.
    """

    def __init__(self, model: Seq2Seq, memory: Tensor, src_mask: Tensor, use_cache: bool,
                 capacity: int | None = None, graphs: bool = False) -> None:
        from workbench.model.transformer import DecoderCache

        self.model, self.memory, self.src_mask, self.use_cache = model, memory, src_mask, use_cache
        self.fixed = None
        if capacity is not None and _fixed_step_wanted(model, memory, use_cache, graphs):
            from workbench.translation.decode_graph import FixedStep

            self.fixed = FixedStep(model, memory, src_mask, capacity, graphs=memory.device.type == "cuda")  # type: ignore[arg-type]
        self.cache = model.init_cache(memory, src_mask) if use_cache and self.fixed is None else None
        if capacity is not None and preallocates(memory.device) and isinstance(self.cache, DecoderCache):
            for layer in self.cache.layers:
                layer.self_attn = PreallocatedKVCache(capacity)

    def __call__(self, prefix: Tensor) -> Tensor:
        """Shapes: prefix (N, t) -> logits of the next token (N, V)."""
        if self.fixed is not None:
            return self.fixed(prefix[:, -1:], prefix.shape[1] - 1)
        tgt = prefix[:, -1:] if self.use_cache else prefix
        return self.model.decode(tgt, self.memory, self.src_mask, self.cache)[:, -1]

    def reorder(self, index: Tensor) -> None:
        if self.fixed is not None:
            self.fixed.reorder(index)
            return
        self.memory = self.memory.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)

    def reorder_beams(self, index: Tensor) -> None:
        """:meth:`reorder` for beam search, where ``index`` (B*K,) keeps every row inside its sentence's block of K
        rows. Those rows hold copies of one sentence's memory, source mask and cross-attention keys/values, so only
        what the beams do not share moves: the decoder self-attention caches (a recurrent model's whole state)."""
        from workbench.model.transformer import DecoderCache

        if self.fixed is not None:
            self.fixed.reorder_beams(index)
        elif isinstance(self.cache, DecoderCache):
            for layer in self.cache.layers:
                layer.self_attn.reorder(index)
        elif self.cache is not None:
            self.cache.reorder(index)


def preallocates(device: torch.device) -> bool:
    """Whether the searches keep self-attention keys and values in :class:`PreallocatedKVCache` buffers on ``device``:
    off the CPU. On the CPU the growing cache is faster: its SDPA kernel took 2.4x as long on a strided view of a
    buffer as on a contiguous tensor (one thread, 256 rows, 8 heads, 10 cached positions: 4.6-5.2 ms against
    1.9-2.3 ms, contended), far more than ``torch.cat``'s copy (0.35 ms)."""
    return device.type != "cpu"


def _fixed_step_wanted(model: Seq2Seq, memory: Tensor, use_cache: bool, graphs: bool) -> bool:
    """Whether a search takes :class:`~workbench.translation.decode_graph.FixedStep` (replayed as a CUDA graph): when
    asked (``graphs=True``), on CUDA, with the cache, for a Transformer. Nowhere else, and never by default."""
    from workbench.translation.decode_graph import fixed_shape_supported

    return graphs and use_cache and memory.device.type == "cuda" and fixed_shape_supported(model)


@contextlib.contextmanager
def _eval_mode(model: Seq2Seq) -> Iterator[None]:
    """Evaluation mode (no dropout) while decoding; a model that was training is put back into training mode."""
    was_training = getattr(model, "training", False)
    if isinstance(model, nn.Module):
        model.eval()
    try:
        yield
    finally:
        if isinstance(model, nn.Module) and was_training:
            model.train()


def _check_beam(beam: int, vocab_size: int | None = None) -> None:
    if not isinstance(beam, int) or isinstance(beam, bool) or beam < 1:
        raise DecodingError(f"beam size {beam!r} is invalid: use an integer >= 1 (the paper uses 4; 1 is greedy)")
    if vocab_size is not None and beam > vocab_size:
        raise DecodingError(f"beam size {beam} is larger than the target vocabulary ({vocab_size} tokens): "
                            f"use beam <= {vocab_size}")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_translate_args(model: Any, tokenizer: Any, sentences: Any, beam: Any, alpha: Any, batch_size: Any = 64,
                          max_tokens: Any = None) -> Any:
    """What :func:`~workbench.translation.decode.translate` refuses, each in one line; returns the sentences (a
    generator or another iterable as a list)."""
    if not _positive_int(batch_size):
        raise DecodingError(f"batch_size={batch_size!r} is invalid: use a whole number of sentences, 1 or more "
                            "(such as 64)")
    if max_tokens is not None and not _positive_int(max_tokens):
        raise DecodingError(f"max_tokens={max_tokens!r} is invalid: use a whole number of tokens, 1 or more, or None "
                            "for a budget sized to the device")
    if isinstance(sentences, str):
        raise InputTextError("translate() takes a list of sentences, got one string: wrap it in a list")
    if isinstance(sentences, dict | set | frozenset):
        from workbench.translation.tokenizer import check_texts

        check_texts(sentences)  # refused there, in the words of every text entry point
    if not isinstance(sentences, list | tuple):
        try:
            sentences = list(sentences)
        except TypeError:
            raise InputTextError(f"translate() takes a list of sentences, got a {type(sentences).__name__}") from None
    if not isinstance(model, nn.Module) or not hasattr(tokenizer, "encode_src"):
        raise InputTextError(f"translate(model, tokenizer, sentences) got a {type(model).__name__} and a "
                             f"{type(tokenizer).__name__}: pass the model first, then its tokenizer "
                             "(as wb.pretrained returns them)")
    not_text = [i for i, s in enumerate(sentences) if not isinstance(s, str)]
    if not_text:
        i = not_text[0]
        raise InputTextError(f"sentence {i + 1} (index {i}) is a {type(sentences[i]).__name__}, not a string ({len(not_text)} such "
                             "entries): pass text only (an empty string translates to an empty string)")
    _check_beam(beam)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha) or alpha < 0:
        raise DecodingError(f"alpha={alpha!r} is invalid: use a finite number >= 0 (the paper uses 0.6; 0 ranks by "
                            "log-probability alone)")
    return sentences


def _check_src(model: Seq2Seq, src: Tensor) -> None:
    if src.dim() != 2:
        raise InputTextError(f"src must be a (batch, length) tensor of token ids, got shape {tuple(src.shape)}")
    if src.shape[1] > model.cfg.max_len:
        raise InputTextError(
            f"source of {src.shape[1]} tokens is longer than the model's max_len={model.cfg.max_len}: "
            "split the sentence or use a model built with a larger max_len"
        )


_CHUNK = 64  # columns per strided group in :func:`top_per_row` (fastest of 16-400 on (256, 8000), 1 CPU thread)


def top_per_row(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest values of each row and their columns: the same values as ``x.topk(k, dim=-1)``, found
    several times faster on a wide row (a vocabulary) and a small ``k`` (a beam).

    The row is read as ``C = 64`` strided groups (group ``c`` holds columns ``c, c + C, c + 2C, ...``); a vectorised
    max over the groups ranks them, and the k largest values of the row lie in the k groups with the largest maxima
    (were one in another group, k groups would each hold a value at least as large). The final ``topk`` then looks
    at those k groups only, so it needs ``k < C``; a larger ``k`` (a beam of 64 or more) takes ``torch.topk``. Among
    equal values the columns returned may differ from ``torch.topk``'s (which leaves that order unspecified too).

    Shapes:
        x (R, V) -> values (R, k), columns (R, k)
    """
    R, V = x.shape
    if V % _CHUNK or k >= _CHUNK or x.device.type != "cpu":  # the k best of C groups: k < C (and k <= V)
        return x.topk(k, dim=-1)
    groups = x.view(R, V // _CHUNK, _CHUNK)  # (R, n, C): groups[r, :, c] is group c of row r
    _, best = groups.amax(1).topk(k, dim=-1)  # (R, k) the groups with the largest maxima
    inside = groups.gather(2, best[:, None, :].expand(R, V // _CHUNK, k))  # (R, n, k) their values
    values, at = inside.reshape(R, -1).topk(k, dim=-1)  # (R, k)
    return values, (at // k) * _CHUNK + best.gather(1, at % k)


def rows_round_alike(like: Tensor, rows: int, keep: Tensor) -> bool:
    """Whether a matrix product on the rows ``keep`` of a batch of ``rows`` rows rounds each of them as the whole
    batch does, on ``like``'s device, at the current thread count and autocast format (a product of random rows of
    ``like``'s width, the whole batch's computed once per case).

    Both searches drop finished sentences from the batch (and beam search feeds step 0 once per sentence) only where
    this holds, so saving work never changes a score. It does not hold in general: a CPU product takes another
    kernel for fewer than 4 rows, and with several threads for a thread's share of fewer than 4 rows, which depends
    on how the rows are split (measured with torch 2.13 on AVX-512: at one thread any 4 rows or more round as the
    whole batch, at two threads a batch of 5-7 or 9-11 rows does not).

    Shapes:
        like (..., width), keep (n,) row indices into the batch
    """
    device = like.device
    dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else like.dtype
    x, w, full = _probe_batch(str(device), dtype, torch.get_num_threads(), like.shape[-1], rows)
    keep = keep.to(device)
    return torch.equal(F.linear(x.index_select(0, keep), w), full.index_select(0, keep))


@functools.lru_cache(maxsize=64)
def _probe_batch(device: str, dtype: torch.dtype, threads: int, width: int, rows: int) -> tuple[Tensor, Tensor, Tensor]:
    """Random rows, a random square weight and their product in ``dtype`` (the caller's autocast format, else the
    model's own: a bf16 model's rows round as bf16 products do)."""
    x, w = _random_rows(device, width, 1 << max(rows - 1, 255).bit_length())
    x, w = x[:rows].to(dtype), w.to(dtype)
    return x, w, F.linear(x, w)


@functools.lru_cache(maxsize=8)
def _random_rows(device: str, width: int, rows: int) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(width)
    return torch.randn(rows, width, generator=g).to(device), torch.randn(width, width, generator=g).to(device)


def drops_rows(device: torch.device) -> bool:
    """Whether the searches drop stopped sentences from the batch on ``device``: on the CPU, where fewer rows are
    less work (and where :func:`rows_round_alike` finds it changes no score). An accelerator keeps the batch's shape:
    the rows cost it little, and a fixed shape asks the host nothing more than whether to stop."""
    return device.type == "cpu"


def decode_token_budget(device: str | torch.device, model: Seq2Seq | None = None, beam: int = DECODING.beam,
                        memory_bytes: int | None = None) -> int | None:
    """The token budget of a decoding batch on ``device`` (source tokens times beam, padding included), or None for
    batches of a fixed number of sentences (the CPU's: a CPU gains nothing from wider batches).

    On CUDA a decoding step is launch-bound at the CPU's batch of 64 sentences: a batch as wide as memory allows
    spends the same launches on many more sentences. The budget keeps what one batch holds (the decoder's key/value
    caches over source and output, the step's logits in fp32) within an eighth of the device's memory, and at most
    2^18 tokens. ``memory_bytes`` stands in for the device's total memory (tests).
    """
    device = torch.device(device)
    if device.type != "cuda" and memory_bytes is None:
        return None
    total = memory_bytes if memory_bytes is not None else torch.cuda.get_device_properties(device).total_memory
    cfg = getattr(model, "cfg", None)
    d_model, layers = getattr(cfg, "d_model", 512), getattr(cfg, "n_dec_layers", 6)
    vocab = getattr(model, "tgt_vocab_size", 32000) or 32000
    # per source token and beam: the cross-attention keys and values (2 * d_model a layer), a self-attention cache
    # of the output budget (about twice the source: 2 * 2 * d_model a layer), the memory itself, and a share of the
    # (rows, V) fp32 logits (a row per sentence and beam; sentences average about 12 tokens on Multi30k)
    per_token = 4 * (layers * 6 * d_model + d_model + vocab // 12)
    return int(max(4096, min(1 << 18, total // 8 // per_token)))


def token_budget_batches(lengths: Sequence[int], max_tokens: int, beam: int, items: Sequence[int]) -> list[list[int]]:
    """Cut ``items`` (sorted by their ``lengths``, ascending) into consecutive batches whose padded size,
    ``rows * longest * beam``, stays within ``max_tokens`` (a batch holds at least one item)."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for item, n in zip(items, lengths, strict=True):
        if current and (len(current) + 1) * max(longest, n) * beam > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(item)
        longest = max(longest, n)
    if current:
        batches.append(current)
    return batches


def _model_device(model: Seq2Seq, device: str | torch.device | None) -> torch.device:
    """``device`` resolved ("auto", or one this machine has: one line otherwise), else the model's own."""
    if device is not None:
        from workbench.runtime import resolve_device

        return resolve_device(device)
    p = next(iter(model.parameters()), None) if isinstance(model, nn.Module) else None
    return p.device if p is not None else torch.device("cpu")
