"""Soundness, second round: the red team's wrong answers and forgeries, each reproduced.

Every test here failed on the code before its fix (or fails on a planted mistake that no
other test caught, named in its docstring).
"""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.arithmetic import FloatArithmetic
from verified_attn.certificates import verify_certificate
from verified_attn.certificates.kernel import loads
from verified_attn.errors import CertificateError, PrecisionExhausted
from verified_attn.verification import BIAS_ULPS, tolerance


def _json(data: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data))


# ---------------------------------------------------------------------------------------
# Wrong answers.
# ---------------------------------------------------------------------------------------


def test_an_output_bias_that_swamps_the_head_is_refused_not_verified() -> None:
    """beta = 1e8 with v ~ 1e-2 (float64): the answers carry the head's part only to ~1e-6
    of it; the learner returned 'verified' with W off by 2e-6 (rtol 1e-6)."""
    model = va.SingleHeadAttention([[1, -2], [3, 0.5]], [0.02, -0.01], c=[1, -1], beta=10**8)
    oracle = va.Oracle(model, "float")
    with pytest.raises(PrecisionExhausted, match=r"output bias \|beta\| = 1e\+08 swamps"):
        va.learn_single_head(oracle)
    assert oracle.queries == 3  # refused after beta and v, before any W probe
    # Control: the same head under a bias the answers resolve is learned and verified.
    fine = va.SingleHeadAttention([[1, -2], [3, 0.5]], [0.02, -0.01], c=[1, -1], beta=10)
    rec = va.learn_single_head(va.Oracle(fine, "float"))
    assert rec.verified and np.max(np.abs(rec.to_numpy()["W"] - [[1, -2], [3, 0.5]])) < 1e-6


def test_a_refined_low_precision_run_writes_a_certificate_its_checker_accepts() -> None:
    """rtol = 1e-3: the learner re-asks W probes at scales 2^n ('refine'); its own
    certificate was refused ('design.scales[1][1] = 4 is not 16^-n')."""
    model = va.SingleHeadAttention([[1, -2], [3, 0.5]], [1, -1])
    rng = np.random.default_rng(0)
    oracle = va.Oracle.from_callable(
        lambda X: float(model(X)) * (1 + 1e-5 * rng.standard_normal()), d=2, rtol=1e-3
    )
    rec = va.learn_single_head(oracle)
    assert rec.queries_by_phase.get("refine")  # the case: some probe was refined
    cert = _json(rec.certificate())
    check = verify_certificate(cert)
    assert check.ok and "refined probes" in check.summary[1]
    # The record is checked, not trusted: dropped, a wrong exponent, or in another box.
    dropped = copy.deepcopy(cert)
    dropped["design"]["refined"] = []
    with pytest.raises(CertificateError, match=r"not 16\^-n|implies"):
        verify_certificate(dropped)
    wrong = copy.deepcopy(cert)
    wrong["design"]["refined"][0][2] += 4
    with pytest.raises(CertificateError):
        verify_certificate(wrong)
    tight = copy.deepcopy(cert)
    tight["rtol"] = 1e-6
    with pytest.raises(CertificateError, match=r"design\.refined"):
        verify_certificate(tight)


@pytest.fixture(scope="module")
def single_head_certificate() -> dict[str, Any]:
    model = va.SingleHeadAttention([[Fraction(1, 2), -2], [3, 1]], [1, 5])
    return _json(va.learn_single_head(va.Oracle(model, "exact"), seed=3, verify=3).certificate())


def test_a_single_head_certificate_with_another_seed_is_refused(single_head_certificate) -> None:
    assert verify_certificate(single_head_certificate).ok
    forged = copy.deepcopy(single_head_certificate)
    forged["seed"] = 4
    with pytest.raises(CertificateError, match="seed is 4"):
        verify_certificate(forged)


@pytest.mark.parametrize("seed", [float("inf"), float("nan"), -1, 1.0, "0", None])
def test_a_counterexample_certificate_seed_must_be_an_int(seed: Any) -> None:
    for cx in (
        va.counterexample("prop-7.1", kind="shared-score-split", d=2, seed=0),
        va.counterexample("thm-4.1", kind="v-zero", d=2, seed=0),
    ):
        data = _json(cx.certificate())
        assert verify_certificate(data).ok
        data["seed"] = seed
        with pytest.raises(CertificateError, match="seed"):
            verify_certificate(data)


