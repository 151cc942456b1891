"""Training with the paper's recipe (section 5): label smoothing, Adam(0.9, 0.98, 1e-9), warm-up schedule (the
schedule and the loss themselves are :mod:`workbench.translation.objective`).

``fit`` is a plain function that returns a :class:`History`; callbacks are named events; no plotting here.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from workbench.errors import TrainingError
from workbench.runtime import Precision, adam, autocast, choose_precision, resolve_device, set_seed
from workbench.translation.batching import Batch, encode_pairs, make_batch, token_batches
from workbench.translation.flops import model_train_flops, peak_flops
from workbench.translation.kernels import use_kernels
from workbench.translation.objective import evaluate, rate, step_loss
from workbench.translation.train_config import TrainConfig

log = logging.getLogger(__name__)


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
    precision: str = ""  # the number format training ran in: "fp32" or "bf16" (TrainConfig.precision resolved)
    precision_reason: str = ""  # why that one (asked for, or what the start-up probe measured)
    step: int = 0  # optimizer steps taken by the end of the last epoch

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> History:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


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


@dataclass
class _Run:
    """What :func:`fit` carries from one step to the next."""

    model: nn.Module  # the plain module: saved, evaluated, its parameters clipped
    net: nn.Module  # what training calls: the model, or its compiled / DDP wrapper
    tokenizer: Any
    cfg: TrainConfig
    device: torch.device
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_src: list[list[int]]  # encoded training sources
    train_tgt: list[list[int]]  # encoded training targets (with BOS and EOS)
    val_pairs: Sequence[tuple[str, str]]  # validation text, for BLEU
    val_batches: list[Batch]  # validation batches, for the loss
    out: Path | None  # the run folder (None: no files)
    meta: dict[str, Any]  # stored in every checkpoint as "extra"
    distributed: bool
    rank: int
    world: int
    pad_multiple: int  # batch lengths are rounded up to a multiple of this (8 when compiled)
    history: History
    step: int  # optimizer steps taken
    t0: float  # the clock at step 0 (a resumed run counts its earlier training time)
    peak: float | None  # the device's peak FLOP/s, for the MFU figure (None: unknown)
    precision: Precision  # the number format of the training steps (and why)
    best: float  # lowest validation loss so far
    bad_epochs: int  # epochs since that lowest validation loss
    keep_last: int = 5  # numbered snapshots kept for averaging (pruned at every save, mid-epoch ones included)

    @property
    def pad_id(self) -> int:
        return self.model.pad_id

    @property
    def max_len(self) -> int:
        return self.model.cfg.max_len


@dataclass
class _EpochTotals:
    """Sums over one epoch's batches on this rank."""

    loss: float = 0.0  # summed label-smoothed loss (read from ``loss_sum`` when the epoch ends)
    loss_sum: Tensor | None = None  # the same sum kept on the device: the loop reads it every log_every steps only
    targets: int = 0  # target tokens
    tokens: int = 0  # source + target tokens
    flops: int = 0  # analytic training FLOPs (0: no count for this model)
    start: float = field(default_factory=time.perf_counter)
    seconds: float = 0.0  # from start to the end of the epoch's training


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
    keep_last: int | None = None,
) -> History:
    """Train ``model`` (Transformer or RNN baseline) and return its :class:`History`.

    Training stops after ``cfg.epochs`` epochs (None: no epoch limit), or earlier at ``cfg.max_steps`` optimizer
    steps (a budget that gives the same model on every machine), at ``cfg.max_minutes`` of wall-clock time, or by
    early stopping (``cfg.patience``); a config with none of the three budgets is refused
    (:meth:`TrainConfig.check_budget`). Under ``torchrun`` the ranks vote on the time budget and on early stopping,
    so they all stop at the same step.

    Checkpoints go to ``out_dir`` after every epoch and every ``cfg.checkpoint_every`` steps
    (``ckpt_stepNNNNNNN.pt``, the last ``keep_last`` kept for averaging; None: ``cfg.keep_checkpoints``), plus ``last.pt`` and ``best.pt`` at
    epoch ends, with ``history.json``. ``resume=True`` continues from
    ``out_dir/last.pt`` exactly where the run stopped (same batches, same RNG), so an interrupted run ends with the
    same parameters as an uninterrupted one.

    Callbacks (all optional): ``on_step(step, loss)``, ``on_epoch_end(epoch, history)``.
    """
    cfg.check_budget()
    callbacks = callbacks or {}
    run, start_epoch = _start(model, tokenizer, train_pairs, val_pairs, cfg, out_dir, resume, meta or {})
    run.keep_last = cfg.keep_checkpoints if keep_last is None else keep_last
    for epoch in range(start_epoch, cfg.epochs) if cfg.epochs is not None else itertools.count(start_epoch):
        if cfg.max_steps is not None and run.step >= cfg.max_steps:  # resumed from a run that had used its steps
            run.history.stopped_reason = "max steps"
            break
        stop, totals = _train_epoch(run, epoch, callbacks.get("on_step"))
        improved = _end_epoch(run, epoch, totals)
        stop = run.history.stopped_reason = _stop_decision(run, epoch, stop)
        _save_epoch(run, epoch, improved, cfg.keep_checkpoints if keep_last is None else keep_last)
        if "on_epoch_end" in callbacks:
            callbacks["on_epoch_end"](epoch + 1, run.history)
        if stop:
            break
    run.history.step = run.step
    model.eval()
    return run.history


