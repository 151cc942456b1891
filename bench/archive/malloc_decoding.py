"""Benchmark: beam-4 decoding with glibc's malloc defaults against :func:`workbench.runtime.keep_freed_memory`.

    python bench/archive/malloc_decoding.py [--sentences 1000] [--rounds 3] [--threads 2] [--json FILE]

Each measurement is a fresh process (the malloc setting cannot be undone inside one): it loads the shipped small-de-en
and decodes the first ``--sentences`` of test_2016_flickr with the card's beam and length penalty, in fp32 and then in
bf16 (where the CPU has bf16 units), and reports each format's seconds, the page faults (``ru_minflt``) during each
and the process's peak resident memory. ``system`` processes keep glibc's defaults (``WORKBENCH_MALLOC=system``),
``kept`` ones call :func:`keep_freed_memory` first, as ``workbench translate`` does; the two alternate, ``--rounds``
of each, which goes first alternating. Reported: every run, the medians, and the speed-up of ``kept`` per format.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any


def child(mode: str, sentences: int, threads: int) -> dict[str, Any]:
    """One measurement in this process (``mode``: "system" or "kept")."""
    import resource
    import time

    import torch

    from workbench.runtime import choose_precision, cpu_bf16_units, keep_freed_memory
    from workbench.translation.decode import translate
    from workbench.translation.pipeline import load_pairs
    from workbench.translation.shipped import default_alpha, load_any, read_card

    applied = keep_freed_memory() if mode == "kept" else False
    torch.set_num_threads(threads)
    device = torch.device("cpu")
    model, tokenizer, info = load_any("small-de-en", device=device)
    beam = read_card("small-de-en").get("decoding", {}).get("beam", 4)
    sources = [s for s, _ in load_pairs("test_2016_flickr", "de", "en", None)][:sentences]
    formats = {"fp32": "fp32"}
    if cpu_bf16_units():
        formats["bf16"] = choose_precision("bf16", device)
    out: dict[str, Any] = {"mode": mode, "applied": applied}
    for name, precision in formats.items():
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        translate(model, tokenizer, sources, beam=beam, alpha=default_alpha(info), device=device, precision=precision)
        out[name] = {"seconds": round(time.perf_counter() - start, 3),
                     "page_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}
    out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", choices=("system", "kept"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.sentences, args.threads)))
        return

    from workbench.tools.provenance import provenance, utc_now

    report: dict[str, Any] = {**provenance(), "threads": args.threads, "sentences": args.sentences,
                              "load_average_start": os.getloadavg(), "runs": []}
    for r in range(args.rounds):
        for mode in (("system", "kept") if r % 2 == 0 else ("kept", "system")):
            env = {**os.environ, "WORKBENCH_MALLOC": "system" if mode == "system" else ""}
            done = subprocess.run([sys.executable, __file__, "--child", mode, "--sentences", str(args.sentences),
                                   "--threads", str(args.threads)], env=env, capture_output=True, text=True,
                                  check=True)
            run = json.loads(done.stdout.strip().splitlines()[-1])
            report["runs"].append(run)
            print(json.dumps(run), flush=True)
    formats = [k for k in ("fp32", "bf16") if k in report["runs"][0]]
    medians = {mode: {f: statistics.median(r[f]["seconds"] for r in report["runs"] if r["mode"] == mode)
                      for f in formats} for mode in ("system", "kept")}
    report["median_seconds"] = medians
    report["kept_speedup"] = {f: medians["system"][f] / medians["kept"][f] for f in formats}
    report["bf16_speedup"] = ({mode: medians[mode]["fp32"] / medians[mode]["bf16"] for mode in medians}
                              if "bf16" in formats else None)
    report["load_average_end"] = os.getloadavg()
    report["finished_utc"] = utc_now()
    print(f"median seconds {medians}; kept/system speed-up {report['kept_speedup']}; "
          f"bf16 speed-up {report['bf16_speedup']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
