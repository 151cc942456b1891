"""A training run of a translator, stated once: :class:`RunConfig` (data, tokenizer, model, recipe, budget) and the
named runs of :data:`RECIPES`.

``workbench train --recipe cpu-small --out runs/small`` trains the recipe that the shipped ``small-de-en`` was
trained with; ``bench/translate_multi30k.py`` and the model cards name the same recipe. Options given beside
``--recipe`` change only the fields they name (``--recipe cpu-small --max-minutes 41``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workbench.errors import ConfigError
from workbench.model.config import PRESETS, check_field_types, is_probability, validate
from workbench.model.registry import architectures
from workbench.runtime import PRECISIONS
from workbench.translation.train_config import TrainConfig


@dataclass(frozen=True)
class RunConfig:
    """One training run of a translator, everything ``workbench train`` takes: data, tokenizer, model and recipe.

    The command's options are made from these fields and :class:`TrainConfig`'s (help text: the comment on each
    field); :func:`workbench.pipeline.train_translation` takes the dataclass as is. A run needs a budget (see
    :meth:`TrainConfig.check_budget`): epochs, optimizer steps or minutes.
    """

    # data
    src: str = "de"  # source language (Multi30k: en de fr cs)
    tgt: str = "en"  # target language
    data_dir: str | None = None  # local Multi30k folder (None: $WORKBENCH_MULTI30K or the download cache)
    limit: int | None = None  # use only the first N training pairs (None: all)
    train_src: str | None = None  # your own training source file (one sentence a line), instead of Multi30k
    train_tgt: str | None = None  # your own training target file, aligned with train_src
    val_src: str | None = None  # your own validation source file
    val_tgt: str | None = None  # your own validation target file, aligned with val_src
    # tokenizer
    vocab_size: int = 8000  # joint BPE vocabulary size (one vocabulary for source and target)
    # model
    arch: str = "transformer"  # architecture, a name of workbench/model/registry.py ("rnn": the GRU baseline)
    preset: str = "small"  # model size, a name of config.PRESETS (the GRU takes its width, dropout and max_len)
    dropout: float | None = None  # P_drop instead of the preset's (None: the preset's, 0.1 in the paper's presets)
    # training
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)  # the training recipe and its budget

    def __post_init__(self) -> None:
        check_field_types(self)
        from workbench.translation.tokenizer import MAX_VOCAB_SIZE

        for name in ("src", "tgt"):
            value = getattr(self, name)
            validate(isinstance(value, str) and value != "", name, value, "name a language, such as 'de' or 'en'")
        validate(self.limit is None or (isinstance(self.limit, int) and self.limit >= 1), "limit", self.limit,
               "use 1 or more pairs, or None for all")
        for side in ("train", "val"):
            src_file, tgt_file = getattr(self, f"{side}_src"), getattr(self, f"{side}_tgt")
            validate((src_file is None) == (tgt_file is None), f"{side}_src/{side}_tgt", (src_file, tgt_file),
                   "give both the source and the target file of your own parallel data, or neither")
        validate(self.train_src is None or self.val_src is not None, "val_src/val_tgt", (self.val_src, self.val_tgt),
                 f"your own training files need validation files of the same data (--val-src/--val-tgt): without them "
                 f"validation, the best checkpoint and early stopping would use Multi30k {self.src}-{self.tgt} val, "
                 "another corpus; hold out a part of your data")
        validate(isinstance(self.vocab_size, int) and 0 < self.vocab_size <= MAX_VOCAB_SIZE, "vocab_size", self.vocab_size,
               f"use a vocabulary size from 1 to {MAX_VOCAB_SIZE:,}, such as 8000")
        validate(self.dropout is None or is_probability(self.dropout), "dropout", self.dropout,
               "use a probability in [0, 1), such as 0.1 or 0.3, or None for the preset's")
        own = {f.name for f in dataclasses.fields(self)}
        for name, allowed in self.choices().items():
            if name in own:  # the recipe's (precision) are checked by TrainConfig
                validate(getattr(self, name) in allowed, name, getattr(self, name), f"choose one of {allowed}")
        validate(isinstance(self.train, TrainConfig), "train", type(self.train).__name__, "pass a TrainConfig")
        self.train.check_budget()

    @staticmethod
    def choices() -> dict[str, list[str]]:
        """The allowed values of the fields that have a fixed set: the architectures, the presets, the precisions."""
        return {"arch": architectures(), "preset": list(PRESETS), "precision": list(PRECISIONS)}

    @classmethod
    def flat_fields(cls) -> list[dataclasses.Field]:
        """The run's own fields, then :class:`TrainConfig`'s: the one flat namespace of the command line."""
        return [f for f in dataclasses.fields(cls) if f.name != "train"] + list(dataclasses.fields(TrainConfig))

    @classmethod
    def from_flat(cls, **values: Any) -> RunConfig:
        """A run from flat names (the run's fields and :class:`TrainConfig`'s); the ones not given keep their
        defaults."""
        own = {f.name for f in dataclasses.fields(cls)} - {"train"}
        recipe = {f.name for f in dataclasses.fields(TrainConfig)}
        unknown = sorted(set(values) - own - recipe)
        if unknown:
            raise ConfigError(f"unknown run settings {unknown}: known are {sorted(own | recipe)}")
        train = TrainConfig(**{k: v for k, v in values.items() if k in recipe})
        return cls(**{k: v for k, v in values.items() if k in own}, train=train)

    def to_flat(self) -> dict[str, Any]:
        """The inverse of :meth:`from_flat`."""
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "train"}
        return {**flat, **dataclasses.asdict(self.train)}


# the CPU recipe of the shipped translators (workbench/pretrained/*/card.json): the paper's schedule with a short
# warmup for a small data set, token-budget batches that fit two CPU cores, snapshots every 150 steps (the build
# chooses among averages of the last 5 to 20 of them on val) and dropout 0.2 (0.1 overfits Multi30k in 100 minutes:
# bench/results/pretrained/); 100 minutes of wall-clock time end the run
_CPU = TrainConfig(max_tokens=3072, warmup_steps=800, lr_factor=1.0, checkpoint_every=150, keep_checkpoints=20,
                   max_minutes=100.0)
# the GPU recipe: the paper's base model (d_model 512, 6 + 6 layers, 8 heads) on one GPU. Token budgets of 16k a step
# (the batch a GPU is busy with; the paper's were 25k), bf16 autocast, torch.compile of the step (batch lengths
# bucketed to multiples of 8, so a few graphs serve every batch), fused Adam, a warm-up short enough for the ~60
# steps of an epoch of Multi30k, dropout 0.3 for a data set this small, snapshots every 100 steps for the averaging
# chosen on val (the release's rule, as cpu-small), and 10 minutes. Its val BLEU each epoch is the fast decoder's
# greedy on 500 sentences (one token-budget batch on a GPU). Not yet measured on a GPU: see the book's Training page.
_GPU = TrainConfig(max_tokens=16384, warmup_steps=1000, lr_factor=1.0, checkpoint_every=100, keep_checkpoints=20,
                   max_minutes=10.0, device="cuda", precision="bf16", compile=True, log_every=20,
                   bleu_max_sentences=500)
RECIPES: dict[str, RunConfig] = {
    "cpu-small": RunConfig(arch="transformer", preset="small", src="de", tgt="en", dropout=0.2, train=_CPU),
    "cpu-gru": RunConfig(arch="rnn", preset="small", src="de", tgt="en", dropout=0.2, train=_CPU),
    "gpu-base": RunConfig(arch="transformer", preset="base", src="de", tgt="en", dropout=0.3, train=_GPU),
}


def recipe(name: str, **overrides: Any) -> RunConfig:
    """The named run of :data:`RECIPES`, with ``overrides`` (flat names, as :meth:`RunConfig.from_flat`) applied."""
    if name not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}: choose one of {sorted(RECIPES)}")
    return RunConfig.from_flat(**{**RECIPES[name].to_flat(), **overrides})
