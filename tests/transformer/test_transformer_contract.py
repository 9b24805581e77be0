"""The result contract for the transformer room's learners, over a table of small instances.

Every (instance, learner, arithmetic) case: ``rec.model`` equals the truth on sequences the
learner never asked (==, exact arithmetic), the counts add up on the oracle object, the
summary and ``to_dict`` work, the certificate round-trips through a JSON file, and tampered
copies (an answer, a design entry, a result entry, a count) are each rejected. Then
``verify=0``, out-of-class boxes, bad arguments and hostile certificate files.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import flint
import numpy as np
import pytest
import sympy

import verified_attn as va
from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
)
from verified_attn.models import OneLayerTransformer, ReluFFN
from verified_attn.recovery import ReluFFNRecovery, TransformerRecovery
from verified_attn.transformer import learn_relu_ffn, learn_transformer
from verified_attn.transformer.claims import random_ffn, random_transformer

# A hostile certificate must be refused this fast (seconds): a checker never hangs.
FAST = 15.0  # a hang guard, not a speed target (speed lives in benchmarks/)


@dataclass(frozen=True)
class Case:
    name: str
    truth: Any
    learner: str  # "relu", "paper" or "direct"
    arithmetic: str

    def learn(self, oracle: va.Oracle, **kwargs: Any) -> Any:
        if self.learner == "relu":
            return learn_relu_ffn(oracle, **kwargs)
        return learn_transformer(oracle, method=self.learner, **kwargs)


def _instances() -> list[tuple[str, Any, tuple[str, ...]]]:
    ffn_small = ReluFFN([[1, -1, 2], [2, 1, 0]], [3, -1, 2])
    ffn_random = random_ffn(3, 5, np.random.default_rng(5))  # dead, duplicate, antipodal
    t_small = OneLayerTransformer(
        [[1, Fraction(-1, 2)], [2, 0]], [[1, 1], [0, 2]], [[1, -1, 2], [0, 1, -1]], [2, 1, -1]
    )
    t_random = random_transformer(2, 3, np.random.default_rng(3))
    return [
        ("ffn-small", ffn_small, ("relu",)),
        ("ffn-random", ffn_random, ("relu",)),
        ("T-small", t_small, ("paper", "direct")),
        ("T-random", t_random, ("paper", "direct")),
    ]


CASES = [
    Case(f"{name}-{learner}-{arith}", truth, learner, arith)
    for name, truth, learners in _instances()
    for learner in learners
    for arith in ("exact", "certified")
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c.name)
def run(request: pytest.FixtureRequest) -> tuple[Case, va.Oracle, Any]:
    case: Case = request.param
    oracle = va.Oracle(case.truth, case.arithmetic)
    return case, oracle, case.learn(oracle, seed=1)


def _fresh(d: int, learner: str) -> list[np.ndarray]:
    """Sequences other than the learner's (entries k/3; a seed none of them uses)."""
    rng = np.random.default_rng(99)
    lengths = (1, 2, 3, 5) if learner != "relu" else (1, 1, 2, 4)
    return [rng.integers(-6, 7, (n, d)) / 3 for n in lengths]


def test_model_equals_the_truth_on_fresh_sequences(run: tuple[Case, va.Oracle, Any]) -> None:
    case, _, rec = run
    want_type = ReluFFN if case.learner == "relu" else OneLayerTransformer
    assert isinstance(rec.model, want_type)
    assert isinstance(rec, ReluFFNRecovery if case.learner == "relu" else TransformerRecovery)
    assert rec.exact and rec.verified
    for X in _fresh(case.truth.d, case.learner):
        assert rec.model.evaluate(X, "exact") == case.truth.evaluate(X, "exact")
        got = rec.model.evaluate(X, "certified")
        assert got.overlaps(flint.arb(case.truth.evaluate(X, "certified")))


def test_parameters_and_accessors(run: tuple[Case, va.Oracle, Any]) -> None:
    case, _, rec = run
    d = case.truth.d
    keys = {"A", "w_o"} if case.learner == "relu" else {"W", "v_eff", "A", "w_o"}
    assert set(rec.parameters) == keys
    assert all(isinstance(v, sympy.MatrixBase) for v in rec.parameters.values())
    assert rec.A == rec.model.A and rec.w_o == rec.model.w_o
    if case.learner != "relu":
        assert rec.W == case.truth.W and rec.v_eff == case.truth.v_eff
        assert rec.model.W == rec.W
        assert rec.theorem == f"transformer/{case.learner}"
        attention = 2 * (d * d + d) if case.learner == "paper" else d * d
        assert rec.attention_bound == attention == rec.attention_queries
        assert rec.queries == rec.attention_queries + rec.ffn_queries
        assert rec.parameter_count == d * d + rec.network.width * (d + 1)
        assert rec.bound == attention + va.transformer.ffn_query_bound(d, rec.network.width)
    else:
        assert rec.theorem == "ffn/relu"
        assert rec.parameter_count == rec.width * (d + 1)
        assert rec.bound == va.transformer.ffn_query_bound(d, rec.width)
    # The bound is a formula the learner is held to, not the measured count.
    assert rec.queries <= rec.bound


