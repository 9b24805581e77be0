"""Theorem 6.1's learner: counts, guaranteed bounds under every adversary, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    QueryBudgetExceeded,
)
from verified_attn.noisy import (
    learn_noisy,
    learn_stochastic,
    probe_scale,
    repeats_for,
    tolerance_for_error,
    worst_case_oracle,
)
from verified_attn.noisy.claims import adversarial_oracles, random_instance, worst_ratio
from verified_attn.noisy.symbolic import LIPSCHITZ, a_priori_bounds
from verified_attn.oracle_wrappers import NoisyOracle, StochasticOracle


def oracle_of(model: va.SingleHeadAttention) -> NoisyOracle:
    return NoisyOracle(va.Oracle(model, "certified"), 1e-3)


@pytest.mark.parametrize(("d", "total"), [(1, 2), (2, 6), (5, 30)])
def test_golden_query_counts(d: int, total: int) -> None:
    oracle = NoisyOracle(va.Oracle(random_instance(d, 0), "certified"), 1e-3)
    rec = learn_noisy(oracle, tolerance=1e-3, w_bound=1, margin=1, verify=3)
    assert rec.queries == rec.bound == total
    assert rec.queries_by_phase == {"v": d, "W": d * d, "verify": 3}
    assert oracle.queries == total + 3 and rec.theorem == "thm-6.1"
    # d length-1 + d^2 length-2 queries + verification lengths 1, 2, 3.
    assert rec.tokens_sent == d + 2 * d * d + 6 and rec.max_length == 3


@settings(deadline=None, max_examples=12)
@given(
    d=st.integers(1, 4),
    seed=st.integers(0, 1000),
    tau=st.sampled_from([1e-2, 1e-3, 1e-5]),
    kind=st.sampled_from(["uniform", "rounding", "worst-shrink", "worst-grow"]),
    design=st.sampled_from(["paper", "norm"]),
)
def test_actual_error_never_exceeds_the_bound(
    d: int, seed: int, tau: float, kind: str, design: str
) -> None:
    model = random_instance(d, seed, tiny=design == "norm" and d > 1, w_bound=2)
    oracle = adversarial_oracles(model, tau, seed)[kind]()
    rec = learn_noisy(oracle, tolerance=tau, w_bound=2, margin=1, design=design)
    truth = model.float_parameters()
    assert worst_ratio(rec, model) <= 1
    lo, hi = rec.enclosures["W"]["lower"], rec.enclosures["W"]["upper"]
    assert ((lo <= truth["W"]) & (truth["W"] <= hi)).all()
    vi = rec.enclosures["v"]
    assert ((vi["lower"] <= truth["v"]) & (truth["v"] <= vi["upper"])).all()
    assert rec.enclosures["W_error"].max() <= rec.enclosures["W_a_priori"]
    # The checker re-derives exactly these intervals with its own code, on every example.
    assert va.verify_certificate(rec.certificate()).ok


def test_bound_is_sharp_and_a_smaller_one_fails() -> None:
    W = np.zeros((2, 2))
    W[0, 1] = 1.0
    model = va.SingleHeadAttention(W, [1, 1])
    oracle = worst_case_oracle(model, 1e-4, v_push="grow")
    rec = learn_noisy(oracle, tolerance=1e-4, w_bound=1, margin=1)
    err, bound = abs(rec.W[0, 1] - 1), rec.enclosures["W_error"][0, 1]
    assert 0.99 * bound < err <= bound
    assert err > bound * 4 / float(LIPSCHITZ)  # the centre-derivative variant is violated


def test_understating_the_tolerance_breaks_the_bound() -> None:
    """The wrong variant: the oracle errs by 1e-2 but the learner is told 1e-4."""
    W = np.zeros((2, 2))
    W[0, 1] = 1.0
    model = va.SingleHeadAttention(W, [1, 1])
    oracle = worst_case_oracle(model, 1e-2, v_push="grow")
    rec = learn_noisy(oracle, tolerance=1e-4, w_bound=1, margin=1, verify=0)
    assert not rec.verified
    assert abs(rec.W[0, 1] - 1) > rec.enclosures["W_error"][0, 1]


def test_probe_scale_is_the_largest_power_of_two() -> None:
    assert probe_scale(1) == 1 and probe_scale(3) == 0.25 and probe_scale(4) == 0.25
    assert probe_scale(1, 2) == 0.5  # ||u||_2 = sqrt 2
    for w in (0.3, 1, 2.5, 7):
        b = probe_scale(w)
        assert b * w <= 1 < 2 * b * w


def test_paper_design_refuses_a_small_coordinate_naming_the_margin() -> None:
    model = va.SingleHeadAttention([[0.5, 0], [0, 0.25]], [2, 0.01])
    with pytest.raises(NotIdentifiable, match="margin"):
        learn_noisy(oracle_of(model), tolerance=1e-3, w_bound=1, margin=1)
    rec = learn_noisy(oracle_of(model), tolerance=1e-3, w_bound=1, margin=1, design="norm")
    assert worst_ratio(rec, model) <= 1


def test_norm_design_refuses_small_v() -> None:
    model = va.SingleHeadAttention([[0.5, 0], [0, 0.25]], [0.1, 0.01])
    with pytest.raises(NotIdentifiable, match="margin"):
        learn_noisy(va.Oracle(model, "float"), tolerance=1e-3, w_bound=1, margin=1, design="norm")


def test_norm_bound_inconsistent_with_the_data() -> None:
    model = va.SingleHeadAttention([[4, 0], [0, 0]], [1, 1])
    with pytest.raises(NotIdentifiable, match="w_bound"):
        learn_noisy(va.Oracle(model, "float"), tolerance=1e-3, w_bound=1, margin=1)


def test_not_a_single_head_is_a_mismatch() -> None:
    model = va.SingleHeadAttention([[0.5, 0], [0, 0.25]], [1, -1])
    # Agrees with the head on lengths 1 and 2 (all learning queries), not on length 3.
    fn = lambda X: model(X) + (0.5 if X.shape[0] == 3 else 0.0)  # noqa: E731
    with pytest.raises(ModelClassMismatch) as info:
        learn_noisy(va.Oracle.from_callable(fn, d=2), tolerance=1e-3, w_bound=1, margin=1)
    assert info.value.query is not None and info.value.query.shape[0] == 3


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"tolerance": 0}, "tolerance"),
        ({"tolerance": -1e-3}, "tolerance"),
        ({"margin": 0}, "margin"),
        ({"w_bound": -1}, "w_bound"),
        ({"tolerance": 2.0}, "tolerance"),  # >= margin
        ({"design": "hadamard"}, "design"),
        ({"repeats": 0}, "repeats"),
        ({"verify": -1}, "verify"),
        ({"seed": "0"}, "seed"),
        ({"seed": -1}, "seed"),
        ({"verify": True}, "verify"),
        ({"lengths": [0]}, "lengths"),
    ],
)
def test_bad_arguments_name_themselves(kwargs: dict, name: str) -> None:
    oracle = va.Oracle(random_instance(2, 0), "float")
    args = {"tolerance": 1e-3, "w_bound": 1, "margin": 1} | kwargs
    with pytest.raises(InvalidArgument, match=name):
        learn_noisy(oracle, **args)
    assert oracle.queries == 0


def test_exact_oracles_and_non_oracles_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="float-mode"):
        learn_noisy(va.Oracle(random_instance(2, 0), "exact"), tolerance=1e-3, w_bound=1, margin=1)
    with pytest.raises(InvalidArgument, match="oracle"):
        learn_noisy(random_instance(2, 0), tolerance=1e-3, w_bound=1, margin=1)  # type: ignore
    with pytest.raises(InvalidArgument, match="tolerance"):  # norm design: tau < mu/sqrt(d)
        learn_noisy(
            va.Oracle(random_instance(4, 0), "float"),
            tolerance=0.6,
            w_bound=1,
            margin=1,
            design="norm",
        )


def test_budget_is_checked_before_any_query() -> None:
    oracle = NoisyOracle(va.Oracle(random_instance(2, 0), "certified"), 1e-3, budget=10)
    with pytest.raises(QueryBudgetExceeded):
        learn_noisy(oracle, tolerance=1e-3, w_bound=1, margin=1)
    assert oracle.queries == 0


def test_repeats_formula_and_stochastic_learning() -> None:
    n = repeats_for(0.1, 0.01, 30, 1e-3)
    assert n == math.ceil(2 * 0.01 * math.log(2 * 30 / 1e-3) / 1e-4) == 2201
    model = random_instance(2, 3)
    oracle = StochasticOracle(va.Oracle(model, "certified"), 1e-3, seed=0)
    rec = learn_stochastic(
        oracle, noise_scale=1e-3, target_error=0.02, w_bound=1, margin=1, verify=2
    )
    reps = rec.bound // 6
    assert rec.repeats == reps and rec.queries == 6 * reps and oracle.queries == 8 * reps
    assert rec.queries + rec.verification_queries == oracle.queries
    assert rec.assumptions[0].startswith("probabilistic, not certified")
    assert np.abs(rec.W - model.float_parameters()["W"]).max() <= 0.02
    with pytest.raises(InvalidArgument, match="failure_probability"):
        repeats_for(0.1, 0.01, 30, 1.5)


def test_tolerance_for_error_is_the_largest_that_meets_the_target() -> None:
    t = tolerance_for_error(0.05, 1, 1, 3)
    assert a_priori_bounds(t, 1, 1, 3, probe_scale=1)["W_entry"] <= 0.05
    assert a_priori_bounds(t * 1.001, 1, 1, 3, probe_scale=1)["W_entry"] > 0.05


@pytest.mark.parametrize("adversary", ["uniform", "rounding", "worst-case", "gaussian", "labels"])
def test_demo_runs_every_adversary(adversary: str) -> None:
    from verified_attn.noisy.demo import run

    out = run(2, tolerance=1e-3, adversary=adversary, bits=12, design="paper")
    assert out["within_bound"] and out["max_W_error"] <= out["max_W_bound"]
    if adversary != "gaussian":
        assert out["queries"] == out["bound"]


def test_demo_rejects_bad_input() -> None:
    from verified_attn.noisy.demo import run

    with pytest.raises(InvalidArgument, match="adversary"):
        run(2, adversary="laplace")
    with pytest.raises(InvalidArgument, match="d must"):
        run(0)
    out = run(3, tolerance=1e-4, design="norm")
    assert out["within_bound"]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"noise_scale": 0}, "noise_scale"),
        ({"target_error": -1}, "target_error"),
        ({"w_bound": "x"}, "w_bound"),
        ({"margin": 0}, "margin"),
        ({"failure_probability": 0}, "failure_probability"),
    ],
)
def test_stochastic_bad_arguments(kwargs: dict, name: str) -> None:
    oracle = StochasticOracle(va.Oracle(random_instance(2, 0), "certified"), 1e-3)
    args = {"noise_scale": 1e-3, "target_error": 0.05, "w_bound": 1, "margin": 1} | kwargs
    with pytest.raises(InvalidArgument, match=name):
        learn_stochastic(oracle, **args)
    assert oracle.queries == 0