def _start(model: nn.Module, tokenizer: Any, train_pairs: Sequence[tuple[str, str]],
           val_pairs: Sequence[tuple[str, str]], cfg: TrainConfig, out_dir: str | Path | None, resume: bool,
           meta: dict[str, Any]) -> tuple[_Run, int]:
    """Everything before the first step: device and seed, the encoded data, optimizer and schedule, the state of
    ``out_dir/last.pt`` when resuming, the compiled / DDP wrapper. Returns the run and the epoch to start from."""
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    device = resolve_device(cfg.device)
    if distributed and device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    set_seed(cfg.seed)
    use_kernels(model.to(device))  # the CPU kernels chosen for this processor (kernels.py): same p, same places
    pad_id, max_len = model.pad_id, model.cfg.max_len
    out = Path(out_dir) if out_dir is not None else None

    train_src, train_tgt = encode_pairs(tokenizer, train_pairs, max_len)
    val_src, val_tgt = encode_pairs(tokenizer, val_pairs, max_len)
    if not train_src:
        raise TrainingError("no training pairs left after encoding: check the data and max_len")
    val_idx = token_batches([len(s) for s in val_src], [len(t) - 1 for t in val_tgt], cfg.max_tokens, shuffle=False)
    val_batches = _batches(val_src, val_tgt, val_idx, pad_id)

    optimizer, scheduler = _optimizer_and_schedule(model, cfg, device)
    history, step, start_epoch = History(), 0, 0
    if resume and out is not None and (out / "last.pt").exists():
        history, step, start_epoch = _resume(out / "last.pt", model, optimizer, scheduler, device)
    if resume and out is not None and rank == 0:
        from workbench.translation.run_folder import remove_later_snapshots

        remove_later_snapshots(out, step)
    net, pad_multiple = _wrap(model, cfg, distributed, device)
    precision = _choose_precision(model, cfg, device, train_src, train_tgt, pad_id, distributed, history)
    history.precision, history.precision_reason = precision.name, precision.reason

    t0 = time.perf_counter() - (history.elapsed_s[-1] if history.elapsed_s else 0.0)
    peak = peak_flops(device)  # for the MFU figure (None on a CPU unless WORKBENCH_PEAK_TFLOPS is set)
    best = min(history.val_loss) if history.val_loss else math.inf
    bad_epochs = len(history.val_loss) - history.best_epoch if history.best_epoch is not None and history.val_loss else 0
    run = _Run(model=model, net=net, tokenizer=tokenizer, cfg=cfg, device=device, optimizer=optimizer,
               scheduler=scheduler, train_src=train_src, train_tgt=train_tgt, val_pairs=val_pairs,
               val_batches=val_batches, out=out, meta=meta, distributed=distributed, rank=rank, world=world,
               pad_multiple=pad_multiple, history=history, step=step, t0=t0, peak=peak, precision=precision,
               best=best, bad_epochs=bad_epochs)
    return run, start_epoch


