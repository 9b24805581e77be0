"""Scale, session 4: the fast certified box (verified_attn.boxes) and the skeleton at d = 2."""

from __future__ import annotations

from fractions import Fraction

import flint
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import verified_attn.boxes as boxes
from verified_attn.arithmetic import get_arithmetic
from verified_attn.boxes import FastCertifiedHead
from verified_attn.errors import InvalidArgument
from verified_attn.low_rank import learn_low_rank
from verified_attn.low_rank.claims import random_low_rank_head
from verified_attn.models import SingleHeadAttention, as_rational_sequence
from verified_attn.oracle import Oracle


def _same_ball(a: flint.arb, b: flint.arb) -> bool:
    return bool(a.mid() == b.mid() and a.rad() == b.rad())


def _truth(W: list[list[Fraction]], v: list[Fraction], X: list[list[Fraction]]) -> tuple:
    """Scores x_i^T W x_N and values x_i^T v with Fractions (independent of flint/numpy)."""
    d, last = len(v), X[-1]
    Wx = [sum((W[j][k] * last[k] for k in range(d)), Fraction(0)) for j in range(d)]
    s = [sum((x[j] * Wx[j] for j in range(d)), Fraction(0)) for x in X]
    p = [sum((x[j] * v[j] for j in range(d)), Fraction(0)) for x in X]
    return s, p


def _fractions(xs: list) -> list[Fraction]:
    return [Fraction(int(q.p), int(q.q)) for q in xs]


rationals = st.fractions(min_value=-4, max_value=4, max_denominator=12)


@st.composite
def heads_and_queries(draw: st.DrawFn) -> tuple:
    d = draw(st.integers(1, 4))
    W = [[draw(rationals) for _ in range(d)] for _ in range(d)]
    v = [draw(rationals) for _ in range(d)]
    n = draw(st.integers(1, 4))
    # Entries of very different scales too: numerators past 2^53 take the exact fallback.
    entry = st.one_of(rationals, st.builds(lambda j, e: Fraction(j, 2**e), st.integers(-9, 9),
                                           st.integers(0, 70)))
    X = [[draw(entry) for _ in range(d)] for _ in range(n)]
    return W, v, X


@given(heads_and_queries(), st.sampled_from([64, 256]))
def test_fast_box_gives_the_exact_heads_balls_and_exact_scores(case: tuple, bits: int) -> None:
    W, v, X = case
    head = SingleHeadAttention(W, v)
    box = FastCertifiedHead(head)
    Xq = as_rational_sequence(X, len(v))
    s, p = box.scores_and_values(Xq)
    assert (_fractions(s), _fractions(p)) == _truth(W, v, X)  # exact, against Fractions
    arith = get_arithmetic("certified", bits)
    with arith.context():
        assert _same_ball(box.evaluate_rational(Xq, arith), head.evaluate_rational(Xq, arith))
    assert box.fast_queries + box.exact_queries == 2  # scores_and_values, evaluate_rational


def _adversarial() -> tuple[SingleHeadAttention, flint.fmpq_mat, list[Fraction]]:
    """W_num = [[2^52, 2^52 + 1], [0, 0]] over 2^52, x_N = (1, 1): W_num x_N = 2^53 + 1,
    which float64 rounds to 2^53. Every entry is below 2^53; only the sum is not."""
    W = [[Fraction(1), Fraction(2**52 + 1, 2**52)], [Fraction(0), Fraction(0)]]
    v = [Fraction(1), Fraction(-1)]
    X = [[Fraction(0), Fraction(1)], [Fraction(1), Fraction(1)]]
    return SingleHeadAttention(W, v), as_rational_sequence(X, 2), _truth(W, v, X)[0]


class _UncheckedBox(FastCertifiedHead):
    """The wrong variant: trusts float64 products without the proof that they are exact."""

    def _float_products(self, num: flint.fmpz_mat) -> tuple[list[int], list[int]] | None:
        assert self._W_float is not None and self._v_float is not None
        F = np.array([int(x) for x in num.entries()], dtype=np.float64).reshape(num.nrows(), -1)
        y = self._W_float @ F[-1]
        return [int(x) for x in F @ y], [int(x) for x in F @ self._v_float]


def _balls(box: FastCertifiedHead, head: SingleHeadAttention, Xq: flint.fmpq_mat) -> tuple:
    """The box's and the exact head's 256-bit balls for the query Xq."""
    arith = get_arithmetic("certified", 256)
    with arith.context():
        return box.evaluate_rational(Xq, arith), head.evaluate_rational(Xq, arith)


def test_fast_box_falls_back_where_float64_would_round() -> None:
    head, Xq, true_scores = _adversarial()
    box = FastCertifiedHead(head)
    right, exact = _balls(box, head, Xq)
    assert box.exact_queries == 1 and box.fast_queries == 0
    assert _fractions(box.scores_and_values(Xq)[0]) == true_scores
    assert _same_ball(right, exact)


