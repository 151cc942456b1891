"""One name per place: a site's name finds the same activation through the hook points, capture, the activation
cache and patching; the old spellings still work, with a DeprecationWarning naming the release that drops them; a
misspelt name is refused with one line that lists the valid ones."""

from __future__ import annotations

import ast
import re
import warnings

import pytest
import torch

import workbench as wb
from workbench.errors import InterventionError, PatchingError, SiteNameError
from workbench.inspect.capture import capture_attention, hooks_remaining
from workbench.inspect.flow import rollout_from_cache
from workbench.inspect.intervene import ablate_heads, head_means
from workbench.inspect.patching import Site, activation_sites, cache_activations, patch, site_names
from workbench.inspect.patching_sweeps import position_family
from workbench.model.hook_points import hook_points
from workbench.model.sites import (
    ATTENTION_KINDS,
    OLD_KINDS,
    REMOVED_IN,
    KindDict,
    model_sites,
    site_name,
    split_site,
)


def _tiny(norm_first: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = wb.preset("tiny", d_model=32, n_heads=4, n_enc_layers=2, n_dec_layers=3, norm_first=norm_first)
    return wb.build_model(cfg, 30, 30).eval()


def _gru() -> torch.nn.Module:
    torch.manual_seed(0)
    return wb.build_rnn(wb.RNNConfig(d_model=16), 30, 30).eval()


def _small() -> torch.nn.Module:
    model, _, _ = wb.pretrained("small-de-en")
    return model.eval()


MODELS = {"tiny post-LN": lambda: _tiny(False), "tiny pre-LN": lambda: _tiny(True), "small-de-en": _small,
          "gru-de-en (random)": _gru}


def _inputs(model: torch.nn.Module, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    vocab = min(model.src_vocab_size, model.tgt_vocab_size)
    src = torch.randint(4, vocab, (2, 6), generator=g)
    src[1, -2:] = model.pad_id  # a ragged batch: padding in the second row
    tgt = torch.randint(4, vocab, (2, 5), generator=g)
    tgt[:, 0] = 2
    return src, tgt


def _record_hook_points(model: torch.nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> dict[str, torch.Tensor]:
    """What every hook point sees, by its module path, through plain torch hooks (no workbench code)."""
    seen, handles = {}, []
    for path, point in hook_points(model).items():
        handles.append(point.register_forward_hook(
            lambda _m, _i, out, path=path: seen.__setitem__(path, out.detach().cpu().clone())))
    try:
        with torch.no_grad():
            model(src, tgt)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("which", list(MODELS))
def test_every_site_name_finds_the_same_activation_everywhere(which):
    model = MODELS[which]()
    src, tgt = _inputs(model)
    sites = model_sites(model)
    points = hook_points(model)
    # every hook point has exactly one site name, and that name maps back to the very same module
    names = {path: site_name(path) for path in points}
    assert len(set(names.values())) == len(points)
    for path, name in names.items():
        assert sites[name] is points[path]
        assert site_name(name) == name and Site(path).name == name
    by_hook = _record_hook_points(model, src, tgt)

    with torch.no_grad(), capture_attention(model, scores=True, qkv=True, resid=True) as cache:
        model(src, tgt)
    assert set(cache) <= set(sites) and len(cache) > 0
    path_of = {name: path for path, name in names.items()}
    for name in cache:
        kind, layer, field = split_site(name)
        torch.testing.assert_close(cache[name], by_hook[path_of[name]], rtol=0, atol=0)
        short = (kind, layer) if field in (None, "pattern") else (kind, layer, field)
        assert cache[short] is cache[name] and cache[path_of[name]] is cache[name]
    n_dec = len(cache.layers("dec.cross"))
    assert n_dec >= 1 and cache["dec.cross", -1] is cache[f"dec.{n_dec - 1}.cross.pattern"]

    if not hasattr(model, "encoder_layers"):  # the GRU baseline: capture and hook points only; patching refuses it
        assert set(cache.layers("dec.cross")) == {0}
        with pytest.raises(PatchingError, match="not a workbench encoder-decoder Transformer"):
            activation_sites(model)
        return
    acts = cache_activations(model, src, tgt)
    assert list(acts) == site_names(model) and set(acts) <= set(sites)
    for name in acts:
        if name in cache:  # recorded by both: one tensor
            torch.testing.assert_close(acts[name].cpu(), cache[name], rtol=0, atol=0)
        if name in path_of:
            assert activation_sites(model)[name] is points[path_of[name]]
            assert acts[path_of[name]] is acts[name]
    # patching a site by any spelling writes the cached activation into that very module's output
    other_src, _ = _inputs(model, seed=7)
    for name in acts:
        seen = {}
        spelling = path_of.get(name, name)
        with torch.no_grad(), patch(model, acts, [spelling]) as chosen:
            # registered after patch's hook, so it sees what the module passes on
            handle = sites[name].register_forward_hook(lambda _m, _i, out, seen=seen: seen.__setitem__("x", out.clone()))
            try:
                model(other_src, tgt)
            finally:
                handle.remove()
        assert [s.name for s in chosen] == [name]
        torch.testing.assert_close(seen["x"], acts[name], rtol=0, atol=0)
    assert hooks_remaining(model) == 0


def test_memory_group_patches_the_cross_keys_and_values_of_its_layer():
    model = _tiny(False)
    src, tgt = _inputs(model)
    acts = cache_activations(model, src, tgt)
    with patch(model, acts, [Site("dec.1.memory", pos=2, head=1)]) as chosen:
        pass
    assert [(s.name, s.pos, s.head) for s in chosen] == [("dec.1.cross.k", 2, 1), ("dec.1.cross.v", 2, 1)]
    assert position_family("dec.memory") == "dec.memory"


OLD = [
    (("enc_self", 0), "enc.0.self.pattern"), (("dec_self", 1), "dec.1.self.pattern"),
    (("cross", 2), "dec.2.cross.pattern"), (("cross", 1, "q"), "dec.1.cross.q"), (("resid_enc", 1), "enc.1.resid"),
    (("resid_dec", 0), "dec.0.resid"), (("resid_enc", 1, "resid"), "enc.1.resid"),
]


@pytest.mark.parametrize("old, new", OLD)
def test_old_capture_keys_still_work_and_warn(old, new):
    model = _tiny(False)
    src, tgt = _inputs(model)
    with pytest.warns(DeprecationWarning, match=rf"{REMOVED_IN}") as record:
        with torch.no_grad(), capture_attention(model, kinds=[old[0]], qkv=True, resid=True) as cache:
            model(src, tgt)
        value = cache[old]
    assert value is cache[new]
    # the warning points at the caller's line (this file), not at the package
    assert all(w.filename == __file__ for w in record if issubclass(w.category, DeprecationWarning))
    assert any(repr(new) in str(w.message) for w in record)


def test_old_kinds_still_work_and_warn_in_interventions_sweeps_and_caches():
    model = _tiny(False)
    src, tgt = _inputs(model)
    with pytest.warns(DeprecationWarning, match="'cross' is an old site spelling.*'dec.cross'"):
        with ablate_heads(model, [("cross", 0, 1)]) as heads:
            pass
    assert heads == [("dec.cross", 0, 1)]
    means = head_means(model, [(src, tgt)])
    with pytest.warns(DeprecationWarning, match="enc_self"):
        assert means["enc_self", 1] is means["enc.self", 1]
    with pytest.warns(DeprecationWarning, match="'memory' is an old site spelling"):
        assert position_family("memory") == "dec.memory"
    with pytest.warns(DeprecationWarning, match="'resid_enc'"):
        assert position_family("resid_enc") == "enc.resid"
    gru = _gru()
    with torch.no_grad(), capture_attention(gru) as cache:
        gru(*_inputs(gru))
    with pytest.warns(DeprecationWarning, match="rnn_cross"):
        assert cache["rnn_cross", 0] is cache["dec.0.cross.pattern"]


def test_new_names_raise_no_deprecation_warning_inside_the_package():
    model = _tiny(True)
    src, tgt = _inputs(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with torch.no_grad(), capture_attention(model, kinds=["dec.cross", "enc.self"], resid=True) as cache:
            model(src, tgt)
        cache.stack("dec.cross"), cache.calls("dec.cross", 0), cache.layers("enc.resid")
        acts = cache_activations(model, src, tgt, sites=["dec.0.memory", "enc.1.resid"])
        with patch(model, acts, ["dec.0.memory", Site("enc.1.resid", pos=1)]):
            model(src, tgt)
        with ablate_heads(model, [("dec.self", -1, None)], mode="mean", means=head_means(model, [(src, tgt)])):
            model(src, tgt)
        with torch.no_grad(), capture_attention(model) as full:
            model(src[:1], tgt[:1])
        rollout_from_cache(full)


@pytest.mark.parametrize("bad, expected", [
    ("dec.0.cros.pattern", "unknown site 'dec.0.cros.pattern'"),
    ("enc.9.resid", "unknown site 'enc.9.resid'.*: the valid names here are"),
    (("crosss", 0), "unknown kind 'crosss'.*did you mean 'dec.cross'"),
    ("dec.cross", "that is a kind"),
    (("dec.cross", 0, "weights"), "unknown field 'weights'"),
])
def test_a_misspelt_site_gives_one_line_naming_the_valid_ones(bad, expected):
    model = _tiny(False)
    src, tgt = _inputs(model)
    with torch.no_grad(), capture_attention(model) as cache:
        model(src, tgt)
    acts = cache_activations(model, src, tgt)
    for attempt in (lambda: cache[bad], lambda: acts[bad], lambda: cache_activations(model, src, tgt, sites=[bad]),
                    lambda: site_name(bad, valid=site_names(model))):
        with pytest.raises(SiteNameError, match=expected) as info:
            attempt()
        message = str(info.value)
        assert "\n" not in message and not message.startswith("'")  # one plain line, not KeyError's repr
        # the family of errors a caller may already catch
        assert isinstance(info.value, KeyError | ValueError) and isinstance(info.value, PatchingError)
    with pytest.raises(SiteNameError, match="unknown attention kinds \\['crosss'\\]: choose from enc.self"):
        with capture_attention(model, kinds=["crosss"]):
            pass
    with pytest.raises(InterventionError, match="unknown attention kind 'crosss'.*dec.cross"):
        with ablate_heads(model, [("crosss", 0, 0)]):
            pass
    assert hooks_remaining(model) == 0


def test_a_large_model_lists_its_valid_names_folded_on_one_line():
    model = _small()
    with pytest.raises(SiteNameError) as info:
        site_name("dec.0.crss.z", valid=model_sites(model))  # every hook point: more than 30 names
    message = str(info.value)
    n = len(model.decoder_layers)
    assert "\n" not in message and "did you mean 'dec.0.cross.z'" in message and "enc.embed" in message
    assert f"dec.{{0..{n - 1}}}.cross.{{q,k,v,scores,pattern,z}}" in message


def _suggestion(key: tuple, n_layers: dict[str, int]) -> tuple[str, object]:
    """The canonical name of an old key and the spelling its DeprecationWarning suggests (as written there)."""
    with pytest.warns(DeprecationWarning) as record:
        name = site_name(key, n_layers=n_layers)
    messages = [str(w.message) for w in record if issubclass(w.category, DeprecationWarning)]
    m = re.search(r"is an old site spelling: write (.+?) \(the old spellings go", messages[0])
    assert m, messages[0]
    assert not m[1].startswith(("\"", "'(")), f"the suggestion is quoted twice: {messages[0]}"
    return name, ast.literal_eval(m[1])


@pytest.mark.parametrize("old", list(OLD_KINDS))
def test_every_old_spelling_suggests_a_spelling_that_is_accepted(old):
    n_layers = {"enc.self": 2, "enc.resid": 2, "dec.self": 3, "dec.cross": 3, "dec.resid": 3}
    keys = [(old, 1), (old, -1)] + ([(old, 0, "q"), (old, -1, "z")] if OLD_KINDS[old] in ATTENTION_KINDS else [])
    for key in keys:
        name, new = _suggestion(key, n_layers)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)  # the suggested spelling is not old itself
            assert site_name(new, n_layers=n_layers) == name, (key, new)
            # and the new kind takes the place of the old one in the same key
            assert site_name((OLD_KINDS[old], *key[1:]), n_layers=n_layers) == name, key


def test_a_group_kind_with_a_layer_is_a_site():
    assert site_name(("dec.memory", 1)) == "dec.1.memory"
    assert site_name(("dec.memory", -1), n_layers={"dec.cross": 3}) == "dec.2.memory"
    with pytest.raises(SiteNameError, match="dec.memory has no fields"):
        site_name(("dec.memory", 0, "k"))
    with pytest.raises(SiteNameError, match="unknown kind 'dec.memry'.*did you mean 'dec.memory'"):
        site_name(("dec.memry", 0))


def test_kind_dict_makes_old_spellings_canonical_in_every_method_that_takes_a_key():
    d = KindDict()
    with pytest.warns(DeprecationWarning, match="'cross' is an old site spelling: write 'dec.cross'"):
        d.update({"cross": 1})
    assert "dec.cross" in d and list(d) == ["dec.cross"]
    with pytest.warns(DeprecationWarning, match="'enc_self'"), pytest.warns(DeprecationWarning, match="'dec_self'"):
        d.update([(("enc_self", 0), 2)], dec_self=3)
    assert dict(d) == {"dec.cross": 1, ("enc.self", 0): 2, "dec.self": 3}
    with pytest.warns(DeprecationWarning, match="'memory'"):
        assert d.setdefault("memory", 4) == 4
    with pytest.warns(DeprecationWarning, match="'memory'"):
        assert d.setdefault("memory", 5) == 4
    with pytest.warns(DeprecationWarning, match="'memory'"):
        assert d.pop("memory") == 4
    with pytest.warns(DeprecationWarning, match="'memory'"):
        assert d.pop("memory", None) is None
    with pytest.warns(DeprecationWarning, match="'dec_self'"):
        del d["dec_self"]
    assert dict(d) == {"dec.cross": 1, ("enc.self", 0): 2}
    with pytest.warns(DeprecationWarning, match="'rnn_cross'"):
        merged = d | {"rnn_cross": 6}
    assert isinstance(merged, KindDict) and dict(merged) == {"dec.cross": 6, ("enc.self", 0): 2}
    with pytest.warns(DeprecationWarning, match="'resid_dec'"):
        d |= {"resid_dec": 7}
    assert isinstance(d, KindDict) and d["dec.resid"] == 7
    with pytest.warns(DeprecationWarning, match="'resid_enc'"):
        assert dict(KindDict.fromkeys(["resid_enc"], 0)) == {"enc.resid": 0}
    assert isinstance(d.copy(), KindDict) and d.copy() == d
    with pytest.warns(DeprecationWarning, match="'cross'"):
        assert dict({"cross": 8} | KindDict()) == {"dec.cross": 8}
