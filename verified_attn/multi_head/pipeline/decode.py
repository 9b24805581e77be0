"""Stage 6, decoding: the u-groups pooled into heads (links, swaps, twins)."""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, cast

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.multi_head.float_fit import (
    GroupFit,
    closest_gap,
    fit_groups,
    heads_named,
    link_noise,
    link_orders,
    polish_groups,
    sigma_min_groups,
)
from verified_attn.multi_head.pipeline.asking import ask_ties
from verified_attn.multi_head.pipeline.budget import within_follow_up
from verified_attn.multi_head.pipeline.design import (
    _LINK_EXCLUDE,
    _MATCH_MARGIN,
    _float_name,
    float_probe_matrix,
)
from verified_attn.multi_head.pipeline.fits import (
    _group_fits,
)
from verified_attn.multi_head.pipeline.poles import (
    _clusters,
    _ranked,
    _sigmoid,
    link_decided,
)
from verified_attn.multi_head.pipeline.rules import (
    _CONVERGED,
    _GROUP_FIT,
    _LINK_FLOOR,
    _NEAR_GAP,
    _TIE_RESIDUE,
    _TWIN,
    _TWIN_SIGNIFICANT,
    _Decoded,
)
from verified_attn.multi_head.pipeline.state import DEFAULT_OPTIONS, FloatState, Options
from verified_attn.multi_head.pipeline.verify import (
    _propagated_error,
    _sigma_min,
)

#: The largest score a polished (float32) design's decoded group keeps (sigmoid(40) is
#: 1 - 4e-18: no float answer sees a larger one).
_SCORE_CAP = 40.0


