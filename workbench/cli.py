"""The ``workbench`` command: train, translate, evaluate, average, notebooks, bench, info.

Results go to stdout, progress and logs to stderr. Errors the user can fix print one line on stderr and exit
with status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import WorkbenchError

log = logging.getLogger("workbench")


def _resolve_checkpoint(path: str) -> Path:
    from .errors import CheckpointError

    p = Path(path)
    if p.is_dir():
        for name in ("averaged.pt", "best.pt", "last.pt"):
            if (p / name).exists():
                return p / name
        raise CheckpointError(f"no checkpoint in {p}: expected averaged.pt, best.pt or last.pt (train with --out {p})")
    if not p.exists():
        raise CheckpointError(f"checkpoint {p} does not exist: pass a file written by 'workbench train' or its run folder")
    return p


# -- commands ------------------------------------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    import torch

    from .config import preset
    from .model import build_model
    from .runtime import count_parameters, resolve_device

    cfg = preset(args.preset)
    model = build_model(cfg, args.vocab_size, args.vocab_size)
    device = resolve_device(args.device)
    print(f"Transformer preset {args.preset!r} (vocabulary {args.vocab_size} on each side)")
    for key, value in cfg.to_dict().items():
        print(f"  {key:16s} {value}")
    print(f"  {'d_head':16s} {cfg.head_dim}")
    print(f"parameters: {count_parameters(model):,}")
    print(f"device 'auto' resolves to: {device}; torch {torch.__version__}")
    return 0


def _init_distributed() -> bool:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1): NCCL on CUDA, else gloo."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    return True


def cmd_train(args: argparse.Namespace) -> int:
    from .pipeline import train_translation

    distributed = _init_distributed()

    summary = train_translation(
        preset_name=args.preset,
        src=args.src,
        tgt=args.tgt,
        out_dir=Path(args.out),
        arch=args.arch,
        epochs=args.epochs,
        max_minutes=args.max_minutes,
        max_steps=args.max_steps,
        data_dir=args.data_dir,
        vocab_size=args.vocab_size,
        max_tokens=args.max_tokens,
        limit=args.limit,
        seed=args.seed,
        device=args.device,
        resume=args.resume,
        lr_factor=args.lr_factor,
        warmup_steps=args.warmup,
        compile=args.compile,
        train_src=args.train_src,
        train_tgt=args.train_tgt,
        val_src=args.val_src,
        val_tgt=args.val_tgt,
        accum_steps=args.accum_steps,
        checkpoint_every=args.checkpoint_every,
    )
    if distributed:
        import torch.distributed as dist

        rank = dist.get_rank()
        dist.destroy_process_group()
        if rank != 0:
            return 0
    print(json.dumps(summary, indent=2))
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    from .checkpoint import load_model
    from .decode import translate
    from .runtime import resolve_device

    device = resolve_device(args.device)
    model, tokenizer, _ = load_model(_resolve_checkpoint(args.checkpoint), device=device)
    sentences = list(args.sentences) or [line.rstrip("\n") for line in sys.stdin]
    for line in translate(model, tokenizer, sentences, beam=args.beam, device=device):
        print(line)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .pipeline import evaluate_checkpoint

    result = evaluate_checkpoint(
        _resolve_checkpoint(args.checkpoint),
        split=args.split,
        data_dir=args.data_dir,
        beam=args.beam,
        limit=args.limit,
        device=args.device,
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['split']}: sacreBLEU {result['bleu']:.2f} on {result['n_sentences']} sentences")
        print(f"  signature: {result['signature']}")
        print(f"  tokenized lower-cased BLEU {result['tok_bleu']:.2f} (a different, higher number), chrF {result['chrf']:.2f}")
        print(f"  hypotheses written to {result['hypotheses']}")
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    from .checkpoint import average_last

    out = average_last(Path(args.run_dir), last=args.last, out=Path(args.out) if args.out else None)
    print(out)
    return 0


def cmd_notebooks(args: argparse.Namespace) -> int:
    """One progress bar, then one line per notebook (and its error); ``--verbose`` also shows papermill's records
    and the kernels' start-up warnings."""
    from .notebooks import parse_parameters, run_series

    quiet = not (args.verbose or args.debug)
    if quiet:
        logging.getLogger().setLevel(logging.WARNING)
        logging.getLogger("papermill").setLevel(logging.ERROR)  # its INFO records and parameter warnings
        logging.getLogger("workbench.notebooks").setLevel(logging.ERROR)  # failures are in the table below
    params = parse_parameters(args.param or [])
    only = args.only or None
    out = Path(args.out).expanduser().resolve()  # the kernels run elsewhere: resolve where the user stands
    data_dir = Path(args.data_dir).expanduser().resolve() if args.data_dir else None
    results = run_series(out_dir=out, smoke=args.smoke, only=only, parameters=params or None, data_dir=data_dir,
                         quiet=quiet)
    failed = [r for r in results if r.get("status") != "ok"]
    for r in results:
        print(f"{r['name']:40s} {r.get('status', '?'):6s} {r.get('seconds', 0):7.1f} s")
        if r.get("error"):
            print(f"    {r['error'].splitlines()[0][:300]}")
    print(f"report: {out / 'index.html'}")
    return 1 if failed else 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .benchmark import main as bench_main

    return bench_main(args.suite, quick=args.quick, out_json=args.json or None, device=args.device,
                      as_json=args.print_json)


