"""The float design's pilot: the probe scale |u| chosen from the box's own first answers.

>>> import numpy as np
>>> crowded = np.tile([0.3, -0.2, 0.25, -0.35], (8, 1))  # 8 pairs, 4 heads
>>> next_scale(crowded, 1.0)  # poles crowded together: scale u up
6.727171322029716
>>> next_scale(np.tile([2.0, -3.1, -4.0, 1.5], (8, 1)), 1.0) is None  # the design scale
True
>>> pilot_rounds(8, 6, False), pilot_rounds(2, 2, False)
(3, 1)

The float path reads each head's score ``s_h = u^T (W_h b + c_h)`` and residue
``r_h = u^T v_h`` off the poles of ``F(t) = c + sum_h r_h sigmoid(s_h + log t)`` on a
ratio window ``|log2 t| <= 8`` (the design's ratios). The poles are separated by the
score gaps ``|s_h - s_h'|``; a pole is seen only while ``-s_h`` lies in the window. Both scale with
``|u|`` (and the residues with it), so one factor on every u row moves the whole picture:
too small and the poles crowd together (the fit's error grows like 1/gap^(2H - 1)), too
large and they leave the window. The fixed design puts the scores of W ~ N(0, 1/d) at a
spread of about 2.9, measured best; real modules (PyTorch's Xavier initialisation,
``W = W_k^T W_q / sqrt(E/H)``) have scores 3-5 times smaller there.

The pilot is the queries of d of the design's own pairs, ``(u_k, b_k)`` for k = 1..d (one
per u-group: d different u and b; one u-group's scores share ``u_1^T c_h`` and misjudge an
affine box's spread by up to 2x), at the design scale. Their single-pair fits give ``d H``
rough scores; their robust spread ``median|s| / 0.6745`` (the standard deviation for
normal scores) against the target :data:`SCORE_TARGET` gives the factor. Within a band
around the target (:func:`next_scale`) the answers are kept as those pairs' (the pilot
costs nothing); otherwise every u row is multiplied by the factor (a power of
``2^(1/4)``, clamped to ``[2^-4, 2^6]`` overall) and the pilot pairs are asked again, at
most :func:`pilot_rounds` times in all. Only the last round's answers are decoded; each
discarded round costs ``d (2H + [H >= 2])`` queries, counted in the ``"pilot"`` phase
with the kept round's.
"""

from __future__ import annotations

import math

import numpy as np

from verified_attn.multi_head.pipeline.budget import MAX_ROUNDS, pilot_rounds

__all__ = [
    "ACCEPT_LOG2",
    "MAX_ROUNDS",
    "NOISE_LOG2",
    "SCORE_TARGET",
    "next_scale",
    "pilot_rounds",
    "score_spread",
]

#: The score spread the design aims at: the fixed design's |u| |b| / sqrt(d) = 2.42 x 1.21
#: (measured best at d = 8, H = 6: half this spread loses 30x in the first-order error, 1.5x
#: more loses 10x as poles leave the window).
SCORE_TARGET = 2.42 * 1.21
#: A box whose pilot spread is within 2^ACCEPT_LOG2 of the target keeps the design scale
#: (random W ~ N(0, 1/d) boxes: the pilot costs nothing). Measured (nn.MultiheadAttention
#: E = 16, H = 4, seeds 9000-9002): u x 2 learned 1/3, x 3 3/3, x 4 2/3, x 6 0/3 - the
#: window of good scales is about a factor 2 wide, so half of it either side; wider where
#: the pilot has few scores (:data:`NOISE_LOG2`).
ACCEPT_LOG2 = 0.5
#: The band is at least NOISE_LOG2 / sqrt(n) for n pilot scores: the median of n normal
#: |s| has a relative standard deviation of 1.17 / sqrt(n), 1.68 / sqrt(n) in log2, and the
#: band is 2.5 of those (random boxes, exact group-1 scores, 30 seeds each: the wanted
#: factor reaches 2^1.39 at d = 4, H = 2, n = 8, and 2^0.73 at d = 8, where modules want
#: 2^1.6 to 2^2.3).
NOISE_LOG2 = 4.2
# Scales are powers of 2^(1/4) (reproducible, and within 9 % of the wanted factor).
_STEP_LOG2 = 0.25
_MIN_LOG2, _MAX_LOG2 = -4.0, 6.0
# Single-pair scores beyond this are lost poles (the pair fit clips at 27.6), not spread.
_LOST_POLE = 12.0


def score_spread(scores: np.ndarray) -> float:
    """The robust spread ``median|s| / 0.6745`` of the pilot's single-pair scores.

    Scores beyond +-12 (poles the single-pair fit lost at the clip) count at 12.

    >>> score_spread(np.array([[1.0, -1.0], [2.0, -2.0]])) == 1.5 / 0.6745
    True
    """
    s = np.clip(np.abs(np.asarray(scores, dtype=np.float64)), 0.0, _LOST_POLE)
    return float(np.median(s)) / 0.6745


def next_scale(scores: np.ndarray, scale: float) -> float | None:
    """The next u scale after a pilot round at ``scale``; None: keep this round.

    ``scores``: the round's single-pair scores (any shape, n of them). The wanted factor is
    ``SCORE_TARGET / spread``, rounded to a power of 2^(1/4); None if it is within
    ``2^max(ACCEPT_LOG2, NOISE_LOG2 / sqrt(n))`` of 1 (a spread the pilot cannot tell from
    the target's) or the clamp leaves the scale where it is.

    >>> next_scale(np.zeros((2, 2)), 1.0) == 2.0**6  # no spread at all: the largest scale
    True
    """
    spread = score_spread(scores)
    want = math.log2(SCORE_TARGET / spread) if spread > 0 else math.inf
    band = max(ACCEPT_LOG2, NOISE_LOG2 / math.sqrt(max(np.size(scores), 1)))
    if abs(want) <= band:
        return None
    step = round(want / _STEP_LOG2) * _STEP_LOG2 if math.isfinite(want) else _MAX_LOG2
    new = min(max(math.log2(scale) + step, _MIN_LOG2), _MAX_LOG2)
    if new == math.log2(scale):
        return None
    return float(2.0**new)
