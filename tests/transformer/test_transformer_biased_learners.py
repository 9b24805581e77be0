"""The biased ReLU FFN learner and the biased one-layer Transformer learner."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np
import pytest

import verified_attn as va
from verified_attn import soundness
from verified_attn.errors import InvalidArgument, ModelClassMismatch, PrecisionExhausted
from verified_attn.models import OneLayerTransformer, ReluFFN, SequenceModel, SingleHeadAttention
from verified_attn.transformer import (
    biased_ffn_query_count,
    canonical_biased_network,
    learn_biased_relu_ffn,
    learn_biased_transformer,
)
from verified_attn.transformer.relu_biased import Answers, LineSearch

G1 = ReluFFN([[1, 2, -1], [1, -1, 0]], [3, -1, 2], a=[1, -2, 3], b=5)
T1 = OneLayerTransformer(
    [[1, -1], [0, 2]], [[1, 0], [1, 1]], [[1, 0], [1, -1]], [2, -1], a=[1, -2], b=3
)


def random_biased_ffn(d: int, m: int, seed: int) -> ReluFFN:
    rng = np.random.default_rng(seed)
    A = [
        [Fraction(int(rng.integers(-4, 5)), int(rng.integers(1, 4))) for _ in range(m)]
        for _ in range(d)
    ]
    w = [Fraction(int(x), 2) for x in rng.integers(-4, 5, m)]
    a = [Fraction(int(x), int(rng.integers(1, 4))) for x in rng.integers(-6, 7, m)]
    return ReluFFN(A, w, a=a, b=Fraction(int(rng.integers(-5, 6)), 3))


def _points(d: int, seed: int, count: int = 12) -> list[list[list[Fraction]]]:
    rng = np.random.default_rng(seed)
    return [
        [[Fraction(int(rng.integers(-9, 10)), int(rng.integers(1, 7))) for _ in range(d)]]
        for _ in range(count)
    ]


# -- the FFN learner: golden counts, canonical form, every arithmetic -------------------


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
def test_golden_count_d2_m3(arithmetic: str) -> None:
    rec = learn_biased_relu_ffn(va.Oracle(G1, arithmetic))
    assert rec.network == canonical_biased_network(G1)
    assert rec.line_counts == {"pieces": 2, "half_pieces": 2, "probes": 11, "kinks": 3}
    # 2 * 2 + 2 + 11 + (d - 1)(K + 1) = 17 + 4 (a failed left probe skips the right one;
    # a middle split is a probe, plus a half piece only when it lies on neither end's piece)
    assert rec.queries == biased_ffn_query_count(2, **rec.line_counts) == rec.bound == 21
    assert biased_ffn_query_count(2, **{**rec.line_counts, "probes": 10}) != rec.queries
    # two queries per probe (the pairs of the old check) is a wrong formula for this search
    assert 2 * 2 + 2 + 2 * 11 + 4 != rec.queries
    assert (rec.parameter_count, rec.verification_queries, rec.exact) == (12, 8, True)


def test_golden_count_d8_m16_and_the_model_reproduces_g() -> None:
    g = random_biased_ffn(8, 16, 1)
    rec = learn_biased_relu_ffn(va.Oracle(g, "exact"))
    assert rec.network == canonical_biased_network(g)
    # golden, the formula of its counters: 2*2 + 15 + 53 + 7*(16 + 1) = 191
    assert rec.line_counts == {"pieces": 2, "half_pieces": 15, "probes": 53, "kinks": 16}
    assert biased_ffn_query_count(8, **rec.line_counts) == 191
    assert (rec.queries, rec.bound, rec.parameter_count, rec.attempts) == (191, 191, 153, 1)
    # Independently of the canonical form: the learned FFN equals g (==) at fresh points.
    for X in _points(8, 5):
        assert rec.model.evaluate(X, "exact") == g.evaluate(X, "exact")


def test_a_repeated_point_is_asked_once_and_counted_once() -> None:
    """A point the search asked before is neither asked nor counted again: a piece whose
    first point was a probe is a half piece (1 query), a piece measured twice costs nothing
    the second time, so the formula of the counters stays the oracle's count. (The
    learner's own searches no longer meet such points: driven here directly.)"""
    g = random_biased_ffn(4, 8, 0)
    rec = learn_biased_relu_ffn(va.Oracle(g, "certified"))
    assert rec.network == canonical_biased_network(g)
    # golden, the formula of its counters: 2*2 + 6 + 27 + 3*(7 + 1) = 61
    assert rec.line_counts == {"pieces": 2, "half_pieces": 6, "probes": 27, "kinks": 7}
    assert (rec.queries, rec.bound) == (61, 61)
    assert biased_ffn_query_count(4, **rec.line_counts) == 61
    oracle = va.Oracle(g, "exact")
    x0, u = tuple(map(Fraction, (1, -2, 3, 1))), tuple(map(Fraction, (1, 1, -1, 2)))
    search = LineSearch(Answers(oracle, None), x0, u, Fraction(64))
    one, five = Fraction(1), Fraction(5)
    first = search.piece(one, one, 1)  # 2 new points: a piece
    assert search.piece(one, one, 1) == first  # asked before: nothing asked or counted
    search.probes += search._new(five)  # a probe at t = 5 ...
    search._ask([five])
    search.piece(five, one, 1)  # ... is the first point of a half piece: 1 query
    assert (search.pieces, search.half_pieces, search.probes) == (1, 1, 1)
    assert oracle.queries == search.queries() == 2 * 1 + 1 + 1
    # counting every piece as 2 queries and every probe as 1 would say 2 * 3 + 1
    assert 2 * 3 + 1 != oracle.queries


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
@pytest.mark.parametrize("gap", [Fraction(1, 10**3), Fraction(1, 10**6), Fraction(1, 10**9)])
def test_two_kinks_close_together_are_learned_exactly_or_refused(
    arithmetic: str, gap: Fraction
) -> None:
    """A thin bump: two parallel hyperplanes ``gap`` apart with opposite weights, where one
    probe per side of a kink could be fooled. Learned (==) at 1/1000; closer, refused
    (the line search cannot isolate them, or the fresh sequences refute), never wrong."""
    g = ReluFFN([[1, 1, 0], [2, 2, 1]], [3, -3, 1], a=[1, 1 + gap, -1], b=2)
    try:
        rec = learn_biased_relu_ffn(va.Oracle(g, arithmetic))
    except REFUSED:
        assert gap < Fraction(1, 10**3)
        return
    assert rec.network == canonical_biased_network(g) and rec.verified
    assert gap == Fraction(1, 10**3) and rec.queries == 33


