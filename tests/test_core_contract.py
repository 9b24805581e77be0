"""The core of the result contract: validation, the run bookkeeping, fresh sequences and the
one agreement rule, and the Recovery type. Each check has a deliberately wrong variant."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.arithmetic import get_arithmetic
from verified_attn.errors import InvalidArgument, ModelClassMismatch
from verified_attn.validation import (
    check_bool,
    check_choice,
    check_denominator_bound,
    check_int,
    check_lengths,
    check_oracle,
    check_real,
    check_seed,
    check_verify,
)
from verified_attn.verification import (
    DEFAULT_LENGTHS,
    FLOOR,
    agree,
    float_floor,
    fresh_sequences,
    verify_model,
)

# ---------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 7, np.int64(3), np.uint8(2)])
def test_seeds_accepted(seed: object) -> None:
    assert check_seed(seed) == int(seed)  # type: ignore[call-overload]


@pytest.mark.parametrize("seed", [-1, np.int64(-5), 1.0, "0", True, None, [0]])
def test_seeds_refused_naming_the_argument(seed: object) -> None:
    with pytest.raises(InvalidArgument, match="seed"):
        check_seed(seed)


@pytest.mark.parametrize("verify", [-1, True, 2.0, None])
def test_verify_refused(verify: object) -> None:
    with pytest.raises(InvalidArgument, match="verify"):
        check_verify(verify)


def test_int_bounds_are_inclusive_and_named() -> None:
    assert check_int(5, "d", low=5, high=5) == 5
    with pytest.raises(InvalidArgument, match=r"d must be an int in 1\.\.4, got 5"):
        check_int(5, "d", low=1, high=4)
    with pytest.raises(InvalidArgument, match=r"d must be an int >= 2, got 1"):
        check_int(1, "d", low=2)
    assert check_int(None, "d", allow_none=True) is None
    with pytest.raises(InvalidArgument):
        check_int(None, "d")


def test_bool_choice_real_lengths_denominator() -> None:
    assert check_bool(True, "affine") is True and check_bool(None, "a", allow_none=True) is None
    with pytest.raises(InvalidArgument, match="affine"):
        check_bool(1, "affine")
    assert check_choice("paper", "method", ("paper", "direct")) == "paper"
    with pytest.raises(InvalidArgument, match="method"):
        check_choice("Paper", "method", ("paper", "direct"))
    assert check_real(Fraction(1, 3), "tau", low=0, low_open=True) == Fraction(1, 3)
    for bad in (0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(InvalidArgument, match="tau"):
            check_real(bad, "tau", low=0, low_open=True)
    assert check_lengths(range(1, 4)) == (1, 2, 3)
    for bad_lengths in ((), (0,), (1, 2.0), "12", (10**6,)):
        with pytest.raises(InvalidArgument):
            check_lengths(bad_lengths)
    assert check_denominator_bound(None) is None
    with pytest.raises(InvalidArgument, match="denominator_bound"):
        check_denominator_bound(0)


def test_check_oracle_hints_at_the_wrapper() -> None:
    model = va.SingleHeadAttention([[1]], [1])
    with pytest.raises(InvalidArgument, match=r"va\.Oracle\(model"):
        check_oracle(model)
    with pytest.raises(InvalidArgument, match="from_callable"):
        check_oracle(lambda X: 0.0)
    oracle = va.Oracle(model)
    assert check_oracle(oracle) is oracle


# ---------------------------------------------------------------------------------------
# the run bookkeeping
# ---------------------------------------------------------------------------------------


def test_run_counts_split_by_declared_phase_not_by_name() -> None:
    oracle = va.Oracle(va.SingleHeadAttention([[1]], [1]), "exact")
    oracle.query([[1]])  # before the run: not counted in it
    with oracle.run() as run:
        with oracle.phase("verify"):  # named "verify" but not declared: learning
            oracle.query([[1]])
        with oracle.phase("check", verification=True):
            oracle.query_many([[[1], [2], [3]]])
    c = run.counts
    assert (c.learning, c.verification) == (1, 1)
    assert c.by_phase == {"verify": 1, "check": 1}
    assert c.verification_phases == ("check",)
    assert (c.tokens_sent, c.max_length) == (4, 3)
    assert oracle.queries == 3 and oracle.max_length == 3


def test_run_max_length_is_per_call() -> None:
    oracle = va.Oracle(va.SingleHeadAttention([[1]], [1]), "exact")
    oracle.query([[1], [1], [1], [1]])
    with oracle.run() as run:
        oracle.query([[1]])
    assert run.counts.max_length == 1 and oracle.max_length == 4


def test_in_verification_follows_the_phase_stack() -> None:
    oracle = va.Oracle(va.SingleHeadAttention([[1]], [1]), "exact")
    assert not oracle.in_verification
    with oracle.phase("a", verification=True):
        assert oracle.in_verification and oracle.phase_name == "a"
        with oracle.phase("b"):
            assert not oracle.in_verification
        assert oracle.in_verification
    assert not oracle.in_verification and oracle.phase_name == "other"


# ---------------------------------------------------------------------------------------
# fresh sequences and the agreement rule
# ---------------------------------------------------------------------------------------


def test_fresh_sequences_lengths_entries_and_determinism() -> None:
    seqs = fresh_sequences(4, 16, seed=3)
    # The 7th of each run of 8 is the 8th with its context permuted (permuted_pairs).
    shapes = [(n, 4) for n in DEFAULT_LENGTHS * 2]
    shapes[6] = shapes[14] = (16, 4)
    assert [X.shape for X in seqs] == shapes
    allowed = {k / 8 for k in range(-16, 17) if k}
    assert all(set(np.unique(X)) <= allowed for X in seqs)
    assert all(X[-1, 0] not in (0.0, 1.0) for X in seqs)  # never a probe's last token
    assert len(set(np.concatenate([X.ravel() for X in seqs]))) > 8  # many distinct values
    again = fresh_sequences(4, 16, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(seqs, again, strict=True))
    other = fresh_sequences(4, 16, seed=4)
    assert not all(np.array_equal(a, b) for a, b in zip(seqs, other, strict=True))
    assert [X.shape[0] for X in fresh_sequences(2, 3, 0, lengths=(5,))] == [5, 5, 5]


def test_float_rule_is_relative_to_the_answer() -> None:
    arith = get_arithmetic("float")  # rtol 1e-6
    assert agree(arith, 1e6, 1e6 * (1 + 9e-7))[0]
    assert not agree(arith, 1e6, 1e6 * (1 + 2e-6))[0]
    # Relative to the answer, not to a bound: a tiny answer is held to its own size.
    assert not agree(arith, 1e-3, 1e-3 + 1e-8)[0]
    # ... unless the floor (a fraction of the verification set's median) lifts it.
    assert agree(arith, 1e-3, 1e-3 + 1e-8, floor=1e-1)[0]


def test_float_rule_removes_the_bias() -> None:
    arith = get_arithmetic("float")
    beta = 1e7
    # The head's part is 1; a gap of 1e-3 is 1e-3 relative to it (too much), though only
    # 1e-10 relative to the whole answer: with the bias removed it is refused.
    assert not agree(arith, beta + 1.0, beta + 1.001, bias=beta)[0]
    assert agree(arith, beta + 1.0, beta + 1.001)[0]  # the wrong variant would pass it
    # Rounding of a float64 answer on a large bias is allowed for.
    assert agree(arith, beta + 1.0, beta + 1.0 + 4 * np.spacing(beta), bias=beta)[0]


def test_exact_and_certified_rules() -> None:
    exact = get_arithmetic("exact")
    assert agree(exact, Fraction(1, 3), Fraction(1, 3)) == (True, 0.0)
    assert not agree(exact, Fraction(1, 3), Fraction(1, 3) + Fraction(1, 10**40))[0]
    cert = get_arithmetic("certified")
    import flint

    with cert.context():
        assert agree(cert, flint.arb(1, 1e-10), flint.arb(1 + 1e-11))[0]
        assert not agree(cert, flint.arb(1, 1e-10), flint.arb(1 + 1e-9))[0]


def test_floor_is_a_fraction_of_the_median() -> None:
    assert float_floor([1.0, 2.0, 100.0]) == pytest.approx(FLOOR * 2.0)
    assert float_floor([5.0, 6.0], bias=5.0) == pytest.approx(FLOOR * 0.5)
    assert float_floor([]) == 0.0


@given(st.integers(1, 4), st.integers(0, 12), st.integers(0, 2**31))
def test_verify_model_counts_and_records(d: int, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    model = va.SingleHeadAttention(rng.integers(-3, 4, (d, d)), rng.integers(-3, 4, d))
    oracle = va.Oracle(model, "float")
    with oracle.run() as run:
        record = verify_model(oracle, model, count=count, seed=seed)
    assert run.counts.verification == count == record.count == len(record.answers)
    assert record.lengths == DEFAULT_LENGTHS
    assert record.max_gap == (0.0 if count else None)


def test_verify_model_names_the_witness() -> None:
    truth = va.SingleHeadAttention([[1, 0], [0, 1]], [1, 2])
    wrong = va.SingleHeadAttention([[1, 0], [0, 1]], [1, 2.001])
    oracle = va.Oracle(truth, "float")
    with pytest.raises(ModelClassMismatch, match="fresh sequence of length") as info:
        verify_model(oracle, wrong, count=8, seed=0)
    X = info.value.query
    assert X is not None and float(truth(X)) == info.value.observed


def test_verify_model_sees_what_only_long_sequences_show() -> None:
    """A box equal to the head on sequences of length <= 4 and different beyond."""
    head = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 3])

    def box(X: np.ndarray) -> float:
        return head(X) if X.shape[0] <= 4 else head(X[-4:])  # a window of 4 tokens

    oracle = va.Oracle.from_callable(box, d=2)
    verify_model(oracle, head, count=4, seed=0)  # lengths 1..4: the window is invisible
    with pytest.raises(ModelClassMismatch, match=r"length (6|8|12|16)"):
        verify_model(oracle, head, count=8, seed=0)


# ---------------------------------------------------------------------------------------
# the result type
# ---------------------------------------------------------------------------------------


def test_recovery_contract_on_a_single_head() -> None:
    truth = va.SingleHeadAttention([[1, 2], [-1, 0]], [3, -1])
    oracle = va.Oracle(truth, "exact")
    rec = va.learn_single_head(oracle)
    assert isinstance(rec, va.Recovery)
    assert rec.model.W == truth.W and rec.model.v == truth.v  # a property, not a method
    assert rec.queries + rec.verification_queries == oracle.queries
    assert rec.verification_phases == ("verify",)
    assert rec.verified and rec.verification is not None and rec.verification.count == 8
    text = rec.summary()
    assert "6 learning queries (bound 6" in text and "8 fresh sequences" in text
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["queries"]["learning"] == 6 and data["kind"] == "single-head"
    assert rec._repr_markdown_().startswith("```")


def test_verify_zero_is_not_verified_and_says_so() -> None:
    oracle = va.Oracle(va.SingleHeadAttention([[1]], [2]), "exact")
    rec = va.learn_single_head(oracle, verify=0)
    assert rec.verified is False and rec.verification is None
    assert rec.verification_queries == 0 and oracle.queries == rec.queries == 2
    assert "NOT verified" in rec.summary()
    check = va.verify_certificate(rec.certificate())
    assert "not verified" in str(check)


def test_certificate_without_data_is_our_error(tmp_path: object) -> None:
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1]], [2]), "exact"))
    rec.certificate_data = None
    with pytest.raises(va.CertificateError, match="no certificate"):
        rec.certificate()


def test_user_model_protocol() -> None:
    class Doubled:
        """f(X) = 2 * (the head's answer): a model of the user's own, in every arithmetic."""

        d = 1

        def __init__(self) -> None:
            self.inner = va.SingleHeadAttention([[1]], [1])

        def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
            return 2 * self.inner.evaluate_batch(Xs)

        def evaluate_rational(self, Xq: object, arith: object) -> object:
            return 2 * self.inner.evaluate_rational(Xq, arith)  # type: ignore[arg-type]

    assert isinstance(Doubled(), va.models.BlackBoxModel)
    rec = va.learn_single_head(va.Oracle(Doubled(), "exact"))
    assert rec.W == va.SingleHeadAttention([[1]], [1]).W and rec.v[0] == 2
