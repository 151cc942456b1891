"""DDP on the CPU (gloo, 2 processes via torchrun) equals one process with the same global batch."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import require

from workbench.translation.checkpoint import load_checkpoint

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def _args(out, data_dir, extra=()):
    return ["train", "--preset", "tiny", "--out", str(out), "--epochs", "2", "--limit", "300", "--vocab-size", "400",
            "--max-tokens", "600", "--data-dir", str(data_dir), "--device", "cpu",
            "--precision", "fp32", *extra]  # fp32: runs compared for equality must not each probe bf16 on their own


def test_two_ranks_equal_one_process_with_accumulation(tmp_path, multi30k_dir):
    torchrun = shutil.which("torchrun")
    require(torchrun, "torchrun on PATH", "install torch (it ships torchrun) in the environment that runs the tests")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ddp = tmp_path / "ddp"
    subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "workbench", *_args(ddp, multi30k_dir)],
                   check=True, env=env, capture_output=True, timeout=600)
    single = tmp_path / "single"
    # one process, two micro-batches per step, in the order the ranks receive them (rank r gets batches r, r+2, ...)
    subprocess.run([sys.executable, "-m", "workbench", *_args(single, multi30k_dir, ["--accum-steps", "2"])],
                   check=True, env=env, capture_output=True, timeout=600)
    a, b = load_checkpoint(ddp / "last.pt"), load_checkpoint(single / "last.pt")
    assert a["step"] == b["step"] > 0
    for name, tensor in a["model"].items():
        torch.testing.assert_close(tensor, b["model"][name], atol=2e-5, rtol=1e-4, msg=name)
    assert abs(a["history"]["val_loss"][-1] - b["history"]["val_loss"][-1]) < 1e-3
    assert not (ddp / "ckpt_rank1").exists()  # only rank 0 writes


# Run by torchrun in the next test. Rank 1 starts its budget clock RANK1_DELAY_S after rank 0 (as a rank that was
# slower to get going would): the ranks meet in DistributedDataParallel's parameter broadcast, then rank 1 sleeps.
# It also refuses to write summary.json, which only rank 0 may write.
LATE_RANK_LAUNCHER = """
import os, pathlib, sys, time

if os.environ["RANK"] == "1":
    import torch.nn.parallel as parallel

    ddp_class = parallel.DistributedDataParallel

    def late_ddp(*args, **kwargs):
        ddp = ddp_class(*args, **kwargs)
        time.sleep(float(os.environ["RANK1_DELAY_S"]))
        return ddp

    parallel.DistributedDataParallel = late_ddp
    write_text = pathlib.Path.write_text

    def no_summary(self, *args, **kwargs):
        if self.name == "summary.json":
            raise RuntimeError("rank 1 wrote summary.json: only rank 0 may")
        return write_text(self, *args, **kwargs)

    pathlib.Path.write_text = no_summary

from workbench.tools.cli.main import main

sys.exit(main(sys.argv[1:]))
"""


def test_ranks_agree_when_the_time_budget_is_spent(tmp_path, multi30k_dir):
    """Each rank reads its own clock; with a time budget they must stop at the same step, or one rank leaves
    while the other waits for it in the next gradient all-reduce (a hang, or a crash when the first one exits)."""
    torchrun = shutil.which("torchrun")
    require(torchrun, "torchrun on PATH", "install torch (it ships torchrun) in the environment that runs the tests")
    launcher = tmp_path / "late_rank.py"
    launcher.write_text(LATE_RANK_LAUNCHER)
    repo = str(Path(__file__).resolve().parents[1])
    # budget 3 s: rank 0's clock passes it at its first check (it waited 6 s for rank 1), rank 1's does not
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK1_DELAY_S": "6",
           "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)}
    out = tmp_path / "run"
    args = _args(out, multi30k_dir)
    args[args.index("--epochs") + 1] = "1000"
    proc = subprocess.Popen([torchrun, "--standalone", "--nproc-per-node", "2", str(launcher), *args,
                             "--max-minutes", "0.05"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both ranks
        log, _ = proc.communicate()
        pytest.fail(f"the ranks did not finish together within 300 s (one waits for the other):\n{log[-3000:]}")
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}:\n{log[-3000:]}"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_reason"] == "time budget"
    assert load_checkpoint(out / "last.pt")["step"] >= 1
