"""The per-entry first-order parameter error (the float decoder's estimate).

``row_sensitivities`` gives, per u-group, how far one unit of answer change can move each
linear functional of the group's fit that a head parameter is made of; the estimate
(``pipeline.verify._propagated_error``) carries them to the heads entry by entry. Checked
against the fits themselves: an answer change along the worst direction moves the refitted
functional by the stated amount (first order), random changes of the same norm by less,
and the estimate never exceeds the operator-norm bound it replaced.
"""

from __future__ import annotations

import numpy as np
import pytest

from verified_attn.multi_head.float_fit import (
    fit_groups,
    group_model,
    row_sensitivities,
    sigma_min_groups,
)
from verified_attn.multi_head.float_linear_fit import (
    fit_linear_groups,
    linear_jacobian,
    sigma_min_linear,
)
from verified_attn.multi_head.pipeline.design import float_design, float_probe_matrix
from verified_attn.multi_head.pipeline.verify import _propagated_error

LT = np.log(2.0 ** np.linspace(-6, 6, 5))
R_SIZE = 1e-7  # the answer change: small enough that the refit is first order


def _square_group(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One u-group of three pairs, two heads, and a mixing Minv (3 x 3) of its scores."""
    rng = np.random.default_rng(seed)
    r = rng.normal(0, 2, (1, 2))
    s = rng.normal(0, 2, (1, 3, 2))
    Minv = rng.normal(0, 1, (3, 3))
    return r, s, Minv


def _dense(r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The group's Jacobian in (r, s) by central differences of group_model (columns: the
    H residues, then the scores pair by pair)."""
    _, J, H = s.shape
    cols = []
    for h in range(H):
        e = np.zeros_like(r)
        e[0, h] = 1e-6
        cols.append(((group_model(LT, r + e, s) - group_model(LT, r - e, s)) / 2e-6).ravel())
    for j in range(J):
        for h in range(H):
            e = np.zeros_like(s)
            e[0, j, h] = 1e-6
            cols.append(((group_model(LT, r, s + e) - group_model(LT, r, s - e)) / 2e-6).ravel())
    return np.column_stack(cols)


def _refit_moves(
    r: np.ndarray, s: np.ndarray, Minv: np.ndarray, dY: np.ndarray, a: int, h: int
) -> float:
    """How far entry a of head h's functional ``sum_j Minv[j, a] s[j, h]`` moves when the
    group's answers change by dY and the group is fitted again (from the truth)."""
    Y = group_model(LT, r, s)
    fit = fit_groups(LT, Y + dY.reshape(Y.shape), r, s, floor=0.0)
    return float(abs(Minv[:, a] @ (fit.s[0, :, h] - s[0, :, h])))


@pytest.mark.parametrize("seed", range(4))
def test_the_worst_answer_change_moves_a_functional_by_the_stated_amount(seed: int) -> None:
    r, s, Minv = _square_group(seed)
    w_sens, r_sens, _ = row_sensitivities(LT, r, s, Minv, None)
    J = _dense(r, s)
    pinv = np.linalg.pinv(J)
    for a in range(3):
        for h in range(2):
            fn = np.zeros(J.shape[1])
            fn[2 + np.arange(3) * 2 + h] = Minv[:, a]
            row = fn @ pinv
            # The stated norm is |l^T J^+| (finite differences, independent of the code).
            assert w_sens[0, a, h] == pytest.approx(np.linalg.norm(row), rel=1e-5)
            worst = R_SIZE * row / np.linalg.norm(row)
            moved = _refit_moves(r, s, Minv, worst, a, h)
            assert moved == pytest.approx(R_SIZE * w_sens[0, a, h], rel=1e-3)
    assert r_sens[0] == pytest.approx(np.linalg.norm(pinv[:2], axis=1), rel=1e-5)


def test_random_answer_changes_stay_within_the_sensitivity() -> None:
    r, s, Minv = _square_group(7)
    w_sens, _, _ = row_sensitivities(LT, r, s, Minv, None)
    rng = np.random.default_rng(0)
    for _ in range(20):
        dY = rng.standard_normal(s.shape[1] * len(LT))
        dY *= R_SIZE / np.linalg.norm(dY)
        for a in range(3):
            assert _refit_moves(r, s, Minv, dY, a, 0) <= R_SIZE * w_sens[0, a, 0] * (1 + 1e-3)


def test_the_wrong_mixing_misses_the_worst_change() -> None:
    # The wrong variant: the scores' own sensitivities (Minv = I) instead of the mixed
    # functional's: the worst change moves the functional by a different amount.
    r, s, Minv = _square_group(1)
    wrong, _, _ = row_sensitivities(LT, r, s, np.eye(3), None)
    right, _, _ = row_sensitivities(LT, r, s, Minv, None)
    J = _dense(r, s)
    fn = np.zeros(J.shape[1])
    fn[2 + np.arange(3) * 2] = Minv[:, 0]
    row = fn @ np.linalg.pinv(J)
    moved = _refit_moves(r, s, Minv, R_SIZE * row / np.linalg.norm(row), 0, 0)
    assert moved == pytest.approx(R_SIZE * right[0, 0, 0], rel=1e-3)
    assert abs(moved - R_SIZE * wrong[0, 0, 0]) > 0.01 * moved


def test_the_linear_fit_sensitivities_against_its_jacobian() -> None:
    # The redundant design's fit in (r, w): the stated norms are the rows of the pinv of
    # its Jacobian, and the worst change moves the refitted w by that much.
    rng = np.random.default_rng(3)
    Mt = rng.normal(0, 1, (5, 2))
    r = rng.normal(0, 2, (1, 2))
    w = rng.normal(0, 1, (1, 2, 2))
    s = np.einsum("ja,gah->gjh", Mt, w)
    w_sens, r_sens, total = row_sensitivities(LT, r, s, None, Mt)
    pinv = np.linalg.pinv(linear_jacobian(LT, Mt, r, w)[0])
    assert r_sens[0] == pytest.approx(np.linalg.norm(pinv[:2], axis=1), rel=1e-8)
    assert total[0] == pytest.approx(np.linalg.norm(pinv[0] + pinv[1]), rel=1e-8)
    for a in range(2):
        for h in range(2):
            row = pinv[2 + a * 2 + h]
            assert w_sens[0, a, h] == pytest.approx(np.linalg.norm(row), rel=1e-8)
    row = pinv[2 + 1 * 2 + 0]
    Y = group_model(LT, r, s) + (R_SIZE * row / np.linalg.norm(row)).reshape(1, 5, len(LT))
    fit = fit_linear_groups(LT, Y, Mt, r, w, floor=0.0)
    moved_w = np.linalg.lstsq(Mt, fit.s[0, :, 0], rcond=None)[0][1] - w[0, 1, 0]
    assert abs(moved_w) == pytest.approx(R_SIZE * w_sens[0, 1, 0], rel=1e-3)


def test_a_rank_deficient_group_has_no_finite_sensitivity() -> None:
    # A head with residue 0 has a free score: nothing bounds it.
    r, s, Minv = _square_group(2)
    r[0, 1] = 0.0
    w_sens, r_sens, total = row_sensitivities(LT, r, s, Minv, None)
    assert np.isinf(w_sens).all() and np.isinf(r_sens).all() and np.isinf(total).all()


@pytest.mark.parametrize(("d", "H", "extra"), [(3, 2, 0), (3, 2, 3), (4, 3, 0)])
def test_the_estimate_is_never_over_the_operator_norm_bound(d: int, H: int, extra: int) -> None:
    # The bound it replaced, written out: |U^-1| |M^-1| (sum_k (|dY_k| / sigma_min_k)^2)^1/2
    # for W (no |M^-1| with redundant columns) and v; the per-entry estimate is at most it.
    rng = np.random.default_rng(d * 10 + H + extra)
    U, B, _ = float_design(d, 0, False, extra=extra)
    heads = [(rng.normal(0, 1 / np.sqrt(d), (d, d)), rng.normal(0, 1, d)) for _ in range(H)]
    M = float_probe_matrix(B, False)
    r = np.stack([U @ v for _, v in heads], axis=1)
    s = np.stack([U @ W @ M for W, _ in heads], axis=2)
    residual = rng.uniform(1e-9, 1e-8, d)
    floor = rng.uniform(1e-9, 1e-8, d)
    f0 = np.zeros(len(B))
    got = _propagated_error(
        residual, floor, LT, r, s, np.zeros(d), U, B, f0, heads, 0.0, 2.0**-53, False
    )
    if extra:
        wv = np.einsum("aj,gjh->gah", np.linalg.pinv(M.T), s)
        sig = sigma_min_linear(LT, M.T, r, wv)
        nM = 1.0
    else:
        sig = sigma_min_groups(LT, r, s)
        nM = float(np.linalg.norm(np.linalg.inv(M), 2))
    err_S = np.sqrt(((np.sqrt(residual**2 + floor**2) / sig) ** 2).sum())
    nU = float(np.linalg.norm(np.linalg.inv(U), 2))
    size = max(1.0, *(float(np.abs(x).max()) for hd in heads for x in hd))
    old = max(nU * err_S * nM, nU * err_S) / size
    assert 0 < got <= old * (1 + 1e-9)