def test_counts_add_up_on_the_oracle(run: tuple[Case, va.Oracle, Any]) -> None:
    _, oracle, rec = run
    assert oracle.queries == rec.queries + rec.verification_queries
    assert oracle.queries_by_phase == rec.queries_by_phase
    declared = sum(rec.queries_by_phase[p] for p in rec.verification_phases)
    assert declared == rec.verification_queries
    assert rec.tokens_sent == oracle.tokens_sent and rec.max_length == oracle.max_length


def test_summary_and_to_dict(run: tuple[Case, va.Oracle, Any]) -> None:
    _, _, rec = run
    text = rec.summary()
    assert f"{rec.queries} learning queries" in text
    assert f"{rec.verification_queries} verification" in text
    assert f"bound {rec.bound}" in text and "verified: True" in text
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["queries"]["learning"] == rec.queries
    assert data["kind"] == rec.kind


def test_certificate_round_trip(run: tuple[Case, va.Oracle, Any], tmp_path: Path) -> None:
    _, _, rec = run
    path = tmp_path / "cert.json"
    rec.certificate(path)
    check = va.verify_certificate(path)
    assert check.ok and check.kind == rec.kind and check.theorem == rec.theorem
    assert any("verification: " in line for line in check.summary)


# -- tampering ---------------------------------------------------------------------------


def _bump(num: dict[str, Any]) -> dict[str, Any]:
    """A stored number changed by 1 (whatever its kind)."""
    if "rational" in num:
        return {"rational": str(Fraction(num["rational"]) + 1)}
    if "arb" in num:
        mid, rad = num["arb"]
        return {"arb": [str(Fraction(mid) + 1), rad]}
    return {"rational": "12345/1"}  # a SymPy expression replaced by another number


def _tamper_answer(case: Case, data: dict[str, Any]) -> None:
    if case.learner == "relu":
        data["answers"][0]["y"] = _bump(data["answers"][0]["y"])
    elif case.learner == "paper":
        pair = data["attention"]["pairs"]["W"][0][0]
        pair[0] = _bump(pair[0])
    else:
        data["attention"]["answers"][0][0] = _bump(data["attention"]["answers"][0][0])


def _tamper_design(case: Case, data: dict[str, Any]) -> None:
    if case.learner == "relu":
        x = data["answers"][-1]["x"]
        x[0] = str(Fraction(x[0]) + 1)
    elif case.learner == "paper":
        U = data["attention"]["head"]["design"]["U"]
        U[0][0] = str(Fraction(U[0][0]) + 1)
    else:
        data["attention"]["t"] = str(Fraction(data["attention"]["t"]) / 2)


def _tamper_result(case: Case, data: dict[str, Any]) -> None:
    if case.learner == "relu":
        data["result"]["linear"][0] = str(Fraction(data["result"]["linear"][0]) + 1)
    else:
        W = data["result"]["parameters"]["W"]
        W[0][0] = str(Fraction(W[0][0]) + 1)


def _tamper_count(case: Case, data: dict[str, Any]) -> None:
    phase = (
        "ffn"
        if case.learner == "relu"
        else f"attention-{'v' if case.learner == 'paper' else 'direct'}"
    )
    data["queries"]["by_phase"][phase] += 1
    data["queries"]["learning"] += 1  # consistent with the phases, not with the answers


def _tamper_ffn_answer(case: Case, data: dict[str, Any]) -> None:
    ffn = data if case.learner == "relu" else data["ffn"]
    ffn["answers"][0]["y"] = _bump(ffn["answers"][0]["y"])


def _tamper_verification(case: Case, data: dict[str, Any]) -> None:
    answers = data["verification"]["answers"]
    answers[-1] = _bump(answers[-1])


