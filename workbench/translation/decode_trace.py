"""Decoding you can watch: the whole tree of a beam search, its re-ranking under any length penalty, and the size
of the key/value cache. (Greedy decoding with the cross-attention row of every generated token opens the capture
side door: :func:`workbench.inspect.greedy_trace.trace_greedy`.)

The beam search runs the package's own loop (:func:`~workbench.translation.decode.beam_search`) and listens through
its ``on_step`` argument, so what is drawn is what :func:`~workbench.translation.decode.translate` computes, not a
re-implementation of it.

The beam is traced with early stopping off: the top-K choice at every step compares summed log-probabilities and
does not depend on ``alpha``; only the stopping test and the final ranking do. So one traced run holds the beam of
every step, and :func:`rerank` replays the stopping test and the ranking for any ``alpha``: its winner is the
hypothesis ``beam_search(..., alpha=alpha)`` returns for the same sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from workbench.errors import DecodingError, InputTextError
from workbench.translation.decode import Seq2Seq, beam_search, length_penalty

__all__ = ["BeamNode", "BeamTrace", "Ranking", "cache_bytes", "kv_cache_bytes", "rerank", "trace_beam"]

STATUSES = ("kept", "finished", "pruned")


@dataclass
class BeamNode:
    """One hypothesis of the search: a token appended to its parent's hypothesis."""

    id: int
    step: int  # how many tokens after bos (the root, bos, is step 0)
    token: int
    parent: int  # the parent's id; -1 for the root
    logp: float  # summed log-probability of the whole hypothesis
    status: str  # "kept" (it entered the beam), "finished" (eos entered the beam), "pruned" (it lost the top-K choice)


@dataclass
class BeamTrace:
    """A beam search's tree: every hypothesis considered (each surviving beam's top-K extensions at every step)
    and the beam after every step.

    Shapes: ``scores``, ``lengths``, ``done``: (steps + 1, K), row 0 the start (only the root alive)."""

    nodes: list[BeamNode]
    beams: list[list[int]]  # node ids in the K beam rows after each step (-1: an empty row with score -inf)
    scores: Tensor  # (steps + 1, K) float32 summed log-probabilities, as the search holds them
    lengths: Tensor  # (steps + 1, K) tokens counted by the length penalty (eos included, padding not)
    done: Tensor  # (steps + 1, K) finished rows
    limit: int  # the output budget in tokens (eos included): source length + max_extra, capped by the model
    beam: int
    bos_id: int
    eos_id: int

    @property
    def steps(self) -> int:
        return len(self.beams) - 1

    def hypothesis(self, node: int) -> list[int]:
        """The token ids of a hypothesis, bos excluded (eos included when it finished)."""
        out: list[int] = []
        while node > 0:
            out.append(self.nodes[node].token)
            node = self.nodes[node].parent
        return out[::-1]

    def finished(self) -> list[int]:
        """Ids of every hypothesis that finished (entered the beam with eos), in the order they finished."""
        return [n.id for n in self.nodes if n.status == "finished"]

    def left_beam_at(self, node: int) -> int | None:
        """The step at which a finished hypothesis was pushed out of the beam by better-scored ones, or None."""
        start = self.nodes[node].step
        for t in range(start + 1, len(self.beams)):
            if node not in self.beams[t]:
                return t
        return None


@dataclass(frozen=True)
class Ranking:
    """What :func:`beam_search` with one ``alpha`` decides from a :class:`BeamTrace`."""

    alpha: float
    winner: int  # node id of the returned hypothesis
    stop_step: int  # the step after which the search stops with this alpha
    beam: tuple[int, ...]  # the beam at that step (node ids; -1 for an empty row)
    normalised: dict[int, float] = field(default_factory=dict)  # every finished hypothesis: log P / lp(|Y|)


def _single_src(model: Seq2Seq, src: Tensor) -> None:
    if src.dim() != 2 or src.shape[0] != 1:
        raise InputTextError(f"trace one sentence at a time: src must have shape (1, S), got {tuple(src.shape)}")


