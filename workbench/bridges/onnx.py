"""ONNX export for the browser: the encoder and one decoder step with its key/value cache, as two graphs.

The two graphs are what a page needs to translate with ONNX Runtime Web, one sentence at a time (no padding):

* ``encoder.onnx``: ``src`` (1, S) ids and ``enc_gate`` (L_enc, H) -> the cross-attention keys and values of every
  decoder layer, ``cross_k`` / ``cross_v`` (L_dec, 1, H, S, d_head), computed once per sentence.
* ``decoder.onnx``: one step. ``tokens`` (B, 1) the last token of each row, ``offset`` (1,) its position, the
  self-attention cache ``past_k`` / ``past_v`` (L_dec, B, H, T, d_head) (T = 0 at the first step), ``cross_k`` /
  ``cross_v`` (L_dec, B, H, S, d_head) and two gates ``self_gate`` / ``cross_gate`` (L_dec, H) -> ``logits`` (B, V),
  the grown cache ``present_k`` / ``present_v`` (L_dec, B, H, T + 1, d_head) and ``cross_weights``
  (L_dec, B, H, S): every head's cross-attention weights of this step.

A gate multiplies each head's output ``z`` before ``W^O``: 1 keeps the head (bit for bit), 0 switches it off as
:func:`workbench.inspect.intervene.ablate_heads` does (``mode="zero"``). The graphs write attention out explicitly
(softmax(Q K^T / sqrt(d_k)) V), so the weights they return are the ones that made the output.

Weights: ``weights="fp32"`` keeps them as they are; ``weights="int8"`` stores every matrix (the tied embedding, the
projections and the feed-forward layers) as int8 with one float scale per output channel, turned back into float32 by a
``DequantizeLinear`` node, so the arithmetic stays float32 and only the stored weights are rounded (about a quarter of
the size). Both graphs keep their weights in one shared file, ``weights.bin`` (ONNX external data), so the embedding
matrix that encoder and decoder share is stored once. ``tokenizer.json`` (the Hugging Face ``tokenizers`` JSON of
the source and target sides) and ``model.json`` (sizes, special ids, decoding defaults, the card's domain warning)
sit beside them.

:class:`OnnxTranslator` runs the exported folder with ``onnxruntime`` in Python, with the same greedy search as
:func:`workbench.translation.decode.greedy_decode`; tests/test_onnx_export.py checks the two agree token for token.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from workbench.errors import BridgeError, InputTextError
from workbench.model.sites import ATTENTION_KINDS, kind_name

log = logging.getLogger(__name__)

WEIGHTS_FILE = "weights.bin"
FORMATS = ("fp32", "int8")
OPSET = 18
# ONNX Runtime keeps DequantizeLinear nodes out of constant folding by default (for its quantized kernels); this
# entry folds them at load, so the int8 matrices become float32 once instead of at every run (the page sets it too)
SESSION_CONFIG = ("session.disable_quant_qdq", "1")
_MIN_QUANTIZED = 16384  # matrices with at least this many elements are stored as int8 (not LayerNorm or biases)
# attention kind -> the translate page's name for its head gates (web/translate.js, its checkboxes' data-kind)
PAGE_GATES = {"enc.self": "enc_self", "dec.self": "dec_self", "dec.cross": "cross"}


def _require_onnx() -> tuple[Any, Any]:
    try:
        import onnx
        import onnxruntime
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BridgeError('the ONNX export needs onnx, onnxscript and onnxruntime: pip install -e ".[onnx]"') from e
    return onnx, onnxruntime


def _positions(embedding: nn.Module) -> Tensor:
    """The positional table of an :class:`~workbench.model.transformer.Embedding`: (max_len, d_model)."""
    pos = embedding.positional
    return pos.table if hasattr(pos, "table") else pos.embedding.weight


def _attend(block: nn.Module, q_in: Tensor, k: Tensor, v: Tensor, gate: Tensor) -> tuple[Tensor, Tensor]:
    """Explicit multi-head attention with a per-head gate on ``z`` (the hook_z site of ablate_heads).

    Shapes:
        q_in (B, Tq, d_model), k (B, H, Tk, d_head), v (B, H, Tk, d_v), gate (H,) -> out (B, Tq, d_model),
        weights (B, H, Tq, Tk)
    """
    inner = block.n_heads * block.d_head
    q = block._split(block._project(q_in, slice(0, inner)))  # (B, H, Tq, d_head)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, Tq, Tk)
    weights = torch.softmax(scores, dim=-1)  # (B, H, Tq, Tk)
    z = (weights @ v) * gate[None, :, None, None]  # (B, H, Tq, d_v)
    B, H, Tq, Dv = z.shape
    return block.out_proj(z.transpose(1, 2).reshape(B, Tq, H * Dv)), weights  # (B, Tq, H * d_v) -> d_model


def _keys_values(block: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
    """Shapes: x (B, T, d_model) -> k (B, H, T, d_head), v (B, H, T, d_v)."""
    inner, inner_v = block.n_heads * block.d_head, block.n_heads * block.d_v
    k, v = block._project(x, slice(inner, None)).split([inner, inner_v], dim=-1)  # (B, T, inner), (B, T, inner_v)
    return block._split(k), block._split(v)


class EncoderGraph(nn.Module):
    """The encoder, ending in every decoder layer's cross-attention keys and values."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, enc_gate: Tensor) -> tuple[Tensor, Tensor]:
        """Shapes: src (1, S) ids, enc_gate (L_enc, H) -> cross_k, cross_v (L_dec, 1, H, S, d_head)."""
        m = self.model
        emb = m.src_embed
        x = emb.tokens(src) * emb.scale + _positions(emb)[: src.shape[1]]  # (1, S, d_model)
        for i, layer in enumerate(m.encoder_layers):
            def self_attn(h: Tensor, layer: nn.Module = layer, i: int = i) -> Tensor:
                k, v = _keys_values(layer.self_attn, h)
                return _attend(layer.self_attn, h, k, v, enc_gate[i])[0]

            x = layer.residual(1, x, self_attn)
            x = layer.residual(2, x, layer.ff)
        memory = m.encoder_norm(x)  # (1, S, d_model)
        kv = [_keys_values(layer.cross_attn, memory) for layer in m.decoder_layers]
        return torch.stack([k for k, _ in kv]), torch.stack([v for _, v in kv])  # (L_dec, 1, H, S, d_head)


