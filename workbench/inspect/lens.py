"""The decoder lens: what each decoder layer would predict if the model stopped there.

The **logit lens** (nostalgebraist, 2020) reads the decoder residual stream after layer ``l`` (the patching site
``dec.{l}.resid``, :mod:`workbench.inspect.patching`) through the model's own read-out: the final LayerNorm where
the model has one, then the pre-softmax projection (``model.generator``)::

    lens_l = generator(decoder_norm(resid_l))

What the lens reads, and why: the paper's model is **post-LN**: every sub-layer ends in ``LayerNorm(x + ...)``, so
each layer's output is already normalised and ``decoder_norm`` is the identity; the lens applies the projection
to the layer's output as it is, the same way the model treats its last layer. A pre-LN model (``norm_first``)
keeps an unnormalised residual stream and ends in a final LayerNorm (``decoder_norm``); the lens applies it to
every layer, as the model does to the last. Either way ``lens_{L-1}`` is computed exactly as the model computes
its logits, so it equals them bit for bit.

A **tuned lens** (Belrose et al., 2023) puts one affine *translator* in front of the read-out of each layer,
``h + A_l h + b_l`` with ``A_l = 0`` and ``b_l = 0`` at the start (the identity: the tuned lens then *is* the
logit lens), trained so that each layer's distribution matches the model's final one (KL divergence) on the
model's own decoder states. The last layer keeps the identity: its lens is the model's output. Translators are
saved beside the model as ``tuned_lens.safetensors`` with a JSON record of the model they belong to.

:func:`decision_layer` tells, for every target position, the first layer from which the lens's top token is the
model's final choice and stays so: the depth at which the word is decided.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workbench.errors import CheckpointError, PatchingError, TrainingError
from workbench.inspect.patching import activation_sites

log = logging.getLogger(__name__)

__all__ = [
    "LENS_FILE", "LensTraining", "TunedLens", "decision_layer", "decoder_states", "kl_by_layer", "lens_kl", "logit_lens",
    "text_batches", "train_tuned_lens",
]

LENS_FILE = "tuned_lens.safetensors"


def _decoder_layers(model: nn.Module) -> int:
    if not hasattr(model, "generator") or not hasattr(model, "decoder_norm"):
        raise PatchingError(f"{type(model).__name__} has no decoder stack with a read-out (generator, decoder_norm): "
                            "the lens needs a workbench Transformer (the recurrent baseline has no layers to read)")
    activation_sites(model)  # the same refusal as patching for anything else
    return len(model.decoder_layers)


def _check_layers(layers: Sequence[int] | None, n: int) -> list[int]:
    if layers is None:
        return list(range(n))
    out = []
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, int) or not -n <= layer < n:
            raise PatchingError(f"unknown site 'dec.{layer}.resid': the decoder has {n} layers (use 0..{n - 1} "
                                "or negatives)")
        out.append(layer % n)
    return out


@contextlib.contextmanager
def _recording(model: nn.Module, layers: Sequence[int], store: dict[int, Tensor], detach: bool) -> Iterator[None]:
    """Keep the decoder residual stream after ``layers`` (sites ``dec.{l}.resid``); hooks removed on exit."""
    sites = activation_sites(model)
    handles = []
    try:
        for layer in layers:
            def record(_m: nn.Module, _inp: Any, out: Tensor, layer: int = layer) -> None:
                store[layer] = out.detach() if detach else out

            handles.append(sites[f"dec.{layer}.resid"].register_forward_hook(record))
        yield
    finally:
        for handle in handles:
            handle.remove()


def _rows(src: Tensor, tgt: Tensor, model: nn.Module | None = None) -> tuple[Tensor, Tensor]:
    for name, t in (("src", src), ("tgt", tgt)):
        if not isinstance(t, Tensor) or t.dim() != 2 or t.dtype != torch.long:
            got = (f"{t.dtype} {tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__)
            raise PatchingError(f"{name} must be a (B, T) torch.long tensor of token ids, got {got}")
        size = getattr(model, f"{name}_vocab_size", None)
        if size is not None and t.numel() and (int(t.min()) < 0 or int(t.max()) >= size):
            raise PatchingError(f"{name} holds ids outside the model's vocabulary 0..{size - 1} (min {int(t.min())}, "
                                f"max {int(t.max())}): encode the text with the model's own tokenizer")
    if src.shape[0] != tgt.shape[0]:
        raise PatchingError(f"src has {src.shape[0]} rows but tgt has {tgt.shape[0]}: give one decoder input per source")
    return src, tgt


@torch.no_grad()
def decoder_states(model: nn.Module, src: Tensor, tgt: Tensor, layers: Sequence[int] | None = None, *,
                   project: bool = True) -> tuple[list[Tensor], Tensor]:
    """The decoder residual stream after each layer and the model's logits, from one teacher-forced run.

    Args:
        project: False gives the decoder's final states (B, T, d_model) instead of the logits, so that no
            (B, T, V) tensor is made (``model(src, tgt, project=False)``).

    Returns:
        (states, logits): ``states[i]`` is ``dec.{layers[i]}.resid``, (B, T, d_model); logits (B, T, V).
    """
    n = _decoder_layers(model)
    chosen = _check_layers(layers, n)
    src, tgt = _rows(src, tgt, model)
    store: dict[int, Tensor] = {}
    was_training = model.training
    model.eval()
    try:
        with _recording(model, chosen, store, detach=True):
            logits = model(src, tgt) if project else model(src, tgt, project=False)  # (B, T, V) or (B, T, D)
    finally:
        model.train(was_training)
    return [store[layer] for layer in chosen], logits


def _read_out(model: nn.Module, h: Tensor) -> Tensor:
    """The model's own read-out: final LayerNorm (identity in a post-LN model), then the projection."""
    return model.generator(model.decoder_norm(h))


