"""Validation never builds a graph: evaluate() runs under no_grad, wherever it is imported from."""

from __future__ import annotations

import torch

import workbench as wb
from workbench.translation import objective, train
from workbench.translation.batching import make_batch


def test_evaluate_builds_no_graph(monkeypatch):
    seen = []
    real = objective.real_target_logits

    def spy(*args, **kwargs):
        seen.append(torch.is_grad_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(objective, "real_target_logits", spy)
    model = wb.build_model(wb.preset("tiny", d_model=32, n_heads=4), 30, 30)
    batch = make_batch([[5, 6, 7, 3]], [[2, 8, 9, 3]], pad_id=0)
    out = train.evaluate(model, [batch], pad_id=0)
    assert seen == [False] and out["loss"] > 0
    assert train.evaluate is objective.evaluate
