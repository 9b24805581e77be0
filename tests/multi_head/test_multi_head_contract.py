"""The result contract for the multi-head room: every learner x instance x arithmetic.

In the style of scikit-learn's ``check_estimator``: one table of small instances, and the
same checks on each (model agrees with the truth on sequences the learner never saw, the
counts add up on the oracle, summary, to_dict, a certificate round trip through a file,
tampered certificates refused), plus verify=0, out-of-class boxes, bad arguments and
hostile certificate files.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.arithmetic import get_arithmetic
from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head import counterexample
from verified_attn.multi_head.canonical import canonical_form
from verified_attn.multi_head.canonical_learner import (
    canonical_query_bound,
    canonical_query_limit,
    learn_multi_head,
)
from verified_attn.multi_head.counterexamples import KINDS, random_multi_head
from verified_attn.multi_head.learner import (
    learn_orthogonal_heads,
    orthogonal_heads_model,
    orthogonal_query_bound,
)
from verified_attn.multi_head.pipeline.budget import float_query_limit
from verified_attn.recovery import MultiHeadRecovery

ARITHS = ("exact", "certified", "float")

AFFINE = MultiHeadAttention(
    [([[1, 0], [0, -1]], [1, 2], [1, 0]), ([[0, 1], [1, 0]], [-1, 1], [0, Fraction(1, 2)])],
    beta=3,
)
EQUAL_V = MultiHeadAttention([([[1, 0], [0, 2]], [1, -1]), ([[0, 1], [-1, 0]], [1, -1])])
ORTHO_MODEL, ORTHO_BASES = orthogonal_heads_model(4, [2, 1], 0)


def _canonical(model: MultiHeadAttention, H: int, golden: int, float_golden: int) -> dict[str, Any]:
    return {
        "model": model,
        "run": lambda oracle, **kw: learn_multi_head(oracle, heads=H, **kw),
        "golden": golden,
        "bound": canonical_query_limit(model.d, H, affine=model.affine),
        # The float path's own design (a ratio grid, one redundant sample per pair).
        "float_golden": float_golden,
        "float_bound": float_query_limit(model.d, H, affine=model.affine),
        "method": "canonical",
    }


INSTANCES: dict[str, dict[str, Any]] = {
    # d + 2H (d^2 + d - 1) = 2 + 4 * 5
    # float: d + (2H + 1)(d^2 + d - 1) = 2 + 5 * 5
    "canonical-plain": _canonical(random_multi_head(2, 2, 22), 2, 22, 27),
    # d + 1 + 2H (d^2 + 2d - 1) = 3 + 4 * 7; float 3 + 5 * 7
    "canonical-affine": _canonical(AFFINE, 2, 31, 38),
    # equal v: 22 + d (d - 1) tie links, the worst case; float 27 + 2
    "canonical-ties": _canonical(EQUAL_V, 2, 24, 29),
    "orthogonal": {
        "model": ORTHO_MODEL,
        "run": lambda oracle, **kw: learn_orthogonal_heads(oracle, ORTHO_BASES, **kw),
        "golden": orthogonal_query_bound([2, 1]),
        "bound": orthogonal_query_bound([2, 1]),
        "method": "orthogonal",
    },
}
CASES = [(name, arith) for name in INSTANCES for arith in ARITHS]
_RESULTS: dict[tuple[str, str], tuple[MultiHeadRecovery, va.Oracle]] = {}


def _learn(name: str, arith: str) -> tuple[MultiHeadRecovery, va.Oracle]:
    """One run per case, shared by the checks (the learners are deterministic)."""
    if (name, arith) not in _RESULTS:
        oracle = va.Oracle(INSTANCES[name]["model"], arith)
        _RESULTS[(name, arith)] = (INSTANCES[name]["run"](oracle), oracle)
    return _RESULTS[(name, arith)]


def _fresh(d: int) -> list[np.ndarray]:
    """Sequences the learners never ask (another generator, other entries and lengths)."""
    rng = np.random.default_rng(99)
    return [rng.integers(-6, 7, size=(n, d)) / 4 for n in (1, 2, 5, 9, 20)]


def _agree(arith: str, got: Any, want: Any) -> bool:
    if arith == "exact":
        return get_arithmetic("exact").agree(got, want)
    if arith == "certified":
        return bool(got.overlaps(want))
    return abs(float(got) - float(want)) <= 1e-7 * max(1.0, abs(float(want)))


@pytest.mark.parametrize(("name", "arith"), CASES)
def test_model_is_the_truth_on_unseen_sequences(name: str, arith: str) -> None:
    rec, _ = _learn(name, arith)
    truth = INSTANCES[name]["model"]
    assert isinstance(rec, va.Recovery) and isinstance(rec, MultiHeadRecovery)
    assert isinstance(rec.model, MultiHeadAttention)
    assert not hasattr(rec, "W")  # not one head
    assert rec.method == INSTANCES[name]["method"] and rec.theorem == "prop-7.1"
    assert rec.exact == (arith != "float")
    for X in _fresh(truth.d):
        got, want = rec.model.evaluate(X, arith), truth.evaluate(X, arith)
        if arith == "exact":
            assert got == want or get_arithmetic("exact").agree(got, want)
        else:
            assert _agree(arith, got, want), (X.tolist(), got, want)


def test_exact_model_is_equal_with_double_equals() -> None:
    rec, _ = _learn("canonical-plain", "exact")
    truth = INSTANCES["canonical-plain"]["model"]
    assert rec.heads == canonical_form(truth).heads
    X = _fresh(2)[2]
    assert rec.model.evaluate(X, "exact") == truth.evaluate(X, "exact")


@pytest.mark.parametrize(("name", "arith"), CASES)
def test_counts_add_up_on_the_oracle(name: str, arith: str) -> None:
    rec, oracle = _learn(name, arith)
    assert oracle.queries == rec.queries + rec.verification_queries
    key = "float_" if arith == "float" and "float_golden" in INSTANCES[name] else ""
    assert rec.queries == INSTANCES[name][key + "golden"]
    assert rec.bound == INSTANCES[name][key + "bound"]
    assert sum(rec.queries_by_phase.values()) == oracle.queries
    assert rec.verified and rec.verification is not None
    assert rec.queries_by_phase["verify"] == 8


@pytest.mark.parametrize(("name", "arith"), CASES)
def test_summary_and_to_dict(name: str, arith: str) -> None:
    rec, _ = _learn(name, arith)
    text = rec.summary()
    assert f"{rec.queries} learning queries" in text
    assert f"{rec.verification_queries} verification" in text
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["queries"]["learning"] == rec.queries
    assert data["kind"] == "multi-head"
    floats = rec.to_numpy()["heads"]
    assert len(floats) == len(rec.heads)
    assert all(np.asarray(W).shape == (rec.model.d, rec.model.d) for W, *_ in floats)


def _number(kind: str, value: Fraction) -> dict[str, Any]:
    if kind == "float":
        return {"float": float(value).hex()}
    if kind == "certified":
        return {"arb": [f"{value.numerator}/{value.denominator}", "0/1"]}
    return {"rational": f"{value.numerator}/{value.denominator}"}


def _tamperings(name: str, arith: str) -> dict[str, Callable[[dict[str, Any]], None]]:
    other = Fraction(1234, 7)

    def count(data: dict[str, Any]) -> None:
        data["queries"]["learning"] += 1

    if INSTANCES[name]["method"] == "canonical":

        def answer(data: dict[str, Any]) -> None:
            data["answers"]["F"][1][1] = _number(arith, Fraction(1, 3))

        def design(data: dict[str, Any]) -> None:
            if arith == "float":
                data["design"]["U"][0][0] = {"float": (0.123).hex()}
            else:
                data["design"]["U"][0][0] = "1/7"

    else:

        def answer(data: dict[str, Any]) -> None:
            sub = data["subspaces"][0]["certificate"]
            sub["answers"]["W"][0][0] = _number(arith, Fraction(1, 3))

        def design(data: dict[str, Any]) -> None:
            data["subspaces"][0]["basis"][0][0] = "5/1"

    def result(data: dict[str, Any]) -> None:
        exact_kind = "float" if arith == "float" else "exact"
        data["result"]["heads"][0]["v"][0] = _number(exact_kind, other)

    return {"answer": answer, "design": design, "result": result, "count": count}


@pytest.mark.parametrize(("name", "arith"), CASES)
def test_certificate_round_trip_and_tampering(name: str, arith: str, tmp_path: Path) -> None:
    rec, _ = _learn(name, arith)
    path = tmp_path / "cert.json"
    data = rec.certificate(path)
    check = va.verify_certificate(path)
    assert check.ok and check.kind == "multi-head" and check.theorem == "prop-7.1"
    assert any("verification: 8 fresh sequences" in line for line in check.summary)
    stored = json.loads(path.read_text())
    assert stored["method"] == INSTANCES[name]["method"]
    for what, tamper in _tamperings(name, arith).items():
        bad = copy.deepcopy(data)
        tamper(bad)
        with pytest.raises(CertificateError):
            va.verify_certificate(bad)
        assert what  # each tampering is its own case in the failure message


@pytest.mark.parametrize("arith", ARITHS)
@pytest.mark.parametrize("method", ["canonical", "orthogonal"])
def test_verify_zero_is_not_verified_and_still_certifies(method: str, arith: str) -> None:
    name = "canonical-plain" if method == "canonical" else "orthogonal"
    oracle = va.Oracle(INSTANCES[name]["model"], arith)
    rec = INSTANCES[name]["run"](oracle, verify=0)
    assert not rec.verified and rec.verification_queries == 0
    key = "float_" if arith == "float" and "float_golden" in INSTANCES[name] else ""
    assert oracle.queries == rec.queries == INSTANCES[name][key + "golden"]
    assert "NOT verified" in rec.summary()
    check = va.verify_certificate(rec.certificate())
    assert check.ok
    assert any("not verified" in line for line in check.summary)
    forged = rec.certificate()
    forged["verified"] = True
    with pytest.raises(CertificateError):
        va.verify_certificate(forged)


@pytest.mark.parametrize("arith", ARITHS)
def test_out_of_class_box_is_refused(arith: str) -> None:
    # Three canonical heads, learner told two: never a wrong model.
    with pytest.raises((ModelClassMismatch, NotIdentifiable, PrecisionExhausted)):
        learn_multi_head(va.Oracle(random_multi_head(2, 3, 7), arith), heads=2)
    # A head leaking out of its declared subspace.
    (W0, v0), second = ORTHO_MODEL.heads
    W_bad = W0.copy()
    W_bad[0, 3] += 1
    leaky = MultiHeadAttention([(W_bad, v0), second])
    with pytest.raises((ModelClassMismatch, PrecisionExhausted)):
        learn_orthogonal_heads(va.Oracle(leaky, arith), ORTHO_BASES)


def test_dead_subspace_certificate() -> None:
    model, bases = orthogonal_heads_model(4, [2, 2], 1, dead=(0,))
    rec = learn_orthogonal_heads(va.Oracle(model, "certified"), bases)
    data = rec.certificate()
    check = va.verify_certificate(data)
    assert check.ok and any("dead" in line for line in check.summary)
    data["subspaces"][0]["dead_answers"][0] = {"arb": ["1/2", "0/1"]}
    with pytest.raises(CertificateError, match="dead_answers"):
        va.verify_certificate(data)


RUNS = {
    "canonical": lambda oracle, **kw: learn_multi_head(oracle, heads=1, **kw),
    "orthogonal": lambda oracle, **kw: learn_orthogonal_heads(oracle, [[[1]]], **kw),
}


@pytest.mark.parametrize("method", list(RUNS))
@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"verify": -1}, "verify"),
        ({"verify": True}, "verify"),
        ({"lengths": []}, "lengths"),
        ({"denominator_bound": 0}, "denominator_bound"),
    ],
)
def test_bad_arguments(method: str, kwargs: dict[str, Any], word: str) -> None:
    oracle = va.Oracle(MultiHeadAttention([([[1]], [2])]), "certified")
    with pytest.raises(InvalidArgument, match=word):
        RUNS[method](oracle, **kwargs)
    assert oracle.queries == 0


@pytest.mark.parametrize("method", list(RUNS))
def test_numpy_seed_is_accepted(method: str) -> None:
    oracle = va.Oracle(MultiHeadAttention([([[1]], [2])]), "certified")
    rec = RUNS[method](oracle, seed=np.int64(3), verify=np.int64(2))
    # verify fresh sequences per subspace (inside Thm 4.1) and for the whole model
    per_call = 2 if method == "canonical" else 2 * (1 + 1)
    assert rec.seed == 3 and rec.verification_queries == per_call
    with pytest.raises(InvalidArgument, match="oracle"):
        RUNS[method](MultiHeadAttention([([[1]], [2])]))


# ---------------------------------------------------------------------------------------
# Counterexamples: certificates of kind "counterexample".
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_counterexample_certificate_round_trip(kind: str, tmp_path: Path) -> None:
    pair = counterexample("multi-head", d=2, heads=2, kind=kind, seed=1)
    path = tmp_path / "cx.json"
    data = pair.certificate(path)
    check = va.verify_certificate(path)
    assert check.ok and check.kind == "counterexample" and check.theorem == "prop-7.1"
    assert len(data["sequences"]) == len(pair.proof.concrete)
    # Tampered: a model entry (the structure then fails), the proof data, a recorded verdict.
    bad = copy.deepcopy(data)
    bad["second"][0]["v"][0] = "99/1"
    with pytest.raises(CertificateError):
        va.verify_certificate(bad)
    bad = copy.deepcopy(data)
    bad["proof"]["groups"][0]["first_v"][0] = "99/1"
    with pytest.raises(CertificateError, match=r"proof\.groups"):
        va.verify_certificate(bad)
    bad = copy.deepcopy(data)
    bad["equal"][0] = False
    with pytest.raises(CertificateError, match="equal"):
        va.verify_certificate(bad)
    bad = copy.deepcopy(data)
    bad["second"] = copy.deepcopy(bad["first"])
    with pytest.raises(CertificateError, match="not a counterexample"):
        va.verify_certificate(bad)


def test_counterexample_with_a_different_map_is_refused() -> None:
    # A consistent-looking file whose pair is NOT one map: the exact evaluation refuses it
    # even when the structural data are rewritten to match.
    pair = counterexample("multi-head", d=2, heads=2, kind="permutation", seed=0)
    data = pair.certificate()
    data["second"][0]["v"][0] = "5/1"
    data["proof"]["groups"] = [{**g, "second_v": g["first_v"]} for g in data["proof"]["groups"]]
    with pytest.raises(CertificateError):
        va.verify_certificate(data)


def test_counterexample_bad_arguments() -> None:
    with pytest.raises(InvalidArgument, match="seed"):
        counterexample("multi-head", d=2, heads=2, kind="permutation", seed=-1)
    assert counterexample("multi-head", d=1, heads=2, kind="permutation", seed=np.int64(2))


# ---------------------------------------------------------------------------------------
# Hostile certificate files: each a CertificateError, each fast.
# ---------------------------------------------------------------------------------------


def _hostile(base: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []

    def edit(label: str, fn: Callable[[dict[str, Any]], None]) -> None:
        data = copy.deepcopy(base)
        fn(data)
        out.append((label, data))

    edit("d as a string", lambda c: c.update(d="2"))
    edit("huge d", lambda c: c.update(d=10**100))
    edit("huge H0", lambda c: c.update(H0=10**9))
    edit("huge precision", lambda c: c.update(working_precision=10**9))
    edit("method unknown", lambda c: c.update(method="eval('1')"))
    edit("truncated F", lambda c: c["answers"]["F"].pop())
    edit("truncated row", lambda c: c["answers"]["F"][0].pop())
    edit("answers not a dict", lambda c: c.update(answers=[1, 2]))
    edit("heads not a list", lambda c: c["result"].update(heads="W"))
    edit("huge exponent", lambda c: c["answers"]["F0"].__setitem__(0, {"rational": "1e999999"}))
    edit(
        "non-positive scale", lambda c: c["answers"]["F0"].__setitem__(0, {"arb": ["1/1", "-1/1"]})
    )
    edit("deep nesting", lambda c: c["answers"].update(ties=[[[[[[[[[[[]]]]]]]]]]]))
    edit(
        "ties pair out of range",
        lambda c: c["answers"].update(ties=[{"k": 99, "j": 1, "answer": 0}]),
    )
    edit("missing design", lambda c: c.pop("design"))
    return out


def test_hostile_canonical_certificates_are_refused_fast() -> None:
    rec, _ = _learn("canonical-plain", "certified")
    for label, data in _hostile(rec.certificate()):
        start = time.perf_counter()
        with pytest.raises(CertificateError):
            va.verify_certificate(data)
        assert time.perf_counter() - start < 15.0, label  # a hang guard, not a speed target


def test_hostile_orthogonal_and_counterexample_certificates(tmp_path: Path) -> None:
    rec, _ = _learn("orthogonal", "exact")
    base = rec.certificate()
    cases = [
        {**base, "subspaces": "x"},
        {**base, "subspaces": [{"basis": [["1/1"]] * 10**5, "certificate": None}]},
        {**base, "subspaces": base["subspaces"][:1]},
        {**base, "subspaces": [{**base["subspaces"][0], "certificate": 3}, base["subspaces"][1]]},
    ]
    cx = counterexample("multi-head", d=2, heads=2, kind="permutation").certificate()
    cases += [
        {**cx, "d": 10**50},
        {**cx, "sequences": [[["1/1", "1/1"]] * 10**6]},
        {**cx, "first": [{"W": [["1/1"]], "v": ["1/1"]}]},
        {**cx, "proof": {"groups": "none"}},
    ]
    for data in cases:
        start = time.perf_counter()
        with pytest.raises(CertificateError):
            va.verify_certificate(data)
        assert time.perf_counter() - start < 15.0  # a hang guard, not a speed target
    truncated = tmp_path / "cut.json"
    truncated.write_text(json.dumps(base)[:-40])
    with pytest.raises(CertificateError, match="JSON"):
        va.verify_certificate(truncated)


def test_golden_counts_written_out() -> None:
    # The counts the table relies on, as formulas (no change in this port).
    assert canonical_query_bound(2, 2) == 22 and canonical_query_limit(2, 2) == 24
    assert canonical_query_bound(2, 2, affine=True) == 31
    assert orthogonal_query_bound([2, 1]) == 8


@pytest.mark.parametrize("arith", ["exact", "certified"])
def test_max_heads_certificate_refinds_the_degree(arith: str) -> None:
    # Only an upper bound: the checker re-finds the degree (2 canonical heads of 3 given)
    # the way the learner did, and the merged canonical heads.
    pair = counterexample("multi-head", d=2, heads=3, kind="shared-score-split", seed=2)
    rec = learn_multi_head(va.Oracle(pair.first, arith), max_heads=3)
    assert rec.heads == canonical_form(pair.second).heads and len(rec.heads) == 2
    data = rec.certificate()
    assert data["heads_given"] is False and data["H0"] == 3
    assert va.verify_certificate(data).ok
    forged = copy.deepcopy(data)
    forged["heads_given"] = True  # then the degree is H0 = 3 and the system is singular
    with pytest.raises(CertificateError):
        va.verify_certificate(forged)
    fewer = copy.deepcopy(data)
    fewer["result"]["heads"].pop()
    with pytest.raises(CertificateError, match="claims 1 heads"):
        va.verify_certificate(fewer)
