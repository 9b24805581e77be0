"""Claims of Prop 7.1 (non-identifiability of multi-head attention) and beyond: the
registry, in the order ``verified-attn check`` runs them.

The claims live by topic: :mod:`.claims_structure` (symmetries, canonical form, fibre,
orthogonal subspaces), :mod:`.claims_recovery` (canonical recovery and its counts),
:mod:`.claims_soundness` (refusals, certificates) and :mod:`.claims_float` (the float
learner's head count and precision).

>>> from verified_attn.multi_head.claims import CLAIMS
>>> [c.id for c in CLAIMS][:2]
['prop-7.1/permutation', 'prop-7.1/shared-score-split']
"""

from __future__ import annotations

from verified_attn.checks import Claim
from verified_attn.multi_head.claims_float import FLOAT_COUNT_CLAIM, FLOAT_PRECISION_CLAIM
from verified_attn.multi_head.claims_recovery import AFFINE_RECOVERY_CLAIM, RECOVERY_CLAIM
from verified_attn.multi_head.claims_soundness import (
    NEAR_RATIONAL_CLAIM,
    OUT_OF_CLASS_CLAIM,
    POSITIONS_CLAIM,
    TAMPER_CLAIM,
)
from verified_attn.multi_head.claims_structure import (
    CANONICAL_CLAIM,
    COLLISION_CLAIM,
    DIMENSION_CLAIM,
    KIND_CLAIMS,
    LINEARITY_CLAIM,
    ORTHOGONAL_CLAIM,
    SINGLE_CLAIM,
)

__all__ = ["CLAIMS"]

CLAIMS: list[Claim] = [
    *KIND_CLAIMS,
    LINEARITY_CLAIM,
    CANONICAL_CLAIM,
    DIMENSION_CLAIM,
    COLLISION_CLAIM,
    ORTHOGONAL_CLAIM,
    SINGLE_CLAIM,
    RECOVERY_CLAIM,
    AFFINE_RECOVERY_CLAIM,
    POSITIONS_CLAIM,
    NEAR_RATIONAL_CLAIM,
    FLOAT_COUNT_CLAIM,
    FLOAT_PRECISION_CLAIM,
    OUT_OF_CLASS_CLAIM,
    TAMPER_CLAIM,
]
