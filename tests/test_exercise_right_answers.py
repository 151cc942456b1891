"""The other half of a check's job: right answers written another way than the reference (another formula, loops,
another precision, the autograd a notebook cell has on) must pass. Each was failed by a check once; an independent
probe of the checks found them.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from workbench.lessons import exercises as ex


def distance_by_expansion(t):
    """|a|² + |b|² - 2 a·b, as torch.cdist computes large inputs: float32 cancellation near the diagonal."""
    sq = (t * t).sum(-1)
    return (sq[:, None] + sq[None, :] - 2 * t @ t.T).clamp_min(0).sqrt()


def distance_cdist(t):
    return torch.cdist(t, t)


def integrated_gradients_plain(f, x, baseline, n_steps):
    """Right Riemann sum of the gradients along the straight path, written as in a notebook cell (no enable_grad:
    a cell has autograd on)."""
    total = torch.zeros_like(x)
    for k in range(1, n_steps + 1):
        point = (baseline + k / n_steps * (x - baseline)).detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(f(point).sum(), point)
        total += grad
    return (x - baseline) * total / n_steps


def paired_verdict_float32(base, variant, direction, factor=2.0):
    """The row's verdict computed in float32 tensors: right to about 1e-7."""
    d = torch.tensor(variant, dtype=torch.float32) - torch.tensor(base, dtype=torch.float32)
    mean = d.mean()
    margin = factor * d.std() / math.sqrt(len(base))
    m, g = float(mean), float(margin)
    if direction == 0:
        return m, g, "agrees" if abs(m) <= g else "differs"
    if direction * m > g:
        return m, g, "agrees"
    return m, g, "opposite" if direction * m < -g else "within noise"


def paired_verdict_statistics(base, variant, direction, factor=2.0):
    d = [v - b for b, v in zip(base, variant, strict=True)]
    mean, margin = statistics.fmean(d), factor * statistics.stdev(d) / math.sqrt(len(d))
    if direction == 0:
        return mean, margin, "agrees" if abs(mean) <= margin else "differs"
    if direction * mean > margin:
        return mean, margin, "agrees"
    return mean, margin, "opposite" if direction * mean < -margin else "within noise"


def average_by_stacking_in_float64(sds):
    """One stacked float64 tensor and its mean, not a running sum. (torch.mean in the checkpoints' own float32 was
    listed here as right: the case 1e8, 1, -1e8 shows it loses the 1, where the prompt asks for a float64 sum.)"""
    return {k: torch.stack([sd[k].double() for sd in sds]).mean(0).to(sds[-1][k].dtype) for k in sds[-1]}


def padding_stats_by_batch(batches, *lengths):
    real = slots = 0
    for b in batches:
        for side in lengths:
            longest = max((side[i] for i in b), default=0)
            real += sum(side[i] for i in b)
            slots += longest * len(b)
    return {"real": float(real), "slots": float(slots), "padding_fraction": (slots - real) / slots if slots else 0.0,
            "batches": float(len(batches))}


def brevity_penalty_float32(c, r):
    """exp computed on a float32 tensor: about 3e-8 from the float64 value."""
    return 1.0 if c >= r else (0.0 if c == 0 else float(torch.exp(torch.tensor(1 - r / c))))


def path_length_by_counting(kind, n, k=3, r=8, dilated=False):
    """The dilated reach multiplied out in integers instead of a logarithm."""
    if kind == "recurrent":
        return max(n, 1)
    if n <= 1 or kind == "self_attention":
        return 1
    if kind == "convolutional" and dilated:
        layers, reach = 0, 1
        while reach < n:
            reach, layers = reach * k, layers + 1
        return layers
    step = (k - 1) // 2 if kind == "convolutional" else r // 2
    return -(-(n - 1) // step)


def greedy_with_max_indices(next_logits, bos_id, eos_id, max_len):
    """torch.max(...).indices instead of argmax: the first of tied maxima as well."""
    out = [bos_id]
    while len(out) < max_len:
        out.append(int(torch.max(next_logits(out), 0).indices))
        if out[-1] == eos_id:
            return out[1:]
    return [*out[1:], eos_id]


def layer_norm_in_float64(x, gamma, beta, eps):
    xd = x.double()
    centred = xd - xd.mean(-1, keepdim=True)
    y = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    return (y * gamma.double() + beta.double()).to(x.dtype)


RIGHT = [
    ("04.distance_matrix", distance_by_expansion),
    ("04.distance_matrix", distance_cdist),
    ("13.integrated_gradients", integrated_gradients_plain),
    ("12.paired_verdict", paired_verdict_float32),
    ("12.paired_verdict", paired_verdict_statistics),
    ("07.average_checkpoints", average_by_stacking_in_float64),
    ("08.padding_stats", padding_stats_by_batch),
    ("09.brevity_penalty", brevity_penalty_float32),
    ("11.path_length", path_length_by_counting),
    ("05.greedy_loop", greedy_with_max_indices),
    ("06.layer_norm", layer_norm_in_float64),
]


@pytest.mark.parametrize(("exercise_id", "right"), RIGHT, ids=[f"{e}:{f.__name__}" for e, f in RIGHT])
def test_a_right_answer_written_another_way_passes(exercise_id, right):
    result = ex.check(exercise_id, right)
    assert result.status == ex.PASSED, f"{right.__name__}: {result.message}"


def test_an_answer_that_takes_gradients_passes_even_when_the_check_is_called_without_them():
    with torch.no_grad():  # a grader's process, say: the student's function still runs as in a notebook cell
        result = ex.check("13.integrated_gradients", integrated_gradients_plain)
    assert result.status == ex.PASSED, result.message


def test_a_number_that_differs_in_the_seventh_digit_is_shown_with_enough_digits():
    from workbench.lessons.exercises.compare import difference

    message = difference(0.1000003814, 0.1, atol=1e-9, rtol=1e-9)
    assert message.startswith("0.100000381, expected 0.1 ")