RESUMED = "resumed in the run's format"  # the start of a resumed auto run's precision_reason


def _choose_precision(model: nn.Module, cfg: TrainConfig, device: torch.device, train_src: list[list[int]],
                      train_tgt: list[list[int]], pad_id: int, distributed: bool, history: History) -> Precision:
    """``cfg.precision`` resolved on ``device`` (:func:`workbench.runtime.choose_precision`), logged in one line.

    ``auto`` on a CPU with bf16 matrix units probes one training step (forward, loss, backward) of a copy of the
    model on a batch of the recipe's size, from the training data, in fp32 and in bf16; the model, its gradients and
    the random state are left as they were. Under ``torchrun`` every rank trains in fp32 if any rank chose it. A
    resumed ``auto`` run keeps the format it started in (``history.precision``), so it goes on as it began.
    """
    if cfg.precision == "auto" and history.precision:
        reason = history.precision_reason  # said once, however many times the run resumes
        if not reason.startswith(RESUMED):
            reason = f"{RESUMED} ({reason})"
        precision = Precision(history.precision, reason)
        log.info("precision %s: %s", precision.name, precision.reason)
        return precision
    probe = None
    if cfg.precision == "auto" and device.type == "cpu":
        import copy

        idx = token_batches([len(s) for s in train_src], [len(t) - 1 for t in train_tgt], cfg.max_tokens,
                            shuffle=False)
        b_idx = idx[len(idx) // 2]  # a batch of middling lengths, as full as the recipe's
        batch = make_batch([train_src[j] for j in b_idx], [train_tgt[j] for j in b_idx], pad_id)
        shadow = use_kernels(copy.deepcopy(model)).train()

        def probe() -> None:
            loss_sum, n_tok = step_loss(shadow, shadow, batch, pad_id, cfg.label_smoothing)
            (loss_sum / max(n_tok, 1)).backward()
            shadow.zero_grad(set_to_none=True)

    precision = choose_precision(cfg.precision, device, probe, what="a training step")
    if _any_rank(precision.name == "fp32", distributed, device) and precision.name != "fp32":
        precision = Precision("fp32", precision.reason + "; fp32 because another rank chose it")
    log.info("precision %s: %s", precision.name, precision.reason)
    return precision


def _optimizer_and_schedule(model: nn.Module, cfg: TrainConfig, device: torch.device) -> tuple[torch.optim.Optimizer, Any]:
    """Adam (fused where torch has the kernel: :func:`workbench.runtime.adam`) with the paper's warm-up schedule
    :func:`rate` as its learning rate."""
    optimizer = adam(list(model.parameters()), device, lr=1.0, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps,
                     weight_decay=cfg.weight_decay)
    d_model = model.cfg.d_model
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: rate(s + 1, d_model, cfg.warmup_steps, cfg.lr_factor))
    return optimizer, scheduler


def _resume(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
            device: torch.device) -> tuple[History, int, int]:
    """Load model, optimizer, schedule and RNG states from ``path``; returns its history, step and epoch."""
    from workbench.translation.checkpoint import load_checkpoint, load_state, set_rng_state

    state = load_checkpoint(path, map_location=device)
    load_state(model, state["model"], source=str(path))
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    log.info("resumed from %s at epoch %d, step %d", path, state["epoch"], state["step"])
    return History.from_dict(state["history"]), state["step"], state["epoch"]


