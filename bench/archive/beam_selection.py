"""Benchmark: how beam search picks each step's K survivors, on the logits of a real search.

    python bench/archive/beam_selection.py [--threads 1] [--sentences 64] [--rounds 7] [--json FILE]

Decodes the first ``--sentences`` of test_2016_flickr with the shipped small-de-en (beam 4, fp32), records every
step's next-token logits, then times two ways of selecting from them, alternating round by round:

* ``full``: the (b, K*V) candidate scores (beam score + log-probability of every extension) and one ``topk`` over
  each sentence's K*V of them (what beam search did before :func:`workbench.translation.decode_steps.top_per_row`);
* ``per_row``: each beam's K best log-probabilities (:func:`top_per_row`), then a ``topk`` over each sentence's K*K.

Both start from the same log-probabilities (the log-softmax itself, common to both, is not timed); the script checks
that both select the same scores. Reported: the summed selection time over the search's steps (median of the rounds)
for each, their ratio, and the whole batch's decoding time for scale.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from workbench.tools.provenance import provenance
    from workbench.translation import decode
    from workbench.translation.decode_steps import top_per_row
    from workbench.translation.pipeline import load_pairs
    from workbench.translation.shipped import default_alpha, load_any

    record = provenance(["python", *sys.argv])  # the code that runs, read before the work
    model, tokenizer, info = load_any("small-de-en")
    sources = [s for s, _ in load_pairs("test_2016_flickr", "de", "en", args.data_dir)][: args.sentences]
    K = 4
    steps: list[torch.Tensor] = []
    real_step = decode._Stepper.__call__

    def recording(self: decode._Stepper, prefix: torch.Tensor) -> torch.Tensor:
        logits = real_step(self, prefix)
        steps.append(logits.detach().clone())
        return logits

    decode._Stepper.__call__ = recording  # type: ignore[method-assign]
    decode.translate(model, tokenizer, sources, beam=K, alpha=default_alpha(info), batch_size=len(sources))
    decode._Stepper.__call__ = real_step  # type: ignore[method-assign]
    start = time.perf_counter()
    decode.translate(model, tokenizer, sources, beam=K, alpha=default_alpha(info), batch_size=len(sources))
    decode_seconds = time.perf_counter() - start

    g = torch.Generator().manual_seed(0)
    cases = []
    for logits in steps:
        if logits.shape[0] % K:  # step 0 fed once per sentence: its rows are copied K times before selection
            logits = logits.repeat_interleave(K, dim=0)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (b*K, V)
        scores = -10 * torch.rand(logp.shape[0], generator=g)  # (b*K,) beam scores
        cases.append((logp, scores))

    def full(logp: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        b = logp.shape[0] // K
        return (scores[:, None] + logp).view(b, -1).topk(K, dim=-1).values

    def per_row(logp: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        b = logp.shape[0] // K
        top, _ = top_per_row(logp, K)
        return (scores[:, None] + top).view(b, K * K).topk(K, dim=-1).values

    for logp, scores in cases:
        assert torch.equal(full(logp, scores), per_row(logp, scores)), "the two selections differ"
    seconds: dict[str, list[float]] = {"full": [], "per_row": []}
    for r in range(args.rounds):
        for name, fn in (((("full", full), ("per_row", per_row))) if r % 2 == 0 else
                         (("per_row", per_row), ("full", full))):
            start = time.perf_counter()
            for logp, scores in cases:
                fn(logp, scores)
            seconds[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in seconds.items()}
    report = {**record, "threads": torch.get_num_threads(), "sentences": len(sources), "beam": K,
              "steps": len(cases), "rows_per_step_max": max(c[0].shape[0] for c in cases),
              "vocab": cases[0][0].shape[1], "rounds": args.rounds,
              "selection_seconds": {k: round(v, 4) for k, v in med.items()},
              "selection_speedup": round(med["full"] / med["per_row"], 2),
              "batch_decode_seconds_now": round(decode_seconds, 3),
              "selection_seconds_all_rounds": {k: [round(x, 4) for x in v] for k, v in seconds.items()}}
    print(f"{len(cases)} steps of a {len(sources)}-sentence beam-{K} search (V = {report['vocab']}), "
          f"{torch.get_num_threads()} thread(s): selection {med['full'] * 1e3:.0f} ms over all K*V candidates, "
          f"{med['per_row'] * 1e3:.0f} ms per row first ({report['selection_speedup']:.2f}x); "
          f"the whole batch decodes in {decode_seconds:.2f} s now")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
