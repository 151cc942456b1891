"""The model's frozen configuration (:class:`ModelConfig`) and the paper's presets. The training recipe is
:class:`workbench.translation.train_config.TrainConfig`; a whole training run (data, tokenizer, model, recipe) is
:class:`workbench.translation.run.RunConfig`.

Variants are made with :func:`dataclasses.replace`; checkpoints store ``dataclasses.asdict(cfg)``.
``__post_init__`` only validates: it never seeds or touches global state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workbench.errors import ConfigError

POSITIONAL_KINDS = ("sinusoidal", "learned")
ACTIVATIONS = ("relu", "gelu", "swish")
SINUSOIDAL_LAYOUTS = ("interleaved", "halves")


def validate(cond: bool, field: str, value: Any, fix: str) -> None:
    """Raise a :class:`ConfigError` naming ``field``, its bad ``value`` and the ``fix`` unless ``cond`` holds."""
    if not cond:
        raise ConfigError(f"invalid {field}={value!r}: {fix}")


def check_field_types(config: Any) -> None:
    """Refuse a field whose value is not of its annotated simple type (``int``, ``float``, ``bool``, ``str``, with
    ``| None``): a bool is not an int, a string is not a bool (``"False"`` is true), a float must be finite and an
    int is a float. Fields of other types are left to the config's own checks."""
    import math
    import numbers

    names = {"int", "float", "bool", "str", "None"}
    for field in dataclasses.fields(config):
        kinds = [part.strip() for part in str(field.type).split("|")]
        if not set(kinds) <= names:
            continue
        value = getattr(config, field.name)
        if value is None and "None" in kinds:
            continue
        ok = (("bool" in kinds and isinstance(value, bool))
              or ("int" in kinds and isinstance(value, numbers.Integral) and not isinstance(value, bool))
              or ("float" in kinds and isinstance(value, numbers.Real) and not isinstance(value, bool)
                  and math.isfinite(value))
              or ("str" in kinds and isinstance(value, str)))
        if not ok:
            wanted = " or ".join({"int": "a whole number", "float": "a finite number", "bool": "True or False",
                                  "str": "a string", "None": "None"}[k] for k in kinds)
            raise ConfigError(f"invalid {field.name}={value!r}: use {wanted}")


