"""Decoding asks the host at most one question per step, and its key/value cache is preallocated.

A host synchronisation (``.item()``, ``bool(tensor)``, ``.tolist()``, ``nonzero``, boolean-mask indexing, ...) makes
the CPU wait for an accelerator's queue: one inside every layer turns a GPU decoder launch-bound. These tests count
them on the CPU (tests/_host_syncs.py) in greedy and beam search, per decoding step, and plant one to show the
count sees it. The preallocated cache must give the very tokens and scores of the growing one.
"""

from __future__ import annotations

import pytest
import torch

import workbench.translation.decode as decode
import workbench.translation.decode_steps as decode_steps
from tests._decoding import padded_src, tiny_translator
from tests._host_syncs import count_host_syncs
from workbench import build_model, preset
from workbench.translation.decode import beam_search, greedy_decode
from workbench.translation.decode_steps import PreallocatedKVCache


@pytest.fixture(params=["transformer", "rnn"])
def model(request):
    return tiny_translator(request.param)


@pytest.fixture
def src():
    return padded_src([11, 3, 7, 2, 9, 5, 11, 4, 6], seed=3)


def _search(kind: str, model, src):
    if kind == "greedy":
        return greedy_decode(model, src, max_extra=10)
    return beam_search(model, src, beam=4, max_extra=10)


def _accelerator_policy(monkeypatch) -> None:
    """The batch keeps its shape, as on an accelerator (decode.drops_rows)."""
    monkeypatch.setattr(decode, "drops_rows", lambda device: False)


@pytest.fixture(autouse=True)
def _preallocated(monkeypatch):
    """Every search here keeps its cache in preallocated buffers, as off the CPU (decode_steps.preallocates)."""
    monkeypatch.setattr(decode_steps, "preallocates", lambda device: True)


@pytest.mark.parametrize("kind", ["greedy", "beam"])
@pytest.mark.parametrize("policy", ["accelerator", "cpu"])
def test_at_most_one_host_sync_per_decoding_step(model, src, kind, policy, monkeypatch):
    """Every step (the decoder's work, the selection, the bookkeeping) makes at most one synchronising call.

    With the CPU's policy a step where sentences stop also runs :func:`rows_round_alike`, a probe that compares two
    CPU products; it never runs on an accelerator (the accelerator policy above counts everything)."""
    if policy == "accelerator":
        _accelerator_policy(monkeypatch)
    exempt = ((decode, "rows_round_alike"),) if policy == "cpu" else ()
    with count_host_syncs(monkeypatch, step=(decode._Stepper, "__call__"), exempt=exempt) as log:
        _search(kind, model, src)
    per_step = log.per_step()
    assert len(per_step) >= 3, "the search ran too few steps to say anything"
    assert max(per_step) <= 1, f"host synchronisations per step {per_step}: {log.syncs()}"
    assert sum(per_step) >= len(per_step) - 1  # the stop check is counted: the counter sees the loop's own sync


@pytest.mark.parametrize("kind", ["greedy", "beam"])
def test_the_count_sees_a_planted_sync(model, src, kind, monkeypatch):
    """A decoder that reads one value on the host inside its per-layer work fails the property above."""
    _accelerator_policy(monkeypatch)
    real_decode = type(model).decode

    def decode_with_a_sync(self, tgt, memory, src_mask, cache=None):
        out = real_decode(self, tgt, memory, src_mask, cache)
        if float(out.abs().max()) > 1e9:  # a planted host read, as a careless layer would do
            raise AssertionError("unreachable")
        return out

    monkeypatch.setattr(type(model), "decode", decode_with_a_sync)
    with count_host_syncs(monkeypatch, step=(decode._Stepper, "__call__")) as log:
        _search(kind, model, src)
    assert max(log.per_step()) >= 2
    assert "__float__" in log.syncs()


