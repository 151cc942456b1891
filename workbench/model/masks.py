"""Boolean attention masks. One convention everywhere: ``True`` means *may attend*.

This is the convention of :func:`torch.nn.functional.scaled_dot_product_attention`. ``torch.nn.MultiheadAttention``
and ``torch.nn.Transformer*`` use the opposite (``True`` = blocked): convert with :func:`to_nn_mask` at that
boundary only. The probes that check a model's masks from the outside are the lessons'
(:mod:`workbench.lessons.causality`).
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_mask(mask: Tensor | None, name: str = "mask") -> None:
    """Refuse a mask that is not boolean: torch reads a float mask as scores to add, so a 0/1 mask silently
    attends everywhere on the fused path.

    Raises:
        MaskError: naming the dtype and the conversion.
    """
    if mask is not None and mask.dtype != torch.bool:
        from workbench.errors import MaskError

        raise MaskError(f"{name} has dtype {mask.dtype}: masks are boolean, True = may attend. Convert it: "
                        "mask.bool() when 1 means may attend, mask == 0 for an additive mask of 0 and -inf, "
                        "~mask.bool() for torch.nn's convention (1 = blocked)")


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """True at real tokens, False at padding.

    Shapes:
        tokens: (B, T) integer ids -> (B, T) bool
    """
    return tokens != pad_id


def causal_mask(Tq: int, Tk: int | None = None, offset: int = 0, device: torch.device | None = None) -> Tensor:
    """Lower-triangular mask: query i may attend to keys j <= i + offset.

    ``offset`` is the number of keys already cached before the first query (incremental decoding).

    Shapes:
        -> (Tq, Tk) bool, with Tk = Tq + offset by default
    """
    Tk = Tq + offset if Tk is None else Tk
    q = torch.arange(Tq, device=device).unsqueeze(1) + offset  # (Tq, 1)
    k = torch.arange(Tk, device=device).unsqueeze(0)  # (1, Tk)
    return k <= q


def attention_mask(
    key_padding: Tensor | None = None,
    causal: bool = False,
    Tq: int | None = None,
    Tk: int | None = None,
    offset: int = 0,
) -> Tensor | None:
    """Combine a key-padding mask and a causal mask into one broadcastable boolean mask.

    Args:
        key_padding: (B, Tk) True at real keys, or None.
        causal: add a causal (lower-triangular) constraint; needs ``Tq``.
        Tq, Tk: query/key lengths (Tk defaults to key_padding's length, or Tq + offset).
        offset: keys cached before the first query.

    Shapes:
        -> (B, 1, 1, Tk) for padding only, (1, 1, Tq, Tk) for causal only, (B, 1, Tq, Tk) for both, or None.
    """
    mask = None
    if key_padding is not None:
        mask = key_padding[:, None, None, :]  # (B, 1, 1, Tk)
    if causal:
        if Tq is None:
            raise ValueError("attention_mask(causal=True) needs Tq, the number of queries")
        if Tk is None:
            Tk = key_padding.shape[-1] if key_padding is not None else Tq + offset
        device = key_padding.device if key_padding is not None else None
        c = causal_mask(Tq, Tk, offset=offset, device=device)[None, None]  # (1, 1, Tq, Tk)
        mask = c if mask is None else mask & c  # (B, 1, Tq, Tk)
    return mask


def to_nn_mask(mask: Tensor) -> Tensor:
    """Convert our mask (True = may attend) to torch.nn's (True = blocked), or back: it is an involution."""
    check_mask(mask)
    return ~mask
