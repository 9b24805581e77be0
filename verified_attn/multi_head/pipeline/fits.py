"""Stage 4, the u-group fits: each u's d (affine d + 1) pairs fitted jointly with shared residues."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from verified_attn.multi_head.float_fit import (
    GroupFit,
    fit_groups,
    fit_scores,
    group_model,
    moved_starts,
    polish_groups,
    transposition_starts,
)
from verified_attn.multi_head.float_linear_fit import (
    consensus_start,
    fit_linear_groups,
    linear_start,
    score_weights,
)
from verified_attn.multi_head.pipeline.poles import (
    _assign,
    _float_poles,
)
from verified_attn.multi_head.pipeline.repairs import (
    _joint_restarts,
    _repair_limit,
)
from verified_attn.multi_head.pipeline.rules import (
    _BASIN,
    _CONSENSUS_SEED,
    _CONVERGED,
    _JOINT_ROUNDS,
    _LINEAR_ROUNDS,
    _PRUNE_ABOVE,
    _RANDOM_STARTS,
    _REPAIR_PRUNE,
    _REPAIR_STEPS,
    _REPAIRS,
    _SOURCE_WORK,
    _SOURCES,
    _score_grid,
)
from verified_attn.multi_head.pipeline.state import DEFAULT_OPTIONS, FloatState, Options


def _group_fits(
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    H: int,
    d: int,
    unit: float,
    *,
    ids: Sequence[int] | None = None,
    full_d: int | None = None,
    Mt: np.ndarray | None = None,
    options: Options = DEFAULT_OPTIONS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps 1-2 of :func:`_decode_pooled`: every u-group's residues r (d, H), scores
    s (d, J, H) (head order per group arbitrary), residual norms (d,) and rounding floors
    (d,), from the grid answers ``ans`` (rows: pairs (u_k, b_j), k-major) and ``f0``.

    ``Mt`` (J, p): the probe columns (:func:`float_probe_matrix` transposed). With more pairs
    than p (redundant columns) the free fits are only the starts of the fit in (r, w) with
    ``s = Mt w`` (:func:`_linear_stage`), whose scores are returned.

    ``ids`` (the groups' indices in the design, default ``range(d)``) and ``full_d`` (the
    design's d) let a subset of the groups be refitted (:func:`_refit_groups`) exactly as
    they are fitted among all d: the same sources, repair limit and seeded starts (only the
    pruning of very large batches of starts depends on the batch's size)."""
    ids = list(range(d)) if ids is None else list(ids)
    full_d = d if full_d is None else full_d
    ncols, T = len(f0), len(t)
    lt = np.log(t)
    n_grid = d * ncols
    Y = (ans[:n_grid] - np.tile(f0, d)[:, None]).reshape(d, ncols, T)
    # The rounding floor of each group (answers and their F(0)), and of each link.
    floor = unit * np.sqrt(
        (ans[:n_grid] ** 2).sum(axis=1).reshape(d, ncols).sum(axis=1) + T * float(f0 @ f0)
    )
    r0, s0, n_src = _sources(f0, ans, t, H, Y, Mt, full_d)
    pair_floor = unit * np.sqrt((ans[:n_grid] ** 2).sum(axis=1) + T * np.tile(f0, d) ** 2)
    if H > 1:
        s0 = _source_scores(lt, Y, r0, s0)
    fit = fit_groups(
        lt,
        np.repeat(Y, n_src, axis=0),
        r0.reshape(d * n_src, H),
        s0.reshape(d * n_src, ncols, H),
        floor=np.repeat(floor, n_src),
    )
    fit = polish_groups(lt, np.repeat(Y, n_src, axis=0), fit.r, fit.s)
    wide = Mt is not None and Mt.shape[0] > Mt.shape[1]
    if wide:
        # Redundant columns: every source's free fit starts a fit in (r, w); the best is
        # kept (a group still off its floor goes through the free repairs below).
        assert Mt is not None
        r_lin, s_lin, res_lin = _linear_stage(
            lt, np.repeat(Y, n_src, axis=0), Mt, fit.r, fit.s, np.repeat(floor, n_src), options
        )
        fit = GroupFit(r=r_lin, s=s_lin, residual=res_lin)
    res = fit.residual.reshape(d, n_src)
    best = res.argmin(axis=1)
    r = fit.r.reshape(d, n_src, H)[np.arange(d), best]
    s = fit.s.reshape(d, n_src, ncols, H)[np.arange(d), best]
    res_best = res[np.arange(d), best]
    # Repairs cost ~10 s a group at d = 16, H = 8; when more groups than _repair_limit(d)
    # miss after the pooled fits, the decoding is refused at once (measured at d = 16, H = 8:
    # 10 of 16 groups at 1e4 x - 1e10 x the floor, where even fits started at the truth
    # estimate errors up to 2e-6: the design's conditioning, not the starts).
    n_bad = int(np.sum(~(res_best <= _CONVERGED * floor)))
    repairable = n_bad <= _repair_limit(full_d)
    rounds = _REPAIRS if repairable and options.pair_repairs else 0
    if wide:
        # The repairs below work on the free fit (off the plane): the groups they change
        # are fitted on the plane again afterwards, from the repaired scores.
        on_plane = (r.copy(), s.copy(), res_best.copy())
    for _ in range(rounds):
        if not _repair_round(lt, Y, r, s, res_best, floor, pair_floor, ids):
            break
        options.mark("pair_repairs")
    before = res_best.copy()
    for k in range(d if repairable and options.joint_restarts else 0):
        _joint_rounds(lt, Y[k], r[k], s[k], res_best, k, floor[k], pair_floor, ncols)
    if (res_best < before).any():
        options.mark("joint_restarts")
    if wide:
        r_rep, s_rep = r, s  # the repaired free fits
        moved = np.flatnonzero(res_best < on_plane[2])
        r, s, res_best = on_plane
        if len(moved):
            # Measured (random d = 8, H = 6, benchmark seeds 4 and 12): one u-group left at
            # 1e9 x its floor by the fit on the plane, which the free repairs' starts reach.
            assert Mt is not None
            got = _linear_stage(lt, Y[moved], Mt, r_rep[moved], s_rep[moved], floor[moved], options)
            better = got[2] < res_best[moved]
            i = moved[better]
            r[i], s[i], res_best[i] = got[0][better], got[1][better], got[2][better]
    return r, s, res_best, floor


