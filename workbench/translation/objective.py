"""What training minimises and how fast it steps (paper section 5.3 and 5.4): the warm-up schedule of the learning
rate (:func:`rate`, Eq. 3) and the label-smoothed cross-entropy over real targets (:func:`label_smoothed_loss`, and
:func:`step_loss`, the form :func:`workbench.translation.train.fit` computes without work on padding), and how a
model is scored on held-out batches (:func:`evaluate`: loss, perplexity, accuracy, entropy)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workbench.model.transformer import Transformer
from workbench.translation.batching import Batch
from workbench.translation.kernels import label_smoothed_cross_entropy, projected_label_smoothed_cross_entropy


def rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), steps counted from 1 (paper eq. 3)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def label_smoothed_loss(logits: Tensor, targets: Tensor, pad_id: int, eps: float = 0.1) -> tuple[Tensor, int]:
    """Summed label-smoothed cross-entropy over non-padding targets, and their count.

    Shapes:
        logits (B, T, V), targets (B, T) -> (scalar sum, n_tokens)
    """
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        targets.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=eps,
        reduction="sum",
    )
    return loss, int((targets != pad_id).sum())


def real_target_logits(net: nn.Module, model: nn.Module, batch: Batch, pad_id: int) -> tuple[Tensor, Tensor]:
    """Logits and targets of the real (non-padding) target positions only.

    A :class:`~workbench.model.Transformer` gathers its decoder states at those positions *before* the
    vocabulary projection (``forward(..., project=False)``), so no (d_model x V) product, log-softmax or loss is
    spent on padding; other models (the GRU baseline) project every position and the rows are gathered after.
    ``net`` is what is called (the model, or its compiled / DDP wrapper), ``model`` the plain module.

    Shapes:
        batch.src (B, S), batch.tgt_in (B, T), batch.tgt_out (B, T) -> logits (N, V), targets (N,),
        N = number of non-padding targets
    """
    keep = batch.tgt_out != pad_id  # (B, T)
    if isinstance(model, Transformer):
        hidden = net(batch.src, batch.tgt_in, project=False)  # (B, T, d_model)
        return model.generator(hidden[keep]), batch.tgt_out[keep]  # (N, V), (N,)
    return net(batch.src, batch.tgt_in)[keep], batch.tgt_out[keep]


def step_loss(net: nn.Module, model: nn.Module, batch: Batch, pad_id: int, eps: float = 0.1,
              rows: Tensor | None = None) -> tuple[Tensor, int]:
    """The training loss of one batch: summed label-smoothed cross-entropy over real targets, and their count.

    ``rows`` (N,): the flat positions (into B*T) of the real targets, when the caller has them (found on the CPU
    before the batch went to an accelerator): selecting them asks the device nothing, where a boolean mask would
    make the host wait for the count. The same rows, in the same order, as the mask selects.

    Equal (fp32 tolerance, gradients included) to ``label_smoothed_loss(model(src, tgt_in), tgt_out, ...)``,
    without the work on padding rows (see :func:`real_target_logits`). On the CPU a
    :class:`~workbench.model.Transformer`'s projection and loss run fused in row chunks
    (:func:`workbench.kernels.projected_label_smoothed_cross_entropy`: no (N, V) logits are allocated), and other
    models' loss takes the closed-form gradient of :func:`workbench.kernels.label_smoothed_cross_entropy`.
    """
    if isinstance(model, Transformer) and model.generator.bias is None:
        if rows is not None:
            hidden = net(batch.src, batch.tgt_in, project=False).flatten(0, 1).index_select(0, rows)  # (N, d_model)
            targets = batch.tgt_out.flatten().index_select(0, rows)  # (N,)
            return projected_label_smoothed_cross_entropy(hidden, model.generator.weight, targets, eps), rows.shape[0]
        keep = batch.tgt_out != pad_id  # (B, T)
        hidden = net(batch.src, batch.tgt_in, project=False)[keep]  # (N, d_model)
        targets = batch.tgt_out[keep]  # (N,)
        return projected_label_smoothed_cross_entropy(hidden, model.generator.weight, targets, eps), targets.shape[0]
    logits, targets = real_target_logits(net, model, batch, pad_id)  # (N, V), (N,)
    return label_smoothed_cross_entropy(logits.float(), targets, eps), targets.shape[0]


@torch.no_grad()
def evaluate(model: nn.Module, batches: Sequence[Batch], pad_id: int, device: torch.device | None = None) -> dict[str, float]:
    """Mean cross-entropy per target token, perplexity, token accuracy (no label smoothing) and the mean entropy of
    the predicted next-token distributions (nats; how unsure the model is, whatever the right token)."""
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    total, n, correct, entropy = 0.0, 0, 0, 0.0
    for b in batches:
        b = b.to(device)
        logits, targets = real_target_logits(model, model, b, pad_id)  # (N, V), (N,)
        logits = logits.float()  # bf16 under autocast: the loss in fp32 (and torch's CPU argmax is slow on bf16)
        logp = torch.log_softmax(logits, dim=-1)  # (N, V)
        total += float(F.nll_loss(logp, targets, reduction="sum"))
        entropy += float(-(logp.exp() * logp).sum())
        n += targets.shape[0]
        correct += int((logits.argmax(-1) == targets).sum())
    model.train(was_training)
    mean = total / max(n, 1)
    return {"loss": mean, "ppl": math.exp(min(mean, 50.0)), "accuracy": correct / max(n, 1),
            "entropy": entropy / max(n, 1)}
