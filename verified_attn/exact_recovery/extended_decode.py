"""The float single head's W decoded in extended precision (``np.longdouble``).

>>> import numpy as np, verified_attn as va
>>> W, v = [[0.25, -0.5], [0.125, 0.75]], [1.0, -2.0]
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention(W, v), "float"))
>>> float(np.abs(np.asarray(rec.W) - W).max()) < 1e-15
True

The answers are float64 numbers; decoding them in float64 adds the learner's own rounding
to the box's: ``u_k^T v`` rounded, the ratio's subtraction and division, and the logit
``log(y) - log1p(-y)``, which near y = 1/2 subtracts two numbers near -0.69 for a result
of the size of the score, so it keeps the absolute (not the relative) float64 error.
With the anchored probes the box's rounding is small enough for that to show: measured on
random float64 heads at d = 64 to 256, float64 decoding loses 0.2 to 0.55 bit of the
result against the same answers decoded in extended precision. So the default design's W
(``U = I + e_p s^T``, s_p = 0: ``u_k^T v = v_k + s_k v_p`` and ``W = M - s M[p]``) is
decoded here with a 64-bit significand (x86-64's ``long double``), in blocks of rows so
the extra memory is O(block * d), and rounded to float64 once at the end. Where
``np.longdouble`` is no wider than float64 this returns None and float64 decoding is used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verified_attn.design import SingleHeadDesign

__all__ = ["EXTENDED", "extended_w"]

#: The extended type, or None where np.longdouble is float64 (then nothing is gained).
EXTENDED: Any = np.longdouble if np.finfo(np.longdouble).nmant > 52 else None
#: Rows decoded at a time (the extra memory is a few arrays of BLOCK x d extended numbers).
BLOCK = 64


def extended_w(design: SingleHeadDesign, answers: dict[str, Any]) -> np.ndarray | None:
    """W from a non-affine default design's answers, decoded in extended precision.

    None where it does not apply (no wider type, an affine or a user's design). Call it
    only once the float64 decoding has found every probe's ratio inside (0, 1).
    """
    mix = design._mix
    if EXTENDED is None or mix is None or design.affine:
        return None
    ext = EXTENDED
    p, s = mix
    d = design.d
    v = np.asarray(answers["v"], dtype=ext)
    a = ext(float(design.anchor))  # a power of two: exact in both types
    t = design.scales_float()
    uv = v + s.astype(ext) * v[p]  # U^T v, exactly as far as the type carries it

    def rows(k0: int, k1: int) -> np.ndarray:
        F = np.asarray(answers["W"][k0:k1], dtype=ext)
        tk = t[k0:k1].astype(ext)
        Y = (F - a * v[None, :]) / ((tk / a) * uv[k0:k1, None])
        out: np.ndarray = (np.log(Y) - np.log1p(-Y)) / tk
        return out

    Mp = rows(p, p + 1)[0]
    W = np.empty((d, d), dtype=np.float64)
    for k0 in range(0, d, BLOCK):
        k1 = min(d, k0 + BLOCK)
        M = rows(k0, k1)
        W[k0:k1] = M - s[k0:k1, None].astype(ext) * Mp[None, :]
    return W
