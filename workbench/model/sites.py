"""Site names: one name for every place in the model that inspection reads or changes.

A *site* is one activation of the forward pass. Capture (:func:`~workbench.inspect.capture.capture_attention`),
the attention and activation caches, patching (:mod:`workbench.inspect.patching`), interventions, the lens, DAS, the
sink audit, the inspectors and the figures all name it the same way, after the paper's Figure 1: the stack
(``enc`` or ``dec``), the layer, the attention (``self`` or ``cross``) and what is read there.

=================================  ======================  ================================================
site                               shape                   what it is
=================================  ======================  ================================================
``enc.embed``                      (B, S, d_model)         source embeddings (times sqrt(d_model)) plus positions
``enc.{l}.self.q`` / ``.k``        (B, H, S, d_head)       encoder layer ``l``'s self-attention queries / keys
``enc.{l}.self.v``                 (B, H, S, d_v)          ... its values
``enc.{l}.self.scores``            (B, H, S, S)            ... its scaled scores QK^T / sqrt(d_head), before masking
``enc.{l}.self.pattern``           (B, H, S, S)            ... its attention weights, per head
``enc.{l}.self.z``                 (B, H, S, d_v)          ... every head's output, before W^O
``enc.{l}.resid``                  (B, S, d_model)         the encoder residual stream after layer ``l``
``dec.embed``                      (B, T, d_model)         target embeddings plus positions
``dec.{l}.self.*``                 as above, T for S       decoder layer ``l``'s masked self-attention
``dec.{l}.cross.q``                (B, H, T, d_head)       its encoder-decoder attention's queries ...
``dec.{l}.cross.k`` / ``.v``       (B, H, S, d_head/d_v)   ... the *memory* keys and values it reads ...
``dec.{l}.cross.scores/pattern``   (B, H, T, S)            ... its scores and weights ...
``dec.{l}.cross.z``                (B, H, T, d_v)          ... and every head's output, before W^O
``dec.{l}.memory``                 (group)                 ``dec.{l}.cross.k`` and ``dec.{l}.cross.v`` together
``dec.{l}.resid``                  (B, T, d_model)         the decoder residual stream after layer ``l``
=================================  ======================  ================================================

The recurrent baseline (:class:`~workbench.model.rnn.RNNSeq2Seq`) has one attention, of decoder states over the
encoder states: ``dec.0.cross.{q,k,v,scores,pattern}`` (one head, H = 1).

A *kind* is a site name without its layer: ``enc.self``, ``dec.self``, ``dec.cross`` (attention), ``enc.resid``,
``dec.resid`` (residual stream) and ``dec.memory``. With a layer it gives a site: ``cache["dec.cross", 0]`` is
``cache["dec.0.cross.pattern"]`` (the weights; ``cache["dec.cross", 0, "q"]`` the queries), as TransformerLens's
``cache["pattern", 0]`` is ``blocks.0.attn.hook_pattern``. Negative layers count from the last where a cache
knows how many layers there are.

The hook points themselves (:mod:`workbench.model.hook_points`) keep their module paths, which checkpoints and
``model.get_submodule`` need: ``encoder_layers.2.hook_resid`` *is* ``enc.2.resid`` and is accepted everywhere a
site name is (a ``torch.compile`` or DDP prefix too). :func:`model_sites` maps every site of a model to its module.

Spellings before this scheme, accepted with a :class:`DeprecationWarning` until workbench |REMOVED_IN|:

============================================  =====================================  ===============================
old spelling                                  new name                               where it was used
============================================  =====================================  ===============================
``("enc_self", l)``, ``("enc_self", l, f)``   ``enc.{l}.self.pattern``, ``.{f}``     capture keys, ``kinds=``
``("dec_self", l)``                           ``dec.{l}.self.pattern``               capture keys, ``kinds=``
``("cross", l)``                              ``dec.{l}.cross.pattern``              capture keys, ``kinds=``
``("rnn_cross", 0)``                          ``dec.0.cross.pattern``                capture of the GRU baseline
``("resid_enc", l)``, ``("resid_dec", l)``    ``enc.{l}.resid``, ``dec.{l}.resid``   capture keys (``resid=True``)
kind ``"enc_self"`` / ``"dec_self"``          ``"enc.self"`` / ``"dec.self"``        heads ``(kind, layer, head)``,
kind ``"cross"`` / ``"rnn_cross"``            ``"dec.cross"``                        sweeps, sink table, inspectors
family ``"resid_enc"`` / ``"resid_dec"``      ``"enc.resid"`` / ``"dec.resid"``      patching sweeps, lessons 14-15
family ``"memory"``                           ``"dec.memory"``                       patching sweeps, lessons 14-15
``encoder_layers.2.hook_resid`` (hook path)   ``enc.2.resid``                        accepted, no warning
``enc.2.resid``, ``dec.0.cross.z`` (patching) unchanged                              patching sites
============================================  =====================================  ===============================

:func:`site_name` turns any accepted spelling into the canonical name, and refuses a bad one with a one-line
:class:`~workbench.errors.SiteNameError` naming the valid names (and the closest one).
"""

