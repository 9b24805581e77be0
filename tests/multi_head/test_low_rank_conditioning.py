"""The low-rank skeleton's conditioning rounds: which columns a round asks, their count, the
run's worst case, and the checker's re-derivation of a certificate's rounds."""

from __future__ import annotations

import pytest

from verified_attn.certificates.multi_head_low_rank import _phases, _rounds
from verified_attn.errors import CertificateError
from verified_attn.multi_head.pipeline.low_rank_design import (
    CONDITIONING_ROUNDS,
    FULL_ROUND_COLUMNS,
    PARTIAL_ROUND_COLUMNS,
    conditioning_query_count,
    low_rank_query_count,
    low_rank_query_limit,
    round_columns,
)


def test_round_columns() -> None:
    # d = 16 affine (J = 17), rank 2: full groups take redundant columns 17.., partial
    # groups the next basis columns, never the rank check pair's column 16 for u_16.
    assert round_columns(16, 2, 2, 17, 0, list(range(17))) == [17, 18, 19, 20]
    assert round_columns(16, 2, 2, 17, 1, [*range(17), 17, 18, 19, 20]) == [21, 22, 23, 24]
    assert round_columns(16, 2, 2, 17, 5, [0, 1]) == [2, 3]
    assert round_columns(16, 2, 2, 17, 15, list(range(15))) == [15]
    assert round_columns(16, 2, 2, 17, 15, list(range(16))) == []
    assert round_columns(16, 2, 2, 17, 14, list(range(15))) == [15, 16]
    # A wrong variant (the check column not reserved) would give u_16 column 16.
    assert 16 not in round_columns(16, 2, 2, 17, 15, list(range(14)))


def test_conditioning_count_and_limit() -> None:
    rounds = [(0, [17, 18, 19, 20]), (3, [2, 3]), (1, [17, 18, 19, 20])]
    # 10 pairs at 2H + 1 = 17 ratios, F(0) once at each of the 4 redundant columns.
    assert conditioning_query_count(8, 17, rounds) == 10 * 17 + 4 == 174
    assert conditioning_query_count(8, 17, []) == 0
    base = low_rank_query_count(16, 8, 2, affine=True)
    per_run = 2 * FULL_ROUND_COLUMNS + 14 * PARTIAL_ROUND_COLUMNS
    worst = CONDITIONING_ROUNDS * per_run * 17 + CONDITIONING_ROUNDS * FULL_ROUND_COLUMNS
    # and every partial group shifted once at its q + 6 = 8 columns (test_low_rank_shift.py)
    shifted = 14 * (2 + CONDITIONING_ROUNDS * PARTIAL_ROUND_COLUMNS) * 17
    # and every full group halved once at its J + 12 = 29 columns (test_low_rank_halved.py)
    halved = 2 * (17 + CONDITIONING_ROUNDS * FULL_ROUND_COLUMNS) * 17
    assert low_rank_query_limit(16, 8, 2, affine=True) == base + worst + shifted + halved
    assert base + worst + shifted + halved == 1411 + 1848 + 1904 + 986
    assert low_rank_query_limit(16, 8, 2, affine=True) < 4 * 8 * 16**2 - 2 * 8 + 1


def _data(rounds: list[dict]) -> dict:
    return {"design": {"conditioning": rounds}}


def test_the_checker_rederives_the_rounds() -> None:
    cols = _rounds(
        _data([{"k": 0, "columns": [17, 18, 19, 20]}, {"k": 4, "columns": [2, 3]}]), 16, 2, 2, 17
    )
    assert cols[0] == [*range(17), 17, 18, 19, 20] and cols[4] == [0, 1, 2, 3]
    phases = _phases(16, 8, 2, 2, 17, cols)
    assert phases["conditioning"] == 6 * 17 + 4
    # Wrong variants: a round at other columns, a partial group given redundant columns,
    # a fourth round of one group.
    for bad in (
        [{"k": 4, "columns": [3, 4]}],
        [{"k": 4, "columns": [17, 18]}],
        [{"k": 4, "columns": c} for c in ([2, 3], [4, 5], [6, 7], [8, 9])],
    ):
        with pytest.raises(CertificateError, match="conditioning"):
            _rounds(_data(bad), 16, 2, 2, 17)


@pytest.mark.slow  # about a minute: `pytest -m slow`
def test_torch_eight_heads_count_and_learned() -> None:
    # nn.MultiheadAttention E = 16, H = 8 (rank 2, biases N(0, 1)): stalled u-groups take
    # rounds of 4 redundant or 2 basis columns (17 queries a column) and crowded partial
    # groups one round of 2 basis columns. On one machine u_1 (full) took one round of 4,
    # u_4 two rounds and u_13 one of 2, and three crowded partial groups one each: 276
    # queries, 1687 in all; on another CPU 8 rounds. Which groups stall follows the module's
    # last bits, which differ between CPUs' kernels, so the count is checked as the rounds
    # the certificate states. Every group then fits and the joint fit states its error
    # (1.2e-9 measured, parameter error 1.0e-10), within the parameter tolerance 1e-6.
    torch = pytest.importorskip("torch")
    import numpy as np

    import verified_attn as va
    from verified_attn.adapters.torch import attention_oracle, attention_parameters
    from verified_attn.verification import fresh_sequences

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, num_heads=8, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    readout = np.random.default_rng(100).standard_normal(16)
    oracle = attention_oracle(mha, readout, dtype="float64")
    rec = va.learn_multi_head(oracle, heads=8, rank=2)
    stated = rec.certificate()["design"]["conditioning"]
    rounds = [(r["k"], r["columns"]) for r in stated]
    assert rounds and all(len(c) in (2, 4) for _, c in rounds)
    assert oracle.queries_by_phase["conditioning"] == conditioning_query_count(8, 17, rounds)
    learning = oracle.queries - oracle.queries_by_phase["verify"]
    base = low_rank_query_count(16, 8, 2, affine=True)
    assert rec.queries == learning == base + oracle.queries_by_phase["conditioning"]
    assert rec.verified and rec.method == "canonical-low-rank"
    estimate = rec.parameter_error_estimate
    assert estimate is not None and estimate <= rec.parameter_rtol == 1e-6
    # The stated estimate covers the true error (every parameter, best head order, over
    # max(1, largest fitted parameter)).
    truth = attention_parameters(mha, readout)
    want = [tuple(np.asarray(x) for x in hd) for hd in zip(truth.W, truth.v, truth.c, strict=True)]
    got = [tuple(np.asarray(x) for x in hd) for hd in rec.parameters["heads"]]
    size = max(1.0, *(float(np.abs(x).max()) for hd in got for x in hd))
    err = max(
        min(max(float(np.abs(a - b).max()) for a, b in zip(g, w, strict=True)) for w in want)
        for g in got
    )
    assert err / size <= estimate
    # Fresh sequences (not the verification's seed) agree with the module at the stated rtol.
    ref = attention_oracle(mha, readout, dtype="float64")
    for X in fresh_sequences(16, 16, seed=99, lengths=(3, 7, 12)):
        pred, answer = float(rec.model.evaluate_batch(X[None])[0]), float(ref.query(X))
        assert abs(pred - answer) / max(abs(answer), 1.0) <= oracle.arithmetic.rtol