def _decode_pooled(
    U: np.ndarray,
    B: np.ndarray,
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    H: int,
    affine: bool,
    arith: Arithmetic,
    ask_ties: Any,
    fits: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
    options: Options = DEFAULT_OPTIONS,
    polished: bool = False,
) -> _Decoded:
    """Decode the float answers by pooled u-group fits and predicted links.

    ``fits``: the u-group fits of step 2 (:func:`_group_fits`: r, s, residuals, floors) if
    already computed (a conditioning round refits only the groups it asked again); they are
    not changed here.

    1. Each grid pair alone (:func:`_float_poles`): starting points only.
    2. Per u-group k, the pairs ``(u_k, b_j)`` fitted jointly with shared residues
       (:func:`~.float_fit.fit_groups`), started from each of its ``_SOURCES``
       best-conditioned pairs' residues (the widest score gaps), the best kept; a group
       above ``_CONVERGED`` x its rounding floor is repaired (leave-one-out residues,
       scores-only restarts of its missing pairs, then joint restarts of its worst pair),
       all in :func:`_group_fits`. With redundant columns (:func:`extra_columns`) each
       source's fit is the start of the fit in (r, w), ``s = M^T w``
       (:func:`_linear_stage`), a group the repairs change is fitted on the plane again
       from them, and step 3's swaps are not needed.
    3. Gates: a group over ``_GROUP_FIT`` x its floor misses its answers; one over
       ``_CONVERGED`` x the groups' median level is a local minimum (the first-order
       estimate does not hold there); both are refused (neither is, where
       ``polished``: see :func:`decode_stage`). Pairs with two close scores are
       refitted swapped (:func:`_swap_alternatives`): a second solution that fits as well
       is decided by a tie link (:func:`_resolve_twins`), or enters the error estimate with
       its distance, and is named if the estimate fails.
    4. Group k's heads ordered against group 1 by the halved link ``((u_1 + u_k)/2, b_1)``:
       every order predicts its answers outright (:func:`~.float_fit.link_orders`).
    5. ``[W_h | c_h] = U^-1 S_h M^-1``, ``v_h = U^-1 r_h``; the error per group is the
       larger of the first-order ``|dY| / sigma_min`` and a second solution's distance,
       carried through ``|U^-1|`` and ``|M^-1|``.
    """
    d, ncols, T = U.shape[0], B.shape[0], len(t)
    lt = np.log(t)
    n_grid = d * ncols
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    if fits is None:
        fits = _group_fits(f0, ans, t, H, d, unit, options=options)
    # Copies: the steps below reorder and replace rows of r and s in place.
    r, s, res_best, floor = (x.copy() for x in fits)
    Y = (ans[:n_grid] - np.tile(f0, d)[:, None]).reshape(d, ncols, T)
    gap = closest_gap(s)
    bad = [k for k in range(d) if not res_best[k] <= _GROUP_FIT * floor[k]]
    if bad and not polished:
        k = bad[0]
        return _refused(
            gap,
            bad,
            f"u_{k + 1} ({ncols} pairs, {H} heads) misses its answers by "
            f"{res_best[k]:.2e}, over {_GROUP_FIT:g} x its rounding floor {floor[k]:.2e} "
            f"({len(bad)} of {d} groups): not {H} softmax heads, or too ill-conditioned",
        )
    M = float_probe_matrix(B, affine)
    wide = M.shape[1] > M.shape[0]
    # (After the refusal above: the swaps cost a group fit each, 20 s at d = 32, H = 8.)
    # With redundant columns a pair's two close scores are fixed by the others through
    # s = M^T w: swapping them leaves the plane, so there is no second solution to look for;
    # what is left of their closeness is in the linear fit's sigma_min (the estimate).
    twins: list[tuple[int, int, int, int, float, float]] = []
    # Not a switch: a second solution is an error the first-order estimate cannot see, so
    # it enters the estimate (or names the refusal) whether or not it changes the fit.
    if not wide:
        r, s, res_best, _, twins, alts = _swap_alternatives(lt, Y, r, s, res_best, floor)
        twins = _resolve_twins(twins, alts, r, s, res_best, lt, f0, unit, ask_ties)
    spread = np.zeros(d)
    for tw in twins:
        spread[tw[0]] = max(spread[tw[0]], tw[5])
    gap = closest_gap(s)
    # The first-order estimate holds at a minimum whose residual is the answers' noise, not
    # at a local minimum: a group far above the others' level (each over its own floor; the
    # median adapts to a box noisier than its unit roundoff) is refused, not estimated.
    # Measured: a local minimum at 160 x the floor (the others 1-2 x) with score errors 1e-2
    # and a first-order estimate that passed the gate (caught only by the fresh queries).
    level = float(np.median(res_best / floor)) if d > 1 else 1.0
    stuck = [k for k in range(d) if not res_best[k] <= _CONVERGED * max(level, 1.0) * floor[k]]
    if stuck and not polished:
        k = stuck[0]
        return _refused(
            gap,
            stuck,
            f"u_{k + 1} ({ncols} pairs, {H} heads) stops at "
            f"{res_best[k] / floor[k]:.3g} x its rounding floor, over {_CONVERGED:g} x the "
            f"groups' median {level:.3g} x ({len(stuck)} of {d} groups): a local minimum of "
            "the fit (the box is not shown out of class); rerun with another seed",
        )
    ambiguous: list[str] = []
    noise = np.sqrt(res_best**2 + floor**2)  # each group's |dY|: residual and rounding
    # Heads with (nearly) equal residues at u_k (e.g. equal v) are interchangeable in the
    # group's fit pair by pair: one F(1) at (u_k, (b_1 + b_j)/2) per such pair j >= 1 (a
    # tie link, as in exact mode) decides which of pair j's scores goes with which of b_1's.
    # With redundant columns no tie link is needed: each head's scores lie on the plane
    # s = M^T w, and a pair whose two heads are swapped leaves it (with the swapped pairs S
    # and the rest S', w'_a meets M_S^T w_a and M_S'^T w_b: J > p equations in p unknowns,
    # inconsistent unless w_a = w_b), so the fit's head order is the same in every pair.
    ambiguous += _tie_links(r, s, f0, wide, ask_ties, arith)
    ambiguous += _link_orders(lt, ans, f0, r, s, noise, level, unit, arith)
    if polished:
        # A stuck group's score can run off to a saturated sigmoid (measured: 1e22, E = 16,
        # H = 4 module seed 2), and U^-1 would spread its rounding over every row of that
        # head; at _SCORE_CAP the answers cannot see it either (the polish refits it).
        np.clip(s, -_SCORE_CAP, _SCORE_CAP, out=s)
    heads, beta = _heads(U, B, M, r, s, f0, affine)
    sig = _sigma_min(lt, M, r, s)
    # A second solution that fits as well is an error the first-order figure cannot see.
    estimate = _propagated_error(
        res_best, floor, lt, r, s, spread, U, B, f0, heads, beta, unit, affine
    )
    if estimate > cast(float, getattr(arith, "parameter_rtol", arith.rtol)):
        ambiguous += _twin_names(twins, arith)
    return _Decoded(heads, beta, ambiguous, gap, float(sig.min()), estimate)