from __future__ import annotations

import contextlib
import difflib
import re
import sys
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from torch import nn

from workbench.errors import SiteNameError

__all__ = [
    "ATTENTION_KINDS", "FIELDS", "KINDS", "OLD_KINDS", "REMOVED_IN", "RESID_KINDS", "KindDict", "describe_sites",
    "expand_site", "kind_key", "kind_name", "model_sites", "site_kind", "site_name", "split_site",
]

_REMOVED_IN_VERSION = (0, 2, 0)  # the release that drops the old spellings (0.1.x accepts them with a warning)
REMOVED_IN = ".".join(map(str, _REMOVED_IN_VERSION))
__doc__ = __doc__.replace("|REMOVED_IN|", REMOVED_IN)

FIELDS = ("q", "k", "v", "scores", "pattern", "z")
ATTENTION_KINDS = ("enc.self", "dec.self", "dec.cross")
RESID_KINDS = ("enc.resid", "dec.resid")
GROUP_KINDS = ("dec.memory",)
KINDS = ATTENTION_KINDS + RESID_KINDS + GROUP_KINDS

# old kind spellings (capture keys, head triples, sweep families) -> kind
OLD_KINDS = {
    "enc_self": "enc.self", "dec_self": "dec.self", "cross": "dec.cross", "rnn_cross": "dec.cross",
    "resid_enc": "enc.resid", "resid_dec": "dec.resid", "memory": "dec.memory",
}

_SITE = re.compile(r"(enc|dec)\.(?:(embed)|(\d+)\.(resid|memory)|(\d+)\.(self|cross)\.(q|k|v|scores|pattern|z))")
_FIELD_RE = "(" + "|".join(FIELDS) + ")"
# module path (any prefix, e.g. torch.compile's ``_orig_mod.`` or DDP's ``module.``) -> site template
_MODULE_PATHS = (
    (re.compile(r"(?:.+\.)?src_embed"), "enc.embed"),
    (re.compile(r"(?:.+\.)?tgt_embed"), "dec.embed"),
    (re.compile(rf"(?:.+\.)?encoder_layers\.(\d+)\.self_attn\.hook_{_FIELD_RE}"), "enc.{0}.self.{1}"),
    (re.compile(rf"(?:.+\.)?decoder_layers\.(\d+)\.self_attn\.hook_{_FIELD_RE}"), "dec.{0}.self.{1}"),
    (re.compile(rf"(?:.+\.)?decoder_layers\.(\d+)\.cross_attn\.hook_{_FIELD_RE}"), "dec.{0}.cross.{1}"),
    (re.compile(r"(?:.+\.)?encoder_layers\.(\d+)\.hook_resid"), "enc.{0}.resid"),
    (re.compile(r"(?:.+\.)?decoder_layers\.(\d+)\.hook_resid"), "dec.{0}.resid"),
    (re.compile(rf"(?:(?:.+\.)?(?:_orig_mod|module)\.)?attention\.hook_{_FIELD_RE}"), "dec.0.cross.{0}"),  # GRU
)
_PACKAGE = str(Path(__file__).resolve().parents[1])
_SKIPPED = (_PACKAGE, contextlib.__file__)  # a warning names the user's line, not ours nor a ``with`` block's machinery


