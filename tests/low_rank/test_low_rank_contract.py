"""The result contract for the low-rank learners (Theorem 5.1), over a table of instances.

Every learner (skeleton with the rank found, skeleton with the rank given, nuclear) in
every arithmetic it supports: the learned model agrees with the truth on sequences the
learner never saw, the counts add up on the oracle, summary/to_dict work, the certificate
round-trips through a JSON file and every tampered copy is rejected; then verify=0,
out-of-class boxes, bad arguments and hostile certificate files.
"""

from __future__ import annotations

import copy
import json
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.certificates.kernel import parse_header
from verified_attn.certificates.low_rank import verify as verify_low_rank
from verified_attn.certificates.low_rank_cross import Cross
from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
)
from verified_attn.low_rank import learn_low_rank, skeleton_query_bound
from verified_attn.low_rank.claims import random_low_rank_head
from verified_attn.recovery import LowRankRecovery
from verified_attn.serialize import dump_number, load_number

INSTANCES = [(4, 1), (5, 2), (3, 3)]
# (learner id, arithmetic): the nuclear method is float only.
LEARNERS = [
    ("found", "exact"),
    ("found", "certified"),
    ("found", "float"),
    ("given", "exact"),
    ("given", "certified"),
    ("given", "float"),
    ("balls", "certified"),  # denominator_bound=1 < the true denominators: W, v stay balls
    ("nuclear", "float"),
]


def _model(d: int, r: int) -> va.SingleHeadAttention:
    """The first seeded head whose W has rank exactly r (deterministic)."""
    for seed in range(7 * d + r, 7 * d + r + 50):
        model = random_low_rank_head(d, r, seed, den=3)
        if np.linalg.matrix_rank(model.float_parameters()["W"]) == r:
            return model
    raise AssertionError(f"no rank-{r} head found")  # pragma: no cover


def _learn(kind: str, oracle: va.Oracle, r: int, **kw: Any) -> LowRankRecovery:
    if kind == "found":
        return learn_low_rank(oracle, **kw)
    if kind == "given":
        return learn_low_rank(oracle, rank=r, **kw)
    if kind == "balls":
        return learn_low_rank(oracle, rank=r, denominator_bound=1, **kw)
    d = oracle.d
    return learn_low_rank(oracle, rank=r, method="nuclear", measurements=d * d, **kw)


def _run(kind: str, arith: str, d: int, r: int, **kw: Any):
    model = _model(d, r)
    oracle = va.Oracle(model, arith)
    return model, oracle, _learn(kind, oracle, r, **kw)