def _linear_stage(
    lt: np.ndarray,
    Y: np.ndarray,
    Mt: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    floor: np.ndarray,
    options: Options = DEFAULT_OPTIONS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The redundant design's fit in (r, w), ``s = Mt w`` (:func:`~.float_linear_fit.fit_linear_groups`),
    started from the free fits' scores with the pairs off the plane left out
    (:func:`~.float_linear_fit.linear_start`). A group still over ``_CONVERGED`` x its floor is
    started again from its free scores' consensus planes (:func:`~.float_linear_fit.consensus_start`),
    then, up to ``_LINEAR_ROUNDS`` times, from its pairs' scores refitted alone
    with the linear fit's residues (from the plane's scores, every transposition and one
    head moved across the window): the plane then predicts a wrong-basin pair's scores
    far better than its own free fit did. Returns r, s = Mt w and the residuals."""
    ncols, H = s.shape[1:]
    fit = fit_linear_groups(lt, Y, Mt, r, linear_start(Mt, s, score_weights(lt, r, s)), floor=floor)
    r_free, s_free = r, s
    r, s, res = fit.r, fit.s, fit.residual
    bad = np.flatnonzero(~(res <= _CONVERGED * floor))
    if len(bad) and H > 1 and options.consensus_start:
        # A group off its floor starts again from its free scores' consensus planes: with
        # few redundant pairs the greedy start bends toward a wrong-basin pair (measured,
        # float_linear_fit.consensus_start). Seeded by the sizes alone: a group's fit does not
        # depend on the batch it is fitted in (_refit_groups).
        rng = np.random.default_rng([ncols, Mt.shape[1], H, _CONSENSUS_SEED])
        weight = score_weights(lt, r_free[bad], s_free[bad])
        start = consensus_start(Mt, s_free[bad], weight, rng)
        again = fit_linear_groups(lt, Y[bad], Mt, r_free[bad], start, floor=floor[bad])
        better = again.residual < res[bad]
        if better.any():
            options.mark("consensus_start")
        i = bad[better]
        r[i], s[i], res[i] = again.r[better], again.s[better], again.residual[better]
    for _ in range(_LINEAR_ROUNDS if options.linear_rounds else 0):
        bad = np.flatnonzero(~(res <= _CONVERGED * floor))
        if not len(bad) or H == 1:
            break
        # Each pair of the bad groups refitted alone with the group's residues.
        Yb = Y[bad].reshape(-1, Y.shape[-1])
        rb = np.repeat(r[bad], ncols, axis=0)
        sb = s[bad].reshape(-1, H)
        starts = np.concatenate(
            [sb[:, None, :], transposition_starts(sb), moved_starts(sb, _score_grid(lt))], axis=1
        )
        got, _ = fit_scores(lt, Yb, rb, starts, prune=_REPAIR_PRUNE)
        s_free = got.reshape(len(bad), ncols, H)
        start = linear_start(Mt, s_free, score_weights(lt, r[bad], s_free))
        again = fit_linear_groups(lt, Y[bad], Mt, r[bad], start, floor=floor[bad])
        better = again.residual < res[bad]
        if not better.any():
            break
        options.mark("linear_rounds")
        i = bad[better]
        r[i], s[i], res[i] = again.r[better], again.s[better], again.residual[better]
    return r, s, res


def _refit_groups(
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    H: int,
    unit: float,
    fits: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    groups: Sequence[int],
    Mt: np.ndarray | None = None,
    options: Options = DEFAULT_OPTIONS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``fits`` (from :func:`_group_fits`) with the u-groups ``groups`` fitted again from
    ``ans``: a conditioning round changes only the answers of the groups it asked again, and
    each group's fit depends only on its own answers (the others keep theirs, at no cost)."""
    d, ncols = len(fits[0]), len(f0)
    rows = np.concatenate([ans[k * ncols : (k + 1) * ncols] for k in groups])
    got = _group_fits(
        f0, rows, t, H, len(groups), unit, ids=groups, full_d=d, Mt=Mt, options=options
    )
    out = tuple(x.copy() for x in fits)
    for x, y in zip(out, got, strict=True):
        x[list(groups)] = y
    return out  # type: ignore[return-value]


