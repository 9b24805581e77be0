"""Tests written to kill mutants that survived mutmut on the core modules.

See benchmarks/mutation.py and benchmarks/results/mutation.json (each test names the mutant
it was written for).
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
import sympy

import verified_attn as va
from verified_attn.arithmetic import ExactArithmetic, FloatArithmetic, simplest_rational_between
from verified_attn.errors import InvalidArgument, ModelClassMismatch, OracleError
from verified_attn.probing import raise_bad_probe
from verified_attn.verification import verify_candidate

HEAD = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 3])


# -- arithmetic ---------------------------------------------------------------------------


def test_simplest_rational_of_an_interval_ending_at_zero_is_zero() -> None:
    # x_simplest_rational_between__mutmut_5 (lo <= 0 <= hi -> lo <= 0 < hi): [-3/2, 0]
    # then fell through to the continued fraction of a negative lo and gave -1.
    assert simplest_rational_between(Fraction(-3, 2), Fraction(0)) == 0
    assert simplest_rational_between(Fraction(0), Fraction(5, 2)) == 0


def test_float_agreement_scale_includes_the_observed_answer() -> None:
    # xǁFloatArithmeticǁagree__mutmut_12 dropped |a| from max(scale, |a|, |b|): the rule is
    # symmetric in the two answers, so |1 - 0.5| <= 0.5 * 1 whichever comes first.
    arith = FloatArithmetic(rtol=0.5)
    assert arith.agree(1.0, 0.5, scale=0.0)
    assert arith.agree(0.5, 1.0, scale=0.0)
    assert not arith.agree(1.0, 0.4, scale=0.0)


@pytest.mark.parametrize(
    "p, q",
    [
        (167238401148128512064726363667, 319569632970564468912148877164),
        (373387230323830414007557851674, 49910568897225216088598246799),
        (980493777829524280944190696097, 129845334009153331244295834712),
    ],
)
def test_exact_to_float_is_the_nearest_double(p: int, q: int) -> None:
    # xǁExactArithmeticǁto_float__mutmut_5 (sympy.N(x, 30) -> sympy.N(x), 15 digits) and
    # xǁExactArithmeticǁmagnitude__mutmut_4 (N(x, 20) -> N(x, None), 15 digits): these
    # rationals then come out one ulp off the correctly rounded double.
    assert ExactArithmetic().to_float(sympy.Rational(p, q)) == float(Fraction(p, q))
    assert ExactArithmetic().magnitude(-sympy.Rational(p, q)) == float(Fraction(p, q))


# -- oracle -------------------------------------------------------------------------------


def test_a_batch_of_the_wrong_width_names_the_shape() -> None:
    # xǁOracleǁ_query_array__mutmut_11 (the message became None).
    with pytest.raises(InvalidArgument, match=r"each query must have shape \(N >= 1, d = 2\)"):
        va.Oracle(HEAD, "float").query_many(np.zeros((2, 3, 5)))


def test_a_non_callable_batch_fn_is_named_by_its_type() -> None:
    # xǁOracleǁfrom_callable__mutmut_11 (type(None) in the message).
    with pytest.raises(InvalidArgument, match="batch_fn must be callable, got int"):
        va.Oracle.from_callable(HEAD, d=2, batch_fn=3)


def test_a_batch_fn_of_the_wrong_shape_is_named() -> None:
    # xǁOracleǁ_guarded_batch__mutmut_13 (Xs.shape[1] instead of [0] in the message).
    oracle = va.Oracle.from_callable(HEAD, d=2, batch_fn=lambda Xs: np.zeros(7))
    with pytest.raises(OracleError, match=r"must return shape \(3,\) for 3 queries; got shape"):
        oracle.query_many(np.ones((3, 2, 2)))


def test_a_batch_fn_that_writes_into_its_input_cannot_alter_the_callers_queries() -> None:
    # xǁOracleǁ_answer_array__mutmut_6 (copy=None: the box got the caller's own array).
    def vandal(Xs: np.ndarray) -> np.ndarray:
        out = HEAD.evaluate_batch(Xs)
        Xs[...] = 99.0
        return out

    Xs = np.ones((4, 3, 2))
    for record in (False, True):
        va.Oracle.from_callable(HEAD, d=2, batch_fn=vandal, record=record).query_many(Xs)
        assert (Xs == 1.0).all()


def test_the_transcript_keeps_the_queries_asked_not_a_later_edit_of_the_array(tmp_path) -> None:
    # Found by xǁOracleǁ_query_array__mutmut_16 (astype(copy=False) -> a copy) surviving:
    # the transcript kept the caller's float64 array itself, so editing it after the call
    # rewrote the record (a replay then refused the queries really asked).
    oracle = va.Oracle(HEAD, "float", record=True)
    Xs = np.ones((2, 3, 2))
    answers = oracle.query_many(Xs)
    Xs[...] = 5.0
    oracle.save_transcript(tmp_path / "t.json")
    replayed = va.Oracle.replay(tmp_path / "t.json")
    assert replayed.query(np.ones((3, 2))) == answers[0]


def test_a_transcript_states_its_precision_and_a_replay_records_everything(tmp_path) -> None:
    # xǁOracleǁsave_transcript__mutmut_15 (the "precision" key renamed) and
    # xǁOracleǁreplay__mutmut_75 (record=True -> None: a replay's own transcript could
    # silently stop growing).
    oracle = va.Oracle(HEAD, "certified", precision=96, record=True)
    oracle.query(np.ones((2, 2)))
    oracle.save_transcript(tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["precision"] == 96
    replayed = va.Oracle.replay(tmp_path / "t.json")
    assert replayed.arithmetic.precision == 96
    assert replayed.record is True


# -- probing ------------------------------------------------------------------------------


def test_a_bad_probe_error_carries_the_query_and_what_was_expected() -> None:
    # x_raise_bad_probe__mutmut_19 (query= dropped) and __mutmut_26 (expected upper-cased).
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ModelClassMismatch) as info:
        raise_bad_probe(FloatArithmetic(), 1.5, X, 0.25)
    assert info.value.query is X
    assert info.value.observed == 0.25
    assert info.value.expected == "alpha_1 in (0, 1)"


# -- verification -------------------------------------------------------------------------


@pytest.mark.parametrize("arithmetic", ["exact", "float"])
def test_verify_candidate_outside_certified_mode_is_verify_model(arithmetic: str) -> None:
    # x_verify_candidate__mutmut_12 and _13 (None for the oracle or the model): the plain
    # path, taken by exact and float oracles, was never reached by the core tests.
    oracle = va.Oracle(HEAD, arithmetic)
    record, refutation = verify_candidate(oracle, HEAD, count=5, seed=1, lengths=(1, 2, 3))
    assert refutation is None and record is not None
    assert record.count == 5 and len(record.answers) == 5
    assert oracle.queries_by_phase == {"verify": 5}
    wrong = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 4])
    with pytest.raises(ModelClassMismatch):
        verify_candidate(oracle, wrong, count=5, seed=1, lengths=(1, 2, 3))


def test_a_verification_record_describes_its_rule_and_precision() -> None:
    # xǁVerificationǁdescribe__mutmut_17 (rule text upper-cased), __mutmut_26 (+= -> =) and
    # xǁVerificationǁto_dict__mutmut_8 (the "lengths_used" key renamed).
    oracle = va.Oracle(HEAD, "certified", precision=64)
    record, _ = verify_candidate(oracle, HEAD, count=3, seed=0, lengths=(1, 2))
    assert record is not None
    text = record.describe()
    assert text.startswith("3 fresh sequences (seed 0, lengths 1, 2), balls overlap")
    assert text.endswith(", asked and predicted at 256 bits")
    assert record.to_dict()["lengths_used"] == [1, 2]


@pytest.mark.parametrize("y", [0, 1, 1.5, -2])
def test_certified_logit_of_a_number_certainly_outside_the_unit_interval(y: float) -> None:
    # xǁCertifiedArithmeticǁlogit__mutmut_2 (y > 0 -> y >= 0: the logit of an exact 0 was
    # returned) and __mutmut_14 (y >= 1 -> y >= 2: 1.5 was called undecided, "raise the
    # precision", instead of certainly outside).
    import flint

    from verified_attn.arithmetic import CertifiedArithmetic, OutsideUnitInterval

    with pytest.raises(OutsideUnitInterval) as info:
        CertifiedArithmetic(64).logit(flint.arb(y))
    assert info.value.undecided is False


def test_an_exact_query_with_a_huge_entry_converts_without_a_warning() -> None:
    # x__dyadic_matrix__mutmut_17 (errstate(over="ignore") -> over=None): the power-of-two
    # shifts overflow on 1e300 by design (refused next), which must not reach the user as a
    # RuntimeWarning.
    import warnings

    oracle = va.Oracle(HEAD, "exact")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        answer = oracle.query(np.array([[1e300, 0.1]]))
    assert answer == sympy.Rational(1e300) + 3 * sympy.Rational(0.1)


def test_the_float_rule_floor_absorbs_a_tiny_gap_on_an_answer_near_zero() -> None:
    # x_check_record__mutmut_23 (the floor forced to 0): an answer of 1e-12 where the model
    # says 0, beside answers of size 1, is within rtol of FLOOR x the median answer size;
    # without the floor its relative gap is infinite.
    from verified_attn.arithmetic import FloatArithmetic
    from verified_attn.verification import Verification, check_record

    model = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 3])
    sequences = [np.array([[1.0, 0.0]]), np.array([[3.0, -1.0]]), np.array([[0.0, 1.0]])]
    assert [model(X) for X in sequences] == [1.0, 0.0, 3.0]
    record = Verification(
        count=3,
        seed=0,
        lengths=(1,),
        precision=None,
        arithmetic="float",
        rtol=1e-6,
        max_gap=None,
        sequences=sequences,
        answers=[1.0, 1e-12, 3.0],
        working=FloatArithmetic(1e-6),
    )
    # x_check_record__mutmut_99 (gap * allowed): max_ratio is the gap over what the rule
    # allows, 1e-12 / (rtol 1e-6 x floor 1e-3) = 1e-3 (a float figure: compared as one).
    assert check_record(record, model).max_ratio == pytest.approx(1e-3, rel=1e-9)
    record.answers = [1.0, 1e-8, 3.0]  # beyond the floor: refused
    with pytest.raises(ModelClassMismatch):
        check_record(record, model)


def _float_record(sequences: list[np.ndarray], answers: list[float], lengths: tuple[int, ...]):
    from verified_attn.arithmetic import FloatArithmetic
    from verified_attn.verification import Verification

    return Verification(
        count=len(sequences),
        seed=0,
        lengths=lengths,
        precision=None,
        arithmetic="float",
        rtol=1e-6,
        max_gap=None,
        sequences=sequences,
        answers=answers,
        working=FloatArithmetic(1e-6),
    )


def test_the_float_floor_is_measured_from_the_output_bias() -> None:
    # x_check_record__mutmut_28 (float_floor without the bias): with beta = 1000 the floor
    # is FLOOR x median |answer - beta| = 1e-3, not FLOOR x median |answer| = 1, so a gap
    # of 1e-7 on the answer equal to beta is refused.
    from verified_attn.verification import check_record

    model = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 3], c=[0, 0], beta=1000)
    sequences = [np.array([[1.0, 0.0]]), np.array([[3.0, -1.0]]), np.array([[0.0, 1.0]])]
    assert [model(X) for X in sequences] == [1001.0, 1000.0, 1003.0]
    assert check_record(_float_record(sequences, [1001.0, 1000.0, 1003.0], (1,)), model, bias=1000)
    wrong = _float_record(sequences, [1001.0, 1000.0 + 1e-7, 1003.0], (1,))
    with pytest.raises(ModelClassMismatch):
        check_record(wrong, model, bias=1000)


def test_the_position_check_uses_the_float_floor_too() -> None:
    # x_check_record__mutmut_42 (check_positions without floor=): a permuted pair whose
    # answers are 0 and 1e-12 (every token has x^T v = 0) is a rounding difference under
    # the floor, not a position dependence.
    from verified_attn.verification import check_record, permute_context, permuted_pairs

    model = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 3])
    zero = np.array([[3.0, -1.0], [-3.0, 1.0], [6.0, -2.0]])
    one = np.array([[1.0, 0.0], [-2.0, 1.0], [4.0, -1.0]])
    sequences = [zero, permute_context(zero), one, permute_context(one)]
    assert permuted_pairs(4, (3,)) == [(1, 0), (3, 2)]
    answers = [model(X) for X in sequences]
    assert answers[:2] == [0.0, 0.0]
    answers[1] = 1e-12
    assert check_record(_float_record(sequences, answers, (3,)), model).max_ratio < 1
    answers[1] = 1e-8  # beyond the floor: refused (here by the position check)
    with pytest.raises(ModelClassMismatch, match="depend on token positions") as info:
        check_record(_float_record(sequences, answers, (3,)), model)
    # x_check_positions__mutmut_24 (observed=None): the error names both answers.
    assert info.value.query is sequences[1]
    assert info.value.observed == 1e-8 and info.value.expected == 0.0


def test_a_float_verification_record_states_its_rtol() -> None:
    # x_ask_fresh__mutmut_64 ("float" misspelt: rtol recorded as None in float mode).
    from verified_attn.verification import ask_fresh

    oracle = va.Oracle.from_callable(HEAD, d=2, rtol=1e-4)
    record = ask_fresh(oracle, count=2, seed=0, lengths=(1, 2))
    assert record.rtol == 1e-4
    assert ask_fresh(va.Oracle(HEAD, "exact"), count=2, seed=0, lengths=(1, 2)).rtol is None


@pytest.mark.parametrize("arithmetic", ["exact", "float"])
def test_the_single_head_learner_verifies_on_the_lengths_asked_for(arithmetic: str) -> None:
    # x_verify_reconstruction__mutmut_98 (lengths= dropped: the default lengths were used).
    oracle = va.Oracle(HEAD, arithmetic)
    rec = va.learn_single_head(oracle, verify=3, lengths=(2, 3, 5))
    assert rec.verification.lengths == (2, 3, 5)
    # The slot before the longest holds its permuted copy (verification.permuted_pairs).
    assert [X.shape[0] for X in rec.verification.sequences] == [2, 5, 5]


def test_a_certified_ball_result_gives_beta_as_one_ball() -> None:
    # x_public_params__mutmut_34 (beta given as a 0-d object array instead of the ball).
    import flint

    from verified_attn.arithmetic import arb_bounds

    head = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 3], c=[1, 0], beta=Fraction(1, 3))
    rec = va.learn_single_head(va.Oracle(head, "certified"), denominator_bound=2)
    assert not rec.exact  # 1/3 has a denominator above the bound: balls, not rationals
    beta = rec.parameters["beta"]
    assert isinstance(beta, flint.arb)
    lo, hi = arb_bounds(beta)  # exact endpoints (contains() would round 1/3 to a ball)
    assert lo <= Fraction(1, 3) <= hi
    assert rec.parameters["W"].shape == (2, 2)


def test_float_logits_outside_the_unit_interval_are_reported_without_a_warning() -> None:
    # x_logits__mutmut_7 (invalid="ignore" dropped): log of a negative ratio must come back
    # as a bad index, not as a RuntimeWarning the user sees.
    import warnings

    from verified_attn.probing import logits

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, bad = logits(FloatArithmetic(), np.array([-0.5, 0.5, 1.0, 2.0]))
    assert bad == [(0,), (2,), (3,)]
    assert out[1] == 0.0


def test_a_v_indistinguishable_from_zero_asks_for_precision() -> None:
    # x_require_nonzero_v__mutmut_18 (the message's second sentence misspelt).
    import flint

    from verified_attn.arithmetic import CertifiedArithmetic
    from verified_attn.errors import PrecisionExhausted
    from verified_attn.probing import require_nonzero_v

    tiny = flint.arb(0, 2.0**-70)  # contains 0 and nonzero numbers: its sign is unknown
    message = "at this precision; W cannot be probed until one is certified nonzero$"
    with pytest.raises(PrecisionExhausted, match=message):
        require_nonzero_v(CertifiedArithmetic(64), np.array([tiny, tiny], dtype=object))


def _exact_certificate() -> dict:
    model = va.SingleHeadAttention([[Fraction(1, 2), -2], [3, Fraction(-1, 3)]], [0, 5])
    data = json.loads(json.dumps(va.learn_single_head(va.Oracle(model, "exact")).certificate()))
    assert va.verify_certificate(data).ok
    return data


@pytest.mark.parametrize(
    "edit, message",
    [
        # x_check_verification__mutmut_228 (the field misnamed in the error).
        (lambda c: c.update(verified="yes"), "^verified must be true or false, got"),
        # x_check_counts__mutmut_61 (the field's name dropped from the error).
        (
            lambda c: c["queries"].update(verification_phases="verify"),
            "^queries.verification_phases must be a list, got str",
        ),
        # x_check_counts__mutmut_79 (the offending value dropped from the error).
        (
            lambda c: c["queries"].update(verification_phases=["verify", "nope"]),
            r"must name phases of queries.by_phase, got \['verify', 'nope'\]",
        ),
        # x_check_verification__mutmut_122 (the answers' count unchecked: one answer too
        # many ended in zip(strict=True)'s ValueError, not a CertificateError).
        (
            lambda c: c["verification"]["answers"].append(c["verification"]["answers"][0]),
            r"^verification.answers has 9 entries, expected 8",
        ),
        # x_check_verification__mutmut_58, missed by verified-attn check (the error's text).
        (
            lambda c: c["verification"].update(lengths=[]),
            "^verification.lengths must not be empty$",
        ),
    ],
    ids=["verified", "verification_phases", "unknown-phase", "answers-count", "no-lengths"],
)
def test_a_certificate_field_of_the_wrong_type_is_named(edit, message: str) -> None:
    from verified_attn.errors import CertificateError

    data = _exact_certificate()
    edit(data)
    with pytest.raises(CertificateError, match=message):
        va.verify_certificate(data)


def test_an_exact_matrix_of_no_rows_is_empty() -> None:
    # x_fmpq_matrix__mutmut_4 (rows[0] read even when there are no rows).
    from verified_attn.arithmetic import fmpq_matrix

    empty = fmpq_matrix([])
    assert (empty.nrows(), empty.ncols()) == (0, 0)
    one = fmpq_matrix([[Fraction(1, 2), Fraction(-3)]])
    assert (one.nrows(), one.ncols()) == (1, 2) and one[0, 1] == -3


def test_a_verification_answer_larger_than_any_answer_is_refused_before_parsing() -> None:
    # x_numbers__mutmut_8 (max_calls dropped: the size bound on exact verification answers
    # was never applied, so a checker would parse whatever a file holds).
    from verified_attn.certificates.kernel import answer_calls
    from verified_attn.errors import CertificateError

    data = _exact_certificate()
    calls = answer_calls(max(data["verification"]["lengths"])) + 1
    data["verification"]["answers"][0] = {"sympy": "+".join(["exp(1)"] * calls)}
    with pytest.raises(CertificateError, match=f"an expression of {calls} calls, larger than"):
        va.verify_certificate(data)


@pytest.mark.parametrize(
    "arithmetic, header",
    [
        ("exact", "thm-4.1 single-head, d = 2, arithmetic exact, seed 0"),
        ("certified", "thm-4.1 single-head, d = 2, arithmetic certified at 256 bits, seed 0"),
        ("float", "thm-4.1 single-head, d = 2, arithmetic float, rtol 1e-06, seed 0"),
    ],
)
def test_a_certificate_summary_opens_with_its_header(arithmetic: str, header: str) -> None:
    # xǁHeaderǁdescribe__mutmut_5 (rtol = None: "None" in every non-float header).
    model = va.SingleHeadAttention([[Fraction(1, 2), -2], [3, Fraction(-1, 3)]], [0, 5])
    oracle = va.Oracle(model, arithmetic, precision=256 if arithmetic == "certified" else None)
    check = va.verify_certificate(va.learn_single_head(oracle).certificate())
    assert check.summary[0] == header


def test_a_checker_handed_another_kind_names_both() -> None:
    # x_parse_header__mutmut_22 and _24 (the stored kind dropped or read under another key):
    # a checker called directly (not through verify_certificate's dispatch) on the wrong kind.
    from verified_attn.certificates.kernel import parse_header
    from verified_attn.errors import CertificateError

    data = _exact_certificate()
    expected = r"^kind is 'single-head', this checker reads 'low-rank'"
    with pytest.raises(CertificateError, match=expected):
        parse_header(data, "low-rank")


def test_the_float_rule_reports_the_gap_relative_to_the_answer() -> None:
    # x_agree__mutmut_25 (the size's guard 1e-300 -> 1.0: gaps of answers below 1 were
    # reported relative to 1, not to the answer).
    from verified_attn.verification import agree

    ok, gap = agree(FloatArithmetic(), 0.5, 0.5 + 1e-8)
    assert ok and gap == pytest.approx(2e-8, rel=1e-6)
