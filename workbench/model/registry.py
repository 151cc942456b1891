"""One registry of architectures: a name (``"transformer"``, ``"rnn"``) -> its config class, builder and model class,
and how ``workbench train --preset`` sizes it.

Checkpoints, shipped models and the pipeline build models through here instead of choosing by class name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torch import nn

from workbench.errors import CheckpointError, ConfigError
from workbench.model.config import ModelConfig, preset
from workbench.model.rnn import RNNConfig, RNNSeq2Seq, build_rnn
from workbench.model.transformer import Transformer, build_model


@dataclass(frozen=True)
class Architecture:
    name: str  # key stored in checkpoints and config.json
    config_cls: type  # frozen dataclass of the model's hyper-parameters
    builder: Any  # (cfg, src_vocab_size, tgt_vocab_size, pad_id) -> nn.Module
    model_cls: type  # class of the built model (to recognise it when saving)
    from_preset: Any  # (preset name, **overrides) -> config, sized like that Transformer preset (workbench train)


def _transformer_from_preset(name: str, **overrides: Any) -> Any:
    """The preset, with one matrix for both embeddings and the output (the pipeline's vocabulary is joint)."""
    return preset(name, tie_src_tgt=True, **overrides)


def _rnn_from_preset(name: str, **overrides: Any) -> Any:
    """Two GRU layers as wide as the preset's model, with its dropout and maximum length."""
    base = preset(name)
    cfg = RNNConfig(d_model=base.d_model, n_layers=2, dropout=base.dropout, max_len=base.max_len)
    known = {f.name for f in dataclasses.fields(RNNConfig)}
    if set(overrides) - known:
        raise ConfigError(f"unknown RNNConfig fields {sorted(set(overrides) - known)}: known fields are {sorted(known)}")
    return dataclasses.replace(cfg, **overrides)


def _registry() -> dict[str, Architecture]:
    return {
        "transformer": Architecture("transformer", ModelConfig, build_model, Transformer, _transformer_from_preset),
        "rnn": Architecture("rnn", RNNConfig, build_rnn, RNNSeq2Seq, _rnn_from_preset),
    }


def architectures() -> list[str]:
    return sorted(_registry())


def get_architecture(name: str, error: type[Exception] = CheckpointError) -> Architecture:
    """The architecture called ``name``; an unknown name raises ``error`` (a checkpoint's, by default)."""
    reg = _registry()
    if name not in reg:
        raise error(f"unknown architecture {name!r}: expected one of {sorted(reg)}")
    return reg[name]


def architecture_of(model: nn.Module) -> str:
    """The registry name of a built model (unwrapping DDP / torch.compile)."""
    model = getattr(model, "module", getattr(model, "_orig_mod", model))
    for arch in _registry().values():
        if isinstance(model, arch.model_cls):
            return arch.name
    raise CheckpointError(f"{type(model).__name__} is not a workbench architecture: expected one of {architectures()}")


def build_from_config(arch: str, model_cfg: dict[str, Any], src_vocab_size: int, tgt_vocab_size: int,
                      pad_id: int) -> nn.Module:
    """An untrained model of architecture ``arch`` from its config as a plain dict."""
    a = get_architecture(arch)
    cfg = a.config_cls.from_dict(model_cfg) if hasattr(a.config_cls, "from_dict") else a.config_cls(**model_cfg)
    return a.builder(cfg, src_vocab_size, tgt_vocab_size, pad_id)


def build_from_preset(arch: str, preset_name: str, src_vocab_size: int, tgt_vocab_size: int, pad_id: int,
                      **overrides: Any) -> nn.Module:
    """An untrained model of architecture ``arch`` sized like a Transformer preset (what ``workbench train`` builds)."""
    a = get_architecture(arch, error=ConfigError)
    return a.builder(a.from_preset(preset_name, **overrides), src_vocab_size, tgt_vocab_size, pad_id)
