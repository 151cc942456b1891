"""Decoding you can watch: the traced beam's re-ranking returns beam_search's winner at every alpha, the tree is
consistent with the beam, greedy's trace is greedy's output, the cache's bytes and the step's multiply-adds match
their formulas, and the figures draw them."""

from __future__ import annotations

import pytest
import torch

from workbench import DecodingError, InputTextError, RNNConfig, build_model, build_rnn, preset
from workbench.inspect.greedy_trace import trace_greedy
from workbench.lessons.measure import counted_flops
from workbench.translation.decode import beam_search, greedy_decode
from workbench.translation.decode_trace import cache_bytes, kv_cache_bytes, rerank, trace_beam
from workbench.translation.flops import decode_step_macs

ALPHAS = (0.0, 0.3, 0.6, 1.0, 1.4, 2.0, 3.0)


def _tiny(seed: int, eos_bias: float = 0.0, arch: str = "transformer"):
    torch.manual_seed(seed)
    if arch == "rnn":
        model = build_rnn(RNNConfig(d_model=32, n_layers=1, max_len=64), 30, 30).eval()
    else:
        model = build_model(preset("tiny", max_len=64), 30, 30).eval()
    if eos_bias:  # make eos likelier so hypotheses finish at different lengths
        with torch.no_grad():
            model.generator.weight[3] += eos_bias * model.generator.weight[3].sign()
    return model


def _stripped(row: torch.Tensor) -> list[int]:
    return [int(i) for i in row.tolist() if i != 0]


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_reranked_winner_is_beam_search_winner_on_tiny_random_models(arch):
    changed = 0
    cases = 0
    for seed in range(6):
        model = _tiny(seed, eos_bias=0.0 if seed % 2 else 0.5, arch=arch)
        g = torch.Generator().manual_seed(seed)
        for n in (3, 6, 9):
            src = torch.randint(4, 30, (1, n), generator=g)
            for beam, max_extra in ((4, 5), (3, 8), (2, 3)):
                trace = trace_beam(model, src, beam=beam, max_extra=max_extra)
                winners = set()
                for alpha in ALPHAS:
                    ranking = rerank(trace, alpha)
                    want, score = beam_search(model, src, beam=beam, alpha=alpha, max_extra=max_extra,
                                              return_scores=True)
                    got = trace.hypothesis(ranking.winner)
                    assert got == _stripped(want[0]), (seed, n, beam, alpha)
                    if ranking.winner in ranking.normalised:
                        assert ranking.normalised[ranking.winner] == pytest.approx(float(score[0]), abs=1e-6)
                    winners.add(tuple(got))
                changed += len(winners) > 1
                cases += 1
    assert changed >= 3, f"alpha changed the winner in only {changed} of {cases} cases: the test would not see a wrong replay"


def test_reranked_winner_is_beam_search_winner_on_the_shipped_model():
    import workbench as wb

    model, tok, _ = wb.pretrained("small-de-en")
    sentences = ["Ein halbnackter Mann schläft draußen auf seinem Stuhl.",
                 "Drei Menschen auf zwei Geländemotorrädern und einem Quad fahren durch braunes Gras.",
                 "Ein Hund rennt durch den Schnee."]
    differs = 0
    for sentence in sentences:
        src = torch.tensor(tok.encode_src([sentence]))
        trace = trace_beam(model, src, beam=4, bos_id=tok.bos_id, eos_id=tok.eos_id)
        winners = []
        for alpha in (0.0, 0.6, 1.0, 1.4, 2.0):
            want = beam_search(model, src, beam=4, alpha=alpha, bos_id=tok.bos_id, eos_id=tok.eos_id)
            winners.append(trace.hypothesis(rerank(trace, alpha).winner))
            assert winners[-1] == _stripped(want[0]), (sentence, alpha)
        differs += winners[1] != winners[3]
    assert differs >= 1  # the first two sentences change winner between alpha 0.6 and 1.4 (measured: both do)


