"""A float64 single head is recovered to 2^-50 relative (issue 39's target), measured
against the box's own float64 parameters in exact rational arithmetic; the anchored probes
are what reach it (the wrong variant, anchor 1, falls short), and a certificate states,
and its checker re-decodes with, the anchor."""

from __future__ import annotations

import copy
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import CertificateError
from verified_attn.exact_recovery import extended_decode, learner

D = 64
#: Seeds the benchmarks do not use (benchmarks/single_head_bits.py and scale.py take
#: small seeds through another generator key).
SEEDS = (7101, 7102, 7103, 7104)
TARGET_BITS = 50.0


def _head(d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """W ~ N(0, 1/d), v ~ N(0, 1): the float64 numbers are the truth."""
    rng = np.random.default_rng([seed, d, 39])
    return rng.normal(0.0, d**-0.5, (d, d)), rng.normal(0.0, 1.0, d)


def _exact_bits(rec: Any, W: np.ndarray, v: np.ndarray) -> float:
    """-log2(max entry error / max entry magnitude) over W and v, each difference taken
    exactly (Fractions of the float64 numbers): independent of the learner's arithmetic."""
    got = np.concatenate([np.ravel(np.asarray(rec.W, dtype=np.float64)),
                          np.ravel(np.asarray(rec.v, dtype=np.float64))])
    truth = np.concatenate([np.ravel(W), np.ravel(v)])
    err = max(abs(Fraction(float(g)) - Fraction(float(t))) for g, t in zip(got, truth, strict=True))
    top = max(abs(Fraction(float(t))) for t in truth)
    ratio = err / top
    if ratio == 0:
        return float("inf")
    # log2 of a Fraction exactly enough: bit lengths, then the float of the remainder.
    shift = ratio.numerator.bit_length() - ratio.denominator.bit_length()
    mantissa = float(ratio / Fraction(2) ** shift)
    return -(shift + float(np.log2(mantissa)))


def _run(seed: int) -> tuple[Any, float]:
    W, v = _head(D, seed)
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention(W, v), "float"))
    return rec, _exact_bits(rec, W, v)


@pytest.fixture(scope="module")
def runs() -> dict[int, tuple[Any, float]]:
    return {seed: _run(seed) for seed in SEEDS}


def test_exact_bits_measures_what_it_says() -> None:
    rec = SimpleNamespace(W=[[1.0, 0.0], [0.0, 1.0]], v=[4.0, 1.0 + 2.0**-40])
    assert _exact_bits(rec, np.eye(2), np.array([4.0, 1.0])) == 42.0
    rec.W[1][0] = 2.0**-30  # the largest error counts, in W as in v
    assert _exact_bits(rec, np.eye(2), np.array([4.0, 1.0])) == 32.0


@pytest.mark.parametrize("seed", SEEDS)
def test_float64_head_reaches_2_to_minus_50(runs: dict[int, tuple[Any, float]], seed: int) -> None:
    rec, got = runs[seed]
    assert got >= TARGET_BITS
    assert rec.queries == D * D + D and rec.queries_by_phase.get("rescale", 0) == 0
    # The first-order estimate the result states covers the measured error.
    assert rec.error_figures.parameter_bits <= got


