"""The result contract for ``learn_single_head`` (issue 10), over a table of instances.

For every small instance (plain and affine) and every arithmetic: the learned
``rec.model`` agrees with the truth on sequences the learner never saw, the counts add up
on the oracle, ``summary()``/``to_dict()`` work, the certificate round-trips through a
file and each kind of tampering is caught; ``verify=0`` is never called verified; an
out-of-class box and bad arguments are refused with our errors.
"""

from __future__ import annotations

import copy
import json
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import flint
import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
)
from verified_attn.exact_recovery import query_bound
from verified_attn.recovery import SingleHeadRecovery

F = Fraction
INSTANCES = {
    "d1": va.SingleHeadAttention([[2]], [3]),
    # v_0 = 0: the default design has to mix coordinates.
    "d2": va.SingleHeadAttention([[F(1, 2), -2], [3, F(-1, 3)]], [0, 5]),
    "d3": va.SingleHeadAttention([[1, 0, -1], [2, F(1, 4), 0], [0, -3, 1]], [1, -2, F(1, 2)]),
    "d2-affine": va.SingleHeadAttention(
        [[F(1, 2), -2], [3, 0]], [0, 5], c=[1, F(-1, 3)], beta=F(2, 7)
    ),
    "d3-affine": va.SingleHeadAttention(
        [[0, 1, 0], [1, 0, 2], [-1, 1, 1]], [2, 0, -1], c=[0, 1, -1], beta=-3
    ),
}
ARITHMETICS = ("exact", "certified", "float")
CASES = [(name, a) for name in INSTANCES for a in ARITHMETICS]


def _fresh(d: int, count: int = 6) -> list[np.ndarray]:
    """Sequences other than the learner's (its verification uses seed 0, entries +-1/2, 1)."""
    rng = np.random.default_rng(99)
    return [rng.integers(-4, 5, size=(int(n), d)) / 4 for n in rng.integers(1, 7, size=count)]


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], tuple[va.Oracle, SingleHeadRecovery]]:
    out = {}
    for name, arithmetic in CASES:
        oracle = va.Oracle(INSTANCES[name], arithmetic)
        out[name, arithmetic] = oracle, va.learn_single_head(oracle, seed=5)
    return out


@pytest.mark.parametrize(("name", "arithmetic"), CASES)
def test_model_agrees_with_the_truth_on_unseen_sequences(runs, name, arithmetic) -> None:
    truth = INSTANCES[name]
    _, rec = runs[name, arithmetic]
    model = rec.model
    assert isinstance(model, va.SingleHeadAttention)
    assert model.affine == truth.affine and model.d == truth.d
    for X in _fresh(truth.d):
        if arithmetic == "float":
            got, want = model.evaluate(X, "float"), truth.evaluate(X, "float")
            assert abs(got - want) <= 1e-9 * max(1.0, abs(want))
        else:
            # Exact and certified-reconstructed results are exact: compare exactly.
            assert rec.exact
            assert model.evaluate(X, "exact") == truth.evaluate(X, "exact")
            ball = model.evaluate(X, "certified")
            assert isinstance(ball, flint.arb) and ball.overlaps(truth.evaluate(X, "certified"))
    if arithmetic != "float":
        assert model.W == truth.W and model.v == truth.v
        if truth.affine:
            assert model.c == truth.c and model.beta == truth.beta


@pytest.mark.parametrize(("name", "arithmetic"), CASES)
def test_counts_add_up_on_the_oracle(runs, name, arithmetic) -> None:
    oracle, rec = runs[name, arithmetic]
    truth = INSTANCES[name]
    assert rec.queries + rec.verification_queries == oracle.queries
    assert sum(rec.queries_by_phase.values()) == oracle.queries
    assert rec.bound == query_bound(truth.d, affine=truth.affine) == rec.parameter_count
    # No probe saturates on these small instances: the count is exactly the bound.
    assert rec.queries == rec.bound
    assert rec.verification_queries == 8 and rec.verification_phases == ("verify",)
    assert rec.verified is True and rec.theorem == "thm-4.1"
    assert rec.exact is (arithmetic != "float")
    # A second call on the same oracle reports its own counts, not the total.
    again = va.learn_single_head(oracle, verify=2)
    assert again.queries == rec.bound and again.verification_queries == 2
    assert oracle.queries == 2 * rec.bound + 8 + 2