def test_a_bias_free_network_is_learned_too() -> None:
    g0 = ReluFFN([[1, 2, -1, 0], [1, -1, -1, 0]], [3, -1, 3, 5])
    rec = learn_biased_relu_ffn(va.Oracle(g0, "exact"))
    assert rec.network == canonical_biased_network(g0) and rec.network.constant == 0
    assert all(c == 0 for (_, c), _ in rec.network.neurons)
    assert rec.queries == 16  # the bias-free learner's golden count here is 13


def test_float_mode_learns_within_the_float_rule() -> None:
    g = ReluFFN([[1, -2], [3, 1]], [2, -1], a=[1, 4], b=-3)
    rec = learn_biased_relu_ffn(va.Oracle(g, "float"))
    assert not rec.exact and rec.verified and rec.verification_error < 1e-9
    assert rec.queries == rec.bound
    truth = canonical_biased_network(g)
    assert rec.network.width == truth.width
    for X in _points(2, 9):
        assert abs(rec.model(X) - float(g.value(X[0]))) <= 1e-8 * (1 + abs(float(g.value(X[0]))))


# -- canonical form -------------------------------------------------------------------


def test_canonical_form_collapses_what_it_should_and_keeps_what_it_should() -> None:
    base = ReluFFN([[2, -1]], [1, 4], a=[2, 3])
    never = ReluFFN([[2, -1, 0]], [1, 4, 9], a=[2, 3, -1])  # A_k = 0, a_k < 0: never on
    always = ReluFFN([[2, -1, 0]], [1, 4, 9], a=[2, 3, 2], b=-18)  # always on: + 9 * 2
    scaled = ReluFFN([[-1, 4]], [4, Fraction(1, 2)], a=[3, 4])  # order and positive scale
    assert canonical_biased_network(never) == canonical_biased_network(base)
    assert canonical_biased_network(always) == canonical_biased_network(base)
    assert canonical_biased_network(scaled) == canonical_biased_network(base)
    pair = ReluFFN([[1, -1]], [3, -3], a=[1, -1])  # 3 ReLU(z) - 3 ReLU(-z) = 3 z
    net = canonical_biased_network(pair)
    assert (net.width, net.linear, net.constant) == (0, (Fraction(3),), Fraction(3))
    # Wrong variants: a changed bias or a negative scaling changes the form.
    assert canonical_biased_network(ReluFFN([[2, -1]], [1, 4], a=[2, 4])) != net
    flipped = ReluFFN([[-2, -1]], [1, 4], a=[-2, 3])  # ReLU(-2x - 2) is not ReLU(2x + 2)
    assert canonical_biased_network(flipped) != canonical_biased_network(base)