def test_duplicate_keys_are_refused_and_non_finite_seeds_too(single_head_certificate) -> None:
    """json.loads keeps the last of two equal keys; another parser may keep the first."""
    text = json.dumps(single_head_certificate)
    assert loads(text) == single_head_certificate
    forged = text.replace('"result": {', '"result": {"exact": false}, "result": {', 1)
    assert forged != text and json.loads(forged) == single_head_certificate  # the lenient read
    with pytest.raises(CertificateError, match="'result' appears twice"):
        loads(forged)
    nested = text.replace('"answers": {', '"answers": {"v": [], ', 1)
    with pytest.raises(CertificateError, match="'v' appears twice"):
        loads(nested)
    with pytest.raises(CertificateError, match="seed"):  # read, then refused by its field
        verify_certificate(loads(text.replace('"seed": 3', '"seed": Infinity', 1)))


def test_a_joint_fit_certificate_states_no_prediction_bound_it_cannot_recompute() -> None:
    """A joint-fit float certificate's prediction bound was stored, not recomputed: one
    forged 1000x tighter was accepted."""
    from verified_attn.multi_head.canonical_float import random_float_box

    rec = va.learn_multi_head(va.Oracle(random_float_box(2, 2, 0), "float"), heads=2, seed=0)
    cert = _json(rec.certificate())
    assert cert["result"]["parameter_error_estimate_kind"] == "joint"
    assert "prediction_bound" not in cert["result"]
    assert "not stated" in str(verify_certificate(cert))
    forged = copy.deepcopy(cert)
    forged["result"]["prediction_bound"] = {
        "sequences": 64,
        "sigmas": "0x1.8p+2",
        "seed": 0,
        "lengths": [1, 2],
        "ratio": "0x0p+0",
    }
    with pytest.raises(CertificateError, match="prediction_bound"):
        verify_certificate(forged)


# ---------------------------------------------------------------------------------------
# Checks no test exercised (a planted mistake in them went unseen).
# ---------------------------------------------------------------------------------------


def test_an_exact_verification_answer_moved_by_2_to_the_minus_200_is_refused(
    single_head_certificate,
) -> None:
    """Exact answers are compared with ==: a checker comparing 128-bit balls would accept
    this one (the moved answer's ball overlaps the true one)."""
    data = copy.deepcopy(single_head_certificate)
    answers = data["verification"]["answers"]
    i = next(i for i, a in enumerate(answers) if "sympy" in a)  # a closed form
    answers[i] = {"sympy": f"Add({answers[i]['sympy']}, Rational(1, {2**200}))"}
    with pytest.raises(CertificateError, match=f"verification.answers\\[{i}\\]"):
        verify_certificate(data)


def test_a_counterexample_with_v_moved_between_heads_fails_the_structural_proof() -> None:
    """With only length-1 sequences (f = x^T sum_h v_h) the exact evaluation cannot see v
    moved between heads of different W: only the structural check refuses it."""
    from verified_attn.certificates.counterexample import _groups, _heads

    data = _json(va.counterexample("prop-7.1", kind="permutation", d=2, seed=0).certificate())
    second = data["second"]
    assert len(second) >= 2 and second[0]["W"] != second[1]["W"]
    second[0]["v"], second[1]["v"] = second[1]["v"], second[0]["v"]
    first_heads = _heads(data["first"], "first", 2)
    second_heads = _heads(second, "second", 2)
    assert first_heads != second_heads
    data["proof"]["groups"] = [
        {
            "W": [[str(q) for q in row] for row in W],
            "first_v": [str(q) for q in a],
            "second_v": [str(q) for q in b],
        }
        for W, a, b in _groups(first_heads, second_heads)
    ]
    n = len(data["sequences"])
    data["sequences"] = [[["1", "-1"]]] * n
    with pytest.raises(CertificateError, match="structural proof fails"):
        verify_certificate(data)