def _wrap(model: nn.Module, cfg: TrainConfig, distributed: bool, device: torch.device) -> tuple[nn.Module, int]:
    """The module training calls (compiled and/or DDP-wrapped as asked), and the multiple batch lengths round to."""
    net: nn.Module = model
    pad_multiple = 1  # eager: pad each batch to its own longest sequence
    if cfg.compile:
        if device.type == "cpu":
            log.warning("compile=True on the CPU: torch.compile's training step was slower than eager there for both "
                        "our model and torch.nn.Transformer (the book's Benchmarks page); compiling anyway, as asked")
        net = torch.compile(net)
        pad_multiple = 8  # compiled: lengths rounded up to a multiple of 8, so a few graphs serve every batch
    if distributed:
        net = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    return net, pad_multiple


def _train_epoch(run: _Run, epoch: int, on_step: Callable[[int, float], Any] | None) -> tuple[str, _EpochTotals]:
    """One pass over this rank's share of the epoch's shuffled batches. Returns why it ended early (``"max steps"``,
    ``"time budget"``; ``""`` when it ran to the end) and its totals."""
    from tqdm.auto import tqdm

    cfg = run.cfg
    idx = token_batches([len(s) for s in run.train_src], [len(t) - 1 for t in run.train_tgt], cfg.max_tokens,
                        shuffle=True, seed=cfg.seed, epoch=epoch, world_size=run.world, rank=run.rank,
                        pad_multiple=run.pad_multiple)
    if cfg.accum_steps > 1 and len(idx) >= cfg.accum_steps:
        # every optimizer step sees exactly accum_steps micro-batches (as every DDP step sees world_size batches)
        idx = idx[: len(idx) - len(idx) % cfg.accum_steps]
    run.net.train()
    totals = _EpochTotals()
    of = f"/{cfg.epochs}" if cfg.epochs is not None else ""
    bar = tqdm(idx, desc=f"epoch {epoch + 1}{of}", unit="batch", leave=False, disable=run.rank != 0, mininterval=2.0)
    run.optimizer.zero_grad(set_to_none=True)
    stop = ""
    for i, b_idx in enumerate(bar):
        loss = _forward_backward(run, epoch, b_idx, totals)
        if (i + 1) % cfg.accum_steps == 0 or i + 1 == len(idx):
            _optimizer_step(run, epoch, loss, totals, bar, on_step)
        if cfg.max_steps is not None and run.step >= cfg.max_steps:
            stop = "max steps"  # every rank counts the same steps: no vote needed
            break
        # each rank reads its own clock: they vote, or one rank could leave while another waits for it
        if cfg.max_minutes is not None and _any_rank(time.perf_counter() - run.t0 > cfg.max_minutes * 60,
                                                     run.distributed, run.device):
            stop = "time budget"
            break
    bar.close()
    if totals.loss_sum is not None:
        totals.loss = _read_loss(run, epoch, totals.loss_sum)
    totals.seconds = time.perf_counter() - totals.start
    return stop, totals


def _forward_backward(run: _Run, epoch: int, b_idx: list[int], totals: _EpochTotals) -> Tensor:
    """Loss and gradients of one micro-batch (added to the gradients already there); returns its loss per token,
    on the device and unread: the loop asks the device nothing per step (see :func:`_read_loss`).

    The batch is built on the CPU, where its token counts and the positions of its real targets are found, then
    sent from pinned memory without waiting (an accelerator computes the previous step meanwhile)."""
    cfg = run.cfg
    batch = make_batch([run.train_src[j] for j in b_idx], [run.train_tgt[j] for j in b_idx], run.pad_id,
                       run.pad_multiple, run.max_len)
    rows, n_src = _host_counts(batch, run.pad_id)
    totals.flops += model_train_flops(run.model, batch.src, batch.tgt_in, n_projected=rows.shape[0]) or 0
    if run.device.type == "cuda":
        batch = batch.pin_memory().to(run.device, non_blocking=True)
        rows = rows.pin_memory().to(run.device, non_blocking=True)
    with autocast(run.device, run.precision):
        loss_sum, n_tok = step_loss(run.net, run.model, batch, run.pad_id, cfg.label_smoothing, rows=rows)
    loss = loss_sum / max(n_tok, 1)
    (loss / cfg.accum_steps).backward()
    totals.loss_sum = loss_sum.detach().float() if totals.loss_sum is None else totals.loss_sum + loss_sum.detach()
    totals.targets += n_tok
    totals.tokens += n_tok + n_src
    return loss.detach()


