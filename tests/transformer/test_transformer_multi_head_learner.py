"""va.learn_transformer on a multi-head one-layer Transformer: golden counts, the learned
model equal (==) on sequences it never asked, and refusals of boxes outside the class."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np
import pytest
import sympy

import verified_attn as va
from verified_attn.arithmetic import to_fraction
from verified_attn.errors import InvalidArgument, ModelClassMismatch, PrecisionExhausted
from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.models import SequenceModel
from verified_attn.multi_head.canonical_bounds import canonical_query_limit
from verified_attn.transformer.multi_head_cells import spanning_cells
from verified_attn.transformer.multi_head_learner import (
    _solve_shares,
    canonical_parameter_count,
    learn_multi_head_transformer,
)
from verified_attn.transformer.relu_biased import canonical_biased_network

T2 = MultiHeadTransformer(
    [([[1, 0], [0, -1]], [[1, 0], [0, 1]]), ([[0, 1], [1, 0]], [[1, 1], [-1, 0]])],
    [[1, 0], [0, 1]],
    [1, -1],
    a=[1, 1],
    b=2,
)


def _random(seed: int, d: int, H: int, e: int, m: int, affine: bool) -> MultiHeadTransformer:
    rng = np.random.default_rng(seed)
    heads: list[Any] = []
    for _ in range(H):
        W = (rng.integers(-2, 3, (d, d)) / 2).tolist()
        V = rng.integers(-2, 3, (d, e)).tolist()
        heads.append((W, V, rng.integers(-2, 3, d).tolist()) if affine else (W, V))
    return MultiHeadTransformer(
        heads,
        rng.integers(-2, 3, (e, m)).tolist(),
        rng.integers(-2, 3, m).tolist(),
        a=rng.integers(-2, 3, m).tolist(),
        b=int(rng.integers(-2, 3)),
    )


def _fresh(rng: np.random.Generator, n: int, d: int) -> list[list[Fraction]]:
    return [[Fraction(int(x), 3) for x in rng.integers(-9, 10, d)] for _ in range(n)]


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
def test_golden_count_and_the_model_on_sequences_never_asked(arithmetic: str) -> None:
    oracle = va.Oracle(T2, arithmetic)
    rec = va.learn_transformer(oracle, max_heads=2)
    assert rec.method == "multi-head-cells" and rec.exact and rec.verified
    # the FFN (14) and three cells of g, 31 learning queries each (golden, on the oracle)
    assert (rec.queries, rec.ffn_queries, rec.attention_queries) == (107, 14, 93)
    assert rec.queries + rec.verification_queries == oracle.queries == 139
    assert rec.verification_queries == 32
    assert rec.bound == 14 + 3 * canonical_query_limit(2, 2, affine=True)
    assert rec.parameter_count == canonical_parameter_count(2, 2, 2) == 27
    assert rec.verification.lengths_used == (1, 2, 3, 4, 6, 8, 16)
    assert rec.network == canonical_biased_network(T2.ffn())
    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 5, 9):
        X = _fresh(rng, n, 2)
        assert rec.model.evaluate(X, "exact") == T2.evaluate(X, "exact")


def test_the_heads_are_the_truths_in_canonical_form() -> None:
    rec = va.learn_transformer(va.Oracle(T2, "exact"), max_heads=2)
    assert sorted(tuple(W) for W, _ in rec.parameters["heads"]) == sorted(
        tuple(W) for W, _ in T2.heads
    )
    # each head's values, read through the canonical FFN's columns, sum to g's first layer
    total = sum((V for _, V in rec.parameters["heads"]), sympy.zeros(2, rec.model.e))
    assert total == rec.parameters["A"]


@pytest.mark.parametrize(
    ("seed", "d", "H", "e", "m", "affine", "golden"),
    [(1, 2, 2, 3, 3, True, 106), (0, 3, 2, 2, 3, False, 130), (0, 2, 3, 2, 4, True, 98)],
)
def test_random_boxes_with_score_biases_and_three_heads(
    seed: int, d: int, H: int, e: int, m: int, affine: bool, golden: int
) -> None:
    T = _random(seed, d, H, e, m, affine)
    rec = va.learn_transformer(va.Oracle(T, "exact"), max_heads=H)
    assert rec.queries == golden
    rng = np.random.default_rng(seed + 5)
    for n in (2, 4):
        X = _fresh(rng, n, d)
        assert rec.model.evaluate(X, "exact") == T.evaluate(X, "exact")


def test_heads_sharing_w_are_learned_as_one() -> None:
    W = [[1, 0], [0, -1]]
    T = MultiHeadTransformer(
        [(W, [[1, 0], [0, 1]]), (W, [[0, 1], [1, 0]]), ([[0, 1], [1, 0]], [[1, 1], [-1, 0]])],
        [[1, 0], [0, 1]],
        [1, -1],
        a=[1, 1],
        b=2,
    )
    rec = va.learn_transformer(va.Oracle(T, "exact"), max_heads=3)
    assert rec.model.H == 2
    X = _fresh(np.random.default_rng(2), 4, 2)
    assert rec.model.evaluate(X, "exact") == T.evaluate(X, "exact")


class _Residual:
    """T2 plus the residual x_N^T r: a ReLU network at length 1, no multi-head Transformer."""

    d = 2
    model_class = "one-layer-transformer-multi-head"

    def __init__(self, r: tuple[int, int]) -> None:
        self.r = r

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        Xs = np.asarray(Xs, dtype=np.float64)
        return T2.evaluate_batch(Xs) + Xs[:, -1, :] @ np.array(self.r, dtype=np.float64)

    def evaluate_rational(self, Xq: Any, arith: Any) -> Any:
        n = Xq.nrows()
        skip = sum(to_fraction(Xq[n - 1, i]) * self.r[i] for i in range(2))
        return T2.evaluate_rational(Xq, arith) + arith.rational(Fraction(skip))


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
def test_a_residual_connection_is_refused_with_a_witness(arithmetic: str) -> None:
    oracle = va.Oracle(_Residual((1, -2)), arithmetic)
    with pytest.raises(ModelClassMismatch, match="not a multi-head Transformer") as info:
        va.learn_transformer(oracle, max_heads=2)
    X = info.value.query
    assert "no head" in str(info.value) and X is not None
    # the witness is a real query with its real answer; every attempt is counted
    arith = oracle.arithmetic
    with arith.context():
        truth = oracle.model.evaluate_rational(va.models.as_rational_sequence(X, 2), arith)
        assert arith.agree(info.value.observed, truth)
    assert {"cell1/F(k)", "cell1.1/F(k)", "cell1.2/F(k)"} <= set(oracle.queries_by_phase)


class _Masked:
    """T2 with a causal-style mask over the last position's row: it attends to the last two
    tokens only (T2 of the sequence's last two tokens). T2 itself on length 1 and 2."""

    d = 2
    model_class = "one-layer-transformer-multi-head"

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        return T2.evaluate_batch(np.asarray(Xs, dtype=np.float64)[:, -2:, :])

    def evaluate_rational(self, Xq: Any, arith: Any) -> Any:
        n = Xq.nrows()
        rows = [[Xq[i, j] for j in range(2)] for i in range(max(0, n - 2), n)]
        return T2.evaluate_rational(flint.fmpq_mat(rows), arith)


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
def test_a_mask_over_the_last_row_is_refused_with_a_witness(arithmetic: str) -> None:
    oracle = va.Oracle(_Masked(), arithmetic)
    with pytest.raises(ModelClassMismatch, match="not a multi-head Transformer") as info:
        va.learn_transformer(oracle, max_heads=2)
    X = info.value.query
    assert X is not None and oracle.queries == 146  # golden, counted on the oracle (the FFN stage asks 1 fewer since its split change)
    arith = oracle.arithmetic  # the witness is a real query with its real answer
    with arith.context():
        truth = oracle.model.evaluate_rational(va.models.as_rational_sequence(X, 2), arith)
        assert arith.agree(info.value.observed, truth)


class _Post(SequenceModel):
    """T2's heads, then LayerNorm before the FFN or GELU for ReLU (certified only)."""

    d = 2
    model_class = "one-layer-transformer-multi-head"

    def __init__(self, post: str) -> None:
        self.post = post

    def _evaluate_rational(self, Xq: Any, arith: Any) -> Any:
        n, q = Xq.nrows(), (lambda x: flint.fmpq(int(x.p), int(x.q)))
        h = [flint.arb(0), flint.arb(0)]
        for W, V in T2.heads:
            s = [sum((Xq[i, j] * q(W[j, k]) * Xq[n - 1, k] for j in range(2) for k in range(2)),
                     flint.fmpq(0)) for i in range(n)]
            w = [flint.arb(si - max(s)).exp() for si in s]
            pooled = [sum((w[i] * flint.arb(Xq[i, j]) for i in range(n)), flint.arb(0))
                      / sum(w, flint.arb(0)) for j in range(2)]
            h = [h[k] + sum((pooled[j] * q(V[j, k]) for j in range(2)), flint.arb(0))
                 for k in range(2)]
        if self.post == "layernorm":
            mu = (h[0] + h[1]) / 2
            var = ((h[0] - mu) ** 2 + (h[1] - mu) ** 2) / 2
            h = [(x - mu) / (var + flint.arb(1) / 10).sqrt() for x in h]
        out = flint.arb(q(T2.b))
        for k in range(2):
            z = sum((h[j] * q(T2.A[j, k]) for j in range(2)), flint.arb(q(T2.a[k])))
            act = z * (1 + (z / flint.arb(2).sqrt()).erf()) / 2 if self.post == "gelu" else (
                (z + abs(z)) / 2
            )
            out += q(T2.w_o[k]) * act
        return out


@pytest.mark.parametrize("post", ["layernorm", "gelu"])
def test_layernorm_and_gelu_are_refused(post: str) -> None:
    # irrational answers on length 1: no rational within the denominator bound fits them
    X = [[Fraction(1), Fraction(-1)], [Fraction(1, 2), Fraction(2)], [Fraction(0), Fraction(1)]]
    assert _Post("relu").evaluate(X, "certified").overlaps(T2.evaluate(X, "certified"))
    assert not _Post(post).evaluate(X, "certified").overlaps(T2.evaluate(X, "certified"))
    with pytest.raises((ModelClassMismatch, PrecisionExhausted), match="denominator"):
        va.learn_transformer(va.Oracle(_Post(post), "certified"), max_heads=2)


def test_a_wrong_share_is_caught_by_the_sum_check() -> None:
    """The heads' shares must sum to g's directions; a tampered cell fit fails that."""
    net = canonical_biased_network(T2.ffn())
    cells = spanning_cells(net, 0)
    rec = va.learn_transformer(va.Oracle(T2, "exact"), max_heads=2)
    fits: list[dict[Any, sympy.Matrix]] = []
    for cell in cells:  # the true per-cell values, from the learned model's heads
        fit = {}
        for W, V in rec.parameters["heads"]:
            on = [*cell.pattern, True, False]  # neurons, then the linear pair l, -l
            w = [x if k < net.width else 1 for k, x in enumerate(rec.parameters["w_o"])]
            cols = [V[:, k] * w[k] for k in range(V.cols) if on[k]]
            fit[(tuple(W), (0, 0))] = sum(cols, sympy.zeros(2, 1))
        fits.append(fit)
    shares = _solve_shares(net, cells, fits)
    assert len(shares) == 2
    key = next(iter(fits[0]))
    fits[0][key] = fits[0][key] + sympy.Matrix([1, 0])
    with pytest.raises(ModelClassMismatch, match="shares"):
        _solve_shares(net, cells, fits)


def test_arguments_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="max_heads"):
        va.learn_transformer(va.Oracle(T2, "exact"))
    with pytest.raises(InvalidArgument, match="arithmetic 'exact' or 'certified'"):
        learn_multi_head_transformer(va.Oracle(T2, "float"), max_heads=2)
    with pytest.raises(InvalidArgument, match="max_heads"):
        va.learn_transformer(va.Oracle(T2, "exact"), max_heads=0)
    with pytest.raises(InvalidArgument, match="method"):
        va.learn_transformer(va.Oracle(T2, "exact"), max_heads=2, method="paper")
    with pytest.raises(InvalidArgument, match="attempts"):
        learn_multi_head_transformer(va.Oracle(T2, "exact"), max_heads=2, attempts=0)


