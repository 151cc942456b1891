"""Hugging Face Marian (opus-mt) to the workbench's :class:`~workbench.model.transformer.Transformer` and back.

A Marian model is the paper's post-LN encoder-decoder with four named differences, each a field of
:class:`~workbench.model.config.ModelConfig`:

* the feed-forward activation (``activation``: opus-mt checkpoints use ``"swish"``; ``MarianConfig``'s default is
  ``"gelu"``),
* a bias on the pre-softmax projection (``output_bias``: Marian's ``final_logits_bias`` buffer),
* the sinusoidal table with every sine first and every cosine second (``sinusoidal_layout="halves"``),
* the embedding scale ``sqrt(d_model)`` on or off (``scale_embedding``);

and its pad token doubles as the decoder's start token (the tokenizer adapter's ``bos_id``).

Import (:func:`from_huggingface`) copies the weights, so every inspector, ablation and attribution of the workbench
works on the converted model. Export (:func:`to_huggingface`) writes a folder that ``MarianMTModel.from_pretrained``
and ``AutoTokenizer.from_pretrained`` load. A workbench model with the paper's interleaved table is exported by
permuting the residual-stream basis of every weight (LayerNorm does not care about the order of its features), so
the exported model computes the same function with Marian's fixed table.

Weights are read from safetensors; a folder with only pickled weights (``pytorch_model.bin``) is read with
``torch.load(weights_only=True)``, which refuses any pickled object that is not a tensor or a plain container.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from workbench.errors import BridgeError, InputTextError
from workbench.model.config import ModelConfig
from workbench.model.transformer import Transformer, build_model
from workbench.translation.files import MANIFEST, verify_manifest, write_manifest
from workbench.translation.tokenizer import check_texts, visible_text

log = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("MarianMTModel",)
# transformers' activation names -> the workbench's (ACT2FN: "gelu" is the exact, erf-based GELU; swish = SiLU)
_FROM_HF_ACTIVATION = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
_TO_HF_ACTIVATION = {"relu": "relu", "gelu": "gelu", "swish": "swish"}
# MarianConfig fields of other BART-family configs that change the computation; none of them may be on
_UNREPRESENTABLE_FLAGS = ("normalize_before", "normalize_embedding", "add_final_layer_norm", "layernorm_embedding")
_MARIAN_LAYER_NORM_EPS = 1e-5  # transformers' Marian layers use nn.LayerNorm's default epsilon


def _need(cond: bool, field: str, value: Any, why: str) -> None:
    if not cond:
        raise BridgeError(f"MarianConfig.{field}={value!r} cannot be represented by the workbench's Transformer: {why}")


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BridgeError('the Hugging Face bridge needs transformers and sentencepiece: pip install -e ".[hf]"') from e
    return transformers


# -- the weight maps --------------------------------------------------------------------------------------------
def _attention_pairs(ours: str, theirs: str) -> list[tuple[str, str]]:
    return [(f"{ours}.out_proj.weight", f"{theirs}.out_proj.weight"), (f"{ours}.out_proj.bias", f"{theirs}.out_proj.bias")]


def _layer_map(n_enc: int, n_dec: int) -> list[tuple[str, str]]:
    """(workbench key, Marian key) of every per-layer weight except the packed q/k/v projections."""
    pairs: list[tuple[str, str]] = []
    for i in range(n_enc):
        o, t = f"encoder_layers.{i}", f"model.encoder.layers.{i}"
        pairs += _attention_pairs(f"{o}.self_attn", f"{t}.self_attn")
        for ours, theirs in (("norm1", "self_attn_layer_norm"), ("norm2", "final_layer_norm"), ("ff.linear1", "fc1"),
                             ("ff.linear2", "fc2")):
            pairs += [(f"{o}.{ours}.weight", f"{t}.{theirs}.weight"), (f"{o}.{ours}.bias", f"{t}.{theirs}.bias")]
    for i in range(n_dec):
        o, t = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        pairs += _attention_pairs(f"{o}.self_attn", f"{t}.self_attn")
        pairs += _attention_pairs(f"{o}.cross_attn", f"{t}.encoder_attn")
        for ours, theirs in (("norm1", "self_attn_layer_norm"), ("norm2", "encoder_attn_layer_norm"),
                             ("norm3", "final_layer_norm"), ("ff.linear1", "fc1"), ("ff.linear2", "fc2")):
            pairs += [(f"{o}.{ours}.weight", f"{t}.{theirs}.weight"), (f"{o}.{ours}.bias", f"{t}.{theirs}.bias")]
    return pairs


def _attention_blocks(n_enc: int, n_dec: int) -> list[tuple[str, str]]:
    blocks = [(f"encoder_layers.{i}.self_attn", f"model.encoder.layers.{i}.self_attn") for i in range(n_enc)]
    for i in range(n_dec):
        blocks.append((f"decoder_layers.{i}.self_attn", f"model.decoder.layers.{i}.self_attn"))
        blocks.append((f"decoder_layers.{i}.cross_attn", f"model.decoder.layers.{i}.encoder_attn"))
    return blocks


def _tied(a: Tensor, b: Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() or (a.shape == b.shape and torch.equal(a, b))


# -- import ---------------------------------------------------------------------------------------------------------
def marian_model_config(hf_config: Any, tie_src_tgt: bool, tie_output: bool, layer_norm_eps: float) -> ModelConfig:
    """The :class:`ModelConfig` of a ``MarianConfig``; a field the workbench cannot represent raises
    :class:`BridgeError` naming it."""
    c = hf_config
    _need(c.encoder_attention_heads == c.decoder_attention_heads, "decoder_attention_heads", c.decoder_attention_heads,
          f"the workbench uses one n_heads for both stacks (encoder_attention_heads={c.encoder_attention_heads})")
    _need(c.encoder_ffn_dim == c.decoder_ffn_dim, "decoder_ffn_dim", c.decoder_ffn_dim,
          f"the workbench uses one d_ff for both stacks (encoder_ffn_dim={c.encoder_ffn_dim})")
    _need(c.activation_function in _FROM_HF_ACTIVATION, "activation_function", c.activation_function,
          f"supported activations are {sorted(_FROM_HF_ACTIVATION)}")
    _need(c.d_model % c.encoder_attention_heads == 0, "d_model", c.d_model,
          f"d_model must be divisible by the {c.encoder_attention_heads} heads")
    for flag in _UNREPRESENTABLE_FLAGS:
        _need(not getattr(c, flag, False), flag, getattr(c, flag, None), "Marian is post-LN with no extra LayerNorm")
    return ModelConfig(
        d_model=c.d_model, n_heads=c.encoder_attention_heads, d_ff=c.encoder_ffn_dim,
        n_enc_layers=c.encoder_layers, n_dec_layers=c.decoder_layers,
        dropout=float(c.dropout), attn_dropout=float(c.attention_dropout), max_len=c.max_position_embeddings,
        norm_first=False, positional="sinusoidal", scale_embedding=bool(c.scale_embedding),
        tie_output=tie_output, tie_src_tgt=tie_src_tgt, activation=_FROM_HF_ACTIVATION[c.activation_function],
        layer_norm_eps=layer_norm_eps, sinusoidal_layout="halves", output_bias=True,
    )


def from_huggingface(hf_model: Any, hf_tokenizer: Any = None) -> tuple[Transformer, MarianTokenizerAdapter | None]:
    """A transformers ``MarianMTModel`` as the workbench's own :class:`Transformer` (float32, eval mode), and its
    tokenizer wrapped in the workbench's tokenizer interface (None when ``hf_tokenizer`` is None).

    Dropout rates are copied from the config (``dropout``, ``attention_dropout``); Marian's ``activation_dropout``
    and layer drop only act in training and are not carried over (the workbench drops out after the activation
    at ``dropout``). Inference is exact: logits agree within float32 rounding (tests/test_bridges.py).

    Raises:
        BridgeError: another architecture (naming the supported ones), or a config field the workbench cannot
            represent (naming the field).
    """
    name = type(hf_model).__name__
    if name not in SUPPORTED_ARCHITECTURES:
        raise BridgeError(f"cannot convert a {name}: the supported architectures are {list(SUPPORTED_ARCHITECTURES)} "
                          "(Hugging Face Marian, the opus-mt family)")
    c = hf_model.config
    enc, dec = hf_model.model.encoder, hf_model.model.decoder
    tie_src_tgt = _tied(enc.embed_tokens.weight, dec.embed_tokens.weight)
    tie_output = _tied(hf_model.lm_head.weight, dec.embed_tokens.weight)
    eps = {m.eps for m in hf_model.modules() if isinstance(m, torch.nn.LayerNorm)}
    _need(len(eps) <= 1, "layer_norm_eps", sorted(eps), "every LayerNorm must share one epsilon")
    cfg = marian_model_config(c, tie_src_tgt, tie_output, eps.pop() if eps else _MARIAN_LAYER_NORM_EPS)
    src_vocab = enc.embed_tokens.weight.shape[0]
    tgt_vocab = dec.embed_tokens.weight.shape[0]
    model = build_model(cfg, src_vocab, tgt_vocab, pad_id=c.pad_token_id)

    theirs = {k: v.detach().float().cpu() for k, v in hf_model.state_dict().items()}
    # transformers may leave tied copies out of its state dict: fill them from the modules
    theirs.setdefault("model.encoder.embed_tokens.weight", enc.embed_tokens.weight.detach().float().cpu())
    theirs.setdefault("model.decoder.embed_tokens.weight", dec.embed_tokens.weight.detach().float().cpu())
    theirs.setdefault("lm_head.weight", hf_model.lm_head.weight.detach().float().cpu())
    ours: dict[str, Tensor] = {
        "src_embed.tokens.weight": theirs["model.encoder.embed_tokens.weight"],
        "tgt_embed.tokens.weight": theirs["model.decoder.embed_tokens.weight"],
        "generator.weight": theirs["lm_head.weight"],
        "generator.bias": theirs["final_logits_bias"].reshape(-1),
    }
    for o, t in _layer_map(cfg.n_enc_layers, cfg.n_dec_layers):
        ours[o] = theirs[t]
    for o, t in _attention_blocks(cfg.n_enc_layers, cfg.n_dec_layers):
        # the workbench packs W^Q, W^K, W^V in one matrix (rows: q, k, v), as torch.nn.MultiheadAttention does
        ours[f"{o}.in_proj_weight"] = torch.cat([theirs[f"{t}.{p}_proj.weight"] for p in "qkv"], dim=0)
        ours[f"{o}.in_proj_bias"] = torch.cat([theirs[f"{t}.{p}_proj.bias"] for p in "qkv"], dim=0)
    expected = set(model.state_dict())
    missing = sorted(expected - set(ours))
    if missing:
        raise BridgeError(f"the Marian weights give no value for {missing[:3]}: this converter does not know them")
    model.load_state_dict({k: ours[k] for k in expected}, strict=True)

    # Marian's positions are a fixed table computed at construction: check it is the layout we assume
    table = enc.embed_positions.weight.detach().float().cpu()  # (max_len, D)
    gap = float((table - model.src_embed.positional.table).abs().max())
    _need(gap < 1e-4, "embed_positions", f"max |diff| {gap:.2e}",
          "the encoder's positional table is not Marian's sines-then-cosines table")
    model.eval()
    tokenizer = None
    if hf_tokenizer is not None:
        tokenizer = MarianTokenizerAdapter(hf_tokenizer, decoder_start_id=c.decoder_start_token_id,
                                           src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab)
    return model, tokenizer


# -- the tokenizer --------------------------------------------------------------------------------------------------
class MarianTokenizerAdapter:
    """A Hugging Face tokenizer (``MarianTokenizer``, or any tokenizer with ``text_target``) behind the workbench's
    tokenizer interface (:mod:`workbench.translation.tokenizer`): what :func:`~workbench.translation.decode.translate`
    and the inspectors call.

    Marian's special ids differ from the workbench's: ``</s>`` (eos) is 0, ``<unk>`` 1, and ``<pad>`` (the last id)
    also starts the decoder, so ``bos_id`` is the model's ``decoder_start_token_id``.
    """

    def __init__(self, hf_tokenizer: Any, decoder_start_id: int, src_vocab_size: int | None = None,
                 tgt_vocab_size: int | None = None) -> None:
        self.hf = hf_tokenizer
        self.pad_id = int(hf_tokenizer.pad_token_id)
        self.unk_id = int(hf_tokenizer.unk_token_id)
        self.eos_id = int(hf_tokenizer.eos_token_id)
        self.bos_id = int(decoder_start_id)
        self.src_vocab_size = int(src_vocab_size if src_vocab_size is not None else len(hf_tokenizer))
        self.tgt_vocab_size = int(tgt_vocab_size if tgt_vocab_size is not None else len(hf_tokenizer))
        self.joint = not getattr(hf_tokenizer, "separate_vocabs", False)
        self._specials = set(getattr(hf_tokenizer, "all_special_ids", [])) | {self.pad_id, self.eos_id, self.unk_id}

    def __repr__(self) -> str:
        return (f"MarianTokenizerAdapter({type(self.hf).__name__}, src_vocab_size={self.src_vocab_size}, "
                f"tgt_vocab_size={self.tgt_vocab_size})")

    def _ids(self, texts: list[str], side: str) -> list[list[int]]:
        """Content ids, eos included (the tokenizer appends it)."""
        if not texts:
            return []
        enc = self.hf(text_target=texts) if side == "tgt" else self.hf(texts)
        return [list(map(int, ids)) for ids in enc["input_ids"]]

    def encode_src(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = True) -> list[list[int]]:
        """Source ids ``[x1 .. xn, eos]`` (as the Hugging Face tokenizer gives them)."""
        rows = self._ids(check_texts(texts), "src")
        rows = [r[:-1] if r and r[-1] == self.eos_id else r for r in rows]
        return [([self.bos_id] if add_bos else []) + r + ([self.eos_id] if add_eos else []) for r in rows]

    def encode_tgt(self, texts: Sequence[str]) -> list[list[int]]:
        """Target ids ``[decoder start, y1 .. yn, eos]``."""
        return [[self.bos_id, *r] for r in self._ids(check_texts(texts), "tgt")]

    def decode_tgt(self, ids_batch: Any) -> list[str]:
        """Detokenized text of each row: stops at the first eos, drops special tokens."""
        if hasattr(ids_batch, "tolist"):
            ids_batch = ids_batch.tolist()
        if ids_batch and isinstance(ids_batch[0], int):
            raise InputTextError("decode_tgt takes a batch of id rows: wrap a single row in a list, e.g. [ids]")
        rows = []
        for row in ids_batch:
            out = []
            for i in row:
                if int(i) == self.eos_id:
                    break
                if int(i) not in self._specials:
                    out.append(int(i))
            rows.append(out)
        return [" ".join(t.split()) for t in self.hf.batch_decode(rows, skip_special_tokens=True)]

    def tokens_src(self, text: str) -> list[str]:
        """Token strings, one per position of ``encode_src([text])[0]`` (eos included)."""
        return self.hf.convert_ids_to_tokens(self.encode_src([text])[0])

    def tokens_tgt(self, text: str) -> list[str]:
        """Token strings, one per position of ``encode_tgt([text])[0]`` (decoder start and eos included)."""
        ids = self.encode_tgt([text])[0]
        return [self.id_to_token(i, "tgt") for i in ids]

    def id_to_token(self, i: int, side: str = "tgt") -> str:
        if side == "tgt" and not self.joint and hasattr(self.hf, "target_decoder"):
            return self.hf.target_decoder.get(int(i), self.hf.unk_token)
        return self.hf.convert_ids_to_tokens(int(i))

    def normalize(self, text: str, side: str = "tgt") -> str:
        """Words joined by single spaces (sentencepiece's own normalisation is not undone by decoding)."""
        return " ".join(visible_text(text).split())

    def to_json(self) -> str:
        raise BridgeError("a Hugging Face tokenizer is not stored as workbench JSON: keep it with "
                          "hf_tokenizer.save_pretrained(folder), or export the model with `workbench export`")


# -- loading from a folder or the Hub -------------------------------------------------------------------------------
def _load_hf_marian(folder: Path) -> Any:
    transformers = _require_transformers()
    config = transformers.AutoConfig.from_pretrained(folder)
    arch = (getattr(config, "architectures", None) or [type(config).__name__])[0]
    if getattr(config, "model_type", None) != "marian":
        raise BridgeError(f"{folder} holds a {arch} (model_type={getattr(config, 'model_type', None)!r}): the supported "
                          f"architectures are {list(SUPPORTED_ARCHITECTURES)}")
    if (folder / "model.safetensors").is_file():
        return transformers.MarianMTModel.from_pretrained(folder, use_safetensors=True).eval()
    pickled = folder / "pytorch_model.bin"
    if not pickled.is_file():
        raise BridgeError(f"{folder} has no model.safetensors (nor pytorch_model.bin): download the model's weights")
    # only pickled weights: unpickle nothing but tensors and plain containers
    import pickle

    try:
        torch.load(pickled, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError) as e:
        raise BridgeError(f"{pickled} was refused: it holds pickled objects that are not plain tensors "
                          f"(torch.load(weights_only=True) says: {str(e).splitlines()[0][:160]}); use a "
                          "model.safetensors file instead") from e
    return transformers.MarianMTModel.from_pretrained(folder, use_safetensors=False).eval()


def load_marian(folder: str | Path, device: str | torch.device = "cpu") -> tuple[Transformer, Any, dict[str, Any]]:
    """A Marian model saved in ``folder`` (``save_pretrained``'s layout) as (workbench model, tokenizer, info).

    A folder that :func:`to_huggingface` wrote holds a ``SHA256SUMS`` of its files: they are checked first, and an
    edited or truncated file (its config included) is a :class:`BridgeError` naming it.
    """
    transformers = _require_transformers()
    folder = Path(folder)
    if (folder / MANIFEST).is_file():
        verify_manifest(folder, error=BridgeError, fix="export the model again (`workbench export`)")
    hf_model = _load_hf_marian(folder)
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    model, tokenizer = from_huggingface(hf_model, hf_tok)
    info = {"source": "huggingface", "folder": str(folder), "model_cfg": model.cfg.to_dict(),
            "src_vocab_size": model.src_vocab_size, "tgt_vocab_size": model.tgt_vocab_size}
    return model.to(device).eval(), tokenizer, info


def hub_pretrained(name: str, device: str | torch.device = "cpu", cache_dir: str | Path | None = None,
                   local_only: bool | None = None) -> tuple[Transformer, Any, dict[str, Any]]:
    """A Marian model of the Hugging Face Hub (``"Helsinki-NLP/opus-mt-de-en"``), from the local cache, else
    downloaded when online, converted: (workbench model, tokenizer adapter, info).

    Args:
        local_only: never reach the network (default: only when ``HF_HUB_OFFLINE`` is set).

    Raises:
        BridgeError: not in the cache and not downloadable (one line saying how to get it).
    """
    from huggingface_hub import snapshot_download

    if local_only is None:
        local_only = os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("", "0", "false", "no")
    patterns = ["*.json", "*.spm", "*.model", "model.safetensors", "pytorch_model.bin"]
    try:
        folder = snapshot_download(name, cache_dir=cache_dir, local_files_only=True, allow_patterns=patterns)
    except Exception as cached_error:
        if local_only:
            raise BridgeError(f"{name} is not in the local Hugging Face cache and the network is off: on a machine "
                              f"with network run `hf download {name}` (or load it once with "
                              "wb.pretrained), then use that cache here (HF_HOME)") from cached_error
        try:  # safetensors weights when the repository has them; the pickled file only when it does not
            folder = snapshot_download(name, cache_dir=cache_dir, allow_patterns=patterns[:-1])
            if not (Path(folder) / "model.safetensors").is_file():
                folder = snapshot_download(name, cache_dir=cache_dir, allow_patterns=patterns[:-2] + patterns[-1:])
        except Exception as e:
            raise BridgeError(f"{name} is not in the local Hugging Face cache and could not be downloaded "
                              f"({type(e).__name__}): connect to the network, or run `hf download {name}` on a "
                              "machine that has one and use its cache here (HF_HOME)") from e
    model, tokenizer, info = load_marian(folder, device=device)
    info["name"] = name
    return model, tokenizer, info


# -- export ---------------------------------------------------------------------------------------------------------
def _residual_permutation(cfg: ModelConfig) -> Tensor | None:
    """Marian's feature j is the workbench's feature perm[j] (None when the layouts already agree)."""
    if cfg.sinusoidal_layout == "halves":
        return None
    D = cfg.d_model
    return torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])  # sines' columns, then cosines'