@pytest.mark.parametrize(("name", "arithmetic"), CASES)
def test_summary_and_to_dict(runs, name, arithmetic) -> None:
    _, rec = runs[name, arithmetic]
    text = rec.summary()
    assert f"{rec.queries} learning queries (bound {rec.bound}" in text
    assert f"{rec.verification_queries} verification" in text
    assert "verified: True" in text
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["kind"] == "single-head" and data["queries"]["learning"] == rec.queries
    assert data["queries"]["verification"] == rec.verification_queries
    assert set(data["parameters"]) == set(rec.parameters)


@pytest.mark.parametrize(("name", "arithmetic"), CASES)
def test_certificate_round_trip_and_tampering(tmp_path: Path, runs, name, arithmetic) -> None:
    _, rec = runs[name, arithmetic]
    path = tmp_path / "cert.json"
    rec.certificate(path)
    check = va.verify_certificate(path)
    assert check.ok and check.kind == "single-head" and check.theorem == "thm-4.1"
    data = json.loads(path.read_text())

    def tampered(edit: Any) -> None:
        bad = copy.deepcopy(data)
        edit(bad)
        with pytest.raises(CertificateError):
            va.verify_certificate(bad)

    def shift(obj: dict[str, Any]) -> dict[str, Any]:
        # Another number of the same kind, far beyond any rounding or radius.
        if "float" in obj:
            return {"float": (float.fromhex(obj["float"]) * 1.01 + 0.01).hex()}
        if "arb" in obj:
            mid = Fraction(obj["arb"][0]) + Fraction(1, 1000)
            return {"arb": [f"{mid.numerator}/{mid.denominator}", obj["arb"][1]]}
        return {"rational": "7/3"}

    d = data["d"]
    tampered(lambda c: c["answers"]["W"][d - 1].__setitem__(0, shift(c["answers"]["W"][d - 1][0])))
    tampered(lambda c: c["answers"]["v"].__setitem__(d - 1, shift(c["answers"]["v"][d - 1])))
    tampered(lambda c: c["design"]["U"][0].__setitem__(0, "3/1"))
    tampered(lambda c: c["design"]["scales"][0].__setitem__(0, "1/16"))
    params = data["result"]["parameters"]
    tampered(lambda c: c["result"]["parameters"]["W"][0].__setitem__(0, shift(params["W"][0][0])))
    tampered(lambda c: c["result"]["parameters"]["v"].__setitem__(0, shift(params["v"][0])))
    tampered(lambda c: c["queries"].update(learning=c["queries"]["learning"] + 1))
    tampered(lambda c: c["queries"].update(bound=c["queries"]["bound"] - 1))
    tampered(lambda c: c["queries"]["by_phase"].update(W=c["queries"]["by_phase"]["W"] + 1))
    answers = data["verification"]["answers"]
    tampered(lambda c: c["verification"]["answers"].__setitem__(3, shift(answers[3])))
    if data["affine"]:
        tampered(lambda c: c["answers"].update(beta=shift(c["answers"]["beta"])))
        tampered(lambda c: c["result"]["parameters"].update(beta=shift(params["beta"])))


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
@pytest.mark.parametrize("name", ["d2", "d2-affine"])
def test_verify_zero_is_not_verified(tmp_path: Path, name, arithmetic) -> None:
    oracle = va.Oracle(INSTANCES[name], arithmetic)
    rec = va.learn_single_head(oracle, verify=0)
    assert rec.verified is False and rec.verification_queries == 0
    assert oracle.queries == rec.queries == rec.bound
    assert "NOT verified" in rec.summary()
    path = tmp_path / "cert.json"
    rec.certificate(path)
    check = va.verify_certificate(path)
    assert check.ok
    assert any("not verified" in line for line in check.summary)
    # Claiming it verified is refused.
    data = json.loads(path.read_text())
    data["verified"] = True
    with pytest.raises(CertificateError, match="verified is True, but 0 verification"):
        va.verify_certificate(data)


