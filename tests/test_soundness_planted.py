"""Tests for the mistakes benchmarks/planted_mistakes.py found that the main job and the
tests both let through: an FFN certificate's stored answers compared by closeness or with
a point repeated, the fast certified head's values negated, the simplest rational missing
an interval's end, and the refine round's scale rounded up; and the transcript the refine
round overwrote."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import sympy

import verified_attn as va
from verified_attn.certificates import common_checks, verify_certificate
from verified_attn.errors import CertificateError
from verified_attn.soundness_claims import tampered


@pytest.fixture(scope="module")
def ffn_certificate() -> dict[str, Any]:
    net = va.ReluFFN([[1, -2, Fraction(1, 3)], [2, 1, -1]], [1, -3, 2])
    rec = va.learn_relu_ffn(va.Oracle(net, "exact"), seed=0)
    return json.loads(json.dumps(rec.certificate()))


def test_an_ffn_answer_moved_by_2_to_the_minus_200_is_refused(ffn_certificate) -> None:
    copies = dict(tampered("relu-ffn exact", ffn_certificate))
    assert verify_certificate(ffn_certificate).ok
    with pytest.raises(CertificateError, match="is not reproduced by the learned network"):
        copies["a stored answer + 2^-200"]()


def test_an_ffn_certificate_with_a_point_twice_is_refused(ffn_certificate) -> None:
    copies = dict(tampered("relu-ffn exact", ffn_certificate))
    with pytest.raises(CertificateError, match="repeats an earlier point"):
        copies["a stored point repeated"]()


def test_an_exact_stored_answer_is_compared_with_equality() -> None:
    from verified_attn.arithmetic import get_arithmetic

    exact = get_arithmetic("exact")
    want = Fraction(1, 3)
    near = sympy.Rational(1, 3) + sympy.Rational(1, 2**200)
    assert common_checks.matches_exact(sympy.Rational(1, 3), want, exact, 1)
    assert not common_checks.matches_exact(near, want, exact, 1)


def test_the_main_job_claim_fails_if_stored_answers_are_compared_by_closeness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def close(y: Any, want: Fraction, arith: Any, D: int) -> bool:
        return bool(abs(y - sympy.Rational(want.numerator, want.denominator)) < 2**-100)

    from verified_attn.certificates import relu_ffn

    monkeypatch.setattr(relu_ffn, "stored_answers", _with(close))
    [r] = va.check_claims(["certificates/tampered-refused"])
    assert not r.passed and "relu-ffn exact: a stored answer + 2^-200 was ACCEPTED" in r.detail


def _with(matches: Any) -> Any:
    """``common_checks.stored_answers`` with ``matches_exact`` replaced (a planted mistake)."""
    real = common_checks.stored_answers

    def planted(*args: Any, **kwargs: Any) -> Any:
        saved = common_checks.matches_exact
        common_checks.matches_exact = matches
        try:
            return real(*args, **kwargs)
        finally:
            common_checks.matches_exact = saved

    return planted


@pytest.mark.parametrize(
    "W, v, X",
    [
        ([[1, -2], [3, Fraction(1, 2)]], [1, 5], [[1, 2], [-1, 3], [2, 0]]),
        ([[0, 1], [-1, 0]], [-2, Fraction(3, 7)], [[Fraction(1, 3), 1], [4, -1]]),
    ],
)
def test_the_fast_certified_head_answers_hold_the_exact_value(W: Any, v: Any, X: Any) -> None:
    """FastCertifiedHead's certified answer is a ball holding f(X) (and so is the model's)."""
    from verified_attn.arithmetic import get_arithmetic
    from verified_attn.boxes import FastCertifiedHead
    from verified_attn.models import as_rational_sequence

    head = va.SingleHeadAttention(W, v)
    exact = va.Oracle(head, "exact").query(X)
    Xq = as_rational_sequence(X)
    arith = get_arithmetic("certified")
    with arith.context():
        ball = FastCertifiedHead(head).evaluate_rational(Xq, arith)
    lo, hi = common_checks.arb_bounds(ball)
    value = Fraction(str(sympy.N(exact, 80)))  # f(X) to 80 digits, from SymPy's closed form
    assert lo <= value + Fraction(1, 10**70) and value - Fraction(1, 10**70) <= hi
    assert hi - lo < Fraction(1, 10**30)


# ---------------------------------------------------------------------------------------
# The simplest rational at an interval's end, and the refine round's scales.
# ---------------------------------------------------------------------------------------


def _simplest_by_search(lo: Fraction, hi: Fraction) -> Fraction:
    """The rational in [lo, hi] with the smallest denominator, then the smallest |numerator|."""
    q = 1
    while True:
        inside = [Fraction(p, q) for p in range(math.floor(lo * q), math.ceil(hi * q) + 1)]
        inside = [x for x in inside if lo <= x <= hi]
        if inside:
            return min(inside, key=lambda x: (abs(x.numerator), x))
        q += 1


def test_the_simplest_rational_agrees_with_a_search_at_every_small_interval() -> None:
    """Every interval with endpoints p/q (q <= 5, |p/q| <= 3): ends included."""
    from verified_attn.arithmetic import simplest_rational_between

    points = sorted({Fraction(p, q) for q in range(1, 6) for p in range(-3 * q, 3 * q + 1)})
    for i, lo in enumerate(points):
        for hi in points[i:]:
            assert simplest_rational_between(lo, hi) == _simplest_by_search(lo, hi), (lo, hi)


def test_a_refined_probe_scale_is_the_largest_power_of_two_under_the_target() -> None:
    """rtol 1e-3: each refined W probe is asked at t = 2^n, the largest power of two with
    t |u_k^T W e_j| <= REFINE_TARGET (the logit's error is least near it)."""
    from verified_attn.exact_recovery.learner import REFINE_MAX_SCALE, REFINE_TARGET

    W = [[1, -2, Fraction(1, 5)], [3, Fraction(1, 2), Fraction(-1, 9)], [0, 1, Fraction(1, 40)]]
    model = va.SingleHeadAttention(W, [1, -1, 2])
    oracle = va.Oracle.from_callable(lambda X: float(model(X)), d=3, rtol=1e-3)
    cert = va.learn_single_head(oracle).certificate()
    U = [[Fraction(x) for x in row] for row in cert["design"]["U"]]
    refined = cert["design"]["refined"]
    assert refined  # the case: some probes were refined
    for k, j, n in refined:
        m = abs(sum(U[k][i] * Fraction(W[i][j]) for i in range(3)))  # u_k^T W e_j
        assert 2**n <= REFINE_MAX_SCALE
        assert 2**n * m <= REFINE_TARGET, (k, j, n, m)
        assert 2 ** (n + 1) * m > REFINE_TARGET or 2 ** (n + 1) > REFINE_MAX_SCALE, (k, j, n)


def test_the_transcript_records_what_the_box_answered_after_a_refine_round() -> None:
    """The refine and rescale rounds overwrite the learner's answers: the transcript keeps
    the box's own answer to each query it lists."""
    model = va.SingleHeadAttention([[1, -2], [3, 0.5]], [1, -1])
    oracle = va.Oracle.from_callable(lambda X: float(model(X)), d=2, rtol=1e-3)
    rec = va.learn_single_head(oracle)
    assert rec.queries_by_phase.get("refine")
    entries = list(oracle.transcript)
    assert len(entries) == oracle.queries
    for entry in entries:
        assert float(entry.answer) == float(model(np.asarray(entry.raw, dtype=float))), entry


def test_a_canonical_relu_network_computes_what_its_model_computes() -> None:
    """The canonical form's own value (linear term plus neurons) equals its ReluFFN's."""
    from verified_attn.transformer.relu_network import ReluNetwork

    net = ReluNetwork(
        (Fraction(2), Fraction(-1)),
        (((Fraction(1), Fraction(3)), Fraction(2)), ((Fraction(1), Fraction(-1, 2)), Fraction(-5))),
    )
    model = net.model()
    for x0 in range(-3, 4):
        for x1 in range(-3, 4):
            x = (Fraction(x0), Fraction(x1, 2))
            assert net.value(x) == model.value(list(x)), x


def test_the_bad_input_claim_is_in_the_main_job_and_passes() -> None:
    assert "validation/bad-input-refused" in [c.id for c in va.claims.all_claims()]
    [r] = va.check_claims(["validation/bad-input-refused"])
    assert r.status == "PASS", r.detail


@pytest.mark.parametrize("planted", ["low", "finite"])
def test_the_bad_input_claim_fails_when_validation_lets_one_through(
    monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    from verified_attn import validation

    real_int, real_real = validation.check_int, validation.check_real

    def no_low(x: Any, name: str, **kwargs: Any) -> Any:
        return real_int(x, name, **{**kwargs, "low": None})

    def no_finite(x: Any, name: str, **kwargs: Any) -> Any:
        return x if isinstance(x, float) and math.isnan(x) else real_real(x, name, **kwargs)

    if planted == "low":
        monkeypatch.setattr(validation, "check_int", no_low)
    else:
        monkeypatch.setattr(validation, "check_real", no_finite)
    [r] = va.check_claims(["validation/bad-input-refused"])
    named = {"low": "a negative seed", "finite": "a NaN rank tolerance"}[planted]
    assert not r.passed and f"; {named}" in r.detail, r.detail