@torch.no_grad()
def logit_lens(model: nn.Module, src: Tensor, tgt: Tensor, layers: Sequence[int] | None = None,
               lens: TunedLens | None = None) -> Tensor:
    """Logits read from every decoder layer through the model's own read-out (or a tuned lens's translators).

    Args:
        model: a workbench Transformer (run in eval mode, then restored).
        src: source ids (B, S), eos included, padded with ``model.pad_id``.
        tgt: decoder input (B, T): bos followed by a target prefix.
        layers: decoder layers to read (default all); negatives count from the last.
        lens: a :class:`TunedLens` for this model: each layer's state goes through its translator first.

    Returns:
        Logits (n_layers, B, T, V); the last layer's equal the model's logits exactly (logit lens).

    Raises:
        PatchingError: a model without decoder layers, an unknown layer, or ill-shaped ids.
    """
    n = _decoder_layers(model)
    chosen = _check_layers(layers, n)
    if lens is not None:
        lens.check_model(model)
    states, _ = decoder_states(model, src, tgt, chosen)
    out = []
    for layer, h in zip(chosen, states, strict=True):
        # one (B, T, D) read-out per layer, as the model's own call: the last layer is then bit-identical
        out.append(_read_out(model, lens.translate(h, layer) if lens is not None else h))
    return torch.stack(out)  # (L, B, T, V)


def lens_kl(lens_logits: Tensor, final_logits: Tensor, mask: Tensor | None = None) -> Tensor:
    """KL(final || lens) per layer, averaged over the real positions: how far each layer is from the answer.

    Shapes:
        lens_logits (L, B, T, V), final_logits (B, T, V), mask (B, T) bool (True = real) -> (L,)
    """
    logp = torch.log_softmax(final_logits.float(), -1)  # (B, T, V)
    logq = torch.log_softmax(lens_logits.float(), -1)  # (L, B, T, V)
    kl = (logp.exp() * (logp - logq)).sum(-1)  # (L, B, T)
    if mask is None:
        return kl.mean((1, 2))
    weights = mask.to(kl.dtype)
    return (kl * weights).sum((1, 2)) / weights.sum().clamp_min(1)


