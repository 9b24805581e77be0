"""Soundness claims of the certified multi-head learners: boxes outside their class
(position-dependent, windowed, too many heads) and scores just off a rational are refused,
never returned; certificates verify and tampered copies are rejected.

>>> from verified_attn.multi_head.claims_soundness import TAMPER_CLAIM
>>> TAMPER_CLAIM.id
'prop-7.1/certificate-tamper'
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from verified_attn import soundness
from verified_attn.checks import Claim, ClaimResult
from verified_attn.errors import ModelClassMismatch, PrecisionExhausted
from verified_attn.models import MultiHeadAttention, SingleHeadAttention
from verified_attn.multi_head.canonical_learner import learn_multi_head
from verified_attn.multi_head.claims_structure import REF
from verified_attn.multi_head.learner import learn_orthogonal_heads, orthogonal_heads_model
from verified_attn.oracle import Oracle

__all__ = ["NEAR_RATIONAL_CLAIM", "OUT_OF_CLASS_CLAIM", "POSITIONS_CLAIM", "TAMPER_CLAIM"]


def _mh_positions(seed: int) -> ClaimResult:
    # The rotary box is already inconsistent with the learning answers (refused there).
    # The float ratio grid asks sequences up to 65 tokens at one head: a window of 4 makes its
    # answers inconsistent with any sum of heads, and the joint fit refuses first
    # (PrecisionExhausted: no consistent heads); never a result.
    ok, detail = soundness.position_check(
        lambda o: learn_multi_head(o, heads=1, seed=seed),
        {"rotary": "", "window-4": ""},
        {"window-4": (ModelClassMismatch, PrecisionExhausted)},
    )
    return ClaimResult("prop-7.1/position-dependent", REF, MH_POSITIONS, ok, detail)


def _mh_near_rational(seed: int) -> ClaimResult:
    """A score just off 1/3, and a second head below the balls' radius, at 256 bits."""
    import sympy

    from verified_attn.recovery import MultiHeadRecovery

    h1 = SingleHeadAttention([[1, soundness.near_rational()], [0, 2]], [1, -1])
    h2 = SingleHeadAttention([[2, 0], [1, 1]], [0, 1])
    tiny = SingleHeadAttention([[2, 0], [1, 1]], [0, sympy.Rational(1, 10**80)])
    clean = SingleHeadAttention([[1, sympy.Rational(1, 3)], [0, 2]], [1, -1])

    def learn(parts: list[SingleHeadAttention], **kw: Any) -> MultiHeadRecovery:
        oracle = Oracle(MultiHeadAttention(parts), "certified", precision=256)
        return learn_multi_head(oracle, seed=seed, **kw)

    ok1, d1 = soundness.refuses(lambda: learn([h1, h2], heads=2), soundness.REFUSED, "refutes")
    ok2, d2 = soundness.refuses(lambda: learn([clean, tiny], max_heads=2), soundness.REFUSED, "")
    rec = learn([clean, h2], heads=2)
    cert_ok, cert = soundness.tamper_check(rec.certificate())
    ok3 = rec.exact and bool(rec.assumptions) and cert_ok
    return ClaimResult(
        "prop-7.1/near-rational",
        REF,
        MH_NEAR,
        ok1 and ok2 and ok3,
        f"1/3 + 1e-80: {d1}; a head of size 1e-80 with max_heads=2: {d2}; clean: exact with "
        f"{len(rec.assumptions)} assumption(s); certificate: {cert}",
    )


MH_POSITIONS = (
    "The canonical multi-head learner (float) refuses a box whose answers depend on token "
    "positions and never returns a result for it: a rotary-like head with "
    "ModelClassMismatch (its learning answers fit no sum of heads), a window of 4 tokens (a head on short "
    "sequences, inconsistent on the ratio grid's sequences of up to 24 tokens) with "
    "ModelClassMismatch or PrecisionExhausted."
)
MH_NEAR = (
    "In certified mode (256 bits) a score 1/3 + 1e-80 is not returned as 1/3 exactly, a "
    "second head of size 1e-80 is not dropped silently by the degree test, and a clean "
    "result is exact with its assumption recorded; its certificate verifies and a tampered "
    "copy is rejected."
)


