"""Attention Workbench: an inspectable, paper-faithful Transformer for learning and research."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from workbench._version import __version__  # noqa: F401 (wb.__version__)
from workbench.bridges.huggingface import from_huggingface, hub_pretrained, to_huggingface
from workbench.errors import (
    AttributionError,
    BridgeError,
    CheckpointError,
    ChecksumError,
    ConfigError,
    DataError,
    DecodingError,
    InputTextError,
    InterventionError,
    MaskError,
    NotebookParameterError,
    PatchingError,
    RunFolderError,
    SiteNameError,
    TrainingError,
    WorkbenchError,
)
from workbench.inspect import heads  # noqa: F401  (submodules used as wb.heads..., wb.decode..., wb.train...)
from workbench.inspect.attribution import Attribution, attribute, measure_agreement
from workbench.inspect.capture import AttentionCache, capture_attention, hooks_remaining
from workbench.inspect.contrastive import contrastive_attribution
from workbench.inspect.das import das_sweep, train_das
from workbench.inspect.flow import attention_flow, attention_rollout, decoder_attention_flow, decoder_rollout
from workbench.inspect.inspection import inspect_translation, to_bertviz
from workbench.inspect.intervene import ablate_heads, head_means, intervened_greedy
from workbench.inspect.lens import TunedLens, logit_lens, train_tuned_lens
from workbench.inspect.patching import (
    ActivationCache,
    Site,
    cache_activations,
    patch,
    patched_greedy,
    site_names,
)
from workbench.inspect.patching_sweeps import (
    GaussianNoise,
    LogitDiff,
    PatchingResult,
    path_patching,
    prepare_pair,
    sweep_heads,
    sweep_position_groups,
    sweep_positions,
)
from workbench.inspect.sinks import sink_audit
from workbench.lessons import complexity  # noqa: F401
from workbench.lessons.positional import distance_matrix
from workbench.model.attention import (
    KVCache,
    MultiHeadAttention,
    attention_weights,
    scaled_dot_product_attention,
)
from workbench.model.config import PRESETS, ModelConfig, preset
from workbench.model.masks import attention_mask, causal_mask, padding_mask, to_nn_mask
from workbench.model.positional import sinusoidal_table
from workbench.model.rnn import RNNConfig, RNNSeq2Seq, build_rnn
from workbench.model.sites import site_name
from workbench.model.transformer import Transformer, build_model
from workbench.runtime import count_parameters, resolve_device, set_seed
from workbench.translation import decode, shipped, train  # noqa: F401
from workbench.translation.checkpoint import load_model
from workbench.translation.decode import DECODING, DecodeConfig, translate
from workbench.translation.kernels import use_kernels
from workbench.translation.run import RECIPES, RunConfig, recipe
from workbench.translation.shipped import PretrainedError, list_pretrained
from workbench.translation.train import fit
from workbench.translation.train_config import TrainConfig


def pretrained(name: str = "small-de-en", device: str | torch.device = "cpu",
               root: str | Path | None = None) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """A translator by name, loaded: (model in eval mode, float32, tokenizer, card or info dict).

    A shipped model's name (``"small-de-en"``, :func:`list_pretrained`) is verified against its manifest and loaded
    (:func:`workbench.translation.shipped.pretrained`); a Hugging Face name with a slash
    (``"Helsinki-NLP/opus-mt-de-en"``) is a Marian model, converted by :func:`workbench.bridges.hub_pretrained`
    (from the local cache, or downloaded when online; the ``hf`` extra).

    Example:
        >>> model, tokenizer, card = workbench.pretrained("small-de-en")
        >>> card["bleu"]["test_2016_flickr"]["beam4"]  # sacreBLEU, beam 4, the whole test split
    """
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"pretrained({name!r}): give a model's name as a string, one of {list_pretrained()} or a "
                              "Hugging Face name such as 'Helsinki-NLP/opus-mt-de-en'")
    if root is None and "/" in name and name not in list_pretrained():
        return hub_pretrained(name, device=device)
    return shipped.pretrained(name, device=device, root=root)


__all__ = [
    "translate",
    "to_bertviz",
    "load_model",
    "inspect_translation",
    "fit",
    "from_huggingface",
    "to_huggingface",
    "attention_rollout",
    "attention_flow",
    "ablate_heads",
    "ActivationCache",
    "AttentionCache",
    "Attribution",
    "AttributionError",
    "BridgeError",
    "CheckpointError",
    "ChecksumError",
    "ConfigError",
    "DECODING",
    "DataError",
    "DecodeConfig",
    "DecodingError",
    "InputTextError",
    "InterventionError",
    "KVCache",
    "MaskError",
    "ModelConfig",
    "MultiHeadAttention",
    "NotebookParameterError",
    "GaussianNoise",
    "LogitDiff",
    "PRESETS",
    "PatchingError",
    "SiteNameError",
    "PatchingResult",
    "PretrainedError",
    "RNNConfig",
    "RNNSeq2Seq",
    "RECIPES",
    "RunConfig",
    "TrainConfig",
    "RunFolderError",
    "TrainingError",
    "Transformer",
    "WorkbenchError",
    "attention_mask",
    "attention_weights",
    "attribute",
    "build_model",
    "use_kernels",
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
    "logit_lens",
    "TunedLens",
    "train_tuned_lens",
    "sink_audit",
    "contrastive_attribution",
    "das_sweep",
    "train_das",
    "measure_agreement",
    "padding_mask",
    "patch",
    "patched_greedy",
    "path_patching",
    "prepare_pair",
    "Site",
    "site_names",
    "site_name",
    "sweep_heads",
    "sweep_position_groups",
    "sweep_positions",
    "cache_activations",
    "preset",
    "pretrained",
    "recipe",
    "resolve_device",
    "scaled_dot_product_attention",
    "set_seed",
    "sinusoidal_table",
    "to_nn_mask",
]
