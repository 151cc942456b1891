"""The suites of ``workbench bench`` (:mod:`workbench.tools.bench.benchmark` describes each) and the race they share."""

from __future__ import annotations

import contextlib
import functools
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

import workbench as wb
from workbench.lessons.measure import call_seconds, matmul_peaks, peak_memory
from workbench.model.attention import MultiHeadAttention
from workbench.model.masks import to_nn_mask
from workbench.runtime import PrecisionLike, adam, autocast, choose_precision, cpu_bf16_units
from workbench.tools.bench.rivals import NNTransformer
from workbench.translation.decode import beam_search
from workbench.translation.flops import peak_flops, train_step_flops
from workbench.translation.kernels import attention_kernels, use_kernels
from workbench.translation.train import step_loss

log = logging.getLogger(__name__)

SUITES = ("attention", "train_step", "capture", "decoding", "e2e", "sdpa", "precision")
MIN_ROUNDS = 5  # no published median comes from fewer rounds


def bench_precisions(device: torch.device) -> tuple[str, ...]:
    """The number formats the training races run in on ``device``: bf16 on CUDA (as training runs there), fp32 and
    bf16 on a CPU with bf16 matrix units (:func:`workbench.runtime.cpu_bf16_units`), fp32 elsewhere."""
    if device.type == "cuda":
        return ("bf16",)
    return ("fp32", "bf16") if device.type == "cpu" and cpu_bf16_units() is not None else ("fp32",)


@functools.cache
def _peaks(device: str) -> dict[str, float | None]:
    dev = torch.device(device)
    bf16 = "bf16" in bench_precisions(dev)
    peaks = matmul_peaks(dev, (torch.float32, torch.bfloat16) if bf16 else (torch.float32,))
    return {"fp32": peaks[torch.float32], "bf16": peaks.get(torch.bfloat16)}


def measured_peaks(device: torch.device) -> dict[str, float | None]:
    """The machine's fp32 and bf16 matrix-product peaks (FLOP/s; bf16 None where no race runs in it), measured once
    per process, the two formats alternating (:func:`workbench.lessons.measure.matmul_peaks`): ``workbench bench`` measures them at its start,
    and every suite's MFU is against the peak of the format it ran in."""
    return _peaks(str(device))


# -- measuring (the probes are workbench.lessons.measure's) -------------------------------------------------------------
def race(fns: dict[str, Callable[[], Any]], rounds: int, device: torch.device) -> dict[str, Any]:
    """Race the functions: one warm-up call each, then ``rounds`` rounds of one call each, the order alternating.

    Round 0 runs the functions in the given order, round 1 in reverse, and so on, so that each runs first in half
    of the rounds. Returns ``{"median_s": {name: s}, "rounds": [{"order": [...], "s": {name: s}}, ...]}``.
    """
    if rounds < MIN_ROUNDS:
        raise ValueError(f"rounds={rounds}: race at least {MIN_ROUNDS} rounds, so that a median means something")
    for fn in fns.values():
        fn()
    names = list(fns)
    log_rounds = []
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        log_rounds.append({"order": order, "s": {k: call_seconds(fns[k], 1, device)[0] for k in order}})
    median = {k: statistics.median(rd["s"][k] for rd in log_rounds) for k in names}
    return {"median_s": median, "rounds": log_rounds}


