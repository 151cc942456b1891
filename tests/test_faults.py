"""Fault tests: a training run killed with SIGKILL mid-run resumes to exactly the uninterrupted result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from workbench.translation.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow


def _train_cmd(out, data_dir, epochs, resume=False):
    cmd = [sys.executable, "-m", "workbench", "train", "--preset", "tiny", "--out", str(out), "--epochs", str(epochs),
           "--limit", "400", "--vocab-size", "400", "--max-tokens", "600", "--data-dir", str(data_dir), "--device", "cpu",
           "--precision", "fp32"]  # fp32: compared for equality, so neither run may probe bf16 on its own
    return cmd + (["--resume"] if resume else [])


def test_sigkill_mid_run_then_resume_matches_uninterrupted(tmp_path, multi30k_dir):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full = tmp_path / "full"
    subprocess.run(_train_cmd(full, multi30k_dir, 4), check=True, env=env, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(killed, multi30k_dir, 4), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (killed / "last.pt").exists():  # wait for the first epoch's checkpoint, then kill during the next one
        assert proc.poll() is None and time.time() < deadline, "training ended or stalled before its first checkpoint"
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    load_checkpoint(killed / "last.pt")  # the file under the final name is always complete
    subprocess.run(_train_cmd(killed, multi30k_dir, 4, resume=True), check=True, env=env, capture_output=True)

    a, b = load_checkpoint(full / "last.pt"), load_checkpoint(killed / "last.pt")
    assert a["epoch"] == b["epoch"] == 4 and a["step"] == b["step"]
    assert a["history"]["train_loss"] == b["history"]["train_loss"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


SAVER = """
import sys, torch, workbench as wb
from workbench.translation.checkpoint import save_checkpoint
from workbench.translation.tokenizer import WordTokenizer
tok = WordTokenizer.train([("a b", "b a")])
model = wb.build_model(wb.preset("small"), 4000, 4000)   # ~ 50 MB per checkpoint: saving takes a while
step = 0
while True:
    step += 1
    with torch.no_grad():
        model.generator.weight.fill_(float(step))
    save_checkpoint(sys.argv[1], model, tok, step=step)
    print(step, flush=True)
"""


def test_kill_during_save_never_leaves_a_partial_file_under_the_final_name(tmp_path):
    target = tmp_path / "ckpt.pt"
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(target)], stdout=subprocess.PIPE, text=True)
        first = proc.stdout.readline()  # one complete save has happened
        assert first.strip(), "the saver process failed to start"
        time.sleep(0.05 + 0.11 * attempt)  # land somewhere inside a later save
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = load_checkpoint(target)  # whatever is under the final name is a complete checkpoint
        assert float(state["model"]["generator.weight"][0, 0]) == state["step"]
