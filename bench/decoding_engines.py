"""Benchmark: one model, four decoding engines, beam 4 on test_2016_flickr (1000 sentences), same threads, one run.

    python bench/decoding_engines.py [--threads 1] [--limit N] [--json bench/results/decoding-engines-cpu-COMMIT.json]

The shipped small-de-en is decoded by

* the workbench (:func:`workbench.translation.decode.translate`, its default beam with GNMT's length penalty at the
  card's alpha, chosen on val),
* transformers' ``generate`` on the same weights exported with ``workbench export --to huggingface``
  (``num_beams=4``, its default ``length_penalty=1.0``: score / length),
* CTranslate2 on the same export converted by its own converter, in float32 and in int8
  (``beam_size=4``, its default ``length_penalty=1``),

each text in, text out (tokenization included), in batches of 64 length-sorted sentences, with an output budget of
source length + 50 tokens (transformers and CTranslate2 take one budget per batch: the batch's longest source + 50).
Every engine first decodes 16 sentences untimed (warm-up). Then the split is decoded once by every engine, batch by
batch, the engines interleaved and their order rotated from one batch to the next, so a busy spell of a shared
machine falls on all of them alike. Reported per engine: sentences/s (all sentences over the summed batch times),
seconds, sacreBLEU (with its signature), how many translations equal the workbench's, and the median over batches of
the workbench's time over each rival's.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SPLIT = "test_2016_flickr"
BEAM = 4
MAX_EXTRA = 50
BATCH = 64


def _batches(tokenizer: Any, sentences: list[str], batch_size: int) -> list[list[int]]:
    lengths = [len(ids) for ids in tokenizer.encode_src(sentences)]
    order = sorted(range(len(sentences)), key=lambda i: lengths[i])  # as translate() batches
    return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]


def hf_translate(hf_model: Any, hf_tok: Any, tokenizer: Any, sentences: list[str], beam: int) -> list[str]:
    import torch

    out = [""] * len(sentences)
    for chunk in _batches(tokenizer, sentences, BATCH):
        enc = hf_tok([sentences[i] for i in chunk], return_tensors="pt", padding=True)
        with torch.no_grad():
            # the decoder's length counts its start token: source length + 50 output tokens, eos included
            ids = hf_model.generate(**enc, num_beams=beam, do_sample=False,
                                    max_length=enc["input_ids"].shape[1] + MAX_EXTRA + 1)
        for i, text in zip(chunk, hf_tok.batch_decode(ids, skip_special_tokens=True), strict=True):
            out[i] = " ".join(text.split())
    return out


def ct2_translate_sorted(translator: Any, tokenizer: Any, sentences: list[str], beam: int) -> list[str]:
    from workbench.bridges.ctranslate2 import ct2_translate

    out = [""] * len(sentences)
    for chunk in _batches(tokenizer, sentences, BATCH):
        texts = ct2_translate(translator, tokenizer, [sentences[i] for i in chunk], beam=beam, max_extra=MAX_EXTRA,
                              batch_size=BATCH)
        for i, text in zip(chunk, texts, strict=True):
            out[i] = text
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads for every engine")
    ap.add_argument("--limit", type=int, default=None, help="only the first N test sentences (default: all 1000)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None, help="write the report here (e.g. bench/results/NAME.json)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    import ctranslate2
    import torch
    import transformers

    from workbench.bridges.ctranslate2 import convert_huggingface_folder, ct2_translator
    from workbench.bridges.huggingface import to_huggingface
    from workbench.tools.provenance import provenance, write_report
    from workbench.translation.data import load_multi30k
    from workbench.translation.decode import translate
    from workbench.translation.metrics import corpus_bleu
    from workbench.translation.shipped import default_alpha, pretrained

    torch.set_num_threads(args.threads)
    import os

    record = provenance()  # before the work
    load_before = os.getloadavg()[0]
    model, tokenizer, card = pretrained("small-de-en")
    alpha = default_alpha({"card": card})
    pairs = load_multi30k(SPLIT, "de", "en", data_dir=args.data_dir, limit=args.limit)
    sources, refs = [p[0] for p in pairs], [p[1] for p in pairs]
    warm = sources[:16]

    with tempfile.TemporaryDirectory(prefix="decoding-engines-") as tmp:
        hf_dir = to_huggingface(model, tokenizer, Path(tmp) / "hf")
        hf_model = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
        hf_tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
        ct2_dirs = {q: convert_huggingface_folder(hf_dir, Path(tmp) / f"ct2-{q or 'float32'}", quantization=q)
                    for q in (None, "int8")}
        translators = {q: ct2_translator(d, device="cpu", intra_threads=args.threads, inter_threads=1)
                       for q, d in ct2_dirs.items()}
        engines = {
            "workbench": lambda s: translate(model, tokenizer, s, beam=BEAM, alpha=alpha, batch_size=BATCH,
                                             max_extra=MAX_EXTRA),
            "transformers-generate": lambda s: hf_translate(hf_model, hf_tok, tokenizer, s, BEAM),
            "ctranslate2-float32": lambda s: ct2_translate_sorted(translators[None], tokenizer, s, BEAM),
            "ctranslate2-int8": lambda s: ct2_translate_sorted(translators["int8"], tokenizer, s, BEAM),
        }
        names = list(engines)
        for run in engines.values():
            run(warm)
        hyps: dict[str, list[str]] = {name: [""] * len(sources) for name in names}
        times: dict[str, list[float]] = {name: [] for name in names}
        for b, chunk in enumerate(_batches(tokenizer, sources, BATCH)):
            for name in names[b % len(names):] + names[: b % len(names)]:  # rotate who goes first
                start = time.perf_counter()
                texts = engines[name]([sources[i] for i in chunk])
                times[name].append(time.perf_counter() - start)
                for i, text in zip(chunk, texts, strict=True):
                    hyps[name][i] = text
            print(f"batch {b}: " + ", ".join(f"{n} {times[n][-1]:.1f} s" for n in names), file=sys.stderr)
        results: dict[str, Any] = {}
        for name in names:
            seconds = sum(times[name])
            bleu = corpus_bleu(hyps[name], refs)
            ratios = [w / t for w, t in zip(times["workbench"], times[name], strict=True)]
            results[name] = {
                "seconds": round(seconds, 2),
                "sentences_per_s": round(len(sources) / seconds, 2),
                "bleu": round(bleu.score, 2),
                "signature": bleu.signature,
                "same_as_workbench": sum(a == b for a, b in zip(hyps[name], hyps["workbench"], strict=True)),
                "median_batch_time_workbench_over_this": round(float(sorted(ratios)[len(ratios) // 2]), 3),
                "batch_seconds": [round(t, 3) for t in times[name]],
            }
            print(f"{name:24s} {results[name]['sentences_per_s']:8.2f} sent/s  {results[name]['seconds']:8.1f} s  "
                  f"BLEU {results[name]['bleu']:.2f}", file=sys.stderr)
    ours, theirs = results["workbench"]["seconds"], results["transformers-generate"]["seconds"]
    report = {
        "benchmark": "decoding-engines",
        "model": "small-de-en",
        "card_bleu_beam4": card["bleu"][SPLIT]["beam4"],
        "split": SPLIT,
        "n_sentences": len(sources),
        "beam": BEAM,
        "batch_size": BATCH,
        "max_extra": MAX_EXTRA,
        "threads": args.threads,
        "settings": {
            "workbench": f"translate(beam=4, alpha={alpha}) GNMT length penalty ((5+|Y|)/6)^alpha, finished "
                         "hypotheses keep their beam slot",
            "transformers-generate": "generate(num_beams=4, length_penalty=1.0, early_stopping=False, "
                                     "max_length=longest source in batch + 50 + 1 (the start token))",
            "ctranslate2": "translate_batch(beam_size=4, length_penalty=1, max_decoding_length=longest source in "
                           "batch + 50), intra_threads=threads, inter_threads=1",
        },
        "versions": {"transformers": transformers.__version__, "ctranslate2": ctranslate2.__version__},
        "results": results,
        "workbench_vs_generate_speed": round(theirs / ours, 3),  # > 1: the workbench is faster
        # the machine is shared: its 1-minute load average before and after the run
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        **record,  # the provenance record's keys (workbench.tools.provenance), at the top as in every bench report
    }
    print(write_report(report, args.json), end="")
    return report


if __name__ == "__main__":
    main()
