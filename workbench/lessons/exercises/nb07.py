"""Exercises of notebook 07 (the training recipe): the learning-rate schedule, the shifted decoder input and
target, the label-smoothed loss, checkpoint averaging, the length penalty and one beam-search step, checked against
:func:`workbench.translation.objective.rate`, the batching of :mod:`workbench.translation.batching`,
:func:`~workbench.translation.objective.label_smoothed_loss`, :func:`~workbench.translation.checkpoint.average_checkpoints`'
arithmetic, :func:`~workbench.translation.decode.length_penalty` and the step inside
:func:`~workbench.translation.decode.beam_search`."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Mistake, register, variants
from workbench.lessons.exercises.predictions import Prediction, register_prediction
from workbench.translation.decode import length_penalty
from workbench.translation.objective import label_smoothed_loss as package_loss
from workbench.translation.objective import rate


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- rate ---------------------------------------------------------------------------------------------------------
def schedule(fn, steps, d_model, warmup) -> list[float]:
    """``fn(step, d_model, warmup)`` at every step of ``steps`` (how the check calls a schedule)."""
    return [_as_float(fn(s, d_model, warmup)) for s in steps]


def _as_float(v: object) -> object:
    """An int as a float (an int is a float in Python's numeric tower); anything else, a tensor too, as it is, for
    the comparison to name."""
    return float(v) if type(v) is int else v


def _rate_cases() -> list[Case]:
    return [Case("d_model 512, warm-up 4000", ([1, 2, 100, 3999, 4000, 4001, 40000], 512, 4000)),
            Case("d_model 64, warm-up 10", ([1, 5, 9, 10, 11, 50], 64, 10)),
            Case("warm-up 1", ([1, 2, 3], 16, 1))]


def _rate_from_zero(step, d_model, warmup):
    s = step - 1  # the step counter read before it is incremented
    return d_model ** -0.5 * min(s ** -0.5 if s > 0 else math.inf, s * warmup ** -1.5)


def _rate_draw(rng) -> Case:
    d_model, warmup = rng.choice([16, 64, 128, 256, 512, 1024]), rng.randint(1, 8000)
    steps = sorted({1, warmup, warmup + 1, *(rng.randint(1, 3 * warmup + 10) for _ in range(6))})
    return Case(f"d_model {d_model}, warm-up {warmup}", (steps, d_model, warmup))


register(Exercise(
    "07.rate", "the learning-rate schedule (paper eq. 3)", rate, _rate_cases, driver=schedule, atol=1e-12, rtol=1e-6,
    name="rate_by_hand", draw=_rate_draw, package=("workbench.translation.objective.rate",),
    mistakes=(
        Mistake("warm-up off by one", "steps are counted from 1: the first update uses step = 1 (a rate of 0 at the "
                "first step means the counter was read before it moved)", _rate_from_zero),
        Mistake("no d_model^-0.5 factor", "multiply by d_model ** -0.5", lambda s, d, w: min(s ** -0.5, s * w ** -1.5)),
        Mistake("warm-up slope uses warmup^-0.5", "during warm-up the rate is step · warmup^-1.5 (it meets step^-0.5 "
                "at step = warmup)", lambda s, d, w: d ** -0.5 * min(s ** -0.5, s * w ** -0.5)),
        Mistake("max instead of min", "take the smaller of step^-0.5 and step · warmup^-1.5",
                lambda s, d, w: d ** -0.5 * max(s ** -0.5, s * w ** -1.5)),
    )))


# -- shift_target -------------------------------------------------------------------------------------------------
def shift_target(tgt: Tensor) -> tuple[Tensor, Tensor]:
    """Teacher forcing: the decoder reads [bos, y1, ..., y_n] and predicts [y1, ..., y_n, eos], as
    :func:`workbench.translation.batching` builds its batches.

    Shapes: tgt (B, T) = bos ... eos pad -> tgt_in (B, T-1), tgt_out (B, T-1)
    """
    return tgt[:, :-1], tgt[:, 1:]


def _shift_cases() -> list[Case]:
    return [Case("batch 2 with padding", (torch.tensor([[2, 7, 8, 9, 3], [2, 5, 3, 0, 0]]),)),
            Case("batch 1, one word", (torch.tensor([[2, 6, 3]]),)),
            Case("empty sentence", (torch.tensor([[2, 3], [2, 3]]),))]


def _shift_draw(rng) -> Case:
    B, T = rng.randint(1, 4), rng.randint(2, 9)
    lens = P.lengths(rng, B, T, minimum=2)
    rows = [[2] + [rng.randint(4, 30) for _ in range(n - 2)] + [3] + [0] * (T - n) for n in lens]
    return Case(f"batch {B}, lengths {lens}", (torch.tensor(rows),))


register(Exercise(
    "07.shift_target", "the decoder input and the target, shifted by one", shift_target, _shift_cases,
    draw=_shift_draw, package=("workbench.translation.batching.make_batch",),
    mistakes=(
        Mistake("target not shifted", "the target at position t is the token after the input's: tgt_out = tgt[:, 1:]",
                lambda tgt: (tgt[:, :-1], tgt[:, :-1])),
        Mistake("shifted the wrong way", "the input starts with bos (tgt[:, :-1]) and the target ends with eos "
                "(tgt[:, 1:])", lambda tgt: (tgt[:, 1:], tgt[:, :-1])),
        Mistake("input not cut", "drop the last token from the input: tgt_in = tgt[:, :-1], as long as tgt_out",
                lambda tgt: (tgt, tgt[:, 1:])),
    )))


# -- label_smoothed_loss ------------------------------------------------------------------------------------------
def label_smoothed_loss(logits: Tensor, targets: Tensor, pad_id: int, eps: float) -> Tensor:
    """The summed label-smoothed cross-entropy over the non-padding targets: each target keeps 1 - eps of the
    probability mass and eps is spread uniformly over all V classes (torch's convention).

    Shapes: logits (B, T, V), targets (B, T) -> scalar
    """
    return package_loss(logits, targets, pad_id, eps)[0]


def _loss_cases() -> list[Case]:
    g = _gen(7)
    t = torch.tensor([[5, 6, 7, 0], [4, 0, 0, 0]])
    return [Case("batch 2 with padding, eps 0.1", (torch.randn(2, 4, 9, generator=g) * 2, t, 0, 0.1)),
            Case("batch 1, length 1, eps 0.2", (torch.randn(1, 1, 5, generator=g), torch.tensor([[3]]), 0, 0.2)),
            Case("pad id 1, eps 0.3", (torch.randn(2, 3, 6, generator=g), torch.tensor([[2, 1, 1], [4, 5, 1]]), 1, 0.3)),
            Case("a confident model: logits 200 apart (log of softmax gives -inf)",
                 (torch.tensor([[[0.0, 200.0, 1.0, -3.0], [50.0, -150.0, 0.0, 2.0]]]), torch.tensor([[0, 2]]), 3, 0.1))]


def _smoothed(logits, targets, pad_id, eps, ignore=True, reduction="sum", others=False, smooth=True):
    eps = eps if smooth else 0.0
    logp = torch.log_softmax(logits.float(), -1)
    V = logp.shape[-1]
    nll = -logp.gather(-1, targets[..., None]).squeeze(-1)
    if others:  # eps spread over the V - 1 wrong classes
        smooth = -(logp.sum(-1) - (-nll)) / (V - 1)
    else:
        smooth = -logp.mean(-1)
    loss = (1 - eps) * nll + eps * smooth
    keep = targets != pad_id if ignore else torch.ones_like(targets, dtype=torch.bool)
    loss = loss[keep]
    return loss.sum() if reduction == "sum" else loss.mean()


def _loss_draw(rng) -> Case:
    B, T, V, pad = rng.randint(1, 3), rng.randint(1, 5), rng.randint(2, 12), rng.randint(0, 1)
    lens = P.lengths(rng, B, T)
    targets = torch.randint(0, V, (B, T), generator=P.gen(rng))
    targets = torch.where(targets == pad, (pad + 1) % V, targets).masked_fill(~P.key_mask(lens, T), pad)
    eps = rng.choice([0.0, 0.1, 0.2, 0.3])
    return Case(f"B={B}, T={T}, V={V}, pad id {pad}, eps {eps}", (P.randn(rng, B, T, V, scale=2.0), targets, pad, eps))


register(Exercise(
    "07.label_smoothed_loss", "the label-smoothed cross-entropy, summed over real tokens", label_smoothed_loss,
    _loss_cases, atol=1e-4, name="smoothed_loss", draw=_loss_draw, differentiable=True,
    package=("workbench.translation.objective.label_smoothed_loss", "workbench.translation.objective.step_loss"),
    mistakes=variants(
        _smoothed,
        ("padding not ignored", "leave out the positions whose target is pad_id (ignore_index=pad_id)",
         {"ignore": False}),
        ("no label smoothing", "mix the one-hot target with the uniform distribution: (1 - eps) · NLL + eps · mean "
         "over classes of -log p", {"smooth": False}),
        ("mean instead of sum", "sum over the real tokens (reduction='sum'); the training loop divides by their count",
         {"reduction": "mean"}),
        ("eps spread over the other V-1 classes", "torch (and the package) spread eps over all V classes, the target "
         "included: label_smoothing=eps", {"others": True}),
    )))


# -- average_checkpoints ------------------------------------------------------------------------------------------
def average_checkpoints(state_dicts: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """The element-wise mean of several checkpoints' weights (summed in float64, returned in the last one's dtypes),
    the arithmetic of :func:`workbench.translation.checkpoint.average_checkpoints` on files.

    Shapes: each tensor keeps its shape
    """
    total = {k: sum(sd[k].double() for sd in state_dicts) for k in state_dicts[-1]}
    return {k: (v / len(state_dicts)).to(state_dicts[-1][k].dtype) for k, v in total.items()}


def _avg_cases() -> list[Case]:
    g = _gen(8)

    def sds(n, dtype=torch.float32):
        return [{"w": torch.randn(3, 4, generator=g, dtype=dtype), "b": torch.randn(4, generator=g, dtype=dtype)}
                for _ in range(n)]

    mixed = [*sds(2, torch.float64), *sds(1)]  # a float32 checkpoint last: the mean comes back in float32
    return [Case("3 checkpoints", (sds(3),)), Case("1 checkpoint", (sds(1),)),
            Case("5 checkpoints, float64", (sds(5, torch.float64),)),
            Case("float64 checkpoints, then a float32 one", (mixed,)),
            Case("7 bfloat16 checkpoints (a sum in bfloat16 rounds at every step)", (sds(7, torch.bfloat16),)),
            Case("float32 weights 1e8, 1, -1e8 (a float32 sum loses the 1)",
                 ([{"w": torch.tensor([v, 2.0])} for v in (1e8, 1.0, -1e8)],))]


def _avg_draw(rng) -> Case:
    n, dt = rng.randint(1, 6), P.dtype(rng)
    shapes = {"w": (rng.randint(1, 4), rng.randint(1, 4)), "b": (rng.randint(1, 5),)}
    return Case(f"{n} checkpoints, {dt}", ([{k: P.randn(rng, *s, dtype=dt) for k, s in shapes.items()}
                                             for _ in range(n)],))


register(Exercise(
    "07.average_checkpoints", "the element-wise mean of several checkpoints", average_checkpoints, _avg_cases,
    name="average_weights", draw=_avg_draw,  # not differentiated: averaging runs on saved weights, under no_grad
    package=("workbench.translation.checkpoint.average_checkpoints", "workbench.translation.checkpoint._average"),
    mistakes=(
        Mistake("summed, not averaged", "divide the sum by the number of checkpoints",
                lambda sds: {k: sum(sd[k] for sd in sds) for k in sds[-1]}),
        Mistake("returned the last checkpoint", "average every checkpoint, not only the last",
                lambda sds: {k: v.clone() for k, v in sds[-1].items()}),
        Mistake("averaged only the first and the last", "average all the checkpoints in the list",
                lambda sds: {k: (sds[0][k] + sds[-1][k]) / 2 for k in sds[-1]}),
    )))


# -- length_penalty -----------------------------------------------------------------------------------------------
def _lp_cases() -> list[Case]:
    return [Case("lengths 1..20, alpha 0.6", (torch.arange(1, 21), 0.6)), Case("alpha 0", (torch.tensor([1, 5, 9]), 0.0)),
            Case("alpha 1.4, length 1", (torch.tensor([1]), 1.4))]


def _lp_draw(rng) -> Case:
    n = torch.tensor(sorted(rng.randint(1, 60) for _ in range(rng.randint(1, 6))))
    alpha = rng.choice([0.0, 0.2, 0.6, 1.0, 1.5])
    return Case(f"lengths {n.tolist()}, alpha {alpha}", (n, alpha))


register(Exercise(
    "07.length_penalty", "the GNMT length penalty ((5 + |Y|)/6)^alpha", length_penalty, _lp_cases,
    name="gnmt_length_penalty", draw=_lp_draw,
    mistakes=(
        Mistake("alpha multiplies instead of raising", "raise to the power alpha: ((5 + |Y|) / 6) ** alpha",
                lambda n, a: (5.0 + n.float()) / 6.0 * a),
        Mistake("plain length to the alpha", "the penalty is ((5 + |Y|) / 6) ** alpha, not |Y| ** alpha",
                lambda n, a: n.float() ** a),
        Mistake("forgot the + 5", "add 5 to the length before dividing by 6 (short outputs are not over-rewarded)",
                lambda n, a: (n.float() / 6.0) ** a),
    )))


# -- beam_step ----------------------------------------------------------------------------------------------------
def beam_step(scores: Tensor, logp: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One step of beam search: extend each of the K beams by every token, keep the K best (beam, token) pairs of
    each sentence by total log-probability, as inside :func:`~workbench.translation.decode.beam_search`.

    Shapes: scores (B, K) running log-probabilities, logp (B, K, V) next-token log-probabilities
        -> new scores (B, K), the beam each came from (B, K) long, the token appended (B, K) long
    """
    B, K, V = logp.shape
    cand = (scores[:, :, None] + logp).reshape(B, K * V)  # (B, K*V)
    top, idx = cand.topk(K, dim=-1)  # (B, K)
    return top, idx // V, idx % V


def _beam_case(B: int, K: int, V: int, seed: int, first: bool = False) -> tuple:
    g = _gen(seed)
    scores = -torch.rand(B, K, generator=g) * 3
    if first:
        scores[:, 1:] = float("-inf")  # the first step: one live beam
    return scores, torch.log_softmax(torch.randn(B, K, V, generator=g) * 2, -1)


def _beam_per_beam(scores, logp):
    best, token = (scores[:, :, None] + logp).max(-1)
    return best, torch.arange(logp.shape[1]).expand_as(token), token


def _beam_not_accumulated(scores, logp):
    B, K, V = logp.shape
    top, idx = logp.reshape(B, K * V).topk(K, dim=-1)
    return top, idx // V, idx % V


def _beam_swapped(scores, logp):
    B, K, V = logp.shape
    top, idx = (scores[:, :, None] + logp).reshape(B, K * V).topk(K, dim=-1)
    return top, idx % V, idx // V


def _beam_multiplied(scores, logp):
    B, K, V = logp.shape
    top, idx = (scores[:, :, None] * logp).reshape(B, K * V).topk(K, dim=-1)
    return top, idx // V, idx % V


def _beam_draw(rng) -> Case:
    B, K, V = rng.randint(1, 3), rng.randint(1, 5), rng.randint(2, 12)
    return Case(f"batch {B}, beam {K}, V={V}", _beam_case(B, K, max(V, K), rng.randrange(10**6),
                                                           first=rng.random() < 0.3))


register(Exercise(
    "07.beam_step", "one beam-search step: the K best extensions of K beams", beam_step, draw=_beam_draw,
    differentiable=True, package=("workbench.translation.decode.beam_search",),
    cases=
    lambda: [Case("batch 2, beam 4, V=11", _beam_case(2, 4, 11, 0)), Case("first step (one live beam)", _beam_case(2, 3, 7, 1, first=True)),
             Case("beam 1 (greedy), batch 1", _beam_case(1, 1, 6, 2)), Case("batch 3, beam 5, V=5", _beam_case(3, 5, 5, 3)),
             Case("long hypotheses: scores near -120 (their probabilities underflow to 0)",
                  (torch.tensor([[-120.0, -130.0, -125.0]]), _beam_case(1, 3, 6, 4)[1]))],
    mistakes=(
        Mistake("best token of each beam", "let the beams compete: flatten (K, V) to K·V candidates and take the "
                "top K, so a good beam may keep several extensions", _beam_per_beam),
        Mistake("scores not accumulated", "add each beam's running score to its next-token log-probabilities before "
                "ranking", _beam_not_accumulated),
        Mistake("beam and token swapped", "in the flattened K·V index, beam = idx // V and token = idx % V",
                _beam_swapped),
        Mistake("log-probabilities multiplied", "log-probabilities add (probabilities multiply): scores + logp",
                _beam_multiplied),
    )))


# -- the prediction ------------------------------------------------------------------------------------------------
PAPER_WARMUP = 4000  # notebook 07's default PAPER_WARMUP (a test compares it with the notebook's parameters cell)

register_prediction(Prediction(
    "07.peak_step", "at which step is the paper's learning rate largest?", "PREDICT_PEAK_STEP", "count",
    wrong=(("one step late", PAPER_WARMUP + 1), ("the first step", 1), ("half-way through the warm-up", PAPER_WARMUP // 2)),
    expected=lambda params: int(params.get("PAPER_WARMUP", PAPER_WARMUP))))