CASES = [(k, a, d, r) for k, a in LEARNERS for d, r in INSTANCES]
IDS = [f"{k}-{a}-d{d}r{r}" for k, a, d, r in CASES]


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str, int, int], Any]:
    return {case: _run(*case) for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_model_agrees_with_truth_on_other_sequences(runs, case) -> None:
    model, _, rec = runs[case]
    kind, arith, d, r = case
    assert isinstance(rec, LowRankRecovery) and isinstance(rec, va.Recovery)
    assert isinstance(rec.model, va.SingleHeadAttention)
    rng = np.random.default_rng(99)  # not the learner's fresh sequences
    for n in (1, 2, 5, 9):
        X = rng.integers(-4, 5, (n, d)) / 4
        if rec.exact:
            assert rec.model.evaluate(X, "exact") == model.evaluate(X, "exact")
            assert rec.model.evaluate(X, arith) is not None
        else:
            got = float(rec.model.evaluate(X, arith))
            want = model(X)
            assert abs(got - want) <= 1e-8 * max(1.0, abs(want))
    assert rec.exact == (kind in ("found", "given") and arith != "float")
    if rec.exact:
        assert rec.W == model.W and rec.v == model.v
    if kind == "balls":
        lo, hi = rec.enclosures["W"]["lower"], rec.enclosures["W"]["upper"]
        truth = np.asarray(model.parameters()["W"].tolist(), dtype=object)
        assert all(lo[ix] <= truth[ix] <= hi[ix] for ix in np.ndindex(lo.shape))
        # No reconstruction; only the given rank's class check, a ball containing 0, is
        # stated (certified arithmetic cannot prove a residual is 0).
        # (a full-rank W has no test, so nothing is assumed).
        assert [a.split(":")[0] for a in rec.assumptions] == ([f"rank W <= {r}"] if r < d else [])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_counts_add_up_on_the_oracle(runs, case) -> None:
    _, oracle, rec = runs[case]
    kind, _, d, r = case
    assert oracle.queries == rec.queries + rec.verification_queries
    assert sum(rec.queries_by_phase.values()) == oracle.queries
    assert rec.verified and rec.verification.count == 8
    if kind == "nuclear":
        assert rec.bound == d + d * d
    elif kind == "found":
        assert rec.bound == skeleton_query_bound(d, r) == rec.queries
    else:
        assert rec.bound == skeleton_query_bound(d, r, rank_given=True) == rec.queries
        assert rec.bound == d + 2 * d * r - r * r
        assert rec.verification_queries == 8 + (1 if r < d else 0)
    # A second call on the same oracle counts its own queries only.
    before = oracle.queries
    again = _learn(kind, oracle, r)
    assert oracle.queries - before == again.queries + again.verification_queries
    assert again.queries == rec.queries


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_summary_and_to_dict(runs, case) -> None:
    _, _, rec = runs[case]
    text = rec.summary()
    assert f"{rec.queries} learning queries" in text
    assert f"{rec.verification_queries} verification" in text and "verified: True" in text
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["kind"] == "low-rank" and data["theorem"] == "thm-5.1"
    assert data["queries"]["learning"] == rec.queries and data["rank"] == rec.rank
    assert data["method"] == ("nuclear" if case[0] == "nuclear" else "skeleton")


def _bump(num: dict[str, Any]) -> dict[str, Any]:
    """A different number of the same kind (exact + 1, float and ball midpoint moved)."""
    x = load_number(num)
    if "rational" in num or "sympy" in num:
        return dump_number(x + 1)
    if "float" in num:
        # x + 1% of |x| (at least 0.01): always a different number (x * 1.01 + 0.01 is x
        # again at x = -1, a probe answer hypothesis found).
        return dump_number(x + max(0.01, abs(x) * 0.01))
    mid, rad = num["arb"]
    return {"arb": [str(Fraction(mid) + Fraction(1, 100)), rad]}


def _tamperings(data: dict[str, Any]) -> dict[str, Any]:
    out = {}
    t = copy.deepcopy(data)
    t["answers"]["probes"][0]["answer"] = _bump(t["answers"]["probes"][0]["answer"])
    out["answer"] = t
    t = copy.deepcopy(data)
    t["answers"]["v"][0] = _bump(t["answers"]["v"][0])
    out["answer v"] = t
    # The design: a probe's query as stored (its b, its u, its scale t). (The skeleton's
    # U, B, S are coordinates of the cross: what the answers prove does not depend on them,
    # so a change the probes still fit is no forgery; next_b decides which probes are
    # rank checks.)
    # Probes name their u and b in the table answers.vectors; a probe may also store a
    # vector inline: change one probe's vector inline, or a table entry (all its probes).
    for name in ("b", "u"):
        t = copy.deepcopy(data)
        probe = t["answers"]["probes"][0]
        vec = list(t["answers"]["vectors"][probe[name]])
        vec[0] = str(Fraction(vec[0]) + Fraction(1, 2))
        probe[name] = vec
        out[f"design {name}"] = t
        t = copy.deepcopy(data)
        vec = t["answers"]["vectors"][t["answers"]["probes"][0][name]]
        vec[0] = str(Fraction(vec[0]) + Fraction(1, 2))
        out[f"design {name} in the table"] = t
    t = copy.deepcopy(data)
    t["answers"]["probes"][0]["scale"] = "1/16"
    out["design scale"] = t
    if data.get("design", {}).get("next_b") is not None:
        t = copy.deepcopy(data)
        t["design"]["next_b"][0] = str(Fraction(t["design"]["next_b"][0]) + 1)
        out["design next_b"] = t
    t = copy.deepcopy(data)
    t["result"]["parameters"]["W"][0][0] = _bump(t["result"]["parameters"]["W"][0][0])
    out["result"] = t
    t = copy.deepcopy(data)
    t["queries"]["learning"] += 1
    out["count"] = t
    t = copy.deepcopy(data)
    t["queries"]["by_phase"]["v"] += 1
    t["queries"]["learning"] += 1
    out["phase count"] = t
    t = copy.deepcopy(data)
    t["queries"]["bound"] -= 1
    out["bound"] = t
    t = copy.deepcopy(data)
    t["verification"]["answers"][3] = _bump(t["verification"]["answers"][3])
    out["verification answer"] = t
    return out


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_certificate_round_trip_and_tampering(runs, case, tmp_path: Path) -> None:
    _, _, rec = runs[case]
    path = tmp_path / "cert.json"
    rec.certificate(path)
    check = va.verify_certificate(path)
    assert check.ok and check.kind == "low-rank" and check.theorem == "thm-5.1"
    assert any("verification: 8 fresh sequences" in line for line in check.summary)
    data = json.loads(path.read_text())
    for what, bad in _tamperings(data).items():
        with pytest.raises(CertificateError):
            va.verify_certificate(bad)
        assert what  # the label names the failing tampering in a traceback


def test_rank_check_tampering_is_caught() -> None:
    # The rank test (b = next_b) is a check, not an equation: tampering it must fail too.
    for arith in ("exact", "certified", "float"):
        _, _, rec = _run("given", arith, 5, 2)
        data = rec.certificate()
        (i,) = [k for k, p in enumerate(data["answers"]["probes"]) if p["phase"] == "rank"]
        data["answers"]["probes"][i]["answer"] = _bump(data["answers"]["probes"][i]["answer"])
        with pytest.raises(CertificateError, match=f"probes\\[{i}\\]"):
            verify_low_rank(data)


def test_certificate_without_rank_evidence_rejected() -> None:
    # Dropping the rank test (and its count) leaves no evidence that rank W <= r.
    for kind in ("found", "given"):
        _, _, rec = _run(kind, "exact", 5, 2)
        data = rec.certificate()
        probes = data["answers"]["probes"]
        table = data["answers"]["vectors"]
        (i,) = [k for k, p in enumerate(probes) if table[p["b"]] == data["design"]["next_b"]]
        del probes[i]
        q = data["queries"]
        q["by_phase"]["rank"] -= 1
        if kind == "given":
            del q["by_phase"]["rank"]
            q["verification_phases"].remove("rank")
            q["verification"] -= 1
        else:
            q["learning"] -= 1
        with pytest.raises(CertificateError, match="next_b"):
            verify_low_rank(data)


@pytest.mark.parametrize(("kind", "arith"), LEARNERS, ids=[f"{k}-{a}" for k, a in LEARNERS])
def test_verify_zero_is_not_verified(kind: str, arith: str) -> None:
    _, oracle, rec = _run(kind, arith, 4, 1, verify=0)
    assert not rec.verified and rec.verification is None
    assert "NOT verified" in rec.summary()
    assert oracle.queries == rec.queries + rec.verification_queries
    check = va.verify_certificate(json.loads(json.dumps(rec.certificate())))
    assert check.ok and any("not verified" in line for line in check.summary)
    data = rec.certificate()
    data["verified"] = True
    with pytest.raises(CertificateError, match="verified"):
        va.verify_certificate(data)


@pytest.mark.parametrize("arith", ["exact", "certified", "float"])
def test_over_rank_box_raises(arith: str) -> None:
    model = _model(5, 3)
    oracle = va.Oracle(model, arith)
    with pytest.raises(ModelClassMismatch, match="rank > 2"):
        learn_low_rank(oracle, rank=2)


def test_two_head_box_is_not_a_head() -> None:
    rng = np.random.default_rng(3)
    heads = [
        (rng.integers(-2, 3, (4, 4)), rng.integers(1, 3, 4)),
        (rng.integers(-2, 3, (4, 4)), rng.integers(-3, 0, 4)),
    ]
    box = va.MultiHeadAttention(heads)
    for arith in ("certified", "float"):
        with pytest.raises(ModelClassMismatch):
            learn_low_rank(va.Oracle(box, arith))


def test_nuclear_too_few_measurements_not_identifiable() -> None:
    with pytest.raises(NotIdentifiable):
        learn_low_rank(va.Oracle(_model(6, 3), "float"), method="nuclear", measurements=12)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"seed": -1}, "seed"),
        ({"verify": -1}, "verify"),
        ({"verify": True}, "verify"),
        ({"seed": True}, "seed"),
        ({"rank": np.float64(2)}, "rank"),
        ({"method": "nuclear", "rank": 1, "verify": -1}, "verify"),
        ({"method": "nuclear", "rank": 1, "seed": -3}, "seed"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], needle: str) -> None:
    oracle = va.Oracle(_model(4, 1), "float")
    with pytest.raises(InvalidArgument, match=needle):
        learn_low_rank(oracle, **kwargs)
    assert oracle.queries == 0