@torch.no_grad()
def trace_beam(model: Seq2Seq, src: Tensor, beam: int = 4, bos_id: int = 2, eos_id: int = 3, max_extra: int = 50,
               max_len: int | None = None, use_cache: bool = True) -> BeamTrace:
    """Run :func:`beam_search` on one sentence without early stopping and record its tree.

    At every step each unfinished beam row's ``beam`` best extensions become nodes (any extension the top-K choice
    keeps is among them); those that enter the beam are "kept" (or "finished" with eos), the rest "pruned".

    Shapes: src (1, S) ids -> a :class:`BeamTrace`.
    """
    _single_src(model, src)
    K = beam
    nodes = [BeamNode(0, 0, bos_id, -1, 0.0, "kept")]
    beams: list[list[int]] = [[0] + [-1] * (K - 1)]
    scores = [torch.tensor([0.0] + [float("-inf")] * (K - 1))]
    lengths = [torch.zeros(K, dtype=torch.long)]
    done = [torch.zeros(K, dtype=torch.bool)]
    limits: list[int] = []

    def on_step(s: dict[str, Tensor]) -> None:
        prev, prev_done = beams[-1], done[-1]
        cand = s["candidates"][0].view(K, -1).float().cpu()  # (K, V)
        children: dict[tuple[int, int], int] = {}
        for row, parent in enumerate(prev):
            if parent < 0 or bool(prev_done[row]):
                continue
            top, tok = cand[row].topk(min(K, cand.shape[1]))
            for value, token in zip(top.tolist(), tok.tolist(), strict=True):
                if value != float("-inf"):
                    children[(parent, token)] = len(nodes)
                    nodes.append(BeamNode(len(nodes), nodes[parent].step + 1, token, parent, value, "pruned"))
        row_nodes = []
        new_scores = s["scores"].float().cpu()
        for row, (origin, token) in enumerate(zip(s["origin"].tolist(), s["token"].tolist(), strict=True)):
            parent = prev[origin]
            if parent < 0 or new_scores[row] == float("-inf"):
                row_nodes.append(-1)
            elif bool(prev_done[origin]):
                row_nodes.append(parent)  # a finished hypothesis carried on (it extends with padding at no cost)
            else:
                key = (parent, token)
                if key not in children:  # a tie the per-row top-K broke the other way
                    children[key] = len(nodes)
                    nodes.append(BeamNode(len(nodes), nodes[parent].step + 1, token, parent, float(new_scores[row]), "pruned"))
                node = nodes[children[key]]
                node.status = "finished" if token == eos_id else "kept"
                node.logp = float(new_scores[row])
                row_nodes.append(node.id)
        beams.append(row_nodes)
        scores.append(new_scores.clone())
        lengths.append(s["lengths"].cpu().clone())
        done.append(s["done"].cpu().clone())
        limits.append(int(s["limits"][0]))

    beam_search(model, src, beam=K, bos_id=bos_id, eos_id=eos_id, max_extra=max_extra, max_len=max_len,
                use_cache=use_cache, early_stop=False, on_step=on_step)
    return BeamTrace(nodes, beams, torch.stack(scores), torch.stack(lengths), torch.stack(done),
                     limits[0] if limits else 0, K, bos_id, eos_id)


def rerank(trace: BeamTrace, alpha: float) -> Ranking:
    """Replay :func:`beam_search`'s stopping test and final ranking on a traced beam with length penalty ``alpha``.

    The search stops after the first step where every row has finished, the budget is spent, or the best finished
    hypothesis's normalised score beats every unfinished row's best reachable one; the winner is the row of that
    step's beam with the highest ``log P / lp(|Y|)``, lp(|Y|) = ((5 + |Y|) / 6) ** alpha.
    """
    if not trace.steps:
        raise DecodingError("the trace holds no decoding step: decode a non-empty sentence first")
    limit = torch.full((trace.beam,), trace.limit, dtype=torch.long)
    stop = trace.steps
    for t in range(1, trace.steps + 1):
        sc, ln, dn = trace.scores[t], trace.lengths[t], trace.done[t]
        finished_best = torch.where(dn, sc / length_penalty(ln, alpha), float("-inf")).max()
        bound = torch.where(dn, float("-inf"), sc / length_penalty(limit, alpha)).max()
        if bool(dn.all()) or t >= trace.limit or bool(finished_best >= bound):
            stop = t
            break
    normalised = trace.scores[stop] / length_penalty(trace.lengths[stop], alpha)  # (K,)
    winner = trace.beams[stop][int(normalised.argmax())]
    every = {}
    for node in trace.finished():
        n = trace.nodes[node]
        lp = length_penalty(torch.tensor(n.step), alpha)
        every[node] = float(torch.tensor(n.logp, dtype=torch.float32) / lp)
    return Ranking(float(alpha), winner, stop, tuple(trace.beams[stop]), every)


# -- the key/value cache ----------------------------------------------------------------------------------------
def kv_cache_bytes(cfg: Any, steps: int, src_len: int, batch: int = 1, bytes_per_value: int = 4) -> int:
    """Bytes a decoder's key/value cache holds after ``steps`` tokens: per decoder layer, self-attention keys and
    values of every token fed so far, and cross-attention keys and values of every source position.

    ``n_dec_layers * batch * (steps + src_len) * (n_heads * d_k + n_heads * d_v) * bytes_per_value``.
    """
    inner, inner_v = cfg.n_heads * cfg.head_dim, cfg.n_heads * cfg.value_dim
    return cfg.n_dec_layers * batch * (steps + src_len) * (inner + inner_v) * bytes_per_value


def cache_bytes(cache: Any) -> int:
    """Bytes held by the tensors of a :class:`~workbench.model.transformer.DecoderCache` (measured, not computed)."""
    total = 0
    for layer in cache.layers:
        for kv in (layer.self_attn, layer.cross_attn):
            for t in (kv.k, kv.v):
                if t is not None:
                    total += t.numel() * t.element_size()
    return total
