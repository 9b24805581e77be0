"""Certificates: round trips in every arithmetic, and every kind of tampering is caught."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verified_attn import Oracle, SingleHeadAttention, learn_single_head
from verified_attn.certificates import CertificateCheck, load_certificate, verify_certificate
from verified_attn.certificates.kernel import (
    largest_unique_denominator as _largest_unique_denominator,
)
from verified_attn.certificates.single_head import FLOAT_RTOL
from verified_attn.errors import CertificateError, InvalidArgument
from verified_attn.serialize import dump_number, load_number

# v_0 = 0: the default design must mix coordinates for the certificate to pass its design check.
MODEL = SingleHeadAttention([[Fraction(1, 2), -2], [3, Fraction(-1, 3)]], [0, 5])
AFFINE = SingleHeadAttention(
    [[Fraction(1, 2), -2], [3, 0]], [0, 5], c=[1, Fraction(-1, 3)], beta=Fraction(2, 7)
)
SATURATING = SingleHeadAttention([[40, -2], [3, 0]], [0, 5])  # float mode re-asks one probe
ARITHMETICS = ("exact", "certified", "float")


def certificate(model: SingleHeadAttention, arithmetic: str, **kw: Any) -> dict[str, Any]:
    precision = kw.pop("precision", None)
    rec = learn_single_head(Oracle(model, arithmetic, precision=precision), seed=3, **kw)
    # Through JSON text, as a file would go.
    return json.loads(json.dumps(rec.certificate()))


@pytest.fixture(scope="module")
def certs() -> dict[str, dict[str, Any]]:
    return {a: certificate(MODEL, a) for a in ARITHMETICS}


# ---------------------------------------------------------------------------------------
# Round trips.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
@pytest.mark.parametrize("model", [MODEL, AFFINE], ids=["plain", "affine"])
def test_round_trip_through_a_file(tmp_path, model, arithmetic) -> None:
    rec = learn_single_head(Oracle(model, arithmetic), seed=3)
    path = tmp_path / "cert.json"
    rec.certificate(path)
    check = verify_certificate(path)
    assert isinstance(check, CertificateCheck)
    assert check.ok and check.theorem == "thm-4.1"
    want = 9 if model.affine else 6  # d^2 + 2d + 1 and d^2 + d at d = 2: golden counts
    assert f"queries: {want} learning = bound {want}" in check.summary[1]
    # The verification line is the last before the assumptions (certified mode has one).
    ver = [line for line in check.summary if line.startswith("verification:")]
    assert ver == [check.summary[-1 - len(rec.assumptions)]]
    assert ver[0].startswith("verification: 8 fresh sequences (seed 3, lengths 1, 2, 3, 4, 6")
    assert str(check).startswith("certificate OK (single-head, thm-4.1)")


def test_certificate_records_design_answers_and_counts(certs) -> None:
    data = certs["exact"]
    assert data["format"] == "verified-attn-certificate/2"
    assert data["kind"] == "single-head" and data["theorem"] == "thm-4.1"
    assert data["d"] == 2 and data["seed"] == 3 and data["arithmetic"] == "exact"
    # v_0 = 0 forces the mixed column u_0 = e_0 + e_1.
    assert data["design"]["U"] == [["1/1", "0/1"], ["1/1", "1/1"]]
    assert data["queries"] == {
        "learning": 6,
        "verification": 8,
        "by_phase": {"v": 2, "W": 4, "verify": 8},
        "verification_phases": ["verify"],
        "bound": 6,
    }
    # The fresh sequences are not stored: count, seed and lengths determine them.
    ver = data["verification"]
    assert (ver["count"], ver["seed"], ver["lengths"]) == (8, 3, [1, 2, 3, 4, 6, 8, 12, 16])
    assert len(ver["answers"]) == 8 and set(ver["answers"][0]) == {"rational"}
    params = data["result"]["parameters"]
    assert [load_number(x) for x in params["v"]] == [0, 5]  # flat, not a d x 1 column
    assert load_number(params["W"][1][1]) == Fraction(-1, 3)
    assert "python-flint" in data["versions"]


def test_float_rescales_are_counted_and_checked() -> None:
    data = certificate(SATURATING, "float")
    assert data["queries"]["by_phase"]["rescale"] == 1
    check = verify_certificate(data)
    assert "7 learning = bound 6 (d^2 + d) + 1 re-asked probes" in check.summary[1]
    bad = copy.deepcopy(data)
    del bad["queries"]["by_phase"]["rescale"]
    bad["queries"]["learning"] = 6
    with pytest.raises(CertificateError, match="learning is 6, but the stored design and answers"):
        verify_certificate(bad)
    # The total made right by moving the re-ask into W: the per-phase count is wrong.
    bad["queries"]["learning"] = 7
    bad["queries"]["by_phase"]["W"] += 1
    with pytest.raises(CertificateError, match=r"by_phase.(W is 5|rescale is 0), the stored des"):
        verify_certificate(bad)
    bad["queries"]["by_phase"]["rescale"] = 0  # a phase that asked nothing is not a phase
    with pytest.raises(CertificateError, match=r"by_phase.rescale must be an int >= 1, got 0"):
        verify_certificate(bad)


@pytest.mark.parametrize("model", [MODEL, AFFINE], ids=["plain", "affine"])
def test_certified_balls_round_trip(model) -> None:
    # denominator_bound=1 refuses to reconstruct 1/2: the result stays balls.
    data = certificate(model, "certified", precision=64, denominator_bound=1)
    assert data["result"]["exact"] is False
    assert "arb" in data["result"]["parameters"]["W"][0][0]
    check = verify_certificate(data)
    assert "every claimed ball contains the ball re-decoded" in check.summary[3]


def test_certified_ball_claiming_too_much_fails() -> None:
    data = certificate(MODEL, "certified", precision=64, denominator_bound=1)
    ball = data["result"]["parameters"]["W"][0][0]["arb"]
    data["result"]["parameters"]["W"][0][0] = {"arb": [ball[0], "0/1"]}  # radius 0: overclaim
    with pytest.raises(CertificateError, match=r"result W\[0\]\[0\]: the claimed ball"):
        verify_certificate(data)


# ---------------------------------------------------------------------------------------
# Tampering: each kind raises CertificateError naming what failed.
# ---------------------------------------------------------------------------------------


def _shift(obj: dict[str, Any], arithmetic: str, rel: float = 1e-9) -> dict[str, Any]:
    """The same kind of number, moved well beyond any rounding or radius."""
    x = load_number(obj)
    if arithmetic == "float":
        return dump_number(x * (1 + rel) + rel)
    if arithmetic == "certified":
        lo = Fraction(obj["arb"][0]) + Fraction(1, 2**40)
        return {"arb": [f"{lo.numerator}/{lo.denominator}", obj["arb"][1]]}
    return {"rational": "1/3"}


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
def test_changed_answer_fails(certs, arithmetic) -> None:
    data = copy.deepcopy(certs[arithmetic])
    data["answers"]["W"][1][0] = _shift(data["answers"]["W"][1][0], arithmetic)
    with pytest.raises(CertificateError, match=r"result W\[|re-decoding the stored answers"):
        verify_certificate(data)


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
def test_changed_result_entry_fails(certs, arithmetic) -> None:
    data = copy.deepcopy(certs[arithmetic])
    params = data["result"]["parameters"]
    if arithmetic == "float":
        params["W"][1][0] = _shift(params["W"][1][0], "float")
    else:  # exact and certified-exact claims are rationals
        params["W"][1][0] = {"rational": "4/1"}
    with pytest.raises(CertificateError, match=r"result W\[1\]\[0\]"):
        verify_certificate(data)


def test_float_tolerance_is_exactly_documented(certs) -> None:
    data = copy.deepcopy(certs["float"])
    x = load_number(data["result"]["parameters"]["W"][1][0])  # 3, up to float error
    # One ulp is within 1e-12 relative: another BLAS may differ that much.
    data["result"]["parameters"]["W"][1][0] = dump_number(float.fromhex(x.hex()) * (1 + 2**-52))
    verify_certificate(data)
    # 10 * FLOAT_RTOL relative is not.
    data["result"]["parameters"]["W"][1][0] = dump_number(x * (1 + 10 * FLOAT_RTOL))
    with pytest.raises(CertificateError, match=r"more than 1e-12 relative"):
        verify_certificate(data)


def test_certified_rational_must_be_the_unique_one_in_its_ball(certs) -> None:
    data = copy.deepcopy(certs["certified"])
    # A rational inside the re-decoded ball of W[0][0] = 1/2 but with a huge denominator:
    # containment alone would accept it; uniqueness up to the ball's D does not.
    q = Fraction(1, 2) + Fraction(1, 2**300)
    data["result"]["parameters"]["W"][0][0] = {"rational": f"{q.numerator}/{q.denominator}"}
    with pytest.raises(CertificateError, match="not the only rational of its denominator"):
        verify_certificate(data)


def test_largest_unique_denominator() -> None:
    # width 1/100: D^2 < 100 gives D = 9; width exactly 1/D^2 excludes D itself.
    assert _largest_unique_denominator(Fraction(0), Fraction(1, 100)) == 9
    assert _largest_unique_denominator(Fraction(0), Fraction(1, 101)) == 10
    assert _largest_unique_denominator(Fraction(1, 3), Fraction(1, 3)) is None


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
def test_changed_design_fails(certs, arithmetic) -> None:
    data = copy.deepcopy(certs[arithmetic])
    data["design"]["U"][1][1] = "2/1"
    with pytest.raises(CertificateError, match=r"result W\[|re-decoding"):
        verify_certificate(data)


def test_singular_design_fails(certs) -> None:
    data = copy.deepcopy(certs["certified"])
    data["design"]["U"] = [["1/1", "1/1"], ["1/1", "1/1"]]
    with pytest.raises(CertificateError, match=r"design.U is singular"):
        verify_certificate(data)


def test_design_column_orthogonal_to_v_fails(certs) -> None:
    data = copy.deepcopy(certs["exact"])
    data["design"]["U"] = [["1/1", "0/1"], ["0/1", "1/1"]]  # u_0 = e_0 but v_0 = 0
    with pytest.raises(CertificateError, match=r"design column 0: u_0\^T v = 0 is zero"):
        verify_certificate(data)


def test_non_power_of_sixteen_scale_fails(certs) -> None:
    data = copy.deepcopy(certs["float"])
    data["design"]["scales"][0][0] = "1/2"
    with pytest.raises(CertificateError, match=r"design.scales\[0\]\[0\] = 1/2 is not 16\^-n"):
        verify_certificate(data)


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
def test_changed_verification_answer_fails(certs, arithmetic) -> None:
    data = copy.deepcopy(certs[arithmetic])
    # Float verification allows 1e-6 relative, as the learner does: move it by 1e-4.
    answer = data["verification"]["answers"][2]
    data["verification"]["answers"][2] = _shift(answer, arithmetic, rel=1e-4)
    with pytest.raises(CertificateError, match=r"verification.answers\[2\]: the stored answer"):
        verify_certificate(data)


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
@pytest.mark.parametrize(
    "edit",
    [
        lambda v: v.update(seed=v["seed"] + 1),
        lambda v: v.update(lengths=[2, 1, 3, 4, 6, 8, 12, 16]),
        lambda v: v.update(lengths=[1]),
    ],
    ids=["seed", "lengths-order", "lengths"],
)
def test_changed_verification_query_fails(certs, arithmetic, edit) -> None:
    # The sequences are those the stored seed and lengths determine: claiming other
    # sequences than the ones asked makes the stored answers disagree with the model.
    data = copy.deepcopy(certs[arithmetic])
    edit(data["verification"])
    # (Exact answers to longer sequences than the stated lengths are also too large.)
    with pytest.raises(
        CertificateError, match=r"verification.answers\[\d\]: (the stored answer|an expression)"
    ):
        verify_certificate(data)


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
def test_dropped_answer_fails(certs, arithmetic) -> None:
    data = copy.deepcopy(certs[arithmetic])
    del data["answers"]["W"][1][1]
    with pytest.raises(CertificateError, match=r"answers.W\[1\] has 1 entries, expected 2"):
        verify_certificate(data)


def test_dropped_verification_fails(certs) -> None:
    data = copy.deepcopy(certs["exact"])
    del data["verification"]["answers"][-1]
    with pytest.raises(CertificateError, match=r"verification.answers has 7 entries, expected 8"):
        verify_certificate(data)
    data["verification"]["count"] = 7
    with pytest.raises(CertificateError, match=r"verification.count is 7, but queries.verif"):
        verify_certificate(data)
    # Claiming verified with no answer at all is refused too.
    data["verification"].update(count=0, answers=[])
    data["queries"]["verification"] = 0
    data["queries"]["by_phase"].pop("verify")
    data["queries"]["verification_phases"] = []
    with pytest.raises(CertificateError, match="verified is True, but 0 verification answers"):
        verify_certificate(data)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("learning", 7, "queries.learning is 7"),
        ("bound", 5, "queries.bound is 5, the theorem's bound is 6"),
        ("verification", 9, "queries.verification is 9"),
    ],
)
def test_wrong_counts_fail(certs, field, value, message) -> None:
    data = copy.deepcopy(certs["certified"])
    data["queries"][field] = value
    with pytest.raises(CertificateError, match=message):
        verify_certificate(data)


def test_wrong_phase_count_fails(certs) -> None:
    data = copy.deepcopy(certs["certified"])
    data["queries"]["by_phase"]["v"] = 1
    with pytest.raises(CertificateError, match=r"learning phases add up to 5"):
        verify_certificate(data)
    # Made consistent with the total, the phases still disagree with the stored answers.
    data["queries"]["by_phase"]["W"] = 5
    with pytest.raises(CertificateError, match=r"by_phase.v is 1, the stored design implies 2"):
        verify_certificate(data)


def test_theorem_name_changed_fails(certs) -> None:
    data = copy.deepcopy(certs["exact"])
    data["theorem"] = "thm-5.1"
    with pytest.raises(CertificateError, match=r"theorem is 'thm-5.1', a single-head cert"):
        verify_certificate(data)
    data["theorem"] = "thm-4.1"
    data["kind"] = "low-rank"  # another kind's checker refuses it (or is not there yet)
    with pytest.raises(CertificateError):
        verify_certificate(data)


def test_wrong_format_fails(certs) -> None:
    data = copy.deepcopy(certs["exact"])
    data["format"] = "something-else/2"
    with pytest.raises(CertificateError, match="unknown certificate format"):
        verify_certificate(data)


def test_number_of_the_wrong_kind_fails(certs) -> None:
    data = copy.deepcopy(certs["exact"])
    data["answers"]["v"][1] = {"float": (5.0).hex()}
    with pytest.raises(CertificateError, match=r"answers.v\[1\]: a 'float' number in a exact"):
        verify_certificate(data)


def test_untrusted_expression_is_refused(certs) -> None:
    data = copy.deepcopy(certs["exact"])
    data["answers"]["W"][0][0] = {"sympy": "__import__('os').getcwd()"}
    with pytest.raises(CertificateError, match=r"answers.W\[0\]\[0\]: expression .* does not read"):
        verify_certificate(data)
    data["answers"]["W"][0][0] = {"sympy": "open('x')"}
    with pytest.raises(CertificateError, match=r"answers.W\[0\]\[0\]: expression .* does not read"):
        verify_certificate(data)


# ---------------------------------------------------------------------------------------
# Malformed input.
# ---------------------------------------------------------------------------------------


def test_not_json(tmp_path) -> None:
    path = tmp_path / "cert.json"
    path.write_text("{not json")
    with pytest.raises(CertificateError, match="is not valid JSON"):
        verify_certificate(path)


def test_json_but_not_an_object(tmp_path) -> None:
    path = tmp_path / "cert.json"
    path.write_text("[1, 2]")
    with pytest.raises(CertificateError, match="must hold a JSON object, got list"):
        verify_certificate(str(path))


def test_missing_file(tmp_path) -> None:
    with pytest.raises(CertificateError, match="cannot read certificate"):
        verify_certificate(tmp_path / "absent.json")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (("answers",), "missing field answers"),
        (("design", "U"), "missing field design.U"),
        (("queries", "by_phase"), "missing field queries.by_phase"),
        (("result", "parameters"), "missing field result.parameters"),
        (("d",), "missing field d"),
        (("seed",), "missing field seed"),
    ],
)
def test_missing_keys(certs, path, message) -> None:
    data = copy.deepcopy(certs["certified"])
    target = data
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    with pytest.raises(CertificateError, match=message):
        verify_certificate(data)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(d="2"), "d must be an int, got str '2'"),
        (lambda c: c.update(d=0), "d must be an int in 1..1024, got 0"),
        (lambda c: c.update(answers=5), "answers must be a JSON object"),
        (lambda c: c["answers"].update(v=None), "answers.v must be a list"),
        (lambda c: c.update(precision=8), "precision must be an int in 32..65536, got 8"),
        (lambda c: c.update(arithmetic="fuzzy"), "arithmetic must be exact, certified or float"),
        (lambda c: c["design"]["U"][0].__setitem__(0, "x/y"), r"design.U\[0\]\[0\]"),
        (lambda c: c["answers"]["v"].__setitem__(0, {"arb": ["1/2"]}), r"answers.v\[0\]"),
        (lambda c: c["result"].update(exact="yes"), "result.exact must be true or false"),
        (
            lambda c: c["verification"]["answers"].__setitem__(0, []),
            r"verification.answers\[0\]: malformed number",
        ),
        (lambda c: c.update(verification=[]), "verification must be a JSON object, got list"),
    ],
    # No backslash in an id (the regexes' "\\["): pytest could not select such a node id
    # again, and mutmut (benchmarks/mutation.py) selects every test by its id.
    ids=lambda x: "" if callable(x) else x.replace("\\", ""),
)
def test_malformed_fields(certs, edit, message) -> None:
    data = copy.deepcopy(certs["certified"])
    edit(data)
    with pytest.raises(CertificateError, match=message):
        verify_certificate(data)


def test_bad_argument_type() -> None:
    with pytest.raises(InvalidArgument, match="path_or_dict must be a path or a dict"):
        verify_certificate(42)  # type: ignore[arg-type]


def test_load_certificate_copies_dicts(certs) -> None:
    data = certs["exact"]
    assert load_certificate(data) == data and load_certificate(data) is not data


# ---------------------------------------------------------------------------------------
# Property: random heads round-trip; a random answer tamper is caught.
# ---------------------------------------------------------------------------------------

small_rationals = st.fractions(min_value=-4, max_value=4, max_denominator=6)


@st.composite
def heads(draw: st.DrawFn) -> SingleHeadAttention:
    d = draw(st.integers(1, 3))
    W = [[draw(small_rationals) for _ in range(d)] for _ in range(d)]
    v = [draw(st.integers(-3, 3)) for _ in range(d)]
    v[draw(st.integers(0, d - 1))] = draw(st.sampled_from([-2, -1, 1, 2]))
    return SingleHeadAttention(W, v)


@given(model=heads(), data=st.data())
def test_property_round_trip_and_tamper(model, data) -> None:
    cert = certificate(model, "certified")
    assert verify_certificate(cert).ok
    d = model.d
    k, j = data.draw(st.integers(0, d - 1)), data.draw(st.integers(0, d - 1))
    cert["answers"]["W"][k][j] = _shift(cert["answers"]["W"][k][j], "certified")
    with pytest.raises(CertificateError):
        verify_certificate(cert)


def test_float_zero_matrix_has_an_absolute_floor() -> None:
    # W = 0: every decoded entry is rounding noise around 0; the tolerance is 1e-12 absolute.
    data = certificate(SingleHeadAttention([[0, 0], [0, 0]], [1, 2]), "float")
    verify_certificate(data)
    data["result"]["parameters"]["W"][0][1] = dump_number(1e-11)
    with pytest.raises(CertificateError, match=r"result W\[0\]\[1\]: claimed 1e-11"):
        verify_certificate(data)


def test_large_beta_does_not_hide_a_wrong_verification_answer() -> None:
    # With beta = 1e7 a head-sized error (1e-3 of sum|v|) is ~1e-10 of the answer: a check
    # scaled by |beta| would accept it; the shared learner/checker rule must not.
    model = SingleHeadAttention([[1, 2], [0, -1]], [3, 1], c=[0, 1], beta=10**7)
    cert = certificate(model, "float")
    verify_certificate(cert)  # the genuine one checks
    bad = copy.deepcopy(cert)
    answers = bad["verification"]["answers"]
    answers[0] = dump_number(load_number(answers[0]) + 4e-3)
    with pytest.raises(CertificateError, match=r"verification.answers\[0\]"):
        verify_certificate(bad)