def decision_layer(lens_logits: Tensor, final_logits: Tensor | None = None) -> Tensor:
    """For every position, the first layer from which the lens's top token is the final one and stays so.

    Args:
        lens_logits: (L, B, T, V) from :func:`logit_lens`.
        final_logits: (B, T, V); default the last layer of ``lens_logits`` (equal to the model's for the logit lens).

    Returns:
        (B, T) long: a layer in 0..L-1 (L-1: decided only at the end).
    """
    final = (lens_logits[-1] if final_logits is None else final_logits).argmax(-1)  # (B, T)
    agree = lens_logits.argmax(-1) == final  # (L, B, T)
    agree[-1] = True  # the last layer decides by definition
    # the decision layer is one past the last layer that disagrees
    L = agree.shape[0]
    idx = torch.arange(L, device=agree.device).view(L, 1, 1)
    last_wrong = torch.where(~agree, idx, torch.full_like(idx, -1)).amax(0)  # (B, T)
    return last_wrong + 1


# -- the tuned lens ----------------------------------------------------------------------------------------------
def _model_record(model: nn.Module) -> dict[str, Any]:
    """What a saved lens must match: architecture, vocabulary, and a fingerprint of the read-out weights."""
    cfg = getattr(model, "cfg", None)
    digest = hashlib.sha256()
    for t in (model.generator.weight, *(p for p in model.decoder_norm.parameters())):
        digest.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return {
        "cfg": dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else repr(cfg),
        "tgt_vocab_size": int(model.tgt_vocab_size),
        "readout_sha256": digest.hexdigest(),
    }


class TunedLens(nn.Module):
    """One affine translator per decoder layer, ``h + h A_l^T + b_l``, identity at initialisation.

    The last layer's translator is fixed at the identity (its lens is the model's output); the others are trained
    by :func:`train_tuned_lens`. Read with ``logit_lens(model, src, tgt, lens=tuned)``.
    """

    def __init__(self, d_model: int, n_layers: int, record: dict[str, Any] | None = None) -> None:
        super().__init__()
        if n_layers < 1 or d_model < 1:
            raise PatchingError(f"a tuned lens needs d_model >= 1 and n_layers >= 1, got {d_model}, {n_layers}")
        self.d_model, self.n_layers = d_model, n_layers
        self.record = dict(record or {})
        self.weight = nn.Parameter(torch.zeros(n_layers, d_model, d_model))  # A_l, (L, D, D)
        self.bias = nn.Parameter(torch.zeros(n_layers, d_model))  # b_l, (L, D)

    @classmethod
    def for_model(cls, model: nn.Module) -> TunedLens:
        """An identity-initialised lens for ``model`` (on its device), remembering which model it reads."""
        n = _decoder_layers(model)
        lens = cls(model.cfg.d_model, n, _model_record(model))
        return lens.to(next(model.parameters()).device)

    def translate(self, h: Tensor, layer: int) -> Tensor:
        """Shapes: h (..., d_model) -> (..., d_model); the identity for the last layer."""
        if not 0 <= layer < self.n_layers:
            raise PatchingError(f"unknown site 'dec.{layer}.resid': this lens has {self.n_layers} layers")
        if layer == self.n_layers - 1:
            return h
        return h + (h @ self.weight[layer].T + self.bias[layer]).to(h.dtype)

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model this lens was not trained on (architecture, vocabulary or read-out weights differ)."""
        if self.record and self.record != _model_record(model):
            raise CheckpointError("this tuned lens was trained for another model (architecture, vocabulary or "
                                  "output projection differ): train one for this model with train_tuned_lens")

    def save(self, folder: str | Path) -> Path:
        """Write ``tuned_lens.safetensors`` (and ``tuned_lens.json``) into ``folder``, atomically."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LENS_FILE
        meta = {"d_model": self.d_model, "n_layers": self.n_layers, "record": self.record}
        tmp = path.with_suffix(".tmp")
        save_file({"weight": self.weight.detach().cpu().contiguous(), "bias": self.bias.detach().cpu().contiguous()},
                  str(tmp), metadata={"workbench": json.dumps(meta)})
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        json_path = folder / "tuned_lens.json"
        tmp_json = json_path.with_suffix(".json.tmp")
        tmp_json.write_text(json.dumps(meta, indent=1), encoding="utf-8")
        os.replace(tmp_json, json_path)
        return path

    @classmethod
    def load(cls, folder: str | Path, model: nn.Module | None = None) -> TunedLens:
        """Read a lens saved by :meth:`save`; with ``model``, check that it belongs to it and move it there."""
        from safetensors import safe_open

        path = Path(folder) / LENS_FILE
        if not path.is_file():
            raise CheckpointError(f"no tuned lens at {path}: train one with train_tuned_lens and save it there")
        try:
            with safe_open(str(path), framework="pt") as fh:
                meta = json.loads((fh.metadata() or {}).get("workbench", "{}"))
                tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open has no __iter__)
        except Exception as exc:  # safetensors' own error type, or JSON's, on a damaged file
            raise CheckpointError(f"{path} is not a readable tuned lens ({type(exc).__name__}: {str(exc)[:120]}): it "
                                  "is truncated or damaged; train the lens again and save it") from exc
        if set(tensors) != {"weight", "bias"} or "d_model" not in meta:
            raise CheckpointError(f"{path} is not a workbench tuned lens (it holds {sorted(tensors)})")
        lens = cls(int(meta["d_model"]), int(meta["n_layers"]), meta.get("record"))
        lens.load_state_dict(tensors)
        if model is not None:
            lens.check_model(model)
            lens.to(next(model.parameters()).device)
        return lens