# -- suites --------------------------------------------------------------------------------------------------------
def suite_attention(device: torch.device, quick: bool) -> dict[str, Any]:
    """Self-attention forward+backward (a key-padding mask on a quarter of the rows), ours vs nn.MultiheadAttention."""
    d_model, n_heads, batch = 256, 8, 8
    lengths = (32, 64) if quick else (32, 64, 128, 256, 512, 1024)
    rounds = MIN_ROUNDS if quick else 7
    ours = MultiHeadAttention(d_model, n_heads).to(device)
    ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True).to(device)
    rows = []
    for n in lengths:
        x = torch.randn(batch, n, d_model, device=device, requires_grad=True)
        keep = torch.ones(batch, n, dtype=torch.bool, device=device)
        keep[: batch // 4, n - n // 4 :] = False  # padded keys
        mask = keep[:, None, None, :]  # (B, 1, 1, Tk)
        nn_pad = to_nn_mask(keep)

        def fused(x: torch.Tensor = x, mask: torch.Tensor = mask) -> None:  # bind this length's tensors
            out, _ = ours(x, mask=mask)
            out.sum().backward()

        def explicit(x: torch.Tensor = x, mask: torch.Tensor = mask) -> None:
            out, _ = ours(x, mask=mask, need_weights=True)
            out.sum().backward()

        def reference(x: torch.Tensor = x, nn_pad: torch.Tensor = nn_pad) -> None:
            out, _ = ref(x, x, x, key_padding_mask=nn_pad, need_weights=False)
            out.sum().backward()

        fns = {"ours_fused": fused, "ours_explicit": explicit, "nn.MultiheadAttention": reference}
        raced = race(fns, rounds, device)
        med = raced["median_s"]
        mem = {k: peak_memory(fn, device) for k, fn in fns.items()}
        rows.append({
            "n": n,
            "rounds": raced["rounds"],
            "ms": {k: 1e3 * v for k, v in med.items()},
            "peak_mib": {k: (None if v is None else v / 2**20) for k, v in mem.items()},
            "fused_over_nn": med["ours_fused"] / med["nn.MultiheadAttention"],
            "explicit_over_nn": med["ours_explicit"] / med["nn.MultiheadAttention"],
        })
    return {"d_model": d_model, "n_heads": n_heads, "batch": batch, "rows": rows}


def _step_fn(model: nn.Module, loss_fn: Callable[[], torch.Tensor], device: torch.device,
             precision: PrecisionLike = "auto") -> Callable[[], None]:
    """One optimizer step: ``loss_fn()`` under the autocast of ``precision`` (``"auto"``: bf16 on CUDA only),
    backward, Adam (the paper's betas and epsilon; fused where torch has the kernel, the same optimizer for
    both rivals)."""
    opt = adam(list(model.parameters()), device, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)  # fused where it exists

    def step() -> None:
        with autocast(device, precision):
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def random_batch(vocab: int, B: int, S: int, T: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random source (B, S) and target (B, T) ids; a quarter of the rows end in 5 padding tokens on both sides
    (about 6 %: less than the 13 % of target padding in real Multi30k token-budget batches that the ``e2e`` suite
    reports, so what ours saves by skipping padding rows is understated here, not overstated)."""
    src = torch.randint(4, vocab, (B, S), device=device)
    src[: B // 4, S - 5 :] = 0
    tgt = torch.randint(4, vocab, (B, T), device=device)
    tgt[B - B // 4 :, T - 5 :] = 0
    return src, tgt


MODEL_ONLY = "ours, model only"  # the train_step rival that differs from the reference by the model code alone
# a user's own loop: wb.use_kernels on wb.build_model's model (the documented call) and the reference's stock loss
USER_LOOP = "ours, user loop"


def train_step_pair(cfg: wb.ModelConfig, vocab: int, src: torch.Tensor, tgt: torch.Tensor,
                    device: torch.device, compiled: bool = False, precision: PrecisionLike = "auto",
                    ) -> tuple[nn.Module, nn.Module, dict[str, Callable[[], None]]]:
    """Our model and the reference of the same sizes, and one training step of each on the batch ``(src, tgt)``.

    ``compiled``: also ``"ours compiled"`` and ``"nn.Transformer compiled"``, the same models through
    ``torch.compile`` (default inductor backend) with an optimizer of their own. ``precision``: the autocast both
    sides run under (``"fp32"``, ``"bf16"``; ``"auto"``: bf16 on CUDA only).
    """
    from workbench.translation.batching import Batch

    ours = use_kernels(wb.build_model(cfg, vocab, vocab)).to(device).train()  # as fit() trains it
    ref = NNTransformer(cfg, vocab).to(device).train()
    batch = Batch(src, tgt[:, :-1], tgt[:, 1:], pad_id=0)

    def stock_loss(net: nn.Module) -> torch.Tensor:
        logits = net(batch.src, batch.tgt_in)  # (B, T, V): every position projected
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                           batch.tgt_out.reshape(-1), ignore_index=0, label_smoothing=0.1)

    def losses(ours_net: nn.Module, ref_net: nn.Module) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
        def ours_loss() -> torch.Tensor:
            return step_loss(ours_net, ours, batch, pad_id=0, eps=0.1)[0] / max(batch.n_tgt_tokens, 1)

        return ours_loss, lambda: stock_loss(ref_net)

    ours_loss, ref_loss = losses(ours, ref)
    # model only: our model with torch's own dropout (nn.Dropout, as the reference) and the reference's stock loss,
    # so the two sides differ by the model code alone (same sizes, same loss, same dropout kernel)
    plain = wb.build_model(cfg, vocab, vocab).to(device).train()
    # a user's loop: the fast kernels turned on with the one documented call, the loss the user would write
    user = use_kernels(wb.build_model(cfg, vocab, vocab)).to(device).train()
    fns = {"ours": _step_fn(ours, ours_loss, device, precision), "nn.Transformer": _step_fn(ref, ref_loss, device, precision),
           MODEL_ONLY: _step_fn(plain, lambda: stock_loss(plain), device, precision),
           USER_LOOP: _step_fn(user, lambda: stock_loss(user), device, precision)}
    if compiled:
        ours_c, ref_c = losses(torch.compile(ours), torch.compile(ref))
        fns["ours compiled"] = _step_fn(ours, ours_c, device, precision)
        fns["nn.Transformer compiled"] = _step_fn(ref, ref_c, device, precision)
    return ours, ref, fns


def suite_train_step(device: torch.device, quick: bool, presets: list[str] | None = None) -> dict[str, Any]:
    """Training step of each preset vs nn.Transformer of the same sizes (same batch, same optimizer).

    Each side runs with its best setting on the device: eager and ``torch.compile``d variants of both are raced
    (not in ``quick``, where compiling would dominate), and the ratio divides our fastest median by the reference's.
    One row per preset and number format (:func:`bench_precisions`): the reference always runs in the same format
    as ours; compiled variants only in the first format. MFU is against the measured peak of that format.
    """
    vocab = 8000
    if device.type == "cuda":
        presets_default, (B, S, T) = ("small", "base", "big"), (128, 32, 33)
    else:
        presets_default, (B, S, T) = (("tiny",) if quick else ("tiny", "small", "base")), (64, 20, 21)
    presets = tuple(presets) if presets else presets_default
    rounds = MIN_ROUNDS if quick else 7
    precisions = bench_precisions(device)
    rows = []
    for name, precision in ((n, p) for n in presets for p in precisions):
        torch.manual_seed(0)
        cfg = wb.preset(name)
        src, tgt = random_batch(vocab, B, S, T, device)
        ours, ref, fns = train_step_pair(cfg, vocab, src, tgt, device, compiled=not quick and precision == precisions[0],
                                         precision=precision)
        peak = peak_flops(device) or measured_peaks(device)[precision]
        t0 = time.perf_counter()
        for key in fns:
            if key.endswith("compiled"):
                fns[key]()  # compile (and a second call, in case the first step recompiles) before the race
                fns[key]()
        compile_s = time.perf_counter() - t0
        # the base preset on a CPU takes seconds a step: the minimum number of rounds there
        raced = race(fns, rounds if name != "base" or device.type == "cuda" else MIN_ROUNDS, device)
        med = raced["median_s"]
        best_ours = min((k for k in med if k.startswith("ours") and k not in (MODEL_ONLY, USER_LOOP)),
                        key=med.__getitem__)
        best_ref = min((k for k in med if k.startswith("nn.Transformer")), key=med.__getitem__)
        mem = {k: peak_memory(fns[k], device) for k in ("ours", "nn.Transformer")}
        n_real = int((tgt[:, 1:] != 0).sum())
        flops = train_step_flops(cfg, B, S, T - 1, vocab, n_projected=n_real)
        rows.append({
            "preset": name,
            "precision": precision,
            "batch": [B, S, T - 1],
            "target_padding_fraction": 1 - n_real / (B * (T - 1)),
            "rounds": raced["rounds"],
            "step_s": med,
            "best": {"ours": best_ours, "nn.Transformer": best_ref},
            "compile_s": compile_s if any(k.endswith("compiled") for k in fns) else None,
            "ratio_ours_over_nn": med[best_ours] / med[best_ref],
            "ratio_eager": med["ours"] / med["nn.Transformer"],
            # model only: the same stock loss and nn.Dropout on both sides, eager, so only the model code differs
            "ratio_model_only": med[MODEL_ONLY] / med["nn.Transformer"],
            # a user's loop: wb.use_kernels(wb.build_model(...)) and the stock loss, eager
            "ratio_user_loop": med[USER_LOOP] / med["nn.Transformer"],
            "ours_tflops_per_s": flops / med[best_ours] / 1e12,
            "ours_mfu": None if peak is None else flops / med[best_ours] / peak,
            "peak_mib": {k: (None if v is None else v / 2**20) for k, v in mem.items()},
        })
        del ours, ref, fns
    return {"vocab": vocab, "precisions": list(precisions), "peak": "data sheet" if peak_flops(device) else "measured",
            "rows": rows}


@contextlib.contextmanager
def no_eos(model: nn.Module, eos_id: int) -> Iterator[None]:
    """Make ``eos_id`` unreachable (its logit -inf), so every decode runs to its length limit."""

    def hook(_module: nn.Module, _inputs: Any, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[..., eos_id] = float("-inf")
        return out

    handle = model.generator.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def suite_precision(device: torch.device, quick: bool) -> dict[str, Any]:
    """bf16 against fp32 on this machine: our training step per preset and beam-4 decoding, each pair raced in one
    run (alternating), with MFU against the measured peak of each format; and what ``--precision auto`` chooses
    for the ``small`` training step (the probe ``fit`` runs at start-up)."""
    precisions = bench_precisions(device)
    if "bf16" not in precisions:
        return {"skipped": "no bf16 matrix units on this CPU", "precisions": list(precisions)}
    if device.type == "cuda":
        return {"skipped": "CUDA trains in bf16 already (no fp32 race)", "precisions": list(precisions)}
    peaks = measured_peaks(device)
    vocab, (B, S, T) = 8000, (64, 20, 21)
    presets = ("tiny",) if quick else ("small", "base")
    rows = []
    for name in presets:
        torch.manual_seed(0)
        cfg = wb.preset(name)
        src, tgt = random_batch(vocab, B, S, T, device)
        fns = {p: train_step_pair(cfg, vocab, src, tgt, device, precision=p)[2]["ours"] for p in ("fp32", "bf16")}
        raced = race(fns, MIN_ROUNDS if quick or name == "base" else 7, device)
        med = raced["median_s"]
        n_real = int((tgt[:, 1:] != 0).sum())
        flops = train_step_flops(cfg, B, S, T - 1, vocab, n_projected=n_real)
        rows.append({"preset": name, "batch": [B, S, T - 1], "rounds": raced["rounds"], "step_s": med,
                     "bf16_speedup": med["fp32"] / med["bf16"],
                     "tflops_per_s": {p: flops / med[p] / 1e12 for p in med},
                     "mfu": {p: flops / med[p] / peaks[p] for p in med}})
        del fns
    torch.manual_seed(0)
    dec_name = "tiny" if quick else "small"
    model = wb.build_model(wb.preset(dec_name), vocab, vocab).to(device).eval()
    src, _ = random_batch(vocab, 16, 20, 21, device)
    steps, eos = 40, 3

    def beam4(p: str) -> Callable[[], None]:
        def run() -> None:
            with autocast(device, p):
                beam_search(model, src, beam=4, eos_id=eos, max_len=steps)

        return run

    with no_eos(model, eos), attention_kernels(model):  # the decoding kernels translate() chooses
        raced = race({p: beam4(p) for p in ("fp32", "bf16")}, MIN_ROUNDS, device)
    med = raced["median_s"]
    decoding = {"preset": dec_name, "sentences": src.shape[0], "output_tokens": steps, "rounds": raced["rounds"],
                "sent_per_s": {p: src.shape[0] / s for p, s in med.items()}, "bf16_speedup": med["fp32"] / med["bf16"]}
    # what `--precision auto` takes for the small training step: fit's probe on a batch of the same size
    torch.manual_seed(0)
    src, tgt = random_batch(vocab, B, S, T, device)
    shadow = use_kernels(wb.build_model(wb.preset(dec_name), vocab, vocab)).to(device).train()
    batch_ = _train_batch(src, tgt)

    def probe() -> None:
        loss, n = step_loss(shadow, shadow, batch_, pad_id=0, eps=0.1)
        (loss / max(n, 1)).backward()
        shadow.zero_grad(set_to_none=True)

    auto = choose_precision("auto", device, probe, what=f"a {dec_name} training step")
    return {"precisions": list(precisions), "bf16_units": cpu_bf16_units(),
            "peak_tflops": {p: None if v is None else v / 1e12 for p, v in peaks.items()},
            "train_step": rows, "beam4": decoding, "auto": auto.to_dict()}


def _train_batch(src: torch.Tensor, tgt: torch.Tensor) -> Any:
    from workbench.translation.batching import Batch

    return Batch(src, tgt[:, :-1], tgt[:, 1:], pad_id=0)
