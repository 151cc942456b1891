"""Lesson 14's study as functions: the position groups (roles) of each minimal pair, its unrelated control sentence,
the sweep over all pairs with both controls, the bootstrap summary, and the findings that clear their controls.

The pairs come from :mod:`workbench.lessons.pronoun_pairs`; the patching itself from
:mod:`workbench.inspect.patching_sweeps`. Two rules of the lesson live here so that they hold wherever the study is
run:

* a group patched at the decoder's *answer row* (``"pronoun row"``, ``"number·answer row"``) restores the answer by
  construction at the last layer (that row's state is what the logits are read from), so it is a calibration of the
  machinery, never a finding (:data:`BY_CONSTRUCTION`);
* a finding must clear both controls with intervals corrected for the number of cells tested (Bonferroni: level
  ``1 - alpha / m``), and restore at least ``min_effect`` of the logit difference on average.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from workbench.inspect.patching import cache_activations
from workbench.inspect.patching_sweeps import (
    LogitDiff,
    PatchingResult,
    path_patching,
    prepare_pair,
    sweep_heads,
    sweep_position_groups,
)
from workbench.lessons.pronoun_pairs import GENDERED, NUMBER_SUBJECT, PronounPair, bootstrap_ci

GENDER_WORD = re.compile(r"\b(sein\w*|ihr\w*|er|sie)\b", re.IGNORECASE)
BY_CONSTRUCTION = ("pronoun row", "number·answer row")  # the answer row itself: a calibration, not a finding
WHERE = {"enc.resid": "the encoder state", "dec.memory": "the cross-attention keys and values",
         "dec.resid": "the decoder state"}
Key = tuple[str, str, str, str]  # (family, layer, donor, group)


def prefix(p: PronounPair) -> str:
    """``"number·"`` for a singular/plural pair (its groups are averaged apart), else ``""``."""
    return "number·" if p.kind == "number" else ""


def random_of(group: str) -> str:
    """The random-position control of a group's kind."""
    return "number·random" if group.startswith("number·") else "random"


def source_roles(p: PronounPair, src_tokens: Sequence[str], rng: np.random.Generator) -> dict[str, list[int]]:
    """The source positions of a pair by role: ``edit``, ``eos``, ``possessive`` and ``subject`` (gender pairs) or
    ``subject`` and ``verb`` (number pairs), and one ``random`` unedited position (drawn from ``rng``)."""
    others = [i for i in range(len(src_tokens) - 1) if i not in p.edit]
    out = {"edit": list(p.edit), "eos": [len(src_tokens) - 1]}
    if p.kind == "number":
        n_words = len(NUMBER_SUBJECT.match(p.clean_text).group(0).split())
        word = np.cumsum([t.startswith("▁") for t in src_tokens]) - 1  # (S,) the word each token belongs to
        out["subject"] = [i for i in p.edit if word[i] < n_words]
        out["verb"] = [i for i in p.edit if word[i] >= n_words]
    else:
        out["possessive"] = [i for i in p.edit if re.fullmatch(r"▁?(sein\w*|er)", src_tokens[i], flags=re.IGNORECASE)]
        out["subject"] = [i for i in p.edit if i not in out["possessive"]]
    if others:
        out["random"] = [int(rng.choice(others))]
    return {prefix(p) + k: v for k, v in out.items() if v}


def target_roles(p: PronounPair, rng: np.random.Generator) -> dict[str, list[int]]:
    """The decoder-input positions of a pair by role: the answer row, the words the two translations swap before
    it, and one ``random`` position of the shared prefix."""
    differ = [i for i, (a, b) in enumerate(zip(p.tgt, p.corrupt_tgt, strict=True)) if a != b]
    others = [i for i in range(1, p.pos) if i not in differ]
    out = {"pronoun row" if p.kind != "number" else "answer row": [p.pos]}
    if differ:
        out["man/woman" if p.kind != "number" else "swapped words"] = differ
    if others:
        out["random"] = [int(rng.choice(others))]
    return {prefix(p) + k: v for k, v in out.items()}


