"""Theorem 6.1, Lemma A.1 and Appendix B: noisy and label-only oracles.

>>> from verified_attn.noisy import query_bound
>>> query_bound(3)
12

The learners (:func:`learn_noisy`, :func:`learn_stochastic`, :func:`learn_from_labels`)
are in :mod:`~verified_attn.noisy.learner` and :mod:`~verified_attn.noisy.labels`, the
planning formulas in :mod:`~verified_attn.noisy.planning`, their verification rules in
:mod:`~verified_attn.noisy.verification`; the adversaries (:func:`worst_case_oracle`) live
with the other oracle wrappers in :mod:`verified_attn.oracle_wrappers` and are re-exported
here.
"""

from __future__ import annotations

from verified_attn.noisy.labels import label_query_bound, learn_from_labels
from verified_attn.noisy.learner import learn_noisy, learn_stochastic
from verified_attn.noisy.planning import (
    DESIGNS,
    probe_scale,
    query_bound,
    repeats_for,
    tolerance_for_error,
)
from verified_attn.oracle_wrappers import worst_case_direction, worst_case_oracle

__all__ = [
    "DESIGNS",
    "label_query_bound",
    "learn_from_labels",
    "learn_noisy",
    "learn_stochastic",
    "probe_scale",
    "query_bound",
    "repeats_for",
    "tolerance_for_error",
    "worst_case_direction",
    "worst_case_oracle",
]
