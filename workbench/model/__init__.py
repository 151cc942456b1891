"""The paper's model, read top to bottom.

``config`` (the hyper-parameters) -> ``masks`` (who may attend to whom) -> ``positional`` (where a token is) ->
``attention`` (scaled dot-product and multi-head attention, the key/value cache) -> ``transformer`` (embeddings,
the position-wise FFN, the residual sub-layer, the encoder and decoder stacks) -> ``rnn`` (the recurrent baseline).
``hook_points`` are the inert taps that inspection opens; ``registry`` builds a model by architecture name.
"""

from __future__ import annotations

from workbench.model.transformer import (
    DecoderLayer,
    Embedding,
    EncoderLayer,
    FeedForward,
    ResidualLayer,
    Transformer,
    build_model,
    sublayer_connection,
)

__all__ = [
    "DecoderLayer",
    "Embedding",
    "EncoderLayer",
    "FeedForward",
    "ResidualLayer",
    "Transformer",
    "build_model",
    "sublayer_connection",
]
