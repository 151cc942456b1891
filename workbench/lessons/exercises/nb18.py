"""Exercise of notebook 18 (where the translation is decided): the decision layer of every position, the first
decoder layer from which the lens's top word is the final one and stays so, checked against
:func:`workbench.inspect.lens.decision_layer`."""

from __future__ import annotations

import torch
from torch import Tensor

from workbench.inspect.lens import decision_layer
from workbench.lessons.exercises.core import Case, Exercise, Invariant, register, variants

PACKAGE = ("workbench.inspect.lens.decision_layer",)


def _logits(L: int, B: int, T: int, V: int, seed: int, settle: float = 0.5) -> Tensor:
    """(L, B, T, V) lens logits that drift towards the last layer's, as a real lens's do: layer l is the final
    logits plus noise that shrinks with depth, so some positions agree early, some flip back and forth, some late."""
    g = torch.Generator().manual_seed(seed)
    final = torch.randn(B, T, V, generator=g)  # (B, T, V)
    noise = torch.randn(L, B, T, V, generator=g)  # (L, B, T, V)
    depth = torch.arange(L, 0, -1, dtype=torch.float32).view(L, 1, 1, 1) - 1  # L-1 ... 0: none at the last layer
    return final + settle * depth * noise  # (L, B, T, V)


def _cases() -> list[Case]:
    # top word by layer: position 0 reads 1, 0, 1, 1 (agrees, leaves, back from 2); position 1 reads 0, 0, 1, 0
    tops = torch.tensor([[1, 0], [0, 0], [1, 1], [1, 0]])  # (L, T)
    flip = torch.nn.functional.one_hot(tops, 2).float()[:, None]  # (L, 1, T, V)
    return [Case("6 layers, batch 2, 5 positions, 7 words", (_logits(6, 2, 5, 7, 1),)),
            Case("one position that agrees, leaves and comes back", (flip,)),
            Case("a single layer: every word decided at 0", (_logits(1, 2, 3, 4, 2),)),
            Case("12 layers, slow to settle", (_logits(12, 1, 8, 5, 3, settle=0.8),)),
            Case("float64, 3 layers", (_logits(3, 3, 4, 6, 4).double(),))]


def _draw(rng) -> Case:
    L, B, T, V = rng.randint(1, 10), rng.randint(1, 3), rng.randint(1, 8), rng.randint(2, 12)
    settle = rng.choice([0.2, 0.6, 1.5])
    return Case(f"L={L}, B={B}, T={T}, V={V}, noise {settle}", (_logits(L, B, T, V, rng.randrange(2**31), settle),))


def _wrong(lens_logits: Tensor, rule: str = "stays", base: int = 0, final_from: int = -1) -> Tensor:
    """A parametrised decision layer, for writing the planted mistakes (each setting changed is one mistake)."""
    L = lens_logits.shape[0]
    agree = lens_logits.argmax(-1) == lens_logits[final_from].argmax(-1)  # (L, B, T)
    agree[-1] = True
    idx = torch.arange(L).view(L, 1, 1)
    if rule == "first":  # the first layer that agrees, whatever comes after
        out = torch.where(agree, idx, torch.full_like(idx, L)).amin(0)
    elif rule == "count":  # L minus the number of agreeing layers
        out = L - agree.long().sum(0)
    elif rule == "last wrong":  # the last layer that disagrees (-1 when none)
        out = torch.where(~agree, idx, torch.full_like(idx, -1)).amax(0)
    else:
        out = torch.where(~agree, idx, torch.full_like(idx, -1)).amax(0) + 1
    return (out + base).long()


def _in_range(args: tuple, output) -> str | None:
    L = args[0].shape[0]
    try:
        bad = ((output < 0) | (output > L - 1)).nonzero()
    except Exception:  # noqa: BLE001 (a wrong type is reported elsewhere)
        return None
    if len(bad):
        b, t = (int(v) for v in bad[0])
        return f"position ({b}, {t}) is given layer {int(output[b, t])}, outside 0..{L - 1}"
    return None


register(Exercise(
    "18.decision_layer", "the first layer from which the lens's top word is the final one and stays so",
    decision_layer, _cases, draw=_draw, package=PACKAGE,
    invariants=(Invariant("every decision layer lies in 0..L-1", _in_range),),
    mistakes=variants(
        _wrong,
        ("the first layer that agrees", "a word is decided only from the layer after which the lens never changes "
         "its mind: a layer that agrees and a later one that disagrees do not decide it", {"rule": "first"}),
        ("layers that disagree counted", "count from the last layer that disagrees, not how many disagree: a word "
         "that leaves and comes back is decided after its last disagreement", {"rule": "count"}),
        ("the last layer that disagrees", "the decision layer is one past the last layer that disagrees (and 0 when "
         "none does)", {"rule": "last wrong"}),
        ("layers counted from 1", "layers are numbered 0..L-1, as the lens's first axis", {"base": 1}),
        ("compared with the first layer", "the final word is the last layer's top word (lens_logits[-1]), not the "
         "first layer's", {"final_from": 0}),
    )))