def _deprecated(old: Any, new: Any) -> None:
    """Warn once per calling line that ``old`` is an old spelling of ``new`` (a name or a key, which the warning
    shows as it is written: ``'dec.0.cross.pattern'``, ``('dec.cross', -1)``), pointing at the caller's code."""
    message = (f"{old!r} is an old site spelling: write {new!r} (the old spellings go in workbench {REMOVED_IN}; "
               "see workbench.model.sites)")
    if sys.version_info >= (3, 12):
        warnings.warn(message, DeprecationWarning, skip_file_prefixes=_SKIPPED)
    else:  # the first frame outside the package
        level, frame = 2, sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED):
            level, frame = level + 1, frame.f_back
        warnings.warn(message, DeprecationWarning, stacklevel=level)


def split_site(name: str) -> tuple[str, int | None, str | None]:
    """A canonical site name as (kind, layer, field): ``"dec.1.cross.z"`` -> ``("dec.cross", 1, "z")``,
    ``"enc.0.resid"`` -> ``("enc.resid", 0, None)``, ``"enc.embed"`` -> ``("enc.embed", None, None)``."""
    m = _SITE.fullmatch(name)
    if m is None:
        raise SiteNameError(f"unknown site {name!r}: a site reads like enc.embed, enc.0.resid or dec.1.cross.pattern")
    stack, embed, rl, what, al, attn, field = m.groups()
    if embed:
        return f"{stack}.embed", None, None
    if what:
        return f"{stack}.{what}", int(rl), None
    return f"{stack}.{attn}", int(al), field


def site_kind(name: str) -> str:
    """The kind of a canonical site: ``"dec.1.cross.z"`` -> ``"dec.cross"``."""
    return split_site(name)[0]


def _compose(kind: str, layer: int, field: str | None) -> str:
    stack, what = kind.split(".")
    if kind in ATTENTION_KINDS:
        return f"{stack}.{layer}.{what}.{field or 'pattern'}"
    if field is not None:
        raise SiteNameError(f"unknown site ({kind!r}, {layer}, {field!r}): {kind} has no fields; use ({kind!r}, {layer})")
    return f"{stack}.{layer}.{what}"


def describe_sites(names: Iterable[str]) -> str:
    """A listing of site names: in full up to 30, else with layers and fields folded
    (``enc.embed, enc.{0..5}.self.{q,k,v}, ...``)."""
    names = list(names)
    if len(names) <= 30:
        return ", ".join(names)
    layers: dict[str, list[int]] = {}  # "enc.#.self.q" -> [0, 1, ...]
    for name in names:
        m = re.fullmatch(r"(\w+)\.(\d+)\.(.+)", name)
        layers.setdefault(f"{m[1]}.#.{m[3]}" if m else name, []).append(int(m[2]) if m else -1)
    fields: dict[str, list[str]] = {}  # "enc.{0..5}.self" -> ["q", "k", ...]
    for key, seen in layers.items():
        span = "{" + (f"{min(seen)}..{max(seen)}" if len(seen) > 1 else str(seen[0])) + "}"
        parts = key.split(".")
        head, field = (".".join(parts[:-1]), parts[-1]) if len(parts) == 4 else (key, "")
        fields.setdefault(head.replace("#", span), []).append(field)
    return ", ".join(head if f == [""] else f"{head}.{f[0]}" if len(f) == 1 else f"{head}.{{{','.join(f)}}}"
                     for head, f in fields.items())