def test_tree_is_consistent_with_the_beam():
    model = _tiny(0, eos_bias=0.5)
    src = torch.randint(4, 30, (1, 7), generator=torch.Generator().manual_seed(3))
    trace = trace_beam(model, src, beam=4, max_extra=6)
    assert trace.steps >= 1 and trace.limit == 7 + 6
    for t, rows in enumerate(trace.beams):
        live = [i for i in rows if i >= 0]
        assert len(live) == len(set(live))  # a hypothesis occupies one row
        for row, node in enumerate(rows):
            if node < 0:
                continue
            n = trace.nodes[node]
            assert n.status in ("kept", "finished")
            assert n.step <= t and (n.step == t or n.status == "finished")  # only finished ones are carried on
            assert len(trace.hypothesis(node)) == int(trace.lengths[t, row]) == n.step
            assert n.logp == pytest.approx(float(trace.scores[t, row]))
    pruned = [n for n in trace.nodes if n.status == "pruned"]
    assert pruned and all(all(n.id not in rows for rows in trace.beams) for n in pruned)
    for n in trace.nodes[1:]:  # a child's log-probability is its parent's plus a log-probability (<= 0)
        assert n.logp <= trace.nodes[n.parent].logp + 1e-6
    for node in trace.finished():
        assert trace.hypothesis(node)[-1] == 3


def test_trace_refuses_batches_and_replay_needs_steps():
    model = _tiny(0)
    with pytest.raises(InputTextError, match=r"shape \(1, S\)"):
        trace_beam(model, torch.randint(4, 30, (2, 5)))
    with pytest.raises(DecodingError, match="k=0"):
        trace_greedy(model, torch.randint(4, 30, (1, 5)), k=0)


def test_greedy_trace_is_greedy_decoding_with_its_attention():
    model = _tiny(1, eos_bias=0.3)
    src = torch.randint(4, 30, (1, 8), generator=torch.Generator().manual_seed(2))
    trace = trace_greedy(model, src, k=5, max_extra=6)
    assert trace.tokens == _stripped(greedy_decode(model, src, max_extra=6)[0])
    assert trace.top_ids[:, 0].tolist() == trace.tokens  # the emitted token is the most probable one
    assert bool((trace.top_probs[:, :-1] >= trace.top_probs[:, 1:]).all())
    T, L, H, S = trace.cross.shape
    assert (T, L, S) == (len(trace.tokens), model.cfg.n_dec_layers, 8) and H == model.cfg.n_heads
    torch.testing.assert_close(trace.cross.sum(-1), torch.ones(T, L, H))
    # the rows are those of a teacher-forced pass over the same output (the cache changes nothing)
    import workbench as wb

    tgt_in = torch.tensor([[2, *trace.tokens[:-1]]])
    with wb.capture_attention(model, kinds=["dec.cross"]) as cache:
        model(src, tgt_in)
    forced = torch.stack([cache["dec.cross", layer][0] for layer in range(L)]).permute(2, 0, 1, 3)  # (T, L, H, S)
    torch.testing.assert_close(trace.cross, forced, atol=1e-5, rtol=1e-5)
    assert wb.hooks_remaining(model) == 0


def test_cache_bytes_match_the_formula_step_by_step():
    model = _tiny(0)
    src = torch.randint(4, 30, (3, 6), generator=torch.Generator().manual_seed(0))
    memory, mask = model.encode(src), model.src_mask(src)
    cache = model.init_cache()
    tokens = torch.full((3, 1), 2)
    for step in range(1, 6):
        model.decode(tokens, memory, mask, cache)
        assert cache_bytes(cache) == kv_cache_bytes(model.cfg, step, 6, batch=3)
        tokens = torch.randint(4, 30, (3, 1))