def _host_counts(batch: Batch, pad_id: int) -> tuple[Tensor, int]:
    """What the loop needs to know of a batch still on the CPU (so no device is asked): the flat positions of its
    real targets (N,) and its number of real source tokens."""
    return (batch.tgt_out != pad_id).flatten().nonzero().squeeze(1), batch.n_src_tokens


def _read_loss(run: _Run, epoch: int, loss: Tensor) -> float:
    """The one host read of a loss (every ``log_every`` steps, before a snapshot, at the end of an epoch): stops
    training with a clear error when it is not finite."""
    value = float(loss)
    if not math.isfinite(value):
        every = run.cfg.log_every
        when = (f"step {run.step}" if every <= 1 else
                f"step {run.step} (read every {every} steps: it may have turned non-finite up to {every - 1} steps "
                "earlier; log_every=1 finds the first)")
        raise TrainingError(
            f"loss became {value} by epoch {epoch + 1}, {when}: training stopped. The last good "
            f"checkpoint{' in ' + str(run.out) if run.out else ''} is kept; lower lr_factor, raise warmup_steps or "
            "check the data"
        )
    return value


def _optimizer_step(run: _Run, epoch: int, loss: Tensor, totals: _EpochTotals, bar: Any,
                    on_step: Callable[[int, float], Any] | None = None) -> None:
    """Clip, step optimizer and schedule, count the step; log its loss, tokens/s and MFU every ``log_every`` steps
    and save a numbered snapshot every ``checkpoint_every`` steps (rank 0). The loss is read on the host only then
    (and every step for an ``on_step`` callback, which asks for it)."""
    from workbench.translation.checkpoint import save_checkpoint, step_checkpoints

    cfg = run.cfg
    if cfg.grad_clip:
        nn.utils.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    run.step += 1
    if on_step is not None:
        on_step(run.step, _read_loss(run, epoch, loss))
    if run.step % cfg.log_every == 0:
        loss_value = _read_loss(run, epoch, loss)
        run.history.steps.append(run.step)
        run.history.step_loss.append(loss_value)
        seconds = max(time.perf_counter() - totals.start, 1e-9)
        post = {"loss": f"{loss_value:.3f}", "lr": f"{run.scheduler.get_last_lr()[0]:.2e}",
                "tok/s": f"{totals.tokens * run.world / seconds:,.0f}"}
        if run.peak is not None and totals.flops:
            post["mfu"] = f"{totals.flops / seconds / run.peak:.1%}"
        bar.set_postfix(post)
    if cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0 and run.out is not None and run.rank == 0:
        if totals.loss_sum is not None:
            _read_loss(run, epoch, totals.loss_sum)  # never a snapshot of weights a non-finite loss has updated
        # numbered snapshots for averaging (resuming uses last.pt, written at epoch ends)
        save_checkpoint(run.out / f"ckpt_step{run.step:07d}.pt", run.model, tokenizer=run.tokenizer, step=run.step,
                        epoch=epoch, train_cfg=cfg, extra=run.meta)
        for old in step_checkpoints(run.out)[:-run.keep_last]:  # the newest keep_last, as the help says
            old.unlink(missing_ok=True)