def test_fast_box_without_its_exactness_check_is_wrong_on_the_adversarial_instance() -> None:
    # The check can fail: without it the score is off by 2^-52 and the 256-bit ball misses
    # the true value (it does not even overlap the exact head's ball, which contains it).
    head, Xq, true_scores = _adversarial()
    wrong = _UncheckedBox(head)
    bad, exact = _balls(wrong, head, Xq)
    assert _fractions(wrong.scores_and_values(Xq)[0]) != true_scores
    assert not bad.overlaps(exact)


def test_fast_box_bound_is_strict_at_two_to_the_53(monkeypatch: pytest.MonkeyPatch) -> None:
    # With the limit one step too generous (2^54), the adversarial sum 2^53 + 1 passes the
    # check and is rounded: the strict bound 2^53 is what makes the float path exact.
    head, Xq, true_scores = _adversarial()
    monkeypatch.setattr(boxes, "_EXACT", 2**54)
    assert _fractions(FastCertifiedHead(head).scores_and_values(Xq)[0]) != true_scores


def test_fast_box_learns_as_the_exact_head_does() -> None:
    # Same balls, so the same queries, phases, rescales and learned balls.
    model = random_low_rank_head(24, 3, 1, den=3)
    a = learn_low_rank(Oracle(model, "certified", precision=128))
    box = FastCertifiedHead(model)
    b = learn_low_rank(Oracle(box, "certified", precision=128))
    assert a.queries_by_phase == b.queries_by_phase and a.rank == b.rank == 3
    assert a.exact and b.exact and a.W == b.W == model.W
    assert box.fast_queries == a.queries + a.verification_queries


def test_fast_box_delegates_affine_heads_and_other_arithmetics() -> None:
    head = SingleHeadAttention([[1, 2], [3, 4]], [1, -1], c=[1, 0], beta=Fraction(1, 3))
    box = FastCertifiedHead(head)
    Xq = as_rational_sequence([[1, 0], [Fraction(1, 3), 2]], 2)
    cert, exact = get_arithmetic("certified", 128), get_arithmetic("exact")
    with cert.context():
        assert _same_ball(box.evaluate_rational(Xq, cert), head.evaluate_rational(Xq, cert))
    assert box.evaluate_rational(Xq, exact) == head.evaluate_rational(Xq, exact)
    Xs = np.array([[[1.0, 0.5], [0.25, -1.0]]])
    assert box.evaluate_batch(Xs).tolist() == head.evaluate_batch(Xs).tolist()
    assert box.fast_queries == box.exact_queries == 0


def test_fast_box_bad_input() -> None:
    with pytest.raises(InvalidArgument, match="model"):
        FastCertifiedHead([[1, 0], [0, 1]])  # type: ignore[arg-type]
    box = FastCertifiedHead(SingleHeadAttention([[1, 0], [0, 1]], [1, 1]))
    with pytest.raises(InvalidArgument, match="Xq"):
        box.scores_and_values(flint.fmpq_mat(1, 3, [1, 2, 3]))


# The skeleton at d = 2 with a rank-0 test vector in W's left null space. With seed 0 and
# v = (1, 2) the first test vector is u = (91, -1886) / 2^12; W = k q^T with k = (-1886, -91)
# (so u^T k = 0) makes the test answer u^T W b = 0 for every b: one sample says "W = 0".
LEFT_NULL_W = [[-1886, -1886], [-91, -91]]
LEFT_NULL_V = [1, 2]


