"""Attention Workbench: an inspectable, paper-faithful Transformer for learning and research."""

from __future__ import annotations

from . import complexity, decode, heads, train  # noqa: E402, F401  (submodules used as wb.decode..., wb.train...)
from .attention import KVCache, MultiHeadAttention, attention_weights, scaled_dot_product_attention
from .attribution import Attribution, attribute, measure_agreement
from .capture import AttentionCache, capture_attention, hooks_remaining
from .checkpoint import load_model  # noqa: E402
from .config import PRESETS, ModelConfig, RunConfig, TrainConfig, preset
from .decode import translate  # noqa: E402
from .errors import (
    AttributionError,
    CheckpointError,
    ChecksumError,
    ConfigError,
    DataError,
    DecodingError,
    InputTextError,
    InterventionError,
    NotebookParameterError,
    TrainingError,
    WorkbenchError,
)
from .flow import attention_flow, attention_rollout, decoder_attention_flow, decoder_rollout  # noqa: E402
from .inspection import inspect_translation, to_bertviz  # noqa: E402
from .intervene import ablate_heads, head_means, intervened_greedy  # noqa: E402
from .masks import attention_mask, causal_mask, padding_mask, to_nn_mask
from .model import Transformer, build_model
from .positional import distance_matrix, sinusoidal_table
from .rnn import RNNConfig, RNNSeq2Seq, build_rnn
from .runtime import count_parameters, resolve_device, set_seed
from .shipped import PretrainedError, list_pretrained, pretrained
from .train import fit  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "translate",
    "to_bertviz",
    "load_model",
    "inspect_translation",
    "fit",
    "attention_rollout",
    "attention_flow",
    "ablate_heads",
    "AttentionCache",
    "Attribution",
    "AttributionError",
    "CheckpointError",
    "ChecksumError",
    "ConfigError",
    "DataError",
    "DecodingError",
    "InputTextError",
    "InterventionError",
    "KVCache",
    "ModelConfig",
    "MultiHeadAttention",
    "NotebookParameterError",
    "PRESETS",
    "PretrainedError",
    "RNNConfig",
    "RNNSeq2Seq",
    "RunConfig",
    "TrainConfig",
    "TrainingError",
    "Transformer",
    "WorkbenchError",
    "ablate_heads",
    "attention_flow",
    "attention_mask",
    "attention_rollout",
    "attention_weights",
    "attribute",
    "build_model",
    "build_rnn",
    "capture_attention",
    "causal_mask",
    "count_parameters",
    "decoder_attention_flow",
    "decoder_rollout",
    "distance_matrix",
    "head_means",
    "hooks_remaining",
    "list_pretrained",
    "intervened_greedy",
    "measure_agreement",
    "padding_mask",
    "preset",
    "pretrained",
    "resolve_device",
    "scaled_dot_product_attention",
    "set_seed",
    "sinusoidal_table",
    "to_nn_mask",
]
