"""Trained translators that ship inside the package: ``workbench.pretrained(name) -> (model, tokenizer, card)``.

Each model lives in ``workbench/pretrained/NAME/``:

    model.safetensors   the weights in half precision (no pickle; loaded back as float32)
    config.json         architecture, model config, vocabulary sizes, languages
    tokenizer.json      the subword tokenizer, trained on the training split only
    CARD.md             the model card for people
    card.json           the same for programs: recipe, hardware, scores with sacreBLEU signatures, SHA-256 of files
    SHA256SUMS          the SHA-256 of all five files above, card.json included (``sha256sum -c SHA256SUMS``)

Loading checks every file's SHA-256 (``card.json``'s against ``SHA256SUMS``, the others against both) first and
refuses a changed or truncated file, an edited card too, with a :class:`PretrainedError` that names it; nothing on
disk is modified. Nothing is downloaded. Building these folders
from a training run (export, cards, the choices on val) is :mod:`workbench.tools.release`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model as load_safetensors
from torch import nn

from workbench.errors import CheckpointError
from workbench.model.registry import build_from_config
from workbench.translation import files
from workbench.translation.checkpoint import load_model
from workbench.translation.data import (
    sha256 as sha256_file,  # one SHA-256 reader for data files and shipped models
)
from workbench.translation.decode import DECODING
from workbench.translation.files import MANIFEST, write_manifest  # noqa: F401 (re-exported)
from workbench.translation.tokenizer import tokenizer_from_json

log = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "pretrained"
FILES = ("model.safetensors", "config.json", "tokenizer.json", "CARD.md")  # hashed in card.json
BUILT = ("config.json", "model.safetensors", "tokenizer.json")  # what load_folder needs of a built model's folder


class PretrainedError(CheckpointError):
    """A shipped model that is unknown, missing a file, or whose file does not match its recorded SHA-256."""


def list_pretrained(root: str | Path | None = None) -> list[str]:
    """Names of the shipped models (folders with a ``card.json``)."""
    root = Path(root) if root is not None else WEIGHTS_DIR
    return sorted(p.parent.name for p in root.glob("*/card.json"))


def is_pretrained_name(spec: str | Path, root: str | Path | None = None) -> bool:
    """True when ``spec`` names a shipped model and is not also a path on disk."""
    return isinstance(spec, str) and not Path(spec).exists() and spec in list_pretrained(root)


def model_dir(name: str, root: str | Path | None = None) -> Path:
    root = Path(root) if root is not None else WEIGHTS_DIR
    names = list_pretrained(root)
    if name not in names:
        if root == WEIGHTS_DIR:
            raise PretrainedError(f"no shipped model named {name!r}: choose one of {names} (`workbench pretrained list`)")
        where = "is not a folder" if not root.is_dir() else (f"holds {names}" if names else "holds no model folder")
        hint = (" A name with a slash is a Hugging Face model: open it with workbench.pretrained without root."
                if "/" in name else "")
        raise PretrainedError(f"no model folder named {name!r} under root={str(root)!r}: that root {where} (a model "
                              f"folder holds card.json, config.json, model.safetensors and tokenizer.json).{hint}")
    return root / name


def restore_hint(folder: str | Path) -> str:
    """How to get a model folder's files back: the package's own folder from git or pip, a copy from its source."""
    if Path(folder).resolve().is_relative_to(WEIGHTS_DIR.resolve()):
        return ("restore it with `git checkout -- workbench/pretrained` or reinstall the package (pip install "
                "--force-reinstall attention-workbench)")
    return (f"copy the folder {folder} again from where it came from, or build it again with `workbench pretrained "
            "build`")


def verify_manifest(folder: str | Path, required: Sequence[str] = (), error: type[Exception] | None = None,
                    fix: str | None = None, only: Sequence[str] | None = None) -> dict[str, str]:
    """:func:`workbench.translation.files.verify_manifest` with :class:`PretrainedError` as its default error and
    :func:`restore_hint` as its default advice."""
    return files.verify_manifest(folder, required, error or PretrainedError, fix or restore_hint(folder), only)


def read_card(name: str, root: str | Path | None = None) -> dict[str, Any]:
    """The machine-readable card of a shipped model, checked against its ``SHA256SUMS`` (an edited card is a
    :class:`PretrainedError`; :func:`verify_pretrained` checks the other files too)."""
    folder = model_dir(name, root)
    verify_manifest(folder, required=("card.json",), only=("card.json",))
    return json.loads((folder / "card.json").read_text(encoding="utf-8"))


def verify_pretrained(name: str, root: str | Path | None = None) -> dict[str, Any]:
    """Check every file of a shipped model, its card included, against ``SHA256SUMS`` and the SHA-256 in its
    card; returns the card."""
    folder = model_dir(name, root)
    verify_manifest(folder, required=(*FILES, "card.json"))
    card = json.loads((folder / "card.json").read_text(encoding="utf-8"))
    recorded = card.get("sha256") or {}
    for fname in FILES:
        path = folder / fname
        if fname not in recorded:
            raise PretrainedError(f"{folder / 'card.json'} records no SHA-256 for {fname}: the card is incomplete")
        if not path.exists():
            raise PretrainedError(f"{path} is missing: {restore_hint(folder)}")
        actual = sha256_file(path)
        if actual != recorded[fname]:
            raise PretrainedError(
                f"{path} does not match its recorded SHA-256 (expected {recorded[fname][:12]}..., found "
                f"{actual[:12]}...): the file was changed or truncated. It was left as it is; {restore_hint(folder)}"
            )
    return card


def _build(config: dict[str, Any]) -> nn.Module:
    return build_from_config(config["arch"], config["model_cfg"], config["src_vocab_size"], config["tgt_vocab_size"],
                             config["pad_id"])


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, the best file in a run folder (averaged.pt, then best.pt, then last.pt), or a built model's
    folder (config.json, model.safetensors, tokenizer.json: what ``workbench pretrained build`` writes) as it is."""
    p = Path(path)
    if p.is_dir() and all((p / f).is_file() for f in BUILT):
        return p  # a built model's folder: load_any opens it whole
    if p.is_dir():
        for fname in ("averaged.pt", "best.pt", "last.pt"):
            if (p / fname).exists():
                return p / fname
        raise CheckpointError(f"no checkpoint in {p}: expected averaged.pt, best.pt or last.pt (a run folder), or "
                              "config.json, model.safetensors and tokenizer.json (a built model's folder)")
    if not p.exists():
        names = list_pretrained()
        raise CheckpointError(f"checkpoint {p} does not exist: pass a file written by 'workbench train', its run "
                              f"folder, or a shipped model name ({', '.join(names) or 'none installed'})")
    return p


