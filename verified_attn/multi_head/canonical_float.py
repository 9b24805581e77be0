"""The canonical multi-head learner in float arithmetic (float64 decoding, refined, verified).

The stages live in :mod:`verified_attn.multi_head.pipeline`; this module re-exports the
names the certificate checker, the command line, the benchmarks and the adapters' tests use.

>>> import verified_attn as va
>>> from verified_attn.multi_head.canonical_learner import learn_multi_head
>>> rec = learn_multi_head(va.Oracle(va.SingleHeadAttention([[1]], [2]), "float"), heads=1)
>>> rec.exact, rec.verified, abs(float(rec.heads[0][1][0]) - 2) < 1e-12
(False, True, True)

The exact path's pair structure on an orthogonal float design (scores of std ~2.9 for
W ~ N(0, 1/d)) with a ratio grid per pair; the d (affine d + 1) pairs of one u are fitted
jointly with shared residues (:mod:`.float_fit`: Levenberg-Marquardt with a Schur
complement, then orthogonal Gauss-Newton, repairs of groups in local minima until they
reach their rounding floor, second solutions of close scores found, decided by one tie
link each or counted in the error), the u-groups ordered by predicting the halved links,
and tie links where residues tie. A float32 box's decoded heads, and a float64 box's whose
first-order estimate is above :data:`PRECISION_TARGET` (past the follow-up's count only
above :data:`PRECISION_REQUIRED`: :func:`polish_wanted`), are then refitted on every answer
and on random sequences (:mod:`.sequence_fit`, phase ``polish``). The result is
returned only if its first-order parameter error estimate is at most the box's parameter
tolerance (its rtol unless it declares a looser one), two standard deviations of its
first-order prediction error are within what the agreement rule allows on 64 sequences it
does not ask (:mod:`.prediction_bound`), and it reproduces every learning answer and every
fresh verification answer under the one agreement rule
(:func:`verified_attn.agreement.agree`) at that rtol; the certificate checker re-checks
the answers and recomputes both figures, since the float fit is not cheaply reproducible.
"""

from __future__ import annotations

from verified_attn.multi_head.pipeline.budget import (
    POLISH_PARAMETERS,
    PRECISION_TARGET,
    extra_columns,
    float_query_bound,
    float_query_limit,
    float_ratios,
    max_length,
    polish_count,
    polish_wanted,
    precision_polish_count,
    probe_columns,
    redundancy,
)
from verified_attn.multi_head.pipeline.design import (
    COARSE_UNIT,
    CONDITIONING_GROUPS,
    box_precision,
    float_design,
    random_float_box,
)
from verified_attn.multi_head.pipeline.learner import (
    learn_float,
    too_few_heads_float,
)
from verified_attn.multi_head.pipeline.pilot import (
    _pilot,
)
from verified_attn.multi_head.pipeline.verify import (
    heads_error_estimate,
    joint_polish,
    polish_figures,
    prediction_check,
)

__all__ = [
    "COARSE_UNIT",
    "CONDITIONING_GROUPS",
    "POLISH_PARAMETERS",
    "PRECISION_TARGET",
    "_pilot",
    "box_precision",
    "extra_columns",
    "float_design",
    "float_query_bound",
    "float_query_limit",
    "float_ratios",
    "heads_error_estimate",
    "joint_polish",
    "learn_float",
    "max_length",
    "polish_count",
    "polish_figures",
    "polish_wanted",
    "precision_polish_count",
    "prediction_check",
    "probe_columns",
    "random_float_box",
    "redundancy",
    "too_few_heads_float",
]
