"""Tests written to kill mutants that survived benchmarks/mutation.py (see its JSON)."""

from __future__ import annotations

import sympy

import verified_attn as va
from verified_attn.arithmetic import exact_equal


def test_exact_equal_decides_equality_that_needs_cancellation() -> None:
    # Not structurally equal, equal after together/cancel (arithmetic.exact_equal's 2nd step).
    assert exact_equal((sympy.E + 1) ** 2, sympy.E**2 + 2 * sympy.E + 1)
    assert exact_equal(1 / (sympy.E + 1) + 1 / (sympy.E - 1), 2 * sympy.E / (sympy.E**2 - 1))
    assert not exact_equal((sympy.E + 1) ** 2, sympy.E**2 + 2 * sympy.E)


def test_oracle_model_class_of_plain_and_affine_heads() -> None:
    plain = va.Oracle(va.SingleHeadAttention([[1]], [2]), "exact")
    affine = va.Oracle(va.SingleHeadAttention([[1]], [2], c=[1], beta=3), "exact")
    assert plain.model_class == "single-head"
    assert affine.model_class == "single-head-affine"


def test_a_float_batch_goes_to_the_right_evaluator() -> None:
    import numpy as np

    head = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 3])
    Xs = np.random.default_rng(0).integers(-3, 4, (5, 3, 2)) / 2
    want = [head(X) for X in Xs]
    model_oracle = va.Oracle(head, "float")
    batch_oracle = va.Oracle.from_callable(head, d=2, batch_fn=head.evaluate_batch)
    plain_oracle = va.Oracle.from_callable(head, d=2)
    for oracle in (model_oracle, batch_oracle, plain_oracle):
        got = oracle.query_many(Xs)
        assert len(got) == 5 and np.allclose(got, want, rtol=1e-12, atol=0)
        assert oracle.queries == 5


def test_a_raised_precision_is_dropped_for_an_oracle_that_cannot_raise_it() -> None:
    from verified_attn.verification import ask_fresh

    head = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 3])
    for oracle in (va.Oracle(head, "float"), va.Oracle.from_callable(head, d=2)):
        record = ask_fresh(oracle, count=3, seed=0, precision=1024)
        assert record.precision is None and len(record.answers) == 3
    record = ask_fresh(va.Oracle(head, "certified"), count=2, seed=0, precision=1024)
    assert record.precision == 1024