def is_probability(value: Any) -> bool:
    """A dropout rate: a number in [0, 1)."""
    return isinstance(value, (int, float)) and 0.0 <= value < 1.0


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and switches of the encoder-decoder Transformer (paper section 3)."""

    d_model: int = 512  # width of every residual stream and embedding (paper: 512)
    n_heads: int = 8  # attention heads per multi-head block (paper: h = 8)
    d_ff: int = 2048  # inner width of the position-wise feed-forward network (paper: 2048)
    n_enc_layers: int = 6  # identical encoder layers (paper: N = 6)
    n_dec_layers: int = 6  # identical decoder layers (paper: N = 6)
    d_head: int | None = None  # per-head query/key width d_k (and d_v unless set below); None means d_model // n_heads
    d_v: int | None = None  # per-head value width d_v (paper Table 3 row B varies d_k alone); None means d_v = d_k
    dropout: float = 0.1  # P_drop on sub-layer outputs and on embeddings + positions (paper: 0.1)
    attn_dropout: float = 0.0  # dropout on attention weights (not in the paper; 0 keeps fused kernels exact)
    max_len: int = 256  # longest sequence the positional table covers (source or target, in tokens)
    norm_first: bool = False  # False: post-LN, LayerNorm(x + Sublayer(x)) as in the paper; True: pre-LN
    positional: str = "sinusoidal"  # "sinusoidal" (paper) or "learned" (paper Table 3 row E)
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model) (paper section 3.4)
    tie_output: bool = True  # share the target embedding with the pre-softmax projection (paper 3.4)
    tie_src_tgt: bool = False  # also share the source embedding (needs one joint vocabulary; the paper presets do)
    activation: str = "relu"  # feed-forward non-linearity: "relu" (paper), "gelu" (exact, erf) or "swish" (x * sigmoid(x), opus-mt)
    layer_norm_eps: float = 1e-5  # epsilon of every LayerNorm
    # where the sines and cosines of the sinusoidal table sit: "interleaved" is the paper's Eq. (PE[2i] = sin,
    # PE[2i+1] = cos); "halves" puts every sine first and every cosine second, same frequencies (Marian/opus-mt,
    # fairseq, tensor2tensor): a fixed permutation of the columns, so trained weights only work with their own layout
    sinusoidal_layout: str = "interleaved"
    output_bias: bool = False  # a bias on the pre-softmax projection (Marian's final_logits_bias); the paper has none

    def __post_init__(self) -> None:
        check_field_types(self)
        for name in ("d_model", "n_heads", "d_ff", "n_enc_layers", "n_dec_layers", "max_len"):
            value = getattr(self, name)
            validate(isinstance(value, int) and not isinstance(value, bool) and value > 0, name, value, "use a positive integer")
        if self.d_head is None:
            validate(
                self.d_model % self.n_heads == 0,
                "d_model",
                self.d_model,
                f"d_model must be divisible by n_heads={self.n_heads} (or set d_head explicitly); "
                f"try d_model={self.n_heads * max(1, round(self.d_model / self.n_heads))}",
            )
        else:
            validate(isinstance(self.d_head, int) and not isinstance(self.d_head, bool) and self.d_head > 0, "d_head", self.d_head, "use a positive integer or None")
        if self.d_v is not None:
            validate(isinstance(self.d_v, int) and not isinstance(self.d_v, bool) and self.d_v > 0, "d_v", self.d_v, "use a positive integer or None")
        for name in ("dropout", "attn_dropout"):
            value = getattr(self, name)
            validate(is_probability(value), name, value, "use a probability in [0, 1)")
        validate(self.positional in POSITIONAL_KINDS, "positional", self.positional, f"choose one of {POSITIONAL_KINDS}")
        validate(self.activation in ACTIVATIONS, "activation", self.activation, f"choose one of {ACTIVATIONS}")
        validate(self.sinusoidal_layout in SINUSOIDAL_LAYOUTS, "sinusoidal_layout", self.sinusoidal_layout,
               f"choose one of {SINUSOIDAL_LAYOUTS} ('interleaved' is the paper's, 'halves' is Marian's)")
        validate(isinstance(self.output_bias, bool), "output_bias", self.output_bias, "use True or False")
        validate(self.layer_norm_eps > 0, "layer_norm_eps", self.layer_norm_eps, "use a small positive number such as 1e-5")

    @property
    def head_dim(self) -> int:
        """Per-head query/key width d_k (``d_head`` or ``d_model // n_heads``)."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def value_dim(self) -> int:
        """Per-head value width d_v (``d_v``, or d_k when unset)."""
        return self.d_v if self.d_v is not None else self.head_dim

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown ModelConfig fields {unknown}: known fields are {sorted(known)}")
        return cls(**data)


PRESETS: dict[str, ModelConfig] = {
    # tests: runs in milliseconds
    "tiny": ModelConfig(d_model=32, n_heads=4, d_ff=64, n_enc_layers=2, n_dec_layers=2, dropout=0.0, max_len=128),
    # CPU: trains on Multi30k in tens of minutes on a laptop
    "small": ModelConfig(d_model=256, n_heads=8, d_ff=1024, n_enc_layers=3, n_dec_layers=3, dropout=0.1, max_len=256),
    # paper Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1, eps_ls=0.1; one matrix for
    # both embeddings and the pre-softmax projection (section 3.4, a joint vocabulary): 63M at 37,000 tokens
    "base": ModelConfig(d_model=512, n_heads=8, d_ff=2048, n_enc_layers=6, n_dec_layers=6, dropout=0.1, max_len=512,
                        tie_src_tgt=True),
    # paper Table 3, "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3; shared embeddings as base: 214M
    "big": ModelConfig(d_model=1024, n_heads=16, d_ff=4096, n_enc_layers=6, n_dec_layers=6, dropout=0.3, max_len=512,
                       tie_src_tgt=True),
}


def preset(name: str, **overrides: Any) -> ModelConfig:
    """Return a preset model config, optionally with fields replaced.

    Args:
        name: one of ``"tiny"``, ``"small"``, ``"base"``, ``"big"``. The paper's ``base`` and ``big`` share one
            matrix between both embeddings and the pre-softmax projection (``tie_src_tgt=True``, section 3.4), so
            they need one joint vocabulary; pass ``tie_src_tgt=False`` for separate source and target vocabularies.
        **overrides: fields to replace (validated like any config).
    """
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}: choose one of {sorted(PRESETS)}")
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    bad = sorted(set(overrides) - known)
    if bad:
        raise ConfigError(f"unknown ModelConfig fields {bad}: known fields are {sorted(known)}")
    return dataclasses.replace(PRESETS[name], **overrides)


def field_docs(cls: type) -> dict[str, tuple[str, str]]:
    """``{field: (section, comment)}`` of a config class, read from its source: the comment at the end of the
    field's line, and the section (the last comment line standing alone above it, ``""`` if none). Empty when the
    source cannot be read."""
    import inspect
    import re

    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    names = {f.name for f in dataclasses.fields(cls)}
    docs, section = {}, ""
    for line in lines:
        alone = re.match(r"\s+#\s*(.*)$", line)
        if alone:
            section = alone.group(1)
            continue
        field_line = re.match(r"\s+(\w+)\s*:[^#]*#\s*(.*)$", line)
        if field_line and field_line.group(1) in names:
            docs[field_line.group(1)] = (section, field_line.group(2))
    return docs