def _refused(gap: float, groups: list[int], why: str) -> _Decoded:
    """A failed decoding: the failing u-groups ``groups``, the first named by ``why``."""
    return _Decoded(
        [], 0.0, [], gap, 0.0, None, f"the pooled fit of the u-group {why}", tuple(groups)
    )


def _twin_names(
    twins: list[tuple[int, int, int, int, float, float]], arith: Arithmetic
) -> list[str]:
    """The second solutions (the farthest first), named for a refusal."""
    return [
        f"the pair (u_{k + 1}, b_{j + 1}) cannot tell heads {a + 1} and {b + 1} (numbered "
        f"at u_{k + 1}) apart in {_float_name(arith)}: their scores differ by {g:.1e}, and "
        f"with the two swapped the u-group's fit meets its answers as well (the scores "
        f"move by {dist:.1e})"
        for k, j, a, b, g, dist in sorted(twins, key=lambda x: -x[5])
    ]


def _tie_links(
    r: np.ndarray,
    s: np.ndarray,
    f0: np.ndarray,
    wide: bool,
    ask_ties: Any,
    arith: Arithmetic,
) -> list[str]:
    """Square design: the pairs of a group with (nearly) equal residues ordered by tie links
    (s changed in place); the ambiguous steps, named."""
    d, ncols, H = s.shape
    ambiguous: list[str] = []
    ties: list[tuple[int, int, list[tuple[int, ...]]]] = []
    for k in range(0 if wide else d):
        scale = max(float(np.abs(r[k]).max()), 1e-300)
        close = [
            (a, b)
            for a, b in itertools.combinations(range(H), 2)
            if abs(r[k, a] - r[k, b]) <= _TIE_RESIDUE * scale
        ]
        if not close:
            continue
        groups = _clusters(H, close)
        orders = [
            p
            for p in itertools.permutations(range(H))
            if all(groups[p[h]] == groups[h] for h in range(H))
        ]
        ties += [(k, j, orders) for j in range(1, ncols)]
    if ties:
        measured = ask_ties([(k, j) for k, j, _ in ties])
        for (k, j, orders), y in zip(ties, measured, strict=True):
            f_mid = (f0[0] + f0[j]) / 2
            misses = {
                p: abs(f_mid + float(r[k] @ _sigmoid((s[k, 0] + s[k, j][list(p)]) / 2)) - y)
                for p in orders
            }
            ok = _ranked(misses)
            if len(ok) != 1:
                ambiguous.append(
                    f"the tie link (u_{k + 1}, (b_1 + b_{j + 1})/2) is consistent with "
                    f"{len(ok)} head orders in {_float_name(arith)}"
                )
            s[k, j] = s[k, j][list(ok[0])]
    return ambiguous


def _link_orders(
    lt: np.ndarray,
    ans: np.ndarray,
    f0: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    noise: np.ndarray,
    level: float,
    unit: float,
    arith: Arithmetic,
) -> list[str]:
    """Group k's heads ordered against group 1's by the halved link (r, s changed in
    place); the links that cannot decide, named. ``level``: the groups' median residual over
    their floors, which scales the link's own rounding."""
    d, ncols, _ = s.shape
    T = len(lt)
    n_grid = d * ncols
    ambiguous: list[str] = []
    for k in range(1, d):
        y = ans[n_grid + k - 1] - f0[0]
        orders, miss = link_orders(lt, y, r[0], s[0, 0], r[k], s[k, 0])
        link_floor = unit * math.sqrt(
            float(ans[n_grid + k - 1] @ ans[n_grid + k - 1]) + T * f0[0] ** 2
        )
        # The miss the true order may have: groups 1 and k's noise carried to the link, and
        # the link's own rounding (scaled like the groups' residuals over their floors).
        predicted = link_noise(lt, r, s, k, orders[0], noise) + max(level, 1.0) * link_floor
        if len(miss) > 1 and not link_decided(miss, predicted):
            a, b = heads_named(tuple(orders[0]), tuple(orders[1]))
            ambiguous.append(
                f"the link ((u_1 + u_{k + 1})/2, b_1) cannot tell heads {a + 1} and {b + 1} "
                f"(numbered at u_1) apart in {_float_name(arith)}: its best two head orders "
                f"miss it by {miss[0]:.1e} and {miss[1]:.1e}, within {_LINK_EXCLUDE:g} x the "
                f"noise (first-order bound from its u-groups {predicted:.1e})"
            )
        p = orders[0]
        r[k], s[k] = r[k][p], s[k][:, p]
    return ambiguous


