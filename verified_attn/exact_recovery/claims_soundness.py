"""Theorem 4.1's soundness claims: boxes outside the class, tampered certificates, near-rationals.

>>> from verified_attn.exact_recovery.claims_soundness import SOUNDNESS_CLAIMS
>>> [c.id for c in SOUNDNESS_CLAIMS]
['thm-4.1/position-dependent', 'thm-4.1/certificate-tamper', 'thm-4.1/near-rational']

Each claim feeds the learner a box it must refuse, or a result it must not overstate, so
a learner that accepted more than Theorem 4.1 shows fails it.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from verified_attn import soundness
from verified_attn.checks import Claim, ClaimResult
from verified_attn.exact_recovery.learner import learn_single_head
from verified_attn.models import SingleHeadAttention
from verified_attn.oracle import Oracle

__all__ = ["SOUNDNESS_CLAIMS"]

REF = "Thm 4.1"


def _positions(seed: int) -> ClaimResult:
    from verified_attn.exact_recovery.learner import learn_single_head as learn

    ok, detail = soundness.position_check(lambda o: learn(o, seed=seed))
    # A window over an exact head, in exact and certified arithmetic. (Exact mode decides
    # each fresh comparison exactly: with W = [[1, -1/2], [2, 0]] refusing takes minutes,
    # with this diagonal W about a second.)
    head = SingleHeadAttention([[Fraction(1, 2), 0], [0, Fraction(-1, 2)]], [1, 3])

    def exact_box(arith: str) -> Callable[..., Any]:
        def run(box: Any, lengths: Any = None) -> Any:
            kw = {} if lengths is None else {"lengths": lengths}
            return learn(Oracle(box, arith), seed=seed, **kw)

        return run

    window = soundness.Window(head)
    ok2, detail2 = soundness.refuses_all(
        [(f"window-4 ({a})", exact_box(a), window, (1, 2, 3, 4)) for a in ("exact", "certified")]
    )
    return ClaimResult(
        "thm-4.1/position-dependent", REF, POSITIONS, ok and ok2, f"{detail}; {detail2}"
    )


def _certificate_tamper(seed: int) -> ClaimResult:
    from verified_attn.exact_recovery.learner import learn_single_head as learn

    model = SingleHeadAttention([[1, Fraction(-1, 3)], [2, 0]], [1, 3])
    ok, detail = soundness.tamper_all(
        {
            arith: (learn(Oracle(model, arith), seed=seed), ("answers",))
            for arith in ("exact", "certified", "float")
        }
    )
    return ClaimResult("thm-4.1/certificate-tamper", REF, TAMPER, ok, detail)


def _near_rational(seed: int) -> ClaimResult:
    """Entries just off 1/3 at 256 bits: balls containing the truth, never exact."""
    import flint
    import sympy

    from verified_attn.verification import HIGH_PRECISION_FACTOR

    ok, rows = True, []
    for e in (20, 80):
        off = soundness.near_rational(e)
        model = SingleHeadAttention([[1, off], [2, 0]], [1, 3])
        try:
            rec = learn_single_head(Oracle(model, "certified", precision=256), seed=seed)
        except soundness.REFUSED as exc:
            rows.append(f"1/3 + 1e-{e}: refused ({type(exc).__name__})")
            continue
        with flint.ctx.workprec(4096):  # the truth as a ball of its own, not rounded
            inside = all(
                rec.W[i, j].contains(flint.fmpq(int(q.p), int(q.q)))
                if isinstance(rec.W[i, j], flint.arb)
                else rec.W[i, j] == q
                for i in range(2)
                for j in range(2)
                for q in [sympy.Rational(model.W[i, j])]
            )
        ok &= not rec.exact and inside
        rows.append(f"1/3 + 1e-{e}: exact={rec.exact}, balls contain the truth: {inside}")
    clean = SingleHeadAttention([[1, sympy.Rational(1, 3)], [2, 0]], [1, 3])
    rec = learn_single_head(Oracle(clean, "certified", precision=256), seed=seed)
    stated = any("denominator" in a for a in rec.assumptions)
    ok &= rec.exact and rec.W == clean.W and stated
    rows.append(f"1/3: exact={rec.exact}, denominator assumption stated: {stated}")
    # The stated limit: at 64 bits the verification runs at 256, so 1e-80 is below what it
    # can see; a result that comes back exact must then say what it rests on.
    slip = SingleHeadAttention([[1, soundness.near_rational(80)], [2, 0]], [1, 3])
    rec = learn_single_head(Oracle(slip, "certified", precision=64), seed=seed)
    ok &= (not rec.exact) or any("denominator" in a for a in rec.assumptions)
    rows.append(
        f"64 bits, 1/3 + 1e-80 (within 2^-{HIGH_PRECISION_FACTOR * 64} of 1/3): "
        f"exact={rec.exact} under the stated assumption"
    )
    return ClaimResult("thm-4.1/near-rational", REF, NEAR, ok, "; ".join(rows))


NEAR = (
    "In certified mode (256 bits) a head with an entry 1/3 + 1e-20 or 1/3 + 1e-80 is never "
    "returned as exact (the verification at 4x the precision refutes 1/3): its balls "
    "contain the truth; 1/3 itself comes back exact with its denominator assumption "
    "stated; at 64 bits 1/3 + 1e-80 is within 2^-256 of 1/3, the documented limit, and an "
    "exact result then states the assumption it rests on."
)


POSITIONS = (
    "A box whose answers depend on token positions (a sliding window of 4 tokens, a "
    "rotary-like head) is refused with ModelClassMismatch naming the position dependence, "
    "though on short sequences the window box is a head (in exact and certified "
    "arithmetic it is returned verified on lengths <= 4: only the final verification sees "
    "it)."
)
TAMPER = (
    "A single-head certificate (exact, certified and float) verifies without the oracle, "
    "and copies with one result entry, one learning answer (where stored), the learning "
    "count or one verification answer changed are each rejected."
)


SOUNDNESS_CLAIMS = [
    Claim("thm-4.1/position-dependent", REF, POSITIONS, _positions),
    Claim("thm-4.1/certificate-tamper", REF, TAMPER, _certificate_tamper),
    Claim("thm-4.1/near-rational", REF, NEAR, _near_rational),
]