def _end_epoch(run: _Run, epoch: int, totals: _EpochTotals) -> bool:
    """The epoch's figures into the history: training loss, speed, learning rate, validation loss (and greedy
    BLEU, on rank 0). Returns True when the validation loss is the lowest so far."""
    h, cfg, seconds = run.history, run.cfg, max(totals.seconds, 1e-9)
    h.train_loss.append(totals.loss / max(totals.targets, 1))
    h.tokens_per_s.append(totals.tokens * run.world / seconds)
    h.model_tflops_per_s.append(totals.flops * run.world / seconds / 1e12 if totals.flops else None)
    h.mfu.append(totals.flops / seconds / run.peak if run.peak is not None and totals.flops else None)
    h.lr.append(run.scheduler.get_last_lr()[0])
    h.elapsed_s.append(time.perf_counter() - run.t0)
    h.step = run.step
    val = evaluate(run.model, run.val_batches, run.pad_id, run.device)
    h.val_loss.append(val["loss"])
    h.val_ppl.append(val["ppl"])
    if cfg.eval_bleu and run.val_pairs and run.rank == 0:
        from workbench.translation.decode import translate
        from workbench.translation.metrics import corpus_bleu

        sample = list(run.val_pairs)[: cfg.bleu_max_sentences] if cfg.bleu_max_sentences else list(run.val_pairs)
        hyps = translate(run.model, run.tokenizer, [s for s, _ in sample], beam=1, device=run.device)
        h.val_bleu.append(corpus_bleu(hyps, [t for _, t in sample]).score)
    improved = val["loss"] < run.best
    if improved:
        run.best, h.best_epoch, run.bad_epochs = val["loss"], epoch + 1, 0
    else:
        run.bad_epochs += 1
    log.info(
        "epoch %d: train %.3f val %.3f ppl %.2f%s, %.0f tok/s%s%s",
        epoch + 1, h.train_loss[-1], val["loss"], val["ppl"],
        f" BLEU {h.val_bleu[-1]:.2f}" if h.val_bleu and cfg.eval_bleu else "",
        h.tokens_per_s[-1],
        "" if h.model_tflops_per_s[-1] is None else f", {h.model_tflops_per_s[-1]:.3g} TFLOP/s",
        f", MFU {h.mfu[-1]:.1%}" if h.mfu[-1] is not None else "",
    )
    return improved


def _stop_decision(run: _Run, epoch: int, stop: str) -> str:
    """Why training stops after this epoch (``""``: it goes on). The ranks vote on early stopping, every epoch
    (a collective every rank must join), whatever ``stop`` already says."""
    cfg = run.cfg
    if cfg.patience is not None and _any_rank(run.bad_epochs >= cfg.patience, run.distributed, run.device):
        stop = stop or "early stopping"
    if stop == "" and cfg.epochs is not None and epoch + 1 == cfg.epochs:
        stop = "epochs"
    return stop


def _save_epoch(run: _Run, epoch: int, improved: bool, keep_last: int) -> None:
    """Rank 0 writes the epoch's numbered checkpoint, ``best.pt`` when the validation loss improved,
    ``history.json``, prunes the numbered checkpoints to the newest ``keep_last``, and writes ``last.pt`` last.

    Every file is written atomically, and ``last.pt`` (what ``resume`` starts from) only once the others are on
    disk: a run killed anywhere in between resumes from the previous epoch and writes the same files again.
    """
    from workbench.translation.checkpoint import save_checkpoint, step_checkpoints
    from workbench.translation.run_folder import write_record

    if run.out is None or run.rank != 0:
        return
    kw = dict(tokenizer=run.tokenizer, optimizer=run.optimizer, scheduler=run.scheduler, step=run.step,
              epoch=epoch + 1, history=run.history.to_dict(), train_cfg=run.cfg, extra=run.meta)
    save_checkpoint(run.out / f"ckpt_step{run.step:07d}.pt", run.model, **kw)
    if improved:
        save_checkpoint(run.out / "best.pt", run.model, **kw)
    write_record(run.out / "history.json", run.history.to_dict())
    for old in step_checkpoints(run.out)[:-keep_last]:
        old.unlink(missing_ok=True)
    save_checkpoint(run.out / "last.pt", run.model, **kw)
