"""The float multi-head learner: the list of its stages, one typed state passed along.

>>> import verified_attn as va
>>> rec = learn_float(va.Oracle(va.SingleHeadAttention([[1]], [2]), "float"), 1,
...                   verify=2, seed=0, lengths=(1, 2), affine=False)
>>> rec.exact, rec.verified, abs(float(rec.heads[0][1][0]) - 2) < 1e-12
(False, True, True)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.multi_head.pipeline.asking import ask_grid, ask_zero
from verified_attn.multi_head.pipeline.budget import plan
from verified_attn.multi_head.pipeline.conditioning import conditioning_stage
from verified_attn.multi_head.pipeline.decode import decode_stage
from verified_attn.multi_head.pipeline.design import design_stage, float_design, float_sequence
from verified_attn.multi_head.pipeline.fits import fit_stage
from verified_attn.multi_head.pipeline.pilot import pilot_stage
from verified_attn.multi_head.pipeline.polish import polish_stage
from verified_attn.multi_head.pipeline.refine import refine_stage
from verified_attn.multi_head.pipeline.repairs import restart_stage
from verified_attn.multi_head.pipeline.result import result_stage
from verified_attn.multi_head.pipeline.state import DEFAULT_OPTIONS, FloatState, Options
from verified_attn.multi_head.pipeline.verify import verify_stage
from verified_attn.oracle import Oracle
from verified_attn.recovery import MultiHeadRecovery

__all__ = ["learn_float", "too_few_heads_float"]


def learn_float(
    oracle: Oracle,
    H: int,
    *,
    verify: int,
    seed: int,
    lengths: Sequence[int],
    affine: bool,
    options: Options = DEFAULT_OPTIONS,
) -> MultiHeadRecovery:
    """The float path of :func:`~.canonical_learner.learn_multi_head` (arguments already
    validated there); ``options`` switches heuristic stages off (the ablation)."""
    st = FloatState(oracle, H, verify, seed, lengths, affine, options)
    plan(st)  # budget checked before any query
    with oracle.run() as run:
        design_stage(st)
        ask_zero(st)
        pilot_stage(st)
        ask_grid(st)
        fit_stage(st)
        restart_stage(st)
        decode_stage(st)
        conditioning_stage(st)
        try:
            polish_stage(st, run.counts.learning)
            refine_stage(st, run.counts.learning)
            verify_stage(st)
        except (ModelClassMismatch, PrecisionExhausted) as exc:
            named = _named_ambiguity(st, exc)
            if named is None:
                raise
            raise named from exc
    return result_stage(st, run.counts)


def _named_ambiguity(st: FloatState, exc: Exception) -> NotIdentifiable | None:
    """A fit that failed after a matching step that was not clear-cut: that step is the
    likelier reason, and the refusal names it (None: every step was clear-cut)."""
    ambiguous = st.decoded.ambiguous
    if not ambiguous:
        return None
    more = f" (and {len(ambiguous) - 1} more ambiguous steps)" if len(ambiguous) > 1 else ""
    return NotIdentifiable(
        f"{ambiguous[0]}{more}; the fit from the best order then failed: {exc}; "
        "rerun with another seed"
    )


def too_few_heads_float(
    oracle: Oracle, H: int, seed: int, affine: bool
) -> ModelClassMismatch | None:
    """After a float decoding failure: does the box have more than ``H`` heads?

    Asks the first pair's ``F(0..2H + 1)`` again plus one sample (phase ``"diagnosis"``,
    counted) and fits a degree-``H`` rational function to ``F(0..2H)``: with at most ``H``
    heads its value at ``k = 2H + 1`` misses the answer by a few units of the box's
    roundoff; a miss over 2^20 of them says the box has more heads (a float test: the
    residual is reported, not certified).
    None otherwise (the failure had another cause).
    """
    _, B, pairs = float_design(oracle.d, seed, affine)
    u, j = pairs[0]
    k = np.arange(2 * H + 2, dtype=np.float64)
    with oracle.phase("diagnosis"):
        F = np.array(
            oracle.query_many([B[j][None, :]] + [float_sequence(u, B[j], int(i)) for i in k[1:]]),
            dtype=np.float64,
        )
    m = H
    A = np.hstack(
        [
            k[: 2 * m + 1, None] ** np.arange(m + 1),
            -F[: 2 * m + 1, None] * k[: 2 * m + 1, None] ** np.arange(1, m + 1),
        ]
    )
    try:
        sol = np.linalg.solve(A, F[: 2 * m + 1])
    except np.linalg.LinAlgError:
        return None
    P = np.polynomial.Polynomial(sol[: m + 1])
    Q = np.polynomial.Polynomial(np.concatenate([[1.0], sol[m + 1 :]]))
    predicted = float(P(k[-1]) / Q(k[-1]))
    residual = float(F[-1]) - predicted
    scale = float(np.max(np.abs(F))) or 1.0
    unit = getattr(oracle.arithmetic, "unit_roundoff", None) or 2.0**-53
    threshold = 2**20 * unit * scale  # a correct fit misses by a few ulps, not a million
    if not abs(residual) > threshold:
        return None
    return ModelClassMismatch(
        f"the box has more than {H} heads (the fit with {H} heads leaves residual "
        f"{residual:.3g} at k = {2 * H + 1}, over 2^20 units of the box's roundoff "
        f"({threshold:.2g}); try heads={H + 1}, or max_heads= an upper bound in exact or "
        "certified mode)"
    )
