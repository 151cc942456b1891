"""One registry of architectures: a name (``"transformer"``, ``"rnn"``) -> its config class, builder and model class.

Checkpoints, shipped models and the pipeline build models through here instead of choosing by class name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from .errors import CheckpointError


@dataclass(frozen=True)
class Architecture:
    name: str  # key stored in checkpoints and config.json
    config_cls: type  # frozen dataclass of the model's hyper-parameters
    builder: Any  # (cfg, src_vocab_size, tgt_vocab_size, pad_id) -> nn.Module
    model_cls: type  # class of the built model (to recognise it when saving)


def _registry() -> dict[str, Architecture]:
    from .config import ModelConfig
    from .model import Transformer, build_model
    from .rnn import RNNConfig, RNNSeq2Seq, build_rnn

    return {
        "transformer": Architecture("transformer", ModelConfig, build_model, Transformer),
        "rnn": Architecture("rnn", RNNConfig, build_rnn, RNNSeq2Seq),
    }


def architectures() -> list[str]:
    return sorted(_registry())


def get_architecture(name: str) -> Architecture:
    reg = _registry()
    if name not in reg:
        raise CheckpointError(f"unknown architecture {name!r}: expected one of {sorted(reg)}")
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
