"""The GPU recipe and the training loop's accelerator habits, checked on the CPU: the named run ``gpu-base``,
batch shapes bucketed for a compiled step, and no host synchronisation in the loop's steps (tests/_host_syncs.py
counts them as the decoding tests do)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import workbench.translation.train as train_mod
from tests._host_syncs import count_host_syncs
from workbench import build_model, preset
from workbench.errors import ConfigError
from workbench.model.config import PRESETS
from workbench.translation.batching import make_batch, token_batches
from workbench.translation.data import synthetic_pairs
from workbench.translation.run import RECIPES, recipe
from workbench.translation.tokenizer import WordTokenizer
from workbench.translation.train import TrainConfig, fit


def test_gpu_base_is_the_papers_base_model_on_one_gpu():
    run = RECIPES["gpu-base"]
    assert run.arch == "transformer" and run.preset == "base" and PRESETS[run.preset].d_model == 512
    assert (run.src, run.tgt) == ("de", "en")
    t = run.train
    assert t.device == "cuda" and t.precision == "bf16" and t.compile
    assert t.max_tokens >= 16384  # the realistic batch
    assert t.checkpoint_every and t.keep_checkpoints >= 5  # snapshots for averaging chosen on val
    assert t.max_minutes is not None and t.max_minutes <= 10  # the budget
    assert t.warmup_steps < 4000  # Multi30k gives ~60 steps of 16k tokens an epoch: the paper's 4000 never ends
    assert t.eval_bleu and t.bleu_max_sentences is not None  # a bounded val decode every epoch
    # options given beside the recipe change only what they name; a bad one is refused
    short = recipe("gpu-base", max_minutes=3.0)
    assert short.train == dataclasses.replace(t, max_minutes=3.0) and short.preset == "base"
    with pytest.raises(ConfigError):
        recipe("gpu-base", max_tokens=0)


def test_compiled_steps_see_a_bounded_set_of_shapes():
    """Lengths rounded to multiples of 8 (as a compiled run pads them): every batch of an epoch falls into one of a
    few (S, T) buckets, far fewer than its batches, where unrounded lengths give many more."""
    pairs = synthetic_pairs("copy", 4000, 3, 60, 120, seed=0)
    tok = WordTokenizer.train(pairs)
    src = tok.encode_src([s for s, _ in pairs])
    tgt = tok.encode_tgt([t for _, t in pairs])

    def shapes(multiple: int) -> tuple[set[tuple[int, int]], int]:
        idx = token_batches([len(s) for s in src], [len(t) - 1 for t in tgt], 2000, seed=0, epoch=0,
                            pad_multiple=multiple)
        seen = set()
        for b in idx:
            batch = make_batch([src[i] for i in b], [tgt[i] for i in b], 0, multiple, 128)
            seen.add((batch.src.shape[1], batch.tgt_in.shape[1]))
        return seen, len(idx)

    bucketed, n = shapes(8)
    assert all(s % 8 == 0 and t % 8 == 0 for s, t in bucketed)
    longest = max(map(len, src)), max(map(len, tgt))
    assert len(bucketed) <= (-(-longest[0] // 8)) * (-(-longest[1] // 8))
    plain, _ = shapes(1)
    assert len(bucketed) * 3 <= len(plain) and len(bucketed) < n


@pytest.mark.parametrize("planted", [False, True], ids=["loop", "planted-sync"])
def test_no_host_sync_in_the_training_steps(tmp_path, planted, monkeypatch):
    """Between two optimizer steps the loop asks the host nothing (the loss stays on the device; it is read every
    log_every steps, before a snapshot and at the end of an epoch). The CPU batch's own counts
    (:func:`train._host_counts`, before the batch goes to the device) are not a device sync. A planted read of the
    loss every step is seen."""
    pairs = synthetic_pairs("copy", 400, 3, 6, 10, seed=0)
    tok = WordTokenizer.train(pairs)
    torch.manual_seed(0)
    model = build_model(preset("tiny", d_model=32, d_ff=64), tok.src_vocab_size, tok.tgt_vocab_size)
    cfg = TrainConfig(epochs=1, warmup_steps=50, max_tokens=300, eval_bleu=False, device="cpu", precision="fp32",
                      log_every=1000)
    if planted:
        real_fb = train_mod._forward_backward

        def reads_every_step(run, epoch, b_idx, totals):
            loss = real_fb(run, epoch, b_idx, totals)
            float(loss)  # what the loop did before: a host read of every step's loss
            return loss

        monkeypatch.setattr(train_mod, "_forward_backward", reads_every_step)
    with count_host_syncs(monkeypatch, step=(train_mod, "_optimizer_step"),
                          exempt=((train_mod, "_host_counts"),)) as log:
        fit(model, tok, pairs, pairs[:20], cfg)
    per_step = log.per_step()
    assert len(per_step) >= 5
    between = per_step[:-1]  # the last segment holds the epoch's end: its loss read and the validation pass
    if planted:
        assert min(between) >= 1
    else:
        assert max(between) == 0, f"host synchronisations between steps: {per_step}: {log.syncs()}"


def test_step_loss_on_given_rows_is_the_masked_loss_bit_for_bit():
    """The rows found on the CPU select what the boolean mask selects: same loss, same gradients, to the bit."""
    from workbench.translation.objective import step_loss

    torch.manual_seed(0)
    model = build_model(preset("tiny"), 50, 50).train()
    batch = make_batch([[5, 6, 7, 8], [9, 10]], [[2, 11, 12, 3], [2, 13, 14, 15, 16, 3]], 0)
    rows = (batch.tgt_out != 0).flatten().nonzero().squeeze(1)
    results = []
    for given in (None, rows):
        torch.manual_seed(1)  # the same dropout draws
        loss, n = step_loss(model, model, batch, 0, 0.1, rows=given)
        loss.backward()
        results.append((loss.detach(), n, [p.grad.clone() for p in model.parameters()]))
        model.zero_grad(set_to_none=True)
    (a, n_a, g_a), (b, n_b, g_b) = results
    assert n_a == n_b == 8 and torch.equal(a, b)
    assert all(torch.equal(x, y) for x, y in zip(g_a, g_b, strict=True))