def test_numpy_integers_accepted() -> None:
    rec = learn_low_rank(va.Oracle(_model(4, 1), "exact"), rank=np.int64(1), seed=np.int64(3))
    assert rec.seed == 3 and rec.rank == 1 and type(rec.seed) is int
    assert va.verify_certificate(rec.certificate()).ok


def test_positional_configuration_refused() -> None:
    with pytest.raises(TypeError):
        learn_low_rank(va.Oracle(_model(4, 1), "exact"), 1)  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# Hostile certificates: each a CertificateError, each fast.
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs() -> dict[str, dict[str, Any]]:
    return {
        "skeleton": _run("given", "certified", 5, 2)[2].certificate(),
        "nuclear": _run("nuclear", "float", 4, 1)[2].certificate(),
    }


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    cur: Any = out
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur[k]
    last = keys[-1]
    if isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value
    return out


HOSTILE = [
    ("skeleton", "d", "5"),
    ("skeleton", "d", 10**100),
    ("skeleton", "rank", 10**30),
    ("skeleton", "rank", "two"),
    ("skeleton", "rank_given", -1),
    ("skeleton", "method", "svd"),
    ("skeleton", "method", {"x": 1}),
    ("skeleton", "theorem", "thm-4.1"),
    ("skeleton", "precision", 10**12),
    ("skeleton", "design.U", [[]]),
    ("skeleton", "design.U.0", ["1/1"] * 4),  # a truncated row
    ("skeleton", "design.basis", []),
    ("skeleton", "design.pivots", [0, 0]),
    ("skeleton", "design.pivots.0", 10**40),
    ("skeleton", "design.next_b", None),
    ("skeleton", "answers.probes", "many"),
    ("skeleton", "answers.probes.0", [1, 2]),
    ("skeleton", "answers.probes.0.scale", "0/1"),
    ("skeleton", "answers.probes.0.scale", "-1/16"),
    ("skeleton", "answers.probes.0.scale", "1/" + "9" * 5000),
    ("skeleton", "answers.probes.0.scale", "1/" + str(16**70)),
    ("skeleton", "answers.probes.0.u", ["1/1"]),
    ("skeleton", "answers.probes.0.u", 10**9),  # not an index of answers.vectors
    ("skeleton", "answers.probes.0.u", -1),
    ("skeleton", "answers.probes.0.b", True),
    ("skeleton", "answers.probes.0.b", 2.0),
    ("skeleton", "answers.vectors", "many"),
    ("skeleton", "answers.vectors.0", ["1/1"]),
    ("skeleton", "answers.vectors.0.0", "one half"),
    ("skeleton", "answers.probes.0.answer", {"arb": ["1/1", "-1/1"]}),
    ("skeleton", "answers.probes.0.answer", {"arb": ["1/1", "1/1"], "x": 1}),
    ("skeleton", "answers.probes.0.answer", {"arb": ["1e999999999", "0/1"]}),
    ("skeleton", "answers.probes.0.answer", {"float": "0x1p+0"}),  # wrong kind
    ("skeleton", "answers.probes.0.phase", {"deep": [[[[[]]]]]}),
    ("skeleton", "answers.v", [{"arb": ["1/1", "0/1"]}] * 3),
    ("skeleton", "result.parameters.W", [[{"rational": "1/1"}] * 5] * 4),
    ("skeleton", "result.parameters.extra", []),
    ("skeleton", "verification.count", 10**18),
    ("skeleton", "queries.by_phase.C", -4),
    ("nuclear", "measurements", 10**9),
    ("nuclear", "measurements", 0),
    ("nuclear", "arithmetic", "exact"),
    ("nuclear", "result.residual", {"float": "nan"}),
    ("nuclear", "result.residual", {"float": "0x1p-1"}),
    ("nuclear", "result.verification_error", {"float": "0x1p-1"}),
    ("nuclear", "result.verification_error", "big"),
    ("nuclear", "result.parameters.v.0", {"float": "0x1.8p+0"}),
    ("nuclear", "answers.probes.0.phase", "C"),
    ("nuclear", "answers.probes", []),
]


