"""Greedy and beam search: cache agreement, paper settings, edge cases."""

from __future__ import annotations

import pytest
import torch

import workbench.translation.decode as decode
from tests._decoding import tiny_translator
from workbench import DecodingError, InputTextError, RNNConfig, build_model, build_rnn, preset
from workbench.translation.decode import beam_search, greedy_decode, length_penalty


@pytest.fixture(params=["transformer", "rnn"])
def model(request):
    return tiny_translator(request.param)


@pytest.fixture
def src():
    g = torch.Generator().manual_seed(1)
    s = torch.randint(4, 40, (4, 9), generator=g)
    s[1, 5:] = 0
    s[3, 2:] = 0
    return s


def test_cached_and_uncached_greedy_identical(model, src):
    a = greedy_decode(model, src, max_extra=12, use_cache=True)
    b = greedy_decode(model, src, max_extra=12, use_cache=False)
    assert torch.equal(a, b)


def test_cached_and_uncached_beam_identical(model, src):
    a, sa = beam_search(model, src, beam=4, max_extra=12, use_cache=True, return_scores=True)
    b, sb = beam_search(model, src, beam=4, max_extra=12, use_cache=False, return_scores=True)
    assert torch.equal(a, b)
    torch.testing.assert_close(sa, sb, atol=1e-5, rtol=1e-5)


def test_beam_one_equals_greedy(model, src):
    assert torch.equal(beam_search(model, src, beam=1, max_extra=10), greedy_decode(model, src, max_extra=10))


def test_length_budget_is_source_length_plus_extra(model, src):
    out = greedy_decode(model, src, max_extra=3)
    real = (src != 0).sum(-1)
    for row, n in zip(out, real.tolist(), strict=True):
        kept = row[row != 0]
        assert len(kept) <= n + 3 and kept[-1].item() == 3  # always ends in eos, within the budget
        if len(kept) < n + 3:
            assert (kept == 3).sum() == 1  # stopped early only because the model chose eos


def test_beam_finds_score_at_least_greedy(src):
    torch.manual_seed(5)
    model = build_model(preset("tiny", max_len=64), 40, 40).eval()
    greedy = greedy_decode(model, src, max_extra=6)
    best, scores = beam_search(model, src, beam=5, alpha=0.0, max_extra=6, return_scores=True)

    def logprob(seq_row, b):
        tgt = torch.cat([torch.tensor([2]), seq_row])
        eos = (seq_row == 3).nonzero()
        n = int(eos[0]) + 1 if len(eos) else len(seq_row)
        logits = model(src[b : b + 1], tgt[None, :n])
        return torch.log_softmax(logits[0], -1).gather(1, seq_row[:n, None]).sum().item()

    for b in range(src.shape[0]):
        assert scores[b].item() == pytest.approx(logprob(best[b], b), abs=1e-4)  # alpha=0: raw log-prob
        assert scores[b].item() >= logprob(greedy[b], b) - 1e-4


def test_bad_settings_raise_clear_errors(model, src):
    with pytest.raises(DecodingError, match="beam size 0"):
        beam_search(model, src, beam=0)
    with pytest.raises(DecodingError, match="larger than the target vocabulary"):
        beam_search(model, src, beam=41)
    with pytest.raises(InputTextError, match="max_len"):
        greedy_decode(model, torch.randint(4, 40, (1, 65)))


def test_length_penalty_formula():
    assert length_penalty(torch.tensor(1), 0.6).item() == pytest.approx(1.0)
    assert length_penalty(torch.tensor(10), 0.6).item() == pytest.approx((15 / 6) ** 0.6)
    lengths = torch.arange(300)
    alone = torch.stack([length_penalty(n, 1.4) for n in lengths])  # one length at a time
    assert torch.equal(length_penalty(lengths, 1.4), alone)  # the same number wherever it sits in a batch


def _fewer_rows_case(arch: str, monkeypatch) -> tuple:
    """A small model, 9 sources of mixed lengths, and the list every decoder step appends its row count to."""
    torch.manual_seed(3)
    if arch == "rnn":
        model = build_rnn(RNNConfig(d_model=32, n_layers=2, max_len=64), 40, 40).eval()
    else:
        model = build_model(preset("tiny", max_len=64), 40, 40).eval()
    src = torch.randint(4, 40, (9, 11), generator=torch.Generator().manual_seed(4))
    for row, n in enumerate([11, 3, 7, 2, 9, 5, 11, 4, 6]):
        src[row, n:] = 0
    rows_fed: list[int] = []
    real_step = decode._Stepper.__call__
    monkeypatch.setattr(decode._Stepper, "__call__", lambda self, prefix: rows_fed.append(len(prefix)) or
                        real_step(self, prefix))
    return model, src, rows_fed


