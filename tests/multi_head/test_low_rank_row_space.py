"""The low-rank skeleton's row-space refit of a partial u-group (pipeline/skeleton_rows.py):
its scores constrained to the full groups' rows per head, started from a free fit in a wrong
basin with its heads in another order; wrong planes do not fit; the skeleton keeps a refit only
when it lowers the residual and only with more columns than full groups."""

from __future__ import annotations

import numpy as np

from verified_attn.multi_head.float_fit import group_model
from verified_attn.multi_head.float_linear_fit import fit_linear_groups, plane_scores
from verified_attn.multi_head.pipeline.skeleton import Skeleton
from verified_attn.multi_head.pipeline.skeleton_rows import row_space_fit

_LT = np.log(np.array([1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0, 8.0]))


def _case(seed: int = 3) -> dict[str, np.ndarray]:
    """Three heads of rank 2 (m = 2 full rows per head over J = 7 columns) and a partial row
    k asked at its first 6 columns: its scores a_h^T S_h[:2, C]."""
    rng = np.random.default_rng(seed)
    H, m, J, C = 3, 2, 7, 6
    full = rng.normal(0, 1.5, (m, J, H))  # the full groups' scores s_i[j, h]
    a = rng.normal(0, 1, (m, H))
    s = np.einsum("ijh,ih->jh", full[:, :C], a)
    r = np.array([1.5, -2.0, 0.8])
    Y = group_model(_LT, r[None], s[None])[0]  # (C, T): answers minus F(0)
    return {"full": full, "a": a, "s": s, "r": r, "Y": Y, "A": full[:, :C].transpose(1, 0, 2)}


def _wrong_basin(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A free fit in another head order with two heads' scores swapped at two columns."""
    order = np.array([2, 0, 1])
    s = c["s"][:, order].copy()
    s[[1, 4]] = s[[1, 4]][:, [1, 0, 2]]
    return c["r"][order] * 1.01, s


def test_plane_scores_per_head_is_the_shared_plane_when_equal() -> None:
    rng = np.random.default_rng(0)
    Mt, w = rng.normal(size=(5, 2)), rng.normal(size=(3, 2, 4))
    shared = plane_scores(Mt, w)
    per_head = plane_scores(np.repeat(Mt[:, :, None], 4, axis=2), w)
    assert np.array_equal(shared, per_head)
    # and the per-head fit follows the per-head planes (not head 0's for every head)
    A = rng.normal(size=(5, 2, 4))
    assert not np.allclose(plane_scores(A, w), plane_scores(A[:, :, :1].repeat(4, 2), w))


def test_row_space_fit_leaves_a_wrong_basin() -> None:
    c = _case()
    r, s = _wrong_basin(c)
    got_r, got_s, res = row_space_fit(_LT, c["Y"], r, s, c["A"], 0.0)
    assert res < 1e-12
    assert np.abs(got_s - c["s"]).max() < 1e-9  # in the planes' head order
    assert np.abs(got_r - c["r"]).max() < 1e-9


def test_wrong_planes_do_not_fit() -> None:
    # Head 1's plane replaced by one its scores are not in: no start reaches the answers.
    c = _case()
    A = c["A"].copy()
    A[:, :, 1] = np.random.default_rng(9).normal(size=A[:, :, 1].shape)
    r, s = _wrong_basin(c)
    _, _, res = row_space_fit(_LT, c["Y"], r, s, A, 0.0)
    assert res > 1e-4
    # and the true planes through fit_linear_groups directly reach them from the truth
    fit = fit_linear_groups(_LT, c["Y"][None], c["A"], c["r"][None], c["a"][None])
    assert fit.residual[0] < 1e-14


def _skeleton(c: dict[str, np.ndarray], cols: list[int]) -> Skeleton:
    """A skeleton state: 2 full groups (7 columns), the partial group 2 at ``cols`` with a
    free fit in a wrong basin; F(0) = 0.5 at every column."""
    J, H = 7, 3
    sk = Skeleton(
        oracle=None,  # type: ignore[arg-type]  # row_space asks no queries
        H=H,
        affine=False,
        seed=0,
        unit=2.0**-53,
        U=np.eye(J),
        B=np.eye(J),
        t=np.exp(_LT),
        ratios=[],
    )
    sk.f0 = np.full(J, 0.5)
    sk.m = sk.p = 2
    sk.s = [c["full"][0], c["full"][1]]
    sk.r = [np.ones(H), np.ones(H)]
    sk.cols = [list(range(J)), list(range(J)), cols]
    r, s = _wrong_basin(c)
    n = len(cols)
    sk.rows = [np.zeros((J, 7)), np.zeros((J, 7)), c["Y"][:n] + 0.5]
    sk.r.append(r)
    sk.s.append(s[:n])
    miss = group_model(_LT, r[None], s[None, :n])[0] - c["Y"][:n]
    sk.res = [0.0, 0.0, float(np.linalg.norm(miss))]
    sk.floor = [1e-16, 1e-16, 1e-16]
    return sk


def test_skeleton_keeps_a_better_row_space_refit() -> None:
    c = _case()
    sk = _skeleton(c, list(range(6)))
    before = sk.res[2]
    sk.row_space(2)
    assert sk.refits == [2] and sk.res[2] < 1e-12 < before
    assert np.abs(sk.s[2] - c["s"]).max() < 1e-9


def test_skeleton_row_space_needs_more_columns_than_full_groups() -> None:
    # At m = 2 columns every score vector is in the row space: nothing to constrain.
    c = _case()
    sk = _skeleton(c, [0, 1])
    s = sk.s[2].copy()
    sk.row_space(2)
    assert sk.refits == [] and np.array_equal(sk.s[2], s)


def test_skeleton_keeps_the_free_fit_when_the_refit_is_worse() -> None:
    # Planes that do not hold the scores (wrong full rows): the refit misses, the free fit
    # (here already at the answers) stays.
    c = _case()
    sk = _skeleton(c, list(range(6)))
    sk.r[2], sk.s[2], sk.res[2] = c["r"].copy(), c["s"].copy(), 0.0
    sk.s[0] = np.random.default_rng(5).normal(size=sk.s[0].shape)
    sk.row_space(2)
    assert sk.refits == [] and np.array_equal(sk.s[2], c["s"])