def _export_check(model: Any, tokenizer: Any) -> ModelConfig:
    from workbench.translation.tokenizer import SubwordTokenizer

    if not isinstance(model, Transformer):
        raise BridgeError(f"cannot export a {type(model).__name__} to Marian: only the workbench's Transformer "
                          "(arch 'transformer') has a Marian counterpart")
    cfg = model.cfg

    def need(cond: bool, field: str, value: Any, why: str) -> None:
        if not cond:
            raise BridgeError(f"ModelConfig.{field}={value!r} has no Marian counterpart: {why}")

    need(not cfg.norm_first, "norm_first", cfg.norm_first, "Marian is post-LN")
    need(cfg.positional == "sinusoidal", "positional", cfg.positional, "Marian uses the sinusoidal table")
    need(cfg.head_dim * cfg.n_heads == cfg.d_model, "d_head", cfg.d_head, "Marian's heads are d_model / n_heads wide")
    need(cfg.value_dim == cfg.head_dim, "d_v", cfg.d_v, "Marian's values are as wide as its keys")
    need(cfg.activation in _TO_HF_ACTIVATION, "activation", cfg.activation, f"supported: {sorted(_TO_HF_ACTIVATION)}")
    need(cfg.layer_norm_eps == _MARIAN_LAYER_NORM_EPS, "layer_norm_eps", cfg.layer_norm_eps,
         f"Marian's LayerNorms use {_MARIAN_LAYER_NORM_EPS}")
    need(model.encoder_layers[0].self_attn.in_proj_bias is not None if cfg.n_enc_layers else True, "bias", False,
         "Marian's projections have biases")
    if not isinstance(tokenizer, SubwordTokenizer) or not tokenizer.joint:
        raise BridgeError(f"cannot export a {type(tokenizer).__name__}"
                          f"{'' if isinstance(tokenizer, SubwordTokenizer) else ''} tokenizer: the export writes one "
                          "Hugging Face tokenizer, so it needs the workbench's joint BPE (SubwordTokenizer, joint=True)")
    return cfg


