"""CTranslate2 export: a workbench Transformer, through its Hugging Face Marian folder, converted by CTranslate2's own
Transformers converter.

CTranslate2's Marian loader assumes opus-mt's conventions: ``<pad>`` is the last id and the decoder starts from a
zero embedding (it drops the last vocabulary row and ignores ``decoder_start_token_id``). A workbench model starts
its decoder from ``<bos>``'s trained embedding and keeps ``<pad>`` at id 0, so the conversion runs the converter
with its BART loader's choices for those two points (a real start token, the whole vocabulary) and Marian's for the
rest (post-LN, no embedding LayerNorm, sinusoidal positions read from the model).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workbench.errors import BridgeError


def _require_ctranslate2() -> Any:
    try:
        import ctranslate2
        import ctranslate2.converters.transformers as ct2_transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BridgeError('the CTranslate2 export needs ctranslate2: pip install -e ".[hf]"') from e
    return ctranslate2, ct2_transformers


@contextlib.contextmanager
def _workbench_marian_loader() -> Iterator[None]:
    """Swap CTranslate2's loader for ``MarianConfig`` for one that keeps the start token and the whole vocabulary."""
    _, ct2t = _require_ctranslate2()

    class WorkbenchMarianLoader(ct2t.MarianMTLoader):
        def get_model_spec(self, model: Any) -> Any:
            model.config.normalize_before = False
            model.config.normalize_embedding = False
            return ct2t.BartLoader.get_model_spec(self, model)  # no removal of the last ("<pad>") row

        def set_config(self, config: Any, model: Any, tokenizer: Any) -> None:
            ct2t.BartLoader.set_config(self, config, model, tokenizer)  # decoder_start_token from the config

        def set_decoder(self, spec: Any, decoder: Any) -> None:
            ct2t.BartLoader.set_decoder(self, spec, decoder)  # start from <bos>'s embedding, not from zeros

        def get_vocabulary(self, model: Any, tokenizer: Any) -> list[str]:
            return ct2t.BartLoader.get_vocabulary(self, model, tokenizer)

    before = ct2t._MODEL_LOADERS.get("MarianConfig")
    ct2t._MODEL_LOADERS["MarianConfig"] = WorkbenchMarianLoader()
    try:
        yield
    finally:
        ct2t._MODEL_LOADERS["MarianConfig"] = before


def convert_huggingface_folder(hf_dir: str | Path, out_dir: str | Path, quantization: str | None = None,
                               force: bool = False) -> Path:
    """Convert a folder written by :func:`workbench.bridges.huggingface.to_huggingface` with CTranslate2's
    ``TransformersConverter`` (``quantization``: None for float32, or ``"int8"``, ``"float16"``...).

    A folder that is not empty is refused unless ``force``; then only the files the conversion writes are replaced
    (CTranslate2's own ``force`` deletes the whole folder first, with whatever else the user kept there)."""
    _, ct2t = _require_ctranslate2()
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not force)):
        raise BridgeError(f"{out} is a file or a folder that is not empty: choose a new folder, or force=True (the "
                          "command's --force) to write into it (files of other names are kept)")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".ct2-", dir=out) as tmp, _workbench_marian_loader():
        converter = ct2t.TransformersConverter(str(hf_dir))
        written = Path(converter.convert(str(Path(tmp) / "model"), quantization=quantization))
        for item in written.iterdir():
            if (out / item.name).is_dir():  # a folder of the same name: the conversion's replaces it
                shutil.rmtree(out / item.name)
            os.replace(item, out / item.name)
    return out


def to_ctranslate2(model: Any, tokenizer: Any, out_dir: str | Path, quantization: str | None = None,
                   force: bool = False) -> Path:
    """Write ``model`` as a CTranslate2 model folder (through a temporary Hugging Face Marian folder)."""
    from workbench.bridges.huggingface import to_huggingface

    with tempfile.TemporaryDirectory(prefix="workbench-hf-") as tmp:
        to_huggingface(model, tokenizer, tmp)
        return convert_huggingface_folder(tmp, out_dir, quantization=quantization, force=force)


def ct2_translator(model_dir: str | Path, device: str = "cpu", **options: Any) -> Any:
    """Open a CTranslate2 model folder as a ``ctranslate2.Translator`` (``options``: ``intra_threads``,
    ``inter_threads``, ``compute_type``...), leaving PyTorch's CPU thread count as it was.

    Creating a Translator sets the process's OpenMP thread count to its ``intra_threads``, and PyTorch shares it:
    without this, opening a one-thread Translator would silently make every later PyTorch product in the process run
    on one thread (and change how their rows are split, hence their rounding).
    """
    from workbench.runtime import cpu_threads

    ctranslate2, _ = _require_ctranslate2()
    with cpu_threads():
        return ctranslate2.Translator(str(model_dir), device=device, **options)


def ct2_translate(translator: Any, tokenizer: Any, sentences: list[str], beam: int = 4, length_penalty: float = 1.0,
                  max_extra: int = 50, batch_size: int = 64) -> list[str]:
    """Translate with a ``ctranslate2.Translator`` using the workbench tokenizer (CTranslate2 takes token strings):
    the same source tokens and output budget (source length + ``max_extra``, eos included) as
    :func:`workbench.translation.decode.translate`."""
    ids = tokenizer.encode_src(sentences)
    tokens = [[tokenizer.id_to_token(i, "src") for i in row] for row in ids]
    limit = max(len(r) for r in ids) + max_extra if ids else 1
    results = translator.translate_batch(tokens, beam_size=beam, length_penalty=length_penalty,
                                         max_batch_size=batch_size, max_decoding_length=limit, return_scores=False)
    vocab = tokenizer.tgt_tok  # the workbench's BPE (a tokenizers.Tokenizer)
    out_ids = [[vocab.token_to_id(t) for t in r.hypotheses[0]] for r in results]
    return tokenizer.decode_tgt(out_ids)
