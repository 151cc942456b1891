"""Building a release: a shipped model made from a training run (``workbench pretrained build`` and ``rescore``).

Loading and verifying shipped models is :mod:`workbench.translation.shipped`; this module writes them:

- :func:`choose_weights_on_val`, the one rule for which weights of a run to judge further: the last checkpoint or
  the average of the last k step snapshots, each rounded to float16 as shipped and decoded greedily on val;
- :func:`choose_length_penalty`, beam 4's GNMT length penalty chosen on val;
- :func:`score_val_and_test`: the length penalty chosen, then test decoded once with it
  (:func:`workbench.translation.pipeline.score`, the one scoring function);
- :func:`export_weights`, :func:`write_card` and :func:`render_card`: the files of ``workbench/pretrained/NAME``.

``bench/translate_multi30k.py`` and ``bench/archive/val_choice.py`` judge their runs with the same functions.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import shlex
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_model
from torch import nn

from workbench.errors import CheckpointError
from workbench.model.registry import architecture_of
from workbench.runtime import count_parameters
from workbench.tools.provenance import hardware_line, provenance
from workbench.translation.checkpoint import average_last, load_model, step_checkpoints, unwrap_model
from workbench.translation.data import load_multi30k
from workbench.translation.data import sha256 as sha256_file
from workbench.translation.decode import DECODING
from workbench.translation.files import atomic_write_text
from workbench.translation.pipeline import score
from workbench.translation.shipped import (
    FILES,
    card_alpha,
    load_folder,
    model_dir,
    read_card,
    verify_pretrained,
    write_manifest,
)

log = logging.getLogger(__name__)


def export_weights(model: nn.Module, tokenizer: Any, out_dir: str | Path, src_lang: str, tgt_lang: str) -> Path:
    """Write ``model.safetensors`` (float16), ``config.json`` and ``tokenizer.json`` of a model into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = unwrap_model(model)
    config = {
        "arch": architecture_of(model),
        "model_cfg": dataclasses.asdict(model.cfg),
        "src_vocab_size": model.src_vocab_size,
        "tgt_vocab_size": model.tgt_vocab_size,
        "pad_id": model.pad_id,
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "dtype_on_disk": "float16",
    }
    half = copy.deepcopy(model).cpu().half()
    save_model(half, str(out / "model.safetensors"))  # shared (tied) tensors are stored once
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / "tokenizer.json").write_text(tokenizer.to_json(), encoding="utf-8")
    return out


def write_card(out_dir: str | Path, card: dict[str, Any]) -> Path:
    """Render ``CARD.md`` from ``card``, write ``card.json`` with the SHA-256 of every other file, then
    ``SHA256SUMS`` with the SHA-256 of all of them, the card's included."""
    out = Path(out_dir)
    atomic_write_text(out / "CARD.md", render_card(card))
    card = {**card, "sha256": {f: sha256_file(out / f) for f in FILES},
            "bytes": {f: (out / f).stat().st_size for f in FILES}}
    atomic_write_text(out / "card.json", json.dumps(card, indent=2, ensure_ascii=False) + "\n")
    write_manifest(out, (*FILES, "card.json"))  # last: the card is covered by a hash too
    return out / "card.json"


def _score_rows(card: dict[str, Any]) -> list[str]:
    rows = ["| split | decoding | sacreBLEU | chrF | tokenized lower-cased BLEU |", "|---|---|---|---|---|"]
    for split, by_beam in card.get("scores", {}).items():
        for beam_name, s in by_beam.items():
            rows.append(f"| {split} | {beam_name} | {s['bleu']:.2f} | {s['chrf']:.2f} | {s['tok_bleu']:.2f} |")
    return rows


