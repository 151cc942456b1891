"""The FLOP counts lessons 09 and 16 use: a training step's FLOPs and a decoding step's multiply-adds.

They live with the training loop, whose MFU figure needs them (:mod:`workbench.translation.flops`); the lessons
import them from here.
"""

from __future__ import annotations

from workbench.translation.flops import decode_step_macs, train_step_flops

__all__ = ["decode_step_macs", "train_step_flops"]
