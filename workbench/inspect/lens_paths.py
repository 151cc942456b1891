"""The decoder lens along a decoding: for every word the decoder chose, the layer from which it leads.

:func:`logit_lens` reads every decoder layer of a teacher-forced pass; here the pass is the decoder's own output
(greedy or a beam hypothesis), so the lens at step ``t`` sees exactly the prefix the search saw. Two readings:

* :func:`lens_steps` follows one emitted sequence: per step and decoder layer the chosen word's probability and
  rank, the lens's top words, the layer from which the chosen word leads (:func:`leads_from`), and the
  cross-attention head that looked hardest at one source position while the word was chosen;
* :func:`beam_tree_leads` does the same for every node of a beam search's tree
  (:class:`~workbench.translation.decode_trace.BeamTrace`), one batched pass over the parents' prefixes.

"Leads" means *is the lens's top word*. A beam may extend a hypothesis with a word that is not the model's top
choice even at the last layer: such a word never leads, and :func:`leads_from` says ``-1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from workbench.errors import PatchingError
from workbench.inspect.capture import capture_attention
from workbench.inspect.lens import TunedLens, _read_out, decoder_states, logit_lens

__all__ = ["LensSteps", "beam_tree_leads", "leads_from", "lens_steps"]


def leads_from(lens_logits: Tensor, chosen: Tensor) -> Tensor:
    """For every position, the first layer from which ``chosen`` is the lens's top token through the last layer.

    Args:
        lens_logits: (L, B, T, V) from :func:`~workbench.inspect.lens.logit_lens`.
        chosen: (B, T) token ids, the word the decoder emitted at each position.

    Returns:
        (B, T) long: a layer in 0..L-1, or -1 where ``chosen`` is not the top token even at the last layer.
    """
    if chosen.shape != lens_logits.shape[1:3]:
        raise PatchingError(f"chosen has shape {tuple(chosen.shape)}; the lens reads {tuple(lens_logits.shape[1:3])} "
                            "(B, T) positions: give one chosen token per position")
    top = lens_logits.argmax(-1) == chosen  # (L, B, T)
    L = top.shape[0]
    idx = torch.arange(L, device=top.device).view(L, 1, 1)
    last_not_top = torch.where(~top, idx, torch.full_like(idx, -1)).amax(0)  # (B, T)
    return torch.where(top[-1], last_not_top + 1, torch.full_like(last_not_top, -1))


@dataclass(frozen=True)
class LensSteps:
    """The lens along one emitted sequence (T steps, L decoder layers, source length S)."""

    tokens: list[int]  # the emitted ids, one per step (eos included if it was emitted)
    p_chosen: Tensor  # (L, T) probability of the emitted word under each layer's lens
    rank_chosen: Tensor  # (L, T) its rank there (0 = the lens's top word)
    top_ids: Tensor  # (L, T, k) the lens's k most probable words at each layer and step
    top_probs: Tensor  # (L, T, k) their probabilities
    leads: list[int]  # per step: the layer from which the emitted word leads (-1: never, not even the last)
    cross: Tensor  # (L, H, T, S) cross-attention weights of the same pass
    looked: list[tuple[int, int, int, float]]  # per step: (layer, head, source position, weight) of the strongest
    tuned: bool  # read through a tuned lens's translators

    @property
    def n_layers(self) -> int:
        return int(self.p_chosen.shape[0])

    def describe(self, step: int, token_label: Any, src_tokens: Sequence[str]) -> str:
        """One plain sentence about one step: where its word leads, what layer 0 read, which head looked where."""
        if not 0 <= step < len(self.tokens):
            raise PatchingError(f"step {step} is out of range: this decoding has {len(self.tokens)} steps")
        word = token_label(self.tokens[step])
        lens = "tuned lens" if self.tuned else "logit lens"
        lead = self.leads[step]
        where = (f"leads from decoder layer {lead} of {self.n_layers - 1}" if lead >= 0
                 else "is never the top word, not even at the last layer")
        first = token_label(int(self.top_ids[0, step, 0]))
        layer, head, pos, w = self.looked[step]
        return (f"step {step}: '{word}' {where} ({lens}); layer 0 reads '{first}' "
                f"({float(self.top_probs[0, step, 0]):.2f}); the cross-attention head that looked hardest at one "
                f"source piece: layer {layer}, head {head} → '{src_tokens[pos]}' ({w:.2f})")


def _ids(x: Sequence[int] | Tensor, what: str) -> Tensor:
    t = torch.as_tensor(x, dtype=torch.long)
    if t.dim() != 1 or t.numel() == 0:
        raise PatchingError(f"{what} must be a non-empty 1-D sequence of token ids; got shape {tuple(t.shape)}")
    return t


@torch.no_grad()
def lens_steps(model: nn.Module, src: Sequence[int] | Tensor, tokens: Sequence[int] | Tensor, bos_id: int,
               lens: TunedLens | None = None, k: int = 3) -> LensSteps:
    """Read the lens along one emitted sequence, and the cross-attention of the same pass.

    Args:
        model: a workbench Transformer.
        src: one sentence's source ids (S,), eos included.
        tokens: the ids the decoder emitted (T,), eos included if emitted; bos is not part of them.
        bos_id: the id the decoder starts from.
        lens: a :class:`TunedLens` for this model, or None for the logit lens.
        k: how many top words to keep per layer and step.
    """
    src_t, out_t = _ids(src, "src"), _ids(tokens, "tokens")
    device = next(model.parameters()).device
    s = src_t[None].to(device)  # (1, S)
    tgt = torch.cat([torch.tensor([bos_id]), out_t])[None, :-1].to(device)  # (1, T): bos + all but the last word
    with capture_attention(model, kinds=["dec.cross"]) as cache:
        lens_logits = logit_lens(model, s, tgt, lens=lens)  # (L, 1, T, V)
    cross = cache.stack("dec.cross")[:, 0]  # (L, H, T, S)
    probs = torch.softmax(lens_logits[:, 0].float(), -1).cpu()  # (L, T, V)
    chosen = out_t.view(1, -1).expand(probs.shape[0], -1)  # (L, T)
    p_chosen = probs.gather(-1, chosen[..., None])[..., 0]  # (L, T)
    rank = (probs > p_chosen[..., None]).sum(-1)  # (L, T)
    top_probs, top_ids = probs.topk(min(k, probs.shape[-1]), dim=-1)  # (L, T, k)
    leads = leads_from(lens_logits.cpu(), out_t[None])[0].tolist()
    L, H, T, S = cross.shape
    flat = cross.permute(2, 0, 1, 3).reshape(T, L * H * S)  # (T, L*H*S)
    w, idx = flat.max(-1)
    looked = [(int(i) // (H * S), int(i) // S % H, int(i) % S, float(v)) for v, i in zip(w, idx, strict=True)]
    return LensSteps(out_t.tolist(), p_chosen, rank, top_ids, top_probs, leads, cross, looked, lens is not None)


@torch.no_grad()
def beam_tree_leads(model: nn.Module, src: Sequence[int] | Tensor, trace: Any, lens: TunedLens | None = None,
                    pad_id: int | None = None) -> dict[int, int]:
    """For every node of a beam search's tree, the decoder layer from which its word leads (-1: never).

    Each parent's prefix (bos and its hypothesis) is read once; its last position's lens gives the layer for all
    of its children, kept, finished or pruned. Only that position is read out (L x parents x V logits, not that
    times the prefix length): the same logits as :func:`~workbench.inspect.lens.logit_lens` at that position.
    """
    nodes = getattr(trace, "nodes", None)
    if not nodes:
        raise PatchingError("the beam trace has no nodes: trace a sentence with trace_beam first")
    src_t = _ids(src, "src")
    device = next(model.parameters()).device
    pad = int(model.pad_id if pad_id is None else pad_id)
    parents = sorted({n.parent for n in nodes[1:]})
    prefixes = [[trace.bos_id, *trace.hypothesis(p)] for p in parents]
    T = max(len(p) for p in prefixes)
    # right padding: causal self-attention keeps every real position blind to the padding after it
    tgt = torch.full((len(prefixes), T), pad, dtype=torch.long)  # (P, T)
    for row, prefix in enumerate(prefixes):
        tgt[row, :len(prefix)] = torch.tensor(prefix)
    s = src_t[None].expand(len(prefixes), -1).to(device)  # (P, S)
    if lens is not None:
        lens.check_model(model)
    states, _ = decoder_states(model, s, tgt.to(device), project=False)  # L x (P, T, D), no (P, T, V) logits
    rows = torch.arange(len(prefixes), device=device)  # (P,)
    last = torch.tensor([len(p) - 1 for p in prefixes], device=device)  # (P,)
    at_last = torch.stack([_read_out(model, lens.translate(h[rows, last], layer) if lens is not None else h[rows, last])
                           for layer, h in enumerate(states)]).cpu()  # (L, P, V)
    row_of = {p: r for r, p in enumerate(parents)}
    out: dict[int, int] = {}
    for node in nodes[1:]:
        r = row_of[node.parent]
        lead = leads_from(at_last[:, r][:, None, None], torch.tensor([[node.token]]))  # (1, 1)
        out[node.id] = int(lead)
    return out
