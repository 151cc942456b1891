"""Bridges to the field's tools: Hugging Face Marian (opus-mt) import and export, CTranslate2 export.

Optional dependencies (``pip install -e ".[hf]"``): transformers, sentencepiece and ctranslate2 are imported only
when a bridge is used.
"""

from __future__ import annotations

from workbench.bridges.ctranslate2 import (
    convert_huggingface_folder,
    ct2_translate,
    ct2_translator,
    to_ctranslate2,
)
from workbench.bridges.huggingface import (
    MarianTokenizerAdapter,
    from_huggingface,
    hub_pretrained,
    load_marian,
    to_huggingface,
)

__all__ = ["convert_huggingface_folder", "ct2_translate", "ct2_translator", "to_ctranslate2", "MarianTokenizerAdapter", "from_huggingface", "hub_pretrained", "load_marian", "to_huggingface"]