@dataclass
class LensTraining:
    """What :func:`train_tuned_lens` did: the loss (mean KL over trainable layers) per step and the wall time."""

    losses: list[float]
    seconds: float
    n_tokens: int


def _states_and_targets(model: nn.Module, batches: Sequence[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Stack the real positions' decoder states (L, N, D) and final states (N, D) of every batch."""
    states, finals = [], []
    for src, tgt in batches:
        hs, _ = decoder_states(model, src, tgt)
        real = tgt != model.pad_id  # (B, T)
        states.append(torch.stack([h[real] for h in hs]))  # (L, n, D)
        finals.append(hs[-1][real])
    return torch.cat(states, 1), torch.cat(finals, 0)


def _least_squares_start(lens: TunedLens, states: Tensor, finals: Tensor) -> None:
    """Set each translator to the affine map that best sends its layer's states to the final ones (least squares).

    A closed-form start (one ``lstsq`` per layer over every position) that the KL steps then refine: far fewer
    steps reach the same KL than from the identity.

    Shapes:
        states (L, N, D), finals (N, D)
    """
    ones = states.new_ones(states.shape[1], 1)
    with torch.no_grad():
        for layer in range(lens.n_layers - 1):
            h = states[layer].double()
            design = torch.cat([h, ones.double()], 1)  # (N, D + 1)
            gram = design.T @ design  # (D + 1, D + 1): the normal equations, far cheaper than lstsq on (N, D + 1)
            gram += 1e-6 * gram.diagonal().mean() * torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
            solution = torch.linalg.solve(gram, design.T @ (finals.double() - h))  # (D + 1, D): [A^T; b]
            lens.weight[layer] = solution[:-1].T.to(lens.weight.dtype)
            lens.bias[layer] = solution[-1].to(lens.bias.dtype)


def train_tuned_lens(model: nn.Module, batches: Sequence[tuple[Tensor, Tensor]], steps: int = 100,
                     tokens_per_step: int = 256, lr: float = 1e-3, seed: int = 0,
                     lens: TunedLens | None = None, warm_start: bool = True) -> tuple[TunedLens, LensTraining]:
    """Train a tuned lens on the model's own decoder states (teacher forcing on ``batches``).

    The translators start at their least-squares maps to the final states (``warm_start``); then each step takes
    ``tokens_per_step`` real target positions at random and minimises, summed over the trainable layers,
    KL(final distribution || lens distribution). The model's weights are frozen; only the translators move.

    Args:
        model: a workbench Transformer.
        batches: ``(src, tgt_in)`` id tensors, e.g. training sentences with their references.
        steps: optimiser steps (Adam).
        tokens_per_step: positions per step.
        lr: Adam's learning rate.
        seed: seeds the positions drawn (its own generator).
        lens: continue training this lens (default: a fresh identity lens).
        warm_start: start each translator at its least-squares map from the layer's states to the final states
            (closed form, normal equations with a tiny ridge), then take the KL steps; False starts from the identity.

    Returns:
        (lens, record of the training).
    """
    if steps < 1 or tokens_per_step < 1:
        raise TrainingError(f"steps={steps} and tokens_per_step={tokens_per_step} must be at least 1")
    if not batches:
        raise TrainingError("train_tuned_lens needs at least one (src, tgt_in) batch")
    start = time.perf_counter()
    lens = TunedLens.for_model(model) if lens is None else lens
    lens.check_model(model)
    states, finals = _states_and_targets(model, batches)  # (L, N, D), (N, D)
    n_tokens = finals.shape[0]
    gen = torch.Generator().manual_seed(seed)
    if warm_start:
        _least_squares_start(lens, states, finals)
    opt = torch.optim.Adam(lens.parameters(), lr=lr)
    frozen = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    losses = []
    trainable = range(lens.n_layers - 1)
    try:
        for _ in range(steps):
            idx = torch.randint(0, n_tokens, (min(tokens_per_step, n_tokens),), generator=gen).to(finals.device)
            with torch.no_grad():
                target = torch.log_softmax(_read_out(model, finals[idx]).float(), -1)  # (n, V)
            loss = finals.new_zeros(())
            for layer in trainable:
                logq = torch.log_softmax(_read_out(model, lens.translate(states[layer, idx], layer)).float(), -1)
                loss = loss + F.kl_div(logq, target, log_target=True, reduction="batchmean")
            if not trainable:
                break
            if not torch.isfinite(loss):
                raise TrainingError(f"tuned-lens loss became {float(loss)}: lower lr (now {lr})")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item() / len(trainable))
    finally:
        for p, flag in zip(model.parameters(), frozen, strict=True):
            p.requires_grad_(flag)
    return lens, LensTraining(losses=losses, seconds=time.perf_counter() - start, n_tokens=n_tokens)


def kl_by_layer(model: nn.Module, batches: Sequence[tuple[Tensor, Tensor]],
                lens: TunedLens | None = None) -> np.ndarray:
    """Per-sentence KL(final || lens) of every layer on held-out batches.

    Returns:
        (n_sentences, L) float64: each sentence's mean over its real target positions.
    """
    if lens is not None:
        lens.check_model(model)
    rows = []
    for src, tgt in batches:
        states, final = decoder_states(model, src, tgt)
        logp = torch.log_softmax(final.float(), -1)  # (B, T, V)
        with torch.no_grad():
            kl = torch.stack([
                (logp.exp() * (logp - torch.log_softmax(
                    _read_out(model, lens.translate(h, i) if lens is not None else h).float(), -1))).sum(-1)
                for i, h in enumerate(states)])  # (L, B, T)
        real = (tgt != model.pad_id).to(kl.dtype)  # (B, T)
        rows.append(((kl * real).sum(-1) / real.sum(-1).clamp_min(1)).T.double().cpu().numpy())  # (B, L)
    return np.concatenate(rows, 0) if rows else np.zeros((0, 0))


def text_batches(tokenizer: Any, pairs: Sequence[tuple[str, str]], batch_size: int = 64,
                 device: str | torch.device = "cpu") -> list[tuple[Tensor, Tensor]]:
    """Teacher-forcing batches ``(src, tgt_in)`` of (source, reference) text pairs, in order, padded per batch.

    Shapes:
        -> [(src (B, S), tgt_in (B, T))]: tgt_in is bos + the reference without its eos
    """
    from workbench.translation.batching import pad_to_tensor

    if batch_size < 1:
        raise PatchingError(f"batch_size={batch_size} must be at least 1")
    out = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        src = tokenizer.encode_src([s for s, _ in chunk])
        tgt = [row[:-1] for row in tokenizer.encode_tgt([t for _, t in chunk])]
        out.append((pad_to_tensor(src, tokenizer.pad_id).to(device), pad_to_tensor(tgt, tokenizer.pad_id).to(device)))
    return out