# -- refusals -------------------------------------------------------------------------


class _Box(SequenceModel):
    """T's attention, then ``post`` on the pooled token (certified arithmetic only)."""

    def __init__(self, T: OneLayerTransformer, post: str, mask: int = 0) -> None:
        self.T, self.post, self.d, self.mask = T, post, T.d, mask

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Any) -> Any:
        n, d = Xq.nrows(), self.d
        rows = list(range(n))[-self.mask :] if self.mask else list(range(n))
        W = np.array(self.T.W.tolist(), dtype=object)
        last = [Xq[n - 1, j] for j in range(d)]
        s = [
            sum(
                (Xq[i, j] * _q(W[j, k]) * last[k] for j in range(d) for k in range(d)),
                flint.fmpq(0),
            )
            for i in rows
        ]
        w = [flint.arb(si - max(s)).exp() for si in s]
        h = [
            sum((wi * flint.arb(Xq[i, j]) for wi, i in zip(w, rows, strict=True)), flint.arb(0))
            / sum(w, flint.arb(0))
            for j in range(d)
        ]
        if self.post == "layernorm":
            mu = sum(h, flint.arb(0)) / d
            var = sum(((x - mu) ** 2 for x in h), flint.arb(0)) / d
            h = [(x - mu) / (var + flint.arb(1) / 10).sqrt() for x in h]
        if self.post == "residual":  # the FFN reads attention + the residual stream x_N
            h = [x + flint.arb(q) for x, q in zip(h, last, strict=True)]
        VA = np.array((self.T.V * self.T.A).tolist(), dtype=object)
        out = flint.arb(_q(self.T.b))
        for k in range(self.T.m):
            z = sum((h[j] * _q(VA[j, k]) for j in range(d)), flint.arb(_q(self.T.a[k])))
            act = (
                z * (1 + (z / flint.arb(2).sqrt()).erf()) / 2
                if self.post == "gelu"
                else ((z + abs(z)) / 2)
            )
            out += _q(self.T.w_o[k]) * act
        return out


def _q(x: Any) -> flint.fmpq:
    return flint.fmpq(int(x.p), int(x.q))


REFUSED = (ModelClassMismatch, PrecisionExhausted)


@pytest.mark.parametrize("post", ["layernorm", "residual", "gelu", "mask"])
def test_the_transformer_learner_refuses_out_of_class_boxes(post: str) -> None:
    box = _Box(T1, "relu", mask=2) if post == "mask" else _Box(T1, post)
    with pytest.raises(REFUSED):
        learn_biased_transformer(va.Oracle(box, "certified"))
    with pytest.raises(REFUSED) as info:  # the public entry point dispatches to it
        va.learn_transformer(va.Oracle(box, "certified"), biases=True)
    if post == "mask":  # a fresh sequence refutes it: the box's answer there, and the model's
        exc = info.value
        assert isinstance(exc, ModelClassMismatch)
        assert not box.evaluate(exc.query, "certified").overlaps(
            T1.evaluate(exc.query, "certified")
        )
    else:  # irrational answers: no rational within the denominator bound reconstructs
        assert "denominator" in str(info.value)


def test_the_box_without_additions_is_t1_and_is_learned_so_the_refusals_mean_something() -> None:
    X = [[Fraction(1), Fraction(-1)], [Fraction(1, 2), Fraction(2)], [Fraction(0), Fraction(1)]]
    truth = T1.evaluate(X, "certified")
    assert _Box(T1, "relu").evaluate(X, "certified").overlaps(truth)
    for post in ("layernorm", "residual", "gelu"):
        assert not _Box(T1, post).evaluate(X, "certified").overlaps(truth)
    rec = learn_biased_transformer(va.Oracle(_Box(T1, "relu"), "certified"))
    assert rec.W == T1.W and rec.verified