def marian_state_dict(model: Transformer) -> dict[str, Tensor]:
    """The workbench model's weights under Marian's names (float32), with the residual basis permuted when the
    model uses the paper's interleaved table (see the module docstring)."""
    cfg = model.cfg
    perm = _residual_permutation(cfg)
    ours = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}

    def reads(w: Tensor) -> Tensor:  # a matrix whose input is the residual stream: permute its columns
        return w if perm is None else w[:, perm]

    def writes(w: Tensor) -> Tensor:  # a matrix or vector whose output is the residual stream: permute its rows
        return w if perm is None else w[perm]

    out: dict[str, Tensor] = {
        "model.encoder.embed_tokens.weight": reads(ours["src_embed.tokens.weight"]),
        "model.decoder.embed_tokens.weight": reads(ours["tgt_embed.tokens.weight"]),
        "lm_head.weight": reads(ours["generator.weight"]),
        "final_logits_bias": ours.get("generator.bias", torch.zeros(model.tgt_vocab_size)).reshape(1, -1),
    }
    if cfg.tie_src_tgt:
        out["model.shared.weight"] = out["model.encoder.embed_tokens.weight"]
    for o, t in _layer_map(cfg.n_enc_layers, cfg.n_dec_layers):
        w = ours[o]
        if "linear1" in o:
            out[t] = reads(w) if w.dim() == 2 else w
        else:  # out_proj, linear2 and the LayerNorms write to the residual stream
            out[t] = writes(w)
    for o, t in _attention_blocks(cfg.n_enc_layers, cfg.n_dec_layers):
        w, b = ours[f"{o}.in_proj_weight"], ours[f"{o}.in_proj_bias"]
        inner = cfg.n_heads * cfg.head_dim
        for j, p in enumerate("qkv"):
            out[f"{t}.{p}_proj.weight"] = reads(w[j * inner : (j + 1) * inner])
            out[f"{t}.{p}_proj.bias"] = b[j * inner : (j + 1) * inner]
    return {k: v.contiguous() for k, v in out.items()}


