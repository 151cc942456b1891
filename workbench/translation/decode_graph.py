"""A decoding step of fixed shape, replayed as a captured CUDA graph (used on CUDA only, when asked).

A GPU decoding step of a small model is launch-bound: a few hundred small kernels, each launched by the host. A
CUDA graph launches them all at once, but it replays fixed addresses and shapes, which the ordinary step does not
have (its self-attention keys grow by one position a step). This step has them:

* the keys and values of decoder self-attention live in buffers of the whole output budget
  (:class:`SlotKVCache`); a step writes its own at position ``pos``, a device tensor, and attends over every
  position with a mask of those written so far (``tgt_mask``, True = may attend);
* the positional encoding is read at ``pos`` from the model's table;
* the token fed and ``pos`` are buffers the host fills before each replay, without waiting for the device.

The same mathematics as :meth:`workbench.model.transformer.Transformer.decode` with a key/value cache; attention
runs over the whole buffer with the unwritten positions masked out, so its sums can round differently in the last
bit (tests/test_decode_graph.py compares the tokens on the CPU, tests/test_gpu.py on CUDA). Nothing here is in
:mod:`workbench.model`: the model keeps the paper's forms, and this caller builds its step from them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from workbench.model.attention import KVCache
from workbench.model.transformer import DecoderCache, LayerCache, Transformer


class SlotKVCache(KVCache):
    """Decoder self-attention keys and values in buffers of ``capacity`` positions, written at position ``pos``
    (a (1,) device tensor); attention gets the whole buffers (the step's ``tgt_mask`` hides unwritten positions).

    Shapes:
        buffers (N, H, capacity, d_head)
    """

    def __init__(self, capacity: int, pos: Tensor) -> None:
        super().__init__(static=False)
        self.capacity, self.pos = capacity, pos
        self._k: Tensor | None = None
        self._v: Tensor | None = None

    @property
    def length(self) -> int:
        return 1  # never 0: the attention treats every query as a later step and takes the step's mask as given

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self._k is None or self._v is None or self._k.shape[0] != k.shape[0]:
            self._k = k.new_zeros((k.shape[0], k.shape[1], self.capacity, k.shape[-1]))  # (N, H, capacity, d_head)
            self._v = v.new_zeros((v.shape[0], v.shape[1], self.capacity, v.shape[-1]))
        self._k.index_copy_(2, self.pos, k)
        self._v.index_copy_(2, self.pos, v)
        self.k, self.v = self._k, self._v
        return self._k, self._v

    def reorder(self, index: Tensor) -> None:
        """Rows ``index``: in place when the batch keeps its size (the buffers keep their addresses, as a captured
        graph needs), into new buffers otherwise."""
        if self._k is None or self._v is None:
            return
        if index.shape[0] == self._k.shape[0]:
            self._k.copy_(self._k.index_select(0, index))
            self._v.copy_(self._v.index_select(0, index))
        else:
            self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)
        self.k, self.v = self._k, self._v


def fixed_shape_supported(model: Any) -> bool:
    """Whether ``model`` can take the fixed-shape step (a :class:`Transformer`; the GRU baseline cannot)."""
    return isinstance(model, Transformer)


class FixedStep:
    """The fixed-shape decoding step of a :class:`Transformer` for one batch: ``step(token, t)`` returns the next
    token's logits (N, V) after feeding ``token`` (N, 1) at position ``t``.

    ``graphs=True`` (CUDA only) replays steps after the first as one captured CUDA graph; the first step runs
    eagerly (it fills the cross-attention keys and values and any lazy initialisation), and the graph is captured
    once the batch has its final rows.
    """

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor, capacity: int,
                 graphs: bool = False) -> None:
        if graphs and memory.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device: use graphs=False elsewhere")
        self.model, self.memory, self.src_mask, self.capacity = model, memory, src_mask, capacity
        self.device = device = memory.device  # the graph is captured and replayed on it, whichever device is current
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.positions = torch.arange(capacity, device=device)
        self.cache = DecoderCache([LayerCache(self_attn=SlotKVCache(capacity, self.pos)) for _ in model.decoder_layers])
        self.graphs = graphs
        self._graph: Any = None
        self._token: Tensor | None = None
        self._out: Tensor | None = None

    def _forward(self, token: Tensor) -> Tensor:
        """Shapes: token (N, 1) -> logits (N, V)."""
        m = self.model
        emb = m.tgt_embed
        positional = emb.positional
        table = positional.table if hasattr(positional, "table") else positional.embedding.weight  # (max_len, D)
        x = emb.tokens(token) * emb.scale  # (N, 1, D)
        x = emb.dropout(x + table.index_select(0, self.pos).to(x.dtype))  # (N, 1, D)
        tgt_mask = (self.positions <= self.pos)[None, None, None, :]  # (1, 1, 1, capacity) written positions
        for layer, cache in zip(m.decoder_layers, self.cache.layers, strict=True):
            x = layer(x, self.memory, self.src_mask, tgt_mask=tgt_mask, cache=cache)
        return m.generator(m.decoder_norm(x))[:, -1]  # (N, V)

    def __call__(self, token: Tensor, t: int) -> Tensor:
        self.pos.fill_(t)
        if not self.graphs or t == 0:
            return self._forward(token)
        with torch.cuda.device(self.device):  # streams and the replay on the model's device, not the current one
            if self._graph is None:
                self._capture(token)
            assert self._token is not None and self._out is not None
            self._token.copy_(token)
            self._graph.replay()
        return self._out

    def _capture(self, token: Tensor) -> None:
        """Capture the step on ``self.device`` (the caller makes it the current device)."""
        self._token = token.clone()
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up outside the graph (writes this step's keys: the replay rewrites them)
            self._forward(self._token)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self._graph = torch.cuda.CUDAGraph()
        # captured on a stream of this device (torch.cuda.graph's default stream is made once, on whichever device
        # was current at the first capture in the process)
        with torch.cuda.graph(self._graph, stream=side):
            self._out = self._forward(self._token)

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` of the memory, the source mask and every cache (before a graph is captured only:
        beam search folds step 0 then expands its rows, and an accelerator's batch keeps its rows afterwards)."""
        if self._graph is not None:
            raise ValueError("a captured decoding step cannot change its rows: reorder before the capture")
        self.memory, self.src_mask = self.memory.index_select(0, index), self.src_mask.index_select(0, index)
        self.cache.reorder(index)

    def reorder_beams(self, index: Tensor) -> None:
        """Beam search's reordering inside each sentence's K rows: only the self-attention caches move."""
        for layer in self.cache.layers:
            layer.self_attn.reorder(index)

