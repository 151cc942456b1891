"""Checkpoints: atomic saves of plain containers, ``weights_only`` loads with clear errors, averaging.

A checkpoint is a dict of tensors and plain Python values only (configs as dicts, the tokenizer as its JSON string),
so :func:`torch.load` with ``weights_only=True`` can read it and no pickle payload ever runs.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import random
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from workbench.errors import CheckpointError
from workbench.translation.files import atomic_write
from workbench.translation.tokenizer import tokenizer_from_json

log = logging.getLogger(__name__)

FORMAT = "attention-workbench/1"


def unwrap_model(model: nn.Module) -> nn.Module:
    return getattr(model, "module", getattr(model, "_orig_mod", model))


def rng_state() -> dict[str, Any]:
    """RNG states of torch, Python and NumPy as plain containers."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]), int(np_state[3]), float(np_state[4])],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))


def save_checkpoint(
    path: str | Path,
    model: nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    step: int = 0,
    epoch: int = 0,
    history: dict[str, Any] | None = None,
    train_cfg: Any = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically (:func:`atomic_write`: a temporary file in the same folder, fsync, rename,
    fsync of the folder).

    If anything fails (out of disk space...), the temporary file is removed, the previous checkpoint under
    ``path`` is left as it was, and :class:`CheckpointError` says what happened.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from workbench.model.registry import architecture_of

    model = unwrap_model(model)
    state = {
        "format": FORMAT,
        "arch": architecture_of(model),
        "model_cfg": dataclasses.asdict(model.cfg),
        "src_vocab_size": model.src_vocab_size,
        "tgt_vocab_size": model.tgt_vocab_size,
        "pad_id": model.pad_id,
        "model": model.state_dict(),
        "tokenizer": tokenizer.to_json() if tokenizer is not None else None,
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "step": step,
        "epoch": epoch,
        "rng": rng_state(),
        "history": history or {},
        "train_cfg": dataclasses.asdict(train_cfg) if dataclasses.is_dataclass(train_cfg) else train_cfg,
        "extra": extra or {},
    }
    try:
        atomic_write(path, lambda f: torch.save(state, f))
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(
            f"could not save checkpoint {path} ({exc}); the previous file there, if any, is intact. "
            "Free disk space or choose another --out folder, then resume."
        ) from exc
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` and check it is ours."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist: pass a file written by 'workbench train'")
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder: give a checkpoint file in it (averaged.pt, best.pt or last.pt), or "
                              "open a run folder or a shipped model's folder with workbench.translation.shipped.load_any()")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        if not zipfile.is_zipfile(path):
            raise CheckpointError(
                f"{path} is not a readable checkpoint (not a torch archive): it is truncated or corrupt; use an "
                "earlier file (ckpt_stepNNNNNNN.pt) or train again"
            ) from exc
        raise CheckpointError(
            f"{path} holds objects other than tensors and plain containers, which weights_only loading refuses "
            "(it could run arbitrary code): only load checkpoints written by the workbench"
        ) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError, KeyError, IndexError, TypeError,
            AttributeError) as exc:  # what the unpickler raises on bytes that are not a checkpoint (text, noise)
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({type(exc).__name__}: {str(exc)[:120]}): it is truncated or "
            "corrupt; use an earlier file (ckpt_stepNNNNNNN.pt) or train again"
        ) from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an Attention Workbench checkpoint (no '{FORMAT}' marker)")
    return state


def build_from_checkpoint(state: dict[str, Any]) -> nn.Module:
    """An untrained model of the checkpoint's architecture and config (chosen in :mod:`workbench.model.registry`)."""
    from workbench.model.registry import build_from_config

    return build_from_config(state["arch"], state["model_cfg"], state["src_vocab_size"], state["tgt_vocab_size"],
                             state["pad_id"])


def load_state(model: nn.Module, state_dict: dict[str, torch.Tensor], source: str = "checkpoint") -> None:
    """Load weights, explaining a mismatch (another config or vocabulary) instead of a raw torch error."""
    model = unwrap_model(model)
    own = model.state_dict()
    for name, tensor in state_dict.items():
        if name in own and own[name].shape != tensor.shape:
            raise CheckpointError(
                f"{source}: tensor {name} has shape {tuple(tensor.shape)} but the model expects {tuple(own[name].shape)}; "
                "the checkpoint was made with another config or vocabulary: build the model from the checkpoint "
                "(load_model) instead"
            )
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise CheckpointError(
            f"{source} does not fit this model (missing {missing[:3]}, unexpected {unexpected[:3]}): it was made "
            "with another architecture or config"
        )
    model.load_state_dict(state_dict)


def load_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, Any, dict[str, Any]]:
    """Rebuild model and tokenizer from a checkpoint; returns (model in eval mode, tokenizer, checkpoint dict)."""
    from workbench.runtime import resolve_device

    device = resolve_device(device)  # a device this machine lacks is one line, before the file is read
    state = load_checkpoint(path)
    model = build_from_checkpoint(state)
    load_state(model, state["model"], source=str(path))
    bad = [k for k, v in state["model"].items() if torch.is_floating_point(v) and not bool(torch.isfinite(v).all())]
    if bad:  # it loads (to be inspected), but what it translates means nothing: say so once
        log.warning("%s holds non-finite weights (NaN or inf) in %d tensor(s), %s first: its outputs mean nothing; "
                    "was the training diverging? Use an earlier checkpoint", path, len(bad), bad[0])
    tokenizer = tokenizer_from_json(state["tokenizer"]) if state.get("tokenizer") else None
    return model.to(device).eval(), tokenizer, state


def _average(paths: Sequence[str | Path]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Mean model weights of ``paths`` (each file read once) and the last checkpoint's full state."""
    if not paths:
        raise CheckpointError("no checkpoints to average: train for a few epochs first")
    total: dict[str, torch.Tensor] = {}
    state: dict[str, Any] = {}
    first: dict[str, Any] = {}
    for p in paths:
        state = load_checkpoint(p)
        first = first or state
        for key, what in (("model_cfg", "model configuration"), ("arch", "architecture"), ("tokenizer", "tokenizer")):
            if state.get(key) != first.get(key):
                raise CheckpointError(f"{p} has another {what} than {paths[0]}: average checkpoints of one run only")
        sd = state["model"]
        if total and set(sd) != set(total):
            raise CheckpointError(f"{p} has other tensors than the first checkpoint: average checkpoints of one run only")
        for k, v in sd.items():
            if k in total and total[k].shape != v.shape:
                raise CheckpointError(f"{p}: tensor {k} differs in shape from the first checkpoint")
            total[k] = total[k] + v.double() if k in total else v.double().clone()  # sum in float64
    last = state["model"]
    return {k: (v / len(paths)).to(last[k].dtype) for k, v in total.items()}, state


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model weights of several checkpoints of one run (in the last one's dtypes)."""
    if isinstance(paths, (str, Path)):
        raise CheckpointError(f"average_checkpoints takes a list of checkpoint files, got one path {str(paths)!r}: "
                              "wrap it in a list, or use average_last(run_dir) for a run's snapshots")
    return _average(paths)[0]


def step_checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's numbered checkpoints (``ckpt_stepNNNNNNN.pt``), oldest first."""
    files = [p for p in Path(run_dir).glob("ckpt_step*.pt") if re.fullmatch(r"ckpt_step\d+\.pt", p.name)]
    return sorted(files, key=lambda p: int(p.stem.removeprefix("ckpt_step")))  # a user's ckpt_stepbest.pt is not one


def average_last(run_dir: str | Path, last: int = 5, out: str | Path | None = None, overwrite: bool = False) -> Path:
    """Average the last ``last`` numbered checkpoints of a run into ``averaged.pt`` (paper: the last 5).

    Args:
        out: where to write it (default ``run_dir/averaged.pt``, replaced by each new average). A file given here
            that already exists is replaced only with ``overwrite``; a run's own checkpoint names (``last.pt``,
            ``best.pt``, ``ckpt_stepNNN.pt``) are always refused: resuming and evaluating read them.
    """
    run_dir = Path(run_dir)
    if not isinstance(last, int) or isinstance(last, bool) or last < 1:
        raise CheckpointError(f"--last {last!r}: average a whole number of checkpoints, at least 1")
    paths = step_checkpoints(run_dir)[-last:]
    if not paths:
        raise CheckpointError(f"no ckpt_stepNNNNNNN.pt files in {run_dir}: train with --out {run_dir} first")
    given = out is not None
    out = Path(out) if given else run_dir / "averaged.pt"
    if any(out.resolve() == p.resolve() for p in paths):
        raise CheckpointError(f"{out} is one of the checkpoints averaged: write the average to another file")
    if out.name in ("last.pt", "best.pt") or re.fullmatch(r"ckpt_step\d+\.pt", out.name):
        raise CheckpointError(f"{out}: {out.name} is a run's own checkpoint name (resuming and evaluating read it, and "
                              "an average has no optimizer state): write the average to another file, e.g. averaged.pt")
    if given and out.exists() and not overwrite:
        raise CheckpointError(f"{out} already exists: choose a new file name, or pass overwrite=True (--force) to "
                              "replace it")
    averaged, state = _average(paths)  # state: the newest checkpoint, read once
    state["model"] = averaged
    state["optimizer"] = state["scheduler"] = None
    state["extra"] = {**state.get("extra", {}), "averaged": [p.name for p in paths]}
    try:
        atomic_write(out, lambda f: torch.save(state, f))
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"could not write {out} ({exc}); the previous file there, if any, is intact: free "
                              "disk space or choose another --out") from exc
    log.info("averaged %s into %s", [p.name for p in paths], out)
    return out