def test_a_wrong_unscaling_is_refused_by_the_fresh_sequences(monkeypatch: Any) -> None:
    """W_h = W_inner / t^2: read with t^2 off by a factor 2, the model is refuted."""
    from verified_attn.transformer import multi_head_learner as mhl

    real = mhl._unscale
    monkeypatch.setattr(mhl, "_unscale", lambda heads, cell, t: real(heads, cell, t * 2))
    with pytest.raises(ModelClassMismatch):
        va.learn_transformer(va.Oracle(T2, "exact"), max_heads=2)


def test_a_step_leaving_the_cell_is_retried_smaller(monkeypatch: Any) -> None:
    """t = 4 sends the queries out of their cell: the fit is refuted there and t is
    quartered until it fits; every query is counted."""
    from verified_attn.transformer import multi_head_learner as mhl

    monkeypatch.setattr(mhl, "_start_t", lambda cell: Fraction(4))
    rec = va.learn_transformer(va.Oracle(T2, "exact"), max_heads=2)
    assert rec.queries > 109 and any("." in phase for phase in rec.queries_by_phase)
    X = _fresh(np.random.default_rng(3), 3, 2)
    assert rec.model.evaluate(X, "exact") == T2.evaluate(X, "exact")


def test_the_result_is_kept_as_json_and_read_back() -> None:
    """to_dict / from_dict keep V_h's shape, the biased network and the model (==)."""
    import json

    rec = va.learn_transformer(va.Oracle(T2, "exact"), max_heads=2)
    back = type(rec).from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back.network == rec.network and back.queries == rec.queries
    assert [h[1].shape for h in back.parameters["heads"]] == [(2, 2), (2, 2)]
    X = [[Fraction(1), Fraction(1, 2)], [Fraction(-1), Fraction(2)], [Fraction(0), Fraction(1)]]
    assert back.model.evaluate(X, "exact") == T2.evaluate(X, "exact")


