"""Exact ReLU FFN learning: canonical forms ==, golden query counts, degenerate networks."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.errors import InvalidArgument, ModelClassMismatch, QueryBudgetExceeded
from verified_attn.models import OneLayerTransformer, ReluFFN
from verified_attn.transformer.claims import random_ffn
from verified_attn.transformer.relu import (
    ReluNetwork,
    canonical_network,
    ffn_query_bound,
    ffn_query_count,
    learn_relu_ffn,
)


def fresh_points(d: int, count: int, seed: int) -> list[list[Fraction]]:
    """Rational points with entries k/7: no learning query or verification sequence has them."""
    rng = np.random.default_rng(seed)
    return [[Fraction(int(x), 7) for x in rng.integers(-20, 21, d)] for _ in range(count)]


def small_rationals() -> st.SearchStrategy[Fraction]:
    return st.builds(Fraction, st.integers(-4, 4), st.integers(1, 3))


@st.composite
def networks(draw: Any) -> ReluFFN:
    d = draw(st.integers(1, 4))
    m = draw(st.integers(1, 5))
    A = [[draw(small_rationals()) for _ in range(m)] for _ in range(d)]
    w = [draw(small_rationals()) for _ in range(m)]
    if m >= 2 and draw(st.booleans()):  # antipodal or duplicate of neuron 0
        scale = draw(st.sampled_from([Fraction(-2), Fraction(1, 2), Fraction(3)]))
        for i in range(d):
            A[i][1] = scale * A[i][0]
    return ReluFFN(A, w)


@settings(max_examples=20)
@given(networks(), st.sampled_from(["exact", "certified"]), st.integers(0, 3))
def test_learned_network_is_the_canonical_form(g: ReluFFN, arith: str, seed: int) -> None:
    rec = learn_relu_ffn(va.Oracle(g, arith), seed=seed)
    assert rec.network == canonical_network(g)
    assert rec.exact and rec.verified
    # As a function: the returned ReluFFN agrees exactly on fresh rational points.
    assert va.verify_certificate(rec.certificate()).ok  # re-checked without the oracle
    model = rec.model
    assert isinstance(model, ReluFFN)
    for x in fresh_points(g.d, 5, seed + 99):
        assert model.value(x) == g.value(x)


def test_golden_query_counts() -> None:
    g = random_ffn(5, 8, np.random.default_rng(0))
    oracle = va.Oracle(g, "certified")
    rec = learn_relu_ffn(oracle, seed=0)
    assert rec.network == canonical_network(g)
    assert (rec.queries, rec.verification_queries, rec.network.width) == (29, 8, 3)
    assert rec.queries_by_phase == {"ffn": 29, "ffn-verify": 8}
    assert oracle.queries == 37  # counted on the oracle object, nowhere else
    assert rec.parameter_count == 3 * (5 + 1)
    # The count is the formula of the search's counters: 2*3 + 2 + 9 + (5 - 2)(3 + 1).
    assert rec.line_counts == {"pieces": 3, "half_pieces": 2, "probes": 9, "kinks": 3}
    assert rec.queries == ffn_query_count(5, **rec.line_counts) == 29
    # The bound is the worst-case formula at the learned width: 4(1+1) + 6 + 243 * 5.
    assert rec.bound == ffn_query_bound(5, 3) == 1229


@pytest.mark.parametrize(
    ("d", "m", "seed", "queries", "counts"),
    [
        (1, 2, 0, 8, (3, 0, 2, 1)),
        (2, 3, 1, 12, (3, 1, 5, 2)),
        (3, 6, 4, 22, (3, 2, 10, 3)),  # 2*3 + 2 + 10 + (3 - 2)(3 + 1)
        (4, 8, 2, 28, (3, 2, 10, 4)),
        (6, 12, 3, 74, (3, 6, 26, 8)),
    ],
)
def test_query_count_formula_is_exact(
    d: int, m: int, seed: int, queries: int, counts: tuple[int, int, int, int]
) -> None:
    """Golden counts, == the formula of the search's counters (exact arithmetic)."""
    g = random_ffn(d, m, np.random.default_rng(seed))
    oracle = va.Oracle(g, "exact")
    rec = learn_relu_ffn(oracle, seed=seed)
    assert rec.network == canonical_network(g) and rec.attempts == 1
    names = ("pieces", "half_pieces", "probes", "kinks")
    assert rec.line_counts == dict(zip(names, counts, strict=True))
    assert oracle.queries - rec.verification_queries == rec.queries == queries
    assert ffn_query_count(d, **rec.line_counts) == queries
    # The second segment starts in the first's last cone and reuses its piece and gradient:
    # 3 pieces at grid 1 (not 4), kinks + 1 cells (not kinks + 2). A count that asked them
    # again would be 2 + (d - min(d, 2)) more.
    assert rec.line_counts["pieces"] == 3
    pieces, half, probes, kinks = counts
    again = 2 * (pieces + 1) + half + probes + (d - min(d, 2)) * (kinks + 2)
    assert again == queries + 2 + d - min(d, 2) != queries


