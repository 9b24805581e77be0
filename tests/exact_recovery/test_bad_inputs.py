"""Bad inputs to Theorem 4.1's learner: each a clear error from verified_attn.errors.

Every error must be a :class:`~verified_attn.errors.VerifiedAttnError` whose message names
the argument, raised before any query is spent where the input can be checked up front.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import (
    InvalidArgument,
    OracleError,
    QueryBudgetExceeded,
    VerifiedAttnError,
)

MODEL = va.SingleHeadAttention([[1, 0], [2, -1]], [1, 3])


def _oracle(**kwargs: Any) -> va.Oracle:
    return va.Oracle(MODEL, "certified", **kwargs)


@pytest.mark.parametrize(
    "oracle",
    [MODEL, None, "oracle", lambda X: 0.0, {"d": 2}],
    ids=["model", "None", "str", "callable", "dict"],
)
def test_learner_needs_an_oracle(oracle: Any) -> None:
    with pytest.raises(InvalidArgument, match=r"oracle must be a verified_attn\.Oracle"):
        va.learn_single_head(oracle)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"verify": -1}, "verify"),
        ({"verify": 2.0}, "verify"),
        ({"verify": True}, "verify"),
        ({"verify": "8"}, "verify"),
        ({"verify": None}, "verify"),
        ({"seed": 1.5}, "seed"),
        ({"seed": None}, "seed"),
        ({"seed": "0"}, "seed"),
        ({"seed": False}, "seed"),
        ({"denominator_bound": 0}, "denominator_bound"),
        ({"denominator_bound": -5}, "denominator_bound"),
        ({"denominator_bound": 2.0}, "denominator_bound"),
        ({"denominator_bound": True}, "denominator_bound"),
        ({"denominator_bound": "7"}, "denominator_bound"),
        ({"affine": 1}, "affine"),
        ({"affine": "yes"}, "affine"),
    ],
)
def test_bad_learner_arguments_are_named_and_cost_nothing(kwargs: dict, name: str) -> None:
    oracle = _oracle()
    with pytest.raises(InvalidArgument, match=name):
        va.learn_single_head(oracle, **kwargs)
    assert oracle.queries == 0


@pytest.mark.parametrize(
    "design",
    [
        [[1, 0]],
        [[1, 0], [0, 1], [0, 0]],
        [[1, 0, 0], [0, 1, 0]],
        [[1, "x"], [0, 1]],
        [[1, None], [0, 1]],
        [[1, 1j], [0, 1]],
        [[1, True], [0, 1]],
        [[1, math.nan], [0, 1]],
        [[1, math.inf], [0, 1]],
        [[0, 0], [0, 0]],
        "identity",
        5,
    ],
)
def test_bad_design(design: Any) -> None:
    with pytest.raises(InvalidArgument, match="design"):
        va.learn_single_head(_oracle(), design=design)


def _from_callable(fn: Any, d: int = 2) -> va.Oracle:
    return va.Oracle.from_callable(fn, d=d)


def _raise(X: np.ndarray) -> float:
    raise RuntimeError("the box is broken")


BAD_BOXES = {
    "raises": (_raise, "raised RuntimeError: the box is broken"),
    "nan": (lambda X: math.nan, "not finite"),
    "inf": (lambda X: -math.inf, "not finite"),
    "numpy nan": (lambda X: np.float64("nan"), "not finite"),
    "vector": (lambda X: np.ones(2), "one real number"),
    "list": (lambda X: [0.5], "one real number"),
    "string": (lambda X: "0.5", "real number"),
    "None": (lambda X: None, "real number"),
    "bool": (lambda X: True, "bool"),
    "numpy bool": (lambda X: np.bool_(False), "bool"),
    "complex": (lambda X: 0.5 + 1j, "real number"),
    "object": (lambda X: object(), "real number"),
}


@pytest.mark.parametrize("kind", sorted(BAD_BOXES))
def test_a_broken_black_box_is_an_oracle_error(kind: str) -> None:
    fn, message = BAD_BOXES[kind]
    oracle = _from_callable(fn)
    with pytest.raises(OracleError, match=message):
        va.learn_single_head(oracle)
    assert oracle.queries == 2  # the first (batched) v round was attempted and counted


def test_a_box_that_breaks_later_is_an_oracle_error() -> None:
    calls = {"n": 0}

    def flaky(X: np.ndarray) -> float:
        calls["n"] += 1
        if calls["n"] > 3:
            return math.nan
        return MODEL(X)

    with pytest.raises(OracleError, match="not finite"):
        va.learn_single_head(_from_callable(flaky))


def test_batch_fn_of_the_wrong_shape_is_an_oracle_error() -> None:
    oracle = va.Oracle.from_callable(MODEL, d=2, batch_fn=lambda Xs: MODEL.evaluate_batch(Xs)[:-1])
    with pytest.raises(OracleError, match="batch_fn must return shape"):
        va.learn_single_head(oracle)


def test_budget_exhausted_mid_run_by_rescaling() -> None:
    # The up-front check covers d^2 + d + verify; extra rescale probes can still exhaust a
    # tight budget, and then the error comes before the query that would exceed it.
    big = va.SingleHeadAttention([[60, -60], [55, 40]], [1, 2])
    oracle = va.Oracle(big, "float", budget=6 + 8)
    with pytest.raises(QueryBudgetExceeded) as info:
        va.learn_single_head(oracle)
    assert oracle.queries <= 14
    assert info.value.used + info.value.requested > 14


@pytest.mark.parametrize("arithmetic", ["exact", "certified", "float"])
def test_every_learner_error_is_ours(arithmetic: str) -> None:
    # A zoo of failures: all VerifiedAttnError subclasses, never a raw numpy/sympy error.
    cases = [
        lambda: va.learn_single_head(va.Oracle(MODEL, arithmetic), design=[[1, 2], [2, 4]]),
        lambda: va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1]], [0]), arithmetic)),
        lambda: va.learn_single_head(va.Oracle(MODEL, arithmetic, budget=1)),
        lambda: va.learn_single_head(va.Oracle(MODEL, arithmetic), verify=-3),
    ]
    for case in cases:
        with pytest.raises(VerifiedAttnError):
            case()
