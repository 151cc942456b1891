"""The translation pipeline end to end: data -> tokenizer -> model -> fit -> checkpoints -> decoding -> BLEU.

These are the functions behind ``workbench train`` and ``workbench evaluate``; notebooks call them too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch

from workbench import _version
from workbench.errors import ConfigError, DataError
from workbench.runtime import PrecisionLike
from workbench.translation.decode import DECODING
from workbench.translation.run import RunConfig

log = logging.getLogger(__name__)


def load_pairs(
    split: str,
    src: str,
    tgt: str,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    src_file: str | Path | None = None,
    tgt_file: str | Path | None = None,
) -> list[tuple[str, str]]:
    """Multi30k pairs, or the user's own aligned files when both are given."""
    from workbench.translation.data import load_multi30k, load_parallel_text

    if (src_file is None) != (tgt_file is None):
        raise DataError("give both the source and the target file of your own parallel data, or neither")
    if src_file is not None:
        pairs = load_parallel_text(src_file, tgt_file)
        return pairs[:limit] if limit else pairs
    return load_multi30k(split, src=src, tgt=tgt, data_dir=data_dir, limit=limit)


def build_translator(arch: str, preset_name: str, vocab_size: int, pad_id: int, **overrides: Any) -> torch.nn.Module:
    """A model of architecture ``arch`` (:mod:`workbench.model.registry`) sized like a preset, over one joint vocabulary:
    the Transformer preset itself (source and target embeddings shared), or the GRU baseline as wide as it."""
    from workbench.model.registry import build_from_preset

    return build_from_preset(arch, preset_name, vocab_size, vocab_size, pad_id, **overrides)