def test_the_single_head_biased_result_reads_back_with_its_biases() -> None:
    import json

    from verified_attn.models import OneLayerTransformer

    T = OneLayerTransformer(
        [[1, -1], [0, 2]], [[1, 0], [1, 1]], [[1, 0], [1, -1]], [2, -1], a=[1, -2], b=3
    )
    rec = va.learn_transformer(va.Oracle(T, "exact"))
    back = type(rec).from_dict(json.loads(json.dumps(rec.to_dict())))
    X = [[Fraction(1), Fraction(0)], [Fraction(1, 2), Fraction(-3)]]
    assert back.model.evaluate(X, "exact") == T.evaluate(X, "exact")
    assert back.network == rec.network


def test_neurons_sharing_a_length_one_hyperplane_are_refused_naming_the_assumption() -> None:
    """Neuron 1 reads head 1, neuron 2 head 2, one hyperplane at length 1: g merges them,
    the model from g is wrong on longer sequences, and the fresh sequences refuse it."""
    half = Fraction(-1, 2)
    T = MultiHeadTransformer(
        [([[1, 0], [0, -1]], [[1, 0], [0, 0]]), ([[0, 1], [1, 0]], [[0, 1], [0, 0]])],
        [[1, 0], [0, 1]],
        [1, 1],
        a=[half, half],
    )
    with pytest.raises(ModelClassMismatch, match="distinct length-1 hyperplanes") as info:
        va.learn_transformer(va.Oracle(T, "exact"), max_heads=2)
    assert info.value.query is not None and len(info.value.query) >= 2


def test_the_benchmark_row() -> None:
    """benchmarks/transformer.py --multi-head: a row's counts add up, the model is ==, its
    certificate re-checks."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "transformer.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("bench_transformer_mh", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    row = bench.run_multi_head(2, 2, 4, 0)
    assert row["equal_on_fresh"] and (row["queries"], row["parameter_count"]) == (148, 32)
    assert row["queries"] == row["ffn_queries"] + row["attention_queries"] <= row["bound"]
    assert row["certificate_ok"] and row["counts_add_up"] and row["peak_rss_mib"] > 0


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
def test_three_heads_at_d_2_in_both_rational_arithmetics(arithmetic: str) -> None:
    """Crowded poles (scores t^2 u^T W_h b): the cells are learned at 1024-bit balls, a
    certified box over our model asked at those bits. Golden: 203 in both."""
    T = _random(0, 2, 3, 2, 3, False)
    oracle = va.Oracle(T, arithmetic)
    rec = va.learn_transformer(oracle, max_heads=3)
    assert (rec.queries, rec.verification_queries, rec.model.H) == (203, 48, 3)
    X = _fresh(np.random.default_rng(4), 3, 2)
    assert rec.model.evaluate(X, "exact") == T.evaluate(X, "exact")
