"""DDP on the CPU (gloo, 2 processes via torchrun) equals one process with the same global batch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch

from workbench.checkpoint import load_checkpoint

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def _args(out, data_dir, extra=()):
    return ["train", "--preset", "tiny", "--out", str(out), "--epochs", "2", "--limit", "300", "--vocab-size", "400",
            "--max-tokens", "600", "--data-dir", str(data_dir), "--device", "cpu", *extra]


def test_two_ranks_equal_one_process_with_accumulation(tmp_path, multi30k_dir):
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not on PATH")
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