def test_the_ffn_learner_refuses_gelu_and_inconsistent_answers() -> None:
    gelu = _Box(
        OneLayerTransformer(
            [[0, 0], [0, 0]], [[1, 0], [0, 1]], [[1, -1], [2, 1]], [1, 2], a=[1, 0]
        ),
        "gelu",
    )
    with pytest.raises(REFUSED):
        learn_biased_relu_ffn(va.Oracle(gelu, "certified"))
    head = SingleHeadAttention([[Fraction(1, 2), 0], [0, Fraction(-1, 2)]], [1, 1])
    g = ReluFFN([[1, -1], [0, 1]], [1, 2], a=[1, -1])
    with pytest.raises(ModelClassMismatch):  # a ReLU net on length 1, not on longer ones
        learn_biased_relu_ffn(va.Oracle(soundness.Plus(g, head), "certified"))
    with pytest.raises(ModelClassMismatch):  # a Transformer is an FFN on length 1 only
        learn_biased_relu_ffn(va.Oracle(T1, "exact"))


# -- the Transformer learner ------------------------------------------------------------


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
def test_biased_transformer_golden_count_and_fresh_sequences(arithmetic: str) -> None:
    rec = va.learn_transformer(va.Oracle(T1, arithmetic))
    assert rec.method == "biased-direct" and rec.W == T1.W
    assert (rec.queries, rec.ffn_queries, rec.attention_queries) == (30, 26, 4)
    assert rec.parameter_count == 4 + 9 and rec.bound == rec.queries
    assert rec.verification.lengths_used == (1, 2, 3, 4, 6, 8, 16)
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 5):
        X = [[Fraction(int(v), 3) for v in rng.integers(-6, 7, 2)] for _ in range(n)]
        assert rec.model.evaluate(X, "exact") == T1.evaluate(X, "exact")


def test_a_wrong_w_is_caught_by_the_same_comparison() -> None:
    rec = learn_biased_transformer(va.Oracle(T1, "exact"))
    g = rec.model.ffn()
    wrong = OneLayerTransformer([[1, -1], [0, 3]], np.eye(2, dtype=int), g.A, g.w_o, a=g.a, b=g.b)
    X = [[Fraction(1), Fraction(2)], [Fraction(-1), Fraction(1, 2)]]
    assert wrong.evaluate(X, "exact") != T1.evaluate(X, "exact")


def test_a_constant_ffn_is_not_identifiable_and_arguments_are_checked() -> None:
    flat = OneLayerTransformer([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[0], [0]], [2], a=[1], b=1)
    with pytest.raises(va.NotIdentifiable):
        learn_biased_transformer(va.Oracle(flat, "exact"))
    with pytest.raises(InvalidArgument, match="arithmetic"):
        learn_biased_transformer(va.Oracle(T1, "float"))
    with pytest.raises(InvalidArgument, match="bias-free FFN"):
        va.learn_transformer(va.Oracle(T1, "exact"), method="paper")
    with pytest.raises(InvalidArgument, match="biases"):
        va.learn_relu_ffn(va.Oracle(G1, "exact"), biases=1)  # type: ignore[arg-type]


# -- certificates -----------------------------------------------------------------------


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
def test_the_biased_ffn_certificate_verifies_and_tampered_copies_fail(arithmetic: str) -> None:
    rec = va.learn_relu_ffn(va.Oracle(G1, arithmetic))
    data = rec.certificate()
    assert va.verify_certificate(data).kind == "relu-ffn-biased"
    ok, detail = soundness.tamper_check(data)
    assert ok, detail
    ok, detail = soundness.tamper_check(data, ("result", "answers"))
    assert ok, detail


def test_a_float_result_carries_no_certificate() -> None:
    rec = learn_biased_relu_ffn(va.Oracle(ReluFFN([[1, -2], [3, 1]], [2, -1], a=[1, 4]), "float"))
    with pytest.raises(va.CertificateError, match="no certificate"):
        rec.certificate()


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
def test_the_biased_transformer_certificate_verifies_and_tampered_copies_fail(
    arithmetic: str,
) -> None:
    rec = va.learn_transformer(va.Oracle(T1, arithmetic))
    data = rec.certificate()
    check = va.verify_certificate(data)
    assert check.kind == "transformer-biased" and check.theorem == "transformer/biased-direct"
    ok, detail = soundness.tamper_check(data, ("result", "attention.answers", "ffn.answers"))
    assert ok, detail
    ok, detail = soundness.tamper_check(data)
    assert ok, detail
