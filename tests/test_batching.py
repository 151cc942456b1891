"""Batches: shifted targets, token budget, coverage, deterministic shuffles, disjoint rank shards."""

from __future__ import annotations

import random

import pytest
import torch

from workbench.batching import make_batch, token_batches


def test_make_batch_shifts_target_by_one():
    b = make_batch([[5, 6, 3], [7, 3]], [[2, 8, 9, 3], [2, 4, 3]], pad_id=0)
    assert b.src.tolist() == [[5, 6, 3], [7, 3, 0]]
    assert b.tgt_in.tolist() == [[2, 8, 9], [2, 4, 3]]
    assert b.tgt_out.tolist() == [[8, 9, 3], [4, 3, 0]]
    assert b.n_tgt_tokens == 5 and b.n_src_tokens == 5
    assert b.src_mask.shape == (2, 1, 1, 3)


@pytest.fixture
def lengths():
    rng = random.Random(0)
    src = [rng.randint(3, 40) for _ in range(1000)]
    tgt = [max(2, s + rng.randint(-5, 5)) for s in src]
    return src, tgt


def test_budget_respected_and_every_example_once(lengths):
    src, tgt = lengths
    batches = token_batches(src, tgt, max_tokens=800, seed=1, epoch=0)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(1000))
    for b in batches:
        assert len(b) * (max(src[i] for i in b) + max(tgt[i] for i in b)) <= 800 or len(b) == 1


def test_shuffle_is_seeded_per_epoch(lengths):
    src, tgt = lengths
    a = token_batches(src, tgt, 800, seed=1, epoch=0)
    assert a == token_batches(src, tgt, 800, seed=1, epoch=0)
    assert a != token_batches(src, tgt, 800, seed=1, epoch=1)
    state = torch.get_rng_state()
    token_batches(src, tgt, 800, seed=1, epoch=2)
    assert torch.equal(state, torch.get_rng_state())  # own generator: global RNG untouched


def test_rank_shards_are_disjoint_and_equal(lengths):
    src, tgt = lengths
    shards = [token_batches(src, tgt, 800, seed=1, epoch=0, world_size=3, rank=r) for r in range(3)]
    assert len({len(s) for s in shards}) == 1
    seen = [i for s in shards for b in s for i in b]
    assert len(seen) == len(set(seen))