def test_query_count_formula_detects_a_wrong_cell_cost() -> None:
    """A formula charging d - 1 probes per cell (the biased learner's) is refuted."""
    g = random_ffn(6, 12, np.random.default_rng(3))
    rec = learn_relu_ffn(va.Oracle(g, "exact"), seed=3)
    c = rec.line_counts
    wrong = 2 * c["pieces"] + c["half_pieces"] + c["probes"] + 5 * (c["kinks"] + 1)
    assert wrong != rec.queries == ffn_query_count(6, **c)


def test_counts_agree_between_exact_and_certified() -> None:
    g = random_ffn(3, 6, np.random.default_rng(4))
    a = learn_relu_ffn(va.Oracle(g, "exact"), seed=1)
    b = learn_relu_ffn(va.Oracle(g, "certified"), seed=1)
    assert a.network == b.network == canonical_network(g)
    assert a.queries_by_phase == b.queries_by_phase


def test_canonical_form_merges_symmetries_and_detects_changes() -> None:
    base = ReluFFN([[1, 2], [-1, 1]], [3, -1])
    permuted = ReluFFN([[2, 1], [1, -1]], [-1, 3])
    rescaled = ReluFFN([[2, 2], [-2, 1]], [Fraction(3, 2), -1])
    split = ReluFFN([[1, 1, 2], [-1, -1, 1]], [1, 2, -1])  # duplicate direction
    dead = ReluFFN([[1, 2, 0, 5], [-1, 1, 0, 5]], [3, -1, 4, 0])
    for other in (permuted, rescaled, split, dead):
        assert canonical_network(other) == canonical_network(base)
    changed = ReluFFN([[1, 2], [-1, 1]], [3, -2])
    assert canonical_network(changed) != canonical_network(base)
    # c ReLU(z) - c ReLU(-z) = c z: an antipodal pair with equal weights is linear.
    odd = canonical_network(ReluFFN([[1, -1], [2, -2]], [3, -3]))
    assert odd == ReluNetwork((Fraction(3), Fraction(6)), ())


@pytest.mark.parametrize(
    "g",
    [
        ReluFFN([[0, 0], [0, 0]], [1, 2]),  # g = 0
        ReluFFN([[1, -1], [2, -2]], [3, -3]),  # linear
        ReluFFN([[1, 2], [1, 2]], [0, 0]),  # all output weights 0
    ],
    ids=["zero", "linear", "dead"],
)
def test_degenerate_networks(g: ReluFFN) -> None:
    rec = learn_relu_ffn(va.Oracle(g, "exact"))
    assert rec.network == canonical_network(g)
    assert rec.network.width == 0


def test_transformer_length_one_function_is_learned() -> None:
    T = OneLayerTransformer([[1, 0], [0, 1]], [[1, 2], [0, 1]], [[1, -1], [1, 1]], [2, -1])
    # Verified on length-1 sequences only: a Transformer reads more than the last token.
    rec = learn_relu_ffn(va.Oracle(T, "certified"), lengths=(1,))
    assert rec.network == canonical_network(T) == canonical_network(T.ffn())
    with pytest.raises(ModelClassMismatch):
        learn_relu_ffn(va.Oracle(T, "certified"))  # default lengths 1..16: not a ReluFFN


class _Quadratic:
    """Not a ReLU network: g(x) = (sum x)^2, exact rational answers."""

    d = 2
    model_class = None

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        return np.asarray(Xs)[:, -1, :].sum(axis=1) ** 2

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Any) -> Any:
        s = sum(Xq[Xq.nrows() - 1, k] for k in range(self.d))
        return sympy.Rational(int((s * s).p), int((s * s).q))


class _Biased(_Quadratic):
    """ReLU(x_1) + 1: piecewise linear but not homogeneous (a bias)."""

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Any) -> Any:
        x = Xq[Xq.nrows() - 1, 0]
        return sympy.Rational(int(x.p), int(x.q)) * int(x > 0) + 1


@pytest.mark.parametrize("box", [_Quadratic(), _Biased()], ids=["quadratic", "biased"])
def test_not_a_relu_network_is_a_mismatch(box: Any) -> None:
    oracle = va.Oracle(box, "exact")
    with pytest.raises(ModelClassMismatch):
        learn_relu_ffn(oracle, attempts=2)
    assert oracle.queries > 0


def test_bad_arguments() -> None:
    g = ReluFFN([[1]], [1])
    with pytest.raises(InvalidArgument, match="arithmetic"):
        learn_relu_ffn(va.Oracle(g, "float"))
    with pytest.raises(InvalidArgument, match="oracle"):
        learn_relu_ffn(g)  # type: ignore[arg-type]
    for kwargs, name in (
        ({"verify": -1}, "verify"),
        ({"verify": True}, "verify"),
        ({"seed": -1}, "seed"),
        ({"grid": 1.5}, "grid"),
        ({"seed": "1"}, "seed"),
    ):
        with pytest.raises(InvalidArgument, match=name):
            learn_relu_ffn(va.Oracle(g, "exact"), **kwargs)
    with pytest.raises(InvalidArgument, match="denominator_bound"):
        learn_relu_ffn(va.Oracle(g, "exact"), denominator_bound=0)


def test_budget_is_respected() -> None:
    oracle = va.Oracle(ReluFFN([[1, -1]], [1, 1]), "exact", budget=5)
    with pytest.raises(QueryBudgetExceeded):
        learn_relu_ffn(oracle)
    assert oracle.queries <= 5