def neutral_pool(tokenizer: Any, sentences: Iterable[str]) -> dict[int, list[list[int]]]:
    """Source ids of sentences with no gendered word, by length: the donors of the unrelated-sentence control."""
    pool: dict[int, list[list[int]]] = {}
    for sentence in sentences:
        if not GENDERED.search(sentence) and not GENDER_WORD.search(sentence):
            ids = tokenizer.encode_src([sentence])[0]
            pool.setdefault(len(ids), []).append(ids)
    return pool


def unrelated_for(p: PronounPair, pool: dict[int, list[list[int]]], rng: np.random.Generator) -> list[int] | None:
    """An unrelated sentence of the pair's source length (None when the pool has none)."""
    rows = pool.get(len(p.clean_src), [])
    return list(rows[rng.integers(len(rows))]) if rows else None


def pair_tensors(p: PronounPair) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor], LogitDiff]:
    """(clean source, corrupted source, (clean, corrupted) decoder inputs, the logit-difference metric)."""
    clean, corrupt = torch.tensor([p.clean_src]), torch.tensor([p.corrupt_src])
    return clean, corrupt, (torch.tensor([p.tgt]), torch.tensor([p.corrupt_tgt])), LogitDiff(p.pos, p.good, p.bad)


@dataclasses.dataclass
class PairSweeps:
    """Per-pair scores of every group and head, from the clean sentence and from the unrelated one."""

    collected: dict[tuple[str, str, str], list[np.ndarray]]  # (family, donor, group) -> per pair (L,)
    heads: dict[tuple[str, str, str], list[np.ndarray]]  # (kind, family, donor) -> per pair (L, H)
    used: int  # pairs swept (those with an unrelated sentence of their length)
    seconds: float


def sweep_pairs(model: nn.Module, tokenizer: Any, pairs: Sequence[PronounPair], pool: dict[int, list[list[int]]],
                rng: np.random.Generator, head_families: Sequence[str] = ("dec.cross",)) -> PairSweeps:
    """Patch every group of every pair, per layer, clean → corrupted, from the clean sentence and from an unrelated
    one (the decoder's groups from the clean sentence only: the unrelated sentence has no translation prefix), and
    every head of ``head_families`` the same two ways."""
    t0, used = time.perf_counter(), 0
    collected: dict[tuple[str, str, str], list[np.ndarray]] = {}
    heads: dict[tuple[str, str, str], list[np.ndarray]] = {}
    for p in pairs:
        other = unrelated_for(p, pool, rng)
        if other is None:
            continue
        used += 1
        clean, corrupt, tgt, metric = pair_tensors(p)
        pp = prepare_pair(model, clean, corrupt, tgt, metric)
        unrelated = dataclasses.replace(pp, clean=cache_activations(model, torch.tensor([other]), tgt[1]))
        src_tokens = [tokenizer.id_to_token(i, side="src") for i in p.clean_src]
        src_groups, tgt_groups = source_roles(p, src_tokens, rng), target_roles(p, rng)
        kind = "number" if p.kind == "number" else "gender"
        for donor, prepared in (("clean", pp), ("unrelated", unrelated)):
            for family, groups in (("enc.resid", src_groups), ("dec.memory", src_groups), ("dec.resid", tgt_groups)):
                if family == "dec.resid" and donor == "unrelated":
                    continue
                res = sweep_position_groups(model, clean, corrupt, tgt, metric, groups, family=family,
                                            prepared=prepared)
                for g, column in zip(res.labels["group"], res.values.T, strict=True):
                    collected.setdefault((family, donor, g), []).append(column.numpy())
            for family in head_families:
                res = sweep_heads(model, clean, corrupt, tgt, metric, family=family, prepared=prepared)
                heads.setdefault((kind, family, donor), []).append(res.values.numpy())
    return PairSweeps(collected, heads, used, time.perf_counter() - t0)


