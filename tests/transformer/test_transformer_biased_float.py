"""The float learner of one-layer Transformers with FFN biases (biased_float)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.models import OneLayerTransformer
from verified_attn.transformer import biased_float
from verified_attn.transformer.biased_float import _design, learn_biased_transformer_float
from verified_attn.transformer.relu_biased import BiasedReluNetwork
from verified_attn.verification import verify_model

T1 = OneLayerTransformer(
    [[1, -1], [0, 2]], [[1, 0], [1, 1]], [[1, 0], [1, -1]], [2, -1], a=[1, -2], b=3
)


def random_transformer(d: int, seed: int) -> OneLayerTransformer:
    rng = np.random.default_rng(seed)
    m = 2 * d
    return OneLayerTransformer(
        rng.integers(-4, 5, (d, d)) / 8,
        rng.integers(-4, 5, (d, d)) / 4,
        rng.integers(-4, 5, (d, m)) / 4,
        rng.integers(-4, 5, m) / 2,
        a=rng.integers(-6, 7, m) / 4,
        b=int(rng.integers(-5, 6)) / 3,
    )


def _W(T: OneLayerTransformer) -> np.ndarray:
    return np.array(T.W.tolist(), dtype=np.float64)


def test_module_example_counts_and_accuracy() -> None:
    rec = va.learn_transformer(va.Oracle(T1, "float"))
    assert rec.method == "biased-direct" and not rec.exact and rec.verified
    # Golden: the FFN's 14, then d + 1 = 3 cell values and d^2 = 4 two-token queries.
    assert (rec.queries, rec.ffn_queries, rec.attention_queries) == (21, 14, 7)
    assert rec.queries_by_phase["attention-cell"] == 3
    assert rec.queries_by_phase["attention-direct"] == 4
    assert rec.attention_bound == 7 and rec.queries <= rec.bound
    assert rec.parameter_count == 4 + rec.network.parameter_count == 13
    assert np.abs(rec.W - _W(T1)).max() < 1e-9
    assert rec.verification.max_ratio <= 1 and rec.verification.lengths_used[-1] == 16


@pytest.mark.parametrize(
    ("d", "seed", "queries", "ffn"), [(2, 0, 28, 21), (4, 0, 103, 82), (8, 2, 262, 189)]
)
def test_random_transformers(d: int, seed: int, queries: int, ffn: int) -> None:
    T = random_transformer(d, seed)
    oracle = va.Oracle(T, "float")
    rec = va.learn_transformer(oracle, seed=seed)
    assert (rec.queries, rec.ffn_queries) == (queries, ffn)  # golden
    assert rec.attention_queries == d * d + d + 1
    assert np.abs(rec.W - _W(T)).max() <= 1e-9 * max(1.0, np.abs(_W(T)).max())
    # Unseen sequences, every length: the float rule against the box.
    record = verify_model(
        oracle,
        rec.model,
        count=24,
        seed=777,
        lengths=(1, 2, 5, 9, 17, 33),
    )
    assert record.max_ratio is not None and record.max_ratio <= 1
    # A deliberately wrong W (one entry off by 1e-3) is refused by the same rule.
    W = rec.W.copy()
    W[0, 0] += 1e-3
    g = rec.network.model()
    wrong = OneLayerTransformer(W, np.eye(d), g.A, g.w_o, a=g.a, b=g.b)
    with pytest.raises(ModelClassMismatch):
        verify_model(oracle, wrong, count=24, seed=777, lengths=(2, 3, 5))


def test_no_certificate_for_float() -> None:
    rec = va.learn_transformer(va.Oracle(T1, "float"))
    with pytest.raises(CertificateError, match="exact rationals only"):
        rec.certificate()


def test_design_keeps_its_margin() -> None:
    rec = va.learn_transformer(va.Oracle(T1, "float"))
    net = rec.network
    des = _design(net, 2, 0)
    points = list(des["base"]) + [b + des["t"] * u for b in des["base"] for u in des["U"]]
    for (n, c), _ in net.neurons:
        nv = np.array(n, dtype=np.float64)
        dists = [abs(nv @ p + c) / np.linalg.norm(nv) for p in points]
        sides = {nv @ p + c > 0 for p in points} | {nv @ des["y"] + c > 0}
        assert min(dists) >= des["margin"] * (1 - 1e-12) and len(sides) == 1
    assert des["margin"] > biased_float.MARGIN


def test_thin_cells_refused() -> None:
    # d = 1, a hyperplane 1e-9 beside every point the design samples: no cell is wide.
    neurons = tuple((((1.0,), -(k / 16 + 1e-9)), 1.0 + (k % 3)) for k in range(-64, 65))
    net = BiasedReluNetwork(0.0, (1.0,), neurons)
    with pytest.raises(PrecisionExhausted, match="widest sampled cell"):
        _design(net, 1, 0)


def test_constant_g_not_identifiable() -> None:
    Tc = OneLayerTransformer(
        [[1, -1], [0, 2]], [[1, 0], [1, 1]], [[0, 0], [0, 0]], [2, -1], a=[1, -2], b=3
    )
    with pytest.raises(NotIdentifiable, match="constant"):
        va.learn_transformer(va.Oracle(Tc, "float"))


def test_float32_boxes_refused() -> None:
    oracle = va.Oracle.from_callable(
        lambda X: float(T1.evaluate_batch(np.asarray(X)[None])[0]),
        d=2,
        model_class="one-layer-transformer-biased",
        rtol=1e-4,
        unit_roundoff=2.0**-24,
    )
    with pytest.raises(PrecisionExhausted, match="float32"):
        va.learn_transformer(oracle)
    assert oracle.queries == 0


def _block(post: str) -> Any:
    """T1 as a float box, with ``post`` changed: "relu" is T1 itself; "layernorm" before
    the FFN, a "residual" connection into it, "gelu" for ReLU, a causal-style "mask" that
    lets the last position attend to the last two tokens only."""
    from scipy.special import erf

    V = np.array([[1, 0], [1, 1]], float)
    A = np.array([[1, 0], [1, -1]], float)
    W = np.array([[1, -1], [0, 2]], float)

    def fn(X: np.ndarray) -> float:
        X = np.asarray(X, dtype=np.float64)
        rows = X[-2:] if post == "mask" else X
        s = rows @ W @ X[-1]
        w = np.exp(s - s.max())
        h = (w / w.sum()) @ rows
        if post == "layernorm":
            h = (h - h.mean()) / np.sqrt(h.var() + 0.1)
        if post == "residual":
            h = h + 0.5 * X[-1]
        z = A.T @ V.T @ h + np.array([1.0, -2.0])
        act = 0.5 * z * (1 + erf(z / np.sqrt(2))) if post == "gelu" else np.maximum(z, 0)
        return float(np.array([2.0, -1.0]) @ act + 3)

    return fn


def test_the_in_class_block_is_t1_and_is_learned_so_the_refusals_mean_something() -> None:
    fn = _block("relu")
    X = np.array([[1.0, -1.0], [0.5, 2.0], [0.0, 1.0]])
    assert fn(X) == pytest.approx(float(T1.evaluate_batch(X[None])[0]), rel=1e-12)
    rec = va.learn_transformer(
        va.Oracle.from_callable(fn, d=2, model_class="one-layer-transformer-biased")
    )
    assert rec.verified and np.abs(rec.W - _W(T1)).max() < 1e-9


@pytest.mark.parametrize("kind", ["layernorm", "residual", "gelu", "mask"])
def test_out_of_class_refused_with_a_witness(kind: str) -> None:
    fn = _block(kind)
    oracle = va.Oracle.from_callable(fn, d=2, model_class="one-layer-transformer-biased")
    with pytest.raises(ModelClassMismatch) as info:
        va.learn_transformer(oracle)
    exc = info.value
    assert exc.query is not None and exc.observed is not None and exc.expected is not None
    if kind in ("layernorm", "gelu"):  # smooth on length 1: a bend too faint for a kink
        assert "not piecewise linear" in str(exc) and oracle.queries < 1000
        (pa, pb) = (np.array(p, dtype=np.float64) for p in exc.query)
        (sb, ib), (sa, ia) = exc.observed, exc.expected  # two pieces, apart by far more
        assert abs(sb - sa) + abs(ib - ia) > 1e-12 * (1 + abs(sa) + abs(ia))  # than rounding
        # and the box bends between the two points: midway, its answer is off their chord
        ya, yb, ym = fn(pa[None]), fn(pb[None]), fn(((pa + pb) / 2)[None])
        assert abs(ym - (ya + yb) / 2) > 1e-12 * (1 + abs(ya) + abs(yb))
    else:  # refuted by a fresh sequence: the box's own answer there, and the model's
        X = np.asarray(exc.query, dtype=np.float64)
        assert fn(X) == exc.observed and exc.observed != pytest.approx(exc.expected)


def test_the_float_ffn_learner_refuses_gelu_by_our_error_not_a_zero_division() -> None:
    from scipy.special import erf

    def gelu(X: np.ndarray) -> float:  # one GELU neuron: smooth, not piecewise linear
        z = float(np.asarray(X, dtype=np.float64)[-1] @ np.array([1.0, -2.0])) + 0.5
        return 0.5 * z * (1 + float(erf(z / np.sqrt(2))))

    def relu(X: np.ndarray) -> float:  # the same neuron with ReLU: learned
        z = float(np.asarray(X, dtype=np.float64)[-1] @ np.array([1.0, -2.0])) + 0.5
        return max(z, 0.0)

    with pytest.raises(ModelClassMismatch, match="not piecewise linear") as info:
        va.learn_relu_ffn(va.Oracle.from_callable(gelu, d=2))
    assert info.value.query is not None and info.value.observed != info.value.expected
    rec = va.learn_relu_ffn(va.Oracle.from_callable(relu, d=2))
    assert rec.verified and rec.network.width == 1


def test_entry_arguments() -> None:
    with pytest.raises(InvalidArgument, match="method"):
        va.learn_transformer(va.Oracle(T1, "float"), method="paper")
    with pytest.raises(InvalidArgument, match="float oracle"):
        learn_biased_transformer_float(va.Oracle(T1, "exact"))
    rec = learn_biased_transformer_float(va.Oracle(T1, "float"), verify=0)
    assert not rec.verified and rec.verification_queries == 0


def test_error_estimate_gate() -> None:
    # A box that claims parameters to 1e-11: W's estimate (about 1e-9 here) exceeds it.
    # (At 1e-12 the FFN itself, learned to about 3e-12 here, is already refuted.)
    oracle = va.Oracle.from_callable(
        lambda X: float(T1.evaluate_batch(np.asarray(X)[None])[0]),
        d=2,
        model_class="one-layer-transformer-biased",
        rtol=1e-11,
    )
    with pytest.raises(PrecisionExhausted, match="error estimate"):
        va.learn_transformer(oracle)
    rec = va.learn_transformer(va.Oracle(T1, "float"))
    estimate = float(rec.notes[-1].split("estimate ")[1].split(" ")[0])
    assert 1e-12 < estimate <= 1e-6


def test_a_wrong_decoding_is_refused_not_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    attention = biased_float._attention

    def transposed(*args: object) -> tuple[np.ndarray, float]:
        W, estimate = attention(*args)  # type: ignore[arg-type]
        return W.T, estimate

    monkeypatch.setattr(biased_float, "_attention", transposed)
    with pytest.raises(ModelClassMismatch, match="not the learned Transformer"):
        va.learn_transformer(va.Oracle(T1, "float"))