def to_huggingface_model(model: Transformer, tokenizer: Any) -> Any:
    """The workbench model as a transformers ``MarianMTModel`` (float32, eval mode), same function."""
    transformers = _require_transformers()
    cfg = _export_check(model, tokenizer)
    hf_cfg = transformers.MarianConfig(
        vocab_size=model.src_vocab_size, decoder_vocab_size=model.tgt_vocab_size, d_model=cfg.d_model,
        encoder_layers=cfg.n_enc_layers, decoder_layers=cfg.n_dec_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function=_TO_HF_ACTIVATION[cfg.activation],
        dropout=cfg.dropout, attention_dropout=cfg.attn_dropout, activation_dropout=cfg.dropout,
        max_position_embeddings=cfg.max_len, scale_embedding=cfg.scale_embedding,
        pad_token_id=model.pad_id, eos_token_id=tokenizer.eos_id, bos_token_id=tokenizer.bos_id,
        decoder_start_token_id=tokenizer.bos_id, forced_eos_token_id=tokenizer.eos_id,
        share_encoder_decoder_embeddings=cfg.tie_src_tgt, tie_word_embeddings=cfg.tie_output,
        architectures=["MarianMTModel"],
    )
    hf = transformers.MarianMTModel(hf_cfg).eval()
    state = hf.state_dict()
    mapped = marian_state_dict(model)
    unknown = sorted(set(mapped) - set(state))
    for key in unknown:  # a tied copy transformers keeps out of its state dict
        if key not in ("model.shared.weight", "model.encoder.embed_tokens.weight",
                       "model.decoder.embed_tokens.weight", "lm_head.weight"):
            raise BridgeError(f"Marian has no weight {key}: the export map is out of date with transformers")
    state.update({k: v for k, v in mapped.items() if k in state})
    missing = sorted(k for k in state if k not in mapped and "embed_positions" not in k)
    if missing:
        raise BridgeError(f"the export gives no value for Marian's {missing[:3]}")
    hf.load_state_dict(state, strict=True)
    with torch.no_grad():  # untied copies that the state dict may leave out
        hf.model.encoder.embed_tokens.weight.copy_(mapped["model.encoder.embed_tokens.weight"])
        hf.model.decoder.embed_tokens.weight.copy_(mapped["model.decoder.embed_tokens.weight"])
        hf.lm_head.weight.copy_(mapped["lm_head.weight"])
    hf.generation_config.max_length = cfg.max_len
    hf.generation_config.decoder_start_token_id = tokenizer.bos_id
    hf.generation_config.forced_eos_token_id = tokenizer.eos_id
    hf.generation_config.pad_token_id = model.pad_id
    hf.generation_config.eos_token_id = tokenizer.eos_id
    hf.generation_config.bos_token_id = tokenizer.bos_id
    return hf