def layer_names(cfg: Any) -> dict[str, list[str]]:
    """The row names of each position family: the embeddings, then one per layer."""
    return {"enc.resid": ["embed"] + [f"enc {i}" for i in range(cfg.n_enc_layers)],
            "dec.memory": [f"dec {i}" for i in range(cfg.n_dec_layers)],
            "dec.resid": ["embed"] + [f"dec {i}" for i in range(cfg.n_dec_layers)]}


def summarise(collected: dict[tuple[str, str, str], list[np.ndarray]], layers: dict[str, list[str]],
              n_resamples: int = 2000, seed: int = 0, level: float = 0.95) -> dict[Key, dict[str, float]]:
    """Mean and percentile bootstrap interval over pairs of every (family, layer, donor, group) cell."""
    out: dict[Key, dict[str, float]] = {}
    for (family, donor, group), rows in collected.items():
        if len(rows) < 2:
            continue
        mean, lo, hi = bootstrap_ci(np.stack(rows), n_resamples=n_resamples, level=level, seed=seed)
        for i, layer in enumerate(layers[family]):
            out[(family, layer, donor, group)] = {"mean": float(mean[i]), "low": float(lo[i]), "high": float(hi[i]),
                                                  "n": len(rows)}
    return out


def _controls(family: str, layer: str, group: str) -> list[Key]:
    keys = [(family, layer, "clean", random_of(group))]
    if family != "dec.resid":
        keys.append((family, layer, "unrelated", group))
    return keys


