"""Benchmark parts of the one GPU check (``bench/gpu_check.sh`` runs them, each under its own time limit).

    python bench/gpu_check.py decode --out DIR          # decoding speed on CUDA against one CPU thread and generate
    python bench/gpu_check.py time-to-bleu RUN START --out DIR   # test BLEU of a run's snapshots against time

``decode``: the shipped small-de-en on test_2016_flickr (1000 sentences), text in and text out
(:func:`workbench.translation.pipeline.score`, as ``workbench evaluate`` decodes), greedy and beam 4 at the card's
alpha, in fp32 and bf16 on CUDA (token-budget batches, :func:`~workbench.translation.decode.decode_token_budget`),
each after an untimed warm-up; the same in fp32 on one CPU thread; transformers' ``generate`` on the same weights
exported to Hugging Face, on the same GPU, beam 4, batches of 64 (bench/decoding_engines.py's rival); greedy and
beam 4 with the steps replayed as captured CUDA graphs (``translate(..., graphs=True)``), with how many translations
equal the eager CUDA ones. Also the whole
``workbench evaluate`` call on CUDA (loading and scoring included) beside its decoding time, which says how much
``evaluate`` spends outside the search. Writes ``decode.json``.

``time-to-bleu``: every numbered snapshot of a training run folder, decoded on test_2016_flickr with beam 4 (fp32),
against the minutes from ``START`` (the epoch second the training command started) to the snapshot's file time; the
minutes at which 35, 38 and 40 were first reached. Writes ``time_to_bleu.json``.

Each report starts with the provenance record (:func:`workbench.tools.provenance.provenance`) plus the GPU's name,
driver and the torch and CUDA versions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SPLIT = "test_2016_flickr"


def gpu_record() -> dict[str, Any]:
    """The GPU, its driver, torch's and CUDA's versions."""
    import torch

    record: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                              "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        record.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
        try:
            record["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                              capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            record["driver"] = f"unknown ({exc})"
    return record


def _report(kind: str, argv: list[str]) -> dict[str, Any]:
    import torch

    from workbench.tools.provenance import provenance

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {**provenance(["bench/gpu_check.py", *argv], device=device), "part": kind, **gpu_record()}


def _write(report: dict[str, Any], out: Path, name: str) -> None:
    from workbench.tools.provenance import write_report

    print(write_report(report, out / name), end="")


def decode_part(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    import torch

    from workbench.translation.data import load_multi30k
    from workbench.translation.decode import decode_token_budget
    from workbench.translation.pipeline import evaluate_checkpoint, score
    from workbench.translation.shipped import default_alpha, load_any

    report = _report("decode", argv)
    cuda = torch.device("cuda")
    pairs = load_multi30k(SPLIT, "de", "en", data_dir=args.data_dir)
    cpu_model, tok, ckpt = load_any("small-de-en", device=torch.device("cpu"))
    alpha = default_alpha(ckpt)
    gpu_model, _, _ = load_any("small-de-en", device=cuda)
    report["token_budget"] = {f"beam{b}": decode_token_budget(cuda, gpu_model, b) for b in (1, 4)}
    runs: dict[str, Any] = {}
    for beam in (1, 4):
        for precision in ("fp32", "bf16"):
            score(gpu_model, tok, pairs[:64], beam=beam, alpha=alpha, device=cuda, precision=precision)  # warm-up
            torch.cuda.synchronize()
            r = score(gpu_model, tok, pairs, beam=beam, alpha=alpha, device=cuda, precision=precision)
            runs[f"cuda-{precision}-beam{beam}"] = {**r, "sentences_per_s": round(len(pairs) / r["decode_seconds"], 1)}
    from workbench.translation.decode import translate
    from workbench.translation.metrics import corpus_bleu

    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    for beam in (1, 4):  # steps replayed as captured CUDA graphs (decode_graph.FixedStep), fp32
        eager = translate(gpu_model, tok, sources, beam=beam, alpha=alpha)
        translate(gpu_model, tok, sources[:64], beam=beam, alpha=alpha, graphs=True)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        hyps = translate(gpu_model, tok, sources, beam=beam, alpha=alpha, graphs=True)
        seconds = time.perf_counter() - start
        runs[f"cuda-fp32-beam{beam}-graphs"] = {
            "decode_seconds": round(seconds, 2), "sentences_per_s": round(len(sources) / seconds, 1),
            "bleu": round(corpus_bleu(hyps, refs).score, 2),
            "same_as_eager": sum(a == b for a, b in zip(hyps, eager, strict=True))}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for beam in (1, 4):
            r = score(cpu_model, tok, pairs, beam=beam, alpha=alpha, device="cpu", precision="fp32")
            runs[f"cpu1-fp32-beam{beam}"] = {**r, "sentences_per_s": round(len(pairs) / r["decode_seconds"], 1)}
    finally:
        torch.set_num_threads(threads)
    report["runs"] = runs
    start = time.perf_counter()
    whole = evaluate_checkpoint("small-de-en", split=SPLIT, data_dir=args.data_dir, beam=4, device="cuda")
    report["evaluate_cuda_beam4"] = {"wall_seconds": round(time.perf_counter() - start, 2),
                                     "decode_seconds": whole["decode_seconds"], "bleu": whole["bleu"]}
    report["generate"] = _generate(gpu_model, tok, [s for s, _ in pairs], [t for _, t in pairs])
    ours = runs["cuda-fp32-beam4"]
    report["sentences_per_s"] = ours["sentences_per_s"]  # headline: evaluate's decoding, beam 4, fp32, CUDA
    report["speedup_vs_generate"] = (round(report["generate"]["seconds"] / ours["decode_seconds"], 2)
                                     if report["generate"].get("seconds") else None)
    report["test_bleu_small_de_en"] = ours["bleu"]
    return report


def _generate(model: Any, tok: Any, sources: list[str], refs: list[str]) -> dict[str, Any]:
    """transformers' generate, beam 4, on the exported weights, on the same GPU (bench/decoding_engines.py)."""
    import tempfile

    try:
        import torch
        import transformers

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from decoding_engines import hf_translate

        from workbench.bridges.huggingface import to_huggingface
        from workbench.translation.metrics import corpus_bleu
    except ImportError as exc:
        return {"error": f"transformers or the export bridge is missing: {exc}"}
    with tempfile.TemporaryDirectory(prefix="gpu-check-hf-") as tmp:
        hf_dir = to_huggingface(model.cpu(), tok, Path(tmp) / "hf")
        hf_model = transformers.MarianMTModel.from_pretrained(hf_dir).eval().to("cuda")
        hf_tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
        real_generate = hf_model.generate

        def generate_on_gpu(**enc: Any) -> Any:
            return real_generate(**{k: v.to("cuda") for k, v in enc.items() if hasattr(v, "to")},
                                 **{k: v for k, v in enc.items() if not hasattr(v, "to")})

        hf_model.generate = generate_on_gpu
        hf_translate(hf_model, hf_tok, tok, sources[:64], 4)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        hyps = hf_translate(hf_model, hf_tok, tok, sources, 4)
        seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 2), "sentences_per_s": round(len(sources) / seconds, 1),
            "bleu": round(corpus_bleu(hyps, refs).score, 2), "batch": 64, "beam": 4}