class DecoderStepGraph(nn.Module):
    """One decoding step: the next-token logits, the grown self-attention cache, every cross-attention head's weights."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor, offset: Tensor, past_k: Tensor, past_v: Tensor, cross_k: Tensor,
                cross_v: Tensor, self_gate: Tensor, cross_gate: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Shapes: tokens (B, 1), offset (1,), past_k/v (L, B, H, T, d_head), cross_k/v (L, B, H, S, d_head),
        gates (L, H) -> logits (B, V), present_k/v (L, B, H, T + 1, d_head), cross_weights (L, B, H, S)."""
        m = self.model
        emb = m.tgt_embed
        x = emb.tokens(tokens) * emb.scale + _positions(emb).index_select(0, offset)  # (B, 1, d_model)
        presents_k, presents_v, crosses = [], [], []
        for i, layer in enumerate(m.decoder_layers):
            def self_attn(h: Tensor, layer: nn.Module = layer, i: int = i) -> Tensor:
                k_new, v_new = _keys_values(layer.self_attn, h)  # (B, H, 1, d_head)
                k = torch.cat([past_k[i], k_new], dim=2)  # (B, H, T + 1, d_head)
                v = torch.cat([past_v[i], v_new], dim=2)
                presents_k.append(k)
                presents_v.append(v)
                return _attend(layer.self_attn, h, k, v, self_gate[i])[0]

            def cross_attn(h: Tensor, layer: nn.Module = layer, i: int = i) -> Tensor:
                out, w = _attend(layer.cross_attn, h, cross_k[i], cross_v[i], cross_gate[i])
                crosses.append(w[:, :, 0])  # (B, H, S)
                return out

            x = layer.residual(1, x, self_attn)
            x = layer.residual(2, x, cross_attn)
            x = layer.residual(3, x, layer.ff)
        # the pre-softmax projection on 2-D rows: exported as Gemm(transB=1) on the embedding matrix itself, so the
        # tied weight is stored once (a 3-D input would store a transposed copy)
        logits = m.generator(m.decoder_norm(x)[:, 0])  # (B, d_model) -> (B, V)
        return logits, torch.stack(presents_k), torch.stack(presents_v), torch.stack(crosses)