def _heads(
    U: np.ndarray,
    B: np.ndarray,
    M: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    f0: np.ndarray,
    affine: bool,
) -> tuple[list[tuple[np.ndarray, ...]], float]:
    """``[W_h | c_h] = U^-1 S_h M^-1``, ``v_h = U^-1 r_h`` and beta from the ordered groups."""
    d, H = U.shape[0], r.shape[1]
    wide = M.shape[1] > M.shape[0]
    Uinv = np.linalg.inv(U)
    Minv = np.linalg.pinv(M) if wide else np.linalg.inv(M)
    heads: list[tuple[np.ndarray, ...]] = []
    for h in range(H):
        Wc = Uinv @ s[:, :, h] @ Minv
        head: tuple[np.ndarray, ...] = (Wc[:, :d], Uinv @ r[:, h])
        if affine:
            head = (*head, Wc[:, d])
        heads.append(head)
    beta = float(f0[0] - B[0] @ sum(hd[1] for hd in heads)) if affine else 0.0
    return heads, beta


def _swap_alternatives(
    lt: np.ndarray,
    Y: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    res: np.ndarray,
    floor: np.ndarray,
) -> tuple[
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    list[tuple[int, int, int, int, float, float]],
    list[GroupFit],
]:
    """Second solutions of the u-group fits from swapping two close scores of one pair.

    Two heads with scores ``m +- delta/2`` in one pair and residues fixed by the other pairs:
    the swapped pair of scores can be moved so that ``sum_h r_h (s_h - m)^n`` matches for
    n = 1, 2, so the swapped solution misses the answers only at third order, ~ delta^3:
    at delta ~ 1e-4 that is the float64 floor, and both solutions have the same Jacobian
    conditioning (the first-order estimate cannot see the other one). Measured at d = 8,
    H = 6, seed 1: scores 4.8e-5 apart, the swapped fit 1.4 x the floor, the true one 1.6 x,
    scores 6.7e-5 apart. So every pair with two scores within ``_NEAR_GAP`` is refitted
    (the whole group, batched) from the swap: one that fits better by ``_TWIN`` x replaces
    the fit; one within ``_TWIN`` x of the fit's residual (or of the floor) is a second
    solution, and its distance (largest residue or score change) bounds the group's error
    from below.

    Returns r, s, the residuals, the per-group distance (d,), the twins
    ``(k, j, a, b, gap, distance)`` and their second solutions (one group each).
    """
    d, J, H = s.shape
    spread = np.zeros(d)
    twins: list[tuple[int, int, int, int, float, float]] = []
    alts: list[GroupFit] = []
    if H < 2:
        return r, s, res, spread, twins, alts
    cand = [
        (k, j, a, b)
        for k in range(d)
        for j in range(J)
        for a, b in itertools.combinations(range(H), 2)
        if abs(s[k, j, a] - s[k, j, b]) <= _NEAR_GAP
    ]
    if not cand:
        return r, s, res, spread, twins, alts
    idx = np.array([c[0] for c in cand])
    s0 = s[idx].copy()
    for i, (_, j, a, b) in enumerate(cand):
        s0[i, j, [a, b]] = s0[i, j, [b, a]]
    alt = fit_groups(lt, Y[idx], r[idx], s0, floor=floor[idx])
    alt = polish_groups(lt, Y[idx], alt.r, alt.s)
    r, s, res = r.copy(), s.copy(), res.copy()
    first_r, first_s = r.copy(), s.copy()
    for i, (k, j, a, b) in enumerate(cand):
        dist = max(
            float(np.abs(alt.r[i] - first_r[k]).max()), float(np.abs(alt.s[i] - first_s[k]).max())
        )
        if alt.residual[i] * _TWIN < res[k]:
            r[k], s[k], res[k] = alt.r[i], alt.s[i], alt.residual[i]
        elif alt.residual[i] <= _TWIN * max(res[k], floor[k]):
            spread[k] = max(spread[k], dist)
            twins.append((k, j, a, b, float(abs(first_s[k, j, a] - first_s[k, j, b])), dist))
            alts.append(GroupFit(alt.r[i], alt.s[i], alt.residual[i : i + 1]))
    return r, s, res, spread, twins, alts


