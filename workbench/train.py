"""Training with the paper's recipe (section 5): label smoothing, Adam(0.9, 0.98, 1e-9), warm-up schedule.

``fit`` is a plain function that returns a :class:`History`; callbacks are named events; no plotting here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from .batching import Batch, make_batch, token_batches
from .config import TrainConfig
from .errors import TrainingError
from .flops import model_train_flops, peak_flops
from .runtime import autocast, resolve_device, set_seed

log = logging.getLogger(__name__)


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
    from .model import Transformer

    keep = batch.tgt_out != pad_id  # (B, T)
    if isinstance(model, Transformer):
        hidden = net(batch.src, batch.tgt_in, project=False)  # (B, T, d_model)
        return model.generator(hidden[keep]), batch.tgt_out[keep]  # (N, V), (N,)
    return net(batch.src, batch.tgt_in)[keep], batch.tgt_out[keep]


def step_loss(net: nn.Module, model: nn.Module, batch: Batch, pad_id: int, eps: float = 0.1) -> tuple[Tensor, int]:
    """The training loss of one batch: summed label-smoothed cross-entropy over real targets, and their count.

    Equal (fp32 tolerance, gradients included) to ``label_smoothed_loss(model(src, tgt_in), tgt_out, ...)``,
    without the work on padding rows (see :func:`real_target_logits`).
    """
    logits, targets = real_target_logits(net, model, batch, pad_id)  # (N, V), (N,)
    loss = F.cross_entropy(logits.float(), targets, label_smoothing=eps, reduction="sum")
    return loss, targets.shape[0]


@dataclass
class History:
    """What a run measured, one entry per epoch (and the training loss per logged step)."""

    train_loss: list[float] = field(default_factory=list)  # mean label-smoothed loss per target token
    val_loss: list[float] = field(default_factory=list)  # validation cross-entropy (no smoothing) per token
    val_ppl: list[float] = field(default_factory=list)  # exp(val_loss)
    val_bleu: list[float] = field(default_factory=list)  # sacreBLEU of greedy decoding on validation
    lr: list[float] = field(default_factory=list)  # learning rate at the end of the epoch
    tokens_per_s: list[float] = field(default_factory=list)  # source + target tokens processed per second
    model_tflops_per_s: list[float | None] = field(default_factory=list)  # analytic training TFLOP/s (None: no FLOP count, e.g. the GRU)
    mfu: list[float | None] = field(default_factory=list)  # model FLOPs utilisation, None if the peak is unknown
    elapsed_s: list[float] = field(default_factory=list)  # wall-clock seconds since the start (training only)
    steps: list[int] = field(default_factory=list)  # optimizer step at each logged step loss
    step_loss: list[float] = field(default_factory=list)  # training loss at those steps
    best_epoch: int | None = None  # epoch (1-based) with the lowest validation loss
    stopped_reason: str = ""  # "epochs", "max steps", "time budget", "early stopping"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> History:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


@torch.no_grad()
def evaluate(model: nn.Module, batches: Sequence[Batch], pad_id: int, device: torch.device | None = None) -> dict[str, float]:
    """Mean cross-entropy per target token, perplexity and token accuracy (no label smoothing)."""
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    total, n, correct = 0.0, 0, 0
    for b in batches:
        b = b.to(device)
        logits, targets = real_target_logits(model, model, b, pad_id)  # (N, V), (N,)
        total += float(F.cross_entropy(logits.float(), targets, reduction="sum"))
        n += targets.shape[0]
        correct += int((logits.argmax(-1) == targets).sum())
    model.train(was_training)
    mean = total / max(n, 1)
    return {"loss": mean, "ppl": math.exp(min(mean, 50.0)), "accuracy": correct / max(n, 1)}


def _encode(tokenizer: Any, pairs: Sequence[tuple[str, str]], max_len: int) -> tuple[list[list[int]], list[list[int]]]:
    src = tokenizer.encode_src([p[0] for p in pairs])
    tgt = tokenizer.encode_tgt([p[1] for p in pairs])
    keep = [i for i in range(len(pairs)) if len(src[i]) <= max_len and len(tgt[i]) - 1 <= max_len]
    if len(keep) < len(pairs):
        log.info("skipping %d of %d pairs longer than max_len=%d tokens", len(pairs) - len(keep), len(pairs), max_len)
    return [src[i] for i in keep], [tgt[i] for i in keep]


def _any_rank(flag: bool, distributed: bool, device: torch.device) -> bool:
    """True when ``flag`` is true on any rank (a MAX all-reduce), so that every rank takes the same branch.

    A decision that one rank takes alone (its own clock says the time budget is spent) would let it leave the
    loop while the others wait for it in the next gradient all-reduce. Without a process group: ``flag``.
    """
    if not distributed:
        return flag
    vote = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(vote, op=dist.ReduceOp.MAX)
    return bool(vote.item())


def _batches(src: list[list[int]], tgt: list[list[int]], idx: list[list[int]], pad_id: int) -> list[Batch]:
    return [make_batch([src[i] for i in b], [tgt[i] for i in b], pad_id) for b in idx]


def fit(
    model: nn.Module,
    tokenizer: Any,
    train_pairs: Sequence[tuple[str, str]],
    val_pairs: Sequence[tuple[str, str]],
    cfg: TrainConfig,
    out_dir: str | Path | None = None,
    callbacks: dict[str, Callable[..., Any]] | None = None,
    resume: bool = False,
    meta: dict[str, Any] | None = None,
    keep_last: int = 5,
) -> History:
    """Train ``model`` (Transformer or RNN baseline) and return its :class:`History`.

    Training stops after ``cfg.epochs`` epochs, or earlier at ``cfg.max_steps`` optimizer steps (a budget that
    gives the same model on every machine), at ``cfg.max_minutes`` of wall-clock time, or by early stopping
    (``cfg.patience``). Under ``torchrun`` the ranks vote on the time budget and on early stopping, so they all
    stop at the same step.

    Checkpoints go to ``out_dir`` after every epoch and every ``cfg.checkpoint_every`` steps
    (``ckpt_stepNNNNNNN.pt``, the last ``keep_last`` kept for averaging), plus ``last.pt`` and ``best.pt`` at
    epoch ends, with ``history.json``. ``resume=True`` continues from
    ``out_dir/last.pt`` exactly where the run stopped (same batches, same RNG), so an interrupted run ends with the
    same parameters as an uninterrupted one.

    Callbacks (all optional): ``on_step(step, loss)``, ``on_epoch_end(epoch, history)``.
    """
    from .checkpoint import load_checkpoint, load_state, save_checkpoint, set_rng_state, step_checkpoints

    callbacks = callbacks or {}
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    device = resolve_device(cfg.device)
    if distributed and device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    set_seed(cfg.seed)
    model.to(device)
    pad_id = model.pad_id
    max_len = model.cfg.max_len
    out = Path(out_dir) if out_dir is not None else None

    train_src, train_tgt = _encode(tokenizer, train_pairs, max_len)
    val_src, val_tgt = _encode(tokenizer, val_pairs, max_len)
    if not train_src:
        raise TrainingError("no training pairs left after encoding: check the data and max_len")
    src_lens = [len(s) for s in train_src]
    tgt_lens = [len(t) - 1 for t in train_tgt]
    val_batches = _batches(val_src, val_tgt, token_batches([len(s) for s in val_src], [len(t) - 1 for t in val_tgt], cfg.max_tokens, shuffle=False), pad_id)

    d_model = model.cfg.d_model
    use_fused = device.type == "cuda"
    optimizer = torch.optim.Adam(
        model.parameters(), lr=1.0, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay,
        **({"fused": True} if use_fused else {}),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: rate(s + 1, d_model, cfg.warmup_steps, cfg.lr_factor)
    )
    history, step, start_epoch = History(), 0, 0
    if resume and out is not None and (out / "last.pt").exists():
        state = load_checkpoint(out / "last.pt", map_location=device)
        load_state(model, state["model"], source=str(out / "last.pt"))
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, start_epoch = state["step"], state["epoch"]
        history = History.from_dict(state["history"])
        set_rng_state(state["rng"])
        log.info("resumed from %s at epoch %d, step %d", out / "last.pt", start_epoch, step)

    net: nn.Module = model
    pad_multiple = 1  # eager: pad each batch to its own longest sequence
    if cfg.compile:
        net = torch.compile(net)
        pad_multiple = 8  # compiled: lengths rounded up to a multiple of 8, so a few graphs serve every batch
    if distributed:
        net = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)

    from tqdm.auto import tqdm

    t0 = time.perf_counter() - (history.elapsed_s[-1] if history.elapsed_s else 0.0)
    budget = cfg.max_minutes * 60 if cfg.max_minutes else None
    peak = peak_flops(device)  # for the MFU figure (None on a CPU unless WORKBENCH_PEAK_TFLOPS is set)
    best = min(history.val_loss) if history.val_loss else math.inf
    bad_epochs = 0
    if history.best_epoch is not None and history.val_loss:
        bad_epochs = len(history.val_loss) - history.best_epoch
    stop = ""
    for epoch in range(start_epoch, cfg.epochs):
        if cfg.max_steps is not None and step >= cfg.max_steps:  # resumed from a run that had used its steps
            stop = history.stopped_reason = "max steps"
            break
        idx = token_batches(src_lens, tgt_lens, cfg.max_tokens, shuffle=True, seed=cfg.seed, epoch=epoch, world_size=world, rank=rank,
                            pad_multiple=pad_multiple)
        if cfg.accum_steps > 1 and len(idx) >= cfg.accum_steps:
            # every optimizer step sees exactly accum_steps micro-batches (as every DDP step sees world_size batches)
            idx = idx[: len(idx) - len(idx) % cfg.accum_steps]
        net.train()
        ep_loss, ep_tok, ep_all_tok, ep_flops, ep_t = 0.0, 0, 0, 0, time.perf_counter()
        bar = tqdm(idx, desc=f"epoch {epoch + 1}/{cfg.epochs}", unit="batch", leave=False, disable=rank != 0, mininterval=2.0)
        optimizer.zero_grad(set_to_none=True)
        for i, b_idx in enumerate(bar):
            batch = make_batch([train_src[j] for j in b_idx], [train_tgt[j] for j in b_idx], pad_id, pad_multiple, max_len)
            if device.type == "cuda":
                batch = batch.pin_memory().to(device, non_blocking=True)
            with autocast(device, cfg.amp):
                loss_sum, n_tok = step_loss(net, model, batch, pad_id, cfg.label_smoothing)
            ep_flops += model_train_flops(model, batch.src, batch.tgt_in, n_projected=n_tok) or 0
            loss = loss_sum / max(n_tok, 1)
            loss_value = float(loss.detach())
            if not math.isfinite(loss_value):
                raise TrainingError(
                    f"loss became {loss_value} at epoch {epoch + 1}, step {step}: training stopped. The last good "
                    f"checkpoint{' in ' + str(out) if out else ''} is kept; lower lr_factor, raise warmup_steps or "
                    "check the data"
                )
            (loss / cfg.accum_steps).backward()
            if (i + 1) % cfg.accum_steps == 0 or i + 1 == len(idx):
                if cfg.grad_clip:
                    nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                if step % cfg.log_every == 0:
                    history.steps.append(step)
                    history.step_loss.append(loss_value)
                    post = {"loss": f"{loss_value:.3f}", "lr": f"{scheduler.get_last_lr()[0]:.2e}"}
                    if peak is not None and ep_flops:
                        post["mfu"] = f"{ep_flops / max(time.perf_counter() - ep_t, 1e-9) / peak:.1%}"
                    bar.set_postfix(post)
                if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and out is not None and rank == 0:
                    # numbered snapshots for averaging (resuming uses last.pt, written at epoch ends)
                    save_checkpoint(out / f"ckpt_step{step:07d}.pt", model, tokenizer=tokenizer, step=step,
                                    epoch=epoch, train_cfg=cfg, extra=meta or {})
                if "on_step" in callbacks:
                    callbacks["on_step"](step, loss_value)
            ep_loss += float(loss_sum.detach())
            ep_tok += n_tok
            ep_all_tok += n_tok + batch.n_src_tokens
            if cfg.max_steps is not None and step >= cfg.max_steps:
                stop = "max steps"  # every rank counts the same steps: no vote needed
                break
            # each rank reads its own clock: they vote, or one rank could leave while another waits for it
            if budget is not None and _any_rank(time.perf_counter() - t0 > budget, distributed, device):
                stop = "time budget"
                break
        bar.close()
        seconds = time.perf_counter() - ep_t
        history.train_loss.append(ep_loss / max(ep_tok, 1))
        history.tokens_per_s.append(ep_all_tok * world / max(seconds, 1e-9))
        history.model_tflops_per_s.append(ep_flops * world / max(seconds, 1e-9) / 1e12 if ep_flops else None)
        history.mfu.append(ep_flops / max(seconds, 1e-9) / peak if peak is not None and ep_flops else None)
        history.lr.append(scheduler.get_last_lr()[0])
        history.elapsed_s.append(time.perf_counter() - t0)
        val = evaluate(model, val_batches, pad_id, device)
        history.val_loss.append(val["loss"])
        history.val_ppl.append(val["ppl"])
        if cfg.eval_bleu and val_pairs and rank == 0:
            from .decode import translate
            from .metrics import corpus_bleu

            sample = list(val_pairs)[: cfg.bleu_max_sentences] if cfg.bleu_max_sentences else list(val_pairs)
            hyps = translate(model, tokenizer, [s for s, _ in sample], beam=1, device=device)
            history.val_bleu.append(corpus_bleu(hyps, [t for _, t in sample]).score)
        improved = val["loss"] < best
        if improved:
            best, history.best_epoch, bad_epochs = val["loss"], epoch + 1, 0
        else:
            bad_epochs += 1
        log.info(
            "epoch %d: train %.3f val %.3f ppl %.2f%s, %.0f tok/s%s%s",
            epoch + 1, history.train_loss[-1], val["loss"], val["ppl"],
            f" BLEU {history.val_bleu[-1]:.2f}" if history.val_bleu and cfg.eval_bleu else "",
            history.tokens_per_s[-1],
            "" if history.model_tflops_per_s[-1] is None else f", {history.model_tflops_per_s[-1]:.3g} TFLOP/s",
            f", MFU {history.mfu[-1]:.1%}" if history.mfu[-1] is not None else "",
        )
        if cfg.patience is not None and _any_rank(bad_epochs >= cfg.patience, distributed, device):
            stop = stop or "early stopping"
        if stop == "" and epoch + 1 == cfg.epochs:
            stop = "epochs"
        history.stopped_reason = stop
        if out is not None and rank == 0:
            kw = dict(tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler, step=step, epoch=epoch + 1,
                      history=history.to_dict(), train_cfg=cfg, extra=meta or {})
            save_checkpoint(out / f"ckpt_step{step:07d}.pt", model, **kw)
            save_checkpoint(out / "last.pt", model, **kw)
            if improved:
                save_checkpoint(out / "best.pt", model, **kw)
            for old in step_checkpoints(out)[:-keep_last]:
                old.unlink(missing_ok=True)
            (out / "history.json").write_text(json.dumps(history.to_dict(), indent=1))
        if "on_epoch_end" in callbacks:
            callbacks["on_epoch_end"](epoch + 1, history)
        if stop in ("max steps", "time budget", "early stopping"):
            break
    model.eval()
    return history
