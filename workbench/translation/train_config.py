"""The training recipe's settings (paper section 5): one frozen config, one field per setting, each with its
comment (the command line's ``--help`` is generated from them)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.errors import ConfigError
from workbench.model.config import check_field_types, validate
from workbench.runtime import PRECISIONS, PrecisionName


@dataclass(frozen=True)
class TrainConfig:
    """The training recipe (paper section 5)."""

    max_tokens: int = 4096  # token budget per batch (source + target tokens, before padding)
    epochs: int | None = None  # passes over the training data; None: no epoch limit (steps or minutes end the run)
    max_steps: int | None = None  # optimizer-step budget (the same on every machine); None for no limit
    max_minutes: float | None = None  # wall-clock budget for training; None for no limit
    lr_factor: float = 1.0  # multiplies the warm-up schedule d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    warmup_steps: int = 4000  # linear warm-up steps of the schedule (paper: 4000)
    beta1: float = 0.9  # Adam beta1 (paper: 0.9)
    beta2: float = 0.98  # Adam beta2 (paper: 0.98)
    adam_eps: float = 1e-9  # Adam epsilon (paper: 1e-9)
    weight_decay: float = 0.0  # decoupled weight decay (0 as in the paper)
    label_smoothing: float = 0.1  # epsilon_ls (paper: 0.1)
    grad_clip: float | None = 1.0  # max global gradient norm; None disables clipping
    accum_steps: int = 1  # micro-batches accumulated per optimizer step
    patience: int | None = None  # early stopping: epochs without val-loss improvement; None disables
    eval_bleu: bool = True  # compute validation BLEU (greedy) at the end of each epoch
    bleu_max_sentences: int | None = 500  # val sentences decoded for BLEU per epoch (None: all)
    seed: int = 0  # seeds parameters, dropout and batch order
    device: str = "auto"  # "auto" picks CUDA, then MPS, else CPU
    precision: PrecisionName = "auto"  # auto, fp32 or bf16: auto is bf16 on CUDA, and on a CPU with bf16 matrix units where a probe measures it faster
    compile: bool = False  # torch.compile the model (for GPU runs; slower than eager on the CPU, measured)
    log_every: int = 50  # optimizer steps between progress-bar updates of the loss
    checkpoint_every: int | None = None  # also save a checkpoint every N optimizer steps (for averaging)
    keep_checkpoints: int = 5  # numbered checkpoints kept on disk for averaging (the newest N; the paper averages 5)

    def __post_init__(self) -> None:
        check_field_types(self)
        validate(self.max_tokens > 0, "max_tokens", self.max_tokens, "use a positive token budget such as 4096")
        validate(0 <= self.seed < 2**63, "seed", self.seed, "use a whole number from 0 to 2**63 - 1, such as 0")
        validate(self.epochs is None or self.epochs > 0, "epochs", self.epochs,
               "use a positive number of epochs, or None for no epoch limit")
        validate(self.max_steps is None or self.max_steps >= 1, "max_steps", self.max_steps, "use 1 or more, or None for no limit")
        validate(self.max_minutes is None or self.max_minutes > 0, "max_minutes", self.max_minutes, "use a positive number or None")
        validate(self.lr_factor > 0, "lr_factor", self.lr_factor, "use a positive factor (the paper uses 1.0)")
        validate(self.warmup_steps > 0, "warmup_steps", self.warmup_steps, "use a positive number of steps (paper: 4000)")
        validate(0.0 <= self.beta1 < 1.0, "beta1", self.beta1, "use a value in [0, 1)")
        validate(0.0 <= self.beta2 < 1.0, "beta2", self.beta2, "use a value in [0, 1)")
        validate(self.adam_eps > 0, "adam_eps", self.adam_eps, "use a small positive number such as 1e-9")
        validate(self.weight_decay >= 0, "weight_decay", self.weight_decay, "use 0 (the paper's) or a small positive decay")
        validate(0.0 <= self.label_smoothing < 1.0, "label_smoothing", self.label_smoothing, "use a value in [0, 1)")
        validate(self.grad_clip is None or self.grad_clip > 0, "grad_clip", self.grad_clip, "use a positive norm or None")
        validate(self.accum_steps >= 1, "accum_steps", self.accum_steps, "use 1 or more")
        validate(self.patience is None or self.patience >= 1, "patience", self.patience, "use 1 or more, or None")
        validate(self.log_every >= 1, "log_every", self.log_every, "use 1 or more")
        validate(self.checkpoint_every is None or self.checkpoint_every >= 1, "checkpoint_every", self.checkpoint_every, "use 1 or more, or None")
        validate(self.bleu_max_sentences is None or self.bleu_max_sentences >= 1, "bleu_max_sentences",
                 self.bleu_max_sentences, "decode 1 or more val sentences for BLEU, or None for all")
        validate(self.precision in PRECISIONS, "precision", self.precision, f"choose one of {PRECISIONS}")
        validate(self.keep_checkpoints >= 1, "keep_checkpoints", self.keep_checkpoints,
               "keep 1 or more numbered checkpoints (5 for the paper's averaging)")

    def check_budget(self) -> None:
        """Refuse a run that nothing would end. ``TrainConfig()`` itself is a valid recipe (its epochs default to
        no limit); :func:`~workbench.translation.train.fit` and :class:`~workbench.translation.run.RunConfig` call this before any training."""
        if self.epochs is None and self.max_steps is None and self.max_minutes is None:
            raise ConfigError("training needs a budget, or nothing would end it: set epochs (--epochs N), max_steps "
                              "(--max-steps N) or max_minutes (--max-minutes M); the first one reached stops the run")