@pytest.mark.parametrize("cached", [True, False])
def test_decode_step_macs_match_counted_matrix_products(cached):
    """FlopCounterMode counts every matrix product but not the fused CPU attention kernel: the counted FLOPs are
    twice the formula's multiply-adds without its attention part."""
    model = _tiny(0)
    src = torch.randint(4, 30, (1, 7), generator=torch.Generator().manual_seed(0))
    memory, mask = model.encode(src), model.src_mask(src)
    cache = model.init_cache() if cached else None
    prefix = [2]
    for step in range(1, 5):
        fed = torch.tensor([prefix[-1:] if cached else prefix])
        counted = counted_flops(lambda fed=fed: model.decode(fed, memory, mask, cache))
        parts = decode_step_macs(model.cfg, step, 7, model.tgt_vocab_size, cached)
        assert counted == 2 * (parts["total"] - parts["attention"]), (step, parts)
        prefix.append(5)
    assert decode_step_macs(model.cfg, 3, 7, 30, cached=True)["total"] < decode_step_macs(model.cfg, 3, 7, 30, False)["total"]
    with pytest.raises(ValueError, match="step=0"):
        decode_step_macs(model.cfg, 0, 7, 30, cached=True)


def test_decoding_figures_draw_the_trace():
    from workbench.viz import decoding_figures as df
    from workbench.viz.figures import FigureInputError

    model = _tiny(0, eos_bias=0.5)
    src = torch.randint(4, 30, (1, 5), generator=torch.Generator().manual_seed(4))
    trace = trace_beam(model, src, beam=3, max_extra=4)
    ranking = rerank(trace, 0.6)
    fig = df.beam_tree_figure(trace, lambda i: f"t{i}", ranking)
    names = {tr.name for tr in fig.data}
    assert {"kept", "pruned"} <= names and "winner at α = 0.6" in names
    markers = [tr for tr in fig.data if tr.mode == "markers+text"]
    assert sum(len(tr.x) for tr in markers) == len(trace.nodes)  # every node drawn once
    g = trace_greedy(model, src, k=3, max_extra=4)
    fig = df.topk_figure([f"step {t}" for t in range(len(g.tokens))], [[f"t{i}" for i in row] for row in g.top_ids.tolist()],
                         g.top_probs)
    assert len(fig.data) == len(g.tokens)
    with pytest.raises(FigureInputError, match="top_probs must be"):
        df.topk_figure(["a"], [["x"]], g.top_probs)
    fig = df.kv_cache_figure([1, 2], [10, 20], [5, 5], [5, 9])
    assert len(fig.data) == 3
    with pytest.raises(FigureInputError, match="3 values for 2 steps"):
        df.kv_cache_figure([1, 2], [10, 20, 30], [5, 5], [5, 9])
    fig = df.alpha_figure([0.0, 1.0], {"a": [-1, -0.5], "b": [-2, -0.4]}, ["a", "b"])
    assert list(fig.data[-1].y) == [-1, -0.4]
    with pytest.raises(FigureInputError, match="not among"):
        df.alpha_figure([0.0, 1.0], {"a": [-1, -0.5]}, ["a", "c"])


def test_length_penalty_explorer_follows_its_slider():
    from workbench.viz.decoding_widgets import LengthPenaltyExplorer

    model = _tiny(0, eos_bias=0.5)
    for seed in range(20):  # a sentence whose winner changes with alpha
        src = torch.randint(4, 30, (1, 6), generator=torch.Generator().manual_seed(seed))
        trace = trace_beam(model, src, beam=4, max_extra=6)
        if len({rerank(trace, a).winner for a in (0.0, 3.0)}) == 2:
            break
    else:
        pytest.fail("no sentence of the 20 tried changes winner between alpha 0 and 3")
    explorer = LengthPenaltyExplorer(trace, lambda ids: " ".join(map(str, ids)), alpha=0.0)
    first = explorer.ranking.winner
    explorer.slider.value = 3.0
    assert explorer.ranking.winner != first and explorer.ranking.winner == rerank(trace, 3.0).winner
    colors = list(explorer.figure.data[0].marker.color)
    assert colors.count("#c53030") == (1 if explorer.ranking.winner in trace.finished() else 0)
    assert list(explorer.figure.data[0].x) == [rerank(trace, 3.0).normalised[i] for i in trace.finished()]