def _resolve_twins(
    twins: list[tuple[int, int, int, int, float, float]],
    alts: list[GroupFit],
    r: np.ndarray,
    s: np.ndarray,
    res: np.ndarray,
    lt: np.ndarray,
    f0: np.ndarray,
    unit: float,
    ask_ties: Any,
) -> list[tuple[int, int, int, int, float, float]]:
    """Decide second solutions by tie links: returns the twins still undecided.

    The tie link ``(u_k, (b_1 + b_j)/2)`` at t = 1 (the query exact mode asks for tied
    residues) sees the average of pairs 1 and j's scores, so a swap in pair j moves its
    answer at first order (the swap's misfit on the grid is third order): each candidate
    predicts it outright and the one that misses by ``_MATCH_MARGIN`` x less wins (the
    second solution then replaces the group's fit, in r, s, res). Only twins farther from
    the fit than ``_TWIN_SIGNIFICANT`` x its first-order error ask (the others are the same
    solution), at most one link per twin and at most ``len(f0)`` links, in the phase
    "tie links": a box without such twins asks nothing more. For j = 1 the link is
    ``(b_1 + b_2)/2``.
    """
    ncols = len(f0)
    if not twins or ncols < 2:
        return twins
    sig = sigma_min_groups(lt, r, s)
    floor_g = np.maximum(res, 1e-300)
    with np.errstate(divide="ignore"):
        first = np.where(sig > 0, floor_g / sig, math.inf)
    ask = [i for i, tw in enumerate(twins) if tw[5] > _TWIN_SIGNIFICANT * first[tw[0]]]
    if not ask or len(ask) > ncols:
        return twins
    kj = [(twins[i][0], max(twins[i][1], 1)) for i in ask]
    measured = ask_ties(kj)
    undecided = [tw for i, tw in enumerate(twins) if i not in ask]
    replaced: set[int] = set()
    for i, (k, jj), y in zip(ask, kj, measured, strict=True):
        base = (f0[0] + f0[jj]) / 2
        alt = alts[i]
        pc = base + float(r[k] @ _sigmoid((s[k, 0] + s[k, jj]) / 2))
        pa = base + float(alt.r @ _sigmoid((alt.s[0] + alt.s[jj]) / 2))
        mc, ma = abs(pc - y), abs(pa - y)
        link_floor = _LINK_FLOOR * unit * math.sqrt(y * y + base * base)
        if k in replaced or not max(mc, ma) > _MATCH_MARGIN * max(min(mc, ma), link_floor):
            undecided.append(twins[i])
        elif ma < mc:
            r[k], s[k], res[k] = alt.r, alt.s, float(alt.residual[0])
            replaced.add(k)
    return undecided


def decode_stage(st: FloatState) -> None:
    """Stage 6, the decoding: the u-groups' fits pooled into heads (:func:`_decode_pooled`).

    A coarse box's design under the follow-up's count (:func:`~.budget.within_follow_up`)
    has no room to ask a group again, and its figures are the sequence polish's, not the
    u-groups': a group at a local minimum of its fit, or one that misses its answers, is
    not refused there but starts the polish (which fails on the answers if it does not
    converge). Measured (E = 8, H = 4 module seed 2 of the float benchmark): one group of
    eight at 1.2e3 x its floor; E = 16, H = 4 module seed 2 after three pilot rounds: u_13
    at 1.6e5 x its floor (a group over ``_GROUP_FIT`` x is first asked again with its row
    halved where the polish has room, :mod:`.conditioning`: u_13 then at 1.6 x).
    """
    polished = within_follow_up(st.d, st.H, st.affine, unit=st.unit)
    st.dec = _decode_pooled(
        st.U,
        st.B,
        st.f0,
        st.ans,
        st.t,
        st.H,
        st.affine,
        st.oracle.arithmetic,
        functools.partial(ask_ties, st),
        st.fits,
        st.options,
        polished,
    )
