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
from verified_attn.multi_head import claims_float as fl
from verified_attn.multi_head import claims_recovery as rec
from verified_attn.multi_head import claims_soundness as snd
from verified_attn.multi_head import claims_structure as st

__all__ = ["CLAIMS"]

CLAIMS: list[Claim] = [
    *st.KIND_CLAIMS,
    st.LINEARITY_CLAIM,
    st.CANONICAL_CLAIM,
    st.DIMENSION_CLAIM,
    st.COLLISION_CLAIM,
    st.ORTHOGONAL_CLAIM,
    st.SINGLE_CLAIM,
    rec.RECOVERY_CLAIM,
    rec.AFFINE_RECOVERY_CLAIM,
    snd.POSITIONS_CLAIM,
    snd.NEAR_RATIONAL_CLAIM,
    fl.FLOAT_COUNT_CLAIM,
    fl.FLOAT_PRECISION_CLAIM,
    snd.OUT_OF_CLASS_CLAIM,
    snd.TAMPER_CLAIM,
]