@pytest.mark.parametrize("kind", ["greedy", "beam"])
@pytest.mark.parametrize("policy", ["accelerator", "cpu"])
def test_preallocated_cache_finds_the_growing_caches_tokens(src, kind, policy, monkeypatch):
    """Keys and values written into preallocated buffers give, bit for bit, the scores of the cache that grows
    with torch.cat (and of decoding without a cache)."""
    torch.manual_seed(0)
    model = build_model(preset("tiny", max_len=64), 40, 40).eval()
    if policy == "accelerator":
        _accelerator_policy(monkeypatch)
    monkeypatch.setattr(decode_steps, "preallocates", lambda device: True)  # as off the CPU
    pre = beam_search(model, src, beam=4, max_extra=10, return_scores=True) if kind == "beam" else \
        greedy_decode(model, src, max_extra=10)
    allocated = []
    real_init = PreallocatedKVCache.__init__
    monkeypatch.setattr(PreallocatedKVCache, "__init__",
                        lambda self, capacity: allocated.append(capacity) or real_init(self, capacity))
    again = beam_search(model, src, beam=4, max_extra=10, return_scores=True) if kind == "beam" else \
        greedy_decode(model, src, max_extra=10)
    assert allocated and set(allocated) == {21}  # one buffer per decoder layer, the whole budget (11 + 10)
    real_stepper = decode_steps._Stepper.__init__

    def growing(self, model, memory, src_mask, use_cache, capacity=None, graphs=False):
        real_stepper(self, model, memory, src_mask, use_cache, capacity=None, graphs=graphs)

    monkeypatch.setattr(decode_steps._Stepper, "__init__", growing)
    grown = beam_search(model, src, beam=4, max_extra=10, return_scores=True) if kind == "beam" else \
        greedy_decode(model, src, max_extra=10)
    for a, b in zip(pre if kind == "beam" else (pre,), grown if kind == "beam" else (grown,), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(pre if kind == "beam" else (pre,), again if kind == "beam" else (again,), strict=True):
        assert torch.equal(a, b)


def test_the_cpu_keeps_the_growing_cache(monkeypatch):
    monkeypatch.undo()  # the module's fixture aside: the CPU's own policy
    assert not decode_steps.preallocates(torch.device("cpu")) and decode_steps.preallocates(torch.device("meta"))


def test_preallocated_cache_writes_in_place():
    """A step writes into the buffers it was given: the storage never changes while the batch keeps its rows, and
    beam reordering moves rows inside it."""
    cache = PreallocatedKVCache(capacity=6)
    k = torch.arange(2 * 1 * 1 * 3, dtype=torch.float32).view(2, 1, 1, 3)  # (N, H, t, d_head)
    cache.append(k, k + 100)
    storage = cache.k.untyped_storage().data_ptr()
    cache.append(k + 1, k + 101)
    assert cache.length == 2 and cache.k.shape == (2, 1, 2, 3)
    assert cache.k.untyped_storage().data_ptr() == storage
    assert torch.equal(cache.k[:, :, 1:], k + 1)
    cache.reorder(torch.tensor([1, 1]))
    assert cache.k.untyped_storage().data_ptr() == storage
    assert torch.equal(cache.k[0], cache.k[1]) and torch.equal(cache.v[0, :, 0], k[1, :, 0] + 100)
    cache.reorder(torch.tensor([0]))  # fewer rows: new buffers, same contents
    assert cache.k.shape == (1, 1, 2, 3) and torch.equal(cache.k[0, :, 1], k[1, :, 0] + 1)
    for _ in range(5):  # past the capacity it grows rather than fails
        cache.append(k[:1], k[:1])
    assert cache.length == 7


# -- batches by a token budget (an accelerator's) -------------------------------------------------------------------
def test_token_budget_batches_keep_order_and_budget():
    lengths = [2, 3, 3, 5, 8, 8, 9, 20]
    batches = decode.token_budget_batches(lengths, max_tokens=24, beam=2, items=list(range(8)))
    assert [i for b in batches for i in b] == list(range(8))  # every item once, in the sorted order
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) * 2 <= 24
    assert batches[-1] == [7]  # 20 * 2 = 40 > 24: an item over the budget still gets a batch of its own
    assert len(batches) < len(lengths)  # short items share batches


def test_decode_token_budget_is_sized_from_the_device():
    """None on the CPU (batches of a fixed number of sentences, as before); on an accelerator it grows with the
    device's memory, within its bounds."""
    model = build_model(preset("small", max_len=64), 8000, 8000)
    assert decode.decode_token_budget("cpu", model, beam=4) is None
    small = decode.decode_token_budget("cpu", model, beam=4, memory_bytes=8 << 30)
    large = decode.decode_token_budget("cpu", model, beam=4, memory_bytes=80 << 30)
    assert 4096 <= small < large <= 1 << 18


def test_translate_with_a_token_budget_translates_alike(subword_tokenizer):
    """Batches cut by a token budget change what is batched with what, not the translations."""
    torch.manual_seed(0)
    tok = subword_tokenizer
    model = build_model(preset("tiny", max_len=64), tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id).eval()
    sentences = ["Ein Hund läuft.", "Zwei Männer spielen Fußball im Park.", "", "Eine Frau liest ein Buch.",
                 "Kinder spielen am Strand mit einem roten Ball und lachen."] * 3
    fixed = decode.translate(model, tok, sentences, beam=2, batch_size=4, max_extra=6)
    budget = decode.translate(model, tok, sentences, beam=2, max_extra=6, max_tokens=60)
    assert budget == fixed and budget[2] == ""
