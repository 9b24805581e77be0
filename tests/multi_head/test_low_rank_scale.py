"""The low-rank refinement's scaling: its Jacobian products go through the design's distinct
rows (about 2d u's and J m_b's for N answers), never an (N, d) or (N, n) array, and give
the dense Jacobian's products to rounding; the learner asks the same queries and returns the
same heads to rounding as with the dense Jacobian's products; past the dense limit the
stated estimate is the dense one, from the reduced unknowns' preconditioned Gram matrix,
and past that matrix's limit a per-head bound above it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy.sparse.linalg import aslinearoperator
from test_low_rank_estimate import _boxes, _true_error
from test_low_rank_skeleton import _rank_box

import verified_attn as va
from verified_attn.multi_head.pipeline import skeleton_blocks, skeleton_refine, skeleton_result
from verified_attn.multi_head.pipeline.skeleton_refine import _Rows, _Theta, design_rows


def _random_rows(seed: int) -> tuple[_Rows, _Theta]:
    """A small affine design (redundant columns, links) and a random point."""
    rng = np.random.default_rng(seed)
    d, H, p, T = 6, 3, 2, 7
    J = d + 1
    U, cols = rng.normal(size=(d, d)), rng.normal(size=(J + 3, d))
    pairs = [(k, j) for k in range(d) for j in range(J if k < p else p)] + [(4, J + 1)]
    t = rng.uniform(0.2, 3, T)
    answers = (
        rng.normal(size=J + 2),
        rng.normal(size=(len(pairs), T)),
        rng.normal(size=(d - 1, T)),
    )
    rows = design_rows(U, cols, True, pairs, t, answers)
    th = _Theta(
        [rng.normal(size=(d, p)) for _ in range(H)],
        [rng.normal(size=(J, p)) for _ in range(H)],
        [rng.normal(size=d) for _ in range(H)],
        0.3,
    )
    return rows, th


def _row_by_row(rows: _Rows, th: _Theta) -> np.ndarray:
    """The model answer by answer from its closed form (the reference)."""
    U, M, d = rows.U, rows.M, rows.Uu.shape[1]
    out = []
    for n in range(len(rows.y)):
        val = M[n, :d] @ sum(th.v) + th.beta
        for P, Q, v in zip(th.P, th.Q, th.v, strict=True):
            z = U[n] @ P @ Q.T @ M[n] + rows.lt[n]
            val += (U[n] @ v) / (1 + np.exp(-z))
        out.append(val)
    return np.array(out)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_operator_is_the_dense_jacobian(seed: int) -> None:
    rows, th = _random_rows(seed)
    assert len(rows.Uu) == 2 * 6 and len(rows.Mu) == 10  # distinct rows, not N = len(y)
    assert np.allclose(rows.model(th), _row_by_row(rows, th), rtol=1e-13, atol=1e-13)
    D = rows.dense(th)
    # The dense Jacobian is the model's derivative (central differences).
    x0 = th.flat()
    rng = np.random.default_rng(seed + 10)
    dx = rng.normal(size=len(x0)) * 1e-6
    fd = (rows.model(th.moved(dx)) - rows.model(th.moved(-dx))) / 2
    assert np.allclose(D @ dx, fd, rtol=1e-6, atol=1e-10)
    A = rows.operator(th)
    x, y = rng.normal(size=A.shape[1]), rng.normal(size=A.shape[0])
    scale = np.abs(D).max() * max(np.abs(x).max(), np.abs(y).max()) * D.shape[1]
    assert np.abs(A @ x - D @ x).max() <= 1e-14 * scale
    assert np.abs(A.rmatvec(y) - D.T @ y).max() <= 1e-14 * scale
    # A wrong gather (one answer's m_b row shifted) is caught.
    bad = _Rows(rows.Uu, rows.Mu, rows.lt, rows.y, True, rows.iu, np.roll(rows.im, 1))
    assert not np.allclose(bad.operator(th) @ x, D @ x, rtol=1e-6)


def _dense_operator(self: _Rows, th: _Theta) -> Any:
    return aslinearoperator(self.dense(th))


def test_same_queries_and_heads_as_the_dense_products(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for dense in (False, True):
        model, _ = _rank_box(8, 2, 2, seed=1)
        oracle = va.Oracle(model, "float")
        if dense:
            monkeypatch.setattr(_Rows, "operator", _dense_operator)
        rec = va.learn_multi_head(oracle, heads=2, rank=2)
        runs.append((rec, dict(oracle.queries_by_phase)))
    (a, qa), (b, qb) = runs
    assert a.queries == b.queries and qa == qb
    for ha, hb in zip(a.parameters["heads"], b.parameters["heads"], strict=True):
        for x, y in zip(ha, hb, strict=True):
            assert np.allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-9)
    assert a.parameter_error_estimate is not None and b.parameter_error_estimate is not None
    assert abs(a.parameter_error_estimate / b.parameter_error_estimate - 1) < 0.1


def _spy_refinement(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], Any]:
    """The dense limit set to 0 and the refinement spied on: the rows, the fitted factors
    and the residuals of the last run land in the returned dict (and the spy, to set again
    after ``monkeypatch.undo()``)."""
    monkeypatch.setattr(skeleton_refine, "_DENSE_LIMIT", 0)
    seen: dict[str, Any] = {}
    real = skeleton_result.refine_low_rank

    def spy(rows: Any, heads: Any, beta: float, p: int) -> Any:
        out = real(rows, heads, beta, p)
        seen.update(rows=rows, th=out[3], res=out[2])
        return out

    monkeypatch.setattr(skeleton_result, "refine_low_rank", spy)
    return seen, spy


@pytest.mark.slow  # about 70 s: `pytest -m slow`
def test_past_the_dense_limit_the_estimate_is_the_dense_one_or_bounds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the dense limit the result states the dense figure computed from the
    preconditioned Gram matrix of the reduced unknowns (equal to the SVD's to 1e-6 here),
    which covers the true error and which the certificate checker recomputes; past the
    Gram limit the per-head bound, at least the dense figure on every box (measured 25x to
    530x, or inf where Lanczos cannot certify the coupling), while the bound with the heads' coupling left out (lambda = 1) falls
    under the dense figure, and under the true error, on some box."""
    seen, spy = _spy_refinement(monkeypatch)
    short, under_true = [], []
    for name, oracle, truth, beta in _boxes():
        rec = va.learn_multi_head(oracle, heads=len(truth), rank=2)
        est = rec.parameter_error_estimate
        rows, th, res = seen["rows"], seen["th"], seen["res"]
        true = _true_error(th, rows.affine, truth, beta)
        assert est is not None and true <= est <= rec.parameter_rtol, name
        # the checker recomputes the same figure at the claimed heads past the dense limit
        assert "recomputed" in str(va.verify_certificate(rec.certificate())), name
        monkeypatch.setattr(skeleton_refine, "_DENSE_LIMIT", 10**12)
        dense = skeleton_refine.low_rank_estimate(rows, th, res, 2.0**-53, len(truth) * 4)
        monkeypatch.setattr(skeleton_refine, "_DENSE_LIMIT", 0)
        assert dense is not None and abs(est / dense - 1) < 1e-6, name
        monkeypatch.setattr(skeleton_blocks, "GRAM_LIMIT", 0)
        assert skeleton_blocks.reduced_estimate(rows, th, res, 2.0**-53) >= dense, name
        monkeypatch.setattr(skeleton_blocks, "coupling", lambda *a: 1.0)
        wrong = skeleton_blocks.block_estimate(rows, th, res, 2.0**-53)
        monkeypatch.undo()
        monkeypatch.setattr(skeleton_refine, "_DENSE_LIMIT", 0)
        monkeypatch.setattr(skeleton_result, "refine_low_rank", spy)
        short.append(wrong < dense)
        under_true.append(wrong < true)
    assert any(short) and any(under_true)


