"""Tests for the inexact oracle wrappers: tolerance guarantees, counts, seeds, errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.arithmetic import arb_bounds
from verified_attn.errors import InvalidArgument, PrecisionExhausted, QueryBudgetExceeded
from verified_attn.oracle_wrappers import LabelOracle, NoisyOracle, StochasticOracle


def _model(seed: int, d: int = 2) -> va.SingleHeadAttention:
    rng = np.random.default_rng(seed)
    return va.SingleHeadAttention(rng.integers(-4, 5, (d, d)) / 4, rng.integers(-3, 4, d))


def _truth(model: va.SingleHeadAttention, X: np.ndarray) -> tuple[Fraction, Fraction]:
    return arb_bounds(model.evaluate(X, "certified"))


@settings(deadline=None, max_examples=25)
@given(
    seed=st.integers(0, 10_000),
    tau=st.sampled_from([1e-1, 1e-3, 1e-9, 2.0**-40]),
    kind=st.sampled_from(["uniform", "rounding", "none", "worst-case"]),
)
def test_every_answer_is_within_the_tolerance_exactly(seed: int, tau: float, kind: str) -> None:
    model = _model(seed)
    direction = (lambda X, lo, hi: 1 if seed % 2 else -1) if kind == "worst-case" else None
    oracle = NoisyOracle(va.Oracle(model, "certified"), tau, kind, seed=seed, direction=direction)
    rng = np.random.default_rng(seed)
    for n in (1, 2, 3):
        X = rng.integers(-4, 5, (n, 2)) / 4
        y = Fraction(oracle.query(X))
        lo, hi = _truth(model, X)
        assert hi - Fraction(tau) <= y <= lo + Fraction(tau)


def test_worst_case_pushes_to_the_end_of_the_tolerance() -> None:
    model = va.SingleHeadAttention([[0]], [2])
    up = NoisyOracle(va.Oracle(model, "exact"), 0.25, "worst-case", direction=lambda X, lo, hi: 1)
    down = NoisyOracle(va.Oracle(model, "exact"), 0.25, "worst-case", direction=lambda *a: -1)
    assert up.query([[1]]) == 2.25 and down.query([[1]]) == 1.75


def test_a_greedy_adversary_is_clamped_to_the_tolerance() -> None:
    """A wrong adversary (10 tau away) cannot break the guarantee: the wrapper clamps."""
    model = va.SingleHeadAttention([[0]], [1])
    greedy = NoisyOracle(
        va.Oracle(model, "exact"), 0.125, lambda X, mid, room, rng: mid + 10 * room
    )
    assert greedy.query([[1]]) == 1.125


def test_rounding_prints_few_decimals() -> None:
    model = va.SingleHeadAttention([[1, 0], [0, -1]], [1, 3])
    oracle = NoisyOracle.rounded(va.Oracle(model, "certified"), decimals=2)
    assert oracle.tolerance == Fraction(1, 200)
    rng = np.random.default_rng(0)
    for _ in range(10):
        X = rng.integers(-4, 5, (2, 2)) / 3
        y = oracle.query(X)
        assert round(y, 2) == y
        lo, hi = _truth(model, X)
        assert abs(Fraction(y) - (lo + hi) / 2) <= Fraction(1, 200)


def test_seeds_reproduce_and_differ() -> None:
    model = _model(1)
    X = np.array([[0.5, 1.0], [1.0, 0.0]])

    def answers(seed: int) -> list[float]:
        o = NoisyOracle(va.Oracle(model, "certified"), 0.1, seed=seed)
        return [o.query(X) for _ in range(3)]

    assert answers(3) == answers(3)
    assert answers(3) != answers(4)


def test_counts_by_phase_live_on_the_wrapper() -> None:
    inner = va.Oracle(_model(2), "certified")
    oracle = NoisyOracle(inner, 0.1, budget=3)
    with oracle.phase("v"):
        oracle.query_many([np.eye(2)[:1], np.eye(2)[1:]])
    oracle.query([[1.0, 1.0]])
    assert (oracle.queries, oracle.queries_by_phase) == (3, {"v": 2, "other": 1})
    assert isinstance(oracle, va.Oracle) and oracle.arithmetic.name == "float"
    with pytest.raises(QueryBudgetExceeded):
        oracle.query([[1.0, 0.0]])
    assert oracle.queries == 3  # refused before being made


@pytest.mark.parametrize("bad", [0, -1e-3, float("nan"), "0.1", True])
def test_bad_tolerance_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="tolerance"):
        NoisyOracle(va.Oracle(_model(0), "exact"), bad)


def test_bad_wrapper_arguments() -> None:
    inner = va.Oracle(_model(0), "exact")
    with pytest.raises(InvalidArgument, match="direction"):
        NoisyOracle(inner, 0.1, "worst-case")
    with pytest.raises(InvalidArgument, match="adversary"):
        NoisyOracle(inner, 0.1, "gaussian")
    with pytest.raises(InvalidArgument, match="direction must return"):
        NoisyOracle(inner, 0.1, "worst-case", direction=lambda *a: 0).query([[1, 0]])
    with pytest.raises(InvalidArgument, match="oracle"):
        NoisyOracle(_model(0), 0.1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="noise_scale"):
        StochasticOracle(inner, 0)
    with pytest.raises(InvalidArgument, match="decimals"):
        NoisyOracle.rounded(inner, decimals=-1)
    with pytest.raises(InvalidArgument, match="seed"):
        NoisyOracle(inner, 0.1, seed=1.5)  # type: ignore[arg-type]


def test_uncertain_truth_wider_than_the_tolerance_is_reported() -> None:
    inner = va.Oracle(va.SingleHeadAttention([[1, 1], [0, 1]], [1, 2]), "certified", precision=32)
    with pytest.raises(PrecisionExhausted):
        NoisyOracle(inner, 2.0**-60).query([[0.5, 0.25], [1.0, 0.5]])


def test_stochastic_noise_is_zero_mean_with_the_given_scale() -> None:
    model = va.SingleHeadAttention([[0]], [1])
    oracle = StochasticOracle(va.Oracle(model, "certified"), 0.5, seed=7)
    answers = np.array(oracle.query_many([[[1.0]]] * 4000))
    assert oracle.queries == 4000
    assert abs(answers.mean() - 1) < 4 * 0.5 / np.sqrt(4000)
    assert 0.45 < answers.std() < 0.55


def test_labels_are_the_sign_at_the_threshold() -> None:
    model = va.SingleHeadAttention([[1, 0], [0, 1]], [1, -1])
    exact = LabelOracle(va.Oracle(model, "exact"))
    assert exact.query([[1, 0]]) == 1.0 and exact.query([[0, 1]]) == -1.0
    assert exact.query([[1, 1]]) == 1.0  # f = 0 >= 0
    shifted = LabelOracle(va.Oracle(model, "certified"), threshold=Fraction(1, 2))
    assert shifted.query([[1, 0]]) == 1.0 and shifted.query([[0.25, 0]]) == -1.0
    black_box = LabelOracle(va.Oracle.from_callable(lambda X: float(X.sum()) - 1, d=2))
    assert black_box.query([[1, 0.5]]) == 1.0 and black_box.query([[0.5, 0]]) == -1.0
    with pytest.raises(InvalidArgument, match="threshold"):
        LabelOracle(va.Oracle(model, "exact"), threshold="x")