def test_the_bias_term_is_in_the_box_s_own_unit_roundoff() -> None:
    """A float32 box (unit roundoff 2^-24) with a large bias verifies only because the
    rule's bias term is in its ulps; in float64's ulps the same answers are refused."""
    assert tolerance(FloatArithmetic(1e-4, 2.0**-24), 3000.0, bias=3000.0) == pytest.approx(
        BIAS_ULPS * 2 * 2.0**-24 * 3000.0 + 1e-4 * 1e-300, rel=1e-12
    )
    base = va.SingleHeadAttention([[1, -2], [3, 0.5]], [30, -20], c=[1, -1], beta=3000)

    def box(unit: float) -> va.Oracle:
        return va.Oracle.from_callable(
            lambda X: float(np.float32(base(X))),
            d=2,
            rtol=1e-4,
            unit_roundoff=unit,
            model_class="single-head-affine",
        )

    rec = va.learn_single_head(box(2.0**-24))
    assert rec.verification is not None and rec.verification.max_gap > 1e-4  # the term is used
    assert verify_certificate(_json(rec.certificate())).ok
    with pytest.raises(va.ModelClassMismatch):
        va.learn_single_head(box(2.0**-53))


# ---------------------------------------------------------------------------------------
# Sizes: refused with an estimate before any work, in the Python API (the CLI calls it).
# ---------------------------------------------------------------------------------------


def _size_cases() -> list[Any]:
    from verified_attn.low_rank.claims import random_low_rank_head
    from verified_attn.multi_head.counterexamples import random_multi_head
    from verified_attn.transformer.claims import random_transformer

    small = random_multi_head(2, 2, 0)
    return [
        (lambda: random_multi_head(10**6, 2, 0), "memory"),
        (lambda: random_multi_head(2, 10**6, 0), "heads must be an int in 1..1024"),
        (lambda: va.learn_multi_head(va.Oracle(small, "exact"), heads=10**6), "queries"),
        (lambda: va.learn_multi_head(va.Oracle(small, "float"), heads=10**6), "queries"),
        (lambda: random_transformer(10**6, 2, np.random.default_rng(0)), "memory"),
        (lambda: random_transformer(2, 10**6, np.random.default_rng(0)), "width"),
        (lambda: random_low_rank_head(10**6, 1, 0), "memory"),
        (lambda: va.counterexample("prop-7.1", kind="shared-score-split", d=10**6), "memory"),
        (lambda: va.counterexample("prop-7.1", kind="permutation", d=2, heads=10**6), "heads"),
        (lambda: va.counterexample("thm-4.1", kind="v-zero", d=10**6), "memory"),
        (lambda: va.learn_low_rank(va.Oracle.from_callable(sum, d=10**9), rank=1), "queries"),
        (lambda: va.learn_transformer(va.Oracle.from_callable(sum, d=10**6)), "queries"),
        (lambda: va.learn_relu_ffn(va.Oracle.from_callable(sum, d=10**6)), "memory"),
        (lambda: __import__("verified_attn.noisy.demo").noisy.demo.run(10**6), "queries"),
    ]


def test_absurd_sizes_are_refused_up_front() -> None:
    import time

    for build, match in _size_cases():
        start = time.perf_counter()
        with pytest.raises(va.InvalidArgument, match=match):
            build()
        assert time.perf_counter() - start < 5.0


# ---------------------------------------------------------------------------------------
# FastCertifiedHead: the float64 path only where it is provably exact.
# ---------------------------------------------------------------------------------------


def test_fast_head_partial_sums_past_2_to_the_53_take_the_exact_path() -> None:
    """W x_N's partial sums pass 2^53 and cancel (float64 gives 65537, the truth 65538):
    without the row guard the fast path returns a wrong exact score."""
    from verified_attn.boxes import FastCertifiedHead
    from verified_attn.models import as_rational_sequence

    a, b = 2**38 + 1, -(2**38 - 1)
    box = FastCertifiedHead(va.SingleHeadAttention([[a, b], [0, 1]], [1, 1]))
    x = 2**15 + 1
    X = [[1, 2], [x, x]]
    scores, _ = box.scores_and_values(as_rational_sequence(X))
    y = (a * x + b * x, x)  # W x_N, exactly
    assert [int(s.p) for s in scores] == [X[0][0] * y[0] + X[0][1] * y[1], x * y[0] + x * y[1]]
    assert box.exact_queries == 1 and box.fast_queries == 0