TAMPERS: dict[str, Callable[[Case, dict[str, Any]], None]] = {
    "answer": _tamper_answer,
    "design": _tamper_design,
    "result": _tamper_result,
    "count": _tamper_count,
    "ffn-answer": _tamper_ffn_answer,
    "verification-answer": _tamper_verification,
    "seed": lambda case, data: data.update(seed=data["seed"] + 1),
    # Dropping what a certified result rests on claims too much (exact results rest on none).
    "assumptions": lambda case, data: data.update(assumptions=[]),
}


@pytest.mark.parametrize("what", sorted(TAMPERS))
def test_a_tampered_certificate_is_rejected(run: tuple[Case, va.Oracle, Any], what: str) -> None:
    case, _, rec = run
    data = copy.deepcopy(rec.certificate())
    assert va.verify_certificate(copy.deepcopy(data)).ok  # the untouched copy passes
    if what == "assumptions" and not data["assumptions"]:
        pytest.skip("an exact result rests on no assumption")
    TAMPERS[what](case, data)
    with pytest.raises(CertificateError):
        va.verify_certificate(data)


def test_tampered_claimed_v_eff_and_ffn_weights_are_rejected() -> None:
    T = random_transformer(2, 3, np.random.default_rng(3))
    data = learn_transformer(va.Oracle(T, "exact"), method="direct").certificate()
    for path in (("v_eff", 0), ("w_o", 0)):
        bad = copy.deepcopy(data)
        entries = bad["result"]["parameters"][path[0]]
        entries[path[1]] = str(Fraction(entries[path[1]]) + 1)
        with pytest.raises(CertificateError):
            va.verify_certificate(bad)


# -- verify=0, out-of-class boxes, bad arguments ------------------------------------------


@pytest.mark.parametrize("learner", ["relu", "paper", "direct"])
def test_verify_zero_is_not_verified(learner: str) -> None:
    truth: Any = (
        ReluFFN([[1, -1], [2, 1]], [3, -1])
        if learner == "relu"
        else random_transformer(2, 3, np.random.default_rng(3))
    )
    case = Case("v0", truth, learner, "exact")
    oracle = va.Oracle(truth, "exact")
    rec = case.learn(oracle, verify=0)
    assert rec.verified is False and rec.verification_queries == 0
    assert oracle.queries == rec.queries
    assert "NOT verified" in rec.summary()
    check = va.verify_certificate(rec.certificate())
    assert check.ok
    assert any("not verified" in line for line in check.summary)
    # Claiming verification without stored answers is refused.
    data = copy.deepcopy(rec.certificate())
    data["verified"] = True
    with pytest.raises(CertificateError):
        va.verify_certificate(data)


class _Quadratic:
    """Not a ReLU network: g(x) = (sum x)^2, with exact rational answers."""

    d = 2
    model_class = None

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        return np.asarray(Xs)[:, -1, :].sum(axis=1) ** 2

    def evaluate_rational(self, Xq: flint.fmpq_mat, arith: Any) -> Any:
        s = sum(Xq[Xq.nrows() - 1, k] for k in range(self.d))
        return sympy.Rational(int((s * s).p), int((s * s).q))


def test_out_of_class_boxes() -> None:
    with pytest.raises(ModelClassMismatch):
        learn_relu_ffn(va.Oracle(_Quadratic(), "exact"), attempts=2)
    affine = va.SingleHeadAttention([[1, -1], [2, 1]], [3, -2], beta=1)
    for method in ("paper", "direct"):
        with pytest.raises(ModelClassMismatch):
            learn_transformer(va.Oracle(affine, "exact"), method=method)
    ffn = ReluFFN([[1, -1], [2, 1]], [3, -1])  # reads only the last token: no attention
    for method in ("paper", "direct"):
        with pytest.raises(ModelClassMismatch):
            learn_transformer(va.Oracle(ffn, "exact"), method=method)
    flat = OneLayerTransformer([[1, 2], [0, 1]], [[1, 0], [0, 1]], [[1, -1], [0, 0]], [1, 1])
    with pytest.raises(NotIdentifiable):  # v_eff = 0: the truth, not a mismatch
        learn_transformer(va.Oracle(flat, "exact"), method="paper")


@pytest.mark.parametrize("learner", ["relu", "paper"])
def test_bad_arguments(learner: str) -> None:
    truth: Any = (
        ReluFFN([[1, -1]], [1, 2])
        if learner == "relu"
        else random_transformer(1, 2, np.random.default_rng(0))
    )
    case = Case("bad", truth, learner, "exact")
    for kwargs in ({"seed": -1}, {"verify": -1}, {"verify": True}, {"seed": 1.5}, {"lengths": []}):
        with pytest.raises(InvalidArgument):
            case.learn(va.Oracle(truth, "exact"), **kwargs)
    rec = case.learn(va.Oracle(truth, "exact"), seed=np.int64(3))
    assert rec.seed == 3 and type(rec.seed) is int
    with pytest.raises(InvalidArgument):
        case.learn(truth)  # a model, not an oracle


