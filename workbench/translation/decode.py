"""Decoding: batched greedy search and beam search with the paper's settings, both key/value-cache aware.

Paper section 6.1: beam size 4, length penalty alpha = 0.6, maximum output length = input length + 50,
stopping early when possible. The length penalty is GNMT's, lp(Y) = ((5 + |Y|) / 6) ** alpha. These settings are
:data:`DECODING` (a :class:`DecodeConfig`), the one place every default of decoding comes from: here, in the
command line, the pipeline and the shipped models' cards.

Both searches save work without changing a result: a sentence whose search has stopped leaves the batch, and beam
search feeds step 0 once per sentence (its K beams all hold bos), so the decoder runs on fewer rows than the B*K of a
plain implementation (transformers' ``generate`` runs them all until the batch ends). They do so only where
:func:`~workbench.translation.decode_steps.rows_round_alike` finds that the matrix products round the rows kept as the
whole batch does, so no score changes by a bit. Beam search ranks each sentence's K*K best extensions (the K best of
each beam, :func:`~workbench.translation.decode_steps.top_per_row`) rather than all K*V of them: the same scores
survive (an exact tie may be broken the other way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from workbench.errors import DecodingError, InputTextError
from workbench.runtime import Precision, PrecisionLike, autocast, check_precision, choose_precision
from workbench.translation.decode_steps import (  # noqa: F401 (DecodeConfig, Seq2Seq: re-exported)
    DECODING,
    DecodeConfig,
    Seq2Seq,
    _check_beam,
    _check_src,
    _check_translate_args,
    _eval_mode,
    _model_device,
    _step_limits,
    _Stepper,
    decode_token_budget,
    drops_rows,
    length_penalty,
    rows_round_alike,
    token_budget_batches,
    top_per_row,
)
from workbench.translation.kernels import attention_kernels
from workbench.translation.tokenizer import visible_text

log = logging.getLogger(__name__)


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: Tensor, bos_id: int = 2, eos_id: int = 3, max_extra: int = DECODING.max_extra,
                  max_len: int | None = None, use_cache: bool = True,
                  on_step: Callable[[int, Tensor, Tensor], None] | None = None, graphs: bool = False) -> Tensor:
    """Pick the most probable token at every step, for a whole batch at once.

    Args:
        src: source ids, right-padded with ``model.pad_id``.
        max_extra: output budget beyond the source length (paper: 50).
        max_len: a fixed output budget instead (tokens, eos included).
        use_cache: reuse keys/values of earlier steps (same result, faster).
        on_step: called after every step as ``on_step(t, logits, token)`` with the step's next-token logits
            (B, V) and the tokens emitted (B,) (what :func:`workbench.inspect.greedy_trace.trace_greedy` records).
        graphs: on CUDA, replay every step after the first as a captured CUDA graph
            (:class:`~workbench.translation.decode_graph.FixedStep`; a Transformer with the cache, no ``on_step``);
            ignored elsewhere.

    Shapes:
        src (B, S) -> (B, T) output ids without bos, eos included, padded with ``model.pad_id`` after eos.
    """
    _check_src(model, src)
    with _eval_mode(model):
        src_mask = model.src_mask(src)
        memory = model.encode(src, src_mask)
        limits = _step_limits(model, src, max_extra, max_len)  # (B,)
        B, T, device = src.shape[0], int(limits.max()), src.device
        step = _Stepper(model, memory, src_mask, use_cache, capacity=T, graphs=graphs and on_step is None)
        # a finished sentence leaves the batch (as in beam_search) on the CPU; on_step sees every sentence at
        # every step, and an accelerator keeps the batch's shape (see drops_rows)
        shrink = on_step is None and drops_rows(device)
        alive = list(range(B))  # the sentences still decoded
        result = torch.full((B, T), model.pad_id, dtype=torch.long, device=device)
        out = torch.full((B, T + 1), model.pad_id, dtype=torch.long, device=device)  # (b, T + 1) bos, then tokens
        out[:, 0] = bos_id
        done = torch.zeros(B, dtype=torch.bool, device=device)
        eos, pad = torch.tensor(eos_id, device=device), torch.tensor(model.pad_id, device=device)
        for t in range(T):
            logits = step(out[:, : t + 1])  # (b, V)
            nxt = logits.float().argmax(-1)  # the same first maximum; torch's CPU argmax is several times slower on bf16
            nxt = torch.where(t + 1 >= limits, eos, nxt)  # out of budget: end it
            nxt = torch.where(done, pad, nxt)
            out[:, t + 1] = nxt
            if on_step is not None:
                on_step(t, logits, nxt)
            done |= nxt == eos_id
            # the step's one host synchronisation: may the search stop (and, on the CPU, which sentences ended)
            if not shrink:
                if bool(done.all()):
                    break
                continue
            finished = done.tolist()
            if all(finished):
                break
            if not any(finished):
                continue
            keep = [i for i, f in enumerate(finished) if not f]
            rows = torch.tensor(keep, device=device)  # (b',) decoded on
            if _fewer_rows_alike(memory, len(finished), rows):
                gone = [i for i, f in enumerate(finished) if f]
                result[torch.tensor([alive[i] for i in gone], device=device), : t + 1] = out[
                    torch.tensor(gone, device=device), 1 : t + 2]
                step.reorder(rows)
                out, limits, done = out.index_select(0, rows), limits.index_select(0, rows), done.index_select(0, rows)
                alive = [alive[i] for i in keep]
        n = t + 1  # steps taken
        result[torch.tensor(alive, device=device), :n] = out[:, 1 : n + 1]
        return result[:, :n]


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    beam: int = DECODING.beam,
    alpha: float = DECODING.alpha,
    bos_id: int = 2,
    eos_id: int = 3,
    max_extra: int = DECODING.max_extra,
    max_len: int | None = None,
    use_cache: bool = True,
    return_scores: bool = False,
    early_stop: bool = True,
    on_step: Callable[[dict[str, Tensor]], None] | None = None,
    keep_finished: bool = False,
    graphs: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Batched beam search with GNMT length penalty; hypotheses are ranked by log P / lp at the end.

    Finished hypotheses stay in the beam with a frozen score (they only extend with padding). A sentence stops
    as soon as its best finished hypothesis cannot be overtaken (its normalised score beats every unfinished beam's
    best possible one), and the search stops when every sentence has stopped or the length budget is spent.

    ``early_stop=False`` skips that test (the beam runs until every hypothesis has finished or the budget is spent);
    nothing else depends on ``alpha``, so such a run holds the beam of every step of the search at any ``alpha``.
    ``on_step`` is called after every step with a dict of the step's tensors: ``candidates`` (B, K*V) the scores of
    every extension before the top-K choice, ``origin`` (B*K,) the rows the survivors extend, ``token`` (B*K,),
    ``scores`` (B*K,) summed log-probabilities, ``lengths`` (B*K,) and ``done`` (B*K,) after the step
    (:func:`workbench.translation.decode_trace.trace_beam` records the search's tree with it).

    ``keep_finished=True`` runs the other common variant (transformers' ``generate``, fairseq): ``beam`` unfinished
    hypotheses always go on, and finished ones are kept aside, the ``beam`` best of them; a finished hypothesis is
    then never pushed out by unfinished ones that later fall below it. With ``alpha=0`` it is transformers'
    beam search with ``length_penalty=0.0``, ``early_stopping=False`` and the same length limit (see
    :func:`_beam_search_kept` and tests/test_bridges.py).

    ``graphs=True`` replays the later steps as a CUDA graph on CUDA (as greedy_decode; not with ``on_step``).

    Shapes:
        src (B, S) -> (B, T) best hypothesis per sentence (eos included, pad after), [scores (B,)]
    """
    _check_src(model, src)
    _check_beam(beam, getattr(model, "tgt_vocab_size", None))
    if keep_finished:
        if on_step is not None or not early_stop:
            raise DecodingError("keep_finished=True takes neither on_step nor early_stop=False: trace or run the "
                                "default beam without early stopping instead")
        with _eval_mode(model):
            return _beam_search_kept(model, src, beam, alpha, bos_id, eos_id, max_extra, max_len, use_cache,
                                     return_scores, graphs)
    with _eval_mode(model):
        B, K, device = src.shape[0], beam, src.device
        src_mask = model.src_mask(src)
        memory = model.encode(src, src_mask)
        limits = _step_limits(model, src, max_extra, max_len).repeat_interleave(K)  # (B*K,)
        T = int(limits.max())
        expand = torch.arange(B, device=device).repeat_interleave(K)  # (B*K,) each sentence's row, K times
        # step 0: the K beams of a sentence all hold bos, so each sentence is fed once and its state copied K times
        # afterwards (K times fewer rows, and the memory's cross-attention keys/values projected once per sentence)
        fold = _fewer_rows_alike(memory, B * K, torch.arange(0, B * K, K, device=device))
        graphs = graphs and on_step is None
        step = (_Stepper(model, memory, src_mask, use_cache, capacity=T, graphs=graphs) if fold
                else _Stepper(model, memory.index_select(0, expand), src_mask.index_select(0, expand), use_cache,
                              capacity=T, graphs=graphs))
        # a sentence whose search has stopped leaves the batch on the CPU (its rows would only extend with
        # padding); an accelerator keeps the batch's shape (drops_rows), and tracing (on_step) sees every sentence
        # at every step
        shrink = on_step is None and drops_rows(device)
        alive = list(range(B))  # the sentences still searched, b <= B
        best_seqs: list[Tensor | None] = [None] * B  # each stopped sentence's best hypothesis (bos first)
        best_scores = torch.zeros(B, device=device)  # and its normalised score
        seqs = torch.full((B * K, T + 1), model.pad_id, dtype=torch.long, device=device)  # (b*K, T + 1)
        seqs[:, 0] = bos_id
        scores = torch.zeros(B, K, device=device)
        scores[:, 1:] = float("-inf")  # all beams start identical: keep one alive at first
        scores = scores.view(-1)  # (B*K,)
        lengths = torch.zeros(B * K, dtype=torch.long, device=device)
        done = torch.zeros(B * K, dtype=torch.bool, device=device)
        for t in range(T):
            b = len(alive)
            if t == 0 and fold:
                logits = step(seqs[::K, :1])  # (B, V) one row per sentence
                step.reorder(expand)  # memory, mask and caches: (B, ...) -> (B*K, ...)
                logits = logits.index_select(0, expand)  # (B*K, V)
            else:
                logits = step(seqs[:, : t + 1])  # (b*K, V)
            logp = torch.log_softmax(logits.float(), dim=-1)  # (b*K, V)
            Vt = logp.shape[-1]
            over = t + 1 >= limits
            # a sentence's K best extensions are among the K best of each of its beams (a beam adds one score to
            # all its extensions), so the search ranks K*K candidates per sentence rather than K*V
            row_top, row_token = top_per_row(logp, K)  # (b*K, K)
            if t == 0:  # a beam that must end (budget spent) extends with eos, a finished one with padding, at no cost
                only = torch.full_like(row_top[:1], float("-inf"))
                only[:, 0] = 0.0
            # selected with torch.where, not by boolean indexing (which asks the host how many rows are selected)
            row_top = torch.where(over[:, None], only, row_top)
            row_token = torch.where(over[:, None], eos_id, row_token)
            row_top = torch.where(done[:, None], only, row_top)
            row_token = torch.where(done[:, None], model.pad_id, row_token)
            top, pick = (scores[:, None] + row_top).view(b, K * K).topk(K, dim=-1)  # (b, K)
            origin = (pick // K + torch.arange(b, device=device)[:, None] * K).view(-1)  # (b*K,) source beam rows
            token = row_token.view(b, K * K).gather(1, pick).view(-1)
            if on_step is not None:  # the trace reports every extension the selection ranked from, (b, K*V)
                vocab = torch.arange(Vt, device=device)
                logp = torch.where(over[:, None], torch.where(vocab == eos_id, 0.0, float("-inf")), logp)
                logp = torch.where(done[:, None], torch.where(vocab == model.pad_id, 0.0, float("-inf")), logp)
                cand = (scores[:, None] + logp).view(b, K * Vt)
            step.reorder_beams(origin)  # each row's origin is a beam of its own sentence
            seqs[:, : t + 1] = seqs[:, : t + 1].index_select(0, origin)  # the right side is a copy: no aliasing
            seqs[:, t + 1] = token
            was_done = done.index_select(0, origin)
            lengths = lengths.index_select(0, origin) + (~was_done).long()
            done = was_done | (token == eos_id)
            scores = top.view(-1)
            # early stop per sentence: log-probabilities only fall, so an unfinished beam can at best reach
            # score / lp(limit); once the best finished hypothesis beats that bound, the sentence is decided
            finished_best = torch.where(done, scores / length_penalty(lengths, alpha), float("-inf")).view(b, K).max(-1).values
            bound = torch.where(done, float("-inf"), scores / length_penalty(limits, alpha)).view(b, K).max(-1).values
            if early_stop:
                done = done | (finished_best >= bound).repeat_interleave(K)
            if on_step is not None:
                on_step({"candidates": cand, "origin": origin, "token": token, "scores": scores, "lengths": lengths,
                         "done": done, "limits": limits})
            stopped = done.view(b, K).all(-1)  # (b,)
            # the step's one host synchronisation: may the search stop (and, on the CPU, which sentences stopped)
            if not shrink:
                if bool(stopped.all()):
                    break
                continue
            ended = stopped.tolist()
            if all(ended):
                break
            if not any(ended):
                continue
            keep = [i for i, e in enumerate(ended) if not e]
            rows = torch.tensor([i * K + j for i in keep for j in range(K)], device=device)  # (b'*K,) searched on
            if _fewer_rows_alike(memory, b * K, rows):
                gone = [i for i, e in enumerate(ended) if e]
                at = torch.tensor(gone, device=device)
                _keep_best(best_seqs, best_scores, [alive[i] for i in gone], seqs[:, : t + 2].view(b, K, -1)[at],
                           (scores / length_penalty(lengths, alpha)).view(b, K)[at])
                step.reorder(rows)
                seqs, scores, lengths, done, limits = (x.index_select(0, rows) for x in (seqs, scores, lengths, done,
                                                                                          limits))
                alive = [alive[i] for i in keep]
        b, width = len(alive), t + 2  # bos and the tokens of the steps taken
        final = _keep_best(best_seqs, best_scores, alive, seqs[:, :width].view(b, K, -1),
                           (scores / length_penalty(lengths, alpha)).view(b, K))
        if b == B:  # no sentence left early (always so on an accelerator): the hypotheses as one tensor
            result = final[:, 1:]  # (B, T)
        else:
            result = torch.full((B, width - 1), model.pad_id, dtype=torch.long, device=device)  # (B, T)
            for i, row in enumerate(best_seqs):
                result[i, : row.shape[0] - 1] = row[1:]
        return (result, best_scores) if return_scores else result


# Searches feed fewer rows (drop stopped sentences, fold step 0) only where a matrix product rounds each row as in the
# full batch, so every score stays, bit for bit, the one the full batch gives (:func:`rows_round_alike` probes it).
# Never below this many rows (a CPU product takes another kernel below 4 rows).
_SAME_ROUNDING_ROWS = 4


def _fewer_rows_alike(like: Tensor, rows: int, keep: Tensor) -> bool:
    return keep.shape[0] >= _SAME_ROUNDING_ROWS and rows_round_alike(like, rows, keep)


def _keep_best(best_seqs: list[Tensor | None], best_scores: Tensor, sentences: list[int], seqs: Tensor,
               normalised: Tensor) -> Tensor:
    """Store the best hypothesis of each stopped sentence (ranked by log P / lp, as at the end of the search), and
    return them (copies, not views of the search's buffers). Asks the host nothing.

    Shapes:
        sentences: n indices into the batch, seqs (n, K, t) their hypotheses, normalised (n, K) their scores
        -> (n, t)
    """
    best = normalised.argmax(-1)  # (n,)
    picked = seqs[torch.arange(seqs.shape[0], device=seqs.device), best]  # (n, t) a copy
    for j, i in enumerate(sentences):
        best_seqs[i] = picked[j]
    at = torch.tensor(sentences, device=best_scores.device)
    best_scores[at] = normalised.gather(1, best[:, None]).squeeze(1)
    return picked


_NEG = -1.0e9  # "impossible" as transformers writes it (a finite number, so sums stay ordered)


def _beam_search_kept(model: Seq2Seq, src: Tensor, K: int, alpha: float, bos_id: int, eos_id: int, max_extra: int,
                      max_len: int | None, use_cache: bool, return_scores: bool,
                      graphs: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Beam search with a separate store of finished hypotheses, step for step as transformers' ``generate``:
    1. the 2K best continuations of the K running hypotheses (accumulated log-probabilities);
    2. the K best of them that do not end (no eos, length left) run on;
    3. those among the first K that end enter the store (score / lp(length)) if they beat its worst;
    4. a sentence stops when its store is full and the best running hypothesis, at its best possible normalised
       score, cannot beat the store's worst; the search stops when every sentence has, or at the length limit
       (the batch keeps its B*K rows, so ``graphs=True`` replays the later steps as a CUDA graph).

    Shapes:
        src (B, S) -> (B, T) best finished hypothesis (eos included, pad after), [scores (B,)]
    """
    B, device, pad = src.shape[0], src.device, model.pad_id
    src_mask = model.src_mask(src)
    memory = model.encode(src, src_mask)
    limits = _step_limits(model, src, max_extra, max_len)  # (B,)
    expand = torch.arange(B, device=device).repeat_interleave(K)  # (B*K,)
    T = int(limits.max())
    step = _Stepper(model, memory.index_select(0, expand), src_mask.index_select(0, expand), use_cache, capacity=T,
                    graphs=graphs)
    seqs = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)
    running = torch.full((B, K), _NEG, device=device)
    running[:, 0] = 0.0  # all beams start identical: keep one alive at first
    store = torch.full((B, K, T), pad, dtype=torch.long, device=device)  # finished hypotheses, best first
    store_scores = torch.full((B, K), _NEG, device=device)
    store_real = torch.zeros(B, K, dtype=torch.bool, device=device)  # slot holds a finished hypothesis
    store_len = torch.zeros(B, K, dtype=torch.long, device=device)  # its length, eos included
    active = torch.ones(B, dtype=torch.bool, device=device)  # the store may still improve
    base = torch.arange(B, device=device)[:, None] * K  # (B, 1) first row of each sentence
    for t in range(T):
        logp = torch.log_softmax(step(seqs).float(), dim=-1)  # (B*K, V)
        V = logp.shape[-1]
        over = t + 1 >= limits  # (B,) this token is the last one allowed
        forced = torch.full_like(logp, float("-inf"))
        forced[:, eos_id] = 0.0
        logp = torch.where(over.repeat_interleave(K)[:, None], forced, logp)  # budget spent: only eos
        cand = (running.view(-1, 1) + logp).view(B, K * V)
        top, idx = cand.topk(2 * K, dim=-1)  # (B, 2K)
        origin, token = idx // V, idx % V  # (B, 2K) source beam and new token
        ends = (token == eos_id) | over[:, None]  # (B, 2K)
        # finished candidates among the first K enter the store
        prefix = seqs.view(B, K, -1)[:, :, 1:]  # (B, K, t) tokens so far, bos dropped
        new = torch.full((B, K, T), pad, dtype=torch.long, device=device)
        new[:, :, :t] = prefix.gather(1, origin[:, :K, None].expand(B, K, t))
        new[:, :, t] = token[:, :K]
        fresh = top[:, :K] / length_penalty(torch.tensor(t + 1, device=device), alpha)
        fresh = fresh + (~ends[:, :K]).float() * _NEG + (~active)[:, None].float() * _NEG
        merged = torch.cat([store_scores, fresh], dim=1)  # (B, 2K)
        store_scores, keep = merged.topk(K, dim=-1)
        store = torch.cat([store, new], dim=1).gather(1, keep[:, :, None].expand(B, K, T))
        store_real = torch.cat([store_real, ends[:, :K]], dim=1).gather(1, keep)
        store_len = torch.cat([store_len, torch.full_like(store_len, t + 1)], dim=1).gather(1, keep)
        # the K best continuations that do not end run on
        run_scores, pick = (top + ends.float() * _NEG).topk(K, dim=-1)  # (B, K)
        rows = (base + origin.gather(1, pick)).view(-1)  # (B*K,) beams of the same sentence
        step.reorder_beams(rows)
        seqs = torch.cat([seqs.index_select(0, rows), token.gather(1, pick).view(-1, 1)], dim=1)
        running = run_scores
        # can a running hypothesis still beat the worst finished one? (scores only fall; lp is largest at the limit)
        best_possible = running[:, 0] / length_penalty(limits, alpha)  # (B,)
        worst = torch.where(store_real, store_scores.min(-1, keepdim=True).values, _NEG)  # (B, K)
        active &= (best_possible[:, None] > worst).any(-1)
        if bool(~active.any() | over.all()):  # the step's one host synchronisation
            break
    result = store[:, 0, : max(int(store_len[:, 0].max()), 1)]  # (B, T) the best finished hypothesis
    return (result, store_scores[:, 0]) if return_scores else result


def _trim(ids: Sequence[int], eos_id: int, pad_id: int) -> list[int]:
    out = []
    for i in ids:
        if i == eos_id:
            break
        if i != pad_id:
            out.append(int(i))
    return out


@torch.no_grad()
def decoding_precision(model: Seq2Seq, tokenizer: Any, sentences: Sequence[str], beam: int = DECODING.beam,
                       precision: PrecisionLike = "auto", device: str | torch.device | None = None) -> Precision:
    """The number format :func:`translate` decodes ``sentences`` in (:func:`workbench.runtime.choose_precision`).

    ``auto`` on a CPU with bf16 matrix units probes this decoding (the beam size asked for) on the 16 longest of
    the first 64 sentences, for 12 steps, in fp32 and in bf16; the choice and why are logged in one line.
    """
    if isinstance(precision, Precision):
        return precision
    check_precision(precision)  # before the probe is built: a bool or a misspelt name fails at once
    device = _model_device(model, device)
    sample = [s for s in sentences[:64] if s is not None and visible_text(s).strip()]
    ids = sorted((i for i in tokenizer.encode_src(sample) if len(i) <= model.cfg.max_len), key=len)[-16:]
    probe = None
    if ids:
        src = torch.full((len(ids), max(map(len, ids))), model.pad_id, dtype=torch.long)  # (B, S)
        for row, seq in enumerate(ids):
            src[row, : len(seq)] = torch.tensor(seq)
        src = src.to(device)
        kw = dict(bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, max_len=min(12, model.cfg.max_len - 1))

        def probe() -> None:
            greedy_decode(model, src, **kw) if beam == 1 else beam_search(model, src, beam=beam, **kw)

    chosen = choose_precision(precision, device, probe, what=f"{'greedy' if beam == 1 else f'beam-{beam}'} decoding")
    log.info("decoding precision %s: %s", chosen.name, chosen.reason)
    return chosen


@torch.no_grad()
def translate(
    model: Seq2Seq,
    tokenizer: Any,
    sentences: Sequence[str],
    beam: int = DECODING.beam,
    alpha: float = DECODING.alpha,
    batch_size: int = 64,
    max_extra: int = DECODING.max_extra,
    device: str | torch.device | None = None,
    use_cache: bool = True,
    progress: bool = False,
    precision: PrecisionLike = "fp32",
    max_tokens: int | None = None,
    graphs: bool = False,
) -> list[str]:
    """Translate sentences (detokenized text in, detokenized text out), in length-sorted batches.

    Empty sentences (only whitespace or invisible format characters) translate to ``""`` without the model; one of
    more than ``max_len`` subword tokens raises :class:`InputTextError`; unseen characters become ``<unk>``.

    Args:
        beam: 1 for greedy search, else beam search with length penalty ``alpha``.
        batch_size: sentences per batch, where no token budget is set.
        max_tokens: a token budget per batch instead (source tokens times beam, padding included); None takes
            :func:`decode_token_budget`'s for the device (on CUDA, sized from its memory; on a CPU none, so
            batches of ``batch_size``).
        graphs: on CUDA, replay each decoding step as a captured CUDA graph (:mod:`workbench.translation.decode_graph`).
        precision: ``"fp32"`` (the default: the figures the lessons show), ``"bf16"`` (autocast; an error on a CPU
            without bf16 matrix units), ``"auto"`` (bf16 on CUDA; on a CPU with bf16 units only where a probe, this
            decoding on the first batch's first sentences for a few steps, measures it faster), or a resolved
            :class:`~workbench.runtime.Precision`.
    """
    sentences = _check_translate_args(model, tokenizer, sentences, beam, alpha, batch_size, max_tokens)
    device = _model_device(model, device)
    results = [""] * len(sentences)
    todo = [i for i, s in enumerate(sentences) if s is not None and visible_text(s).strip()]
    encoded = dict(zip(todo, tokenizer.encode_src([sentences[i] for i in todo]), strict=True))
    too_long = [(i, len(ids)) for i, ids in encoded.items() if len(ids) > model.cfg.max_len]
    if too_long:
        i, n = too_long[0]
        raise InputTextError(
            f"sentence {i + 1} (index {i}) is {n} subword tokens long, more than the model's max_len={model.cfg.max_len} "
            f"({len(too_long)} such sentence(s)): split it into shorter sentences"
        )
    order = sorted(todo, key=lambda i: len(encoded[i]))
    budget = decode_token_budget(device, model, beam) if max_tokens is None else max_tokens
    batches = (token_budget_batches([len(encoded[i]) for i in order], budget, beam, order) if budget
               else [order[k : k + batch_size] for k in range(0, len(order), batch_size)])
    kw = dict(bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, max_extra=max_extra, use_cache=use_cache,
              graphs=graphs)

    def run(src: Tensor) -> Tensor:
        return greedy_decode(model, src, **kw) if beam == 1 else beam_search(model, src, beam=beam, alpha=alpha, **kw)

    def src_of(chunk: list[int]) -> Tensor:
        width = max(len(encoded[i]) for i in chunk)
        src = torch.full((len(chunk), width), model.pad_id, dtype=torch.long)  # (B, S)
        for row, i in enumerate(chunk):
            src[row, : len(encoded[i])] = torch.tensor(encoded[i])
        return src.to(device)

    with attention_kernels(model):  # this processor's decoding kernels (kernels.choose_kernels), for this call only
        precision = decoding_precision(model, tokenizer, sentences, beam, precision, device)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="translate", unit="batch", leave=False)
        for chunk in batches:
            with autocast(device, precision):
                out = run(src_of(chunk))
            texts = tokenizer.decode_tgt([_trim(row, tokenizer.eos_id, model.pad_id) for row in out.tolist()])
            for i, text in zip(chunk, texts, strict=True):
                results[i] = text
    return results