@pytest.fixture(params=[1, 2], ids=lambda n: f"{n}thread")
def threads(request):
    """Run at 1 and at 2 CPU threads: a matrix product's rounding of a row can depend on how its batch's rows are
    split between threads, so the searches' row-saving must hold at both."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def _probe(model, src, rows: int, keep: torch.Tensor) -> bool:
    """What the searches ask before feeding fewer rows (asked with the encoder's output, as they do)."""
    with torch.no_grad():
        return decode.rows_round_alike(model.encode(src, model.src_mask(src)), rows, keep)


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_greedy_on_fewer_rows_finds_what_the_full_batch_finds(arch, threads, monkeypatch):
    """Finished sentences leaving the batch change nothing: the same tokens as decoding all B rows to the end."""
    model, src, rows_fed = _fewer_rows_case(arch, monkeypatch)
    fewer = greedy_decode(model, src, max_extra=8)
    assert rows_fed[0] == 9 and min(rows_fed) < 9  # all rows, then fewer
    monkeypatch.setattr(decode, "_SAME_ROUNDING_ROWS", 10**6)
    rows_fed.clear()
    full = greedy_decode(model, src, max_extra=8)
    assert set(rows_fed) == {9}
    assert torch.equal(fewer, full)


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_beam_search_on_fewer_rows_finds_what_the_full_batch_finds(arch, threads, monkeypatch):
    """Step 0 fed once per sentence and stopped sentences leaving the batch change nothing: same tokens, same
    scores to the bit, as the search that keeps all B*K rows to the end (both off when the row floor is out of
    reach). Step 0 is folded only where the probe finds 9 rows round as 36 do (at 2 threads on AVX-512 they do
    not: folding there changed the scores' last bits)."""
    model, src, rows_fed = _fewer_rows_case(arch, monkeypatch)
    fewer, s_fewer = beam_search(model, src, beam=4, max_extra=8, return_scores=True)
    folded = _probe(model, src, 36, torch.arange(0, 36, 4))  # one row per sentence
    # at one thread any 4 rows or more round as the whole batch (torch 2.13, AVX-512): step 0 must be folded there;
    # at two threads 9 rows do not (measured: folding them changed the scores' last bits), so the search must not
    assert folded or threads > 1
    assert rows_fed[:2] == ([9, 36] if folded else [36, 36]) and min(rows_fed) <= 8  # then fewer rows
    monkeypatch.setattr(decode, "_SAME_ROUNDING_ROWS", 10**6)
    rows_fed.clear()
    full, s_full = beam_search(model, src, beam=4, max_extra=8, return_scores=True)
    assert set(rows_fed) == {36}
    assert torch.equal(fewer, full)
    assert torch.equal(s_fewer, s_full)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_row_probe_sees_what_a_product_does(threads, dtype):
    """rows_round_alike answers for the product it is asked about, in the model's own format: wherever a layer's
    output on some rows of a batch differs from the same rows of the whole batch's output, the probe says so, row
    count by row count."""
    from workbench.translation.decode_steps import _probe_batch

    assert all(t.dtype == dtype for t in _probe_batch("cpu", dtype, threads, 48, 40))  # a bf16 model's products
    layer = torch.nn.Linear(48, 96, bias=False).to(dtype)
    x = torch.randn(40, 48, generator=torch.Generator().manual_seed(0)).to(dtype)
    refused = 0
    with torch.no_grad():
        full = layer(x)
        for fewer in range(1, 40):
            for keep in (torch.arange(fewer), torch.arange(40 - fewer, 40), torch.arange(0, 40, 40 / fewer).long()):
                if not torch.equal(layer(x[keep]), full[keep]):
                    assert not decode.rows_round_alike(x, 40, keep), keep.tolist()
                    refused += 1
    assert refused > 0 or dtype == torch.bfloat16  # fp32: single rows at least take another kernel (bf16 may not)


@pytest.mark.parametrize("V", [8000, 40, 640, 100])
def test_top_per_row_finds_what_topk_finds(V):
    """The grouped selection beam search ranks with returns torch.topk's values, and columns that hold them; ties
    (a bf16 logit row has many) included."""
    from workbench.translation.decode_steps import top_per_row

    g = torch.Generator().manual_seed(V)
    x = torch.log_softmax(torch.randn(64, V, generator=g) * 3, dim=-1)
    tied = x.to(torch.bfloat16).float()  # few distinct values: the 4 largest of a row often tie
    tied[0, :] = tied[0, 0]  # a row of one value
    for rows in (x, tied):
        for k in [k for k in (1, 4, 5, 12, 63, 64, 65, 100, 126) if k <= V]:  # beams past the 64 groups too
            values, cols = top_per_row(rows, k)
            assert torch.equal(values, rows.topk(k, dim=-1).values)
            assert torch.equal(rows.gather(1, cols), values)
            assert (cols.sort(-1).values.diff(dim=-1) > 0).all()  # k different columns
