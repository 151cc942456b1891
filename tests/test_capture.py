"""Attention capture: complete, exact, and leaving no trace."""

from __future__ import annotations

import pytest
import torch

from workbench import RNNConfig, build_model, build_rnn, capture_attention, hooks_remaining, preset
from workbench.errors import SiteNameError
from workbench.inspect.site_cache import SiteCache


@pytest.fixture
def model_and_batch():
    torch.manual_seed(0)
    model = build_model(preset("tiny"), 50, 60).eval()
    src = torch.randint(4, 50, (2, 7))
    src[1, 4:] = 0
    tgt = torch.randint(4, 60, (2, 5))
    return model, src, tgt


def test_outputs_bit_identical_and_no_hook_left(model_and_batch):
    model, src, tgt = model_and_batch
    plain = model(src, tgt)
    with capture_attention(model, scores=True, qkv=True, resid=True) as cache:
        captured = model(src, tgt)
    assert torch.equal(plain, captured)
    assert hooks_remaining(model) == 0
    assert torch.equal(model(src, tgt), plain)
    assert len(cache) > 0


def test_every_kind_and_layer_recorded_with_shapes(model_and_batch):
    model, src, tgt = model_and_batch
    with capture_attention(model) as cache:
        model(src, tgt)
    H = model.cfg.n_heads
    for layer in range(2):
        assert cache["enc.self", layer].shape == (2, H, 7, 7)
        assert cache["dec.self", layer].shape == (2, H, 5, 5)
        assert cache["dec.cross", layer].shape == (2, H, 5, 7)
    assert torch.equal(cache["dec.cross", -1], cache["dec.cross", 1])
    assert cache["enc.self", 0].device.type == "cpu" and not cache["enc.self", 0].requires_grad
    # rows sum to one over allowed keys; padded keys get exactly zero
    enc = cache["enc.self", 0]
    torch.testing.assert_close(enc.sum(-1), torch.ones(2, H, 7))
    assert torch.all(enc[1, :, :, 4:] == 0)
    assert torch.all(cache["dec.self", 1].triu(1) == 0)
    assert cache.stack("dec.cross").shape == (2, 2, H, 5, 7)


def test_selection_and_optional_fields(model_and_batch):
    model, src, tgt = model_and_batch
    with capture_attention(model, kinds=["dec.cross"], layers=[-1], scores=True, qkv=True) as cache:
        model(src, tgt)
    assert cache.layers("dec.cross") == [1]
    assert ("enc.self", 0) not in cache
    with pytest.raises(KeyError, match="not recorded"):
        cache["dec.cross", 0]
    scores, q = cache["dec.cross", 1, "scores"], cache["dec.cross", 1, "q"]
    assert q.shape == (2, model.cfg.n_heads, 5, model.cfg.head_dim)
    k = cache["dec.cross", 1, "k"]
    torch.testing.assert_close(scores, q @ k.transpose(-2, -1) / model.cfg.head_dim**0.5)
    with pytest.raises(ValueError, match="unknown attention kinds"):
        with capture_attention(model, kinds=["encoder"]):
            pass


def test_one_kind_may_be_given_as_a_string(model_and_batch):
    model, src, tgt = model_and_batch
    with capture_attention(model, kinds="dec.cross") as one, capture_attention(model, kinds=["dec.cross"]) as listed:
        model(src, tgt)
    assert list(one) == list(listed) == ["dec.0.cross.pattern", "dec.1.cross.pattern"]
    assert torch.equal(one.stack("dec.cross"), listed.stack("dec.cross"))
    with pytest.warns(DeprecationWarning, match="'cross'"):
        with capture_attention(model, kinds="cross") as old:
            model(src, tgt)
    assert list(old) == list(one)
    with pytest.raises(SiteNameError, match=r"unknown attention kinds \['dec.crosss'\]"):
        with capture_attention(model, kinds="dec.crosss"):
            pass
    assert hooks_remaining(model) == 0


def test_stack_of_nothing_recorded_says_so(model_and_batch):
    model, src, tgt = model_and_batch
    with capture_attention(model, kinds=["dec.cross"]) as cache:
        model(src, tgt)
    for kind, expected in (("enc.resid", "'enc.\\*.resid' was not recorded.*resid=True"),
                           ("enc.self", "'enc.\\*.self.pattern' was not recorded")):
        with pytest.raises(SiteNameError, match=expected) as info:
            cache.stack(kind)
        assert "\n" not in str(info.value) and "recorded: dec.0.cross.pattern" in str(info.value)
    with pytest.raises(SiteNameError, match="'dec.\\*.cross.q' was not recorded"):
        cache.stack("dec.cross", "q")
    with pytest.raises(SiteNameError, match="this cache has nothing"):
        SiteCache().stack("dec.cross")


def test_stack_takes_the_layers_where_its_field_was_recorded():
    cache = SiteCache({"dec.cross": 3})
    q0, q1, p1 = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 5)
    cache._record("dec.0.cross.q", q0)
    cache._record("dec.1.cross.q", q1)
    cache._record("dec.1.cross.pattern", p1)
    assert cache.layers("dec.cross") == [0, 1]
    assert cache.layers("dec.cross", "pattern") == [1]
    assert torch.equal(cache.stack("dec.cross"), p1[None])  # the weights: layer 1 alone
    assert torch.equal(cache.stack("dec.cross", "q"), torch.stack([q0, q1]))
    with pytest.raises(SiteNameError, match="unknown field 'weights'"):
        cache.stack("dec.cross", "weights")