def findings(collected: dict[tuple[str, str, str], list[np.ndarray]], layers: dict[str, list[str]],
             min_effect: float, alpha: float = 0.05, n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The cells (family, layer, group) patched from the clean sentence that clear both controls.

    ``m`` cells are tested (clean donor, not a random control, not :data:`BY_CONSTRUCTION`, every control
    present); each cell's interval and its controls' are taken at level ``1 - alpha / m`` (Bonferroni), with enough
    resamples to put at least ten in each tail. A cell clears when its lower bound lies above both controls' upper
    bounds and its mean reaches ``min_effect``.

    Returns:
        ``{"tested": m, "level": ..., "cells": [...], "n_resamples": R}`` with one dict per tested cell (``clears``
        says whether it cleared); every interval drew R resamples of the pairs from ``seed``.
    """
    plain = summarise(collected, layers, n_resamples, seed)
    tested = [k for k in plain if k[2] == "clean" and k[3] != random_of(k[3]) and k[3] not in BY_CONSTRUCTION
              and all(c in plain for c in _controls(k[0], k[1], k[3]))]
    m = max(1, len(tested))
    level = 1 - alpha / m
    n_wide = max(n_resamples, math.ceil(20 * m / alpha))  # at least ten resampled means in each tail
    wide = summarise(collected, layers, n_wide, seed, level=level)
    cells = []
    for family, layer, _, group in sorted(tested):
        s = wide[(family, layer, "clean", group)]
        bar = max(wide[c]["high"] for c in _controls(family, layer, group))
        cells.append({"family": family, "layer": layer, "group": group, "mean": s["mean"], "low": s["low"],
                      "high": s["high"], "n": s["n"], "control_high": bar,
                      "clears": s["low"] > bar and s["mean"] >= min_effect})
    return {"tested": len(tested), "level": level, "cells": cells, "n_resamples": n_wide}


def finding_lines(cells: Sequence[dict[str, Any]], number: bool) -> list[str]:
    """One Markdown line per cleared cell of one kind (gender or number), worded as sufficiency, not routing."""
    return [f"- Patching {WHERE[f['family']]} ({f['layer']}) at the **{f['group'].removeprefix('number·')}** positions "
            f"restores {f['mean']:.2f} [{f['low']:.2f}, {f['high']:.2f}] of the clean logit difference over {f['n']} "
            f"pairs; the controls reach at most {f['control_high']:.2f}."
            for f in cells if f["clears"] and f["group"].startswith("number·") == number]


def path_patching_over_pairs(model: nn.Module, pairs: Sequence[PronounPair], pool: dict[int, list[list[int]]],
                             rng: np.random.Generator, receiver_layers: list[int], n_resamples: int = 2000,
                             seed: int = 0) -> tuple[list[Any], np.ndarray]:
    """Path patching (denoising: clean senders into the corrupted run) for each pair, and the same from its
    unrelated sentence. Returns (the per-pair results, the control's per-pair scores (pairs, senders x receivers))."""
    paths, ctrl = [], []
    for p in pairs:
        other = unrelated_for(p, pool, rng)
        if other is None:
            continue
        clean, corrupt, tgt, metric = pair_tensors(p)
        pp = prepare_pair(model, clean, corrupt, tgt, metric)
        paths.append(path_patching(model, clean, corrupt, tgt, metric, prepared=pp, receiver_layers=receiver_layers))
        donor = dataclasses.replace(pp, clean=cache_activations(model, torch.tensor([other]), tgt[1]))
        ctrl.append(path_patching(model, clean, corrupt, tgt, metric, prepared=donor,
                                  receiver_layers=receiver_layers).values.numpy().ravel())
    return paths, np.stack(ctrl) if ctrl else np.zeros((0, 0))


GENDER_GROUPS = {"enc.resid": ("possessive", "subject", "edit", "eos"),
                 "dec.memory": ("possessive", "subject", "edit", "eos"), "dec.resid": ("pronoun row", "man/woman")}
NUMBER_GROUPS = {"enc.resid": ("subject", "verb", "edit", "eos"), "dec.memory": ("subject", "verb", "edit", "eos"),
                 "dec.resid": ("answer row", "swapped words")}


def interval_rows(summary: dict[Key, dict[str, float]], family: str, layers: Sequence[str],
                  groups: Sequence[str]) -> tuple[list[str], list[float], list[float], list[float], list[str]]:
    """The rows of one interval figure: for each layer, each group patched from the clean sentence, the random
    position, and (outside the decoder) each group patched from the unrelated sentence.

    Returns:
        (labels, means, lows, highs, kinds) for :func:`workbench.viz.patching_figures.interval_figure`.
    """
    labels, m, lo, hi, kinds = [], [], [], [], []
    for layer in layers:
        shown = [("clean", g, "patched from the clean run") for g in groups]
        shown.append(("clean", random_of(groups[0]), "control: random position"))
        if family != "dec.resid":
            shown += [("unrelated", g, "control: unrelated sentence") for g in groups]
        for donor, group, kind in shown:
            s = summary.get((family, layer, donor, group))
            if s is None:
                continue
            labels.append(f"{layer} · {group}" + (" (unrelated)" if donor == "unrelated" else ""))
            m.append(s["mean"])
            lo.append(s["low"])
            hi.append(s["high"])
            kinds.append(kind)
    return labels, m, lo, hi, kinds


def head_findings(heads: dict[tuple[str, str, str], list[np.ndarray]], min_effect: float, n_resamples: int = 2000,
                  seed: int = 0) -> tuple[dict[tuple[str, str], np.ndarray], list[dict[str, Any]]]:
    """Heads whose interval (clean donor) clears the same head patched from the unrelated sentence, with the
    intervals corrected for the number of heads tested (Bonferroni), and whose mean reaches ``min_effect``.

    Returns:
        ((kind, family) -> the (L, H) mean over pairs, the findings sorted by mean, largest first).
    """
    means, found = {}, []
    for (kind, family, donor), rows in heads.items():
        if donor != "clean" or len(rows) < 2 or len(heads.get((kind, family, "unrelated"), [])) < 2:
            continue
        clean_rows, ctrl_rows = np.stack(rows), np.stack(heads[(kind, family, "unrelated")])
        means[(kind, family)] = clean_rows.mean(0)
        m = clean_rows[0].size
        level, n = 1 - 0.05 / m, max(n_resamples, math.ceil(20 * m / 0.05))
        mean, lo, hi = bootstrap_ci(clean_rows, n_resamples=n, level=level, seed=seed)
        _, _, ctrl_hi = bootstrap_ci(ctrl_rows, n_resamples=n, level=level, seed=seed)
        for layer, head in zip(*np.nonzero((lo > ctrl_hi) & (mean >= min_effect)), strict=True):
            found.append({"kind": kind, "family": family, "layer": int(layer), "head": int(head),
                          "mean": float(mean[layer, head]), "low": float(lo[layer, head]),
                          "high": float(hi[layer, head]), "control_high": float(ctrl_hi[layer, head])})
    return means, sorted(found, key=lambda f: -f["mean"])


def best_cell(summary: dict[Key, dict[str, float]], family: str, groups: Sequence[str],
              donor: str = "clean") -> tuple[Key, dict[str, float]]:
    """The (family, layer, donor, group) cell of ``summary`` with the largest mean among ``groups``.

    Raises:
        KeyError: no cell of that family, donor and groups in ``summary``.
    """
    cells = [(k, v) for k, v in summary.items() if k[0] == family and k[2] == donor and k[3] in groups]
    if not cells:
        raise KeyError(f"no {family} cell from the {donor} donor for the groups {tuple(groups)}: sweep more pairs")
    return max(cells, key=lambda kv: kv[1]["mean"])


def source_against_prefix(summary: dict[Key, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """For gender and for number pairs: the best source-side group (the encoder state at the edited words) beside
    the swapped English words patched at the decoder's input (None when the translations swap none)."""
    out = {}
    for what, src_groups, tgt_group in (("gender", ("possessive", "subject", "edit"), "man/woman"),
                                        ("number", ("number·subject", "number·verb", "number·edit"),
                                         "number·swapped words")):
        (_, layer, _, group), enc = best_cell(summary, "enc.resid", src_groups)
        out[what] = {"encoder": {"layer": layer, "group": group, **enc},
                     "decoder_input": summary.get(("dec.resid", "embed", "clean", tgt_group))}
    return out


def mean_head_result(mean: np.ndarray, family: str) -> PatchingResult:
    """A (layer, head) map of scores averaged over pairs, as a :class:`PatchingResult` the figures can draw."""
    values = torch.tensor(mean, dtype=torch.float32)  # (L, H)
    n_layers, n_heads = values.shape
    return PatchingResult(values, values.clone(), ("layer", "head"),
                          {"layer": tuple(str(i) for i in range(n_layers)), "head": tuple(str(h) for h in range(n_heads))},
                          family, "clean->corrupted", 1.0, 0.0, meta={"averaged": True})


def strongest_path(paths: Sequence[PatchingResult], control: np.ndarray, receiver_layers: Sequence[int],
                   min_effect: float, n_resamples: int = 2000, seed: int = 0) -> tuple[PatchingResult, dict[str, Any]]:
    """The mean path-patching map over pairs, and its strongest sender -> receiver path with a 95 % interval
    against the unrelated-sentence control (``control``: (pairs, senders x receivers)). The path is picked after
    looking at all of them, so it ``clears`` only if its interval lies above the control's and its mean reaches
    ``min_effect``."""
    stacked = np.stack([r.values.numpy() for r in paths])  # (pairs, sender layers, sender heads, receivers, heads)
    path_mean = stacked.mean(0)
    m, lo, hi = bootstrap_ci(stacked.reshape(len(paths), -1), n_resamples=n_resamples, seed=seed)
    _, _, ctrl_hi = bootstrap_ci(control, n_resamples=n_resamples, seed=seed)
    top = int(np.argmax(m))
    sl, sh, rl, rh = np.unravel_index(top, path_mean.shape)
    mean_map = dataclasses.replace(paths[0], values=torch.tensor(path_mean), raw=torch.tensor(path_mean))
    return mean_map, {"pairs": len(paths), "sender": [int(sl), int(sh)], "receiver": [int(receiver_layers[rl]), int(rh)],
                      "mean": float(m[top]), "low": float(lo[top]), "high": float(hi[top]),
                      "control_high": float(ctrl_hi[top]), "clears": bool(lo[top] > ctrl_hi[top] and m[top] >= min_effect)}