def to_huggingface_tokenizer(tokenizer: Any, model_max_length: int) -> Any:
    """The workbench's joint BPE as a transformers ``PreTrainedTokenizerFast`` that appends ``<eos>`` to every
    sentence (what :meth:`~workbench.translation.tokenizer.SubwordTokenizer.encode_src` does)."""
    transformers = _require_transformers()
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_str(tokenizer.src_tok.to_str())
    tok.post_processor = processors.TemplateProcessing(
        single="$A <eos>", pair="$A <eos> $B <eos>", special_tokens=[("<eos>", tokenizer.eos_id)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
        model_max_length=model_max_length,
    )


def to_huggingface(model: Transformer, tokenizer: Any, out_dir: str | Path) -> Path:
    """Write ``model`` and ``tokenizer`` to ``out_dir`` as a transformers Marian folder (``config.json``,
    ``model.safetensors``, ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``).

    A ``SHA256SUMS`` of those files is written last (``load_marian`` checks it).
    ``MarianMTModel.from_pretrained(out_dir)`` and ``AutoTokenizer.from_pretrained(out_dir)`` load it; its
    ``generate`` starts from ``<bos>`` and forces ``<eos>`` at the length limit, as the workbench's decoders do.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf = to_huggingface_model(model, tokenizer)
    hf.save_pretrained(out)
    to_huggingface_tokenizer(tokenizer, model.cfg.max_len).save_pretrained(out)
    # the SHA-256 of every file written, checked when the workbench loads the folder again (load_marian)
    write_manifest(out, [p.name for p in sorted(out.iterdir()) if p.is_file() and p.name != MANIFEST])
    return out
