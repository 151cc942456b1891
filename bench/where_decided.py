"""Issue 50's measures: tuned-lens training time (<= 2 min on 2 cores), the sink audit of one model over test2016
(<= 60 s), DAS for one layer and rank (<= 3 min); beside them the figures the issue's closing note asks for.

    python bench/where_decided.py [--threads 2] [--parts lens sinks das] [--out bench/results/where-decided/...json]

* ``lens``: train the tuned lens of small-de-en on the states of ``--lens-train`` training sentences
  (least-squares start, ``--lens-steps`` KL steps; the timed figure), then per-layer KL to the final distribution
  (logit and tuned lens) on ``--heldout`` validation sentences, and the median decision layer (tuned lens) with a
  bootstrap interval over sentences;
* ``sinks``: :func:`workbench.inspect.sinks.sink_audit` of small-de-en over test2016 (the timed figure, alignment
  and the sink-head ablation included), then of gru-de-en, then of an imported Marian model: opus-mt-de-en when
  the Hugging Face cache holds it, else small-de-en exported to Marian's layout, loaded by transformers'
  ``MarianMTModel`` and converted back (a trained model through the import path; its table must equal
  small-de-en's); mean shares per attention kind;
* ``das``: pronoun minimal pairs from val and test, half to train, half held out; the time of one
  ``train_das`` (``--das-site``, ``--das-rank``), then the IIA table over ``--das-sites`` x ``--das-ranks`` against
  random rotations.

The report is rewritten after each part, with the load average before and after it: on a shared machine the
figures are labelled ``contended`` when the 1-minute load average exceeded the thread count.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import workbench as wb  # noqa: E402
from workbench.inspect.das import das_examples, das_sweep, train_das  # noqa: E402
from workbench.inspect.lens import (  # noqa: E402
    decision_layer,
    decoder_states,
    kl_by_layer,
    logit_lens,
    text_batches,
    train_tuned_lens,
)
from workbench.inspect.sinks import CATEGORIES, sink_audit  # noqa: E402
from workbench.lessons.pronoun_pairs import build_pronoun_pairs  # noqa: E402
from workbench.tools.provenance import provenance, write_report  # noqa: E402
from workbench.translation.data import load_multi30k  # noqa: E402


def load() -> float:
    return os.getloadavg()[0]


def part(report: dict, name: str, threads: int, fn) -> None:
    before = load()
    start = time.perf_counter()
    result = fn()
    after = load()
    result.update(load_before=before, load_after=after, part_seconds=time.perf_counter() - start,
                  contended=max(before, after) > threads)
    report[name] = result
    print(f"== {name}: {result}", flush=True)


def lens_part(args) -> dict:
    model, tok, _ = wb.pretrained("small-de-en")
    train = text_batches(tok, load_multi30k("train", limit=args.lens_train), 100)
    held = text_batches(tok, load_multi30k("val")[:args.heldout], 100)
    start = time.perf_counter()
    tuned, record = train_tuned_lens(model, train, steps=args.lens_steps, seed=0)
    seconds = time.perf_counter() - start
    kl_logit, kl_tuned = kl_by_layer(model, held), kl_by_layer(model, held, tuned)
    per_sentence = []
    for s, t in held:
        depth = decision_layer(logit_lens(model, s, t, lens=tuned), decoder_states(model, s, t, [-1])[1])
        real = t != model.pad_id
        per_sentence += [depth[b][real[b]].numpy() for b in range(depth.shape[0])]
    rng = np.random.default_rng(0)
    boot = [np.median(np.concatenate([per_sentence[i] for i in rng.integers(0, len(per_sentence), len(per_sentence))]))
            for _ in range(1000)]
    depths = np.concatenate(per_sentence)
    logit_depth = []
    for s, t in held:
        d = decision_layer(logit_lens(model, s, t))
        logit_depth.append(d[t != model.pad_id].numpy())
    return {"tuned_lens_train_seconds": seconds, "target_seconds": 120, "lens_train_sentences": args.lens_train,
            "lens_steps": args.lens_steps, "n_positions": record.n_tokens,
            "kl_logit_lens": kl_logit.mean(0).tolist(), "kl_tuned_lens": kl_tuned.mean(0).tolist(),
            "median_decision_layer_tuned": float(np.median(depths)),
            "median_decision_layer_interval": np.quantile(boot, [0.025, 0.975]).tolist(),
            "decided_share_by_layer_tuned": (np.bincount(depths, minlength=3) / len(depths)).tolist(),
            "median_decision_layer_logit": float(np.median(np.concatenate(logit_depth))),
            "decided_share_by_layer_logit": (np.bincount(np.concatenate(logit_depth), minlength=3)
                                             / sum(map(len, logit_depth))).tolist(),
            "n_heldout": args.heldout}


def imported_marian() -> tuple[str, torch.nn.Module, object]:
    """opus-mt-de-en from the local Hugging Face cache, else small-de-en through Marian's layout and back."""
    import tempfile

    import transformers

    from workbench.bridges.huggingface import from_huggingface, to_huggingface
    from workbench.errors import BridgeError

    try:
        model, tok, _ = wb.pretrained("Helsinki-NLP/opus-mt-de-en")
        return "opus-mt-de-en", model, tok
    except BridgeError:
        small, small_tok, _ = wb.pretrained("small-de-en")
        with tempfile.TemporaryDirectory() as folder:
            to_huggingface(small, small_tok, folder)
            hf_model = transformers.MarianMTModel.from_pretrained(folder).eval()
            hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
        model, tok = from_huggingface(hf_model, hf_tok)
        return "small-de-en as Marian (round trip)", model, tok


