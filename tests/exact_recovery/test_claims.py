"""Theorem 4.1's claims: golden figures when they pass, and each one able to fail."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import sympy

import verified_attn as va
from verified_attn.checks import ClaimResult
from verified_attn.exact_recovery import claims as thm
from verified_attn.exact_recovery import information, symbolic, symbolic_base
from verified_attn.exact_recovery.learner import learn_single_head
from verified_attn.precision import relative_parameter_error

IDS = [
    "thm-4.1/query-count",
    "thm-4.1/length-one",
    "thm-4.1/sigmoid-reduction",
    "thm-4.1/logit-identity",
    "thm-4.1/linear-system",
    "thm-4.1/affine",
    "thm-4.1/information-limit",
    "thm-4.1/exact-recovery",
    "thm-4.1/certified-recovery",
    "thm-4.1/float-recovery",
    "thm-4.1/v-zero",
    "thm-4.1/not-a-head",
    "thm-4.1/position-dependent",
    "thm-4.1/certificate-tamper",
    "thm-4.1/near-rational",
]


def _run(claim_id: str, seed: int = 0) -> ClaimResult:
    (claim,) = [c for c in thm.CLAIMS if c.id == claim_id]
    return claim.check(seed)


def test_registry_has_every_thm_4_1_claim_once() -> None:
    assert [c.id for c in thm.CLAIMS] == IDS
    registered = [c.id for c in va.claims.all_claims()]
    assert all(registered.count(i) == 1 for i in IDS)
    assert all(c.paper_ref == "Thm 4.1" and c.statement for c in thm.CLAIMS)


# ---------------------------------------------------------------------------------------
# Golden figures (the claims that count queries).
# ---------------------------------------------------------------------------------------


def test_query_count_golden() -> None:
    res = _run("thm-4.1/query-count")
    assert res.passed, res.detail
    assert (res.queries, res.bound) == (72, 72)  # d = 8: 8^2 + 8


def test_exact_recovery_golden() -> None:
    res = _run("thm-4.1/exact-recovery")
    assert res.passed, res.detail
    assert (res.queries, res.bound) == (40, 40)  # sum over d = 1..4 of d^2 + d


def test_certified_recovery_golden_and_rescale() -> None:
    res = _run("thm-4.1/certified-recovery")
    assert res.passed, res.detail
    assert (res.queries, res.bound) == (272, 272)  # d = 16
    # The saturating head is re-asked at a smaller scale and still recovered exactly.
    assert "d = 4: 22 queries (2 rescaled), == truth True" in res.detail


def test_affine_golden() -> None:
    res = _run("thm-4.1/affine")
    assert res.passed, res.detail
    assert (res.queries, res.bound) == (49, 49)  # d = 6: 36 + 12 + 1


def test_float_recovery_reports_its_error() -> None:
    res = _run("thm-4.1/float-recovery")
    assert res.passed, res.detail
    assert (res.queries, res.bound) == (4160, 4160)
    assert 0 <= res.data["relative_error"] <= thm.FLOAT_RELATIVE_ERROR_BOUND
    # The figure and its bits, -log2 of it (verified_attn.precision).
    from verified_attn.precision import bits_text

    assert f"W {bits_text(res.data['relative_error_W'])}" in res.detail
    assert res.data["relative_error_bits"] == -math.log2(res.data["relative_error"])
    stated, measured = res.data["stated_parameter_error"], res.data["measured_parameter_error"]
    assert measured <= stated <= 2**8 * measured  # never more than shown, and not vacuous
    assert f"parameters stated {bits_text(stated)}" in res.detail


def test_v_zero_and_not_a_head_pass() -> None:
    v_zero = _run("thm-4.1/v-zero")
    assert v_zero.passed, v_zero.detail
    assert v_zero.queries == 4  # float, d = 4: stopped after reading v
    not_a_head = _run("thm-4.1/not-a-head")
    assert not_a_head.passed, not_a_head.detail


def test_claims_use_the_seed() -> None:
    a, b = _run("thm-4.1/float-recovery", 0), _run("thm-4.1/float-recovery", 1)
    assert a.passed and b.passed
    assert a.data["relative_error"] != b.data["relative_error"]


# ---------------------------------------------------------------------------------------
# Every claim can fail.
# ---------------------------------------------------------------------------------------


def _perturbing(field: str, delta: Any) -> Any:
    """learn_single_head whose result has ``field`` nudged: a wrong learner."""

    def wrong(*args: Any, **kwargs: Any) -> Any:
        rec = learn_single_head(*args, **kwargs)
        params = dict(rec.parameters)
        val = params[field]
        if isinstance(val, sympy.MatrixBase):
            val = val.copy()
            val[0, 0] += delta
        else:
            val = np.array(val, dtype=np.float64)
            val.flat[0] += delta * max(1.0, abs(val.flat[0]))
        params[field] = val
        return replace(rec, parameters=params)

    return wrong


def test_query_count_fails_against_a_wrong_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(thm, "query_bound", lambda d, affine=False: d * d + d - 1)
    assert not _run("thm-4.1/query-count").passed


@pytest.mark.parametrize(
    "claim_id", ["thm-4.1/exact-recovery", "thm-4.1/certified-recovery", "thm-4.1/affine"]
)
def test_exact_claims_fail_on_an_off_by_one_rational(
    monkeypatch: pytest.MonkeyPatch, claim_id: str
) -> None:
    monkeypatch.setattr(thm, "learn_single_head", _perturbing("W", sympy.Rational(1, 10**12)))
    assert not _run(claim_id).passed


def test_float_claim_fails_just_outside_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # A relative error of 2e-9 on one entry of W: the 1e-9 bound must reject it.
    monkeypatch.setattr(thm, "learn_single_head", _perturbing("W", 2e-9))
    res = _run("thm-4.1/float-recovery")
    assert not res.passed
    assert res.data["relative_error"] > thm.FLOAT_RELATIVE_ERROR_BOUND


def test_float_claim_fails_for_an_overstated_parameter_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The result states 4 bits more than its parameters show: the claim rejects it.
    real = thm.learn_single_head

    def overstating(oracle: va.Oracle, **kwargs: Any) -> Any:
        rec = real(oracle, **kwargs)
        truth = oracle.model.float_parameters()
        shown = relative_parameter_error([(rec.W, rec.v)], [(truth["W"], truth["v"])])
        scale = shown / rec.error_figures.parameter_error / 16
        return replace(rec, parameter_error_estimate=rec.parameter_error_estimate * scale)

    monkeypatch.setattr(thm, "learn_single_head", overstating)
    res = _run("thm-4.1/float-recovery")
    assert not res.passed
    assert res.data["stated_parameter_error"] < res.data["measured_parameter_error"]
    assert res.data["relative_error"] <= thm.FLOAT_RELATIVE_ERROR_BOUND  # only the figure fails


def test_v_zero_fails_if_the_learner_guesses(monkeypatch: pytest.MonkeyPatch) -> None:
    def guess(oracle: va.Oracle, **kwargs: Any) -> None:
        oracle.query_many([np.eye(oracle.d)[i : i + 1] for i in range(oracle.d)])
        return None  # returns instead of raising NotIdentifiable

    monkeypatch.setattr(thm, "learn_single_head", guess)
    assert not _run("thm-4.1/v-zero").passed


def test_not_a_head_fails_if_the_learner_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(thm, "learn_single_head", lambda oracle, **kw: None)
    res = _run("thm-4.1/not-a-head")
    assert not res.passed
    assert "returned a model" in res.detail


def test_symbolic_claims_fail_for_a_wrong_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # Unnormalised attention (no division by the softmax's total): the derivations break.
    def unnormalised(rows, W, v, c=None, beta=0, *, exp=sympy.exp):  # type: ignore[no-untyped-def]
        d, n = len(v), len(rows)
        q = rows[-1]
        shift = [sum(W[i][k] * q[k] for k in range(d)) + (c[i] if c else 0) for i in range(d)]
        return (
            sum(
                exp(sum(rows[t][i] * shift[i] for i in range(d)))
                * sum(rows[t][i] * v[i] for i in range(d))
                for t in range(n)
            )
            + beta
        )

    monkeypatch.setattr(symbolic_base, "attention_output", unnormalised)
    symbolic._measurement.cache_clear()
    symbolic._gradient_identity.cache_clear()
    try:
        for claim_id in [
            "thm-4.1/length-one",
            "thm-4.1/sigmoid-reduction",
            "thm-4.1/logit-identity",
            "thm-4.1/linear-system",
            "thm-4.1/affine",
        ]:
            assert not _run(claim_id).passed, claim_id
    finally:
        symbolic._measurement.cache_clear()
        symbolic._gradient_identity.cache_clear()


def test_linear_system_claim_fails_if_singular_U_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = symbolic.linear_system

    def lenient(d: int = 2, **kwargs: Any) -> Any:
        return replace(real(d, **kwargs), holds=True)

    monkeypatch.setattr(symbolic, "linear_system", lenient)
    assert not _run("thm-4.1/linear-system").passed


def test_information_limit_fails_against_a_wrong_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(information, "query_bound", lambda d, affine=False: d * d + d + 1)
    assert not _run("thm-4.1/information-limit").passed


def test_crashing_check_is_a_failed_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(symbolic, "affine_variant", boom)
    (res,) = va.check_claims(["thm-4.1/affine"])
    assert not res.passed
    assert "boom" in res.detail


def test_exact_mode_decides_saturated_probes() -> None:
    # Used to raise a raw TypeError: SymPy could not decide 0 < y < 1 numerically.
    model = va.SingleHeadAttention([[-9374]], [3])
    rec = va.learn_single_head(va.Oracle(model, "exact"))
    assert rec.W == model.W
