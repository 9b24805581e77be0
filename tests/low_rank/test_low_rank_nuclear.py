"""Tests of the paper's ROP + nuclear-norm method."""

from __future__ import annotations

import numpy as np
import pytest

from verified_attn.errors import InvalidArgument, NotIdentifiable
from verified_attn.low_rank import learn_low_rank
from verified_attn.low_rank.claims import random_low_rank_head
from verified_attn.low_rank.nuclear import nuclear_norm_admm, rop_probes
from verified_attn.oracle import Oracle


def _rop(d: int, r: int, m: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((d, r)) @ rng.standard_normal((r, d))
    a, b = rop_probes(d, m, seed=seed)
    return W, a, b, np.einsum("ki,ij,kj->k", a, W, b)


def test_probes_are_dyadic_and_queries_exact() -> None:
    a, b = rop_probes(5, 7, seed=3)
    grid = 2.0**-20
    assert np.all(np.round(a / grid) * grid == a) and np.all((a + b) - b == a)


def test_recovers_with_enough_measurements() -> None:
    W, a, b, t = _rop(12, 1, 3 * 2 * 12, 0)
    X, info = nuclear_norm_admm(a, b, t, tol=1e-9)
    assert info["converged"]
    assert np.linalg.norm(X - W) <= 1e-6 * np.linalg.norm(W)
    # The returned Z satisfies the measurements.
    assert np.allclose(np.einsum("ki,ij,kj->k", a, X, b), t, rtol=0, atol=1e-8 * np.abs(t).max())


def test_fails_with_too_few_measurements() -> None:
    # m = 2rd - r^2 - 1 is below the dimension of the rank-r set: recovery cannot succeed.
    d, r = 10, 1
    W, a, b, t = _rop(d, r, 2 * d * r - r * r - 1, 1)
    X, _ = nuclear_norm_admm(a, b, t, tol=1e-9)
    assert np.linalg.norm(X - W) > 1e-3 * np.linalg.norm(W)


def test_learner_end_to_end() -> None:
    model = random_low_rank_head(16, 1, 2)
    oracle = Oracle(model, "float")
    rec = learn_low_rank(oracle, rank=1, method="nuclear")
    W = model.float_parameters()["W"]
    assert np.linalg.norm(rec.W - W) <= 1e-8 * np.linalg.norm(W)
    m = 4 * 2 * 1 * 16  # default m = ceil(4 * r * 2d) = 128 < d^2
    assert rec.queries_by_phase["rop"] == m and rec.queries_by_phase["v"] == 16
    assert rec.bound == 16 + m
    assert rec.queries == 16 + m + rec.queries_by_phase.get("rescale", 0)
    assert oracle.queries == rec.queries + rec.verification_queries
    assert rec.method == "nuclear" and rec.rank == 1 and rec.residual is not None
    assert rec.residual < 1e-9


def test_learner_too_few_measurements_raises() -> None:
    model = random_low_rank_head(8, 3, 4)
    with pytest.raises(NotIdentifiable, match="measurements"):
        learn_low_rank(Oracle(model, "float"), method="nuclear", measurements=20)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({}, "rank= or measurements="),
        ({"measurements": 0}, "measurements"),
        ({"measurements": 1000}, "measurements"),
        ({"rank": 1, "tol": 2.0}, "tol"),
        ({"rank": 1, "max_iter": 0}, "max_iter"),
        ({"rank": 1, "denominator_bound": 7}, "denominator_bound"),
    ],
)
def test_bad_arguments(kwargs: dict, needle: str) -> None:
    oracle = Oracle(random_low_rank_head(6, 1, 0), "float")
    with pytest.raises(InvalidArgument, match=needle):
        learn_low_rank(oracle, method="nuclear", **kwargs)


def test_needs_float_oracle() -> None:
    with pytest.raises(InvalidArgument, match="float"):
        learn_low_rank(Oracle(random_low_rank_head(4, 1, 0), "certified"), rank=1, method="nuclear")
