"""The low-rank skeleton's shifted rows (pipeline/skeleton_rows.py shifted_start / shifted_fit,
Skeleton.shift): a stalled partial u-group k asked again at u' = u_k + sum_i c_i u_i over the
full groups; u''s fit less the full groups' share starts u_k's. Its count, its naming of the
shifted fit's heads by the planes, a wrong share failing, and the certificate's checker
rebuilding the shifted queries (a tampered shift or answer refused)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import verified_attn as va
from verified_attn.certificates.multi_head_low_rank import _phases, _shifts
from verified_attn.errors import CertificateError
from verified_attn.multi_head.float_fit import group_model
from verified_attn.multi_head.pipeline import skeleton as skeleton_module
from verified_attn.multi_head.pipeline.asking import ask_pairs
from verified_attn.multi_head.pipeline.low_rank_design import (
    CONDITIONING_ROUNDS,
    PARTIAL_ROUND_COLUMNS,
    low_rank_query_count,
    low_rank_query_limit,
    shift_coefficients,
    shift_query_count,
)
from verified_attn.multi_head.pipeline.skeleton_rows import shifted_fit, shifted_start
from verified_attn.serialize import dump_number, load_number

_LT = np.log(np.array([1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0, 8.0]))


def _case(seed: int = 3) -> dict[str, np.ndarray]:
    """Three heads of rank 2 (m = 2 full rows, 6 columns): a partial row k (scores
    a_h^T S_h[:2, C], residues r) and its shifted row u_k + c_1 u_1 + c_2 u_2, whose scores
    and residues add the full rows' (residues R (2, 3)), its heads in another order."""
    rng = np.random.default_rng(seed)
    H, m, C = 3, 2, 6
    A = rng.normal(0, 1.5, (C, m, H))
    a = rng.normal(0, 1, (m, H))
    s = np.einsum("cmh,mh->ch", A, a)
    r = np.array([1.5, -0.05, 0.8])  # head 2 nearly unseen at u_k
    R = rng.normal(0, 1, (m, H))
    c = np.array([0.4, -0.3])
    order = np.array([2, 0, 1])
    s2 = (s + np.einsum("cmh,m->ch", A, c))[:, order]
    r2 = (r + c @ R)[order]
    Y = group_model(_LT, r[None], s[None])[0]
    return {"A": A, "a": a, "s": s, "r": r, "R": R, "c": c, "s2": s2, "r2": r2, "Y": Y}


def test_shift_count_and_limit() -> None:
    # Each shifted group's columns at 2H + [H >= 2] ratios.
    assert shift_query_count(8, [list(range(10))]) == 10 * 17 == 170
    assert shift_query_count(8, [list(range(10)), [0, 1, 2, 3, 4, 5]]) == 16 * 17
    assert shift_query_count(1, [[0, 1]]) == 2 * 2
    # The run's worst case adds every partial group shifted once at q + 6 columns: at
    # E = 32, H = 8, r = 4 (affine, J = 33) that is 28 x 10 x 17 on the rounds' worst case.
    base = low_rank_query_count(32, 8, 4, affine=True)
    rounds = (4 * 12 + 28 * CONDITIONING_ROUNDS * PARTIAL_ROUND_COLUMNS) * 17 + 12
    # (and every full group halved once at its J + 12 columns: 4 x 45 x 17)
    halved = 4 * 45 * 17
    assert low_rank_query_limit(32, 8, 4, affine=True) == base + rounds + 28 * 10 * 17 + halved
    assert base + rounds + 28 * 10 * 17 == 13237
    assert low_rank_query_limit(32, 8, 4, affine=True) < 4 * 8 * 32**2 - 2 * 8 + 1
    # The coefficients are seeded per (seed, group): the checker re-derives them.
    c = shift_coefficients(0, 13, 4)
    assert np.array_equal(c, shift_coefficients(0, 13, 4))
    assert not np.array_equal(c, shift_coefficients(0, 12, 4))
    assert not np.array_equal(c, shift_coefficients(1, 13, 4))


def test_shifted_start_names_the_heads_and_subtracts_the_share() -> None:
    c = _case()
    r0, w0, miss = shifted_start(c["r2"], c["s2"], c["c"], c["A"], c["R"])
    assert miss < 1e-12
    assert np.abs(r0 - c["r"]).max() < 1e-12 and np.abs(w0 - c["a"]).max() < 1e-12
    # A wrong share (c's sign flipped) stays in the planes but starts 2 c R off.
    r_bad, _, _ = shifted_start(c["r2"], c["s2"], -c["c"], c["A"], c["R"])
    assert np.abs(r_bad - c["r"]).max() > 0.1
    # Planes that are not the full groups' (other rows): no plane holds a shifted head.
    other = np.random.default_rng(7).normal(size=c["A"].shape)
    _, _, miss_bad = shifted_start(c["r2"], c["s2"], c["c"], other, c["R"])
    assert miss_bad > 1e-2