def kind_name(kind: str, valid: Iterable[str] | None = None, what: str = "kind") -> str:
    """The canonical kind for ``kind`` (a kind, or an old spelling such as ``"cross"``, with a warning).

    Raises:
        SiteNameError: ``kind`` is no kind, or not one of ``valid``; the message lists the valid ones.
    """
    choices = tuple(valid) if valid is not None else KINDS
    new = kind
    if isinstance(kind, str) and kind in OLD_KINDS and OLD_KINDS[kind] in choices:
        new = OLD_KINDS[kind]
        _deprecated(kind, new)
    if new not in choices:
        close = difflib.get_close_matches(str(kind), choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SiteNameError(f"unknown {what} {kind!r}{hint}: choose from {', '.join(choices)}")
    return new


def _wrap(kind: str, layer: Any, n_layers: Mapping[str, int] | None) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise SiteNameError(f"layer {layer!r} of {kind!r} is not an int: write e.g. ({kind!r}, 0)")
    counted = "dec.cross" if kind == "dec.memory" and n_layers is not None and kind not in n_layers else kind
    if n_layers is None or counted not in n_layers:
        if layer < 0:
            raise SiteNameError(f"layer {layer} of {kind!r}: a negative layer needs a cache that knows the layers")
        return layer
    n = n_layers[counted]
    if not -n <= layer < n:
        raise SiteNameError(f"layer {layer} out of range for {kind!r}, which has {n} layers (use 0..{n - 1} or negatives)")
    return layer % n


def site_name(key: Any, valid: Iterable[str] | None = None, n_layers: Mapping[str, int] | None = None) -> str:
    """The canonical name of a site, from any accepted spelling.

    Accepted: a canonical name (``"enc.2.resid"``), a hook point's module path (``"encoder_layers.2.hook_resid"``),
    a kind with a layer (``("dec.cross", 0)``, ``("dec.cross", 0, "q")``, ``("dec.memory", 1)``) and, with a
    DeprecationWarning, the old capture keys (``("cross", 0)``, ``("resid_enc", 1)``, ``("memory", 1)``).

    Args:
        key: the spelling.
        valid: the names allowed here (e.g. the sites a model has); None accepts any well-formed name.
        n_layers: kind -> number of layers, to resolve negative layers in ``(kind, layer)`` keys.

    Raises:
        SiteNameError: one line naming the bad spelling, the closest valid name and the valid names.
    """
    try:
        name = _canonical(key, n_layers)
    except _Malformed:
        if valid is None:
            raise
        valid = list(valid)
        close = difflib.get_close_matches(str(key), valid, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SiteNameError(f"unknown site {key!r}{hint}: the valid names here are {describe_sites(valid)}") from None
    if valid is not None:
        valid = list(valid)
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close and close[0] != name else ""
            shown = repr(name) if name == key else f"{key!r} ({name})"
            raise SiteNameError(f"unknown site {shown}{hint}: the valid names here are {describe_sites(valid)}")
    return name


class _Malformed(SiteNameError):
    """A string that is no site name at all (where the caller knows the valid names, they replace the message)."""


def _canonical(key: Any, n_layers: Mapping[str, int] | None) -> str:
    if isinstance(key, str):
        if _SITE.fullmatch(key):
            return key
        for pattern, template in _MODULE_PATHS:
            m = pattern.fullmatch(key)
            if m:
                return template.format(*m.groups())
        if key in KINDS or key in OLD_KINDS:
            raise SiteNameError(f"unknown site {key!r}: that is a kind (every layer); add the layer, e.g. "
                                f"({key!r}, 0) or {_compose(OLD_KINDS.get(key, key), 0, None)!r}")
        close = difflib.get_close_matches(key, ["enc.embed", "dec.embed", "enc.0.resid", "dec.0.resid",
                                                "enc.0.self.pattern", "dec.0.self.z", "dec.0.cross.pattern"], n=1)
        hint = f" (did you mean something like {close[0]!r}?)" if close else ""
        raise _Malformed(f"unknown site {key!r}{hint}: a site reads like enc.embed, enc.{{layer}}.resid, "
                            "dec.{layer}.cross.{q,k,v,scores,pattern,z} (see workbench.model.sites)")
    if isinstance(key, tuple) and len(key) in (2, 3) and isinstance(key[0], str):
        kind, layer = key[0], key[1]
        field = key[2] if len(key) == 3 else None
        if kind in OLD_KINDS:
            kind = OLD_KINDS[kind]
            field = None if field == "resid" else field  # ("resid_enc", l, "resid"): the old explicit field
            if field is not None and field not in FIELDS:
                raise SiteNameError(f"unknown field {field!r} in {key!r}: choose from {', '.join(FIELDS)}")
            fine = isinstance(layer, int) and not isinstance(layer, bool) and layer >= 0
            # the suggestion is itself accepted: the site name, or (a negative layer) the key with the new kind
            new_key = (kind, layer) if field is None else (kind, layer, field)
            _deprecated(key, _compose(kind, layer, field) if fine else new_key)
        elif kind not in KINDS:
            close = difflib.get_close_matches(kind, KINDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SiteNameError(f"unknown kind {kind!r} in {key!r}{hint}: use cache[kind, layer] with kind in "
                                f"{', '.join(KINDS)}, or a site name such as 'dec.0.cross.pattern'")
        if field is not None and field not in FIELDS:
            raise SiteNameError(f"unknown field {field!r} in {key!r}: choose from {', '.join(FIELDS)}")
        return _compose(kind, _wrap(kind, key[1], n_layers), field)
    raise SiteNameError(f"{key!r} is not a site: use a name such as 'enc.2.resid' or 'dec.0.cross.pattern', or "
                        "(kind, layer) such as ('dec.cross', 0)")


def expand_site(name: str) -> list[str]:
    """The sites a name stands for: a group (``dec.{l}.memory``) gives its members, any other site itself."""
    kind, layer, _ = split_site(name)
    if kind == "dec.memory":
        return [f"dec.{layer}.cross.k", f"dec.{layer}.cross.v"]
    return [name]


def model_sites(model: nn.Module) -> dict[str, nn.Module]:
    """Every site of ``model`` under its canonical name -> the module whose output it is (a hook point, or the
    embedding for ``enc.embed`` / ``dec.embed``), in the order of ``model.named_modules()``."""
    out: dict[str, nn.Module] = {}
    for path, module in model.named_modules():
        for pattern, template in _MODULE_PATHS:
            m = pattern.fullmatch(path)
            if m:
                out.setdefault(template.format(*m.groups()), module)
                break
    return out


def kind_key(key: Any) -> Any:
    """A kind, or a ``(kind, layer, ...)`` key, made canonical (an old spelling warns); other keys as they are."""
    if isinstance(key, str) and key in OLD_KINDS:
        return kind_name(key)
    if isinstance(key, tuple) and key and isinstance(key[0], str) and key[0] in OLD_KINDS:
        return (kind_name(key[0]), *key[1:])
    return key


class KindDict(dict):
    """A dict keyed by kinds or ``(kind, layer)`` (head means, head importance) that also finds an old kind
    spelling (``means["cross", 0]`` is ``means["dec.cross", 0]``, with a DeprecationWarning).

    Every method that takes a key (``[]``, ``in``, ``get``, ``update``, ``setdefault``, ``pop``, ``del``, ``|``,
    ``|=``, ``fromkeys`` and the constructor) stores and looks up the canonical kind.
    """

    def __init__(self, items: Any = (), /, **kwargs: Any) -> None:
        super().__init__()
        self.update(items, **kwargs)

    def update(self, items: Any = (), /, **kwargs: Any) -> None:
        """As :meth:`dict.update` (a mapping, or (key, value) pairs, then keywords), with canonical keys."""
        pairs = ((key, items[key]) for key in items.keys()) if hasattr(items, "keys") else items
        for key, value in pairs:
            self[key] = value
        for key, value in kwargs.items():
            self[key] = value

    @classmethod
    def fromkeys(cls, keys: Iterable[Any], value: Any = None) -> KindDict:
        return cls((key, value) for key in keys)

    def copy(self) -> KindDict:
        return type(self)(self)

    def __or__(self, other: Any) -> Any:
        if not isinstance(other, Mapping):
            return NotImplemented
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other: Any) -> Any:
        if not isinstance(other, Mapping):
            return NotImplemented
        merged = type(self)(other)
        merged.update(self)
        return merged

    def __ior__(self, other: Any) -> KindDict:
        self.update(other)
        return self

    def setdefault(self, key: Any, default: Any = None) -> Any:
        return super().setdefault(kind_key(key), default)

    def pop(self, key: Any, *default: Any) -> Any:
        return super().pop(kind_key(key), *default)

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(kind_key(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(kind_key(key), value)

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(kind_key(key))

    def __contains__(self, key: Any) -> bool:
        return super().__contains__(kind_key(key))

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(kind_key(key), default)