@pytest.mark.parametrize("arithmetic", ARITHMETICS)
def test_out_of_class_boxes(arithmetic) -> None:
    # Two heads summed: the learning queries decode to *some* head, the fresh ones refute it.
    two = va.MultiHeadAttention(
        [
            va.SingleHeadAttention([[1, 0], [0, 1]], [1, 1]),
            va.SingleHeadAttention([[0, 2], [-1, 0]], [1, -1]),
        ]
    )
    with pytest.raises(ModelClassMismatch):
        va.learn_single_head(va.Oracle(two, arithmetic), affine=False)
    # v = 0: every answer is 0, W is not identifiable.
    with pytest.raises(NotIdentifiable):
        va.learn_single_head(
            va.Oracle(va.SingleHeadAttention([[1, 2], [3, 4]], [0, 0]), arithmetic)
        )


def test_a_float_box_that_is_not_a_head() -> None:
    oracle = va.Oracle.from_callable(lambda X: float(np.tanh(X).sum()) + 1.0, d=2)
    with pytest.raises(ModelClassMismatch):
        va.learn_single_head(oracle)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seed": -1}, "seed must be an int >= 0"),
        ({"seed": 1.5}, "seed must be an int"),
        ({"seed": True}, "seed must be an int"),
        ({"verify": -1}, "verify must be an int >= 0"),
        ({"verify": True}, "verify must be an int, got bool"),
        ({"verify": 2.0}, "verify must be an int"),
        ({"affine": "yes"}, "affine"),
        ({"lengths": []}, "lengths"),
        ({"lengths": [0]}, "lengths"),
        ({"denominator_bound": 0}, "denominator_bound"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    oracle = va.Oracle(INSTANCES["d2"], "exact")
    with pytest.raises(InvalidArgument, match=match):
        va.learn_single_head(oracle, **kwargs)
    assert oracle.queries == 0  # refused before any query


def test_numpy_int_seed_and_verify_are_accepted() -> None:
    rec = va.learn_single_head(
        va.Oracle(INSTANCES["d2"], "exact"), seed=np.int64(4), verify=np.int32(3)
    )
    assert rec.seed == 4 and type(rec.seed) is int and rec.verification_queries == 3
    assert va.verify_certificate(json.loads(json.dumps(rec.certificate()))).ok


def test_configuration_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        va.learn_single_head(va.Oracle(INSTANCES["d1"], "exact"), False)  # type: ignore[misc]


def test_not_an_oracle() -> None:
    with pytest.raises(InvalidArgument, match="oracle"):
        va.learn_single_head(INSTANCES["d1"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "edit",
    [
        lambda c: c.update(d="2"),
        lambda c: c.update(d=10**18),
        lambda c: c.update(seed=[1]),
        lambda c: c["queries"].update(learning=10**30),
        lambda c: c["verification"].update(count=10**15),
        lambda c: c["verification"].update(lengths=[10**12]),
        lambda c: c["answers"]["W"].pop(),
        lambda c: c["answers"]["W"][0].pop(),
        lambda c: c["design"]["U"].pop(),
        lambda c: c["result"]["parameters"]["v"].pop(),
        lambda c: c["verification"]["answers"].pop(),
        lambda c: c["result"].update(parameters=[]),
        lambda c: c["design"].update(scales="1/1"),
        lambda c: c["answers"]["v"].__setitem__(0, [[[]]]),
    ],
)
def test_hostile_edits_are_certificate_errors_fast(runs, edit) -> None:
    for arithmetic in ARITHMETICS:
        data = copy.deepcopy(json.loads(json.dumps(runs["d2", arithmetic][1].certificate())))
        edit(data)
        start = time.perf_counter()
        with pytest.raises(CertificateError):
            va.verify_certificate(data)
        assert time.perf_counter() - start < 15.0  # a hang guard, not a speed target