# -- parser --------------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show full tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("info", help="build a model from a preset and print its summary")
    p.add_argument("--preset", default="small", choices=["tiny", "small", "base", "big"])
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--device", default="auto")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("train", help="train a translator on Multi30k (or your own parallel text)")
    p.add_argument("--preset", default="small", choices=["tiny", "small", "base", "big"])
    p.add_argument("--arch", default="transformer", choices=["transformer", "rnn"])
    p.add_argument("--src", default="de", help="source language (Multi30k: en de fr cs)")
    p.add_argument("--tgt", default="en", help="target language")
    p.add_argument("--out", required=True, help="run folder for checkpoints, tokenizer and history")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--max-steps", type=int, default=None,
                   help="optimizer-step budget (the same model on every machine; default: no limit)")
    p.add_argument("--max-minutes", type=float, default=None, help="wall-clock budget for training")
    p.add_argument("--data-dir", default=None, help="local Multi30k folder (else $WORKBENCH_MULTI30K or the cache)")
    p.add_argument("--vocab-size", type=int, default=8000, help="joint BPE vocabulary size")
    p.add_argument("--max-tokens", type=int, default=4096, help="token budget per batch")
    p.add_argument("--limit", type=int, default=None, help="use only the first N training pairs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--lr-factor", type=float, default=None, help="scale of the warm-up schedule")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--accum-steps", type=int, default=1, help="micro-batches accumulated per optimizer step")
    p.add_argument("--checkpoint-every", type=int, default=None,
                   help="also snapshot every N optimizer steps, for `workbench average` (default: at epoch ends only)")
    p.add_argument("--train-src", default=None, help="your own training source file (one sentence a line)")
    p.add_argument("--train-tgt", default=None, help="your own training target file, aligned with --train-src")
    p.add_argument("--val-src", default=None, help="your own validation source file")
    p.add_argument("--val-tgt", default=None, help="your own validation target file")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("translate", help="translate sentences given as arguments, or one a line on stdin")
    p.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    p.add_argument("--beam", type=int, default=4, help="beam size (1 = greedy)")
    p.add_argument("--device", default="auto")
    p.add_argument("sentences", nargs="*")
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", help="sacreBLEU of a checkpoint on a Multi30k split")
    p.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--limit", type=int, default=None, help="evaluate on the first N sentences only")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("average", help="average the last k epoch checkpoints of a run (the paper uses 5)")
    p.add_argument("run_dir")
    p.add_argument("--last", type=int, default=5)
    p.add_argument("--out", default=None, help="output file (default RUN_DIR/averaged.pt)")
    p.set_defaults(func=cmd_average)

    p = sub.add_parser("notebooks", help="run the notebook series headless")
    nsub = p.add_subparsers(dest="action", metavar="ACTION")
    r = nsub.add_parser("run", help="execute the notebooks with papermill and write HTML reports")
    r.add_argument("--smoke", action="store_true", help="tiny sizes (what CI runs)")
    r.add_argument("--only", action="append", help="run only notebooks whose number or name matches (repeatable)")
    r.add_argument("--out", default="reports", help="output folder (an index.html is written there)")
    r.add_argument("-p", "--param", action="append", help="NAME=VALUE parameter for every notebook (JSON values)")
    r.add_argument("--data-dir", default=None, help="local Multi30k folder (else $WORKBENCH_MULTI30K or the cache)")
    r.add_argument("--verbose", action="store_true", help="also show papermill's log and the kernels' warnings")
    r.set_defaults(func=cmd_notebooks)

    from .benchmark import add_arguments as add_bench_arguments

    p = sub.add_parser("bench", help="benchmarks: print a table and write JSON",
                       description="Speed and memory benchmarks (attention, train step vs nn.Transformer, capture "
                                   "overhead, cached decoding, end-to-end tokens/s, SDPA kernels).")
    add_bench_arguments(p)
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.func(args) or 0)
    except WorkbenchError as exc:
        if args.debug or os.environ.get("WORKBENCH_DEBUG"):
            raise
        print(f"workbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
