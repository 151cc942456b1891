"""Information flow through the attention layers: attention rollout and attention flow (Abnar & Zuidema, 2020).

Raw attention says where one layer looks; after a few layers every position is a mixture of mixtures. Abnar and
Zuidema ("Quantifying Attention Flow in Transformers", ACL 2020) follow the mixing down to the input tokens:

* the residual connection is accounted for by adding the identity: ``Â = 0.5 * A + 0.5 * I`` with ``A`` the
  layer's attention averaged over heads, rows then renormalised to sum to 1;
* **rollout** multiplies these matrices, ``R = Â_L ... Â_2 Â_1``: ``R[i, j]`` is the share of the top-layer
  position ``i`` that comes from input token ``j`` if attention mixed linearly (rows sum to 1);
* **flow** treats the layers as a graph (one node per position and layer, an edge of capacity ``Â_l[i, j]``
  from node ``j`` of layer ``l - 1`` to node ``i`` of layer ``l``) and takes the maximum flow from input token
  ``j`` to top position ``i``: a bottleneck anywhere on the way limits it, where rollout multiplies through.

Through the decoder to the source (our extension of the paper's encoder-only recipe, the same assumptions): each
decoder layer mixes twice, by masked self-attention and by cross-attention into the encoder's output, each with
its residual. Keep two matrices per decoder layer, ``D`` (T, T): shares of the decoder input tokens, and ``X``
(T, S): shares of the source tokens, starting from ``D = I``, ``X = 0``; with ``R_enc`` the encoder rollout
(S, S), each decoder layer does

    self-attention:   D <- Â_self D,                X <- Â_self X           (Â_self = renorm(0.5 A_self + 0.5 I))
    cross-attention:  D <- 0.5 D,                   X <- 0.5 X + 0.5 A_cross R_enc
    (a cross-attention row that attended to nothing, fully masked, leaves D and X as they were)

so that every row of ``[X | D]`` sums to 1; ``X[t, j]`` is how much output position ``t`` (which predicts
output token ``t``) draws on source token ``j``. Feed-forward sub-layers act per position and mix nothing; layer
norms are ignored, as in the paper. The flow version uses the same graph: two decoder levels per layer, the
cross level fed by the decoder's own previous level (capacity 0.5) and by the encoder's top level (capacity
``0.5 * A_cross[t, j]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from workbench.errors import WorkbenchError

FLOW_SCALE = 10**9  # capacities become integers (networkx's max-flow algorithms are exact on integers)


class FlowInputError(WorkbenchError, ValueError):
    """Attention weights that cannot be rolled out or turned into a flow graph as given."""


def _layers(layers: Sequence[Tensor] | Tensor, name: str, average_heads: bool) -> list[Tensor]:
    out = [torch.as_tensor(a).detach().double().cpu() for a in layers]
    if not out:
        raise FlowInputError(f"{name} is empty: pass one attention tensor per layer, bottom layer first")
    need = 3 if average_heads else 2
    for i, a in enumerate(out):
        if a.dim() < need:
            raise FlowInputError(f"{name}[{i}] has shape {tuple(a.shape)}: expected (..., H, Tq, Tk) per-head weights"
                                 + ("" if average_heads else " or (..., Tq, Tk) with average_heads=False"))
    return [a.mean(-3) if average_heads else a for a in out]


def residual_attention(weights: Tensor, residual: bool = True, average_heads: bool = True) -> Tensor:
    """One layer's attention as a mixing matrix: heads averaged, ``0.5 A + 0.5 I`` with rows renormalised.

    A query row that attended to nothing (fully masked) becomes the identity row: the position keeps itself.

    Shapes:
        weights (..., H, T, T) (or (..., T, T) with ``average_heads=False``) -> (..., T, T)
    """
    a = _layers([weights], "weights", average_heads)[0]
    if not residual:
        return a
    if a.shape[-1] != a.shape[-2]:
        raise FlowInputError(f"the residual needs square self-attention, got (Tq, Tk) = {tuple(a.shape[-2:])}")
    mixed = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype)
    return mixed / mixed.sum(-1, keepdim=True)


def attention_rollout(layers: Sequence[Tensor] | Tensor, residual: bool = True, average_heads: bool = True,
                      cumulative: bool = False) -> Tensor:
    """Attention rollout ``R = Â_L ... Â_1`` through a stack of self-attention layers (bottom layer first).

    Args:
        layers: per-layer attention weights, e.g. ``[cache["enc.self", l][0] for l in range(L)]``.
        residual: add the identity for the residual connection (the paper's recipe); False multiplies raw ``A``.
        average_heads: the inputs carry a head axis to average; False if already (..., T, T).
        cumulative: also return every partial product (the rollout up to each layer).

    Returns:
        ``R`` (float64, CPU) with rows summing to 1: ``R[..., i, j]`` = share of top position ``i`` from input ``j``.

    Shapes:
        layers: L x (..., H, T, T) -> (..., T, T), or (L, ..., T, T) when ``cumulative``
    """
    mats = [residual_attention(a, residual, average_heads=False) for a in _layers(layers, "layers", average_heads)]
    rollout, partial = mats[0], [mats[0]]
    for a in mats[1:]:
        if a.shape != rollout.shape:
            raise FlowInputError(f"layers have different shapes {tuple(rollout.shape)} and {tuple(a.shape)}")
        rollout = a @ rollout  # (..., T, T)
        partial.append(rollout)
    return torch.stack(partial) if cumulative else rollout


@dataclass
class DecoderRollout:
    """Where each decoder output position's content comes from (see the module docstring for the recursion).

    Rows of ``source`` and ``target`` together sum to 1.

    Shapes:
        source (..., T, S): shares of the source tokens; target (..., T, T): shares of the decoder input tokens;
        encoder (..., S, S): the encoder rollout used.
    """

    source: Tensor
    target: Tensor
    encoder: Tensor

    def source_share(self) -> Tensor:
        """Total share of each output position that comes from the source. Shapes: -> (..., T)."""
        return self.source.sum(-1)

    def source_normalised(self) -> Tensor:
        """The source part with rows rescaled to sum to 1 (a distribution over source tokens per output)."""
        return self.source / self.source.sum(-1, keepdim=True).clamp_min(1e-12)


def decoder_rollout(enc_self: Sequence[Tensor] | Tensor, dec_self: Sequence[Tensor] | Tensor,
                    cross: Sequence[Tensor] | Tensor, average_heads: bool = True) -> DecoderRollout:
    """Roll attention out through the decoder to the source tokens, for every output position.

    Args:
        enc_self: encoder self-attention per layer, bottom first: L_e x (..., H, S, S).
        dec_self: decoder (masked) self-attention per layer: L_d x (..., H, T, T).
        cross: cross-attention per decoder layer: L_d x (..., H, T, S).
        average_heads: False if the inputs are already head-averaged.

    Returns:
        A :class:`DecoderRollout` (float64, CPU).
    """
    r_enc = attention_rollout(enc_self, average_heads=average_heads)  # (..., S, S)
    selfs = _layers(dec_self, "dec.self", average_heads)
    crosses = _layers(cross, "dec.cross", average_heads)
    if len(selfs) != len(crosses):
        raise FlowInputError(f"{len(selfs)} decoder self-attention layers but {len(crosses)} cross-attention layers")
    T, S = crosses[0].shape[-2], crosses[0].shape[-1]
    if r_enc.shape[-1] != S:
        raise FlowInputError(f"cross-attention has {S} keys but the encoder has {r_enc.shape[-1]} positions")
    batch = crosses[0].shape[:-2]
    D = torch.eye(T, dtype=torch.float64).expand(*batch, T, T)
    X = torch.zeros(*batch, T, S, dtype=torch.float64)
    for a_self, a_cross in zip(selfs, crosses, strict=True):
        m = residual_attention(a_self, average_heads=False)  # (..., T, T)
        D, X = m @ D, m @ X
        # a query that attended to no source key (a fully masked row: zeros) adds nothing, so the residual keeps
        # the whole position, as residual_attention does for self-attention
        keep = 1.0 - 0.5 * a_cross.sum(-1, keepdim=True).clamp(0.0, 1.0)  # (..., T, 1): 0.5, or 1 for such a row
        D, X = keep * D, keep * X + 0.5 * (a_cross @ r_enc)  # (..., T, T), (..., T, S)
    return DecoderRollout(source=X, target=D, encoder=r_enc)


def _cache_layers(cache: Any, kind: str, index: int) -> list[Tensor]:
    return [cache[kind, layer][index] for layer in cache.layers(kind)]


def rollout_from_cache(cache: Any, index: int = 0) -> DecoderRollout:
    """Encoder and decoder rollouts of one sentence of an :class:`~workbench.inspect.capture.AttentionCache`.

    The cache must hold a teacher-forced pass (e.g. ``inspect_translation(...).cache``) with all three kinds.
    """
    kinds = [k for k in ("enc.self", "dec.self", "dec.cross") if not cache.layers(k)]
    if kinds:
        raise FlowInputError(f"the cache holds no {kinds} attention: capture every kind of a teacher-forced pass")
    return decoder_rollout(_cache_layers(cache, "enc.self", index), _cache_layers(cache, "dec.self", index),
                           _cache_layers(cache, "dec.cross", index))


# -- attention flow (max-flow) ------------------------------------------------------------------------------------
def _networkx() -> Any:
    try:
        import networkx as nx
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise FlowInputError("attention flow needs networkx: pip install networkx") from exc
    return nx


def _add(graph: Any, u: Any, v: Any, capacity: float) -> None:
    cap = int(round(capacity * FLOW_SCALE))
    if cap > 0:
        graph.add_edge(u, v, capacity=cap)


def _flow_matrix(graph: Any, sources: Sequence[Any], sinks: Sequence[Any]) -> Tensor:
    """Max-flow value from every source node to every sink node: (len(sinks), len(sources))."""
    nx = _networkx()
    from networkx.algorithms.flow import build_residual_network, preflow_push

    out = torch.zeros(len(sinks), len(sources), dtype=torch.float64)
    residual = build_residual_network(graph, "capacity")  # built once, reset by each run
    for i, t in enumerate(sinks):
        for j, s in enumerate(sources):
            if s in graph and t in graph:
                out[i, j] = nx.maximum_flow_value(graph, s, t, flow_func=preflow_push, residual=residual) / FLOW_SCALE
    return out


def _outputs(outputs: Sequence[int] | None, n: int) -> list[int]:
    if outputs is None:
        return list(range(n))
    bad = [i for i in outputs if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n]
    if bad:
        raise FlowInputError(f"outputs {bad} are not positions 0..{n - 1} of the top layer")
    return list(outputs)


def _single(mats: list[Tensor], name: str) -> None:
    for i, a in enumerate(mats):
        if a.dim() != 2:
            raise FlowInputError(f"attention flow takes one sentence: {name}[{i}] has shape {tuple(a.shape)} after "
                                 "averaging heads; index the batch first (e.g. cache['enc.self', l][0])")


def attention_flow(layers: Sequence[Tensor] | Tensor, residual: bool = True, average_heads: bool = True,
                   outputs: Sequence[int] | None = None) -> Tensor:
    """Attention flow through a stack of self-attention layers: max-flow from each input to each top position.

    Args:
        layers: per-layer weights of one sentence, bottom first: L x (H, T, T) (or (T, T), ``average_heads=False``).
        residual: use ``Â = renorm(0.5 A + 0.5 I)`` as capacities (the paper); False uses raw ``A``.
        outputs: top-layer positions to compute (default all; each costs T max-flow runs, about 16 ms each
            for T = 30 and 3 layers on one CPU core, so a whole 30-token sentence takes some 15 s).

    Returns:
        ``F`` (float64) with ``F[i, j]`` = max-flow from input token ``j`` to top position ``outputs[i]``.

    Shapes:
        layers: L x (H, T, T) -> (len(outputs), T)
    """
    mats = [residual_attention(a, residual, average_heads=False) for a in _layers(layers, "layers", average_heads)]
    _single(mats, "layers")
    nx = _networkx()
    graph = nx.DiGraph()
    T = mats[0].shape[-1]
    for level, a in enumerate(mats, start=1):
        if a.shape != (T, T):
            raise FlowInputError(f"layer {level - 1} has shape {tuple(a.shape)}, expected ({T}, {T})")
        for i in range(T):
            for j in range(T):
                _add(graph, (level - 1, j), (level, i), float(a[i, j]))
    L = len(mats)
    outputs = _outputs(outputs, T)
    return _flow_matrix(graph, [(0, j) for j in range(T)], [(L, i) for i in outputs])


def decoder_attention_flow(enc_self: Sequence[Tensor] | Tensor, dec_self: Sequence[Tensor] | Tensor,
                           cross: Sequence[Tensor] | Tensor, average_heads: bool = True,
                           outputs: Sequence[int] | None = None) -> Tensor:
    """Attention flow from each source token to each decoder output position (graph in the module docstring).

    Shapes:
        enc_self: L_e x (H, S, S); dec_self: L_d x (H, T, T); cross: L_d x (H, T, S) -> (len(outputs), S)
    """
    enc = [residual_attention(a, average_heads=False) for a in _layers(enc_self, "enc.self", average_heads)]
    selfs = [residual_attention(a, average_heads=False) for a in _layers(dec_self, "dec.self", average_heads)]
    crosses = _layers(cross, "dec.cross", average_heads)
    for mats, name in ((enc, "enc.self"), (selfs, "dec.self"), (crosses, "dec.cross")):
        _single(mats, name)
    if len(selfs) != len(crosses):
        raise FlowInputError(f"{len(selfs)} decoder self-attention layers but {len(crosses)} cross-attention layers")
    nx = _networkx()
    graph = nx.DiGraph()
    S, T, Le = enc[0].shape[-1], crosses[0].shape[-2], len(enc)
    for level, a in enumerate(enc, start=1):
        for i in range(S):
            for j in range(S):
                _add(graph, ("enc", level - 1, j), ("enc", level, i), float(a[i, j]))
    for layer, (a_self, a_cross) in enumerate(zip(selfs, crosses, strict=True)):
        below, mid, top = ("dec", 2 * layer), ("dec", 2 * layer + 1), ("dec", 2 * layer + 2)
        for i in range(T):
            for j in range(T):
                _add(graph, (*below, j), (*mid, i), float(a_self[i, j]))
            _add(graph, (*mid, i), (*top, i), 0.5)
            for j in range(S):
                _add(graph, ("enc", Le, j), (*top, i), 0.5 * float(a_cross[i, j]))
    outputs = _outputs(outputs, T)
    last = 2 * len(selfs)
    return _flow_matrix(graph, [("enc", 0, j) for j in range(S)], [("dec", last, i) for i in outputs])