def test_a_block_singular_in_its_gram_matrix_takes_its_columns_triangle() -> None:
    """A head's block whose columns have condition number 1e10 has a Gram matrix singular
    to working precision (1e20 > 2^52): the Gram root refuses it, the columns' triangular
    factor gives a root R with (C R)^T (C R) = I to 1e-5; exactly dependent columns are
    refused by both (the estimate is then infinite: a refusal, never a figure)."""
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.normal(size=(3000, 40)))
    V, _ = np.linalg.qr(rng.normal(size=(40, 40)))
    C = (Q * np.logspace(0, -10, 40)) @ V.T

    def block(M: np.ndarray) -> Any:
        return (lambda sl: M[sl]), M.shape[1]

    assert skeleton_blocks._inverse_root(skeleton_blocks._gram(*block(C)[:1], 3000, 40)) is None
    R = skeleton_blocks._block_root(block(C), 3000)
    assert R is not None
    assert np.abs((C @ R).T @ (C @ R) - np.eye(40)).max() < 1e-5
    dependent = np.hstack([C[:, :39], C[:, :1]])
    assert skeleton_blocks._block_root(block(dependent), 3000) is None


def test_the_columns_triangle_gives_the_dense_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every block's root taken from its columns' triangle (as for a block singular
    in its Gram matrix), the reduced estimate is still the dense SVD's figure to 1e-6; a
    root that leaves M ill-conditioned (G^+1/2: M's condition is then G's squared) misses
    it (its Cholesky fails: infinite)."""
    seen, _ = _spy_refinement(monkeypatch)
    name, oracle, truth, _ = next(iter(_boxes()))
    va.learn_multi_head(oracle, heads=len(truth), rank=2)
    rows, th, res = seen["rows"], seen["th"], seen["res"]
    monkeypatch.setattr(skeleton_refine, "_DENSE_LIMIT", 10**12)
    dense = skeleton_refine.low_rank_estimate(rows, th, res, 2.0**-53, len(truth) * 4)
    assert dense is not None
    monkeypatch.setattr(skeleton_blocks, "_inverse_root", lambda G: None)
    via_triangle = skeleton_blocks.reduced_estimate(rows, th, res, 2.0**-53)
    assert abs(via_triangle / dense - 1) < 1e-6, name

    def square(block: Any, N: int) -> np.ndarray:  # G^+1/2: M then squares G's condition
        columns, n = block
        _, s, Vt = np.linalg.svd(skeleton_blocks._gram(columns, N, n))
        return (Vt.T * np.sqrt(s)) @ Vt

    monkeypatch.setattr(skeleton_blocks, "_block_root", square)
    assert not abs(skeleton_blocks.reduced_estimate(rows, th, res, 2.0**-53) / dense - 1) < 1e-6