def fit_stage(st: FloatState) -> None:
    """Stage 4, the u-group fits: each u's pairs fitted jointly with shared residues, with
    the repairs of groups in local minima (:func:`_group_fits`)."""
    st.fits = _group_fits(st.f0, st.ans, st.t, st.H, st.d, st.unit, Mt=st.Mt, options=st.options)


def _sources(
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    H: int,
    Y: np.ndarray,
    Mt: np.ndarray | None,
    full_d: int,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Each group's source pairs (the best-conditioned: widest score gaps, or with redundant
    columns the pairs whose residues agree with others') and, per source, its residues r0
    (d, n_src, H) and every pair's own single-pair scores assigned to them s0
    (d, n_src, J, H)."""
    d, ncols, T = Y.shape
    lt = np.log(t)
    t0 = np.concatenate([[0.0], t])
    single = [
        _float_poles(t0, np.concatenate([[f0[j]], ans[k * ncols + j]]), H)
        for k in range(d)
        for j in range(ncols)
    ]
    ss = np.array([[x[0] for x in p] for p in single]).reshape(d, ncols, H)
    sr = np.array([[x[1] for x in p] for p in single]).reshape(d, ncols, H)
    own = group_model(lt, sr.reshape(-1, H), ss.reshape(-1, 1, H)).reshape(d, ncols, T) - Y
    own_rel = np.linalg.norm(own, axis=-1) / np.maximum(np.linalg.norm(Y, axis=-1), 1e-300)
    gaps = np.diff(np.sort(ss, axis=-1), axis=-1).min(axis=-1) if H > 1 else np.ones((d, ncols))
    key = np.where(own_rel <= 1e-8, gaps, -own_rel)
    if Mt is not None and Mt.shape[0] > Mt.shape[1] and H > 1 and ncols > 3:
        # Redundant columns, many heads: a single pair's residues are often far off (2H
        # unknowns from 2H + 1 answers), and its score gap does not say which. The pairs
        # whose residues agree with other pairs' are the sources: key = minus the median
        # distance to its 3 nearest (sorted residues, relative). Measured (nn.MHA E = 16,
        # H = 8): in groups whose widest-gap sources were off by 0.5 - 2, three pairs agreed
        # to 2e-4 with residues 3e-5 - 2e-4 from the truth.
        srt = np.sort(sr, axis=-1)
        scale_r = np.maximum(np.abs(srt).max(axis=-1), 1e-300)
        dist = np.abs(srt[:, :, None, :] - srt[:, None, :, :]).max(axis=-1) / scale_r[:, :, None]
        dist[:, np.arange(ncols), np.arange(ncols)] = np.inf
        near = np.sort(dist, axis=-1)[:, :, :3]
        key = np.where(np.isfinite(near).all(axis=-1), -np.median(near, axis=-1), -np.inf)
    n_src = min(ncols, max(_SOURCES, _SOURCE_WORK // (full_d * ncols)))
    src = np.argsort(-key, axis=1, kind="stable")[:, :n_src]
    r0 = np.empty((d, n_src, H))
    s0 = np.empty((d, n_src, ncols, H))
    for k in range(d):
        for c in range(n_src):
            ref = sr[k, src[k, c]]
            r0[k, c] = ref
            scale = max(float(np.abs(ref).max()), 1e-300)
            for j in range(ncols):
                # Pair j's own heads assigned to the source's by residue (plus a little
                # score distance, which breaks near-ties of residue toward a smooth start).
                cost = np.abs(sr[k, j][:, None] - ref[None, :]) / scale
                rows, cols = _assign(cost)
                s0[k, c, j, cols] = ss[k, j, rows]
    return r0, s0, n_src


def _source_scores(lt: np.ndarray, Y: np.ndarray, r0: np.ndarray, s0: np.ndarray) -> np.ndarray:
    """Each pair's scores alone with its source's residues fixed (:func:`_group_fits`)."""
    d, n_src, ncols, H = s0.shape
    T = Y.shape[-1]
    # Each pair's scores alone, with the source's residues fixed, from its own heads
    # (assigned by residue) and every transposition; pairs still missing their answers
    # then from one head moved across the window (a merged or far-off pole).
    # Staged (the cost is in the starts): most pairs are in the right basin from their
    # own heads; only those missing by more than _BASIN relative get the other starts.
    Yr = np.repeat(Y, n_src, axis=0).reshape(-1, T)
    rr = np.repeat(r0.reshape(d * n_src, 1, H), ncols, axis=1).reshape(-1, H)
    flat = s0.reshape(-1, H)
    flat, miss = fit_scores(lt, Yr, rr, flat[:, None, :])
    target = _BASIN * np.maximum(np.linalg.norm(Yr, axis=1), 1e-300)
    for make in (transposition_starts, lambda x: moved_starts(x, _score_grid(lt))):
        worse = np.flatnonzero(~(miss <= target))
        if not len(worse):
            break
        starts = make(flat[worse])
        # Many problems (d = 32, H = 8: 3072 x 136 starts, 170 s) go on from their best
        # 4 starts after 5 steps; the small boxes' fits are left as they were measured.
        big = starts.shape[0] * starts.shape[1] > _PRUNE_ABOVE
        got, got_miss = fit_scores(lt, Yr[worse], rr[worse], starts, prune=(5, 4) if big else None)
        keep = got_miss < miss[worse]
        flat[worse[keep]], miss[worse[keep]] = got[keep], got_miss[keep]
    s0 = flat.reshape(d, n_src, ncols, H)
    return s0


def _repair_round(
    lt: np.ndarray,
    Y: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    res_best: np.ndarray,
    floor: np.ndarray,
    pair_floor: np.ndarray,
    ids: Sequence[int],
) -> bool:
    """One repair round of the groups over ``_CONVERGED`` x their floor (r, s and res_best
    changed in place); False when there is nothing left to repair or nothing changed."""
    d, ncols, H = s.shape
    # A group whose pooled fit misses its answers has a pair in a local minimum (two
    # heads' scores swapped, or merged poles), which also biases the shared residues.
    # Leave each pair out in turn (the best of these fits gives unbiased residues),
    # refit the pairs that then miss from many starts, then the whole group again.
    bad_groups = [k for k in range(d) if not res_best[k] <= _CONVERGED * floor[k]]
    if not bad_groups or H == 1:
        return False
    changed = False
    for k in bad_groups:
        rk, sk = r[k].copy(), s[k].copy()
        if ncols >= 3:
            keep = np.array([[i for i in range(ncols) if i != j] for j in range(ncols)])
            loo = fit_groups(lt, Y[k][keep], np.repeat(rk[None], ncols, 0), sk[keep])
            loo = polish_groups(lt, Y[k][keep], loo.r, loo.s)
            jbest = int(loo.residual.argmin())
            rk = loo.r[jbest]
            sk[keep[jbest]] = loo.s[jbest]
        miss = np.linalg.norm(group_model(lt, rk[None], sk[None])[0] - Y[k], axis=-1)
        pf = pair_floor[k * ncols : (k + 1) * ncols]
        jj = np.flatnonzero(~(miss <= _CONVERGED * pf))
        if len(jj):
            rng = np.random.default_rng([ids[k], H, 12])
            starts = np.concatenate(
                [
                    transposition_starts(sk[jj]),
                    moved_starts(sk[jj], _score_grid(lt)),
                    rng.uniform(-6.0, 6.0, (len(jj), _RANDOM_STARTS, H)),
                ],
                axis=1,
            )
            sk[jj], _ = fit_scores(
                lt,
                Y[k, jj],
                np.repeat(rk[None], len(jj), 0),
                starts,
                steps=_REPAIR_STEPS,
                prune=_REPAIR_PRUNE,
            )
        again = fit_groups(lt, Y[k][None], rk[None], sk[None], floor=floor[k : k + 1])
        again = polish_groups(lt, Y[k][None], again.r, again.s)
        if again.residual[0] < res_best[k]:
            r[k], s[k], res_best[k] = again.r[0], again.s[0], again.residual[0]
            changed = True
    return changed


def _joint_rounds(
    lt: np.ndarray,
    Yk: np.ndarray,
    rk: np.ndarray,
    sk: np.ndarray,
    res_best: np.ndarray,
    k: int,
    floor_k: float,
    pair_floor: np.ndarray,
    ncols: int,
) -> None:
    """Up to ``_JOINT_ROUNDS`` joint restarts of group k's worst pair (rk, sk, res_best[k]
    changed in place), while it is over ``_CONVERGED`` x its floor and a restart helps."""
    H = len(rk)
    for _ in range(_JOINT_ROUNDS):
        if res_best[k] <= _CONVERGED * floor_k or H == 1:
            break
        joint = _joint_restarts(lt, Yk, rk, sk, pair_floor[k * ncols : (k + 1) * ncols])
        if not joint.residual[0] < res_best[k]:
            break
        rk[:], sk[:], res_best[k] = joint.r[0], joint.s[0], joint.residual[0]