@pytest.mark.parametrize(
    ("which", "path", "value"), HOSTILE, ids=[f"{w}:{p}" for w, p, _ in HOSTILE]
)
def test_hostile_certificate_rejected_fast(certs, which: str, path: str, value: Any) -> None:
    bad = _set(certs[which], path, value)
    start = time.perf_counter()
    with pytest.raises(CertificateError):
        va.verify_certificate(bad)
    assert time.perf_counter() - start < 15.0  # a hang guard, not a speed target


def test_probe_table_larger_than_a_checker_reads_is_refused_fast(certs) -> None:
    # The bound counts the table's entries (d per vector) before parsing any of them.
    from verified_attn.certificates.kernel import MAX_ENTRIES

    bad = copy.deepcopy(certs["skeleton"])
    row = bad["answers"]["vectors"][0]
    bad["answers"]["vectors"] = [row] * (MAX_ENTRIES // len(row) + 1)  # one shared list
    start = time.perf_counter()
    with pytest.raises(CertificateError, match="more entries than a checker reads"):
        va.verify_certificate(bad)
    assert time.perf_counter() - start < 15.0  # a hang guard, not a speed target


def test_cross_is_solved_in_small_blocks() -> None:
    # The checker's elimination inverts one block per pivot row (at most r + 1 unknowns),
    # never the r^2-sized coupled system: what keeps a d = 768, r = 64 check cheap.
    for kind in ("found", "given"):
        _, _, rec = _run(kind, "certified", 12, 4)
        data = rec.certificate()
        cross = Cross(data, parse_header(data, "low-rank"))
        assert 0 < cross.coupled <= 4 + 1
        assert "blocks of at most" in verify_low_rank(rec.certificate()).summary[2]


def test_truncated_and_nested_files(certs, tmp_path: Path) -> None:
    text = json.dumps(certs["skeleton"])
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(CertificateError, match="not valid JSON"):
        va.verify_certificate(cut)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CertificateError):
        va.verify_certificate(deep)
    for missing in ("design", "answers", "result", "rank_tol", "queries"):
        bad = copy.deepcopy(certs["skeleton"])
        del bad[missing]
        with pytest.raises(CertificateError, match=missing):
            va.verify_certificate(bad)