def sinks_part(args) -> dict:
    pairs = load_multi30k("test_2016_flickr")[:args.audit]
    out = {"n_sentences": len(pairs), "target_seconds": 60}
    for name in ("small-de-en", "gru-de-en", "marian"):
        if name == "marian":
            label, model, tok = imported_marian()
            out["marian_model"] = label
        else:
            model, tok, _ = wb.pretrained(name)
        audit = sink_audit(model.eval(), tok, pairs)
        summary = audit.summary()
        out[name] = {"seconds": audit.seconds, "shares_by_kind": summary[list(CATEGORIES)].to_dict("index"),
                     "alignment_by_kind": summary[["align_raw", "align_content"]].to_dict("index"),
                     "sink_heavy_heads_interval_above_0.5": int((audit.table["sink_lo"] > 0.5).sum()),
                     "n_heads": len(audit.table),
                     "ablation": {k: v for k, v in audit.ablation.items() if k not in ("heads", "control_heads")}}
    return out


def das_part(args) -> dict:
    model, tok, _ = wb.pretrained("small-de-en")
    sentences = [("val", s) for s, _ in load_multi30k("val")] + \
        [("test", s) for s, _ in load_multi30k("test_2016_flickr")]
    t0 = time.perf_counter()
    pairs = build_pronoun_pairs(model, tok, sentences, kinds=("possessive", "subject"))
    pair_seconds = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    order = rng.permutation(len(pairs))
    half = len(pairs) // 2
    train = das_examples([pairs[i] for i in order[:half]], model.pad_id)
    test = das_examples([pairs[i] for i in order[half:]], model.pad_id)
    start = time.perf_counter()
    train_das(model, args.das_site, args.das_rank, train, epochs=args.das_epochs)
    one = time.perf_counter() - start
    table = das_sweep(model, train, test, args.das_sites, args.das_ranks, epochs=args.das_epochs)
    return {"n_pairs": len(pairs), "pair_seconds": pair_seconds, "train_examples": len(train),
            "test_examples": len(test), "one_layer_rank": {"site": args.das_site, "rank": args.das_rank,
                                                           "epochs": args.das_epochs, "seconds": one},
            "target_seconds": 180, "iia_table": table.to_dict("records")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parts", nargs="+", default=["lens", "sinks", "das"])
    ap.add_argument("--lens-train", type=int, default=3000)
    ap.add_argument("--lens-steps", type=int, default=60)
    ap.add_argument("--heldout", type=int, default=500)
    ap.add_argument("--audit", type=int, default=1000)
    ap.add_argument("--das-site", default="enc.2.resid")
    ap.add_argument("--das-rank", type=int, default=4)
    ap.add_argument("--das-epochs", type=int, default=10)
    ap.add_argument("--das-sites", nargs="+", default=["enc.0.resid", "enc.2.resid", "dec.0.resid", "dec.2.resid"])
    ap.add_argument("--das-ranks", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    record = provenance()
    report = {**record, "issue": 50, "parts": {}}
    out = Path(args.out or f"bench/results/where-decided/where-decided-cpu-{args.threads}threads-"
                           f"{(record.get('commit') or 'nocommit')[:7]}.json")
    fns = {"lens": lens_part, "sinks": sinks_part, "das": das_part}
    for name in args.parts:
        part(report["parts"], name, args.threads, lambda name=name: fns[name](args))
        write_report(report, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