def _example_inputs(model: nn.Module) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    cfg = model.cfg
    H, dh, dv = cfg.n_heads, model.decoder_layers[0].self_attn.d_head, model.decoder_layers[0].self_attn.d_v
    Le, Ld, B, T, S = cfg.n_enc_layers, cfg.n_dec_layers, 2, 3, 5
    enc = (torch.randint(4, model.src_vocab_size, (1, S)), torch.ones(Le, H))
    dec = (torch.randint(4, model.tgt_vocab_size, (B, 1)), torch.tensor([T]), torch.randn(Ld, B, H, T, dh),
           torch.randn(Ld, B, H, T, dv), torch.randn(Ld, B, H, S, dh), torch.randn(Ld, B, H, S, dv),
           torch.ones(Ld, H), torch.ones(Ld, H))
    return enc, dec


def _export(module: nn.Module, args: tuple[Tensor, ...], names: list[str], outputs: list[str],
            dynamic: dict[str, dict[int, str] | None], path: Path) -> None:
    """One graph through torch's ``torch.export``-based exporter (``dynamo=True``, this torch's default).

    It runs offline (onnxscript is a plain Python package) and is the exporter torch keeps; the TorchScript one
    (``dynamo=False``) is deprecated. The free sizes are named ``Dim`` s; the example inputs use sizes above 1 (the
    tracer specialises 0 and 1), and the graph runs at T = 0 (the first step's empty cache) all the same.
    """
    import warnings

    dims: dict[str, Any] = {}
    shapes = {n: None if d is None else {axis: dims.setdefault(name, torch.export.Dim(name)) for axis, name in d.items()}
              for n, d in dynamic.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on dynamic-shape naming
        program = torch.onnx.export(module, args, dynamo=True, dynamic_shapes=shapes, input_names=names,
                                    output_names=outputs, opset_version=OPSET, optimize=True, verbose=False)
    program.save(str(path))


def _drop_transposed_copies(graph: Any) -> None:
    """Store a matrix once: an initializer that is the transpose of another (the tied output projection, which the
    exporter folds into a transposed copy of the embedding) becomes a Transpose node of it (folded again at load)."""
    from onnx import helper, numpy_helper

    arrays = {i.name: numpy_helper.to_array(i) for i in graph.initializer if len(i.dims) == 2}
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for name, a in arrays.items():
        by_shape.setdefault(a.shape, []).append(name)
    # the exporter's own names (onnx::...) are the folded copies: drop those first, and never both of a pair
    for init in sorted(graph.initializer, key=lambda i: not i.name.startswith("onnx::")):
        a = arrays.get(init.name)
        if a is None or a.shape[0] == a.shape[1]:
            continue
        twin = next((n for n in by_shape.get(a.shape[::-1], []) if n in arrays and np.array_equal(arrays[n].T, a)), None)
        if twin is not None:
            del arrays[init.name]
            graph.initializer.remove(init)
            graph.node.insert(0, helper.make_node("Transpose", [twin], [init.name], perm=[1, 0],
                                                  name=init.name + "_transpose"))


def _quantize_int8(graph: Any, onnx: Any) -> None:
    """Replace every large float matrix initializer by int8, one float scale per output channel and a DequantizeLinear
    node (symmetric: zero point 0)."""
    from onnx import helper, numpy_helper

    # one scale per output channel: the columns of a MatMul's right-hand matrix (in, out), else the rows (an
    # embedding's tokens, a Gemm's or Linear's (out, in) weight)
    column_wise = {node.input[1] for node in graph.node if node.op_type == "MatMul" and len(node.input) > 1}
    new_nodes = []
    for init in list(graph.initializer):
        w = numpy_helper.to_array(init)
        if w.dtype != np.float32 or w.ndim != 2 or w.size < _MIN_QUANTIZED or "positional" in init.name:
            continue
        axis = 1 if init.name in column_wise else 0
        scale = np.abs(w).max(axis=1 - axis) / 127.0  # (out,)
        scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
        q = np.clip(np.rint(w / np.expand_dims(scale, 1 - axis)), -127, 127).astype(np.int8)
        graph.initializer.remove(init)
        graph.initializer.extend([numpy_helper.from_array(q, init.name + "_int8"),
                                  numpy_helper.from_array(scale, init.name + "_scale"),
                                  numpy_helper.from_array(np.zeros_like(scale, dtype=np.int8), init.name + "_zero")])
        new_nodes.append(helper.make_node("DequantizeLinear", [init.name + "_int8", init.name + "_scale",
                                                               init.name + "_zero"], [init.name], axis=axis,
                                          name=init.name + "_dequantize"))
    for node in reversed(new_nodes):
        graph.node.insert(0, node)


def _share_weights(models: dict[str, Any], out: Path, onnx: Any) -> None:
    """Move every initializer of the graphs into one external-data file, each distinct tensor stored once."""
    from onnx import TensorProto

    offsets: dict[bytes, tuple[int, int]] = {}
    with open(out / WEIGHTS_FILE, "wb") as f:
        for model in models.values():
            for init in model.graph.initializer:
                raw = onnx.numpy_helper.to_array(init).tobytes()
                if len(raw) < 64:  # scalars and tiny tensors stay inside the graph
                    continue
                key = hashlib.sha256(raw + bytes(str((init.data_type, tuple(init.dims))), "ascii")).digest()
                if key not in offsets:
                    pad = (-f.tell()) % 64
                    f.write(b"\0" * pad)
                    offsets[key] = (f.tell(), len(raw))
                    f.write(raw)
                offset, length = offsets[key]
                init.ClearField("raw_data")
                for field in ("float_data", "int32_data", "int64_data", "double_data"):
                    init.ClearField(field)
                init.data_location = TensorProto.EXTERNAL
                del init.external_data[:]
                for k, v in (("location", WEIGHTS_FILE), ("offset", str(offset)), ("length", str(length))):
                    entry = init.external_data.add()
                    entry.key, entry.value = k, v
    for name, model in models.items():
        onnx.save_model(model, str(out / name))


def to_onnx(model: nn.Module, tokenizer: Any, out_dir: str | Path, weights: str = "int8",
            card: dict[str, Any] | None = None, alpha: float | None = None) -> Path:
    """Write ``encoder.onnx``, ``decoder.onnx``, ``weights.bin``, ``tokenizer.json`` and ``model.json`` to ``out_dir``.

    Args:
        model: a workbench :class:`~workbench.model.transformer.Transformer` (eval mode is set on a copy).
        tokenizer: its :class:`~workbench.translation.tokenizer.SubwordTokenizer`.
        out_dir: the folder to write (created; files of the same names are replaced).
        weights: ``"int8"`` (matrices stored as int8 with a float scale per output channel) or ``"fp32"``.
        card: the shipped model's card (its name and domain warning go to ``model.json``).
        alpha: the length penalty beam search should use (default: the card's, else the paper's decoding default).

    Raises:
        BridgeError: an unknown ``weights`` format, or a model this export does not cover.
    """
    import copy

    onnx, _ = _require_onnx()
    from workbench.translation.decode_steps import DECODING

    if weights not in FORMATS:
        raise BridgeError(f"weights={weights!r}: use one of {', '.join(FORMATS)}")
    if not hasattr(model, "encoder_layers") or not hasattr(tokenizer, "src_tok"):
        raise BridgeError("the ONNX export takes a workbench Transformer and its subword tokenizer "
                          f"(got {type(model).__name__}, {type(tokenizer).__name__})")
    if getattr(model.cfg, "output_bias", False):
        raise BridgeError("the ONNX export does not cover models with an output bias (converted Marian models)")
    model = copy.deepcopy(model).float().eval().cpu()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    enc_args, dec_args = _example_inputs(model)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        _export(EncoderGraph(model), enc_args, ["src", "enc_gate"], ["cross_k", "cross_v"],
                {"src": {1: "S"}, "enc_gate": None}, Path(tmp) / "encoder.onnx")
        _export(DecoderStepGraph(model), dec_args,
                ["tokens", "offset", "past_k", "past_v", "cross_k", "cross_v", "self_gate", "cross_gate"],
                ["logits", "present_k", "present_v", "cross_weights"],
                {"tokens": {0: "B"}, "offset": None, "past_k": {1: "B", 3: "T"}, "past_v": {1: "B", 3: "T"},
                 "cross_k": {1: "B", 3: "S"}, "cross_v": {1: "B", 3: "S"}, "self_gate": None, "cross_gate": None},
                Path(tmp) / "decoder.onnx")
        graphs = {name: onnx.load(str(Path(tmp) / name)) for name in ("encoder.onnx", "decoder.onnx")}
    for g in graphs.values():
        _drop_transposed_copies(g.graph)
        if weights == "int8":
            _quantize_int8(g.graph, onnx)
    _share_weights(graphs, out, onnx)
    for name in graphs:
        onnx.checker.check_model(str(out / name))
    (out / "tokenizer.json").write_text(tokenizer.to_json(), encoding="utf-8")
    cfg = model.cfg
    card = card or {}
    if alpha is None:
        from workbench.translation.shipped import card_alpha

        alpha = card_alpha(card) if card else DECODING.alpha
    info = {
        "format": "attention-workbench-onnx", "version": 1, "weights": weights, "opset": OPSET,
        "name": card.get("name"), "src_lang": card.get("src_lang"), "tgt_lang": card.get("tgt_lang"),
        "n_enc_layers": cfg.n_enc_layers, "n_dec_layers": cfg.n_dec_layers, "n_heads": cfg.n_heads,
        "d_head": model.decoder_layers[0].self_attn.d_head, "d_v": model.decoder_layers[0].self_attn.d_v,
        "max_len": cfg.max_len, "vocab_size": model.tgt_vocab_size,
        "pad_id": tokenizer.pad_id, "unk_id": tokenizer.unk_id, "bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id,
        "beam": DECODING.beam, "alpha": alpha, "max_extra": DECODING.max_extra,
        "domain_warning": _domain_warning(card),
    }
    (out / "model.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log.info("wrote the ONNX graphs of %s (%s weights) to %s", card.get("name", "the model"), weights, out)
    return out


def _domain_warning(card: dict[str, Any]) -> str | None:
    """The card's domain limit (its ``limits`` item that starts with "Domain"), or None."""
    limits = card.get("limits")
    if isinstance(limits, list):
        return next((item for item in limits if isinstance(item, str) and item.startswith("Domain")), None)
    return None


class OnnxTranslator:
    """An exported folder run with ``onnxruntime`` (CPU): greedy decoding, one sentence at a time.

    Example:
        >>> t = OnnxTranslator("web/small-de-en")
        >>> t.translate(["Ein Hund rennt durch den Schnee ."])
    """

    def __init__(self, folder: str | Path, threads: int = 1) -> None:
        _, ort = _require_onnx()
        from workbench.translation.tokenizer import tokenizer_from_json

        folder = Path(folder)
        for name in ("encoder.onnx", "decoder.onnx", WEIGHTS_FILE, "tokenizer.json", "model.json"):
            if not (folder / name).is_file():
                raise BridgeError(f"{folder / name} is missing: export the model with "
                                  f"`workbench export MODEL {folder} --to onnx`")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry(*SESSION_CONFIG)
        self.encoder = ort.InferenceSession(str(folder / "encoder.onnx"), opts, providers=["CPUExecutionProvider"])
        self.decoder = ort.InferenceSession(str(folder / "decoder.onnx"), opts, providers=["CPUExecutionProvider"])
        self.info = json.loads((folder / "model.json").read_text(encoding="utf-8"))
        self.tokenizer = tokenizer_from_json((folder / "tokenizer.json").read_text(encoding="utf-8"))

    def gates(self, off: Sequence[tuple[str, int, int]] = ()) -> dict[str, np.ndarray]:
        """Head gates with the heads ``off`` at 0.

        ``off`` holds ``(kind, layer, head)`` as :func:`~workbench.inspect.intervene.ablate_heads` takes them, kind
        ``"enc.self"``, ``"dec.self"`` or ``"dec.cross"`` (the old ``"enc_self"``, ``"dec_self"``, ``"cross"`` warn).
        Returns the (L, H) gates by the names the translate page uses for them: ``enc_self``, ``dec_self``, ``cross``
        (its checkboxes' ``data-kind``), fed to the graphs' ``enc_gate``, ``self_gate`` and ``cross_gate``.

        Raises:
            SiteNameError: an unknown kind.
        """
        i = self.info
        gates = {"enc_self": np.ones((i["n_enc_layers"], i["n_heads"]), np.float32),
                 "dec_self": np.ones((i["n_dec_layers"], i["n_heads"]), np.float32),
                 "cross": np.ones((i["n_dec_layers"], i["n_heads"]), np.float32)}
        for kind, layer, head in off:
            gates[PAGE_GATES[kind_name(kind, ATTENTION_KINDS, what="head kind")]][layer, head] = 0.0
        return gates

    def greedy_ids(self, src_ids: Sequence[int], off: Sequence[tuple[str, int, int]] = ()) -> tuple[list[int], np.ndarray]:
        """Greedy search for one sentence, as :func:`~workbench.translation.decode.greedy_decode` does.

        Returns:
            the output ids (eos excluded) and the cross-attention weights of every step, (steps, L, H, S).
        """
        i, g = self.info, self.gates(off)
        src = np.asarray([list(src_ids)], dtype=np.int64)  # (1, S)
        cross_k, cross_v = self.encoder.run(None, {"src": src, "enc_gate": g["enc_self"]})
        L, H = i["n_dec_layers"], i["n_heads"]
        past_k = np.zeros((L, 1, H, 0, i["d_head"]), np.float32)
        past_v = np.zeros((L, 1, H, 0, i["d_v"]), np.float32)
        limit = max(1, min(src.shape[1] + i["max_extra"], i["max_len"] - 1))
        token, out, weights = i["bos_id"], [], []
        for t in range(limit):
            logits, past_k, past_v, w = self.decoder.run(None, {
                "tokens": np.asarray([[token]], np.int64), "offset": np.asarray([t], np.int64), "past_k": past_k,
                "past_v": past_v, "cross_k": cross_k, "cross_v": cross_v, "self_gate": g["dec_self"],
                "cross_gate": g["cross"]})
            weights.append(w[:, 0])
            token = int(np.argmax(logits[0])) if t + 1 < limit else i["eos_id"]
            if token == i["eos_id"]:
                break
            out.append(token)
        return out, np.stack(weights)

    def translate(self, sentences: Sequence[str], off: Sequence[tuple[str, int, int]] = ()) -> list[str]:
        """Greedy translations of ``sentences`` (empty ones give ``""``), heads ``off`` switched off."""
        if isinstance(sentences, str):
            raise InputTextError("translate() takes a list of sentences, got one string: wrap it in a list")
        results = []
        for s in sentences:
            if not s.strip():
                results.append("")
                continue
            ids, _ = self.greedy_ids(self.tokenizer.encode_src([s])[0], off)
            results.append(self.tokenizer.decode_tgt([ids])[0])
        return results


__all__ = ["DecoderStepGraph", "EncoderGraph", "OnnxTranslator", "to_onnx"]