def test_residual_stream(model_and_batch):
    model, src, tgt = model_and_batch
    with capture_attention(model, kinds=[], resid=True) as cache:
        memory = model.encode(src)
    torch.testing.assert_close(cache["enc.resid", -1], memory)


def test_hooks_removed_when_body_raises(model_and_batch):
    model, src, tgt = model_and_batch
    with pytest.raises(RuntimeError, match="boom"):
        with capture_attention(model, scores=True, resid=True):
            model(src, tgt)
            raise RuntimeError("boom")
    assert hooks_remaining(model) == 0


def test_step_by_step_decoding_records_every_call(model_and_batch):
    model, src, tgt = model_and_batch
    src_mask = model.src_mask(src)
    memory = model.encode(src, src_mask)
    cache = model.init_cache()
    with capture_attention(model, kinds=["dec.self"]) as rec:
        for t in range(3):
            model.decode(tgt[:, t : t + 1], memory, src_mask, cache)
    calls = rec.calls("dec.self", 0)
    assert [c.shape[-1] for c in calls] == [1, 2, 3]


def test_rnn_attention_through_same_api():
    torch.manual_seed(0)
    model = build_rnn(RNNConfig(d_model=16), 30, 40).eval()
    src = torch.randint(4, 30, (2, 6))
    src[0, 3:] = 0
    tgt = torch.randint(4, 40, (2, 4))
    plain = model(src, tgt)
    with capture_attention(model) as cache:
        out = model(src, tgt)
    assert torch.equal(plain, out) and hooks_remaining(model) == 0
    w = cache["dec.cross", 0]
    assert w.shape == (2, 1, 4, 6)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 1, 4))
    assert torch.all(w[0, :, :, 3:] == 0)


@pytest.mark.parametrize("name", ["hook_q", "hook_k", "hook_v", "hook_z"])
def test_a_hook_on_one_point_alone_fires_and_acts(model_and_batch, name):
    """Each hook point is tapped on its own: a hook on ``hook_k`` or ``hook_v`` alone (no ``hook_q``) must run,
    and what it returns must be what the attention uses (zeroing the values zeroes the heads' outputs)."""
    model, src, tgt = model_and_batch
    block = model.encoder_layers[0].self_attn
    plain = model(src, tgt)
    seen = []

    def zero(_m, _inp, out):
        seen.append(out.shape)
        return torch.zeros_like(out)

    handle = getattr(block, name).register_forward_hook(zero)
    try:
        hooked = model(src, tgt)
    finally:
        handle.remove()
    assert len(seen) == 1 and seen[0][:2] == (2, model.cfg.n_heads)
    assert not torch.equal(hooked, plain)  # the replaced tensor reached the output
    assert hooks_remaining(model) == 0 and torch.equal(model(src, tgt), plain)


def test_a_forward_pre_hook_counts_as_listening(model_and_batch):
    model, src, tgt = model_and_batch
    block = model.encoder_layers[0].self_attn
    seen = []
    handle = block.hook_v.register_forward_pre_hook(lambda _m, inp: seen.append(inp[0].shape))
    try:
        assert block.hook_v.active() and hooks_remaining(model) == 1
        model(src, tgt)
    finally:
        handle.remove()
    assert len(seen) == 1 and not block.hook_v.active() and hooks_remaining(model) == 0


def test_rnn_queries_keys_values_recorded():
    """The RNN baseline's attention carries hook_q/k/v too: ``qkv=True`` must record them (one head)."""
    torch.manual_seed(0)
    model = build_rnn(RNNConfig(d_model=16), 30, 40).eval()
    src, tgt = torch.randint(4, 30, (2, 6)), torch.randint(4, 40, (2, 4))
    plain = model(src, tgt)
    with capture_attention(model, qkv=True) as cache:
        out = model(src, tgt)
    assert torch.equal(plain, out) and hooks_remaining(model) == 0
    q, k, v = (cache["dec.cross", 0, f] for f in ("q", "k", "v"))
    assert q.shape == (2, 1, 4, 16) and k.shape == v.shape == (2, 1, 6, 16)
    # the recorded weights are the softmax of the recorded queries against the recorded keys
    torch.testing.assert_close(cache["dec.cross", 0], torch.softmax(q @ k.transpose(-2, -1), dim=-1))


def test_the_model_does_not_import_the_capture_side_door():
    """The model's modules (``workbench/model/``) own hook points and import nothing from inspection, presentation,
    tools or translation: capture imports them, never the other way round."""
    import ast
    import pathlib

    import workbench

    folder = pathlib.Path(workbench.__file__).parent / "model"
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        outside = {m for m in imported if m.startswith(("workbench.inspect", "workbench.viz", "workbench.tools",
                                                         "workbench.translation", "workbench.lessons"))}
        assert not outside, f"{path.name} imports {sorted(outside)}"
    uses = (folder / "attention.py").read_text() + (folder / "transformer.py").read_text()
    assert "workbench.model.hook_points" in uses


def test_layers_are_named_by_their_place_in_the_model(model_and_batch):
    """Kinds and layers come from ``named_modules()``: a layer appended to a stack is the next layer (not a second
    call of the one it was copied from), also when the model sits inside a wrapper that prefixes every name."""
    import copy

    model, src, tgt = model_and_batch
    model.encoder_layers.append(copy.deepcopy(model.encoder_layers[0]))
    wrapper = torch.nn.ModuleDict({"translator": model})
    with capture_attention(wrapper, resid=True) as cache:
        memory = model.encode(src)
    assert cache.layers("enc.self") == cache.layers("enc.resid") == [0, 1, 2]
    assert len(cache.calls("enc.self", 0)) == 1
    torch.testing.assert_close(cache["enc.resid", -1], memory)
