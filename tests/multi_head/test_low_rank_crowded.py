"""Crowded partial u-groups of the low-rank skeleton (pipeline/skeleton_rows.py crowded /
plane_miss, Skeleton.uncrowd): two heads' scores close at one column let a second solution of
the group's fit meet its answers (the pair reflected about its weighted mean); at more
columns than full groups the full groups' planes tell it from the right one."""

from __future__ import annotations

import numpy as np

from verified_attn.multi_head.float_fit import group_model
from verified_attn.multi_head.pipeline.skeleton import Skeleton
from verified_attn.multi_head.pipeline.skeleton_rows import (
    CROWDED_GAP,
    crowded,
    plane_miss,
    row_space_fit,
)

_LT = np.log(np.array([1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0, 8.0, 16.0]))


def _case() -> dict[str, np.ndarray]:
    """Three heads, m = 2 full rows, 4 columns; heads 0 and 1 at column 1 are 2e-3 apart
    (residues -0.5 and 2.8, as u_6 of nn.MultiheadAttention E = 32, H = 8). ``bad`` is the
    pair reflected about its weighted mean ``(r_0 s_0 + r_1 s_1) / (r_0 + r_1)``: the first
    order of the answers is the same."""
    rng = np.random.default_rng(5)
    s = np.array([[-1.2, 0.7, 1.9], [0.300, 0.302, -1.1], [1.4, -0.6, 0.2], [-0.4, 1.1, -2.0]])
    r = np.array([-0.5, 2.8, 1.3])
    A = np.stack([np.stack([s[:, h], rng.normal(size=4)], axis=1) for h in range(3)], axis=2)
    mu = (r[0] * s[1, 0] + r[1] * s[1, 1]) / (r[0] + r[1])
    bad = s.copy()
    bad[1, :2] = 2 * mu - s[1, :2]
    Y = group_model(_LT, r[None], s[None])[0]
    return {"s": s, "r": r, "A": A, "bad": bad, "Y": Y}


def test_crowded_pairs_are_found() -> None:
    c = _case()
    assert crowded(c["s"]) and crowded(c["bad"])
    spread = c["s"].copy()
    spread[1, 1] = 0.3 + 2 * CROWDED_GAP
    assert not crowded(spread)
    assert not crowded(c["s"][:, :1])  # one head: no pair


def test_the_reflected_pair_meets_the_answers_to_first_order() -> None:
    # Why the group's own answers cannot be trusted to tell it: the reflected pair's miss is
    # second order in the pair's spread, far below a score error of the same size elsewhere.
    c = _case()
    lt, r, Y = _LT, c["r"], c["Y"]
    moved = np.abs(c["bad"] - c["s"]).max()
    miss = np.linalg.norm(group_model(lt, r[None], c["bad"][None])[0] - Y)
    other = c["s"].copy()
    other[2, 2] += moved
    assert miss < 1e-2 * np.linalg.norm(group_model(lt, r[None], other[None])[0] - Y)


def test_the_planes_catch_the_reflected_pair_and_the_row_space_repairs_it() -> None:
    c = _case()
    assert plane_miss(c["s"], c["A"]) < 1e-12
    # The deliberately wrong row (the reflected pair) is off its heads' planes ...
    assert plane_miss(c["bad"], c["A"]) > 1e-4
    # ... and so is a row with two heads' labels swapped at every column.
    assert plane_miss(c["s"][:, [1, 0, 2]], c["A"]) > 1e-1
    # The row-space refit from the wrong row lands on the right one.
    r, s, res = row_space_fit(_LT, c["Y"], c["r"], c["bad"], c["A"], 0.0)
    assert res < 1e-10 and np.abs(s - c["s"]).max() < 1e-8 and np.abs(r - c["r"]).max() < 1e-8
    assert plane_miss(s, c["A"]) < 1e-8


def _skeleton(c: dict[str, np.ndarray], s: np.ndarray, res: float) -> Skeleton:
    """A skeleton of d = 3 rows (m = 2 full, their scores the case's planes) whose partial
    row u_3 holds the scores ``s`` at the 4 columns with the stated residual."""
    t = np.exp(_LT)
    sk = Skeleton(None, 3, False, 0, 2.0**-52, np.eye(3), np.eye(4), t, [])  # type: ignore[arg-type]
    sk.p = sk.m = 2
    sk.f0 = np.zeros(4)
    sk.cols = [list(range(4))] * 3
    sk.s = [c["A"][:, 0, :], c["A"][:, 1, :], s]
    sk.r = [np.ones(3), np.ones(3), c["r"]]
    sk.rows = [np.zeros((4, len(t))), np.zeros((4, len(t))), c["Y"]]
    sk.res, sk.floor = [1e-12, 1e-12, res], [1e-12] * 3
    return sk


def test_the_skeleton_keeps_the_refit_nearer_the_planes() -> None:
    # The reflected row stated at a residual no refit lowers (as a crowded group's wrong
    # branch may meet its answers as well as the right one): the plain row-space step keeps
    # it, the planes' step (Skeleton.uncrowd's) replaces it by the right row.
    c = _case()
    plain = _skeleton(c, c["bad"], 0.0)
    plain.row_space(2)
    assert plain.refits == [] and np.array_equal(plain.s[2], c["bad"])
    sk = _skeleton(c, c["bad"], 0.0)
    sk.row_space(2, planes=True)
    assert sk.refits == [2] and np.abs(sk.s[2] - c["s"]).max() < 1e-8
    # uncrowd: crowded, already past m columns (no round asked: no oracle here), refitted.
    sk = _skeleton(c, c["bad"], 0.0)
    sk.uncrowd(2)
    assert sk.refits == [2] and sk.rounds == [] and np.abs(sk.s[2] - c["s"]).max() < 1e-8
    # The right row is not replaced, and a row not crowded is left alone.
    sk = _skeleton(c, c["s"], 0.0)
    sk.uncrowd(2)
    assert sk.refits == [] and np.array_equal(sk.s[2], c["s"])