_TWO = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[0, 1], [1, 0]], [2, -1])])


def _mh_out_of_class(seed: int) -> ClaimResult:
    three = MultiHeadAttention([*_TWO.heads, ([[Fraction(1, 2), 0], [0, -1]], [1, 1])])
    ortho, bases = orthogonal_heads_model(3, [1, 1], seed)

    def canonical(box: Any, lengths: Any = None) -> Any:
        kw = {} if lengths is None else {"lengths": lengths}
        return learn_multi_head(Oracle(box, "certified"), heads=2, seed=seed, **kw)

    def orthogonal(box: Any, lengths: Any = None) -> Any:
        kw = {} if lengths is None else {"lengths": lengths}
        return learn_orthogonal_heads(Oracle(box, "certified"), bases, seed=seed, **kw)

    # The canonical learner's queries have length <= 2H + 1 = 5: a window of 5 tokens is
    # two heads on all of them, so only the final verification (lengths 6..16) sees it.
    cases = (
        ("canonical: window-5 of two heads", canonical, soundness.Window(_TWO, 5), (1, 2, 3, 4, 5)),
        ("canonical: three heads given heads=2", canonical, three, None),
        ("orthogonal: window-4 of its heads", orthogonal, soundness.Window(ortho), (1, 2, 3, 4)),
    )
    ok, detail = soundness.refuses_all(list(cases))
    return ClaimResult("prop-7.1/out-of-class", REF, MH_OOC, ok, detail)


MH_OOC = (
    "The certified multi-head learners refuse boxes outside their class with "
    "ModelClassMismatch: the canonical learner a window of 5 tokens over two heads (two "
    "heads on every learning query, length <= 2H + 1 = 5, so only the final verification "
    "sees it; returned verified on lengths <= 5) and three heads given heads=2; the "
    "orthogonal-subspace learner a window of 4 tokens over its heads (verified on lengths "
    "<= 4 only)."
)


def _mh_certificate_tamper(seed: int) -> ClaimResult:
    ortho, bases = orthogonal_heads_model(3, [1, 1], seed)
    runs = {
        "canonical, certified": (
            learn_multi_head(Oracle(_TWO, "certified"), heads=2, seed=seed),
            ("answers",),
        ),
        "canonical, float": (
            learn_multi_head(Oracle(_TWO, "float"), heads=2, seed=seed),
            ("answers",),
        ),
        "orthogonal, certified": (
            learn_orthogonal_heads(Oracle(ortho, "certified"), bases, seed=seed),
            ("subspaces.0.certificate.answers", "subspaces.0.basis"),
        ),
    }
    ok, detail = soundness.tamper_all(runs)
    return ClaimResult("prop-7.1/certificate-tamper", REF, MH_TAMPER, ok, detail)


MH_TAMPER = (
    "Multi-head certificates (canonical in certified and float mode, orthogonal subspaces) "
    "verify without the oracle; copies with one result entry, one learning answer (for "
    "the orthogonal learner: an answer of a subspace's head, or its basis), the "
    "learning count or one verification answer changed are each rejected."
)


POSITIONS_CLAIM = Claim("prop-7.1/position-dependent", REF, MH_POSITIONS, _mh_positions)
NEAR_RATIONAL_CLAIM = Claim("prop-7.1/near-rational", REF, MH_NEAR, _mh_near_rational)
OUT_OF_CLASS_CLAIM = Claim("prop-7.1/out-of-class", REF, MH_OOC, _mh_out_of_class)
TAMPER_CLAIM = Claim("prop-7.1/certificate-tamper", REF, MH_TAMPER, _mh_certificate_tamper)