@pytest.mark.parametrize(
    ("arith", "precision"), [("certified", 64), ("certified", 256), ("float", None)]
)
def test_saturating_probes_are_re_asked_and_counted(arith: str, precision: int | None) -> None:
    # Scores up to ~60: many probes saturate and are re-asked at t / 16; the rank test's
    # re-asks belong to its own (verification) phase "rank-rescale" when the rank is given.
    rng = np.random.default_rng(1)
    K, Q = rng.integers(-3, 4, (2, 6)), rng.integers(-3, 4, (2, 6))
    model = va.SingleHeadAttention(20 * K.T @ Q, rng.integers(1, 4, 6))
    oracle = va.Oracle(model, arith, precision=precision)
    rec = learn_low_rank(oracle, rank=2)
    assert oracle.queries == rec.queries + rec.verification_queries
    assert rec.queries == 6 + 2 * 6 * 2 - 4 + rec.queries_by_phase["rescale"]
    assert rec.verification_queries == 8 + 1 + rec.queries_by_phase.get("rank-rescale", 0)
    if "rank-rescale" in rec.queries_by_phase:
        assert "rank-rescale" in rec.verification_phases
    if rec.exact:
        assert rec.W == model.W
    else:
        W = model.float_parameters()["W"]
        assert np.abs(rec.model.float_parameters()["W"] - W).max() <= 1e-6 * np.abs(W).max()
    data = json.loads(json.dumps(rec.certificate()))
    assert va.verify_certificate(data).ok
    (i, probe) = next(
        (k, p) for k, p in enumerate(data["answers"]["probes"]) if p["scale"] != "1/1"
    )
    for scale in ("1/1", "1/" + str(16 * Fraction(probe["scale"]).denominator)):
        bad = copy.deepcopy(data)
        bad["answers"]["probes"][i]["scale"] = scale
        with pytest.raises(CertificateError):
            va.verify_certificate(bad)


@given(
    d=st.integers(2, 7),
    data=st.data(),
    seed=st.integers(0, 10**6),
    arith=st.sampled_from(["certified", "float"]),
    given_rank=st.booleans(),
)
def test_random_certificates_check_and_one_answer_changed_fails(
    d: int, data: st.DataObject, seed: int, arith: str, given_rank: bool
) -> None:
    r = data.draw(st.integers(1, d))
    model = random_low_rank_head(d, r, seed, den=int(seed % 5) + 1)
    true_rank = int(np.linalg.matrix_rank(model.float_parameters()["W"]))
    if given_rank and true_rank == 0:
        given_rank = False
    rec = learn_low_rank(va.Oracle(model, arith), rank=true_rank if given_rank else None, seed=seed)
    cert = json.loads(json.dumps(rec.certificate()))
    assert va.verify_certificate(cert).ok
    probes = cert["answers"]["probes"]
    k = data.draw(st.integers(0, len(probes) - 1))
    probes[k]["answer"] = _bump(probes[k]["answer"])
    with pytest.raises(CertificateError):
        va.verify_certificate(cert)
