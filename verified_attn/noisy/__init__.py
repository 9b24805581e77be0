"""Theorem 6.1, Lemma A.1 and Appendix B: noisy and label-only oracles.

>>> from verified_attn.noisy import query_bound
>>> query_bound(3)
12
"""

from __future__ import annotations

from verified_attn.noisy.learner import (
    DESIGNS,
    learn_noisy,
    learn_stochastic,
    probe_scale,
    query_bound,
    repeats_for,
    tolerance_for_error,
    worst_case_direction,
    worst_case_oracle,
)

__all__ = [
    "DESIGNS",
    "learn_noisy",
    "learn_stochastic",
    "probe_scale",
    "query_bound",
    "repeats_for",
    "tolerance_for_error",
    "worst_case_direction",
    "worst_case_oracle",
]
