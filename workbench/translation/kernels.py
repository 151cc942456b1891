"""Cheaper forms of the training step's dropout and vocabulary loss on the CPU, with the same mathematics.

A profile of the ``small`` training step on a 2-core CPU (``python bench/profile_step.py``, before these) put about
14 % of it in dropout's random draws (``aten::bernoulli_``: about 7.7 ns per element) and about 16 % in the
label-smoothed cross-entropy over the 8k vocabulary (log-softmax, a zero-filled one-hot gradient, an extra (N, V)
add and the log-softmax backward, each on a freshly allocated (N, V) tensor). Both have cheaper forms:

* :class:`Dropout` draws its keep-mask from 64-bit integers, four 15-bit lanes per draw (about 1.6 ns per element
  with the mask compare), keeps it as a boolean (1 byte per element instead of a 4-byte float) and multiplies once
  each way. The drop probability is ``p`` rounded to a multiple of 1/32768 (0.1 becomes 3277/32768 = 0.100006) and
  kept values are scaled by exactly ``1 / (1 - that)``, so the output is unbiased as with :class:`torch.nn.Dropout`.
  Only the random stream differs. Off the CPU, or inside ``torch.compile`` (which fuses its own), it is
  :func:`torch.nn.functional.dropout`.
* :func:`projected_label_smoothed_cross_entropy` fuses the vocabulary projection with the loss in row chunks of
  about 2^20 logits and writes the gradient in closed form, ``softmax(z) - q`` with
  ``q = (1 - eps) * onehot + eps / V``, during the forward: no (N, V) tensor is allocated. The same value and
  gradients as ``F.cross_entropy(h @ W.T, y, label_smoothing=eps, reduction="sum")`` within fp32 rounding.
  :func:`label_smoothed_cross_entropy` is the unfused form for models that project themselves (the GRU baseline).
  Off the CPU both are the plain projection and ``F.cross_entropy`` (one fused kernel there).

``tests/test_kernels.py`` checks them against the ``torch.nn`` forms.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CHEAP_CPU_DROPOUT = True  # False: :class:`Dropout` is plain ``F.dropout`` everywhere (same masks as torch.nn's)
_LANES = 32768  # 15-bit lanes: four per 63-bit draw of ``random_()`` (its sign bit is always 0)
_LANE_MASK = 0x7FFF7FFF7FFF7FFF  # keep the low 15 bits of each 16-bit lane


def _compiling() -> bool:
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


def quantized_p(p: float) -> float:
    """The drop probability :func:`cpu_dropout` applies for ``p``: rounded to a multiple of 1/32768."""
    return round(p * _LANES) / _LANES


class _MaskedScale(torch.autograd.Function):
    """``x * keep * scale`` with the boolean mask saved for the backward (one multiply each way)."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.mul(x, keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        (keep,) = ctx.saved_tensors
        return torch.ops.aten.native_dropout_backward(grad, keep, ctx.scale), None, None


def cpu_dropout(x: Tensor, p: float) -> Tensor:
    """Training-mode dropout of ``x`` with drop probability :func:`quantized_p` ``(p)``, on the CPU.

    Shapes: any -> the same.
    """
    k = round(p * _LANES)
    if k <= 0:
        return x
    if k >= _LANES:
        return x * 0.0
    n = x.numel()
    draws = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()  # 63 random bits each
    lanes = (draws & _LANE_MASK).view(torch.int16)[:n]  # (n,) uniform on [0, 32767]
    keep = (lanes >= k).view(x.shape)  # P(keep) = 1 - k / 32768
    return _MaskedScale.apply(x, keep, _LANES / (_LANES - k))