# -- hostile certificates -------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs() -> dict[str, dict[str, Any]]:
    T = random_transformer(2, 3, np.random.default_rng(3))
    return {
        "relu": learn_relu_ffn(
            va.Oracle(ReluFFN([[1, -1], [2, 1]], [3, -1]), "certified")
        ).certificate(),
        "paper": learn_transformer(va.Oracle(T, "certified"), method="paper").certificate(),
        "direct": learn_transformer(va.Oracle(T, "exact"), method="direct").certificate(),
    }


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    cur: Any = data
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur[k]
    last = keys[-1]
    if isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value


def _nested(depth: int) -> Any:
    out: Any = 1
    for _ in range(depth):
        out = [out]
    return out


HOSTILE: list[tuple[str, str, Any]] = [
    ("relu", "d", "2"),
    ("relu", "d", 10**100),
    ("relu", "grid", 10**50),
    ("relu", "attempts", 10**9),
    ("relu", "denominator_bound", 10**100000),
    ("relu", "answers", "many"),
    ("relu", "answers.0", [1, 2]),
    ("relu", "answers.0.x", [Fraction(1, 2).__str__()]),  # truncated: d entries expected
    ("relu", "answers.0.y", {"arb": ["1/1", "-1/1"]}),  # negative radius
    ("relu", "answers.0.y", {"arb": ["1/" + "9" * 30000, "0/1"]}),  # too many digits
    ("relu", "result.neurons", 5),
    ("relu", "result.neurons.0.n", _nested(100000)),
    ("relu", "result.A", [["1/1"]]),  # truncated
    ("relu", "result.linear", ["1e999999999", "0"]),
    ("relu", "queries.by_phase", []),
    ("relu", "verification.count", 10**40),
    ("relu", "verification.lengths", [10**9]),
    ("paper", "attention", None),
    ("paper", "attention.pairs.W", [[]]),
    ("paper", "attention.pairs.v.0", [{"arb": ["1/1", "0/1"]}]),  # a pair cut short
    ("paper", "attention.head", {"format": "verified-attn-certificate/2"}),
    ("paper", "attention.head.d", 3),
    ("paper", "attention.head.design.scales.0.0", "1/0"),
    ("paper", "ffn.d", 10**6),
    ("paper", "ffn", "not a certificate"),
    ("paper", "method", ["paper"]),
    ("direct", "attention.t", "-1/2"),
    ("direct", "attention.base", [["1/1", "0/1"]]),
    ("direct", "attention.answers.0.0", {"sympy": "__import__('os').system('true')"}),
    ("direct", "attention.answers.0.0", {"sympy": "Pow(Integer(10), Integer(10000000))"}),
    ("direct", "result.parameters.W", "W"),
]


@pytest.mark.parametrize(
    ("which", "path", "value"), HOSTILE, ids=[f"{w}-{p}-{i}" for i, (w, p, _) in enumerate(HOSTILE)]
)
def test_hostile_certificate_is_refused_fast(
    certs: dict[str, dict[str, Any]], which: str, path: str, value: Any
) -> None:
    data = copy.deepcopy(certs[which])
    _set(data, path, value)
    start = time.perf_counter()
    with pytest.raises(CertificateError):
        va.verify_certificate(data)
    assert time.perf_counter() - start < FAST


@pytest.mark.parametrize("which", ["relu", "paper", "direct"])
def test_truncated_file_and_dropped_answers(
    certs: dict[str, dict[str, Any]], which: str, tmp_path: Path
) -> None:
    text = json.dumps(certs[which])
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(CertificateError):
        va.verify_certificate(path)
    data = copy.deepcopy(certs[which])
    ffn = data if which == "relu" else data["ffn"]
    ffn["answers"].pop()  # one recorded answer fewer than the learning count
    with pytest.raises(CertificateError):
        va.verify_certificate(data)


def test_the_checker_imports_no_learner() -> None:
    """The checker is the trusted core: it may use core modules, never the room's learners."""
    import ast

    import verified_attn.certificates.transformer as checker

    tree = ast.parse(Path(checker.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    learners = (
        "verified_attn.transformer",
        "verified_attn.exact_recovery",
        "verified_attn.probing",
    )
    assert not [m for m in imported if m.startswith(learners)], imported
    assert "verified_attn.certificates.single_head" in imported  # the core head checker
