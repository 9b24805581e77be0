"""The u-group fits' tolerances and the decoded-group record shared by fits, repairs and
decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Joint dense polish (all answers, (W, v) parametrisation) only when parameters x answers is
# at most this (~1 MB of Jacobian, d <= 4); larger boxes keep the pooled u-group fit (same minimiser
# on the grid answers, structured).
_DENSE_POLISH = 100_000
# A u-group fit is good when its residual is at most this many times the group's rounding
# floor (unit roundoff x the answers' norm); a link order wins only if the next one misses
# the link by _MATCH_MARGIN times more than max(best, _LINK_FLOOR x floor).
_GROUP_FIT = 1e5
# A u-group fit counts as converged (no repair) when its residual is at most this many times
# its rounding floor. Measured (d = 8, H = 5, 6, seeds 0-9): fits started at the true scores
# and residues end at 0.8-3.7 x the floor, while local minima sit at 90 x - 4e5 x it with
# score errors 1e-2 - 1e-1 (and a first-order estimate that cannot see them).
_CONVERGED = 30.0
_LINK_FLOOR = 10.0
# Residue sources tried per u-group (its best-conditioned single pairs): at least
# _SOURCES, more while d x sources x pairs stays within _SOURCE_WORK (every pair at d = 8:
# measured, eval seeds 7 and 11 at H = 5 need a fourth-to-eighth source, whose pair has no
# score outside the ratio window; at d = 32 the cost keeps it at 3).
_SOURCES = 3
_SOURCE_WORK = 1024
# A pair's scores-only start is in the right basin when it misses by at most this relative
# (the source's residues are themselves only a single pair's estimate).
_BASIN = 1e-6
# Two residues of one u-group within this (relative) are a tie: a tie link decides.
_TIE_RESIDUE = 1e-6
# Starting-point fits with more (problem, start) rows than this are pruned (fit_scores).
_PRUNE_ABOVE = 50_000
# Rounds of the transposition repair of pairs stuck in a local minimum.
_REPAIRS = 3
# Two scores of one pair within this (log t units) are refitted swapped (a second solution?).
_NEAR_GAP = 1e-2
# A second solution whose residual is within this factor of the fit's (or of the rounding
# floor) fits the answers as well. The first-order estimate takes the noise to be the
# residual or the floor; a residual norm twice the fit's is then a misfit ~1.7 x the noise
# norm, which rounding noise spread over the group's 30+ degrees of freedom does not make
# (a chi-square ratio of 4). Measured twins: 0.98-1.01 x (a true second solution, scores
# 6.7e-5 apart, d = 8, H = 6, seed 1) against 2.9 x - 1e6 x for swaps that are not.
_TWIN = 2.0
# A second solution farther than this times the group's first-order error is asked about
# (a tie link); closer ones are the fit itself, found again.
_TWIN_SIGNIFICANT = 100.0
# Levenberg-Marquardt steps per repair start: a pair with several crowded scores (four within
# 0.5 at d = 8, H = 5, seed 2) needs ~300 from a start in the right basin (60 leave it in the
# wrong one, with a score off by 0.15).
_REPAIR_STEPS = 300
# ... of which the first 40 run from every start, the rest from each pair's 8 best (the cost
# is in the starts: d = 16, H = 8 spent 320 of 366 s in these fits without pruning).
_REPAIR_PRUNE = (40, 8)
# Rounds of joint restarts (one pair each) for a group still not converged after the repairs.
_JOINT_ROUNDS = 3
# The redundant design's fit (_linear_stage) restarts a group still off its floor this many
# times, from its pairs' scores refitted alone with the linear fit's residues.
_LINEAR_ROUNDS = 2
# Seeds consensus_start's random subsets (with the sizes), where there are too many to try.
_CONSENSUS_SEED = 0x636F6E
# Shifts of one head's score tried by the joint restarts (log t units).
_LOCAL_SHIFTS = np.array([-0.3, -0.1, -0.03, -0.01, 0.01, 0.03, 0.1, 0.3])
# Random starts per repaired pair.
_RANDOM_STARTS = 96


def _score_grid(lt: np.ndarray) -> np.ndarray:
    """Scores a repair start may move one head to (log t units): the window the ratios span
    (``max |log t|``, rounded up) and 2 more either side, in steps of 1 - read from the
    ratios, so that it follows the design's window (-8..8 for log2 t in [-8, 8]).

    >>> _score_grid(np.log([1 / 256, 1.0, 256.0]))[[0, -1]].tolist()
    [-8.0, 8.0]
    """
    edge = math.ceil(float(np.max(np.abs(lt[np.isfinite(lt)])))) + 2
    return np.arange(-edge, edge + 0.5, 1.0)


@dataclass
class _Decoded:
    heads: list[tuple[np.ndarray, ...]]
    beta: float
    ambiguous: list[str]
    gap: float  # the closest score gap over all grid pairs
    sigma_min: float  # the smallest singular value over the u-group Jacobians
    estimate: float | None  # first-order relative parameter error; None: failed (failure)
    failure: str = ""
    bad: tuple[int, ...] = ()  # the u-groups whose pooled fit misses its answers (failed)
