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

Attention has two CPU bf16 forms of its own (:class:`CpuAttention`): a training step's attention in fp32 (this
torch's bf16 flash backward on the CPU was several times slower than the fp32 one), and a decoding step's (one
query per row) as two explicit products where the processor has no AMX tiles.

None of this is in the model: a run's set-up chooses once (:func:`choose_kernels`, which reads the processor's
flags) and installs the choice on the model (:func:`use_kernels`, or :func:`attention_kernels` for one block).

``tests/test_kernels.py`` checks them against the ``torch.nn`` forms.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workbench import runtime
from workbench.errors import ConfigError
from workbench.model.attention import MultiHeadAttention, attention_weights

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
        if not self.training or self.p == 0.0 or x.device.type != "cpu" or _compiling():
            return F.dropout(x, self.p, self.training, self.inplace)
        return cpu_dropout(x, self.p)


@dataclass(frozen=True)
class CpuAttention:
    """The fused attention kernel of a CPU run (:class:`workbench.model.attention.FusedAttention`): torch's SDPA,
    except for two bf16 cases, each measured on this project's CPUs.

    * a training step (gradients on): the attention runs in fp32, the products around it in bf16 (this torch's bf16
      flash-attention backward on the CPU was several times slower than the fp32 one in a profile of the ``small``
      step; torch 2.13, AVX-512 bf16) when ``bf16_train_attention="fp32"``.
    * a decoding step (one query per row, no dropout): ``bf16_step_attention="explicit"`` multiplies out
      ``softmax(Q K^T / sqrt(d_k)) V`` (this torch's bf16 flash kernel took 2.5-3x the time of the two products on
      the decoder's shapes: torch 2.13, AVX-512 bf16, 8 heads, 8-40 keys); ``"flash"`` keeps the flash kernel,
      the faster of the two with AMX tiles (beam-4 batches of small-de-en took 5-30 % less time with it: torch
      2.11, ``bench/archive/results/bf16/README.md``). Fully masked rows are zeros either way.
    """

    bf16_step_attention: Literal["flash", "explicit"] = "flash"  # a one-query bf16 step's kernel
    bf16_train_attention: Literal["bf16", "fp32"] = "fp32"  # the number format of a bf16 training step's attention

    def __post_init__(self) -> None:
        if self.bf16_step_attention not in ("flash", "explicit"):
            raise ConfigError(f"bf16_step_attention={self.bf16_step_attention!r}: use 'flash' or 'explicit'")
        if self.bf16_train_attention not in ("bf16", "fp32"):
            raise ConfigError(f"bf16_train_attention={self.bf16_train_attention!r}: use 'bf16' or 'fp32'")

    def __call__(self, query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                 dropout_p: float = 0.0, is_causal: bool = False) -> Tensor:
        """Shapes: query (B, H, Tq, d_k), key (B, H, Tk, d_k), value (B, H, Tk, d_v) -> (B, H, Tq, d_v)."""
        cpu_bf16 = query.device.type == "cpu" and query.dtype == torch.bfloat16
        if (cpu_bf16 and self.bf16_train_attention == "fp32" and torch.is_grad_enabled()
                and query.requires_grad):
            with torch.autocast("cpu", enabled=False):
                return F.scaled_dot_product_attention(query.float(), key.float(), value.float(), attn_mask=attn_mask,
                                                      dropout_p=dropout_p, is_causal=is_causal).to(query.dtype)
        if (cpu_bf16 and self.bf16_step_attention == "explicit" and query.shape[-2] == 1 and dropout_p == 0.0):
            return attention_weights(query, key, attn_mask, is_causal) @ value  # (B, H, 1, d_v)
        return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                              is_causal=is_causal)


@dataclass(frozen=True)
class Kernels:
    """The kernels a run uses: chosen once by its set-up (:func:`choose_kernels`) and installed on the model with
    :func:`use_kernels`; the model itself holds the paper's forms."""

    dropout: Literal["torch", "cheap"] = "cheap"  # "cheap": :class:`Dropout`'s CPU mask draw; "torch": nn.Dropout
    attention: CpuAttention | None = CpuAttention()  # the fused path's kernel (None: torch's SDPA)

    def __post_init__(self) -> None:
        if self.dropout not in ("torch", "cheap"):
            raise ConfigError(f"dropout={self.dropout!r}: use 'cheap' or 'torch'")


def choose_kernels() -> Kernels:
    """The kernels for this processor: the cheap dropout masks, a training step's bf16 attention in fp32, and a
    bf16 decoding step's attention by the flash kernel where the CPU has AMX tiles (``amx_bf16`` among its flags),
    by two explicit products where it has not."""
    step = "flash" if "amx_bf16" in runtime.cpu_flags() else "explicit"
    return Kernels(dropout="cheap", attention=CpuAttention(bf16_step_attention=step))


def use_kernels(model: nn.Module, kernels: Kernels | None = None) -> nn.Module:
    """Install the fast training kernels on ``model`` in place and return it: the one call a loop of one's own
    over :func:`workbench.build_model` needs to train as :func:`workbench.translation.train.fit` does.

    ``kernels`` (default :func:`choose_kernels`): with ``dropout="cheap"`` every :class:`torch.nn.Dropout` is
    replaced by a :class:`Dropout` of the same ``p`` at the same place (no parameters or buffers, so state dicts
    are unchanged); every attention block's fused path takes ``kernels.attention``. Evaluation-mode outputs are
    unchanged in fp32 (dropout is the identity there). For the loss, :func:`projected_label_smoothed_cross_entropy`
    (``workbench.translation.objective.step_loss`` calls it) skips the (N, V) logits.

    Example::

        model = wb.use_kernels(wb.build_model(wb.preset("small"), V, V)).train()
    """
    kernels = choose_kernels() if kernels is None else kernels
    for parent in list(model.modules()):
        if isinstance(parent, MultiHeadAttention):
            parent.fused = kernels.attention
        for name, child in list(parent.named_children()):
            if kernels.dropout == "cheap" and type(child) is nn.Dropout:
                setattr(parent, name, Dropout(child.p, child.inplace).train(child.training))
            elif kernels.dropout == "torch" and type(child) is Dropout:
                setattr(parent, name, nn.Dropout(child.p, child.inplace).train(child.training))
    return model


@contextlib.contextmanager
def attention_kernels(model: nn.Module, kernels: Kernels | None = None) -> Iterator[nn.Module]:
    """``kernels.attention`` (default :func:`choose_kernels`'s) as every attention block's fused kernel inside the
    block, the blocks' own kernels put back on leaving: what decoding runs under."""
    kernels = choose_kernels() if kernels is None else kernels
    blocks = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    before = [m.fused for m in blocks]
    try:
        for m in blocks:
            m.fused = kernels.attention
        yield model
    finally:
        for m, fused in zip(blocks, before, strict=True):
            m.fused = fused


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