def time_to_bleu_part(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    import torch

    from workbench.translation.checkpoint import load_model, step_checkpoints
    from workbench.translation.data import load_multi30k
    from workbench.translation.pipeline import score

    report = _report("time-to-bleu", argv)
    run = Path(args.run)
    pairs = load_multi30k(SPLIT, "de", "en", data_dir=args.data_dir)
    points = []
    for path in step_checkpoints(run):
        model, tok, _ = load_model(path, device=torch.device("cuda"))
        r = score(model, tok, pairs, beam=4, device="cuda", precision="fp32")
        points.append({"snapshot": path.name, "minutes": round((path.stat().st_mtime - args.start) / 60, 2),
                       "test_bleu": r["bleu"]})
    report["points"] = points
    report["minutes_to"] = {str(target): next((p["minutes"] for p in points if p["test_bleu"] >= target), None)
                            for target in (35, 38, 40)}
    report["test_bleu"] = max((p["test_bleu"] for p in points), default=None)
    history = run / "history.json"
    if history.exists():
        h = json.loads(history.read_text())
        report["mfu"] = h.get("mfu")
        report["tokens_per_s"] = h.get("tokens_per_s")
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="part", required=True)
    d = sub.add_parser("decode")
    t = sub.add_parser("time-to-bleu")
    t.add_argument("run", help="the training run folder (its ckpt_step*.pt snapshots)")
    t.add_argument("start", type=float, help="the epoch second the training command started")
    for p in (d, t):
        p.add_argument("--out", default=os.environ.get("OUT", "bench/results/gpu"))
        p.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    out = Path(args.out)
    if args.part == "decode":
        _write(decode_part(args, argv), out, "decode.json")
    else:
        _write(time_to_bleu_part(args, argv), out, "time_to_bleu.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
