"""Re-check a multi-head certificate (canonical or orthogonal method) from its answers alone.

>>> import verified_attn as va
>>> from verified_attn.certificates.multi_head import verify
>>> model = va.MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
>>> data = va.learn_multi_head(va.Oracle(model, "certified"), heads=2).certificate()
>>> print(verify(data).summary[2])
decoding: 2 canonical heads re-decoded from the 22 stored learning answers == the claimed heads
>>> data["answers"]["F"][0][0]["arb"][0] = "1/3"
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: ...

What is re-checked, with the core arithmetic only (never the learners' modules):

``method: "canonical"``, exact or certified arithmetic (a *re-decoding*):

1. header and counts (:mod:`~verified_attn.certificates.kernel`): F(0) at the d (affine
   d + 1) probes, 2 H0 samples F(k) at each of the d (d or d + 1) + d - 1 pairs, one query
   per stored tie link; the learning count is their sum and the bound the worst case
   ``d + 2 H0 (d^2 + d - 1) + d (d - 1)`` (affine ``d + 1 + 2 H0 (d^2 + 2d - 1) + d^2``);
2. the design: U invertible and the probes b_j (lifted to [b_j; 1] if affine) a basis;
3. every pair's samples are interpolated again, the poles and residues isolated in balls
   (:mod:`verified_attn.rational_interpolation`, core mathematics shared with the learner),
   each reconstructed as the unique rational with denominator <= D in its ball (the stated
   assumption); with only ``max_heads`` given, the degree is re-found the same way (the
   largest m certified nonsingular at every pair);
4. heads are labelled across pairs (written out here): the link (u_1 + u_k, b_1) must fix
   exactly one order at (u_k, b_1) (scores and residues add), residues fix the order at
   (u_k, b_j) unless heads tie, and exactly the tied (u_k, b_j) have a stored tie answer
   which exactly one residue-respecting order's prediction meets;
5. ``[W_h | c_h] = U^{-T} S_h M^{-1}``, ``v_h = U^{-T} r_h`` and beta are solved exactly,
   heads with equal (W, c) merged, zero ones dropped, sorted; the result must be ``==``
   the claimed heads and beta.

``method: "canonical"``, float arithmetic: the float fit (least squares, Gauss-Newton) is
not cheaply reproducible, so the checker does **not** re-decode: it rebuilds every learning
query from the stored float design and checks that the claimed heads reproduce every
stored learning answer under the one agreement rule
(:func:`verified_attn.agreement.agree`) at the stored rtol.

``method: "orthogonal"``: the bases are full rank and pairwise orthogonal; each live
subspace's restricted head carries its own single-head certificate, re-checked by
:mod:`verified_attn.certificates.single_head` (which re-decodes it); its claimed (W', v')
is lifted here (``W = L W' L^T``, ``v = L v'``, ``L = B (B^T B)^{-1}``) and compared
with the claimed head (exact ``==``; float to :data:`FLOAT_RTOL`); a dead subspace's r
answers must be zero. The counts are the restricted ones summed under ``head<h>/``.

Finally (every method) the verification answers are re-checked against the claimed model.
Sizes are bounded (:data:`MAX_D`, :data:`MAX_HEADS`, :data:`MAX_FLOAT_HEADS`,
:data:`MAX_WORKING_PRECISION`) before any work, so a hostile file is refused fast.
"""

from __future__ import annotations

from typing import Any

from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import check_phases, passed
from verified_attn.certificates.float_figures import check_error_figures, max_gap
from verified_attn.certificates.multi_head_decode import compare_exact, redecode
from verified_attn.certificates.multi_head_float import (
    float_fit,
    float_phases,
    float_refine_count,
)
from verified_attn.certificates.multi_head_float_bounds import claimed_arrays
from verified_attn.certificates.multi_head_orthogonal import verify_orthogonal
from verified_attn.certificates.multi_head_parts import (
    FLOAT_RTOL,
    MAX_D,
    MAX_FLOAT_HEADS,
    MAX_HEADS,
    MAX_WORKING_PRECISION,
    claimed_heads,
    heads_model,
    predictor,
    read_ties,
)
from verified_attn.errors import (
    CertificateError,
    VerifiedAttnError,
)
from verified_attn.multi_head.canonical_float import (
    float_query_limit,
    probe_columns,
)

__all__ = ["FLOAT_RTOL", "MAX_D", "MAX_FLOAT_HEADS", "MAX_HEADS", "MAX_WORKING_PRECISION", "verify"]


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``multi-head`` certificate dict; CertificateError naming what fails."""
    if not isinstance(data, dict):
        raise CertificateError(f"a certificate is a JSON object, got {type(data).__name__}")
    method = kernel.get(data, "method")
    try:
        if method == "canonical":
            return _canonical(data)
        if method == "orthogonal":
            return verify_orthogonal(data)
        if method == "canonical-low-rank":
            from verified_attn.certificates.multi_head_low_rank import verify_low_rank

            return verify_low_rank(data)
    except VerifiedAttnError as exc:
        if isinstance(exc, CertificateError):
            raise
        raise CertificateError(f"multi-head certificate: {exc}") from exc
    raise CertificateError(
        f"method must be 'canonical', 'orthogonal' or 'canonical-low-rank', got {method!r:.80}"
    )


# ---------------------------------------------------------------------------------------
# The canonical method.
# ---------------------------------------------------------------------------------------


def _limit(d: int, H0: int, affine: bool) -> int:
    """The learner's worst case, ties included (the bound it is held to)."""
    if affine:
        return d + 1 + 2 * H0 * (d * d + 2 * d - 1) + (d * d if H0 >= 2 else 0)
    return d + 2 * H0 * (d * d + d - 1) + (d * (d - 1) if H0 >= 2 else 0)


