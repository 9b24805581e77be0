"""The result contract for the noisy room: every learner x instance x inner arithmetic.

Each learner returns its Recovery subclass; the model is a float head inside the reported
box; counts add up on the oracle object; the certificate round-trips through a JSON file
and every tampered copy (an answer, a design entry, a result entry, a count) is rejected;
hostile certificate files fail fast with CertificateError.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.certificates import verify_certificate
from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
)
from verified_attn.noisy import learn_from_labels, learn_noisy, learn_stochastic
from verified_attn.noisy.verification import box_prediction
from verified_attn.oracle_wrappers import LabelOracle, NoisyOracle, StochasticOracle
from verified_attn.recovery import LabelRecovery, NoisyRecovery
from verified_attn.serialize import dump_number

INSTANCES = {
    "d1": va.SingleHeadAttention([[0.5]], [-1.5]),
    "d2": va.SingleHeadAttention([[0.25, -0.5], [0.5, 0]], [1, -2]),
    "d3": va.SingleHeadAttention(
        [[0.125, -0.25, 0], [0.25, 0, 0.125], [0, -0.125, 0.25]], [1.5, -1, 2]
    ),
}
TAU = 1e-3


def _noisy(model: Any, arith: str, **kw: Any) -> tuple[Any, Any]:
    oracle = NoisyOracle(va.Oracle(model, arith), TAU, seed=1)
    return oracle, learn_noisy(oracle, tolerance=TAU, w_bound=1, margin=1, **kw)


def _norm(model: Any, arith: str, **kw: Any) -> tuple[Any, Any]:
    oracle = NoisyOracle(va.Oracle(model, arith), TAU, "rounding")
    return oracle, learn_noisy(oracle, tolerance=TAU, w_bound=1, margin=1, design="norm", **kw)


def _stochastic(model: Any, arith: str, **kw: Any) -> tuple[Any, Any]:
    oracle = StochasticOracle(va.Oracle(model, arith), 1e-3, seed=2)
    rec = learn_stochastic(oracle, noise_scale=1e-3, target_error=0.05, w_bound=1, margin=1, **kw)
    return oracle, rec


def _labels(model: Any, arith: str, **kw: Any) -> tuple[Any, Any]:
    oracle = LabelOracle(va.Oracle(model, arith))
    return oracle, learn_from_labels(oracle, w_bound=1, bits=16, **kw)


LEARNERS: dict[str, Callable[..., tuple[Any, Any]]] = {
    "noisy": _noisy,
    "norm": _norm,
    "stochastic": _stochastic,
    "labels": _labels,
}
# The inner oracle's arithmetic: the noisy wrappers answer in floats whatever it is.
ARITHMETICS = ("exact", "certified", "float")
CASES = [
    (inst, learner, arith)
    for inst in INSTANCES
    for learner in LEARNERS
    for arith in ARITHMETICS
    # The stochastic learner repeats every query thousands of times: one arithmetic is
    # enough to exercise it (the wrapper adds float noise to the truth's midpoint).
    if not (learner == "stochastic" and arith != "float")
]
_RUNS: dict[tuple[str, str, str, int], tuple[Any, Any]] = {}


def run(inst: str, learner: str, arith: str, verify: int | None = None) -> tuple[Any, Any]:
    key = (inst, learner, arith, -1 if verify is None else verify)
    if key not in _RUNS:
        kw = {} if verify is None else {"verify": verify}
        _RUNS[key] = LEARNERS[learner](INSTANCES[inst], arith, **kw)
    return _RUNS[key]


def _truth(inst: str, learner: str) -> tuple[np.ndarray, np.ndarray]:
    p = INSTANCES[inst].float_parameters()
    v = p["v"] / abs(p["v"][0]) if learner == "labels" else p["v"]
    return p["W"], v


@pytest.mark.parametrize(("inst", "learner", "arith"), CASES)
def test_model_counts_summary_dict(inst: str, learner: str, arith: str) -> None:
    oracle, rec = run(inst, learner, arith)
    assert isinstance(rec, va.Recovery)
    assert isinstance(rec, LabelRecovery if learner == "labels" else NoisyRecovery)
    assert isinstance(rec.model, va.SingleHeadAttention) and not rec.exact
    assert rec.verified and rec.verification is not None
    W, v = _truth(inst, learner)
    box_W = (rec.enclosures["W"]["lower"], rec.enclosures["W"]["upper"])
    box_v = (rec.enclosures["v"]["lower"], rec.enclosures["v"]["upper"])
    assert ((box_W[0] <= W) & (W <= box_W[1])).all() and ((box_v[0] <= v) & (v <= box_v[1])).all()
    # On sequences the learner never used, the learned model and the (normalised) truth
    # both lie in the box's values, which are tight around the truth.
    truth = va.SingleHeadAttention(W, v)
    rng = np.random.default_rng(99)
    for n in (1, 2, 5, 9):
        X = rng.uniform(-1, 1, size=(n, INSTANCES[inst].d))
        lo, hi = box_prediction(X, box_W, box_v)
        got = rec.model.evaluate(X, "float")
        want = truth.evaluate(X, "float")
        assert float(lo) - 1e-12 <= got <= float(hi) + 1e-12
        assert float(lo) - 1e-12 <= want <= float(hi) + 1e-12
        assert abs(got - want) < 0.05
    # Counts: everything the call asked of the oracle, split by declared phases.
    assert rec.queries + rec.verification_queries == oracle.queries
    assert sum(rec.queries_by_phase.values()) == oracle.queries
    assert rec.verification_phases == ("verify",)
    assert rec.verification_queries == rec.queries_by_phase["verify"]
    assert rec.queries == rec.bound
    summary = rec.summary()
    assert f"{rec.queries} learning queries" in summary
    assert f"{rec.verification_queries} verification" in summary
    json.dumps(rec.to_dict())


def test_bound_is_the_formula() -> None:
    _, rec = run("d3", "noisy", "certified")
    assert rec.bound == 12 and rec.queries_by_phase == {"v": 3, "W": 9, "verify": 8}
    _, rec = run("d3", "labels", "certified")
    assert rec.bound == 2 * 3 + (3 - 1 + 9) * 16
    _, rec = run("d2", "stochastic", "float")
    assert rec.bound == rec.repeats * 6 and rec.repeats > 1


# ---------------------------------------------------------------------------------------
# Certificates: round trip and tampering.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("inst", "learner", "arith"), CASES)
def test_certificate_round_trip(inst: str, learner: str, arith: str, tmp_path: Path) -> None:
    _, rec = run(inst, learner, arith)
    path = tmp_path / "cert.json"
    rec.certificate(path)
    check = verify_certificate(path)
    assert check.ok and check.kind == rec.kind and check.theorem == rec.theorem
    assert any("verification:" in line for line in check.summary)
    if learner == "stochastic":
        assert any("probability" in line for line in check.summary)


def _bump(x: dict[str, str], by: float) -> dict[str, str]:
    return dump_number(float.fromhex(x["float"]) + by)


def _tamper_noisy(data: dict[str, Any], what: str) -> None:
    if what == "answer":
        row = data["answers"]["W"][0][0]
        row[0] = _bump(row[0], 1e-9)
    elif what == "v-answer":
        data["answers"]["v"][0][0] = _bump(data["answers"]["v"][0][0], 1e-9)
    elif what == "verification-answer":
        # Every repeat of one fresh answer moved by 2: beyond the prediction interval of the
        # (wide, stochastic) box at the fresh sequences' entries up to 2 in size.
        row = data["verification"]["answers"][1]
        row[:] = [_bump(a, 2.0) for a in row]
    elif what == "design":
        data["design"]["U"][0][0] = "2/1"
    elif what == "scale":
        data["design"]["b"] = "1/2"
    elif what == "tolerance":
        data["noise"]["tolerance"] = "1/2000"
    elif what == "result":
        W = data["result"]["parameters"]["W"]
        W[0][0] = _bump(W[0][0], 1e-15)
    elif what == "interval":
        lo = data["result"]["enclosures"]["v"]["lower"]
        lo[0] = _bump(lo[0], -1e-12)
    elif what == "error":
        err = data["result"]["enclosures"]["W_error"]
        err[0][0] = _bump(err[0][0], 1e-12)
    elif what == "count":
        data["queries"]["learning"] += 1
    elif what == "phase":
        data["queries"]["by_phase"]["W"] += 1
    elif what == "verified":
        data["verified"] = False


def _tamper_labels(data: dict[str, Any], what: str) -> None:
    flip = {
        dump_number(1.0)["float"]: dump_number(-1.0),
        dump_number(-1.0)["float"]: dump_number(1.0),
    }
    if what == "answer":
        row = data["answers"]["W"][0][0]
        row[-1] = flip[row[-1]["float"]]
    elif what == "v-answer":
        row = data["answers"]["v"][1]
        row[-1] = flip[row[-1]["float"]]
    elif what == "verification-answer":
        # Flip every fresh label: at least one is decided, so one contradicts the box.
        data["verification"]["answers"] = [
            flip[a["float"]] for a in data["verification"]["answers"]
        ]
    elif what == "design":
        data["labels"]["w_bound"] = "2/1"
    elif what == "scale":
        data["labels"]["bits"] += 1
    elif what == "tolerance":
        data["labels"]["threshold"] = "1/2"
    elif what == "result":
        W = data["result"]["parameters"]["W"]
        W[0][0] = _bump(W[0][0], 1e-15)
    elif what == "interval":
        lo = data["result"]["enclosures"]["v"]["lower"]
        lo[1] = _bump(lo[1], -1e-12)
    elif what == "error":
        hi = data["result"]["enclosures"]["W"]["upper"]
        hi[0][0] = _bump(hi[0][0], 1e-12)
    elif what == "count":
        data["queries"]["learning"] += 1
    elif what == "phase":
        data["queries"]["by_phase"]["W"] += 1
    elif what == "verified":
        data["verified"] = False


TAMPERS = (
    "answer",
    "v-answer",
    "verification-answer",
    "design",
    "scale",
    "tolerance",
    "result",
    "interval",
    "error",
    "count",
    "phase",
    "verified",
)


@pytest.mark.parametrize("learner", ["noisy", "norm", "stochastic", "labels"])
@pytest.mark.parametrize("what", TAMPERS)
def test_tampered_certificates_are_rejected(learner: str, what: str) -> None:
    arith = "float" if learner == "stochastic" else "certified"
    _, rec = run("d2", learner, arith)
    data = copy.deepcopy(rec.certificate())
    assert verify_certificate(copy.deepcopy(data)).ok
    (_tamper_labels if learner == "labels" else _tamper_noisy)(data, what)
    with pytest.raises(CertificateError):
        verify_certificate(data)


@pytest.mark.parametrize("learner", ["noisy", "stochastic", "labels"])
def test_verify_zero_is_not_verified_and_its_certificate_says_so(learner: str) -> None:
    arith = "float"
    oracle, rec = run("d2", learner, arith, verify=0)
    assert rec.verified is False and rec.verification is None
    assert rec.verification_queries == 0 and rec.queries == oracle.queries
    assert "NOT verified" in rec.summary()
    check = verify_certificate(rec.certificate())
    assert check.ok and any("NOT verified" in line for line in check.summary)
    data = rec.certificate()
    data["verified"] = True  # claiming verification with no fresh answers is refused
    with pytest.raises(CertificateError, match="verified"):
        verify_certificate(data)


# ---------------------------------------------------------------------------------------
# Out-of-class boxes and bad arguments.
# ---------------------------------------------------------------------------------------


def _not_a_head(model: va.SingleHeadAttention, flip: bool) -> va.Oracle:
    # Agrees with the head on lengths 1 and 2 (every learning query), not on longer ones.
    def fn(X: np.ndarray) -> float:
        y = model(X)
        if X.shape[0] < 3:
            return y
        return -y if flip else y + 0.5

    return va.Oracle.from_callable(fn, d=model.d)


def test_out_of_class_boxes_are_refused() -> None:
    model = INSTANCES["d2"]
    with pytest.raises(ModelClassMismatch) as info:
        learn_noisy(_not_a_head(model, False), tolerance=TAU, w_bound=1, margin=1)
    assert info.value.query is not None and info.value.query.shape[0] >= 3
    with pytest.raises(ModelClassMismatch) as info:
        learn_from_labels(LabelOracle(_not_a_head(model, True)), w_bound=1, bits=16)
    assert info.value.query.shape[0] >= 3
    with pytest.raises(NotIdentifiable, match="v = 0"):
        learn_from_labels(LabelOracle(va.Oracle(va.SingleHeadAttention([[1]], [0]))), w_bound=1)
    with pytest.raises(NotIdentifiable, match="margin"):
        tiny = va.SingleHeadAttention([[0.5, 0], [0, 0.25]], [2, 0.01])
        learn_noisy(NoisyOracle(va.Oracle(tiny), TAU), tolerance=TAU, w_bound=1, margin=1)


def _calls(oracle_of: Callable[[], Any]) -> dict[str, Callable[..., Any]]:
    return {
        "noisy": lambda **kw: learn_noisy(oracle_of(), tolerance=TAU, w_bound=1, margin=1, **kw),
        "stochastic": lambda **kw: learn_stochastic(
            oracle_of(), noise_scale=1e-4, target_error=0.05, w_bound=1, margin=1, **kw
        ),
        "labels": lambda **kw: learn_from_labels(
            LabelOracle(va.Oracle(INSTANCES["d1"])), w_bound=1, bits=8, **kw
        ),
    }


@pytest.mark.parametrize("learner", ["noisy", "stochastic", "labels"])
@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"seed": -1}, "seed"),
        ({"seed": 1.0}, "seed"),
        ({"verify": -1}, "verify"),
        ({"verify": True}, "verify"),
        ({"lengths": []}, "lengths"),
        ({"lengths": [5000]}, "lengths"),
    ],
)
def test_bad_arguments_raise_invalid_argument(learner: str, kwargs: dict, name: str) -> None:
    call = _calls(lambda: NoisyOracle(va.Oracle(INSTANCES["d1"]), TAU))[learner]
    with pytest.raises(InvalidArgument, match=name):
        call(**kwargs)


@pytest.mark.parametrize("learner", ["noisy", "stochastic", "labels"])
def test_numpy_integer_seed_and_verify_are_accepted(learner: str) -> None:
    call = _calls(lambda: NoisyOracle(va.Oracle(INSTANCES["d1"]), TAU))[learner]
    rec = call(seed=np.int64(3), verify=np.int32(2))
    assert rec.seed == 3 and type(rec.seed) is int and rec.verification.count == 2


def test_configuration_is_keyword_only() -> None:
    oracle = NoisyOracle(va.Oracle(INSTANCES["d1"]), TAU)
    with pytest.raises(TypeError):
        learn_noisy(oracle, TAU, 1, 1)  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# Hostile certificate files: each a CertificateError naming the field, fast.
# ---------------------------------------------------------------------------------------


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


HOSTILE_NOISY = [
    ("d", "3", "d"),
    ("d", 10**9, "d"),
    ("d", 10**400, "d"),
    ("noise.repeats", 10**100, "noise.repeats"),
    ("noise.repeats", 0, "noise.repeats"),
    ("noise.tolerance", "1/" + "9" * 5000, "noise.tolerance"),
    ("noise.tolerance", "-1/1000", "noise.tolerance"),
    ("noise.tolerance", 0.001, "noise.tolerance"),
    ("noise.w_bound", "1e999999999", "noise.w_bound"),
    ("design.interval_precision", 10**12, "design.interval_precision"),
    ("design.name", ["paper"], "design.name"),
    ("answers.W", "nope", "answers.W"),
    ("answers.W.0", [], "answers.W[0]"),
    ("answers.v.0", [], "answers.v[0]"),
    ("answers.v.0.0", {"float": "0x1p+99999999"}, "answers.v[0][0]"),
    ("answers.v.0.0", {"arb": ["1/1", "-1/1"]}, "answers.v[0][0]"),
    ("answers.v.0.0", {"float": "inf"}, "answers.v[0][0]"),
    ("result.enclosures.W.lower", [[]], "result.enclosures.W.lower"),
    ("verification.count", 10**12, "verification.count"),
    ("verification.lengths", [10**9], "verification.lengths"),
    ("verification.lengths", [4096], "verification"),
    ("verification.answers", [], "verification.answers"),
    ("queries.by_phase", [], "queries.by_phase"),
]

HOSTILE_LABELS = [
    ("d", "2", "d"),
    ("d", 10**9, "d"),
    ("labels.bits", 10**50, "labels.bits"),
    ("labels.bits", True, "labels.bits"),
    ("labels.w_bound", "0/1", "labels.w_bound"),
    ("labels.max_denominator", -3, "labels.max_denominator"),
    ("answers.signs.0", [{"float": "0x1p+0"}], "answers.signs[0]"),
    ("answers.signs.0.0", {"float": "0x1.8p+0"}, "answers.signs[0][0]"),
    ("answers.W.1.1", [], "answers.W[1][1]"),
    ("answers.v.1", None, "answers.v[1]"),
    ("answers.v.0", [], "answers.v[0]"),
    ("result.p", 10**30, "result.p"),
    ("verification.decided", 10**30, "verification.decided"),
    ("verification.rule", "overlap", "verification.rule"),
]


@pytest.mark.parametrize(("path", "value", "field"), HOSTILE_NOISY, ids=lambda x: str(x)[:30])
def test_hostile_noisy_certificates_fail_fast(path: str, value: Any, field: str) -> None:
    _, rec = run("d2", "noisy", "certified")
    data = copy.deepcopy(rec.certificate())
    _set(data, path, value)
    start = time.perf_counter()
    with pytest.raises(CertificateError) as info:
        verify_certificate(data)
    assert time.perf_counter() - start < 15.0  # a hang guard, not a speed target
    assert field.split("[")[0].split(".")[0] in str(info.value)


@pytest.mark.parametrize(("path", "value", "field"), HOSTILE_LABELS, ids=lambda x: str(x)[:30])
def test_hostile_labels_certificates_fail_fast(path: str, value: Any, field: str) -> None:
    _, rec = run("d2", "labels", "certified")
    data = copy.deepcopy(rec.certificate())
    _set(data, path, value)
    start = time.perf_counter()
    with pytest.raises(CertificateError) as info:
        verify_certificate(data)
    assert time.perf_counter() - start < 15.0  # a hang guard, not a speed target
    assert field.split("[")[0].split(".")[0] in str(info.value)


@pytest.mark.parametrize("kind", ["noisy", "labels"])
def test_truncated_and_non_object_files(kind: str, tmp_path: Path) -> None:
    learner = "noisy" if kind == "noisy" else "labels"
    _, rec = run("d2", learner, "certified")
    text = json.dumps(rec.certificate())
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(CertificateError, match="not valid JSON"):
        verify_certificate(path)
    data = rec.certificate()
    for section in ("answers", "result", "queries", "verification"):
        broken = copy.deepcopy(data)
        del broken[section]
        with pytest.raises(CertificateError, match=section):
            verify_certificate(broken)
    nested: Any = 0
    for _ in range(100_000):
        nested = [nested]
    broken = copy.deepcopy(data)
    broken["answers"]["W"] = nested
    with pytest.raises(CertificateError):
        verify_certificate(broken)