def pretrained(name: str = "small-de-en", device: str | torch.device = "cpu",
               root: str | Path | None = None) -> tuple[nn.Module, Any, dict[str, Any]]:
    """A shipped translator, verified and loaded: (model in eval mode, float32, tokenizer, card dict).

    :func:`workbench.pretrained` also opens Hugging Face models (a name with a slash) through the bridge.

    Raises:
        PretrainedError: no shipped model of that name (a Hugging Face name is pointed to ``workbench.pretrained``),
            or its files do not match the manifest.
    """
    if root is None and "/" in name and name not in list_pretrained():
        raise PretrainedError(f"{name!r} is a Hugging Face name, not a shipped model: open it with "
                              "workbench.pretrained (it converts Marian models; the 'hf' extra)")
    from workbench.runtime import resolve_device

    device = resolve_device(device)  # a device this machine lacks: one clear line, before any file is read
    card = verify_pretrained(name, root)
    model, tokenizer = load_folder(model_dir(name, root), device=device)
    return model, tokenizer, card


def load_folder(folder: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, Any]:
    """Model (eval mode, float32) and tokenizer from a folder in the shipped layout, without hash checks."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    model = _build(config)
    # the file holds float16 tensors; load_state_dict copies them into the float32 parameters
    missing, unexpected = load_safetensors(model, str(folder / "model.safetensors"), strict=False)
    if missing or unexpected:
        raise PretrainedError(f"{folder / 'model.safetensors'} does not fit its config.json (missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]})")
    tokenizer = tokenizer_from_json((folder / "tokenizer.json").read_text(encoding="utf-8"))
    return model.to(device).eval(), tokenizer


def load_any(spec: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, Any, dict[str, Any]]:
    """A shipped model by name, or a checkpoint file / run folder: (model, tokenizer, info dict)."""
    if is_pretrained_name(str(spec)):
        model, tokenizer, card = pretrained(str(spec), device=device)
        return model, tokenizer, {"card": card, "extra": {"src_lang": card["src_lang"], "tgt_lang": card["tgt_lang"]},
                                  "source": str(spec)}
    folder = Path(spec)
    if folder.is_dir() and all((folder / f).is_file() for f in BUILT):
        # a folder in the shipped layout (what `workbench pretrained build --out` writes), not installed
        model, tokenizer = load_folder(folder, device=device)
        card_file = folder / "card.json"
        card = json.loads(card_file.read_text(encoding="utf-8")) if card_file.is_file() else None
        # the languages from its card, else from its config.json (a folder without a card is not de-en by default)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        langs = card or config
        extra = {k: langs[k] for k in ("src_lang", "tgt_lang") if isinstance(langs.get(k), str)}
        return model, tokenizer, {"card": card, "extra": extra, "source": str(folder)}
    path = resolve_checkpoint(spec)
    model, tokenizer, state = load_model(path, device=device)
    if tokenizer is None:
        raise CheckpointError(f"{path} holds no tokenizer (saved without one): translating needs the tokenizer it "
                              "was trained with; save the checkpoint with save_checkpoint(..., tokenizer=...)")
    state["source"] = str(path)
    return model, tokenizer, state


# -- decoding settings a card records ------------------------------------------------------------------------------
def card_alpha(card: dict[str, Any]) -> float:
    """The beam-search length penalty a card's beam-4 scores were decoded with (the paper's, :data:`DECODING`'s, for
    cards that predate the choice on val)."""
    return float((card.get("decoding") or {}).get("alpha", DECODING.alpha))


def default_alpha(info: dict[str, Any]) -> float:
    """The length penalty to decode with by default: a shipped model's card's (``load_any``'s info dict), else
    :data:`~workbench.translation.decode.DECODING`'s (the paper's 0.6)."""
    card = info.get("card")
    return card_alpha(card) if card else DECODING.alpha
