"""Stage 5, repairs: stalled u-groups started again from other groups' low-rank head planes
and from joint restarts (no query).
"""

from __future__ import annotations

import numpy as np

from verified_attn.multi_head.float_fit import (
    GroupFit,
    fit_groups,
    group_model,
    moved_starts,
    polish_groups,
    transposition_starts,
)
from verified_attn.multi_head.float_linear_fit import (
    fit_linear_groups,
)
from verified_attn.multi_head.float_rescue import head_subspaces, subspace_starts
from verified_attn.multi_head.pipeline.poles import (
    _float_poles,
)
from verified_attn.multi_head.pipeline.rules import (
    _CONVERGED,
    _GROUP_FIT,
    _LOCAL_SHIFTS,
    _score_grid,
)
from verified_attn.multi_head.pipeline.state import FloatState

# Seeds the low-rank restarts' random tuples (rank > 2), with the group and the sizes.
_SUBSPACE_SEED = 0x6C6F77


def _stalled(res: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """The u-groups :func:`_decode_pooled` refuses: a fit over ``_GROUP_FIT`` x its rounding
    floor, or over ``_CONVERGED`` x the groups' median level (a local minimum)."""
    level = float(np.median(res / floor)) if len(res) > 1 else 1.0
    return ~((res <= _GROUP_FIT * floor) & (res <= _CONVERGED * max(level, 1.0) * floor))


def _low_rank_restarts(
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    H: int,
    fits: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    Mt: np.ndarray,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], list[int], int]:
    """``fits`` with the stalled u-groups (:func:`_stalled`) fitted again from starts in the
    heads' plane subspaces, where the converged groups' planes show the heads have a low rank
    (:mod:`.float_rescue`; redundant design only: a square design's plane is every pair's).
    No query: the stalled groups' own answers, started elsewhere. A group's new fit is kept
    if it is better, and it counts as restarted once it is no longer stalled. Returns the
    fits, the restarted groups and the rank found (0: none)."""
    r, s, res, floor = fits
    ncols = len(f0)
    stalled = _stalled(res, floor)
    if H < 2 or Mt.shape[0] <= Mt.shape[1] or not stalled.any():
        return fits, [], 0
    good = np.flatnonzero(~stalled)
    planes = np.linalg.lstsq(Mt, np.moveaxis(s[good], 0, 1).reshape(ncols, -1), rcond=None)[0]
    found = head_subspaces(planes.reshape(Mt.shape[1], len(good), H).transpose(1, 0, 2))
    if found is None:
        return fits, [], 0
    r, s, res = r.copy(), s.copy(), res.copy()
    lt = np.log(t)
    t0 = np.concatenate([[0.0], t])
    level = float(np.median(res / floor))
    restarted = []
    for k in np.flatnonzero(stalled):
        rows = ans[k * ncols : (k + 1) * ncols]
        Y = rows - f0[:, None]
        # The group's single-pair scores: each pair's poles alone (as _group_fits' starts).
        cand = np.array(
            [
                [x[0] for x in _float_poles(t0, np.concatenate([[f0[j]], rows[j]]), H)]
                for j in range(ncols)
            ]
        )
        rng = np.random.default_rng([int(k), H, ncols, _SUBSPACE_SEED])
        for r0, w0 in subspace_starts(lt, Y, Mt, cand, found, rng):
            # One batch: the consensus start, or one head's best grid points (float_rescue).
            n = len(r0)
            fit = fit_linear_groups(
                lt, np.repeat(Y[None], n, 0), Mt, r0, w0, floor=np.repeat(floor[k], n)
            )
            i = int(np.argmin(fit.residual))
            if fit.residual[i] < res[k]:
                r[k], s[k], res[k] = fit.r[i], fit.s[i], fit.residual[i]
            if res[k] <= min(_GROUP_FIT, _CONVERGED * max(level, 1.0)) * floor[k]:
                restarted.append(int(k))
                break
    return (r, s, res, floor), restarted, found.rank


def _repair_limit(d: int) -> int:
    """How many u-groups missing after the pooled fits are repaired (more: refused at once).

    Measured at d = 8, H = 5-7: up to 4 of 8 groups miss after the pooled fits and all are
    repaired; at d = 16, H = 8, 14 of 16 (refused in 24 s instead of 2.5-6 min).

    >>> _repair_limit(8), _repair_limit(32)
    (6, 24)
    """
    return max(3, (3 * d) // 4)


def _joint_restarts(
    lt: np.ndarray, Y: np.ndarray, r: np.ndarray, s: np.ndarray, pair_floor: np.ndarray
) -> GroupFit:
    """One u-group refitted jointly (residues and every score) from restarts of its worst pair.

    The scores-only repairs of :func:`_group_fits` hold the residues fixed, and a pair in a
    local minimum biases them (measured: 3.6e-9 at d = 8, H = 5), enough that a crowded
    pair (four scores within 0.9) cannot reach its basin with them fixed. Here the worst
    pair (largest miss over its rounding floor) starts from every transposition, every
    one-head move over ``_score_grid(lt)`` and every one-head shift by ``_LOCAL_SHIFTS`` while the other pairs keep their fit, and the whole
    group is refitted from each start (batched); returns the best (a GroupFit of one group).
    """
    miss = np.linalg.norm(group_model(lt, r[None], s[None])[0] - Y, axis=-1)
    j = int(np.argmax(miss / np.maximum(pair_floor, 1e-300)))
    H = s.shape[-1]
    # Small shifts of one head too: two close scores with a tiny residue between them sit in
    # a local minimum 1e-2 from the truth (d = 8, H = 4, eval seed 5), which neither a
    # transposition nor a move to the grid reaches.
    shifted = s[j][None, None, :] + np.eye(H)[:, None, :] * _LOCAL_SHIFTS[None, :, None]
    starts = np.concatenate(
        [
            transposition_starts(s[j][None])[0],
            moved_starts(s[j][None], _score_grid(lt))[0],
            shifted.reshape(-1, H),
        ]
    )
    s0 = np.repeat(s[None], len(starts), axis=0)
    s0[:, j] = starts
    n = len(starts)
    # Every start to convergence: pruning to the best 6 after 30 steps loses the crowded
    # pairs' basins (measured: d = 8, H = 5, eval seed 0 refused again).
    fit = fit_groups(lt, np.repeat(Y[None], n, 0), np.repeat(r[None], n, 0), s0)
    fit = polish_groups(lt, np.repeat(Y[None], n, 0), fit.r, fit.s)
    i = int(np.argmin(fit.residual))
    return GroupFit(r=fit.r[i : i + 1], s=fit.s[i : i + 1], residual=fit.residual[i : i + 1])


def restart_stage(st: FloatState) -> None:
    """Stage 5, the repairs: stalled u-groups started again from the converged groups'
    low-rank head planes (no query), before any is asked again."""
    if st.fits is None or not st.options.low_rank_restarts:
        return
    before = st.fits[2]
    st.fits, more, rank = _low_rank_restarts(st.f0, st.ans, st.t, st.H, st.fits, st.Mt)
    if (st.fits[2] < before).any():
        st.options.mark("low_rank_restarts")
    st.restarted, st.rank = st.restarted + more, max(st.rank, rank)
