"""Tests of learn_low_rank: exactness, golden counts, over-rank, bad arguments."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from verified_attn.errors import InvalidArgument, ModelClassMismatch, NotIdentifiable
from verified_attn.low_rank import learn_low_rank, parameter_count, skeleton_query_bound
from verified_attn.low_rank.claims import random_low_rank_head
from verified_attn.models import SingleHeadAttention
from verified_attn.oracle import Oracle

# Golden learning-query counts, written out by hand. Rank found: d + 2dr - r^2 + [r < d]
# (the passing rank test decides the rank). Rank given: d + 2dr - r^2, the dimension of the
# set (the rank test only checks the class and is a declared verification phase).
GOLDEN = {(4, 1): 12, (5, 2): 22, (6, 3): 34, (5, 5): 30, (64, 4): 561, (256, 8): 4289}
GOLDEN_GIVEN = {(4, 1): 11, (5, 2): 21, (6, 3): 33, (5, 5): 30, (64, 4): 560, (256, 8): 4288}


@pytest.mark.parametrize(("d", "r"), sorted(GOLDEN))
def test_count_formula_golden(d: int, r: int) -> None:
    assert skeleton_query_bound(d, r) == GOLDEN[(d, r)]
    assert skeleton_query_bound(d, r, rank_given=True) == GOLDEN_GIVEN[(d, r)]
    assert GOLDEN_GIVEN[(d, r)] == parameter_count(d, r)


def test_count_formula_wrong_variant_fails() -> None:
    # The formula without the rank test, or with one query too few, does not match.
    assert skeleton_query_bound(5, 2) != 5 + 2 * 5 * 2 - 4
    assert skeleton_query_bound(5, 2) - 1 != GOLDEN[(5, 2)]


def test_parameter_count() -> None:
    assert parameter_count(5, 2) == 21  # 2*5*2 - 4 + 5
    assert skeleton_query_bound(5, 2) == parameter_count(5, 2) + 1


@pytest.mark.parametrize("arith", ["exact", "certified", "float"])
@pytest.mark.parametrize(("d", "r"), [(4, 1), (5, 2), (6, 3), (5, 5)])
@pytest.mark.parametrize("given_rank", [True, False])
def test_golden_counts_on_oracle(arith: str, d: int, r: int, given_rank: bool) -> None:
    model = random_low_rank_head(d, r, 10 * d + r, den=3)
    assert np.linalg.matrix_rank(model.float_parameters()["W"]) == r
    oracle = Oracle(model, arith)
    rec = learn_low_rank(oracle, rank=r if given_rank else None)
    golden = GOLDEN_GIVEN if given_rank else GOLDEN
    assert rec.queries == golden[(d, r)] == rec.bound
    assert oracle.queries == rec.queries + rec.verification_queries
    test = 1 if r < d else 0
    assert rec.verification_queries == 8 + (test if given_rank else 0)
    assert rec.verification_phases == (("rank", "verify") if given_rank and test else ("verify",))
    assert "rescale" not in rec.queries_by_phase
    assert rec.queries_by_phase["v"] == d
    assert rec.queries_by_phase.get("rank", 0) == (test if given_rank else r + test)
    assert rec.rank == r and rec.rank_given == (r if given_rank else None)
    if arith == "float":
        W = model.float_parameters()["W"]
        assert np.linalg.norm(rec.W - W) <= 1e-9 * np.linalg.norm(W)
    else:
        assert rec.exact and rec.W == model.W and rec.v == model.v


@given(
    d=st.integers(2, 9),
    data=st.data(),
    seed=st.integers(0, 10**6),
    arith=st.sampled_from(["certified", "float"]),
)
def test_random_sizes_exact_and_counted(d: int, data: st.DataObject, seed: int, arith: str) -> None:
    r = data.draw(st.integers(1, d))
    model = random_low_rank_head(d, r, seed, den=int(seed % 7) + 1)
    true_rank = int(np.linalg.matrix_rank(model.float_parameters()["W"]))
    # (true_rank may be 0: W = 0 is found with d + 1 queries, the formula at r = 0)
    rec = learn_low_rank(Oracle(model, arith), seed=seed)
    learning = rec.queries - rec.queries_by_phase.get("rescale", 0)
    assert learning == skeleton_query_bound(d, true_rank)
    assert rec.rank == true_rank
    if arith == "certified":
        assert rec.exact and rec.W == model.W
    else:
        W = model.float_parameters()["W"]
        assert np.linalg.norm(rec.W - W) <= 1e-9 * np.linalg.norm(W)


def test_rank_zero_W_found() -> None:
    model = SingleHeadAttention(np.zeros((4, 4), dtype=int), [1, 2, 3, 4])
    rec = learn_low_rank(Oracle(model, "exact"))
    assert rec.W == model.W
    assert rec.queries == 4 + 1  # v, then one rank test certifies W = 0


def test_over_rank_raises_with_evidence() -> None:
    model = random_low_rank_head(6, 3, 5)
    assert np.linalg.matrix_rank(model.float_parameters()["W"]) == 3
    for arith in ("exact", "certified", "float"):
        with pytest.raises(ModelClassMismatch) as info:
            learn_low_rank(Oracle(model, arith), rank=2)
        assert info.value.observed is not None and info.value.expected is not None
        assert "rank > 2" in str(info.value)


def test_full_rank_given_lower_rank_never_returns_wrong_matrix() -> None:
    rng = np.random.default_rng(1)
    W = rng.integers(-3, 4, (5, 5))
    model = SingleHeadAttention(W, [1, 1, 2, 0, -1])
    assert np.linalg.matrix_rank(W) == 5
    for r in (1, 2, 3, 4):
        with pytest.raises(ModelClassMismatch):
            learn_low_rank(Oracle(model, "certified"), rank=r)


def test_lower_true_rank_than_given() -> None:
    model = random_low_rank_head(6, 1, 3)
    rec = learn_low_rank(Oracle(model, "certified"), rank=3)
    assert rec.W == model.W
    # rank 1 found: v, the rank-1 cross (d + d - 1), and the wasted column (d - 1).
    assert rec.queries == 6 + (6 + 5) + 5
    assert rec.queries <= rec.bound == skeleton_query_bound(6, 3, rank_given=True)
    assert rec.rank == 1 and rec.rank_given == 3
    assert "rank" not in rec.queries_by_phase  # the wasted column certified the rank


def test_v_zero_not_identifiable() -> None:
    model = SingleHeadAttention([[1, 0], [0, 1]], [0, 0])
    with pytest.raises(NotIdentifiable):
        learn_low_rank(Oracle(model, "exact"))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"rank": 0}, "rank"),
        ({"rank": 5}, "rank"),
        ({"rank": 2.0}, "rank"),
        ({"rank": True}, "rank"),
        ({"rank": "2"}, "rank"),
        ({"method": "svd"}, "method"),
        ({"verify": -1}, "verify"),
        ({"verify": True}, "verify"),
        ({"seed": 1.5}, "seed"),
        ({"seed": -1}, "seed"),
        ({"lengths": []}, "lengths"),
        ({"denominator_bound": 0}, "denominator_bound"),
        ({"rank_tol": 0.0}, "rank_tol"),
        ({"measurements": 10}, "measurements"),
    ],
)
def test_bad_arguments(kwargs: dict, needle: str) -> None:
    oracle = Oracle(random_low_rank_head(4, 1, 0), "float")
    with pytest.raises(InvalidArgument, match=needle):
        learn_low_rank(oracle, **kwargs)
    assert oracle.queries == 0  # nothing half-done


def test_bad_oracle() -> None:
    with pytest.raises(InvalidArgument, match="oracle"):
        learn_low_rank("not an oracle")  # type: ignore[arg-type]


def test_affine_oracle_rejected() -> None:
    model = SingleHeadAttention([[1, 0], [0, 0]], [1, 1], beta=1)
    with pytest.raises(InvalidArgument, match="affine"):
        learn_low_rank(Oracle(model, "exact"))


def test_budget_checked_up_front() -> None:
    from verified_attn.errors import QueryBudgetExceeded

    # rank given: 21 learning + 1 rank test + 8 verification = 30 > 29
    oracle = Oracle(random_low_rank_head(5, 2, 0), "float", budget=21 + 1 + 7)
    with pytest.raises(QueryBudgetExceeded):
        learn_low_rank(oracle, rank=2)
    assert oracle.queries == 0
    oracle = Oracle(random_low_rank_head(5, 2, 0), "float", budget=21 + 1 + 8)
    assert learn_low_rank(oracle, rank=2).queries == 21


def test_certified_rational_entries_with_large_denominators() -> None:
    rng = np.random.default_rng(7)
    K = rng.integers(-5, 6, (2, 7))
    Q = rng.integers(-5, 6, (2, 7))
    W = [[Fraction(int(x), 97) for x in row] for row in (K.T @ Q).tolist()]
    model = SingleHeadAttention(W, [Fraction(1, 3)] * 7)
    rec = learn_low_rank(Oracle(model, "certified"), rank=2)
    assert rec.exact and rec.W == model.W and rec.v == model.v


def test_float_callable_oracle() -> None:
    model = random_low_rank_head(8, 2, 4)
    oracle = Oracle.from_callable(model, d=8, batch_fn=model.evaluate_batch)
    rec = learn_low_rank(oracle)
    W = model.float_parameters()["W"]
    assert np.linalg.norm(rec.W - W) <= 1e-9 * np.linalg.norm(W)
    assert rec.queries == skeleton_query_bound(8, 2)


def test_float_small_extra_component_is_detected() -> None:
    # rank 2 plus a rank-1 part 1e-5 times smaller: above rank_tol, so rank 3, never 2.
    rng = np.random.default_rng(11)
    W = (rng.integers(-4, 5, (8, 2)) @ rng.integers(-4, 5, (2, 8))) / 8
    W = W + 2.0**-17 * np.outer(rng.integers(-4, 5, 8), rng.integers(-4, 5, 8))
    model = SingleHeadAttention(W, rng.integers(1, 4, 8))
    with pytest.raises(ModelClassMismatch, match="rank > 2"):
        learn_low_rank(Oracle(model, "float"), rank=2)
    rec = learn_low_rank(Oracle(model, "float"))
    assert rec.queries == skeleton_query_bound(8, 3)
    assert np.linalg.norm(rec.W - W) <= 1e-9 * np.linalg.norm(W)
