"""Batches: shifted targets, token budget, coverage, deterministic shuffles, disjoint rank shards."""

from __future__ import annotations

import random

import pytest
import torch

from workbench.translation.batching import encode_pairs, make_batch, padded_length, token_batches
from workbench.translation.tokenizer import WordTokenizer


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


def test_padded_length_rounds_up_within_limit():
    assert [padded_length(n, 8) for n in (1, 7, 8, 9, 16, 17)] == [8, 8, 8, 16, 16, 24]
    assert padded_length(13, 1) == 13
    assert padded_length(30, 8, limit=28) == 30 and padded_length(25, 8, limit=28) == 28  # never below n
    with pytest.raises(ValueError, match="multiple"):
        padded_length(5, 0)


def test_bucketed_batches_land_in_buckets_and_keep_the_budget(lengths):
    src, tgt = lengths
    rng = random.Random(1)
    batches = token_batches(src, tgt, max_tokens=800, seed=1, epoch=0, pad_multiple=8)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    shapes = set()
    for idx in batches:
        src_ids = [[rng.randint(4, 99) for _ in range(src[i])] for i in idx]
        tgt_ids = [[2] + [rng.randint(4, 99) for _ in range(tgt[i] - 1)] + [3] for i in idx]  # length tgt[i] + 1
        b = make_batch(src_ids, tgt_ids, pad_id=0, pad_multiple=8)
        S, T = b.src.shape[1], b.tgt_in.shape[1]
        assert S % 8 == 0 and T % 8 == 0
        assert S - 8 < max(src[i] for i in idx) <= S and T - 8 < max(tgt[i] for i in idx) <= T
        assert len(idx) * (S + T) <= 800 or len(idx) == 1  # the budget holds on the padded shapes
        assert b.n_src_tokens == sum(src[i] for i in idx) and b.n_tgt_tokens == sum(tgt[i] for i in idx)
        shapes.add((S, T))
    # source and target lengths 3..45 give at most 6 x 6 buckets, whatever the number of batches
    assert len(batches) > 36 and len(shapes) <= 36
    capped = make_batch([[5] * 30], [[2] + [6] * 29 + [3]], pad_id=0, pad_multiple=8, max_len=31)
    assert capped.src.shape == (1, 31) and capped.tgt_in.shape == (1, 31)


def test_extra_padding_leaves_loss_and_gradients_unchanged():
    """Rounding lengths up adds only masked source keys and ignored target positions."""
    from workbench import build_model, preset
    from workbench.translation.train import step_loss

    rng = random.Random(2)
    src_ids = [[rng.randint(4, 59) for _ in range(n)] for n in (5, 9, 3)]
    tgt_ids = [[2] + [rng.randint(4, 59) for _ in range(n)] + [3] for n in (4, 10, 6)]
    plain, bucketed = make_batch(src_ids, tgt_ids, 0), make_batch(src_ids, tgt_ids, 0, pad_multiple=8)
    assert plain.src.shape == (3, 9) and bucketed.src.shape == (3, 16) and bucketed.tgt_in.shape == (3, 16)
    torch.manual_seed(0)
    model = build_model(preset("tiny"), 60, 60).train()  # tiny has dropout 0: both runs see the same function
    results = []
    for b in (plain, bucketed):
        model.zero_grad(set_to_none=True)
        loss, n = step_loss(model, model, b, pad_id=0, eps=0.1)
        loss.backward()
        results.append((loss.detach(), n, {k: p.grad.clone() for k, p in model.named_parameters()}))
    (l1, n1, g1), (l2, n2, g2) = results
    assert n1 == n2 == 23
    torch.testing.assert_close(l2, l1, rtol=1e-5, atol=1e-5)
    for k in g1:
        torch.testing.assert_close(g2[k], g1[k], rtol=1e-4, atol=1e-6, msg=k)


class _Counting(WordTokenizer):
    """A word tokenizer that counts how often it is asked to encode."""

    calls = 0

    def encode_src(self, texts, add_bos=False, add_eos=True):
        type(self).calls += 1
        return super().encode_src(texts, add_bos, add_eos)


def _pairs(n=40, seed=0):
    rng = random.Random(seed)
    words = "ein hund läuft über die wiese a dog runs across the meadow".split()
    return [(" ".join(rng.choices(words, k=rng.randint(1, 12))), " ".join(rng.choices(words, k=rng.randint(1, 12))))
            for _ in range(n)]


def test_encode_pairs_filters_by_length_and_encodes_the_same_data_once():
    pairs = _pairs()
    tok = _Counting.train(pairs)
    _Counting.calls = 0
    src, tgt = encode_pairs(tok, pairs, max_len=8)
    kept = [(s, t) for s, t in zip(tok.encode_src([p[0] for p in pairs]), tok.encode_tgt([p[1] for p in pairs]), strict=True)
            if len(s) <= 8 and len(t) - 1 <= 8]
    assert 0 < len(kept) < len(pairs) and (src, tgt) == ([s for s, _ in kept], [t for _, t in kept])
    _Counting.calls = 0
    src[0].append(999)  # the caller edits what it got back: nothing remembered changes
    src.pop()
    again = encode_pairs(tok, [tuple(p) for p in pairs], max_len=8)  # equal pairs, new objects
    assert _Counting.calls == 0 and again == ([s for s, _ in kept], [t for _, t in kept])
    encode_pairs(tok, pairs, max_len=9)  # another max_len
    encode_pairs(tok, pairs[:-1], max_len=8)  # other pairs
    assert _Counting.calls == 2


def test_encode_pairs_encodes_again_for_another_tokenizer_or_a_grown_vocabulary():
    pairs = _pairs()
    first, second = _Counting.train(pairs), _Counting.train([("ein hund", "a dog")])
    _Counting.calls = 0
    a, b = encode_pairs(first, pairs, 64), encode_pairs(second, pairs, 64)
    assert _Counting.calls == 2 and a != b  # the second tokenizer knows fewer words: more <unk>
    first.itos.append("new")  # a word added to its vocabulary
    first.stoi["new"] = len(first.itos) - 1
    encode_pairs(first, pairs, 64)
    assert _Counting.calls == 3


def test_encode_pairs_works_with_a_tokenizer_it_cannot_remember():
    class Unhashable(WordTokenizer):
        __hash__ = None

    pairs = _pairs(10)
    tok = Unhashable.train(pairs)
    assert encode_pairs(tok, pairs, 64) == encode_pairs(tok, pairs, 64) == (
        tok.encode_src([p[0] for p in pairs]), tok.encode_tgt([p[1] for p in pairs]))