class Dropout(nn.Dropout):
    """:class:`torch.nn.Dropout` with the cheaper CPU mask draw of :func:`cpu_dropout` (same ``p``, same place).

    A subclass, so code that looks for ``nn.Dropout`` modules (or sets ``p``) sees it as one; no parameters, so
    state dicts are unchanged.
    """

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: any -> the same."""
        if (not self.training or self.p == 0.0 or x.device.type != "cpu" or not CHEAP_CPU_DROPOUT
                or _compiling()):
            return F.dropout(x, self.p, self.training, self.inplace)
        return cpu_dropout(x, self.p)


def use_fast_dropout(model: nn.Module) -> nn.Module:
    """Swap every plain :class:`torch.nn.Dropout` of ``model`` for :class:`Dropout` in place (same ``p``, same
    place, no parameters or buffers touched) and return the model.

    The model's definition keeps the dropout a reader knows; the training step (:func:`workbench.train.fit`) and
    the benchmark's training race call this so the CPU draws its masks the cheaper way. Evaluation is unchanged
    (both are the identity in eval mode).
    """
    for module in model.modules():
        if type(module) is nn.Dropout:
            module.__class__ = Dropout
    return model


class _LabelSmoothedCE(torch.autograd.Function):
    """Summed label-smoothed cross-entropy with the closed-form gradient ``softmax(z) - q``."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, eps: float) -> Tensor:  # type: ignore[override]
        V = logits.shape[-1]
        lse = torch.logsumexp(logits, dim=-1)  # (N,)
        z_target = logits.gather(1, targets[:, None]).squeeze(1)  # (N,)
        # -sum_v q_v log p_v = lse - (1 - eps) z_target - (eps / V) sum_v z_v
        loss = (lse - (1.0 - eps) * z_target - (eps / V) * logits.sum(-1)).sum()
        ctx.save_for_backward(logits, targets, lse)
        ctx.eps = eps
        return loss

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        logits, targets, lse = ctx.saved_tensors
        eps, V = ctx.eps, logits.shape[-1]
        out = torch.sub(logits, lse[:, None]).exp_().sub_(eps / V)  # (N, V) softmax - eps / V
        out.scatter_add_(1, targets[:, None], logits.new_full((targets.shape[0], 1), eps - 1.0))
        return out.mul_(grad), None, None


def label_smoothed_cross_entropy(logits: Tensor, targets: Tensor, eps: float = 0.1) -> Tensor:
    """Summed label-smoothed cross-entropy, as ``F.cross_entropy(logits, targets, label_smoothing=eps,
    reduction="sum")`` (smoothing mass ``eps`` spread over all ``V`` classes, the target's included).

    Every row is a real target (gather padding out first). Shapes: logits (N, V) float, targets (N,) -> scalar.
    """
    if logits.device.type != "cpu" or _compiling() or logits.dtype != torch.float32:
        return F.cross_entropy(logits, targets, label_smoothing=eps, reduction="sum")
    return _LabelSmoothedCE.apply(logits, targets, float(eps))


_CHUNK_ELEMENTS = 1 << 20  # logits per chunk (4 MiB in fp32): small enough for the allocator to reuse, not fault in


