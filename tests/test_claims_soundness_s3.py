"""Claims that can fail for the right reasons: each passes on the real code, and a
deliberately wrong variant of the code (monkeypatched) makes it fail.

The wrong variants are the kind a careless change or a wrong reading of the paper
produces: a learner that ignores a hypothesis or verifies on short sequences only, a
repeat count one short, a certificate checker that accepts everything, a symbolic checker
whose zero test says yes to everything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import verified_attn.verification as core_verification
from verified_attn import soundness
from verified_attn.certificates import CertificateCheck
from verified_attn.claims import check_claims, get_claim, run_claim
from verified_attn.errors import ModelClassMismatch, NotIdentifiable


def _run(claim_id: str, size: dict[str, int | float] | None = None) -> Any:
    return run_claim(get_claim(claim_id), 0, size)


# ---------------------------------------------------------------------------------------
# The new claims pass on the real code (those the rooms' own tests do not already run).
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "claim_id",
    [
        "thm-4.1/certificate-tamper",
        "thm-5.1/certificate-tamper",
        "transformer/out-of-class",
        "transformer/certificate-tamper",
        "transformer/antisymmetry",
        "transformer/composition",
    ],
)
def test_new_claim_passes(claim_id: str) -> None:
    res = _run(claim_id)
    assert res.passed, res.detail


def test_symbolic_claims_state_and_check_every_d() -> None:
    res = _run("thm-4.1/length-one", {"d_max": 2})
    assert res.passed and res.data["ds"] == [1, 2]
    assert "every d = 1..3" in get_claim("thm-4.1/length-one").statement
    claim = get_claim("prop-7.1/permutation")
    assert claim.size_params("large") == {"d_max": 8, "heads_max": 4}
    # check --d N means one size N: it does not run SymPy at every d = 1..N.
    [r] = check_claims(["thm-4.1/length-one"], d=40)
    assert r.passed and r.data["size"] is None


# ---------------------------------------------------------------------------------------
# Noisy room: hypotheses ignored, verification too short, a repeat count off by one.
# ---------------------------------------------------------------------------------------


def test_boundary_fails_if_the_learner_ignores_the_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    from verified_attn.noisy import learner

    monkeypatch.setattr(learner, "_check_v", lambda *a, **k: None)
    res = _run("thm-6.1/boundary")
    assert not res.passed
    assert "|v_0| = mu - 21 tau/10: 0/2 refused" in res.detail


def test_boundary_fails_if_the_learner_ignores_the_norm_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verified_attn.noisy import learner

    monkeypatch.setattr(learner, "_check_bad", lambda *a, **k: None)
    monkeypatch.setattr(learner, "_check_norm", lambda *a, **k: None)
    res = _run("thm-6.1/boundary")
    # The final verification still refuses the far-off boxes, but not for the reason the
    # theorem gives (the norm bound): the claim names which rule failed.
    assert not res.passed and not res.detail.startswith("check raised")


def test_error_bound_fails_if_the_reported_a_priori_bound_is_inflated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A learner reporting twice the derived a-priori bound (so any a-posteriori bound
    # fits under it): the claim computes the bound from the derivation itself.
    from verified_attn.noisy import claims as noisy_claims

    real = noisy_claims.learn_noisy

    def inflated(*args: Any, **kwargs: Any) -> Any:
        rec = real(*args, **kwargs)
        rec.enclosures["W_a_priori"] *= 2
        return rec

    monkeypatch.setattr(noisy_claims, "learn_noisy", inflated)
    assert not _run("thm-6.1/error-bound").passed


def test_boundary_fails_if_the_bound_is_shrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    # A bound 0.9 times the derived one: the worst case at exactly tau exceeds it.
    from verified_attn.noisy import learner

    real = learner.noisy_intervals

    def tighter(*args: Any, **kwargs: Any) -> dict[str, Any]:
        out = real(*args, **kwargs)
        out["W_error"] = out["W_error"] * 0.9
        return out

    monkeypatch.setattr(learner, "noisy_intervals", tighter)
    assert not _run("thm-6.1/boundary").passed


@pytest.fixture
def short_verification(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every learner's fresh sequences cut to length <= 4 (the issue's finding 2)."""
    from verified_attn.noisy import verification as noisy_verification

    real = core_verification.fresh_sequences

    def short(d: int, count: int, seed: int, lengths: Any = core_verification.DEFAULT_LENGTHS):
        return real(d, count, seed, tuple(min(n, 4) for n in lengths))

    monkeypatch.setattr(core_verification, "fresh_sequences", short)
    monkeypatch.setattr(noisy_verification, "fresh_sequences", short)
    yield


