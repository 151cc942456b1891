"""Fault tests: a training run killed with SIGKILL mid-run resumes to exactly the uninterrupted result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


# -- SIGKILL at random moments of a tiny run (workbench train, run folder owned, files atomic) ----------------------
# A tiny run on synthetic text (no data download): 3 epochs of ~12 optimizer steps, a numbered snapshot every 3 steps,
# dropout on (so the resumed random state matters). Each trial kills one training process with SIGKILL, then finishes
# the run as a user would (`--resume` when the folder holds a run, else the same command again) and compares the
# folder with an uninterrupted run's, tensor by tensor. Children are forked from a server that has torch imported, so
# a trial costs the training, not an interpreter start.
KILLS = 20
DETERMINISTIC_HISTORY = ("train_loss", "val_loss", "val_ppl", "lr", "steps", "step_loss", "best_epoch",
                         "stopped_reason", "precision", "step")


def _synthetic_corpus(folder):
    import random

    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    for split, n in (("train", 240), ("val", 24)):
        src = [" ".join(rng.choices(words, k=rng.randint(3, 8))) for _ in range(n)]
        (folder / f"{split}.src").write_text("\n".join(src) + "\n")
        (folder / f"{split}.tgt").write_text("\n".join(" ".join(reversed(s.split())) for s in src) + "\n")


def _kill_argv(out, data):
    return ["train", "--out", str(out), "--preset", "tiny", "--dropout", "0.1", "--epochs", "3", "--vocab-size", "120",
            "--max-tokens", "240", "--checkpoint-every", "3", "--keep-checkpoints", "3", "--no-eval-bleu",
            "--device", "cpu", "--precision", "fp32", "--train-src", str(data / "train.src"), "--train-tgt",
            str(data / "train.tgt"), "--val-src", str(data / "val.src"), "--val-tgt", str(data / "val.tgt")]


def _train_child(argv, kill_mode=None, kill_at=0, log_file=os.devnull):
    """Runs in a forked child: `workbench train ARGV`, killing itself with SIGKILL inside its `kill_at`-th
    torch.save after half the bytes are written (`"mid-save"`), or at its `kill_at`-th fsync, after a temporary
    file was filled and before its rename (`"before-rename"`)."""
    import io

    import torch

    from workbench.tools.cli.main import main

    log = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    torch.set_num_threads(1)
    count = [0]
    if kill_mode == "mid-save":
        real_save = torch.save

        def save(obj, f, *a, **k):
            count[0] += 1
            if count[0] < kill_at or not hasattr(f, "write"):
                return real_save(obj, f, *a, **k)
            buf = io.BytesIO()
            real_save(obj, buf, *a, **k)
            f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)

        torch.save = save
    elif kill_mode == "before-rename":
        real_fsync = os.fsync

        def fsync(fd):
            count[0] += 1
            if count[0] >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_fsync(fd)

        os.fsync = fsync
    sys.exit(main(argv))


def _compare_runs(ref, got):
    """Every file of the uninterrupted run `ref` has its twin in `got`, bit-identical where the run is deterministic
    (tensors, steps, epochs, the loss curves); nothing else is left (no partial or temporary file)."""
    from workbench.translation.checkpoint import load_checkpoint

    names = lambda d: sorted(p.name for p in d.iterdir() if p.name != "train.lock")  # noqa: E731
    assert names(got) == names(ref), (names(got), names(ref))
    for p in sorted(ref.glob("*.pt")):
        a, b = load_checkpoint(p), load_checkpoint(got / p.name)
        assert (a["step"], a["epoch"]) == (b["step"], b["epoch"]), p.name
        assert a["tokenizer"] == b["tokenizer"], p.name
        for k, t in a["model"].items():
            assert torch.equal(t, b["model"][k]), f"{p.name}: {k}"
        if a["optimizer"] is not None:
            for i, s in a["optimizer"]["state"].items():
                for k, t in s.items():
                    assert torch.equal(t, b["optimizer"]["state"][i][k]), f"{p.name}: optimizer {i}.{k}"
            assert torch.equal(a["rng"]["torch"], b["rng"]["torch"]), p.name
        for k in DETERMINISTIC_HISTORY:
            assert a["history"].get(k) == b["history"].get(k), f"{p.name}: history {k}"
    ha, hb = (json.loads((d / "history.json").read_text()) for d in (ref, got))
    assert {k: ha[k] for k in DETERMINISTIC_HISTORY} == {k: hb[k] for k in DETERMINISTIC_HISTORY}
    ca, cb = (json.loads((d / "complete.json").read_text()) for d in (ref, got))
    assert (ca["settings"], ca["step"], ca["stopped_reason"]) == (cb["settings"], cb["step"], cb["stopped_reason"])


def test_sigkill_at_20_random_moments_always_resumes_to_the_uninterrupted_run(tmp_path):
    import multiprocessing as mp
    import random

    from workbench.translation.checkpoint import load_checkpoint
    from workbench.translation.run_folder import holds_run

    ctx = mp.get_context("forkserver")
    # torch._dynamo: torch imports it at the first optimizer it builds, which costs seconds in every fresh process
    ctx.set_forkserver_preload(["torch", "torch._dynamo", "workbench.tools.cli.main", "workbench.translation.pipeline",
                                "workbench.translation.train", "workbench.translation.tokenizer"])
    data = tmp_path / "data"
    data.mkdir()
    _synthetic_corpus(data)

    def run(out, kill_mode=None, kill_at=0, kill_after=None, resume=False):
        argv = _kill_argv(out, data) + (["--resume"] if resume else [])
        p = ctx.Process(target=_train_child, args=(argv, kill_mode, kill_at, str(out) + ".log"))
        start = time.perf_counter()
        p.start()
        if kill_after is not None:  # seconds after the run took its folder (run.json), so the moment falls in training
            while p.exitcode is None and not (out / "run.json").exists():
                time.sleep(0.005)
            start = time.perf_counter()
            p.join(kill_after)
            if p.exitcode is None:
                os.kill(p.pid, signal.SIGKILL)
        p.join(120)
        return p.exitcode, time.perf_counter() - start

    ref = tmp_path / "ref"
    code, _ = run(ref)
    assert code == 0
    seconds = (ref / "complete.json").stat().st_mtime - (ref / "run.json").stat().st_mtime  # the training itself
    saves = len(list(ref.glob("ckpt_step*.pt")))  # at least: the run saved more than it kept
    assert saves >= 3 and (ref / "complete.json").exists()

    rng = random.Random(46)
    modes = ["timer"] * 10 + ["mid-save"] * 5 + ["before-rename"] * 5
    rng.shuffle(modes)
    report = []
    for trial, mode in enumerate(modes):
        out = tmp_path / f"k{trial:02d}"
        if mode == "timer":  # a moment after the run's end (it finished first: the machine got faster) is drawn
            for attempt in range(6):  # again, within the duration of that faster run
                out = tmp_path / f"k{trial:02d}-{attempt}"
                code, took = run(out, kill_after=rng.uniform(0.0, seconds * 0.9))
                if code != 0:
                    break
                seconds = min(seconds, took)
        else:  # the 1st to 16th save (a run makes more than 20) or 1st to 30th fsync (more than 40)
            code, _ = run(out, kill_mode=mode, kill_at=rng.randint(1, 16 if mode == "mid-save" else 30))
        assert code == -signal.SIGKILL, (f"trial {trial} ({mode}): the training was not killed (exit {code}): "
                                         f"{Path(str(out) + '.log').read_text()[-2000:]}")
        for p in out.glob("*.pt") if out.exists() else ():
            load_checkpoint(p)  # whatever lies under a final name is complete
        resumed = holds_run(out)
        stage = "last.pt" if (out / "last.pt").exists() else "run started" if resumed else "before the run"
        code, _ = run(out, resume=resumed)
        assert code == 0, (f"trial {trial} ({mode}, {stage}): finishing the run failed: "
                           f"{Path(str(out) + '.log').read_text()[-2000:]}")
        _compare_runs(ref, out)
        report.append((mode, stage))
    assert len(report) == KILLS
    from collections import Counter

    print(f"{KILLS} kills, every resume bit-identical; where they fell: {dict(Counter(report))}")  # pytest -s
