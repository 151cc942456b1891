"""keep_freed_memory(): glibc's malloc keeps freed memory for the next tensors, so a tensor that grows step by step
(a decoder's key/value cache) stops faulting fresh pages in; the decoding commands turn it on for their own
process only."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

from conftest import require

GROWING = textwrap.dedent("""
    import json, resource
    import torch
    from workbench.runtime import keep_freed_memory
    applied = keep_freed_memory()
    x = torch.zeros(1)
    for _ in range(60):  # a cache that grows by 256 kB a step, as a decoder's does
        x = torch.cat([x, torch.ones(64 * 1024)])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(60):  # from 15 to 30 MB
        x = torch.cat([x, torch.ones(64 * 1024)])
    print(json.dumps({"applied": applied, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
""")


def _growing(malloc: str) -> dict:
    env = {**os.environ, "WORKBENCH_MALLOC": malloc, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", GROWING], env=env, capture_output=True, text=True, timeout=120,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_kept_memory_stops_a_growing_tensor_faulting_pages_in():
    require(platform.libc_ver()[0] == "glibc", "glibc's malloc (what keep_freed_memory tunes)",
            "run this test on Linux with glibc")
    system, kept = _growing("system"), _growing("")
    assert system["applied"] is False and kept["applied"] is True
    # glibc's defaults map every larger copy afresh: about 3,800 pages a step here; the kept heap reuses its pages
    assert kept["faults"] * 4 < system["faults"], (kept, system)


def test_the_decoding_commands_keep_freed_memory_for_their_own_process(monkeypatch, capsys):
    from workbench.tools.cli import main as cli

    calls = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append(1) or True)
    assert cli.main(["info", "--preset", "tiny", "--vocab-size", "100"]) == 0
    assert calls == []  # not a decoding command: glibc's defaults stay
    assert cli.main(["translate", "--checkpoint", "small-de-en", "--device", "cpu", "--beam", "1", "Ein Hund ."]) == 0
    assert calls == [1] and capsys.readouterr().out.strip()
