"""Analytic FLOP counts and model FLOPs utilisation (MFU).

A multiply-add counts as 2 FLOPs; only matrix products are counted (softmax, layer norm, dropout and embedding
lookups are a few percent and are left out, as in the usual MFU convention of the PaLM paper). Attention scores
are counted for the full ``Tq x Tk`` matrix, causal or not. Counts are on the padded shapes the hardware actually
processes, except the pre-softmax projection, which training computes only for real (non-padding) targets
(``n_projected``). A training step is three forward passes (the backward pass costs about twice the forward).

MFU = achieved model FLOP/s / the device's peak FLOP/s. Peaks are known for common accelerators
(:data:`PEAK_TFLOPS`); set ``WORKBENCH_PEAK_TFLOPS`` to give one for any other device, a CPU included.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from workbench.model.config import ModelConfig

# dense (no sparsity) peak tensor-core TFLOP/s in bf16, by a substring of torch.cuda.get_device_name()
PEAK_TFLOPS: dict[str, float] = {
    "H200": 989.4,
    "H100 PCIe": 756.0,
    "H100": 989.4,  # SXM
    "GH200": 989.4,
    "A100": 312.0,
    "A10G": 125.0,
    "A10": 125.0,
    "L40S": 362.0,
    "L4": 121.0,
    "RTX 4090": 165.2,
    "RTX 3090": 71.0,
}


def forward_flops(
    cfg: ModelConfig, batch: int, src_len: int, tgt_len: int, vocab: int, n_projected: int | None = None
) -> int:
    """FLOPs of one encoder-decoder forward pass (with the generator) on padded shapes.

    Args:
        cfg: the model's sizes (``d_model``, ``d_ff``, layer counts, ``n_heads * d_head``, ``n_heads * d_v``).
        batch, src_len, tgt_len: the padded batch shape, source (B, S) and target input (B, T).
        vocab: target vocabulary size (the generator's output width).
        n_projected: target positions the generator projects (training: the non-padding targets);
            None means all ``batch * tgt_len``.
    """
    B, S, T, d, f = batch, src_len, tgt_len, cfg.d_model, cfg.d_ff
    inner, inner_v = cfg.n_heads * cfg.head_dim, cfg.n_heads * cfg.value_dim  # h d_k, h d_v
    qkvo = 2 * inner + 2 * inner_v  # output widths of W^Q, W^K, W^V plus the input width of W^O
    enc = (
        2 * B * S * d * qkvo  # Q, K, V and output projections
        + 2 * B * S * S * (inner + inner_v)  # Q K^T and weights @ V
        + 2 * B * S * d * f * 2  # position-wise feed-forward, two layers
    )
    dec = (
        2 * B * T * d * qkvo  # self-attention projections
        + 2 * B * T * T * (inner + inner_v)  # self-attention scores and values
        + 2 * B * T * d * (inner + inner_v)  # cross-attention Q and output projections
        + 2 * B * S * d * (inner + inner_v)  # cross-attention K and V (from memory)
        + 2 * B * T * S * (inner + inner_v)  # cross-attention scores and values
        + 2 * B * T * d * f * 2  # feed-forward
    )
    generator = 2 * (B * T if n_projected is None else n_projected) * d * vocab
    return cfg.n_enc_layers * enc + cfg.n_dec_layers * dec + generator


def decode_step_macs(cfg: ModelConfig, step: int, src_len: int, vocab: int, cached: bool) -> dict[str, int]:
    """Multiply-adds of the matrix products of one greedy decoding step for one sentence, by part.

    At ``step`` t (counted from 1) the prefix holds t tokens (bos and the t - 1 emitted so far). With the key/value
    cache (``cached=True``) only the newest token goes through the decoder: its projections, its attention over the t
    cached keys and the S source positions, its feed-forward and the generator; the cross-attention keys and values
    of the memory are computed once, at step 1. Without the cache (``cached=False``) every step runs the whole prefix
    again, as :meth:`~workbench.model.transformer.Transformer.decode` does (all t positions, projected by the
    generator), and the memory's keys and values again.

    Returns:
        ``{"projections", "memory_kv", "attention", "feed_forward", "generator", "total"}``: W^Q, W^K, W^V, W^O of
        the new positions in both attentions; the memory's cross-attention keys and values; scores and weights @ V
        (the fused attention kernel's share); the feed-forward; the pre-softmax projection; their sum.
    """
    if step < 1:
        raise ValueError(f"step={step}: decoding steps count from 1 (the first step feeds bos)")
    S, d, f, L = src_len, cfg.d_model, cfg.d_ff, cfg.n_dec_layers
    inner, inner_v = cfg.n_heads * cfg.head_dim, cfg.n_heads * cfg.value_dim
    n = 1 if cached else step  # query positions computed this step
    parts = {
        "projections": L * (n * d * (2 * inner + inner_v) + n * inner_v * d  # self-attention Q, K, V and W^O
                            + n * d * inner + n * inner_v * d),  # cross-attention Q and W^O
        "memory_kv": L * S * d * (inner + inner_v) if not cached or step == 1 else 0,
        "attention": L * (n * step + n * S) * (inner + inner_v),  # self over the step's t keys, cross over S
        "feed_forward": L * 2 * n * d * f,
        "generator": n * d * vocab,
    }
    parts["total"] = sum(parts.values())
    return parts


def train_step_flops(
    cfg: ModelConfig, batch: int, src_len: int, tgt_len: int, vocab: int, n_projected: int | None = None
) -> int:
    """FLOPs of one training step (forward + backward = 3 forward passes) on padded shapes."""
    return 3 * forward_flops(cfg, batch, src_len, tgt_len, vocab, n_projected)


def model_train_flops(
    model: Any, src: torch.Tensor, tgt_in: torch.Tensor, n_projected: int | None = None
) -> int | None:
    """Training FLOPs of ``model`` on this batch, or None for models without an analytic count (the GRU).

    ``n_projected``: target rows the loss projects (:func:`workbench.translation.objective.step_loss` projects the non-padding
    ones); None counts every position.
    """
    cfg = getattr(model, "cfg", None)
    vocab = getattr(model, "tgt_vocab_size", None)
    if not isinstance(cfg, ModelConfig) or vocab is None:
        return None
    return train_step_flops(cfg, src.shape[0], src.shape[1], tgt_in.shape[1], int(vocab), n_projected)


def peak_flops(device: torch.device | str) -> float | None:
    """Peak FLOP/s of ``device`` for bf16 tensor-core math, or None when unknown.

    ``WORKBENCH_PEAK_TFLOPS`` (a number) overrides the table, e.g. for a CPU whose peak you know.
    """
    env = os.environ.get("WORKBENCH_PEAK_TFLOPS")
    if env:
        try:
            return float(env) * 1e12
        except ValueError as exc:
            raise ValueError(f"WORKBENCH_PEAK_TFLOPS={env!r} is not a number: give the peak in TFLOP/s, e.g. 989") from exc
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_TFLOPS.items():  # ordered so that "H100 PCIe" is tried before "H100"
        if key in name:
            return tflops * 1e12
    return None


def mfu(flops: float, seconds: float, device: torch.device | str) -> float | None:
    """Model FLOPs utilisation in [0, 1] (None when the device's peak is unknown)."""
    peak = peak_flops(device)
    if peak is None or seconds <= 0:
        return None
    return flops / seconds / peak