def test_left_null_instance_really_has_the_first_test_vector_in_its_left_null_space(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import verified_attn.low_rank.skeleton as skeleton

    drawn: list[np.ndarray] = []
    draw = skeleton._draw_test_vector
    def spy(*args: object) -> np.ndarray:
        drawn.append(draw(*args))
        return drawn[-1]

    monkeypatch.setattr(skeleton, "_draw_test_vector", spy)
    learn_low_rank(Oracle(SingleHeadAttention(LEFT_NULL_W, LEFT_NULL_V), "exact"), seed=0)
    assert drawn[0].tolist() == [91 / 4096, -1886 / 4096]
    assert (drawn[0] @ np.array(LEFT_NULL_W)).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("arith", ["exact", "certified", "float"])
def test_skeleton_rank_check_learns_the_left_null_instance(arith: str) -> None:
    import verified_attn as va

    model = SingleHeadAttention(LEFT_NULL_W, LEFT_NULL_V)
    rec = learn_low_rank(Oracle(model, arith), seed=0)
    assert rec.rank == 1 and rec.verified
    # The check is verification: the learning count is still the bound (plus re-asks).
    assert rec.queries - rec.queries_by_phase.get("rescale", 0) == rec.bound == 6
    assert rec.queries_by_phase["rank-check"] == 1 and "rank-check" in rec.verification_phases
    if arith == "float":
        W = model.float_parameters()["W"]
        assert np.abs(np.asarray(rec.W, dtype=np.float64) - W).max() <= 1e-9 * np.abs(W).max()
    else:
        assert rec.exact and rec.W == model.W
    assert va.verify_certificate(rec.certificate()).ok


def test_skeleton_rank_zero_is_checked_once_more_and_still_found() -> None:
    # W = 0: the learning count stays d + 1 (golden); the check adds one verification query.
    model = SingleHeadAttention([[0, 0], [0, 0]], LEFT_NULL_V)
    rec = learn_low_rank(Oracle(model, "exact"), seed=0)
    assert rec.rank == 0 and rec.W == model.W
    assert rec.queries == 2 + 1 and rec.verification_queries == 8 + 1


def test_certificate_refuses_a_rank_check_that_disagrees() -> None:
    # A rank-check probe is a check of the claimed W, never an equation: an answer that
    # disagrees with the claim is refused (the checker does not just count it).
    import json

    import verified_attn as va
    from verified_attn.errors import CertificateError

    rec = learn_low_rank(Oracle(SingleHeadAttention(LEFT_NULL_W, LEFT_NULL_V), "exact"), seed=0)
    data = json.loads(json.dumps(rec.certificate()))
    probes = data["answers"]["probes"]
    i = next(j for j, p in enumerate(probes) if p["phase"] == "rank-check")
    first = next(p for p in probes if p["phase"] == "rank")
    assert va.verify_certificate(data).ok  # untampered
    # The first test's answer (u^T W b = 0 for its u) on the check's probe (another u).
    probes[i]["answer"] = first["answer"]
    with pytest.raises(CertificateError, match=rf"answers.probes\[{i}\]"):
        va.verify_certificate(data)


# Reused batch buffers (oracle.Scratch) and the compact transcript copy.


def test_scratch_reuses_a_buffer_only_when_no_one_holds_it() -> None:
    from verified_attn.oracle import Scratch

    def address(x: np.ndarray) -> int:
        return int(x.__array_interface__["data"][0])

    scratch = Scratch()
    a = scratch.take((4, 3))
    first = address(a)  # an int: holds no reference to the buffer
    del a
    b = scratch.take((2, 3))
    assert address(b) == first  # free again: reused
    view = b[1:]
    del b
    c = scratch.take((2, 3))  # a view of the last one is still held: a fresh buffer
    assert address(c) != first and not np.shares_memory(c, view)
    assert scratch.take((10, 3)).size == 30  # larger than the buffer: grown


def _keeping_box(W: np.ndarray, v: np.ndarray, kept: list, copies: list):  # type: ignore
    def batch_fn(Xs: np.ndarray) -> np.ndarray:
        kept.append(Xs)  # a box that keeps what it was given (a logger, a cache)
        copies.append(Xs.copy())
        s = np.einsum("bnd,bd->bn", Xs, Xs[:, -1, :] @ W.T)
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return (e * (Xs @ v)).sum(axis=1) / e.sum(axis=1)

    return batch_fn


@pytest.mark.parametrize("record", [None, False])
def test_a_box_that_keeps_its_batches_finds_them_unchanged(record: bool | None) -> None:
    # The skeleton builds its batches in a reused buffer: a batch the box kept must never be
    # overwritten by a later one (the buffer is reused only when no one holds it).
    model = random_low_rank_head(10, 2, 3, den=4)
    W, v = model.float_parameters()["W"], model.float_parameters()["v"]
    kept: list[np.ndarray] = []
    copies: list[np.ndarray] = []
    oracle = Oracle.from_callable(
        lambda X: 0.0, 10, batch_fn=_keeping_box(W, v, kept, copies), record=record,
        model_class="single-head",
    )
    rec = learn_low_rank(oracle)
    assert rec.rank == 2 and np.abs(np.asarray(rec.W, dtype=float) - W).max() < 1e-9
    assert len(kept) > 5
    assert all(np.array_equal(k, c) for k, c in zip(kept, copies, strict=True))
    if record is None:  # and the transcript holds exactly what the box was asked
        asked = [X for batch in copies for X in batch]
        entries = oracle.transcript
        assert len(entries) == len(asked)
        assert all(e.raw.dtype == np.float64 and np.array_equal(e.raw, X)
                   for e, X in zip(entries, asked, strict=True))


def test_transcript_copy_is_float32_only_when_that_is_exact() -> None:
    def vandal(Xs: np.ndarray) -> np.ndarray:
        out = Xs[:, -1, 0].copy()
        Xs[...] = 7.0  # writes into its input: the record must not change
        return out

    oracle = Oracle.from_callable(lambda X: 0.0, 2, batch_fn=vandal, record=True)
    dyadic = np.array([[[0.5, -3.0], [2.0**-20, 1.0]]])
    general = np.array([[[0.1, 1e300], [2.0**-149 / 3, 1.0]]])  # not float32-exact
    oracle.query_many(dyadic.copy(), owned=True)
    oracle.query_many(general.copy(), owned=True)
    kinds = [batch.dtype for _, batch, _ in oracle._batches]
    assert kinds == [np.float32, np.float64]
    raws = [e.raw for e in oracle.transcript]
    assert all(r.dtype == np.float64 for r in raws)
    assert np.array_equal(raws[0], dyadic[0]) and np.array_equal(raws[1], general[0])
