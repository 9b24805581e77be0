"""The float multi-head learner for low-rank heads: the skeleton design, its fits and the
completion of each head's score matrix (:mod:`.low_rank_design` states the design and count).

>>> import verified_attn as va
>>> box = va.MultiHeadAttention([([[0.5, 1.0], [0.25, 0.5]], [1.0, -1.0])])  # rank 1
>>> rec = learn_low_rank_float(va.Oracle(box, "float"), 1, 1,
...                            verify=2, seed=0, lengths=(1, 2), affine=False)
>>> rec.queries, rec.verified, rec.method
(16, True, 'canonical-low-rank')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.multi_head.float_fit import group_model, heads_named, link_noise, link_orders
from verified_attn.multi_head.pipeline.asking import ask_pairs
from verified_attn.multi_head.pipeline.budget import float_ratios
from verified_attn.multi_head.pipeline.design import (
    _DOUBLE_UNIT,
    box_precision,
    float_design,
    float_probe_matrix,
)
from verified_attn.multi_head.pipeline.fits import _group_fits
from verified_attn.multi_head.pipeline.low_rank_design import (
    CONDITIONING_ROUNDS,
    HALVED_ROW,
    PILOT_PAIRS,
    redundant_rows,
    round_columns,
    shift_coefficients,
    shifted_row,
    skeleton_columns,
    skeleton_pairs,
    skeleton_sizes,
)
from verified_attn.multi_head.pipeline.poles import link_decided
from verified_attn.multi_head.pipeline.rules import _CONVERGED, _GROUP_FIT
from verified_attn.multi_head.pipeline.skeleton_rows import (
    crowded,
    plane_miss,
    row_space_fit,
    shifted_fit,
)
from verified_attn.oracle import Oracle
from verified_attn.recovery import MultiHeadRecovery

__all__ = ["RANK_FOUND", "Skeleton", "learn_low_rank_float", "numerical_rank", "rank_tolerance"]

#: ``rank=`` value asking the learner to find the heads' rank from full u-groups.
RANK_FOUND = "find"
# The pilot's pairs (PILOT_PAIRS), fitted and discarded: their scores' root mean square
# sets the u scale toward _SPREAD (clipped to _SCALES).
_SPREAD = 2.9  # the design's score spread for W ~ N(0, 1/d) (design.py)
_SCALES = (1.0, 8.0)


def rank_tolerance(unit: float) -> float:
    """The zero threshold of the numerical rank, relative to the largest singular value of a
    head's stacked score rows: the square root of the box's unit roundoff (float64: 1.05e-8,
    near ``learn_low_rank``'s 1e-8). The u-groups' scores carry errors of 1e-13 to 1e-10
    relative at float64 (their first-order estimate), well below it; the singular values of
    real low-rank heads (nn.MultiheadAttention's default initialisation) stay above 1e-3.

    >>> rank_tolerance(2.0**-52) == 2.0**-26
    True
    """
    return math.sqrt(unit)


def numerical_rank(A: np.ndarray, tol: float) -> int:
    """The number of singular values of A above ``tol`` times the largest.

    >>> numerical_rank(np.diag([1.0, 1e-3, 1e-12]), 1e-8), numerical_rank(np.zeros((2, 2)), 1e-8)
    (2, 0)
    """
    sv = np.linalg.svd(A, compute_uv=False)
    if not len(sv) or not sv[0] > 0:
        return 0
    return int(np.sum(sv > tol * sv[0]))


@dataclass
class Skeleton:
    """One low-rank run's design, answers and fits (filled as it goes)."""

    oracle: Oracle
    H: int
    affine: bool
    seed: int
    unit: float
    U: np.ndarray
    B: np.ndarray
    t: np.ndarray
    ratios: list[tuple[int, int]]
    f0: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # per u-group: its answers (pairs x ratios), residues (H,), scores (pairs, H), the fit's
    # residual norm and rounding floor; the link answers (d - 1, ratios)
    rows: list[np.ndarray] = field(default_factory=list)
    r: list[np.ndarray] = field(default_factory=list)
    s: list[np.ndarray] = field(default_factory=list)
    res: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    links: list[np.ndarray] = field(default_factory=list)
    check: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    # per u-group its columns (skeleton, then conditioning rounds'); the redundant columns'
    # b rows and their F(0) answers; the rounds (k, columns) in order
    cols: list[list[int]] = field(default_factory=list)
    Bx: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    f0x: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rounds: list[tuple[int, list[int]]] = field(default_factory=list)
    refits: list[int] = field(default_factory=list)  # partial groups refitted in the row space
    # partial groups asked at their shifted rows (in order), those rows' answers (pairs x
    # ratios, at the group's columns) and the groups whose shifted refit was kept
    shifts: list[int] = field(default_factory=list)
    shifted: list[np.ndarray] = field(default_factory=list)
    shift_kept: list[int] = field(default_factory=list)
    p: int = 0  # the skeleton's columns (the rank given or found)
    m: int = 0  # its full u-groups
    found: bool = False
    scale: float = 1.0  # the u rows' factor the pilot set

    @property
    def d(self) -> int:
        return int(self.U.shape[0])

    @property
    def J(self) -> int:
        return int(self.B.shape[0])

    @property
    def q(self) -> int:
        """The columns of the partial u-groups (:func:`.low_rank_design.skeleton_columns`)."""
        return skeleton_columns(self.p, self.J)

    def column(self, j: int) -> np.ndarray:
        """Probe column j: a basis row of B, or (j >= J) a redundant row of ``Bx``."""
        return self.B[j] if j < self.J else self.Bx[j - self.J]

    def columns(self) -> np.ndarray:
        """Every column a pair may take: B, then the redundant rows ``Bx``."""
        return np.vstack([self.B, self.Bx])

    def grid_pairs(self) -> list[tuple[int, int]]:
        """The u-groups' pairs ``(k, j)`` in the order of ``rows`` (each group's skeleton
        columns, then its conditioning rounds')."""
        return [(k, j) for k, cols in enumerate(self.cols) for j in cols]

    def f0_at(self, cols: Sequence[int]) -> np.ndarray:
        """F(0) at the columns (basis: ``f0``; redundant: ``f0x``)."""
        return np.array([self.f0[j] if j < self.J else self.f0x[j - self.J] for j in cols])

    def ask_group(self, k: int, cols: int) -> None:
        """Ask u-group k at the first ``cols`` columns and its link (k >= 1), fit it, ask
        it again in conditioning rounds while its fit misses (:meth:`condition`), and order
        it (ModelClassMismatch if it still misses). A full group still stalled then is asked
        at its halved row (:meth:`halve`); a partial one with two heads' scores crowded at a
        column asked once more and held to the full groups' planes (:meth:`uncrowd`), and one
        still stalled refitted in the row space and at its shifted row."""
        with self.oracle.phase("F(t)"):
            got = ask_pairs(self.oracle, [(self.U[k], j) for j in range(cols)], self.B, self.ratios)
        with self.oracle.phase("links"):
            if k >= 1:
                link = ((self.U[0] + self.U[k]) / 2, 0)
                self.links.append(ask_pairs(self.oracle, [link], self.B, self.ratios)[0])
        self.cols.append(list(range(cols)))
        self.rows.append(got)
        self._fit(k)
        for _ in range(CONDITIONING_ROUNDS):
            if not self._stalls(k) or not self.condition(k):
                break
        if k < self.m and self._stalls(k):
            self.halve(k)
        if k >= self.m and not self._stalls(k):
            self.uncrowd(k)
        if k >= self.m and self._stalls(k):
            self.row_space(k)
        if k >= self.m and self._stalls(k):
            self.shift(k)
        res, floor = self.res[k], self.floor[k]
        if not res <= _GROUP_FIT * floor:
            raise ModelClassMismatch(
                f"the pooled fit of the u-group u_{k + 1} ({len(self.cols[k])} pairs, "
                f"{self.H} heads) misses its answers by {res:.2e}, over {_GROUP_FIT:g} x its "
                f"rounding floor {floor:.2e}: not {self.H} softmax heads, or too "
                "ill-conditioned"
            )
        if k >= 1:
            self._order(k)

    def _fit(self, k: int) -> None:
        """Group k fitted on all its pairs (a full group with redundant columns on the probe
        plane ``s = M^T w``, as the full design's redundant groups)."""
        r, s, res, floor = self._free_fit(k, self.rows[k])
        if k == len(self.r):
            self.r.append(r)
            self.s.append(s)
            self.res.append(0.0)
            self.floor.append(0.0)
        self.r[k], self.s[k], self.res[k], self.floor[k] = r, s, float(res), float(floor)

    def _free_fit(self, k: int, rows: np.ndarray) -> tuple[np.ndarray, ...]:
        """The answers ``rows`` at group k's columns fitted as :meth:`_fit` fits its own:
        residues (H,), scores (columns, H), residual norm, rounding floor."""
        cols = self.cols[k]
        Mt = None
        if any(j >= self.J for j in cols):
            Mt = float_probe_matrix(self.columns()[cols], self.affine).T
        fit = _group_fits(
            self.f0_at(cols), rows, self.t, self.H, 1, self.unit, ids=[k], full_d=self.d, Mt=Mt
        )
        return tuple(x[0] for x in fit)

    def halve(self, k: int) -> None:
        """Full group k, still stalled after its rounds, asked at its halved row
        (:func:`.low_rank_design.shifted_row`) at all its columns (phase "shifted") and
        fitted there; twice its residues and scores are u_k's (both linear in u), kept if
        they miss u_k's own answers by less than its fit. They are kept as they are, not
        refitted on u_k's answers: at u_k two heads far in the sigmoid's tail leave a flat
        direction (measured at E = 64, H = 4: refitted from 2.6e-11, one head's scores move
        to 1.5e-7 for a residual 15 x instead of 32 x the floor)."""
        cols = self.cols[k]
        with self.oracle.phase("shifted"):
            got = ask_pairs(
                self.oracle, [(self.shift_row(k), j) for j in cols], self.columns(), self.ratios
            )
        self.shifts.append(k)
        self.shifted.append(got)
        r, s = (x / HALVED_ROW for x in self._free_fit(k, got)[:2])
        Y = self.rows[k] - self.f0_at(cols)[:, None]
        res = float(np.linalg.norm(group_model(np.log(self.t), r[None], s[None])[0] - Y))
        if res < self.res[k]:
            self.r[k], self.s[k], self.res[k] = r, s, res
            self.shift_kept.append(k)

    def _stalls(self, k: int) -> bool:
        """Whether group k's fit is over ``_CONVERGED`` x its floor times the level of the
        groups before it (their median ratio, at least 1), as :meth:`stalled` refuses."""
        before = np.array(self.res[:k]) / np.array(self.floor[:k]) if k else np.ones(1)
        level = max(1.0, float(np.median(before)))
        return not self.res[k] <= _CONVERGED * level * self.floor[k]

    def condition(self, k: int) -> bool:
        """One conditioning round (phase "conditioning"): group k asked at the columns of
        :func:`.low_rank_design.round_columns` (F(0) first at a redundant column not asked
        yet), refitted on all its pairs. False when no column is left."""
        new = round_columns(self.d, self.p, self.m, self.J, k, self.cols[k])
        if not new:
            return False
        with self.oracle.phase("conditioning"):
            fresh = [j for j in new if j >= self.J + len(self.f0x)]
            if fresh:
                got = self.oracle.query_many(self.Bx[[j - self.J for j in fresh]][:, None, :])
                self.f0x = np.concatenate([self.f0x, np.asarray(got, dtype=np.float64)])
            more = ask_pairs(
                self.oracle, [(self.U[k], j) for j in new], self.columns(), self.ratios
            )
        self.cols[k] += new
        self.rows[k] = np.vstack([self.rows[k], more])
        self.rounds.append((k, new))
        self._fit(k)
        return True

    def row_space(self, k: int, *, planes: bool = False) -> None:
        """Partial group k, still stalled after its rounds, refitted with each head's scores
        in the row space of the full groups' (:func:`.skeleton_rows.row_space_fit`; no
        queries), kept if it lowers the residual, or (``planes``) if it is nearer the full
        groups' planes (:func:`.skeleton_rows.plane_miss`) and does not stall. Only with
        more columns than full groups: at m columns every score vector is in it."""
        cols = self.cols[k]
        if len(cols) <= self.m:
            return
        A = np.stack([self.s[i][cols] for i in range(self.m)], axis=1)  # (C, m, H)
        Y = self.rows[k] - self.f0_at(cols)[:, None]
        r, s, res = row_space_fit(np.log(self.t), Y, self.r[k], self.s[k], A, self.floor[k])
        keep = res < self.res[k]
        if planes and not keep and plane_miss(s, A) < plane_miss(self.s[k], A):
            old = self.r[k], self.s[k], self.res[k]
            self.r[k], self.s[k], self.res[k] = r, s, res
            keep = not self._stalls(k)
            self.r[k], self.s[k], self.res[k] = old
        if keep:
            self.r[k], self.s[k], self.res[k] = r, s, res
            self.refits.append(k)

    def uncrowd(self, k: int) -> None:
        """Partial group k whose fit has two heads' scores within
        :data:`.skeleton_rows.CROWDED_GAP` at a column (a second solution may meet its
        answers as well): at m columns asked in one more conditioning round (while rounds
        are left), then refitted in the full groups' row space and kept if nearer their
        planes (:meth:`row_space` with ``planes``)."""
        if not crowded(self.s[k]):
            return
        used = sum(1 for g, _ in self.rounds if g == k)
        if len(self.cols[k]) <= self.m and used < CONDITIONING_ROUNDS:
            self.condition(k)
        if not self._stalls(k):
            self.row_space(k, planes=True)

    def shift_row(self, k: int) -> np.ndarray:
        """Group k's shifted row (:func:`.low_rank_design.shifted_row`)."""
        return shifted_row(self.U, self.seed, k, self.m)

    def shift(self, k: int) -> None:
        """Partial group k, still stalled after its rounds and the row-space refit, asked at
        its shifted row at all its columns (phase "shifted"), that row fitted free and u_k
        refitted from the subtraction (:func:`.skeleton_rows.shifted_fit`), kept if it
        lowers the residual. Only with more columns than full groups (the shifted row's
        heads are named by the full groups' planes)."""
        cols = self.cols[k]
        if len(cols) <= self.m:
            return
        with self.oracle.phase("shifted"):
            got = ask_pairs(
                self.oracle, [(self.shift_row(k), j) for j in cols], self.columns(), self.ratios
            )
        self.shifts.append(k)
        self.shifted.append(got)
        f0 = self.f0_at(cols)
        fit = _group_fits(f0, got, self.t, self.H, 1, self.unit, ids=[k], full_d=self.d)
        A = np.stack([self.s[i][cols] for i in range(self.m)], axis=1)  # (C, m, H)
        R = np.stack(self.r[: self.m])
        c = shift_coefficients(self.seed, k, self.m)
        lt, Y = np.log(self.t), self.rows[k] - f0[:, None]
        r, s, res = shifted_fit(lt, Y, (fit[0][0], fit[1][0]), c, A, R, self.floor[k])
        if res < self.res[k]:
            self.r[k], self.s[k], self.res[k] = r, s, res
            self.shift_kept.append(k)

    def _order(self, k: int) -> None:
        """Group k's heads put in group 1's order by its halved link (NotIdentifiable when
        the runner-up order is within the link's noise)."""
        lt = np.log(self.t)
        y = self.links[k - 1] - self.f0[0]
        orders, miss = link_orders(lt, y, self.r[0], self.s[0][0], self.r[k], self.s[k][0])
        cols = min(len(self.s[0]), len(self.s[k]))
        r2 = np.stack([self.r[0], self.r[k]])
        s2 = np.stack([self.s[0][:cols], self.s[k][:cols]])
        noise = np.hypot(np.array(self.res)[[0, k]], np.array(self.floor)[[0, k]])
        ans = self.links[k - 1]
        link_floor = self.unit * math.sqrt(float(ans @ ans) + len(ans) * self.f0[0] ** 2)
        level = max(1.0, float(np.median(np.array(self.res) / np.array(self.floor))))
        predicted = link_noise(lt, r2, s2, 1, orders[0], noise) + level * link_floor
        if len(miss) > 1 and not link_decided(miss, predicted):
            a, b = heads_named(tuple(orders[0]), tuple(orders[1]))
            raise NotIdentifiable(
                f"the link ((u_1 + u_{k + 1})/2, b_1) cannot tell heads {a + 1} and {b + 1} "
                f"(numbered at u_1) apart in {box_precision(self.oracle.arithmetic)}: its best "
                f"two head orders miss it by {miss[0]:.1e} and {miss[1]:.1e}; rerun with "
                "another seed"
            )
        p = orders[0]
        self.r[k], self.s[k] = self.r[k][p], self.s[k][:, p]

    def stalled(self) -> None:
        """A u-group far above the others' level is a local minimum of its fit: refused."""
        ratio = np.array(self.res) / np.array(self.floor)
        level = max(1.0, float(np.median(ratio)))
        bad = np.flatnonzero(~(ratio <= _CONVERGED * level))
        if len(bad):
            k = int(bad[0])
            raise PrecisionExhausted(
                f"the u-group u_{k + 1} stops at {ratio[k]:.3g} x its rounding floor, over "
                f"{_CONVERGED:g} x the groups' median {level:.3g} x: a local minimum of the "
                "fit; rerun with another seed"
            )

    def scores(self, h: int) -> np.ndarray:
        """Head h's score matrix (d, J), completed from the skeleton: rows of the full
        groups as measured (basis columns), each other row k ``S[k, C_k] G_k^+ S[:m, :]``
        with C_k its columns and ``G_k = S[:m, C_k]`` pseudo-inverted at its numerical rank
        (:func:`rank_tolerance`)."""
        m = self.m
        R = np.stack([self.s[k][: self.J, h] for k in range(m)])  # (m, J)
        S = np.empty((self.d, self.J))
        S[:m] = R
        for k in range(m, self.d):
            S[k] = self.s[k][:, h] @ self.pivot_inverse(h, k) @ R
        return S

    def pivot_inverse(self, h: int, k: int) -> np.ndarray:
        """``G_k^+`` (columns of row k, m) of head h at G's numerical rank."""
        G = np.stack([self.s[i][self.cols[k], h] for i in range(self.m)])
        return np.linalg.pinv(G, rcond=rank_tolerance(self.unit))


def learn_low_rank_float(
    oracle: Oracle,
    H: int,
    rank: int | str,
    *,
    verify: int,
    seed: int,
    lengths: Sequence[int],
    affine: bool,
) -> MultiHeadRecovery:
    """The float multi-head learner for heads whose score matrices ``[W_h | c_h]`` have rank
    at most ``rank`` (an int), or with the rank found (``rank="find"``): the skeleton design
    of :mod:`.low_rank_design`, every u-group fitted as in the full design, the scores
    completed per head, checked on the rank check pair, every learning answer and the fresh
    sequences (:mod:`.skeleton_result`). Arguments validated by ``learn_multi_head``."""
    from verified_attn.multi_head.pipeline.skeleton_result import finish, plan_low_rank

    unit = float(getattr(oracle.arithmetic, "unit_roundoff", _DOUBLE_UNIT))
    ratios = float_ratios(H, unit=unit)
    U, B, _ = float_design(oracle.d, seed, affine)
    sk = Skeleton(oracle, H, affine, seed, unit, U, B, np.array([k / m for k, m in ratios]), ratios)
    sk.Bx = float_design(oracle.d, seed, affine, extra=redundant_rows())[1][sk.J :]
    bound = plan_low_rank(sk, rank, verify)
    with oracle.run() as run:
        with oracle.phase("F(0)"):
            sk.f0 = np.array(oracle.query_many(B[:, None, :]), dtype=np.float64)
        sk.scale = _pilot(sk)
        sk.U = U = float_design(oracle.d, seed, affine, scale=sk.scale)[0]
        if rank == RANK_FOUND:
            _find_rank(sk)
        else:
            sk.p = int(rank)
            sk.m = skeleton_sizes(sk.d, sk.p, affine)[0]
            for k in range(sk.d):
                sk.ask_group(k, sk.J if k < sk.m else sk.q)
        sk.stalled()
        pairs = skeleton_pairs(sk.d, sk.p, sk.m, sk.J)
        if len(pairs) > sk.m * sk.J + (sk.d - sk.m) * sk.q:
            k, j = pairs[-1]  # (an int pair index of the skeleton, not a round's)
            with oracle.phase("rank check"):
                sk.check = ask_pairs(oracle, [(U[k], j)], B, ratios)
        return finish(sk, run, bound, verify=verify, lengths=lengths)


def _pilot(sk: Skeleton) -> float:
    """The u scale: :data:`PILOT_PAIRS` pairs ``(u_1, b_j)`` at the design scale (phase
    "pilot", counted, not decoded), fitted as one u-group; the scale that brings their
    scores' root mean square to :data:`_SPREAD`, clipped to :data:`_SCALES` (the fit's
    scores are used even when it misses its answers: they still size the spread). nn.MultiheadAttention's default initialisation gives scores
    3-5x narrower than the design assumes, which crowds the poles (measured at E = 16,
    H = 4: the refined fit's estimate 1.3e-3 at scale 1, 2.3e-8 at 4)."""
    cols = min(PILOT_PAIRS, sk.J)
    with sk.oracle.phase("pilot"):
        got = ask_pairs(sk.oracle, [(sk.U[0], j) for j in range(cols)], sk.B, sk.ratios)
    _, s, _, _ = (x[0] for x in _group_fits(sk.f0[:cols], got, sk.t, sk.H, 1, sk.unit))
    rms = float(np.sqrt(np.mean(s**2)))
    if not (math.isfinite(rms) and rms > 0):
        return 1.0
    # A fit that misses (eight heads on four pairs) still sizes the scores.
    return float(np.clip(_SPREAD / rms, *_SCALES))


def _find_rank(sk: Skeleton) -> None:
    """Full u-groups one by one until every head's stacked score rows have a numerical rank
    (:func:`rank_tolerance`) below their number; the skeleton's size is then the largest of
    those ranks, and the other groups are asked at that many columns."""
    tol = rank_tolerance(sk.unit)
    sk.m = sk.p = sk.d  # every group full while the rank is found (their rounds' columns)
    for k in range(sk.d):
        sk.ask_group(k, sk.J)
        ranks = [numerical_rank(np.stack([s[:, h] for s in sk.s]), tol) for h in range(sk.H)]
        if max(ranks) < k + 1:
            break
    sk.m = len(sk.s)
    sk.p = sk.m if sk.m == sk.d else max(1, max(ranks))
    sk.found = True
    for k in range(sk.m, sk.d):
        sk.ask_group(k, sk.q)
