"""Jacobian rank of the multi-head query map: brackets, fibres, and collisions."""

from __future__ import annotations

from fractions import Fraction

import flint
import pytest
from hypothesis import given
from hypothesis import strategies as st

from verified_attn.errors import InvalidArgument
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.identifiability import (
    generic_sequences,
    jacobian,
    local_dimension,
    symmetry_null_vectors,
)

W = [[1, 2], [0, -1]]
W2 = [[0, 1], [1, 1]]


@pytest.mark.parametrize("arith", ["exact", "certified"])
@pytest.mark.parametrize(
    ("heads", "rank", "kernel", "fibre"),
    [
        ([(W, [1, 2])], 6, 0, 0),  # single live head: identifiable
        ([(W, [0, 0])], 2, 4, 4),  # dead head: W free, d^2
        ([(W, [1, 2]), (W2, [-1, 1])], 12, 0, 0),  # distinct heads
        ([(W, [1, 2]), (W, [-1, 1])], 8, 4, 2),  # shared W: fibre d, kernel 2d
        ([(W, [1, 2]), (W, [-1, -2])], 6, 6, 6),  # cancelling: d^2 + d
    ],
)
def test_golden_dimensions(arith: str, heads: list, rank: int, kernel: int, fibre: int) -> None:
    r = local_dimension(MultiHeadAttention(heads), arithmetic=arith)
    assert (r.rank_lower, r.rank_upper) == (rank, rank)
    assert r.kernel_dimension == kernel and r.dimension == fibre
    assert r.critical == (kernel > fibre)


@given(d=st.integers(1, 3), seed=st.integers(0, 1000))
def test_two_heads_sharing_w(d: int, seed: int) -> None:
    # v1 = e_1, v2 = (2, 1, ..., 1): never parallel for d > 1, never cancelling.
    Wd = [[(i * 3 + j * 5 + seed) % 5 - 2 for j in range(d)] for i in range(d)]
    m = MultiHeadAttention([(Wd, [1] + [0] * (d - 1)), (Wd, [2] + [1] * (d - 1))])
    r = local_dimension(m, arithmetic="certified", seed=seed)
    assert r.dimension == d and r.kernel_dimension == 2 * d


def test_the_certified_rank_meets_the_exact_one_where_greedy_pivots_did_not() -> None:
    # Found by Hypothesis (d = 2, seed = 87): the greedy float rank test chose a nearly
    # dependent row and certified a minor of size 1 only (rank_lower 1, dimension None);
    # QR pivots certify the full rank 8, as the exact rank says.
    Wd = [[0, 0], [-2, -2]]
    m = MultiHeadAttention([(Wd, [1, 0]), (Wd, [2, 1])])
    certified = local_dimension(m, arithmetic="certified", seed=87)
    exact = local_dimension(m, arithmetic="exact", seed=87)
    assert certified.rank_lower == certified.rank_upper == exact.rank_lower == 8
    assert certified.dimension == 2


@given(d=st.integers(1, 3), seed=st.integers(0, 1000))
def test_dead_head_fibre_is_d_squared(d: int, seed: int) -> None:
    Wd = [[(i + 2 * j + seed) % 3 for j in range(d)] for i in range(d)]
    r = local_dimension(MultiHeadAttention([(Wd, [0] * d)]), arithmetic="certified", seed=seed)
    assert r.dimension == d * d


def _exact_product(model: MultiHeadAttention, vec: list[Fraction]) -> list[flint.fmpq]:
    J = jacobian(model, generic_sequences(model.d, 12, 0), z0=Fraction(7, 3))
    col = flint.fmpq_mat(len(vec), 1, [flint.fmpq(q.numerator, q.denominator) for q in vec])
    return (J * col).entries()


def test_symmetry_vectors_are_exactly_null() -> None:
    m = MultiHeadAttention([(W, [1, 2]), (W, [-1, 1]), (W2, [0, 0])])
    fibre, collide, notes = symmetry_null_vectors(m)
    assert len(fibre) == 2 + 4 and len(collide) == 2 and len(notes) == 3
    for vec in fibre + collide:
        assert all(x == 0 for x in _exact_product(m, vec))


def test_a_wrong_null_vector_is_not_null() -> None:
    # The deliberately wrong variant: W_a += v_a w^T (instead of v_b w^T) is not null.
    m = MultiHeadAttention([(W, [1, 2]), (W, [-1, 1])])
    _, collide, _ = symmetry_null_vectors(m)
    wrong = list(collide[0])
    wrong[0], wrong[2] = Fraction(1), Fraction(2)  # W_1[:, 0] += v_1 instead of v_2
    assert any(x != 0 for x in _exact_product(m, wrong))


def test_too_few_sequences_leave_the_brackets_apart_or_low() -> None:
    # With 3 sequences the rank is at most 3: the upper bound says so honestly.
    r = local_dimension(MultiHeadAttention([(W, [1, 2])]), sequences=3)
    assert r.rank_upper == 3 and r.rank_lower <= 3


def test_bad_arguments() -> None:
    m = MultiHeadAttention([(W, [1, 2])])
    with pytest.raises(InvalidArgument, match="arithmetic"):
        local_dimension(m, arithmetic="float")
    with pytest.raises(InvalidArgument, match="sequences"):
        local_dimension(m, sequences=0)
    with pytest.raises(InvalidArgument, match="model"):
        local_dimension("m")  # type: ignore[arg-type]


def test_float_parameters_need_certified() -> None:
    m = MultiHeadAttention([([[0.1, 0.3], [0.7, -0.2]], [0.5, 0.25])])
    with pytest.raises(InvalidArgument, match="certified"):
        local_dimension(m, arithmetic="exact")
    r = local_dimension(m, arithmetic="certified")
    assert r.dimension == 0 and r.rank == 6


def test_affine_model_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="affine"):
        local_dimension(MultiHeadAttention([([[1]], [1], [1])]))