@pytest.mark.parametrize(
    "claim_id",
    [
        "thm-6.1/out-of-class",
        "thm-4.1/position-dependent",
        "thm-5.1/position-dependent",
        "thm-5.1/nuclear-out-of-class",
        "transformer/out-of-class",
        "prop-7.1/out-of-class",
    ],
)
def test_out_of_class_fails_if_verification_is_short(
    claim_id: str, short_verification: None
) -> None:
    res = _run(claim_id)
    assert not res.passed, res.detail


def test_out_of_class_fails_if_the_label_learner_skips_verification(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verified_attn.noisy import labels

    real = labels.verify_labels

    def nothing(oracle: Any, *args: Any, **kwargs: Any) -> Any:
        return real(oracle, *args, **{**kwargs, "lengths": (1,)})

    monkeypatch.setattr(labels, "verify_labels", nothing)
    res = _run("thm-6.1/out-of-class")
    assert not res.passed
    assert "learn_from_labels / window-4: RETURNED" in res.detail


def test_stochastic_fails_with_one_repeat_fewer(monkeypatch: pytest.MonkeyPatch) -> None:
    from verified_attn.noisy import learner

    real = learner.repeats_for
    monkeypatch.setattr(learner, "repeats_for", lambda *a: real(*a) - 1)
    res = _run("thm-6.1/stochastic")
    assert not res.passed


def test_stochastic_fails_if_the_learner_reports_a_count_it_did_not_ask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The learner asks each query once but says it averaged n answers: the oracle's count
    # (n (d^2 + d + verify)) gives it away.
    from verified_attn.noisy import learner

    real = learner.learn_noisy

    def once(oracle: Any, **kwargs: Any) -> Any:
        n = kwargs.pop("repeats", 1)
        rec = real(oracle, **kwargs)
        rec.repeats = n
        return rec

    monkeypatch.setattr(learner, "learn_noisy", once)
    assert not _run("thm-6.1/stochastic").passed


# ---------------------------------------------------------------------------------------
# Certificates: a checker that accepts everything (or ignores counts) fails every tamper
# claim.
# ---------------------------------------------------------------------------------------


def _accepting(kind: str) -> Callable[..., CertificateCheck]:
    return lambda data, *a, **k: CertificateCheck(True, kind, str(data.get("theorem")))


@pytest.mark.parametrize(
    ("claim_id", "module", "function"),
    [
        ("thm-4.1/certificate-tamper", "verified_attn.certificates.single_head", "verify"),
        ("thm-5.1/certificate-tamper", "verified_attn.certificates.low_rank", "verify"),
        ("thm-6.1/certificate-tamper", "verified_attn.certificates.noisy", "verify"),
        ("thm-6.1/certificate-tamper", "verified_attn.certificates.labels", "verify"),
        ("prop-7.1/certificate-tamper", "verified_attn.certificates.multi_head", "verify"),
        ("transformer/certificate-tamper", "verified_attn.certificates.transformer", "verify"),
        (
            "transformer/certificate-tamper",
            "verified_attn.certificates.transformer",
            "verify_relu_ffn",
        ),
        (
            "thm-4.1/hypothesis/v-zero",
            "verified_attn.certificates.counterexample",
            "verify",
        ),
    ],
)
def test_tamper_claim_fails_if_the_checker_accepts_everything(
    claim_id: str, module: str, function: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    monkeypatch.setattr(importlib.import_module(module), function, _accepting("any"))
    res = _run(claim_id)
    assert not res.passed, res.detail


def test_tamper_check_fails_if_the_checker_ignores_the_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import verified_attn as va
    from verified_attn.certificates import single_head

    real = single_head.verify

    def lenient(data: dict[str, Any], *a: Any, **k: Any) -> Any:
        data = {**data, "queries": {**data["queries"], "learning": 6}}
        return real(data, *a, **k)

    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1, 2], [0, 1]], [1, 2])))
    assert soundness.tamper_check(rec.certificate())[0]
    monkeypatch.setattr(single_head, "verify", lenient)
    ok, detail = soundness.tamper_check(rec.certificate())
    assert not ok and "queries.learning changed: ACCEPTED" in detail