def render_card(card: dict[str, Any]) -> str:
    """The human-readable model card (Markdown) from the card dictionary."""
    t = card.get("training", {})
    lines = [
        f"# {card['name']}: {card['title']}",
        "",
        card.get("summary", ""),
        "",
        "## Scores",
        "",
        *_score_rows(card),
        "",
        f"sacreBLEU signature: `{card.get('signature', '')}`. Weights: {card.get('weights_chosen', '')}. "
        f"Beam 4 uses the length penalty alpha = {card_alpha(card):g}"
        + (f" (chosen on val: {', '.join(f'{a} → {b:.2f}' for a, b in card['decoding']['val_beam4_bleu_by_alpha'].items())})"
           if card.get("decoding") else "") + "; `workbench translate` and `workbench evaluate` use it for this model.",
        "Scores were computed with the shipped float16 weights loaded as float32, exactly as `workbench.pretrained` "
        "returns them.",
        "",
        "## Model",
        "",
        f"- architecture: {card['arch']}, {card['parameters']:,} parameters",
        f"- config: `{json.dumps(card.get('model_cfg', {}))}`",
        f"- tokenizer: joint BPE, {card.get('vocab_size')} subwords, trained on the training split only",
        "",
        "## Training",
        "",
        f"- reproduce: `{card['reproduce']['train']}` then `{card['reproduce']['build']}` "
        f"(or `workbench pretrained reproduce {card['name']} --out DIR`; `build` also chooses the length penalty)"
        + (f"; these weights were built before `build` chose the length penalty, which "
           f"`{card['reproduce']['decode']}` then chose" if card["reproduce"].get("decode") else ""),
        *([f"- recipe: `{card['recipe']}`, a named run of `workbench.translation.run.RECIPES` "
           f"(`workbench train --recipe {card['recipe']}`)"] if card.get("recipe") else []),
        f"- commit: {card.get('commit')}",
        f"- hardware: {card.get('hardware')}",
        f"- wall time: {t.get('minutes')} min training ({t.get('stopped_reason')}), {t.get('steps')} steps, "
        f"{t.get('epochs')} epochs, {t.get('tokens_per_s')} tokens/s at the end",
        f"- budget: {t.get('budget')}",
        "",
        "## Data",
        "",
        card.get("data", ""),
        "",
        "## Known limits",
        "",
        *[f"- {x}" for x in card.get("limits", [])],
        "",
    ]
    return "\n".join(lines)


DATA_NOTE = (
    "Multi30k Task 1 (Elliott et al., 2016: *Multi30K: Multilingual English-German Image Descriptions*), the "
    "German and English captions of Flickr30k images (Young et al., 2014), from "
    "https://github.com/multi30k/dataset: train (29,000 pairs) for training and for the tokenizer, val (1,014) for "
    "every choice made, test_2016_flickr (1,000) scored once at the end. The captions are distributed by their "
    "authors for research use under the terms of the Multi30k and Flickr30k releases; cite both papers when you "
    "use this model's outputs."
)
LIMITS = [
    "Domain: one-sentence descriptions of photographs (people, animals, streets, sports). Expect much worse output on "
    "news, dialogue, technical text or anything outside that register.",
    "Short sentences: the training captions average about 12 words; past roughly 40 words quality drops and the "
    "model's max_len caps the subword length.",
    "Small model and small data: rare words are split into subwords and often mistranslated; names and numbers "
    "are not reliably copied.",
    "German→English only; the tokenizer is joint but the model was trained in one direction.",
    "Trained on a 2-core CPU under a wall-clock budget, so it is not a converged model; scores are for comparison "
    "within this project, not with WMT systems (Table 2 of the paper reports tokenized BLEU on WMT news).",
]


def half_roundtrip(model: nn.Module) -> nn.Module:
    """The model with every stored float tensor rounded to float16 and back, as shipping stores it.

    Non-persistent buffers (the sinusoidal table) are not stored and stay as computed in float32."""
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.half().float())
    return model


LENGTH_PENALTIES = (0.6, 1.0, 1.4, 1.8, 2.2)  # GNMT alphas tried on val for beam 4 (0.6 is GNMT's and the paper's)


def _score_alphas(model: nn.Module, tokenizer: Any, val: list[tuple[str, str]],
                  alphas: tuple[float, ...]) -> dict[str, dict[str, Any]]:
    """:func:`score` of beam 4 on ``val`` for every alpha, keyed by ``f"{alpha:g}"``."""
    by_alpha = {}
    for alpha in alphas:
        by_alpha[f"{alpha:g}"] = score(model, tokenizer, val, beam=DECODING.beam, alpha=alpha)
        log.info("val beam-4 sacreBLEU with alpha %g: %.2f", alpha, by_alpha[f"{alpha:g}"]["bleu"])
    return by_alpha


def _best_alpha(alphas: tuple[float, ...], bleu: dict[str, float]) -> float:
    return max(alphas, key=lambda a: (bleu[f"{a:g}"], -a))  # ties: the smaller alpha


