"""The canonical multi-head learner in float arithmetic (float64 decoding, refined, verified).

The stages live in :mod:`verified_attn.multi_head.pipeline`; this module re-exports their
names for the certificate checker, the benchmarks and the adapters' tests.

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
(:func:`verified_attn.verification.agree`) at that rtol; the certificate checker re-checks
the answers and recomputes both figures, since the float fit is not cheaply reproducible.
"""

from __future__ import annotations

from verified_attn.multi_head.canonical_bounds import (
    parameter_count,
)
from verified_attn.multi_head.float_fit import (
    GroupFit,
)
from verified_attn.multi_head.float_linear_fit import (
    fit_linear_groups,
)
from verified_attn.multi_head.pipeline.asking import (
    _BLOCK_ENTRIES,
    ask_pairs,
)
from verified_attn.multi_head.pipeline.budget import (
    POLISH_PARAMETERS,
    PRECISION_PARAMETERS_PER_SEQUENCE,
    PRECISION_POLISH_PARAMETERS,
    PRECISION_REQUIRED,
    PRECISION_TARGET,
    REDUNDANT_FROM_HEADS,
    UNBOUNDED_ROUNDS_FROM_HEADS,
    _float_ratios,
    _limit_at,
    _within_parameter_tolerance,
    adaptive_room,
    base_query_limit,
    conditioning_cost,
    extra_columns,
    float_query_bound,
    float_query_limit,
    float_ratios,
    max_length,
    pilot_rounds,
    polish_count,
    polish_wanted,
    precision_polish_count,
    probe_columns,
    redundancy,
)
from verified_attn.multi_head.pipeline.decode import (
    _decode_pooled,
    _resolve_twins,
    _swap_alternatives,
)
from verified_attn.multi_head.pipeline.design import (
    _B_NORM,
    _CONDITIONING_ANGLE,
    _CONDITIONING_FACTOR,
    _DOUBLE_UNIT,
    _LINK_EXCLUDE,
    _LM_ITERATIONS,
    _LOG2_WINDOW,
    _MATCH_MARGIN,
    _MAX_LENGTH,
    _NARROW_HEADS,
    _NARROW_LOG2_WINDOW,
    _NARROW_MAX_LENGTH,
    _PAIR_FIT,
    _PARAMETER_SAFETY,
    _REFIT_ORDERS,
    _RESTARTS,
    _U_NORM,
    COARSE_UNIT,
    CONDITIONING_GROUPS,
    CONDITIONING_ROUNDS,
    _float_name,
    box_precision,
    coarse,
    design_pairs,
    float_design,
    float_probe_matrix,
    float_sequence,
    random_float_box,
    ratio_window,
)
from verified_attn.multi_head.pipeline.fits import (
    _group_fits,
    _linear_stage,
    _refit_groups,
)
from verified_attn.multi_head.pipeline.learner import (
    learn_float,
    too_few_heads_float,
)
from verified_attn.multi_head.pipeline.pilot import (
    _condition,
    _not_reproduced,
    _pilot,
    conditioning_partners,
    learning_sequences,
    pilot_pairs,
)
from verified_attn.multi_head.pipeline.poles import (
    _assign,
    _clusters,
    _fit_scores,
    _float_match,
    _float_poles,
    _ranked,
    _refine,
    _sigmoid,
    _varpro,
    link_decided,
)
from verified_attn.multi_head.pipeline.repairs import (
    _SUBSPACE_SEED,
    _joint_restarts,
    _low_rank_restarts,
    _repair_limit,
    _stalled,
)
from verified_attn.multi_head.pipeline.result import (
    _certificate_data,
)
from verified_attn.multi_head.pipeline.rules import (
    _BASIN,
    _CONSENSUS_SEED,
    _CONVERGED,
    _DENSE_POLISH,
    _GROUP_FIT,
    _JOINT_ROUNDS,
    _LINEAR_ROUNDS,
    _LINK_FLOOR,
    _LOCAL_SHIFTS,
    _NEAR_GAP,
    _PRUNE_ABOVE,
    _RANDOM_STARTS,
    _REPAIR_PRUNE,
    _REPAIR_STEPS,
    _REPAIRS,
    _SOURCE_WORK,
    _SOURCES,
    _TIE_RESIDUE,
    _TWIN,
    _TWIN_SIGNIFICANT,
    _Decoded,
    _score_grid,
)
from verified_attn.multi_head.pipeline.verify import (
    _check_learning_fit,
    _design_answers,
    _groups_at,
    _parameter_error_estimate,
    _prediction_ratio,
    _propagated_error,
    _sigma_min,
    heads_error_estimate,
    joint_polish,
    polish_figures,
    prediction_check,
)
from verified_attn.verification import (
    verify_model,
)

