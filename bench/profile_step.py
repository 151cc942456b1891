"""Where one training step's time goes: the torch profiler over the ``train_step`` suite's step, grouped by op.

    python bench/profile_step.py [--preset small] [--side ours|nn.Transformer] [--precision fp32|bf16] [--steps 5]
                                 [--rows 20] [--json FILE]

Builds the same batch (64 x 20/20 tokens, 8k vocabulary, a quarter of the rows padded) and the same step
(forward, label-smoothed loss, backward, Adam) as ``workbench bench --suite train_step``, warms it up for three
steps, profiles ``--steps`` more, and prints the ops with the most self CPU time (ms per step and share), plus
the grouping the issue asked about: matrix products, dropout's random draws, the vocabulary loss, the optimizer
and the rest. ``--precision bf16`` profiles the step under CPU bf16 autocast (a CPU with bf16 matrix units).
``--json`` also writes them with the provenance record.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import workbench as wb
from workbench.runtime import choose_precision
from workbench.tools.bench.suites import random_batch, train_step_pair
from workbench.tools.provenance import provenance, write_report

GROUPS = {  # op name prefix -> group
    "matrix products": ("aten::mm", "aten::addmm", "aten::bmm", "aten::addmm_"),
    "casts": ("aten::copy_", "aten::_to_copy"),
    "dropout draws": ("aten::bernoulli_", "aten::random_", "aten::bitwise_and", "aten::ge", "aten::native_dropout"),
    "vocabulary loss": ("aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss", "aten::exp_",
                        "aten::logsumexp", "aten::scatter_add_", "aten::nll_loss_backward"),
    "optimizer": ("aten::_fused_adam_", "aten::sqrt", "aten::addcdiv_", "aten::lerp_", "aten::addcmul_"),
    "attention kernel": ("aten::_scaled_dot_product_flash_attention_for_cpu",
                         "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--side", default="ours", choices=["ours", "nn.Transformer"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    record = provenance(["python", *sys.argv])  # the code that runs, read before the work
    torch.manual_seed(0)
    device = torch.device("cpu")
    src, tgt = random_batch(8000, 64, 20, 21, device)
    if args.precision == "bf16":
        choose_precision("bf16", device)  # refuses, in one line, on a CPU without bf16 support
    _, _, fns = train_step_pair(wb.preset(args.preset), 8000, src, tgt, device, precision=args.precision)
    step = fns[args.side]
    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total_ms = sum(e.self_cpu_time_total for e in events) / 1e3 / args.steps
    ops = sorted(({"op": e.key, "ms_per_step": e.self_cpu_time_total / 1e3 / args.steps, "calls_per_step":
                   e.count / args.steps} for e in events), key=lambda r: -r["ms_per_step"])
    groups = {g: 0.0 for g in GROUPS} | {"rest": 0.0}
    for r in ops:
        group = next((g for g, names in GROUPS.items() if r["op"] in names), "rest")
        groups[group] += r["ms_per_step"]
    print(f"{args.side}, preset {args.preset}, {args.precision}: {total_ms:.1f} ms of self CPU time per step "
          f"({torch.get_num_threads()} threads, torch {torch.__version__})")
    for r in ops[: args.rows]:
        print(f"  {r['op'][:60]:<60} {r['ms_per_step']:8.1f} ms {r['ms_per_step'] / total_ms:6.1%} "
              f"{r['calls_per_step']:6.0f} calls")
    print("grouped:")
    for g, ms in groups.items():
        print(f"  {g:<20} {ms:8.1f} ms {ms / total_ms:6.1%}")
    if args.json:
        report = {**record, "preset": args.preset, "side": args.side, "precision": args.precision, "steps": args.steps, "ms_per_step": total_ms,
                  "groups_ms_per_step": groups, "ops": ops}
        write_report(report, args.json)


if __name__ == "__main__":
    main()