def choose_length_penalty(model: nn.Module, tokenizer: Any, val: list[tuple[str, str]],
                          alphas: tuple[float, ...] = LENGTH_PENALTIES) -> tuple[float, dict[str, float]]:
    """The GNMT length penalty with the highest beam-4 sacreBLEU on ``val`` (ties: the smaller alpha), and every
    alpha's score. Choose on val only; test is scored once, with the chosen alpha."""
    bleu = {a: s["bleu"] for a, s in _score_alphas(model, tokenizer, val, alphas).items()}
    return _best_alpha(alphas, bleu), bleu


def score_val_and_test(model: nn.Module, tokenizer: Any, val: list[tuple[str, str]], test: list[tuple[str, str]],
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Greedy and beam-4 scores on val and test, the length penalty chosen on val first; and the decoding record.
    Val's beam-4 score is the chosen alpha's from the choice itself (decoded once, not again)."""
    val_beam = _score_alphas(model, tokenizer, val, LENGTH_PENALTIES)
    by_alpha = {a: s["bleu"] for a, s in val_beam.items()}
    alpha = _best_alpha(LENGTH_PENALTIES, by_alpha)
    scores = {
        "val": {"greedy": score(model, tokenizer, val, 1), "beam4": val_beam[f"{alpha:g}"]},
        "test_2016_flickr": {"greedy": score(model, tokenizer, test, 1),
                             "beam4": score(model, tokenizer, test, DECODING.beam, alpha=alpha)},
    }
    decoding = {"beam": DECODING.beam, "alpha": alpha, "chosen_on": "val",
                "val_beam4_bleu_by_alpha": by_alpha,
                "note": "beam 4 with the GNMT length penalty ((5 + length) / 6) ** alpha; alpha chosen on val among "
                        f"{', '.join(f'{a:g}' for a in LENGTH_PENALTIES)}, test decoded once with it"}
    return scores, decoding


def rescore_with_length_penalty(name: str, root: str | Path | None = None,
                                data_dir: str | Path | None = None) -> dict[str, Any]:
    """Choose a shipped model's beam-4 length penalty on val, re-score val and test with it, rewrite its card.

    The weights, config and tokenizer are untouched (and verified first); ``CARD.md`` and ``card.json`` are
    rewritten with the new scores, the ``decoding`` record and fresh hashes.
    """
    verify_pretrained(name, root)
    folder = model_dir(name, root)
    card = read_card(name, root)
    model, tokenizer = load_folder(folder)
    val = load_multi30k("val", card["src_lang"], card["tgt_lang"], data_dir=data_dir)
    test = load_multi30k("test_2016_flickr", card["src_lang"], card["tgt_lang"], data_dir=data_dir)
    scores, decoding = score_val_and_test(model, tokenizer, val, test)
    card = {k: v for k, v in card.items() if k not in ("sha256", "bytes")}
    card.update(scores=scores, decoding=decoding, signature=scores["test_2016_flickr"]["beam4"]["signature"],
                bleu={split: {k: v["bleu"] for k, v in by.items()} for split, by in scores.items()})
    card["reproduce"] = {**card["reproduce"], "decode": f"workbench pretrained rescore {name}"}
    write_card(folder, card)
    return json.loads((folder / "card.json").read_text())


def choose_weights_on_val(run_dir: str | Path, val: list[tuple[str, str]], average: tuple[int, ...] | list[int] = (5,),
                          ) -> tuple[dict[str, Path], dict[str, float], str]:
    """The weights to ship from a training run, chosen on ``val`` only: (candidate checkpoint per label, val greedy
    sacreBLEU per label, the chosen label).

    Candidates are the last checkpoint and, for each k in ``average``, the average of the last k step snapshots
    (written beside them as ``averagedK.pt``; a k larger than the snapshots on disk is skipped); each is rounded to
    float16, as shipped, and decoded greedily on the whole of ``val``.
    """
    run = Path(run_dir)
    candidates = {"last checkpoint": run / "last.pt"}
    n_snapshots = len(step_checkpoints(run))
    for k in sorted(set(average)):
        if 2 <= k <= n_snapshots:
            candidates[f"average of the last {k} step snapshots"] = average_last(run, last=k, out=run / f"averaged{k}.pt", overwrite=True)
        else:
            log.info("not averaging the last %d snapshots: the run kept %d", k, n_snapshots)
    greedy: dict[str, float] = {}
    for label, path in candidates.items():
        model, tok, _ = load_model(path)
        greedy[label] = score(half_roundtrip(model), tok, val, beam=1)["bleu"]
        log.info("val greedy sacreBLEU of %s: %.2f", label, greedy[label])
    return candidates, greedy, max(greedy, key=greedy.get)


def build_shipped(run_dir: str | Path, name: str, out_dir: str | Path, train_command: str, title: str,
                  summary: str, commit: str = "", budget: str = "", threads: int | None = None,
                  data_dir: str | Path | None = None, average: int | tuple[int, ...] = 5,
                  recipe: str | None = None) -> dict[str, Any]:
    """Choose the run's weights on val, write the shipped files and the card with val and test scores.

    The weights are chosen by :func:`choose_weights_on_val` (the last checkpoint or an average of the last k step
    snapshots for each k in ``average``, float16 as shipped, greedy on the whole validation set). Then the beam-4
    length penalty is chosen on val (:func:`choose_length_penalty`). Test is scored once, after both choices.
    ``recipe``: the name in :data:`workbench.translation.run.RECIPES` of the run's recipe, recorded in the card.
    """
    record = provenance()  # the code that builds, read before the long work
    run = Path(run_dir)
    out = Path(out_dir)
    windows = sorted({average} if isinstance(average, int) else set(average))
    if not windows or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in windows):
        raise CheckpointError(f"--average {' '.join(map(str, windows))}: each averaging window is a whole number of "
                              "step snapshots, at least 1 (the cards use 5 10 15 20)")
    _, _, state0 = load_model(run / "last.pt")
    extra = state0.get("extra") or {}
    src, tgt = extra.get("src_lang", "de"), extra.get("tgt_lang", "en")
    val = load_multi30k("val", src, tgt, data_dir=data_dir)
    test = load_multi30k("test_2016_flickr", src, tgt, data_dir=data_dir)
    candidates, choice, chosen = choose_weights_on_val(run, val, windows)
    model, tok, state = load_model(candidates[chosen])
    export_weights(model, tok, out, src, tgt)
    shipped, shipped_tok = load_folder(out)
    scores, decoding = score_val_and_test(shipped, shipped_tok, val, test)
    summary_json = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    history = json.loads((run / "history.json").read_text()) if (run / "history.json").exists() else {}
    train_cfg = state0.get("train_cfg") or {}
    card = {
        "name": name,
        "title": title,
        "summary": summary,
        "arch": summary_json.get("arch") or ("rnn" if "rnn" in name or "gru" in name else "transformer"),
        "src_lang": src,
        "tgt_lang": tgt,
        "parameters": count_parameters(shipped),
        "model_cfg": json.loads((out / "config.json").read_text())["model_cfg"],
        "vocab_size": shipped.src_vocab_size,
        "bleu": {split: {k: v["bleu"] for k, v in by.items()} for split, by in scores.items()},
        "scores": scores,
        "signature": scores["test_2016_flickr"]["beam4"]["signature"],
        "decoding": decoding,
        "recipe": recipe,
        "weights_chosen": chosen,
        "average_windows": windows,
        "val_choice": {k: {"val_greedy_bleu": v} for k, v in choice.items()},
        "training": {
            # the history's clock runs on across --resume; the summary's counts only the last invocation
            "minutes": round((history["elapsed_s"][-1] if history.get("elapsed_s") else summary_json.get("seconds", 0)) / 60, 1),
            "stopped_reason": summary_json.get("stopped_reason"),
            "steps": state0.get("step"),
            "epochs": summary_json.get("epochs_run"),
            "tokens_per_s": round(history["tokens_per_s"][-1]) if history.get("tokens_per_s") else None,
            "val_bleu_per_epoch": history.get("val_bleu"),
            "train_config": train_cfg,
            "budget": budget,
            "threads": threads,
        },
        "reproduce": {"train": train_command,
                      "build": f"workbench pretrained build {shlex.quote(str(run))} --name {name} --out DIR"
                               f" --average {' '.join(str(k) for k in windows)}"},
        "commit": commit or record["commit"],
        "hardware": hardware_line(record),
        "provenance": record,
        "data": DATA_NOTE,
        "limits": LIMITS,
    }
    write_card(out, card)
    return json.loads((out / "card.json").read_text())