class _ProjectedLabelSmoothedCE(torch.autograd.Function):
    """The vocabulary projection and the summed label-smoothed cross-entropy, fused and computed in row chunks.

    Each chunk's logits are turned into their gradient (``softmax(z) - q``) in place during the forward, so no
    (N, V) tensor is ever allocated and nothing is recomputed; the backward only multiplies the chunks back through
    the projection.
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, eps: float) -> Tensor:  # type: ignore[override]
        N, V = hidden.shape[0], weight.shape[0]
        rows = max(1, _CHUNK_ELEMENTS // V)
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        loss = hidden.new_zeros(())
        grads = []
        for start in range(0, N, rows):
            z = torch.mm(hidden[start : start + rows], weight.t())  # (c, V)
            t = targets[start : start + rows, None]  # (c, 1)
            lse = torch.logsumexp(z, dim=-1)  # (c,)
            loss += (lse - (1.0 - eps) * z.gather(1, t).squeeze(1) - (eps / V) * z.sum(-1)).sum()
            if need_grad:
                z.sub_(lse[:, None]).exp_().sub_(eps / V)  # softmax - eps / V
                z.scatter_add_(1, t, z.new_full(t.shape, eps - 1.0))  # ... - (1 - eps) at the target
                grads.append(z)
        ctx.save_for_backward(hidden, weight)
        ctx.grads, ctx.rows = grads, rows
        return loss

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:  # type: ignore[override]
        hidden, weight = ctx.saved_tensors
        grads, rows = ctx.grads, ctx.rows
        ctx.grads = None
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = None
        for i, g in enumerate(grads):  # g: (c, V), this chunk's d loss / d logits
            h = hidden[i * rows : (i + 1) * rows]  # (c, d_model)
            if grad_hidden is not None:
                torch.mm(g, weight, out=grad_hidden[i * rows : (i + 1) * rows])
            if ctx.needs_input_grad[1]:
                # (V, d_model): the first chunk's product starts the sum (no zero-filled buffer)
                grad_weight = torch.mm(g.t(), h) if grad_weight is None else grad_weight.addmm_(g.t(), h)
        if grad_hidden is not None:
            grad_hidden.mul_(grad)
        if grad_weight is not None:
            grad_weight.mul_(grad)
        return grad_hidden, grad_weight, None, None


class _ProjectedLabelSmoothedCEBF16(torch.autograd.Function):
    """The bf16 form of :class:`_ProjectedLabelSmoothedCE` for a CPU with bf16 matrix units.

    The three products (the projection, and the two of the backward) run in bf16 with fp32 accumulation; the
    log-sum-exp, the loss and the softmax are computed in fp32 chunk by chunk, and only the finished gradient
    ``softmax(z) - q`` is stored, in bf16, in one (N, V) buffer, so the backward is two single products instead of
    one per chunk. The weight is cast to bf16 once per call; its gradient and the loss come back in fp32 (the
    master weights and the loss stay fp32).
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, eps: float) -> Tensor:  # type: ignore[override]
        N, V = hidden.shape[0], weight.shape[0]
        rows = max(1, _CHUNK_ELEMENTS // V)
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        h16, w16 = hidden.to(torch.bfloat16), weight.to(torch.bfloat16)  # (N, d_model), (V, d_model)
        grads = torch.empty(N, V, dtype=torch.bfloat16) if need_grad else None  # (N, V) d loss / d logits
        loss = torch.zeros((), dtype=torch.float32)
        for start in range(0, N, rows):
            z = torch.mm(h16[start : start + rows], w16.t()).float()  # (c, V) fp32 logits
            t = targets[start : start + rows, None]  # (c, 1)
            lse = torch.logsumexp(z, dim=-1)  # (c,)
            loss += (lse - (1.0 - eps) * z.gather(1, t).squeeze(1) - (eps / V) * z.sum(-1)).sum()
            if grads is not None:
                z.sub_(lse[:, None]).exp_().sub_(eps / V)  # softmax - eps / V
                z.scatter_add_(1, t, z.new_full(t.shape, eps - 1.0))  # ... - (1 - eps) at the target
                grads[start : start + rows].copy_(z)
        ctx.save_for_backward(h16, w16)
        ctx.grads, ctx.hidden_dtype, ctx.weight_dtype = grads, hidden.dtype, weight.dtype
        return loss

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:  # type: ignore[override]
        h16, w16 = ctx.saved_tensors
        g, ctx.grads = ctx.grads, None  # (N, V) bf16
        scale = grad.to(torch.bfloat16)
        grad_hidden = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_hidden = torch.mm(g, w16).mul_(scale).to(ctx.hidden_dtype)  # (N, d_model)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.mm(g.t(), h16).to(ctx.weight_dtype).mul_(grad)  # (V, d_model) fp32
        return grad_hidden, grad_weight, None, None


def _cpu_bf16(*tensors: Tensor) -> bool:
    """True when the CPU's bf16 path applies: bf16 inputs, or CPU autocast to bf16 around the call."""
    return (any(t.dtype == torch.bfloat16 for t in tensors)
            or (torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16))


def projected_label_smoothed_cross_entropy(hidden: Tensor, weight: Tensor, targets: Tensor,
                                           eps: float = 0.1) -> Tensor:
    """``label_smoothed_cross_entropy(hidden @ weight.T, targets, eps)`` without materialising the (N, V) logits.

    On the CPU the projection and the loss run fused, in row chunks of about 2^20 logits, with the gradient
    written in closed form during the forward (call ``backward`` once). Under CPU autocast to bf16 (or for bf16
    inputs) the products run in bf16 (:class:`_ProjectedLabelSmoothedCEBF16`), the loss and the softmax in fp32.
    Elsewhere, or for other dtypes, it is the plain projection and ``F.cross_entropy``.

    Shapes: hidden (N, d_model) of real targets only, weight (V, d_model), targets (N,) -> scalar.
    """
    if hidden.device.type != "cpu" or _compiling():
        return F.cross_entropy((hidden @ weight.t()).float(), targets, label_smoothing=eps, reduction="sum")
    if _cpu_bf16(hidden, weight):
        with torch.autocast("cpu", enabled=False):  # the Function casts what it needs, once
            return _ProjectedLabelSmoothedCEBF16.apply(hidden, weight, targets, float(eps))
    if hidden.dtype != torch.float32 or weight.dtype != torch.float32:
        return F.cross_entropy((hidden @ weight.t()).float(), targets, label_smoothing=eps, reduction="sum")
    return _ProjectedLabelSmoothedCE.apply(hidden, weight, targets, float(eps))
