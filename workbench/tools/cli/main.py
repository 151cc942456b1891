"""The ``workbench`` command: train, translate, evaluate, average, notebooks, book, bench, info.

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

from workbench.errors import CheckpointError, WorkbenchError
from workbench.runtime import keep_freed_memory
from workbench.tools.cli.course import add_course_commands
from workbench.tools.cli.run_options import (
    add_run_options,
    check_data_dir,
    given_options,
    run_config_from_args,
)
from workbench.translation.decode import DECODING

log = logging.getLogger("workbench")
# the commands whose work is decoding: they keep freed memory for reuse (runtime.keep_freed_memory; measured in
# bench/archive/results/decoding/); training and the benchmarks keep glibc's defaults
DECODING_COMMANDS = ("translate", "evaluate")


def _resolve_checkpoint(path: str) -> Path | str:
    """A shipped model name as is, else a checkpoint file (a run folder gives its best file)."""
    from workbench.translation.shipped import is_pretrained_name, resolve_checkpoint

    return path if is_pretrained_name(path) else resolve_checkpoint(path)


# -- commands ------------------------------------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    import torch

    from workbench.errors import ConfigError
    from workbench.model.config import preset
    from workbench.model.transformer import build_model
    from workbench.runtime import count_parameters, resolve_device
    from workbench.translation.tokenizer import MAX_VOCAB_SIZE

    if not 4 < args.vocab_size <= MAX_VOCAB_SIZE:
        raise ConfigError(f"--vocab-size {args.vocab_size} is out of range: use 5 to {MAX_VOCAB_SIZE:,}, such as 8000")
    cfg = preset(args.preset)
    model = build_model(cfg, args.vocab_size, args.vocab_size)
    device = resolve_device(args.device)
    print(f"Transformer preset {args.preset!r} (vocabulary {args.vocab_size} on each side)")
    for key, value in cfg.to_dict().items():
        print(f"  {key:16s} {value}")
    print(f"  {'d_head':16s} {cfg.head_dim}")
    print(f"  {'d_v':16s} {cfg.value_dim}")
    print(f"parameters: {count_parameters(model):,}")
    print(f"device 'auto' resolves to: {device}; torch {torch.__version__}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from workbench.translation.pipeline import train_translation
    from workbench.translation.run_folder import plan

    if not str(args.out).strip():
        raise WorkbenchError("--out is empty: name the run's folder, e.g. --out runs/small")
    run = run_config_from_args(args, resumed=args.resume)  # validated before any process group is joined
    check_data_dir(run.data_dir)
    plan(Path(args.out), resume=args.resume, overwrite=args.overwrite)  # refused here, before any rank starts
    from workbench.runtime import init_distributed

    distributed = init_distributed()
    summary = train_translation(run, out_dir=Path(args.out), resume=args.resume, overwrite=args.overwrite)
    if distributed:
        import torch.distributed as dist

        rank = dist.get_rank()
        dist.destroy_process_group()
        if rank != 0:
            return 0
    print(json.dumps(summary, indent=2))
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    from workbench.runtime import resolve_device
    from workbench.translation.decode import translate
    from workbench.translation.shipped import default_alpha, load_any

    sentences = _input_sentences(args.sentences, args.encoding)  # a bad input fails before the model loads
    device = resolve_device(args.device)
    model, tokenizer, info = load_any(_resolve_checkpoint(args.checkpoint), device=device)
    alpha = args.alpha if args.alpha is not None else default_alpha(info)
    for line in translate(model, tokenizer, sentences, beam=args.beam, alpha=alpha, device=device,
                          precision=args.precision):
        print(line)
    return 0


def _input_sentences(arguments: Sequence[str], encoding: str) -> list[str]:
    """The sentences to translate: the arguments, else stdin one a line, decoded with ``encoding``; a line that is
    not in that encoding is one :class:`InputTextError` naming it."""
    import codecs

    from workbench.errors import InputTextError

    try:
        codecs.lookup(encoding)
    except LookupError as exc:
        raise InputTextError(f"--encoding {encoding}: unknown encoding: use a Python codec name such as utf-8, "
                             "latin-1 or cp1252") from exc
    if arguments:
        for i, text in enumerate(arguments, 1):
            if any("\udc80" <= ch <= "\udcff" for ch in text):  # undecodable bytes (os.fsdecode's surrogateescape)
                raise InputTextError(f"sentence argument {i} is not valid UTF-8: pass the text on stdin with "
                                     "--encoding (e.g. --encoding latin-1), or convert it to UTF-8 with iconv")
        return list(arguments)
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream (tests, notebooks): already decoded
        return [line.rstrip("\n") for line in sys.stdin]
    data = stream.read()
    try:  # decoded whole, then split: a line break is a character (two bytes in UTF-16), not the byte 0x0a
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        before = data[:exc.start].decode(encoding, errors="replace")  # what decoded: it says where the line is
        line, column = before.count("\n") + 1, len(before) - before.rfind("\n")
        raise InputTextError(
            f"line {line} of the input is not valid {encoding} (byte 0x{data[exc.start]:02x} at column {column}): "
            "pass --encoding with the text's encoding (e.g. --encoding latin-1), or convert it to UTF-8 with iconv"
        ) from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def cmd_export(args: argparse.Namespace) -> int:
    from workbench.translation.run_folder import check_writable_folder
    from workbench.translation.shipped import load_any

    out = check_writable_folder(args.out_dir, "OUT_DIR")
    model, tokenizer, info = load_any(_resolve_checkpoint(args.model), device="cpu")
    if out.exists() and any(out.iterdir()) and not args.force:
        from workbench.errors import BridgeError

        raise BridgeError(f"{out} is not empty: choose a new folder or pass --force to overwrite it")
    if args.to == "huggingface":
        from workbench.bridges.huggingface import to_huggingface

        if args.quantization is not None:
            from workbench.errors import BridgeError

            raise BridgeError(f"--quantization {args.quantization}: a transformers folder is written in float32; "
                              "quantize with --to ctranslate2 or --to onnx")

        to_huggingface(model, tokenizer, out)
        print(f"wrote a transformers Marian folder to {out}: MarianMTModel.from_pretrained('{out}'), "
              f"AutoTokenizer.from_pretrained('{out}')")
    elif args.to == "onnx":
        from workbench.bridges.onnx import to_onnx

        weights = {None: "int8", "int8": "int8", "float32": "fp32", "fp32": "fp32"}.get(args.quantization)
        if weights is None:
            from workbench.errors import BridgeError

            raise BridgeError(f"--quantization {args.quantization} is not an ONNX weight format: use int8 or float32")
        to_onnx(model, tokenizer, out, weights=weights, card=info.get("card"))
        print(f"wrote ONNX graphs ({weights} weights) to {out}: workbench.bridges.onnx.OnnxTranslator('{out}')")
    else:
        from workbench.bridges.ctranslate2 import to_ctranslate2

        to_ctranslate2(model, tokenizer, out, quantization=args.quantization, force=True)
        print(f"wrote a CTranslate2 model to {out}: workbench.bridges.ct2_translator('{out}')")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from workbench.translation.pipeline import evaluate_checkpoint

    check_data_dir(args.data_dir)
    result = evaluate_checkpoint(
        _resolve_checkpoint(args.checkpoint),
        split=args.split,
        data_dir=args.data_dir,
        beam=args.beam,
        alpha=args.alpha,
        limit=args.limit,
        device=args.device,
        precision=args.precision,
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['split']}: sacreBLEU {result['bleu']:.2f} on {result['n_sentences']} sentences")
        print(f"  signature: {result['signature']}")
        print(f"  tokenized lower-cased BLEU {result['tok_bleu']:.2f} (a different, higher number), chrF {result['chrf']:.2f}")
        print(f"  decoded in {result['precision']} ({result['precision_reason']}) in {result['decode_seconds']} s")
        if result.get("hypotheses"):
            print(f"  hypotheses written to {result['hypotheses']}")
        elif result.get("hypotheses_error"):
            print(f"  {result['hypotheses_error']}")
    return 0


def cmd_pretrained(args: argparse.Namespace) -> int:
    from workbench.tools import release
    from workbench.translation import shipped

    if args.action == "list":
        for name in shipped.list_pretrained():
            card = shipped.read_card(name)
            b = card["bleu"]["test_2016_flickr"]
            print(f"{name:14s} {card['parameters']:>11,} parameters  test_2016_flickr sacreBLEU {b['beam4']:.2f} "
                  f"(beam 4), {b['greedy']:.2f} (greedy)  {card['title']}")
        return 0
    if args.action == "verify":
        for name in args.names or shipped.list_pretrained():
            shipped.verify_pretrained(name)
            print(f"{name}: every file matches its SHA-256")
        return 0
    if args.action == "rescore":
        card = release.rescore_with_length_penalty(args.name, data_dir=args.data_dir)
        print(json.dumps({"decoding": card["decoding"], "bleu": card["bleu"]}, indent=2))
        return 0
    if args.action == "build":
        out = Path(args.out)
        if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not args.force)):
            raise WorkbenchError(f"--out {out} is a file or a folder that is not empty: choose a new folder, or pass "
                                 "--force to rebuild a model folder in place (its files are replaced one by one, so "
                                 "an interrupted rebuild leaves a mixed folder: check it with sha256sum -c SHA256SUMS in it)")
        card = release.build_shipped(args.run_dir, args.name, args.out, train_command=args.train_command,
                                     title=args.title, summary=args.summary, commit=args.commit, budget=args.budget,
                                     threads=args.threads, data_dir=args.data_dir, average=tuple(args.average),
                                     recipe=args.recipe)
        print(json.dumps(card["bleu"], indent=2))
        return 0
    if args.action == "reproduce":
        import shlex

        from workbench.translation.run_folder import RunFolderError, check_writable_folder, holds_run
        card = shipped.read_card(args.name)
        out = check_writable_folder(args.out)  # refused here, in this command's words, not by the train it runs
        resume = getattr(args, "resume", False)  # a caller's own Namespace may predate the option
        if holds_run(out / "run") and not resume:
            raise RunFolderError(f"--out {out} already holds a reproduction's run ({out / 'run'}): pass --resume to "
                                 "continue it, or choose another --out")
        threads = card["training"].get("threads")
        argv = shlex.split(card["reproduce"]["train"])
        argv = argv[argv.index("train"):]  # drop the program name and environment prefixes
        if "--out" in argv:
            argv[argv.index("--out") + 1] = str(out / "run")
        if args.data_dir:  # the run trains on the data it is scored on
            argv += ["--data-dir", str(args.data_dir)]
        if resume and holds_run(out / "run"):
            argv += ["--resume"]
        if "--precision" not in argv:  # a card without the setting was trained in fp32 (before --precision existed)
            argv += ["--precision", (card.get("train_config") or {}).get("precision", "fp32")]
        from workbench.runtime import cpu_threads

        # the card's run used this many CPU threads, so the same recipe does; a caller from Python (a notebook, a
        # test) gets its own thread count back afterwards
        with cpu_threads(threads):
            rc = main(argv)
        if rc:
            return rc
        built = release.build_shipped(out / "run", args.name, out / args.name, train_command=card["reproduce"]["train"],
                                      title=card["title"], summary=card["summary"],
                                      budget=card["training"].get("budget", ""), data_dir=args.data_dir,
                                      average=tuple(card.get("average_windows", [5])), recipe=card.get("recipe"))
        print(json.dumps({"yours": built["bleu"], "shipped": card["bleu"]}, indent=2))
        return 0
    return 2


def cmd_average(args: argparse.Namespace) -> int:
    from workbench.translation.checkpoint import average_last
    from workbench.translation.run_folder import check_writable_folder

    if args.out:  # the folder the averaged file goes into must be a folder one can write
        target = Path(args.out)
        if target.is_dir():
            raise CheckpointError(f"--out {target} is a folder: give the averaged checkpoint a file name, e.g. "
                                  f"--out {target / 'averaged.pt'}")
        if target.exists() and not args.force:  # a file of the user's: never replaced unless asked
            raise CheckpointError(f"--out {target} already exists: choose a new file name, or pass --force to replace "
                                  "it")
        check_writable_folder(target.parent, "--out: the folder")
    out = average_last(Path(args.run_dir), last=args.last, out=Path(args.out) if args.out else None, overwrite=args.force)
    print(out)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from workbench.tools.bench.benchmark import main as bench_main

    return bench_main(args.suite, quick=args.quick, out_json=args.json or None, device=args.device,
                      as_json=args.print_json, presets=args.presets)


# -- parser --------------------------------------------------------------------------------------------------------
PRECISION_HELP = ("number format of decoding: fp32 (the default: the cards' scores, the same on every machine), bf16 "
                  "(an error on a CPU without bf16 support), or auto (bf16 on CUDA, and on a CPU with bf16 matrix "
                  "units where a short probe measures it faster, so the result can depend on the machine's load; "
                  "fp32 otherwise); the output says which ran (default: fp32)")
ALPHA_HELP = (f"beam search length penalty (default: the one a shipped model's card chose on val, else "
              f"{DECODING.alpha})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show full tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from workbench.model.config import PRESETS
    from workbench.runtime import PRECISIONS
    from workbench.translation.run import RECIPES, RunConfig

    p = sub.add_parser("info", help="build a model from a preset and print its summary")
    p.add_argument("--preset", default=RunConfig.preset, choices=list(PRESETS))
    p.add_argument("--vocab-size", type=int, default=RunConfig.vocab_size)
    p.add_argument("--device", default="auto")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("train", help="train a translator on Multi30k (or your own parallel text)",
                       description="Train a translator. The options are the fields of workbench.translation.run.RunConfig "
                                   "and TrainConfig. Give a budget: --epochs, --max-steps or --max-minutes (the "
                                   "first one reached stops the run; there is no epoch limit unless --epochs is given).")
    p.add_argument("--out", required=True, help="run folder for checkpoints, tokenizer and history")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--overwrite", action="store_true",
                   help="--out holds a run: move it aside (to OUT.replaced-YYYYmmdd-HHMMSS, nothing is deleted) and "
                        "start a new one there")
    p.add_argument("--recipe", choices=list(RECIPES), default=None,
                   help="start from this named run of workbench.translation.run.RECIPES (cpu-small: the shipped "
                        "small-de-en's); the options given beside it change only the fields they name")
    add_run_options(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("translate", help="translate sentences given as arguments, or one a line on stdin")
    p.add_argument("--checkpoint", required=True, help="checkpoint file, run folder, or shipped model name (small-de-en)")
    p.add_argument("--beam", type=int, default=DECODING.beam, help="beam size (1 = greedy)")
    p.add_argument("--alpha", type=float, default=None, help=ALPHA_HELP)
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="fp32", choices=list(PRECISIONS), help=PRECISION_HELP)
    p.add_argument("--encoding", default="utf-8", help="the encoding of the text on stdin (default: utf-8)")
    p.add_argument("sentences", nargs="*")
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", help="sacreBLEU of a checkpoint on a Multi30k split")
    p.add_argument("--checkpoint", required=True, help="checkpoint file, run folder, or shipped model name (small-de-en)")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--beam", type=int, default=DECODING.beam, help="beam size (1 = greedy)")
    p.add_argument("--alpha", type=float, default=None, help=ALPHA_HELP)
    p.add_argument("--limit", type=int, default=None, help="evaluate on the first N sentences only")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="fp32", choices=list(PRECISIONS), help=PRECISION_HELP)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("average", help="average the last k epoch checkpoints of a run (the paper uses 5)")
    p.add_argument("run_dir")
    p.add_argument("--last", type=int, default=5)
    p.add_argument("--out", default=None, help="output file (default RUN_DIR/averaged.pt, replaced by each average); "
                   "an existing file is refused unless --force")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(func=cmd_average)

    add_course_commands(sub)

    p = sub.add_parser("pretrained", help="the trained translators that ship with the workbench")
    psub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = psub.add_parser("list", help="the shipped models and their test scores")
    q.set_defaults(func=cmd_pretrained)
    q = psub.add_parser("verify", help="check the SHA-256 of every shipped file")
    q.add_argument("names", nargs="*")
    q.set_defaults(func=cmd_pretrained)
    q = psub.add_parser("reproduce", help="train and build a shipped model again from its card's recipe")
    q.add_argument("name")
    q.add_argument("--out", required=True, help="folder for the run and the rebuilt model")
    q.add_argument("--data-dir", default=None, help="Multi30k folder to train and score on (default: as `train`)")
    q.add_argument("--resume", action="store_true", help="continue an interrupted reproduction in --out")
    q.set_defaults(func=cmd_pretrained)
    q = psub.add_parser("rescore", help="choose a shipped model's beam-4 length penalty on val, re-score its card")
    q.add_argument("name")
    q.add_argument("--data-dir", default=None)
    q.set_defaults(func=cmd_pretrained)
    q = psub.add_parser("build", help="turn a training run into a shipped model folder with its card")
    q.add_argument("run_dir")
    q.add_argument("--name", required=True)
    q.add_argument("--out", required=True, help="model folder to write (e.g. workbench/pretrained/NAME); a folder "
                   "that is not empty is refused unless --force")
    q.add_argument("--force", action="store_true", help="rebuild into a folder that is not empty")
    q.add_argument("--train-command", required=True, help="the exact command that trained the run (for the card)")
    q.add_argument("--title", required=True)
    q.add_argument("--summary", default="")
    q.add_argument("--commit", default="", help="commit of the code that trained the run")
    q.add_argument("--budget", default="", help="the training budget, in words, for the card")
    q.add_argument("--threads", type=int, default=None, help="CPU threads the run used")
    q.add_argument("--recipe", default=None, choices=list(RECIPES), help="the named recipe the run trained (for the card)")
    q.add_argument("--average", type=int, nargs="+", default=[5], metavar="K",
                   help="candidate averages of the last K step snapshots, chosen on val with the last checkpoint "
                        "(train with --keep-checkpoints at least the largest K)")
    q.add_argument("--data-dir", default=None)
    q.set_defaults(func=cmd_pretrained)

    p = sub.add_parser("export", help="write a model for other tools: transformers (Marian) or CTranslate2",
                       description="Export a shipped model or a checkpoint: --to huggingface writes a folder that "
                                   "transformers loads as MarianMTModel (with its tokenizer); --to ctranslate2 converts "
                                   "that folder with CTranslate2's converter. Needs the [hf] extra.")
    p.add_argument("model", help="a shipped model name (small-de-en) or a checkpoint file / run folder")
    p.add_argument("out_dir", help="the folder to write")
    p.add_argument("--to", required=True, choices=["huggingface", "ctranslate2", "onnx"],
                   help="the target format (onnx: the encoder and a decoder step for ONNX Runtime, the [onnx] extra)")
    p.add_argument("--quantization", default=None, help="CTranslate2: int8, float16... (default: float32); "
                                                          "ONNX: int8 (the default) or float32")
    p.add_argument("--force", action="store_true", help="write into a folder that is not empty")
    p.set_defaults(func=cmd_export)

    from workbench.tools.bench.benchmark import add_arguments as add_bench_arguments

    p = sub.add_parser("bench", help="benchmarks: print a table and write JSON",
                       description="Speed and memory benchmarks (attention, train step vs nn.Transformer, capture "
                                   "overhead, cached decoding, end-to-end tokens/s, SDPA kernels).")
    add_bench_arguments(p)
    p.set_defaults(func=cmd_bench)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the parsed command line. With ``train --recipe NAME`` the recipe's fields are the defaults
    of the run options, so the options given beside it override only the fields they name."""
    from workbench.translation.run import RECIPES

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--recipe", default=None)
    name = pre.parse_known_args(argv)[0].recipe
    if name in RECIPES:  # an unknown name is refused by the train parser's choices
        _subparser(parser, "train").set_defaults(**RECIPES[name].to_flat())
    args = parser.parse_args(argv)
    if args.command == "train":  # what the command line said, as opposed to defaults (a resume keeps the run's)
        args.given = given_options(_subparser(parser, "train"), argv[argv.index("train") + 1:], RECIPES.get(name))
    return parser, args


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return next(a for a in parser._actions if a.dest == "command").choices[name]


def main(argv: Sequence[str] | None = None) -> int:
    parser, args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    if args.command in DECODING_COMMANDS and keep_freed_memory():  # this process is the command's own
        log.debug("malloc keeps freed memory for reuse (WORKBENCH_MALLOC=system leaves glibc's defaults)")
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
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as the standard tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes stdout
        return 1
    except Exception as exc:  # anything else (a file system refusal, a library's own error) in one line
        if args.debug or os.environ.get("WORKBENCH_DEBUG"):
            raise
        print(f"workbench {args.command}: error: {_one_line(exc)} (run again with --debug for the traceback)",
              file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    """An exception the command did not foresee, said in one line: an OSError as what failed on which path."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename is not None else ""
        return f"{exc.strerror.lower()}{where}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