def test_without_the_anchor_the_target_is_missed(
    runs: dict[int, tuple[Any, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wrong variant: the probes [e_j + t u_k; e_j] (anchor 1). The reference value v_j is
    then as large as the probe's own, and the box's rounding of it costs a bit or more."""
    monkeypatch.setattr(learner, "FLOAT_ANCHOR", Fraction(1))
    plain = {seed: _run(seed) for seed in SEEDS}
    assert min(bits for _, bits in plain.values()) < TARGET_BITS
    assert all(plain[s][0].queries == runs[s][0].queries for s in SEEDS)  # same count
    assert all(plain[s][1] < runs[s][1] for s in SEEDS)


def test_the_probes_are_anchored(runs: dict[int, tuple[Any, float]]) -> None:
    W, v = _head(4, SEEDS[0])
    oracle = va.Oracle(va.SingleHeadAttention(W, v), "float")
    va.learn_single_head(oracle)
    probes = [np.asarray(e.sequence, dtype=object) for e in oracle.transcript if e.phase == "W"]
    assert len(probes) == 16
    for top, bottom in probes:  # [a e_j + (t / a) u_k; a e_j] with a = 1/8, t = 1
        j = int(np.flatnonzero(bottom)[0])
        assert bottom[j] == learner.FLOAT_ANCHOR and sum(bottom) == learner.FLOAT_ANCHOR
        assert set((top - bottom).tolist()) <= {0, 1 / learner.FLOAT_ANCHOR}


def test_exact_and_affine_probes_are_not_anchored() -> None:
    plain = va.SingleHeadAttention([[1, 2], [0, 1]], [1, 2])
    biased = va.SingleHeadAttention([[1, 2], [0, 1]], [1, 2], c=[1, 0], beta=1)
    for arith, affine in (("exact", False), ("certified", False), ("float", True)):
        oracle = va.Oracle(biased if affine else plain, arith)
        rec = va.learn_single_head(oracle, affine=affine)
        assert "anchor" not in rec.certificate()["design"]
        seqs = [e.sequence for e in oracle.transcript if e.phase == "W"]
        bottoms = [s[-1] for s in seqs if len(s) == 2 and any(s[-1])]  # the c probes end in 0
        assert len(bottoms) == 4 and all(max(b) == 1 for b in bottoms)


@pytest.fixture(scope="module")
def certificate() -> dict[str, Any]:
    W, v = _head(6, SEEDS[1])
    return va.learn_single_head(va.Oracle(va.SingleHeadAttention(W, v), "float")).certificate()


def test_certificate_states_the_anchor_and_checks(certificate: dict[str, Any]) -> None:
    assert certificate["design"]["anchor"] == "1/8"
    assert va.verify_certificate(copy.deepcopy(certificate)).ok


@pytest.mark.parametrize(
    ("anchor", "match"),
    [
        (None, "result W|probe ratio"),  # dropped: decoded as [e_j + t u_k; e_j], which it is not
        ("1/4", "result W|probe ratio"),  # another anchor decodes other entries
        ("3/8", "not 2\\^-n"),
        ("1/2048", "not 2\\^-n"),
    ],
)
def test_a_wrong_anchor_is_refused(certificate: dict[str, Any], anchor: Any, match: str) -> None:
    data = copy.deepcopy(certificate)
    if anchor is None:
        del data["design"]["anchor"]
    else:
        data["design"]["anchor"] = anchor
    with pytest.raises(CertificateError, match=match):
        va.verify_certificate(data)


def test_an_anchor_outside_float_is_refused() -> None:
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1, 2], [0, 1]], [1, 2]),
                                         "exact"))
    data = rec.certificate()
    data["design"]["anchor"] = "1/8"
    with pytest.raises(CertificateError, match="only a float, non-affine design"):
        va.verify_certificate(data)


# ---------------------------------------------------------------------------------------
# The extended-precision decoding (verified_attn/exact_recovery/extended_decode.py).
# ---------------------------------------------------------------------------------------


def _captured(d: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, Any]]:
    """The design and answers of one float run (the learner's decode, spied on)."""
    seen: dict[str, Any] = {}
    real = learner.decode_single_head

    def spy(arith: Any, design: Any, answers: Any) -> Any:
        seen["design"], seen["answers"] = design, answers
        return real(arith, design, answers)

    monkeypatch.setattr(learner, "decode_single_head", spy)
    W, v = _head(d, seed)
    va.learn_single_head(va.Oracle(va.SingleHeadAttention(W, v), "float"))
    return seen["design"], seen["answers"]


def _mp_decode(design: Any, answers: dict[str, Any]) -> list[list[Any]]:
    """W from the float64 answers in 40-digit mpmath, written out from the probe's identity
    f = a v_j + sigmoid(t m) (t / a) u_k^T v with U = I + e_p s^T (independent code)."""
    import mpmath

    mp = mpmath.mp.clone()
    mp.dps = 40
    d = design.d
    p, s = design._mix
    a = mp.mpf(float(design.anchor))
    v = [mp.mpf(float(x)) for x in answers["v"]]
    M = [[mp.mpf(0)] * d for _ in range(d)]
    for k in range(d):
        uv = v[k] + (v[p] if s[k] else 0)
        for j in range(d):
            t = mp.mpf(float(design.scales[k][j]))
            y = (mp.mpf(float(answers["W"][k][j])) - a * v[j]) / ((t / a) * uv)
            M[k][j] = mp.log(y / (1 - y)) / t
    return [[M[k][j] - (M[p][j] if s[k] else 0) for j in range(d)] for k in range(d)]


@pytest.mark.skipif(extended_decode.EXTENDED is None, reason="np.longdouble is float64 here")
def test_extended_decoding_matches_a_40_digit_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoding the same answers: extended precision is within 2^-58 of 40 digits; the
    float64 decoding (the wrong variant) is not."""
    design, answers = _captured(16, SEEDS[0], monkeypatch)
    assert any(design._mix[1])  # a design with mixed columns
    exact = _mp_decode(design, answers)
    top = max(abs(x) for row in exact for x in row)

    def error(W: np.ndarray) -> float:
        return float(max(abs(W[i][j] - exact[i][j]) for i in range(16) for j in range(16)) / top)

    ext = extended_decode.extended_w(design, answers)
    assert ext is not None and error(ext) <= 2.0**-53  # the final float64 rounding only
    monkeypatch.setattr(extended_decode, "EXTENDED", None)
    assert extended_decode.extended_w(design, answers) is None
    arith = va.Oracle(va.SingleHeadAttention([[0.0]], [1.0]), "float").arithmetic
    plain = learner.decode_single_head(arith, design, answers)["W"]
    assert error(plain) > 2.0 * error(ext)


@pytest.mark.skipif(extended_decode.EXTENDED is None, reason="np.longdouble is float64 here")
def test_float64_decoding_loses_bits(
    runs: dict[int, tuple[Any, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wrong variant: the anchored probes decoded in float64 (extended decoding off)."""
    monkeypatch.setattr(extended_decode, "EXTENDED", None)
    plain = {seed: _run(seed)[1] for seed in SEEDS}
    assert sum(runs[s][1] for s in SEEDS) > sum(plain.values()) + 0.5