def test_fast_head_on_entries_past_float64_falls_back_to_the_exact_path() -> None:
    """Entries of 10^400 raised OverflowError converting to float64."""
    from verified_attn.boxes import FastCertifiedHead
    from verified_attn.models import as_rational_sequence

    box = FastCertifiedHead(va.SingleHeadAttention([[1, 0], [0, 1]], [1, 1]))
    scores, values = box.scores_and_values(as_rational_sequence([[10**400, 1], [1, 2]]))
    assert int(values[0].p) == 10**400 + 1 and int(scores[0].p) == 10**400 + 2
    assert box.exact_queries == 1


def test_equivalent_refuses_a_negative_seed() -> None:
    from verified_attn.models import MultiHeadAttention

    a, b = MultiHeadAttention([([[1]], [1])]), MultiHeadAttention([([[2]], [1])])
    with pytest.raises(va.InvalidArgument, match="seed must be an int >= 0, got -1"):
        va.equivalent(a, b, seed=-1)


def test_counterexample_refuses_d_below_each_hypothesis_minimum() -> None:
    """An off-by-one in the minimum went unseen: each hypothesis at its min_d is built and
    checks; one below is refused naming the minimum."""
    from verified_attn.hypotheses import HYPOTHESES

    cheap = [h for h in HYPOTHESES if h.kind != "nuclear-below-constant"]  # a search
    assert sum(h.min_d >= 2 for h in cheap) >= 3
    for hyp in cheap:
        if hyp.min_d >= 2:
            with pytest.raises(va.InvalidArgument, match=f"d must be >= {hyp.min_d}"):
                va.counterexample(hyp.theorem, kind=hyp.kind, d=hyp.min_d - 1)
        cx = va.counterexample(hyp.theorem, kind=hyp.kind, d=hyp.min_d)
        assert verify_certificate(_json(cx.certificate())).ok


# ---------------------------------------------------------------------------------------
# The main job's own soundness claims, and planted mistakes they catch.
# ---------------------------------------------------------------------------------------


def test_the_soundness_claims_pass_and_are_in_the_main_job() -> None:
    ids = [c.id for c in va.claims.all_claims()]
    assert "certificates/tampered-refused" in ids and "adapters/torch-weight-mapping" in ids
    results = va.check_claims(["certificates/tampered-refused", "adapters/torch-weight-mapping"])
    assert [r.status for r in results] == ["PASS", "PASS"], [r.detail for r in results]


def test_the_tamper_claim_fails_when_a_checker_accepts_a_tampered_certificate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verified_attn.certificates import single_head

    monkeypatch.setattr(single_head, "check_seed", lambda *args, **kwargs: None)
    [r] = va.check_claims(["certificates/tampered-refused"])
    assert not r.passed and "the header seed + 1 was ACCEPTED" in r.detail


def test_the_adapter_claim_fails_on_a_wrong_weight_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from verified_attn.adapters import torch as adapter

    real = adapter.head_parameters

    def transposed(**kwargs: Any) -> Any:
        p = real(**kwargs)
        return adapter.HeadParameters(np.transpose(p.W, (0, 2, 1)), p.c, p.v, p.beta)

    monkeypatch.setattr(adapter, "head_parameters", transposed)
    [r] = va.check_claims(["adapters/torch-weight-mapping"])
    assert not r.passed


def test_the_adapter_claim_is_skipped_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    [r] = va.check_claims(["adapters/torch-weight-mapping"])
    assert r.status == "SKIP" and "pip install 'verified-attn[torch]'" in r.detail


def test_check_claims_refuses_an_absurd_d_before_running_any() -> None:
    import time

    start = time.perf_counter()
    with pytest.raises(va.InvalidArgument, match="checking the claims at d = 1000000 would"):
        va.check_claims(["thm-5.1/"], d=10**6)
    assert time.perf_counter() - start < 5


def test_a_model_with_entries_beyond_float64_builds_and_says_where_float_stops() -> None:
    """An exact parameter past 1e308 is a legal model: exact learning gives it back (==),
    float evaluation refuses with PrecisionExhausted (was a raw OverflowError at build)."""
    m = va.SingleHeadAttention([[10**400, 1], [0, 1]], [1, 2], beta=-(10**400))
    assert va.learn_single_head(va.Oracle(m, "exact")).W == m.W
    with pytest.raises(va.PrecisionExhausted, match="float64 evaluation overflowed"):
        m.evaluate_batch(np.ones((1, 2, 2)))
