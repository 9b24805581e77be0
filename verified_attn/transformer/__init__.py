"""One-layer Transformer via an exact ReLU FFN learner (the documentation's theory page,
docs/theory.md, §6).

>>> import verified_attn as va
>>> from verified_attn.models import OneLayerTransformer
>>> from verified_attn.transformer import learn_transformer
>>> T = OneLayerTransformer([[1, -1], [0, 2]], [[1, 0], [0, 1]], [[1, 0], [1, 1]], [1, -2])
>>> rec = learn_transformer(va.Oracle(T, "certified"), method="direct")
>>> rec.W == T.W, rec.attention_queries, type(rec.model).__name__
(True, 4, 'OneLayerTransformer')
"""

from __future__ import annotations

from verified_attn.transformer.biased_learner import learn_biased_transformer
from verified_attn.transformer.entry import learn_relu_ffn, learn_transformer
from verified_attn.transformer.learner import (
    METHODS,
    antisymmetrised,
    paper_attention_count,
)
from verified_attn.transformer.relu import (
    ReluNetwork,
    canonical_network,
    ffn_query_bound,
    ffn_query_count,
)
from verified_attn.transformer.relu_biased import (
    BiasedReluNetwork,
    biased_ffn_query_count,
    canonical_biased_network,
)
from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn

__all__ = [
    "METHODS",
    "BiasedReluNetwork",
    "ReluNetwork",
    "antisymmetrised",
    "biased_ffn_query_count",
    "canonical_biased_network",
    "canonical_network",
    "ffn_query_bound",
    "ffn_query_count",
    "learn_biased_relu_ffn",
    "learn_biased_transformer",
    "learn_relu_ffn",
    "learn_transformer",
    "paper_attention_count",
]
