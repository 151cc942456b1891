"""Judging a measured trend against a paper's claim, with a noise yardstick (notebook 12, the paper's Table 3).

A claim says which way a variant moves a figure against the base: up (``+1``), down (``-1``) or not at all
(``0``). The yardstick ``m`` is how far two runs of the same base model land apart (the base trained again from
other initial weights). A directional trend **agrees** when it goes the claim's way by more than ``m``, is
**opposite** when it goes the other way by more than ``m``, and is **within noise** otherwise; a "no difference"
claim **agrees** when the variant lands within ``m`` of the base and **differs** otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.errors import ConfigError

VERDICTS = ("agrees", "opposite", "within noise", "differs")


def verdict(delta: float, direction: int, margin: float) -> str:
    """The verdict on one trend.

    Args:
        delta: the variant's figure minus the base's.
        direction: what the claim says of ``delta``: ``+1`` higher, ``-1`` lower, ``0`` the same.
        margin: the noise yardstick (>= 0).
    """
    if direction not in (-1, 0, 1):
        raise ConfigError(f"invalid direction={direction!r}: use +1 (higher), -1 (lower) or 0 (the same)")
    if not margin >= 0:
        raise ConfigError(f"invalid margin={margin!r}: the yardstick is a distance, use a number >= 0")
    if direction == 0:
        return "agrees" if abs(delta) <= margin else "differs"
    if direction * delta > margin:
        return "agrees"
    return "opposite" if direction * delta < -margin else "within noise"


def judge_claims(values: Mapping[str, float], claims: Mapping[str, tuple[str, int]], base: str,
                 yardstick: str) -> tuple[dict[str, dict[str, Any]], float]:
    """Every claim's verdict on one figure, and the yardstick.

    Args:
        values: the figure (log-perplexity, BLEU, ...) of every run, by run name.
        claims: claim text -> (the variant it is about, its :func:`verdict` direction).
        base: the base run's name; ``yardstick``: the base trained again from other initial weights.

    Returns:
        ``({claim: {"variant", "delta", "verdict"}}, margin)`` with ``margin = |values[yardstick] - values[base]|``.
    """
    missing = sorted({base, yardstick, *(v for v, _ in claims.values())} - set(values))
    if missing:
        raise ConfigError(f"no measured value for runs {missing}: measure them, or drop the claims about them")
    margin = abs(values[yardstick] - values[base])
    judged = {}
    for claim, (variant, direction) in claims.items():
        delta = values[variant] - values[base]
        judged[claim] = {"variant": variant, "delta": delta, "verdict": verdict(delta, direction, margin)}
    return judged, margin
