"""The matrix-free sequence polish: its fit is the dense fit's, its block figures bound the
dense figures from above (within the stated factor), and its estimate covers the truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from verified_attn.arithmetic import FloatArithmetic
from verified_attn.multi_head import sequence_blocks as sb
from verified_attn.multi_head import sequence_fit as sf
from verified_attn.multi_head.pipeline import verify
from verified_attn.multi_head.pipeline.budget import POLISH_PARAMETERS
from verified_attn.multi_head.pipeline.refine import extended_values
from verified_attn.multi_head.prediction_bound import parameter_gradient
from verified_attn.multi_head.sequence_operator import block_damped_step, jacobian_operator
from verified_attn.verification import fresh_sequences

CASES = [(3, 3, False, 0), (4, 3, True, 1), (6, 4, False, 2), (5, 2, True, 3)]


def _box(d: int, H: int, affine: bool, seed: int, noise: float = 1e-12):
    rng = np.random.default_rng(seed)
    heads = [
        (rng.normal(0, d**-0.5, (d, d)), rng.normal(0, 1, d))
        + ((rng.normal(0, 1, d),) if affine else ())
        for _ in range(H)
    ]
    beta = 0.3 if affine else 0.0
    n = 3 * len(sf.pack_parameters(heads, beta, affine))
    seqs = sf.polish_sequences(d, n, seed=seed)
    rows = sf.compress(seqs, np.zeros(n))
    ys = sf.model_values(heads, beta, rows, affine) + rng.normal(0, noise, n)
    start = [tuple(x + 1e-6 * rng.normal(size=x.shape) for x in h) for h in heads]
    return heads, beta, sf.compress(seqs, ys), start


def _dense(heads, beta, rows, affine):
    res, A, _ = sf.normal_equations(heads, beta, rows, affine)
    return (res, *sf.covariance_rows(A), A)


@pytest.mark.parametrize(("d", "H", "affine", "seed"), CASES)
def test_the_matrix_free_fit_is_the_dense_fit(d: int, H: int, affine: bool, seed: int) -> None:
    heads, beta, rows, start = _box(d, H, affine, seed)
    dense = sf.fit_sequences(start, beta, rows, affine=affine)
    free = sb.fit_matrix_free(start, beta, rows, affine=affine)
    theta_d = sf.pack_parameters(dense.heads, dense.beta, affine)
    theta_f = sf.pack_parameters(free.heads, free.beta, affine)
    truth = sf.pack_parameters(heads, beta, affine)
    assert np.abs(theta_f - theta_d).max() <= 1e-12
    assert np.abs(theta_f - truth).max() <= 1e-10
    # The costs agree to their own rounding noise (the fits' stopping rule).
    cost = float(dense.residuals @ dense.residuals)
    noise = sf.cost_noise(cost, sf.evaluation_floor(rows.answers))
    assert float(free.residuals @ free.residuals) <= cost + noise


@pytest.mark.parametrize(("d", "H", "affine", "seed"), CASES)
def test_the_block_figures_bound_the_dense_ones(d: int, H: int, affine: bool, seed: int) -> None:
    heads, beta, rows, _ = _box(d, H, affine, seed)
    res, cov, smin, sens, A = _dense(heads, beta, rows, affine)
    figs = sb.block_figures(heads, beta, rows, affine=affine)
    # The same residuals, summed in another order (beta first).
    assert np.abs(figs.residuals - res).max() <= 8 * 2.0**-53 * np.abs(rows.answers).max()
    # Never optimistic, and within the stated factor lambda^-1/2 of the dense figure.
    assert sens <= figs.sensitivity <= sens / math.sqrt(figs.coupling) * (1 + 1e-9)
    assert figs.sigma_min <= smin
    for X in fresh_sequences(d, 8, seed=seed, lengths=(2, 8)):
        g = parameter_gradient(heads, X, affine)
        assert np.linalg.norm(cov @ g) <= np.linalg.norm(figs.rows @ g) * (1 + 1e-9)
    # The coupling's lower bound is under the true smallest eigenvalue, and not far.
    blocks = sb._inverse_roots(heads, rows, affine)
    assert blocks is not None
    G = np.zeros_like(A)  # G^-1/2, block diagonal
    pos = 0
    for R in blocks[0]:
        G[pos : pos + len(R), pos : pos + len(R)] = R
        pos += len(R)
    true = float(np.linalg.eigvalsh(G @ A @ G)[0])
    assert 0.5 * true <= figs.coupling <= true * (1 + 1e-9)


def test_per_head_blocks_alone_are_optimistic() -> None:
    """The wrong variant (the coupling left out, lambda = 1) states a sensitivity under the
    dense one: the coupling factor is what makes the figure an upper bound."""
    heads, beta, rows, _ = _box(6, 4, False, 2)
    _, _, _, sens, _ = _dense(heads, beta, rows, False)
    figs = sb.block_figures(heads, beta, rows, affine=False)
    uncoupled = figs.sensitivity * math.sqrt(figs.coupling)
    assert uncoupled < sens <= figs.sensitivity


def test_the_lanczos_floor_and_its_optimistic_ritz_value() -> None:
    """On a spectrum with a lone small eigenvalue, a few Lanczos steps' Ritz value is above
    the smallest eigenvalue (optimistic); the bound never is."""
    P = 300
    lam = np.concatenate([[0.01], np.linspace(0.5, 2.0, P - 1)])
    floor = sb._lanczos_floor(lambda x: lam * x, P, 2.0, 1e-6)
    assert 0 < floor <= 0.01
    # The Ritz estimate after 5 steps (the variant without the probabilistic margin).
    rng = np.random.default_rng(0)
    v = rng.normal(size=P)
    V = [v / np.linalg.norm(v)]
    for _ in range(4):
        w = lam * V[-1]
        for u in V:
            w -= (u @ w) * u
        V.append(w / np.linalg.norm(w))
    Q = np.array(V)
    ritz = float(np.linalg.eigvalsh(Q @ (lam[:, None] * Q.T))[0])
    assert ritz > 0.01


@pytest.mark.parametrize(("d", "H", "affine", "seed"), [(4, 3, False, 5), (4, 2, True, 6)])
def test_the_stated_estimate_covers_the_truth(
    d: int, H: int, affine: bool, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers of known heads computed in extended precision and rounded to float64 (the
    box's only error): the block path's stated estimate is at least the fitted parameters'
    actual error, and at least the dense estimate."""
    heads, beta, rows, start = _box(d, H, affine, seed, noise=0.0)
    exact = np.asarray(extended_values(heads, beta, rows, affine), dtype=np.float64)
    rows = sf.SequenceRows(rows.tokens, rows.log_counts, rows.queries, exact)
    arith = FloatArithmetic(1e-6, 2.0**-53)
    fit = sb.fit_matrix_free(start, beta, rows, affine=affine)
    args = (arith, fit.heads, fit.beta, affine, rows, 0, (4, 8))
    dense = verify.polish_figures(*args)[0]
    monkeypatch.setattr(verify, "DENSE_FIGURE_PARAMETERS", 0)
    stated = verify.polish_figures(*args)[0]
    truth = sf.pack_parameters(heads, beta, affine)
    got = sf.pack_parameters(fit.heads, fit.beta, affine)
    actual = float(np.abs(got - truth).max()) / max(1.0, float(np.abs(got).max()))
    assert actual <= dense <= stated