def test_shifted_fit_reaches_the_group() -> None:
    c = _case()
    r, s, res = shifted_fit(_LT, c["Y"], (c["r2"], c["s2"]), c["c"], c["A"], c["R"], 0.0)
    assert res < 1e-12
    assert np.abs(s - c["s"]).max() < 1e-9 and np.abs(r - c["r"]).max() < 1e-9


def _rank_box(seed: int = 1) -> va.MultiHeadAttention:
    """Two heads of rank 2 at d = 8 (test_low_rank_skeleton's box)."""
    rng = np.random.default_rng(seed)
    heads = []
    for _ in range(2):
        A = rng.normal(0, 1 / np.sqrt(8), (8, 2))
        B = rng.normal(0, 1 / np.sqrt(2), (8, 2))
        heads.append(((A @ B.T).tolist(), rng.normal(0, 1, 8).tolist()))
    return va.MultiHeadAttention(heads)


@pytest.fixture(scope="module")
def forced() -> tuple[va.MultiHeadRecovery, va.Oracle]:
    """A run with the partial u-group u_6 taken as stalled after every fit: its three rounds
    (2 columns each), the row-space refit and its shifted row are all asked."""
    real = skeleton_module.Skeleton._stalls
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(skeleton_module.Skeleton, "_stalls", lambda self, g: g == 5 or real(self, g))
        oracle = va.Oracle(_rank_box(), "float")
        return va.learn_multi_head(oracle, heads=2, rank=2), oracle


def test_a_shifted_group_is_counted_and_certified(
    forced: tuple[va.MultiHeadRecovery, va.Oracle],
) -> None:
    rec, oracle = forced
    # The skeleton's 208, three rounds of 2 columns and the shift at all 8 columns, each
    # pair at 5 ratios: counted on the oracle.
    assert oracle.queries_by_phase["conditioning"] == 6 * 5
    assert oracle.queries_by_phase["shifted"] == shift_query_count(2, [list(range(8))]) == 40
    learning = oracle.queries - oracle.queries_by_phase["verify"]
    assert rec.queries == learning == low_rank_query_count(8, 2, 2) + 30 + 40 == 278
    assert rec.verified and any("shifted rows" in n for n in rec.notes)
    data = rec.certificate()
    assert data["design"]["shifts"] == [5] and len(data["answers"]["shifted"]) == 8
    report = str(va.verify_certificate(data))
    assert "278 learning" in report and "'shifted': 40" in report
    # Wrong variants: a shifted answer moved, the shift dropped (its answers and count
    # left), another group named.
    bad = copy.deepcopy(data)
    bad["answers"]["shifted"][3][2] = bad["answers"]["shifted"][3][1]
    with pytest.raises(CertificateError, match="not reproduced"):
        va.verify_certificate(bad)
    bad = copy.deepcopy(data)
    bad["design"]["shifts"] = []
    with pytest.raises(CertificateError):
        va.verify_certificate(bad)
    bad = copy.deepcopy(data)
    bad["design"]["shifts"] = [6]
    with pytest.raises(CertificateError, match="shifts"):
        va.verify_certificate(bad)


def test_shifted_answers_at_other_rows_are_refused(
    forced: tuple[va.MultiHeadRecovery, va.Oracle],
) -> None:
    # The answers of a shift by other coefficients than the seeded ones (asked of the same
    # box): the checker rebuilds the queries at the seeded rows, and these are not theirs.
    rec, _ = forced
    data = rec.certificate()
    U, B = (
        np.array([[float(load_number(x)) for x in row] for row in data["design"][name]])
        for name in ("U", "B")
    )
    u = U[5] + 0.3 * (U[0] + U[1])
    box = va.Oracle(_rank_box(), "float")
    other = ask_pairs(box, [(u, j) for j in range(8)], B, data["design"]["ratios"])
    data["answers"]["shifted"] = [[dump_number(float(y)) for y in row] for row in other]
    with pytest.raises(CertificateError, match="not reproduced"):
        va.verify_certificate(data)


def test_the_checker_validates_the_shifts() -> None:
    cols = [list(range(9))] * 2 + [[0, 1]] * 3 + [list(range(8))] * 3
    data = {"design": {"shifts": [5, 7]}}
    assert _shifts(data, 8, 2, cols) == [5, 7]
    assert _phases(8, 2, 2, 2, 8, cols, [5, 7])["shifted"] == 16 * 5
    for bad in ([7, 5], [5, 5], [3], [8]):  # (a full group is shifted at its halved row)
        with pytest.raises(CertificateError, match="shifts"):
            _shifts({"design": {"shifts": bad}}, 8, 2, cols)