def _bound_and_refinement(
    data: dict[str, Any],
    arith: Any,
    sizes: tuple[int, int, bool],
    phases: dict[str, int],
    unit: float,
) -> tuple[int, int]:
    """The query bound and the float refinement's count (added to ``phases``; 0 if none).

    The float worst case includes the adaptive phases (the learner's own formula); the
    refinement asks what the follow-up's count leaves after the other phases."""
    d, H0, affine = sizes
    if arith.name != "float":
        return _limit(d, H0, affine), 0
    bound = float_query_limit(d, H0, affine=affine, unit=unit)
    refine = float_refine_count(data, sizes, sum(phases.values()), bound, unit)
    if refine:
        phases["refinement"] = refine
    return bound, refine


def _canonical(data: dict[str, Any]) -> CertificateCheck:
    head = kernel.parse_header(data, "multi-head", max_d=MAX_D)
    d, arith = head.d, head.arith
    affine = kernel.as_bool(kernel.get(data, "affine"), "affine")
    heads_given = kernel.as_bool(kernel.get(data, "heads_given"), "heads_given")
    H0 = kernel.as_int(
        kernel.get(data, "H0"),
        "H0",
        low=1,
        high=MAX_FLOAT_HEADS if arith.name == "float" else MAX_HEADS,
    )
    exact = kernel.as_bool(kernel.get(data, "result.exact"), "result.exact")
    if exact != (arith.name != "float"):
        raise CertificateError(f"result.exact is {exact} in {arith.name} arithmetic")
    if arith.name == "float" and not heads_given:
        raise CertificateError("a float canonical certificate must have heads_given true")
    # The float design's columns follow from the sizes (redundant ones from six heads on).
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    # (and from two heads on for a coarse box, float32: its recorded unit roundoff)
    ncols = (
        probe_columns(d, H0, affine, unit=unit)
        if arith.name == "float"
        else d + (1 if affine else 0)
    )
    npairs = d * ncols + d - 1
    ties = read_ties(data, d, ncols)
    if ties and ncols > d + (1 if affine else 0):
        # The redundant design fixes each head's order by the plane s = M^T w: no tie link.
        raise CertificateError(
            f"answers.ties has {len(ties)} entries; the float design with redundant probe "
            "columns asks no tie links"
        )
    if arith.name == "float":
        phases = float_phases(data, arith, (d, H0, ncols, npairs), affine, unit)
    else:
        phases = {"F(0)": ncols, "F(k)": npairs * 2 * H0}
    if ties:
        phases["tie links"] = len(ties)
    bound, refine = _bound_and_refinement(data, arith, (d, H0, affine), phases, unit)
    learning = sum(phases.values())
    q = kernel.check_counts(data, learning=learning, bound=bound, phases=phases)
    if learning > bound:  # the float adaptive phases are held to the worst case
        raise CertificateError(f"{learning} learning queries exceed the bound {bound}")
    check_phases(q["by_phase"], phases)
    lines = [
        head.describe() + (" (affine)" if affine else "") + ", method canonical",
        f"queries: {learning} learning (F(0) {ncols}, F(k) {npairs} pairs x {2 * H0}, "
        f"{len(ties)} tie links"
        + (f", {phases['polish']} polish" if "polish" in phases else "")
        + (f", {refine} refinement" if refine else "")
        + f") <= bound {bound}; {q['verification']} verification",
    ]
    claimed, beta = claimed_heads(data, head, affine, H0)
    if arith.name == "float":
        lines.append(float_fit(data, head, affine, H0, ncols, npairs, ties, claimed, beta, refine))
    else:
        decoded, decoded_beta = redecode(data, head, affine, heads_given, H0, ncols, npairs, ties)
        compare_exact(claimed, beta, decoded, decoded_beta, affine)
        lines.append(
            f"decoding: {len(decoded)} canonical heads re-decoded from the {learning} stored "
            "learning answers == the claimed heads"
        )
    model = heads_model(claimed, beta, affine)
    with arith.context():
        lines.append(kernel.check_verification(data, head, predictor(head, model)))
    if arith.name == "float":
        bias = float(beta) if affine else 0.0
        counted = kernel.get(data, "verification.count")
        gap = max_gap(data, arith, d, predictor(head, model), bias) if counted else None
        heads = claimed_arrays(claimed, d, affine)
        lines.insert(-1, check_error_figures(data, arith, heads, bias, gap))
    return passed(head, lines)