@pytest.mark.parametrize(("d", "H", "affine", "seed"), CASES)
def test_the_block_preconditioned_step_is_the_damped_step(
    d: int, H: int, affine: bool, seed: int
) -> None:
    """lsqr preconditioned by Gram blocks taken at other parameters (the fit's start) solves
    the same damped problem as the dense normal equations ``(A + mu diag A) s = -J^T r``."""
    heads, beta, rows, start = _box(d, H, affine, seed, noise=1e-3)
    grams = sb.gram_blocks(start, rows, affine)
    op, D = jacobian_operator(heads, rows, affine)
    res, A, _ = sf.normal_equations(heads, beta, rows, affine)
    JTr = D * op.rmatvec(res)
    for mu in (1e-8, 1e-3):
        step = block_damped_step(op, D, grams, -res, mu)
        want = np.linalg.solve(A + mu * np.diag(np.diag(A)), -JTr)
        assert np.abs(step - want).max() <= 1e-6 * np.abs(want).max()
    # The check can fail: the undamped problem's step is another step.
    undamped = block_damped_step(op, D, grams, -res, 0.0)
    assert np.abs(undamped - want).max() > 1e-6 * np.abs(want).max()


def test_the_lanczos_floor_is_under_the_smallest_eigenvalue() -> None:
    """Random positive definite spectra, largest eigenvalue far under c (the bound's own
    upper bound on it is what makes it tight) or at it: the floor is never above the
    smallest eigenvalue, and within a factor 2 of it when it is positive."""
    rng = np.random.default_rng(7)
    for trial in range(12):
        P = int(rng.integers(50, 400))
        top = 1.0 if trial % 2 else 8.0
        lam = np.sort(rng.uniform(0.05, top, P))
        lam[0] = float(rng.uniform(0.01, 0.05))
        floor = sb._lanczos_floor(lambda x, lam=lam: lam * x, P, 8.0, 1e-6)
        assert 0.5 * lam[0] <= floor <= lam[0]


def test_the_lanczos_floor_gives_up_when_it_cannot_turn_positive() -> None:
    """A smallest eigenvalue 1e-7 of the largest: no bound (0), never an optimistic one."""
    lam = np.concatenate([[1e-7], np.linspace(0.5, 1.0, 199)])
    assert sb._lanczos_floor(lambda x: lam * x, 200, 1.0, 1e-6) == 0.0


@pytest.mark.parametrize(("H", "matrix_free"), [(8, False), (9, True)])
def test_the_polish_takes_the_matrix_free_path_past_the_dense_limit(
    H: int, matrix_free: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """d = 16: eight heads (2176 parameters) keep the dense fit, nine (2448) do not form
    it; the wrong variant (either fit on the other side of the limit) fails."""
    taken: list[str] = []

    def fake(name: str):
        return lambda *args, **kwargs: taken.append(name)

    monkeypatch.setattr(sb, "fit_sequences", fake("dense"))
    monkeypatch.setattr(sb, "fit_matrix_free", fake("matrix-free"))
    heads = [(np.zeros((16, 16)), np.zeros(16))] * H
    sb.polish_fit(heads, 0.0, sf.compress(sf.polish_sequences(16, 1, seed=0), [0.0]), affine=False)
    assert taken == ["matrix-free" if matrix_free else "dense"]


def test_every_coarse_polish_keeps_the_dense_figures() -> None:
    """The float32 polish (up to POLISH_PARAMETERS) keeps the exact figures: its tolerance
    1e-3 leaves no room for the block bounds' factor (docs/scale.md)."""
    assert POLISH_PARAMETERS <= sb.DENSE_FIGURE_PARAMETERS
