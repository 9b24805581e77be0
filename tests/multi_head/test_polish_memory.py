"""No P x P matrix in the float multi-head polish: its peak memory against O(n L d + n H d + P).

Just past ``sequence_blocks.DENSE_FIGURE_PARAMETERS`` (2400), at d = 16, H = 9 (P = 2448)
one P x P float64 matrix is 46 MB, while the answers' rows (n = 3000 sequences of up to 16
distinct tokens) and the heads' per-row terms (n x H d) are 6 and 3.5 MB. The sequence
polish as the learner calls it (``polish_fit`` and ``polish_figures``) is run under
``tracemalloc`` (numpy reports its buffers to it) and its peak must stay under 4 x (n L d +
n H d + P) x 8 bytes, under P^2 x 8.

Past the limit the polish's fit is matrix-free (lsqr on the Jacobian operator) and its
figures come from one Gram block per head (``sequence_blocks``); the dense path (``J^T J``
and its eigendecomposition, what the polish takes up to the limit) is shown to break the
same memory limit at the same size, so the limit tells the two apart.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from verified_attn.arithmetic import FloatArithmetic
from verified_attn.multi_head import sequence_blocks as sb
from verified_attn.multi_head import sequence_fit as sf
from verified_attn.multi_head.pipeline.verify import polish_figures


def _peak_of_polish(d: int, H: int, n: int, *, dense: bool = False) -> tuple[int, int]:
    rng = np.random.default_rng(0)
    heads = [(rng.normal(0, d**-0.5, (d, d)), rng.normal(0, 1, d)) for _ in range(H)]
    seqs = sf.polish_sequences(d, n, seed=0)
    rows = sf.compress(seqs, np.zeros(n))
    rows = sf.compress(seqs, sf.model_values(heads, 0.0, rows, False))
    start = [(W + 1e-9, v) for W, v in heads]
    tracemalloc.start()
    try:
        if dense:  # the path up to DENSE_FIGURE_PARAMETERS, forced at this size
            fit = sf.fit_sequences(start, 0.0, rows, affine=False)
            sf.covariance_rows(sf.normal_equations(fit.heads, 0.0, rows, False)[1])
        else:
            fit = sb.polish_fit(start, 0.0, rows, affine=False)
            polish_figures(FloatArithmetic(1e-6, 2.0**-53), fit.heads, 0.0, False, rows, 0, (4, 8))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    L = rows.tokens.shape[1]
    return peak, 8 * (n * L * d + n * H * d + H * (d * d + d))


_SIZE = (16, 9, 3000)  # d, H, answers: P = 2448, just past the dense limit


@pytest.mark.slow
def test_the_polish_forms_no_p_by_p_matrix() -> None:
    d, H, n = _SIZE
    P = H * (d * d + d)
    assert P > sb.DENSE_FIGURE_PARAMETERS
    peak, linear = _peak_of_polish(d, H, n)
    assert 8 * P * P > 4 * linear  # the size tells the two apart
    assert peak <= 4 * linear, f"peak {peak / 2**20:.0f} MiB, P x P is {8 * P * P / 2**20:.0f} MiB"


@pytest.mark.slow
def test_the_dense_polish_breaks_the_limit() -> None:
    """The check can fail: the dense normal equations at the same size are over it."""
    peak, linear = _peak_of_polish(*_SIZE, dense=True)
    assert peak > 4 * linear
