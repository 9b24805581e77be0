"""The Oracle: counts by phase on the object, budget before the query, transcripts, replay."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import flint
import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import verified_attn as va
from verified_attn import oracle as oracle_module
from verified_attn import oracle_batches
from verified_attn.arithmetic import arb_bounds
from verified_attn.errors import InvalidArgument, OracleError, QueryBudgetExceeded

MODEL = va.SingleHeadAttention([[1, -2, 0], [3, 0, 1], [Fraction(1, 2), 1, -1]], [2, 0, -1])
QUERIES = [
    [[1, 0, 0]],
    [[1, 2, 0], [0, 1, 0]],
    [[Fraction(1, 3), 0, 1], [1, 1, 1], [0, -1, Fraction(5, 2)]],
]


def test_counts_by_phase_and_tokens() -> None:
    oracle = va.Oracle(MODEL, "exact")
    with oracle.phase("a"):
        oracle.query(QUERIES[0])
        with oracle.phase("b"):
            oracle.query_many(QUERIES[1:])
        oracle.query(QUERIES[2])
    oracle.query(QUERIES[1])
    assert oracle.queries == 5
    assert oracle.queries_by_phase == {"a": 2, "b": 2, "other": 1}
    assert oracle.tokens_sent == 1 + (2 + 3) + 3 + 2
    assert oracle.max_length == 3
    assert [e.phase for e in oracle.transcript] == ["a", "b", "b", "a", "other"]


def test_phase_is_restored_after_an_error() -> None:
    oracle = va.Oracle(MODEL, "float")
    with pytest.raises(InvalidArgument), oracle.phase("x"):
        oracle.query([[1, 2]])  # wrong d
    oracle.query(QUERIES[0])
    assert oracle.queries_by_phase == {"other": 1}
    with pytest.raises(InvalidArgument, match="phase name"):
        with oracle.phase(""):
            pass


@pytest.mark.parametrize("arithmetic", ["exact", "certified", "float"])
def test_budget_raises_before_the_query(arithmetic: str) -> None:
    oracle = va.Oracle(MODEL, arithmetic, budget=3)
    oracle.query(QUERIES[0])
    with pytest.raises(QueryBudgetExceeded) as info:
        oracle.query_many(QUERIES)  # 3 more would make 4 > 3: nothing is asked
    assert (info.value.budget, info.value.used, info.value.requested) == (3, 1, 3)
    assert oracle.queries == 1 and oracle.tokens_sent == 1 and len(oracle.transcript) == 1
    oracle.query_many(QUERIES[:2])
    assert oracle.remaining == 0
    with pytest.raises(QueryBudgetExceeded):
        oracle.query(QUERIES[0])
    assert oracle.queries == 3


def test_budget_zero_and_batch_array() -> None:
    oracle = va.Oracle(MODEL, "float", budget=0)
    with pytest.raises(QueryBudgetExceeded):
        oracle.query_many(np.zeros((2, 1, 3)))
    assert oracle.queries == 0
    assert oracle.query_many([]) == [] and oracle.queries == 0


def test_a_callable_box_is_not_called_beyond_the_budget() -> None:
    calls: list[int] = []

    def box(X: np.ndarray) -> float:
        calls.append(X.shape[0])
        return float(X.sum())

    oracle = va.Oracle.from_callable(box, d=2, budget=2)
    with pytest.raises(QueryBudgetExceeded):
        oracle.query_many([[[1, 1]]] * 3)
    assert calls == []
    assert oracle.query([[1, 2]]) == 3.0 and calls == [1]


@pytest.mark.parametrize("arithmetic", ["exact", "certified", "float"])
def test_transcript_replay_gives_the_same_answers(arithmetic: str, tmp_path: Path) -> None:
    oracle = va.Oracle(MODEL, arithmetic, record=True)
    with oracle.phase("p"):
        answers = oracle.query_many(QUERIES)
    path = tmp_path / "t.json"
    oracle.save_transcript(path)
    data = json.loads(path.read_text())
    assert data["arithmetic"] == arithmetic and len(data["entries"]) == 3
    replay = va.Oracle.replay(path)
    assert replay.arithmetic.name == arithmetic and replay.d == 3
    again = replay.query_many(QUERIES[::-1])[::-1]
    for a, b in zip(answers, again, strict=True):
        if arithmetic == "certified":
            # Same midpoint; the radius may be rounded up by one 30-bit ulp on loading.
            assert a.mid() == b.mid() and b.contains(a)
            assert b.rad() <= a.rad() * (1 + flint.arb(2) ** -28)
        elif arithmetic == "exact":
            assert sympy.sympify(a) == sympy.sympify(b)
        else:
            assert a == b and np.float64(a).tobytes() == np.float64(b).tobytes()
    assert replay.queries == 3
    with pytest.raises(OracleError, match="not in the replayed transcript"):
        replay.query([[1, 1, 1]])


def test_a_learner_runs_on_a_replayed_transcript(tmp_path: Path) -> None:
    oracle = va.Oracle(MODEL, "certified", record=True)
    va.learn_single_head(oracle)
    oracle.save_transcript(tmp_path / "run.json")
    replay = va.Oracle.replay(tmp_path / "run.json", budget=20)
    rec = va.learn_single_head(replay)
    assert rec.W == MODEL.W and rec.v == MODEL.v and replay.queries == 20
    with pytest.raises(OracleError):  # a different seed asks verification queries not on file
        va.learn_single_head(va.Oracle.replay(tmp_path / "run.json"), seed=5)


def test_record_false_keeps_no_transcript(tmp_path: Path) -> None:
    oracle = va.Oracle(MODEL, "float", record=False)
    oracle.query_many(QUERIES)
    assert oracle.transcript == [] and oracle.transcript_complete is False
    assert oracle.queries == 3
    with pytest.raises(InvalidArgument, match="record=True"):
        oracle.save_transcript(tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_record_none_stops_at_the_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oracle_module, "_AUTO_RECORD_NUMBERS", 10)
    oracle = va.Oracle(MODEL, "float")  # record=None: the default
    oracle.query_many(QUERIES[:2])  # (1 + 2) tokens * 3 = 9 numbers: kept
    assert len(oracle.transcript) == 2 and oracle.transcript_complete
    oracle.query(QUERIES[2])  # 9 more would pass 10: dropped, and said so
    assert len(oracle.transcript) == 2 and not oracle.transcript_complete
    assert oracle.queries == 3
    recorded = va.Oracle(MODEL, "float", record=True)
    recorded.query_many(QUERIES * 2)
    assert len(recorded.transcript) == 6 and recorded.transcript_complete


@given(
    n=st.integers(1, 4),
    b=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_batched_float_queries_equal_one_by_one(n: int, b: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    Xs = rng.integers(-8, 9, size=(b, n, 3)) / 4
    batch = va.Oracle(MODEL, "float").query_many(Xs)
    listed = va.Oracle(MODEL, "float").query_many(list(Xs))
    single = [va.Oracle(MODEL, "float").query(X) for X in Xs]
    exact = [float(MODEL.evaluate(X, "certified").mid()) for X in Xs]
    scale = 3 * 2  # sum |v| * max |x|
    for a, c, s, e in zip(batch, listed, single, exact, strict=True):
        assert a == c
        assert abs(a - s) <= 1e-14 * scale and abs(a - e) <= 1e-14 * scale


def test_mixed_lengths_keep_their_order() -> None:
    oracle = va.Oracle(MODEL, "float")
    mixed = [QUERIES[2], QUERIES[0], QUERIES[1], QUERIES[0]]
    got = oracle.query_many(mixed)
    assert got == [MODEL(X) for X in mixed]


def test_callable_with_batch_fn_matches_fn() -> None:
    oracle = va.Oracle.from_callable(MODEL, d=3, batch_fn=MODEL.evaluate_batch)
    plain = va.Oracle.from_callable(MODEL, d=3)
    Xs = [QUERIES[1], QUERIES[0], QUERIES[1]]
    assert np.allclose(oracle.query_many(Xs), plain.query_many(Xs), rtol=1e-15, atol=1e-15)
    assert oracle.queries == plain.queries == 3


def test_callable_receives_a_float_copy() -> None:
    seen: list[Any] = []

    def box(X: np.ndarray) -> float:
        seen.append(X)
        X[:] = 99.0  # a misbehaving box must not change our record
        return 1.0

    oracle = va.Oracle.from_callable(box, d=2, record=True)
    oracle.query([[Fraction(1, 2), 1]])
    assert seen[0].dtype == np.float64
    assert oracle.transcript[0].sequence == ((Fraction(1, 2), Fraction(1)),)


# ---------------------------------------------------------------------------------------
# Bad inputs.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arithmetic", ["exact", "certified", "float"])
@pytest.mark.parametrize(
    "X",
    [
        [[1, 2]],
        [[1, 2, 3, 4]],
        [],
        np.zeros((0, 3)),
        [[1, None, 0]],
        [[1, "a", 0]],
        [[1, 1j, 0]],
        [[True, 0, 0]],
        [[np.nan, 0, 0]],
        np.array([[np.inf, 0, 0]]),
        [[1, 2, 3], [4]],
        "abc",
    ],
    ids=lambda X: repr(X)[:20],
)
def test_bad_queries_cost_nothing(arithmetic: str, X: Any) -> None:
    oracle = va.Oracle(MODEL, arithmetic)
    with pytest.raises(InvalidArgument, match="X"):
        oracle.query(X)
    with pytest.raises(InvalidArgument):
        oracle.query_many([QUERIES[0], X])  # validated as a whole: nothing is asked
    assert oracle.queries == 0 and oracle.tokens_sent == 0


@pytest.mark.parametrize("arithmetic", ["exact", "certified", "float"])
def test_query_many_given_one_2d_query(arithmetic: str) -> None:
    """A single (N, d) query passed to query_many is an error naming Xs, not N queries."""
    oracle = va.Oracle(MODEL, arithmetic)
    with pytest.raises(InvalidArgument, match="Xs"):
        oracle.query_many(np.array([[1.0, 0, 0], [0, 1, 0]]))
    with pytest.raises(InvalidArgument):
        oracle.query_many([[1, 0, 0], [0, 1, 0]])
    with pytest.raises(InvalidArgument, match="Xs"):
        oracle.query_many(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        oracle.query_many(np.zeros((2, 1, 4)))  # wrong d in a batch array
    assert oracle.queries == 0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"arithmetic": "fuzzy"}, "arithmetic"),
        ({"arithmetic": None}, "arithmetic"),
        ({"arithmetic": "certified", "precision": 8}, "precision"),
        ({"arithmetic": "certified", "precision": 64.0}, "precision"),
        ({"arithmetic": "float", "precision": 64}, "precision"),
        ({"budget": -1}, "budget"),
        ({"budget": 1.5}, "budget"),
        ({"budget": True}, "budget"),
        ({"record": 1}, "record"),
        ({"record": "yes"}, "record"),
    ],
)
def test_bad_oracle_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(InvalidArgument, match=name):
        va.Oracle(MODEL, **kwargs)


@pytest.mark.parametrize("model", ["model", None, 3, lambda X: 0.0])
def test_oracle_needs_a_model(model: Any) -> None:
    with pytest.raises(InvalidArgument, match="model must be"):
        va.Oracle(model)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"fn": 3, "d": 2}, "fn"),
        ({"fn": len, "d": 0}, "d"),
        ({"fn": len, "d": 2.0}, "d"),
        ({"fn": len, "d": "2"}, "d"),
        ({"fn": len, "d": 2, "batch_fn": 5}, "batch_fn"),
        ({"fn": len, "d": 2, "budget": -2}, "budget"),
    ],
)
def test_bad_from_callable_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(InvalidArgument, match=name):
        va.Oracle.from_callable(**kwargs)


def test_replay_rejects_a_malformed_transcript(tmp_path: Path) -> None:
    oracle = va.Oracle(MODEL, "exact", record=True)
    oracle.query(QUERIES[0])
    path = tmp_path / "t.json"
    oracle.save_transcript(path)
    data = json.loads(path.read_text())
    data["entries"][0]["answer"] = {"rational": "1/0"}
    path.write_text(json.dumps(data))
    with pytest.raises(va.InvalidArgument, match=r"malformed.*1/0"):
        va.Oracle.replay(path)


@pytest.mark.parametrize(
    "text",
    [None, "", '{"entries": [', '{"format": "other"}', '{"format": "verified-attn-transcript/1"}'],
)
def test_replay_of_a_missing_or_truncated_file_names_it(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "t.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(va.InvalidArgument, match=r"t\.json"):
        va.Oracle.replay(path)


def test_certified_answers_are_balls_at_the_oracle_precision() -> None:
    before = flint.ctx.prec
    oracle = va.Oracle(MODEL, "certified", precision=80)
    ball = oracle.query(QUERIES[1])
    assert isinstance(ball, flint.arb) and flint.ctx.prec == before
    lo, hi = arb_bounds(ball)
    assert 0 < hi - lo < Fraction(1, 2**60)


@pytest.mark.parametrize("as_array", [True, False])
@pytest.mark.parametrize("boxed", [True, False])
def test_float_batches_are_bounded_in_entries(
    monkeypatch: pytest.MonkeyPatch, as_array: bool, boxed: bool
) -> None:
    # A box's temporaries scale with the batch's entries, not its sequence count: long
    # queries are split into smaller batches (order kept, every answer the one-by-one one).
    monkeypatch.setattr(oracle_batches, "_FLOAT_CHUNK_ENTRIES", 60)
    sizes: list[int] = []
    evaluate = MODEL.evaluate_batch

    def batch(Xs: np.ndarray) -> np.ndarray:
        sizes.append(Xs.shape[0] * Xs.shape[1] * Xs.shape[2])
        return evaluate(Xs)

    rng = np.random.default_rng(3)
    long = rng.integers(-4, 5, size=(7, 9, 3)) / 2  # 27 entries each: 2 per batch
    short = rng.integers(-4, 5, size=(5, 2, 3)) / 2  # 6 entries each: 5 per batch
    Xs: Any = long if as_array else [*long, *short, long[0]]
    if boxed:
        oracle = va.Oracle.from_callable(MODEL, d=3, batch_fn=batch)
    else:
        model = va.SingleHeadAttention(MODEL.W, MODEL.v)
        monkeypatch.setattr(model, "evaluate_batch", batch, raising=False)
        oracle = va.Oracle(model, "float")
    got = oracle.query_many(Xs)
    assert sizes and max(sizes) <= 60
    # The array: 7 long queries in 4 batches; the list: its 8 long ones (one length) in 4,
    # its 5 short ones in 1.
    assert len(sizes) == (4 if as_array else 4 + 1)
    want = [float(evaluate(np.asarray(X, dtype=float)[None])[0]) for X in Xs]
    assert got == pytest.approx(want, rel=1e-15, abs=1e-15)