def test_counterexample_claim_fails_if_a_pair_of_one_model_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The perturbed pair is still refused; only the "second := first" copy slips through.
    import copy

    monkeypatch.setattr(soundness, "replace_second", lambda data: copy.deepcopy(data))
    res = _run("thm-4.1/hypothesis/v-zero")
    assert not res.passed and "second := first was ACCEPTED" in res.detail


def test_tamper_changes_the_named_site() -> None:
    data = {"result": {"W": [[{"rational": "1/3"}]]}, "answers": {"v": [{"float": "0x1p+0"}]}}
    assert soundness.tamper(data)["result"]["W"][0][0] == {"rational": "4/3"}
    # A sign label +-1 is flipped (+ 1 would make it no label at all).
    assert soundness.tamper(data, "answers")["answers"]["v"][0] == {
        "float": "-0x1.0000000000000p+0"
    }
    assert soundness.tamper({"subspaces": [{"basis": ["2/1"]}]}, "subspaces.0.basis") == {
        "subspaces": [{"basis": ["3"]}]
    }
    assert soundness.tamper(data, "verification.answers") is None


# ---------------------------------------------------------------------------------------
# Symbolic checkers that accept everything fail their claims (the wrong variants "hold").
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "claim_id",
    [
        "thm-4.1/length-one",
        "thm-4.1/sigmoid-reduction",
    ],
)
def test_thm41_symbolic_claim_fails_if_the_zero_test_says_yes(
    claim_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verified_attn.exact_recovery import symbolic

    monkeypatch.setattr(symbolic, "is_zero", lambda expr: True)
    symbolic._measurement.cache_clear()
    try:
        res = _run(claim_id, {"d_max": 2})
    finally:
        symbolic._measurement.cache_clear()
    assert not res.passed, res.detail


@pytest.mark.parametrize(
    ("claim_id", "function"),
    [
        # The logit check's wrong variant already fails on its structure (y / (1 - y) is
        # no single exponential) before any zero test: only a checker that accepts
        # everything lets it through.
        ("thm-4.1/logit-identity", "logit_identity"),
        ("thm-4.1/linear-system", "linear_system"),
        ("thm-4.1/affine", "affine_variant"),
        ("thm-4.1/information-limit", "parameter_count"),
    ],
)
def test_thm41_claim_fails_if_its_checker_accepts_everything(
    claim_id: str, function: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from verified_attn.exact_recovery import symbolic

    real = getattr(symbolic, function)

    def accepting(*args: Any, **kwargs: Any) -> Any:
        return dataclasses.replace(real(*args, **kwargs), holds=True)

    monkeypatch.setattr(symbolic, function, accepting)
    assert not _run(claim_id, {"d_max": 2}).passed


def test_symbolic_claim_fails_at_a_larger_d_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # A derivation that breaks only at d = 3 is caught by "every d = 1..3", not by d = 2.
    from verified_attn.exact_recovery import symbolic

    real = symbolic.sigmoid_reduction

    def broken_at_3(d: int = 3, *args: Any, **kwargs: Any) -> Any:
        import dataclasses

        out = real(d, *args, **kwargs)
        return dataclasses.replace(out, holds=False) if d == 3 and "claimed" not in kwargs else out

    monkeypatch.setattr(symbolic, "sigmoid_reduction", broken_at_3)
    assert _run("thm-4.1/sigmoid-reduction", {"d_max": 2}).passed
    assert not _run("thm-4.1/sigmoid-reduction").passed


@pytest.mark.parametrize("claim_id", ["transformer/antisymmetry", "transformer/composition"])
def test_transformer_symbolic_claim_fails_if_the_zero_test_says_yes(
    claim_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verified_attn.transformer import symbolic

    monkeypatch.setattr(symbolic, "_is_zero", lambda expr: True)
    res = _run(claim_id, {"d_max": 1})
    assert not res.passed, res.detail


def test_transformer_antisymmetry_fails_for_a_sign_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # The claimed v_eff off by a sign everywhere (the default formula negated).
    from verified_attn.transformer import symbolic

    real = symbolic.antisymmetry

    def negated(d: int = 2, n: int = 2, m: int = 2, **kwargs: Any) -> Any:
        kwargs.setdefault("v_eff", lambda V, A, w: -V * A * w)
        return real(d, n, m, **kwargs)

    monkeypatch.setattr(symbolic, "antisymmetry", negated)
    assert not _run("transformer/antisymmetry", {"d_max": 1}).passed


def test_multi_head_kind_claim_fails_if_every_pair_is_proved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verified_attn.multi_head import claims_structure

    real = claims_structure.prove_same_map

    def yes(*args: Any, **kwargs: Any) -> Any:
        import dataclasses

        return dataclasses.replace(real(*args, **kwargs), holds=True)

    monkeypatch.setattr(claims_structure, "prove_same_map", yes)
    res = _run("prop-7.1/permutation", {"d_max": 1, "heads_max": 2})
    assert not res.passed


# ---------------------------------------------------------------------------------------
# Out-of-class refusals must be the right ones.
# ---------------------------------------------------------------------------------------


def test_nuclear_out_of_class_fails_if_position_dependence_is_not_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The old behaviour: a position-dependence witness reported as NotIdentifiable.
    from verified_attn.low_rank import claims as lr_claims

    real = lr_claims.learn_low_rank

    def relabel(*args: Any, **kwargs: Any) -> Any:
        try:
            return real(*args, **kwargs)
        except ModelClassMismatch as exc:
            raise NotIdentifiable(str(exc)) from exc

    monkeypatch.setattr(lr_claims, "learn_low_rank", relabel)
    assert not _run("thm-5.1/nuclear-out-of-class").passed


def test_transformer_out_of_class_fails_if_the_learner_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verified_attn.transformer import claims as tr_claims

    real = tr_claims.learn_relu_ffn

    def swallow(oracle: Any, **kwargs: Any) -> Any:
        try:
            return real(oracle, **kwargs)
        except ModelClassMismatch:
            return real(oracle, **{**kwargs, "lengths": (1,)})

    monkeypatch.setattr(tr_claims, "learn_relu_ffn", swallow)
    res = _run("transformer/out-of-class")
    assert not res.passed and "returned a result" in res.detail


def test_window_box_is_a_head_on_short_sequences() -> None:
    import numpy as np

    import verified_attn as va

    head = va.SingleHeadAttention([[1, 0], [0, -1]], [1, 2])
    box = soundness.Window(head, 4)
    rng = np.random.default_rng(0)
    X4, X6 = rng.integers(-2, 3, (4, 2)), rng.integers(-2, 3, (6, 2))
    assert va.Oracle(box, "exact").query(X4) == va.Oracle(head, "exact").query(X4)
    # On 6 tokens the window drops two: the answers differ (it is not a head).
    assert va.Oracle(box, "certified").query(X6) != va.Oracle(head, "certified").query(X6)


# ---------------------------------------------------------------------------------------
# Near a simple rational: the 4x-precision verification is what refutes it.
# ---------------------------------------------------------------------------------------


def test_near_rational_passes_and_fails_without_the_high_precision_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import verified_attn.verification as verification

    assert _run("thm-4.1/near-rational").passed
    monkeypatch.setattr(verification, "HIGH_PRECISION_FACTOR", 1)  # verify at the learning one
    res = _run("thm-4.1/near-rational")
    assert not res.passed and "1/3 + 1e-80: exact=True" in res.detail


def test_transformer_near_rational_fails_if_the_ffn_learner_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verified_attn.transformer import claims as tr_claims

    monkeypatch.setattr(tr_claims, "learn_relu_ffn", lambda oracle, **kw: None)
    res = _run("transformer/near-rational")
    assert not res.passed and "ReLU FFN with A off 1/3: returned a result" in res.detail


def test_relu_exact_checks_values_not_only_the_shared_canonical_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A learner whose canonical network is right but whose model computes something else
    # (a bug in the code both share would look like this): the value check catches it.
    import types

    from verified_attn.models import ReluFFN
    from verified_attn.transformer import claims as tr_claims

    real = tr_claims.learn_relu_ffn

    def off_by_one(oracle: Any, **kwargs: Any) -> Any:
        rec = real(oracle, **kwargs)
        A, w = rec.model.A.tolist(), list(rec.model.w_o)
        w[0] += 1
        return types.SimpleNamespace(
            network=rec.network,
            model=ReluFFN(A, w),
            queries=rec.queries,
            parameter_count=rec.parameter_count,
            bound=rec.bound,
        )

    monkeypatch.setattr(tr_claims, "learn_relu_ffn", off_by_one)
    res = _run("transformer/relu-exact")
    assert not res.passed and "same values at 12 points: False" in res.detail
