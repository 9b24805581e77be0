"""The large-d fast paths (issue 16) compute exactly what the general paths compute.

Timings live in benchmarks/scale.py; these tests pin the *values* of the fast paths
against the slow, obviously-correct routes they replace.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import verified_attn as va
from verified_attn.arithmetic import get_arithmetic
from verified_attn.design import default_design
from verified_attn.errors import OracleError
from verified_attn.probing import apply_exact


@pytest.mark.parametrize("seed", range(6))
def test_structured_solve_is_the_dense_exact_inverse_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 40))
    arith = get_arithmetic("float")
    v = rng.normal(size=d)
    v[rng.random(d) < 0.5] *= 1e-3  # many small coordinates: many mixed columns
    design = default_design(arith, v, d, affine=False)
    M = rng.normal(size=(d, d))
    fast = design.solve_float(M)
    dense = apply_exact(arith, design.U_flint.transpose().inv(), M)
    assert fast is not None
    assert np.array_equal(fast, dense)


def test_a_user_design_has_no_structured_solve() -> None:
    model = va.SingleHeadAttention([[1, 2], [0, -1]], [1, 1])
    oracle = va.Oracle(model, "float")
    rec = va.learn_single_head(oracle, design=[[2, 1], [1, 1]])
    assert np.allclose(np.asarray(rec.W, dtype=float), [[1, 2], [0, -1]], atol=1e-12)


def test_set_scale_keeps_the_vectorised_probes_in_step() -> None:
    arith = get_arithmetic("float")
    design = default_design(arith, np.array([1.0, 0.01, 2.0]), 3, affine=False)
    design.set_scale(2, 1, Fraction(1, 16))
    batch = design.w_queries(2)
    assert isinstance(batch, np.ndarray)
    for j in range(3):
        assert np.array_equal(batch[j], design.w_query(j, 2))
    assert design.scales_float()[2, 1] == 1 / 16
    # A scale that is not a power of two leaves the float fast path (object queries).
    design.set_scale(0, 0, Fraction(1, 3))
    assert isinstance(design.w_queries(0), list)


@pytest.mark.parametrize(
    "X",
    [
        [[1.0, 0.0], [0.0, 1.0]],
        [[1 + 2.0**-8, -3.0], [0.5, 1.0]],
        [[2.0**-60, 1.0]],  # beyond the one-pass shifts: the general conversion
        [[0.1, 1e300]],
    ],
)
def test_certified_queries_are_converted_exactly(X: list[list[float]]) -> None:
    model = va.SingleHeadAttention([[1, 0], [0, 1]], [1, 2])
    oracle = va.Oracle(model, "certified", precision=64, record=True)
    oracle.query(np.array(X))
    entry = oracle.transcript[0]
    assert entry.sequence == tuple(tuple(Fraction(x) for x in row) for row in X)


def _head(d: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([7, d])
    return rng.normal(0, 1 / np.sqrt(d), (d, d)), rng.normal(0, 1, d)


def _box(W: np.ndarray, v: np.ndarray, seen: list[np.ndarray], vandal: bool):  # type: ignore[no-untyped-def]
    def batch_fn(Xs: np.ndarray) -> np.ndarray:
        seen.append(Xs)
        s = np.einsum("bnd,bd->bn", Xs, Xs[:, -1, :] @ W.T)
        e = np.exp(s - s.max(axis=1, keepdims=True))
        out = (e * (Xs @ v)).sum(axis=1) / e.sum(axis=1)
        if vandal:
            Xs[...] = 0.0  # a box that writes into its input
        return out

    return batch_fn


@pytest.mark.parametrize("record", [None, True, False])
def test_a_box_writing_into_its_input_changes_neither_result_nor_transcript(
    record: bool | None,
) -> None:
    d = 6
    W, v = _head(d)
    seen: list[np.ndarray] = []
    batch_fn = _box(W, v, seen, vandal=True)
    oracle = va.Oracle.from_callable(
        lambda X: float(batch_fn(X[None].copy())[0]),
        d,
        batch_fn=batch_fn,
        record=record,
        model_class="single-head",
    )
    rec = va.learn_single_head(oracle)
    assert rec.verified
    assert np.max(np.abs(np.asarray(rec.W, dtype=float) - W)) < 1e-12
    if record is not False:
        # Every recorded W probe is still [e_j + t u_k; e_j]: nonzero bottom row e_j.
        probes = [e.raw for e in oracle.transcript if e.phase == "W"]
        assert len(probes) == d * d
        assert all(np.count_nonzero(np.asarray(X)[1]) == 1 for X in probes)


def test_owned_unrecorded_batches_reach_the_box_without_a_copy() -> None:
    d = 4
    W, v = _head(d)
    seen: list[np.ndarray] = []
    oracle = va.Oracle.from_callable(
        lambda X: 0.0, d, batch_fn=_box(W, v, seen, vandal=False), record=False
    )
    Xs = np.ones((3, 2, d))
    oracle.query_many(Xs, owned=True)
    assert np.shares_memory(seen[-1], Xs)
    oracle.query_many(Xs)  # not owned: the box gets a copy
    assert not np.shares_memory(seen[-1], Xs) and np.array_equal(seen[-1], Xs)


def test_a_non_finite_answer_in_a_batch_is_still_an_oracle_error() -> None:
    def batch_fn(Xs: np.ndarray) -> np.ndarray:
        out = np.ones(Xs.shape[0])
        out[1] = np.nan
        return out

    oracle = va.Oracle.from_callable(lambda X: 1.0, 2, batch_fn=batch_fn)
    with pytest.raises(OracleError, match="not finite"):
        oracle.query_many(np.ones((3, 1, 2)))