__all__ = [
    "COARSE_UNIT",
    "CONDITIONING_GROUPS",
    "CONDITIONING_ROUNDS",
    "POLISH_PARAMETERS",
    "PRECISION_PARAMETERS_PER_SEQUENCE",
    "PRECISION_POLISH_PARAMETERS",
    "PRECISION_REQUIRED",
    "PRECISION_TARGET",
    "REDUNDANT_FROM_HEADS",
    "UNBOUNDED_ROUNDS_FROM_HEADS",
    "_BASIN",
    "_BLOCK_ENTRIES",
    "_B_NORM",
    "_CONDITIONING_ANGLE",
    "_CONDITIONING_FACTOR",
    "_CONSENSUS_SEED",
    "_CONVERGED",
    "_DENSE_POLISH",
    "_DOUBLE_UNIT",
    "_GROUP_FIT",
    "_JOINT_ROUNDS",
    "_LINEAR_ROUNDS",
    "_LINK_EXCLUDE",
    "_LINK_FLOOR",
    "_LM_ITERATIONS",
    "_LOCAL_SHIFTS",
    "_LOG2_WINDOW",
    "_MATCH_MARGIN",
    "_MAX_LENGTH",
    "_NARROW_HEADS",
    "_NARROW_LOG2_WINDOW",
    "_NARROW_MAX_LENGTH",
    "_NEAR_GAP",
    "_PAIR_FIT",
    "_PARAMETER_SAFETY",
    "_PRUNE_ABOVE",
    "_RANDOM_STARTS",
    "_REFIT_ORDERS",
    "_REPAIRS",
    "_REPAIR_PRUNE",
    "_REPAIR_STEPS",
    "_RESTARTS",
    "_SOURCES",
    "_SOURCE_WORK",
    "_SUBSPACE_SEED",
    "_TIE_RESIDUE",
    "_TWIN",
    "_TWIN_SIGNIFICANT",
    "_U_NORM",
    "GroupFit",
    "_Decoded",
    "_assign",
    "_certificate_data",
    "_check_learning_fit",
    "_clusters",
    "_condition",
    "_decode_pooled",
    "_design_answers",
    "_fit_scores",
    "_float_match",
    "_float_name",
    "_float_poles",
    "_float_ratios",
    "_group_fits",
    "_groups_at",
    "_joint_restarts",
    "_limit_at",
    "_linear_stage",
    "_low_rank_restarts",
    "_not_reproduced",
    "_parameter_error_estimate",
    "_pilot",
    "_prediction_ratio",
    "_propagated_error",
    "_ranked",
    "_refine",
    "_refit_groups",
    "_repair_limit",
    "_resolve_twins",
    "_score_grid",
    "_sigma_min",
    "_sigmoid",
    "_stalled",
    "_swap_alternatives",
    "_varpro",
    "_within_parameter_tolerance",
    "adaptive_room",
    "ask_pairs",
    "base_query_limit",
    "box_precision",
    "coarse",
    "conditioning_cost",
    "conditioning_partners",
    "design_pairs",
    "extra_columns",
    "fit_linear_groups",
    "float_design",
    "float_probe_matrix",
    "float_query_bound",
    "float_query_limit",
    "float_ratios",
    "float_sequence",
    "heads_error_estimate",
    "joint_polish",
    "learn_float",
    "learning_sequences",
    "link_decided",
    "max_length",
    "parameter_count",
    "pilot_pairs",
    "pilot_rounds",
    "polish_count",
    "polish_figures",
    "polish_wanted",
    "precision_polish_count",
    "prediction_check",
    "probe_columns",
    "random_float_box",
    "ratio_window",
    "redundancy",
    "too_few_heads_float",
    "verify_model",
]