def train_translation(run: RunConfig, out_dir: str | Path = "runs/small", resume: bool = False,
                      overwrite: bool = False, restart: bool = False) -> dict[str, Any]:
    """Train the translator ``run`` describes and write its run folder to ``out_dir``; returns a summary (also saved
    as ``summary.json``, then ``complete.json``: the settings and step count of a run that finished as asked).

    The folder is owned (:mod:`workbench.translation.run_folder`): a folder that holds a run is refused unless
    ``resume=True`` (continue it from its ``last.pt``; a run interrupted before its first epoch ended starts again
    from step 0 only where that overwrites nothing of it, or with ``restart=True``: a cache entry's own) or ``overwrite=True`` (the old run is moved aside, never deleted); ``resume`` where no run is is
    refused; a lock keeps a second training out. Nothing is changed before the data has loaded.

    Under ``torchrun`` every rank returns the summary and only rank 0 takes the folder and writes files.
    """
    import torch.distributed as dist

    from workbench.runtime import set_seed
    from workbench.translation import run_folder
    from workbench.translation.checkpoint import load_checkpoint, load_state
    from workbench.translation.tokenizer import SubwordTokenizer
    from workbench.translation.train import fit

    if not isinstance(run, RunConfig):
        raise ConfigError(f"train_translation takes a RunConfig, got {type(run).__name__}: build one with "
                          "RunConfig.from_flat(...) or workbench.recipe('cpu-small', ...)")
    cfg = run.train
    out = Path(os.path.abspath(Path(out_dir).expanduser()))  # "." and ".." named: --overwrite may move them aside
    writer = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    mode = (run_folder.plan(out, resume=resume, overwrite=overwrite, restart=restart) if writer
            else "resume" if resume else "new")
    if mode == "resume":  # the run's data, tokenizer, model and recipe are its own: a resume may not change them
        run_folder.check_resume_settings(out, run.to_flat())
    train_pairs = load_pairs("train", run.src, run.tgt, run.data_dir, run.limit, run.train_src, run.train_tgt)
    val_pairs = load_pairs("val", run.src, run.tgt, run.data_dir, None, run.val_src, run.val_tgt)
    set_seed(cfg.seed)
    overrides = {} if run.dropout is None else {"dropout": run.dropout}
    if resume and (out / "last.pt").exists():
        ckpt = load_checkpoint(out / "last.pt")
        tokenizer = SubwordTokenizer.from_json(ckpt["tokenizer"])
        model = build_translator(run.arch, run.preset, tokenizer.src_vocab_size, tokenizer.pad_id, **overrides)
        # a checkpoint of another architecture or size is refused here, before the folder is touched
        load_state(model, ckpt["model"], source=f"--resume: {out / 'last.pt'} (trained with --arch "
                                                  f"{ckpt.get('arch')})")
        del ckpt
    else:
        if resume:
            log.info("no epoch of the run in %s had finished: training it again from step 0", out)
        # the tokenizer sees the training split only, never validation or test text
        tokenizer = SubwordTokenizer.train(train_pairs, vocab_size=run.vocab_size, joint=True)
        model = build_translator(run.arch, run.preset, tokenizer.src_vocab_size, tokenizer.pad_id, **overrides)
    settings = run.to_flat()
    with run_folder.open_run(out, mode, settings) if writer else contextlib.nullcontext(out):
        start = time.perf_counter()
        history = fit(model, tokenizer, train_pairs, val_pairs, cfg, out_dir=out, resume=resume,
                      meta={"src_lang": run.src, "tgt_lang": run.tgt})
        summary = _summary(run, out, tokenizer, train_pairs, history, time.perf_counter() - start)
        if writer:
            run_folder.write_record(out / "summary.json", summary)
            # written last: the run finished as asked (get_translator reuses a cached run only with it)
            run_folder.write_record(out / run_folder.COMPLETE_RECORD, {
                "settings": settings, "step": history.step, "epochs": len(history.train_loss),
                "stopped_reason": history.stopped_reason, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return summary


def _summary(run: RunConfig, out: Path, tokenizer: Any, train_pairs: list[tuple[str, str]], history: Any,
             seconds: float) -> dict[str, Any]:
    """What ``workbench train`` prints and writes as ``summary.json``."""
    cfg = run.train
    summary = {
        "arch": run.arch,
        "preset": run.preset,
        "dropout": run.dropout,
        "src": run.src,
        "tgt": run.tgt,
        "train_pairs": len(train_pairs),
        "vocab_size": tokenizer.src_vocab_size,
        "train_config": dataclasses.asdict(cfg),
        "epochs_run": len(history.train_loss),
        "best_val_loss": min(history.val_loss) if history.val_loss else None,
        "last_val_bleu": history.val_bleu[-1] if history.val_bleu else None,
        "seconds": round(seconds, 1),
        "stopped_reason": history.stopped_reason,
        "precision": history.precision,
        "precision_reason": history.precision_reason,
        "steps": history.step,
        "out_dir": str(out),
    }
    return summary


def score(model: torch.nn.Module, tokenizer: Any, pairs: list[tuple[str, str]], beam: int = 1,
          alpha: float = DECODING.alpha, device: str | torch.device = "cpu", keep_hypotheses: bool = False,
          precision: PrecisionLike = "fp32") -> dict[str, Any]:
    """The one scoring function: sacreBLEU (with its signature), chrF and tokenized lower-cased BLEU of a model's
    translations of ``pairs`` (greedy for ``beam=1``, else beam search with length penalty ``alpha``).

    ``precision``: decoding's number format, ``"fp32"`` (the default, the cards' scores), ``"bf16"`` or ``"auto"``
    (:func:`workbench.translation.decode.decoding_precision`).

    Returns ``{"bleu", "signature", "chrf", "tok_bleu", "n_sentences", "decode_seconds", "precision",
    "precision_reason"}``, and the translations as ``"hypotheses"`` when ``keep_hypotheses``. The release, ``workbench evaluate`` and the ``bench/`` scripts all
    score with it.
    """
    from workbench.translation.decode import decoding_precision, translate
    from workbench.translation.metrics import chrf, corpus_bleu, tokenized_bleu

    sources = [s for s, _ in pairs]
    chosen = decoding_precision(model, tokenizer, sources, beam, precision, device)
    start = time.perf_counter()
    hyps = translate(model, tokenizer, sources, beam=beam, alpha=alpha, device=device, progress=True,
                     precision=chosen)
    seconds = time.perf_counter() - start
    refs = [t for _, t in pairs]
    bleu = corpus_bleu(hyps, refs)
    result = {"bleu": round(bleu.score, 2), "signature": bleu.signature, "chrf": round(chrf(hyps, refs).score, 2),
              "tok_bleu": round(tokenized_bleu(hyps, refs).score, 2), "n_sentences": len(pairs),
              "decode_seconds": round(seconds, 1), "precision": chosen.name, "precision_reason": chosen.reason}
    return {**result, "hypotheses": hyps} if keep_hypotheses else result


def evaluate_checkpoint(
    checkpoint: str | Path,
    split: str = "test_2016_flickr",
    data_dir: str | Path | None = None,
    beam: int = DECODING.beam,
    alpha: float | None = None,
    limit: int | None = None,
    device: str = "auto",
    src: str | None = None,
    tgt: str | None = None,
    write_hypotheses: bool = True,
    precision: PrecisionLike = "fp32",
) -> dict[str, Any]:
    """sacreBLEU (with signature), tokenized BLEU and chrF of a checkpoint on a Multi30k split.

    ``alpha``: beam search's length penalty; None takes a shipped model's card's (chosen on val), else
    :data:`~workbench.translation.decode.DECODING`'s.
    ``precision``: the decoding's number format, ``"fp32"`` (the cards' scores), ``"bf16"`` or ``"auto"``
    (:func:`workbench.translation.decode.translate`); the result says which ran and why.
    """
    from workbench.runtime import resolve_device
    from workbench.translation.shipped import default_alpha, is_pretrained_name, load_any

    dev = resolve_device(device)
    model, tokenizer, ckpt = load_any(checkpoint, device=dev)
    alpha = default_alpha(ckpt) if alpha is None else alpha
    meta = ckpt.get("extra") or {}
    src = src or meta.get("src_lang", "de")
    tgt = tgt or meta.get("tgt_lang", "en")
    pairs = load_pairs(split, src, tgt, data_dir, limit)
    scores = score(model, tokenizer, pairs, beam=beam, alpha=alpha, device=dev, keep_hypotheses=True,
                   precision=precision)
    hyps = scores.pop("hypotheses")
    result = {"split": split, "src": src, "tgt": tgt, "beam": beam, "alpha": alpha if beam > 1 else None, **scores,
              "checkpoint": str(checkpoint)}
    if write_hypotheses and not is_pretrained_name(str(checkpoint)):
        part = f".first{limit}" if limit else ""  # a part of the split never replaces the whole split's file
        path = Path(checkpoint).with_name(f"{Path(checkpoint).stem}.{split}{part}.beam{beam}.{tgt}.txt")
        from workbench.translation.files import atomic_write_text

        try:
            atomic_write_text(path, "\n".join(hyps) + "\n")
            result["hypotheses"] = str(path)
        except OSError as exc:  # a read-only or full folder: the scores stand, the translations are not kept
            result["hypotheses_error"] = f"the translations were not written to {path} ({exc.strerror or exc})"
            log.warning("%s; the scores are unaffected", result["hypotheses_error"])
    return result


# the modules whose code decides what a trained model is: a change to any of them invalidates cached models
TRAINING_CODE = ("model.attention", "translation.batching", "model.config", "translation.data", "translation.kernels",
                 "translation.objective",
                 "model.masks", "model.transformer", "translation.pipeline", "model.positional", "model.registry",
                 "model.rnn", "runtime", "translation.tokenizer", "translation.train")


def training_code_fingerprint() -> str:
    """SHA-256 (first 16 hex digits) of the source files of :data:`TRAINING_CODE`, read now from disk."""
    import hashlib
    import importlib

    digest = hashlib.sha256()
    for name in TRAINING_CODE:
        module = importlib.import_module(f"workbench.{name}")
        digest.update(name.encode() + b"\0" + Path(module.__file__).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _package_version() -> str:
    return _version.__version__  # read at each call (a test sets another version)


def get_translator(run: RunConfig | None = None, cache_dir: str | Path | None = None,
                   checkpoint: str | Path | None = None) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """A trained translator for the notebooks: from ``checkpoint`` if given, else from a cache folder, else
    trained now as ``run`` says (and cached). Returns (model in eval mode, tokenizer, checkpoint dict).

    Give ``run`` a step budget (``max_steps``: the same model on every machine) and no wall-clock one unless you
    mean it. The cache folder is keyed by the run's settings (its data folder aside), the package version and a
    hash of the training code (:func:`training_code_fingerprint`), so a model trained by older code is never reused.

    A cached run is reused only when its completion record (``complete.json``, written last) says it finished as
    asked: the same settings and, for a run stopped by its step budget, that many steps. An entry without one (the
    training was interrupted) is resumed from its ``last.pt``, or trained again when no epoch had finished; a log
    line says which.
    """
    import hashlib

    from platformdirs import user_cache_dir

    from workbench.translation.checkpoint import load_model

    if checkpoint:
        return load_model(checkpoint)
    if not isinstance(run, RunConfig):
        raise ConfigError(f"get_translator needs a RunConfig (run=...) or a checkpoint, got run={run!r}: e.g. "
                          "RunConfig.from_flat(preset='tiny', max_steps=150)")
    settings = {k: v for k, v in run.to_flat().items() if k != "data_dir"}  # where the data lies is not the model
    identity = dict(settings, version=_package_version(), code=training_code_fingerprint())
    key = hashlib.sha1(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:10]
    root = Path(cache_dir) if cache_dir else Path(os.environ.get("WORKBENCH_CACHE", user_cache_dir("attention-workbench")))
    folder = root / "models" / f"{run.arch}-{run.preset}-{run.src}{run.tgt}-{key}"
    if not finished_as_asked(folder, run):
        train_cached(run, folder)
    model, tokenizer, state = load_model(folder / "last.pt")
    state["run_dir"] = str(folder)
    return model, tokenizer, state


def finished_as_asked(folder: str | Path, run: RunConfig) -> bool:
    """True when the run folder's completion record (``complete.json``, written last by
    :func:`train_translation`) says it trained ``run`` to the end: the same settings (the data folder aside) and,
    when the step budget stopped it, ``max_steps`` steps."""
    from workbench.translation.run_folder import COMPLETE_RECORD, read_record

    folder = Path(folder)
    record = read_record(folder / COMPLETE_RECORD)
    if not record or not (folder / "last.pt").exists():
        return False
    ignore = {"data_dir"}
    asked = {k: v for k, v in run.to_flat().items() if k not in ignore}
    done = {k: v for k, v in (record.get("settings") or {}).items() if k not in ignore}
    if json.dumps(asked, sort_keys=True, default=str) != json.dumps(done, sort_keys=True, default=str):
        return False
    if record.get("stopped_reason") == "max steps" and record.get("step") != run.train.max_steps:
        return False
    return True


def train_cached(run: RunConfig, folder: Path) -> None:
    """Train ``run`` into the cache entry ``folder``: a new entry is trained, an interrupted one (no completion
    record) is resumed from its ``last.pt`` or trained again from step 0, and the log says which."""
    from workbench.translation.checkpoint import load_checkpoint
    from workbench.translation.run_folder import RUN_RECORD, holds_run

    budget = f"budget: {run.train.max_steps} steps, {run.train.max_minutes} minutes"
    if (folder / RUN_RECORD).exists():
        if (folder / "last.pt").exists():
            step = load_checkpoint(folder / "last.pt").get("step")
            log.info("cached model %s was interrupted at step %s (no completion record): resuming it (%s)", folder,
                     step, budget)
        else:
            log.info("cached model %s was interrupted before its first epoch ended (no completion record): "
                     "training it again from step 0 (%s)", folder, budget)
        train_translation(run, out_dir=folder, resume=True, restart=True)
    elif holds_run(folder):
        log.info("cached model %s has no run record (an interrupted or foreign entry): training it again (%s; the "
                 "old entry is moved aside)", folder, budget)
        train_translation(run, out_dir=folder, overwrite=True)
    else:
        log.info("training %s into %s (%s)", run.arch, folder, budget)
        train_translation(run, out_dir=folder)
