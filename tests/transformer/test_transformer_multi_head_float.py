"""va.learn_transformer on a float multi-head one-layer Transformer: golden counts counted
on the oracle, errors against the truth and on fresh sequences, refusals of boxes outside
the class and of coarse boxes, and deliberately wrong steps that a check catches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.arithmetic import FloatArithmetic
from verified_attn.errors import CertificateError, ModelClassMismatch, PrecisionExhausted
from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.precision import relative_parameter_error
from verified_attn.transformer import multi_head_float as mhf
from verified_attn.transformer.multi_head_learner import canonical_parameter_count
from verified_attn.transformer.swap_witness import check_swap_witness, swap_probe
from verified_attn.verification import verify_model

T2 = MultiHeadTransformer(
    [
        ([[2, 0], [0, 1]], [[1, 0], [0, 1]], [1, 0]),
        ([[0, -1], [1, 0]], [[1, 1], [-1, 0]], [0, 1]),
    ],
    [[1, -1], [0, 1]],
    [1, 2],
    a=[1, -1],
    b=-1,
)
CLASS = "one-layer-transformer-multi-head"


def random_float(seed: int, d: int, H: int) -> MultiHeadTransformer:
    """Gaussian affine heads (W scaled by 1 / sqrt d), V d x d, FFN width 2d."""
    rng = np.random.default_rng(seed)
    heads = [
        (rng.normal(size=(d, d)) / np.sqrt(d), rng.normal(size=(d, d)), rng.normal(size=d))
        for _ in range(H)
    ]
    m = 2 * d
    return MultiHeadTransformer(
        heads, rng.normal(size=(d, m)), rng.normal(size=m), a=rng.normal(size=m), b=rng.normal()
    )


def _scores(T: MultiHeadTransformer) -> list[tuple[np.ndarray, np.ndarray]]:
    """The truth's (W_h, c_h), the canonical score parameters the learner matches."""
    return [(T._W_float[h], T._c_float[h]) for h in range(T.H)]  # type: ignore[misc]


def _learned(rec: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(np.asarray(W), np.asarray(c)) for W, _, c in rec.parameters["heads"]]


def check(rec: Any, oracle: va.Oracle, T: MultiHeadTransformer) -> None:
    """The stated estimate covers the true (W_h, c_h) error (the parameter metric, after
    canonical matching); sequences never asked, of every length, meet the float rule."""
    assert rec.verified and not rec.exact and rec.model.H == T.H
    estimate = rec.parameters["error_estimate"]
    assert estimate <= oracle.arithmetic.parameter_rtol
    truth = _scores(T)
    scale = max(1.0, max(float(np.abs(np.concatenate([W.ravel(), c])).max()) for W, c in truth))
    assert relative_parameter_error(_learned(rec), truth) * scale / max(1.0, scale) <= max(
        estimate * 10, 1e-9
    )
    record = verify_model(oracle, rec.model, count=24, seed=99, lengths=(1, 2, 3, 7, 16, 40))
    assert record.max_ratio is not None and record.max_ratio <= 1


def test_module_example_golden_counts() -> None:
    oracle = va.Oracle(T2, "float")
    rec = va.learn_transformer(oracle, max_heads=2)
    assert rec.method == "multi-head-cells-float"
    # golden, counted on the oracle: the float FFN, then 3 centers, learn_multi_head on the
    # first cell, and the other two cells' values from 2 H d = 8 probes each
    assert (rec.queries, rec.ffn_queries, rec.attention_queries) == (113, 13, 100)
    values = {k: v for k, v in rec.queries_by_phase.items() if k.endswith("/values")}
    assert list(values.values()) == [8, 8]
    assert rec.queries + rec.verification_queries == oracle.queries
    assert rec.queries <= rec.bound
    assert rec.parameter_count == canonical_parameter_count(2, 2, rec.network.width)
    assert sum(v for k, v in rec.queries_by_phase.items() if k.endswith("-center")) == 3
    check(rec, oracle, T2)
    assert any("parameter error estimate" in n for n in rec.notes)
    # its certificate (tests/transformer/test_transformer_heads_float_certificate.py)
    assert va.verify_certificate(rec.certificate()).kind == "transformer-heads-float"


@pytest.mark.parametrize(
    ("d", "seed", "queries"),
    [(2, 0, 159), pytest.param(3, 1, 245, marks=pytest.mark.slow), (4, 2, 380)],
)
def test_random_float64_transformers(d: int, seed: int, queries: int) -> None:
    T = random_float(seed, d, 2)
    oracle = va.Oracle(T, "float")
    rec = va.learn_transformer(oracle, max_heads=2, seed=seed)
    assert rec.queries == queries  # golden
    assert rec.queries <= rec.bound
    check(rec, oracle, T)


@pytest.mark.parametrize(("d", "seed", "queries", "full"), [(2, 0, 282, 1), (4, 1, 645, 1)])
def test_four_heads_learned(d: int, seed: int, queries: int, full: int) -> None:
    """H = 4: learn_multi_head on one cell (``full`` of them), the rest by their values;
    the thin cells' probes have nearly one score per head, which only the linear fit of
    the values solves."""
    T = random_float(seed, d, 4)
    oracle = va.Oracle(T, "float")
    rec = va.learn_transformer(oracle, max_heads=4, seed=seed)
    assert rec.queries == queries  # golden
    assert rec.queries <= rec.bound
    phases = rec.queries_by_phase
    cells = {k.split("-")[0] for k in phases if k.endswith("-center")}
    valued = {k.split("/")[0] for k in phases if k.endswith("/values")}
    assert len(cells) == rec.network.width + 1 and len(cells - valued) == full
    assert all(phases[f"{c}/values"] == 2 * 4 * d for c in valued)
    check(rec, oracle, T)


def test_close_heads_at_d4_are_learned() -> None:
    # d = 4, seed 0: two heads' scores differ by 5e-3 in the thin cells; their values there
    # come from the linear fit, the scores from the one wide cell.
    T = random_float(0, 4, 2)
    oracle = va.Oracle(T, "float")
    check(va.learn_transformer(oracle, max_heads=2, seed=0), oracle, T)


def test_float32_boxes_refused_before_any_query() -> None:
    oracle = va.Oracle(T2, FloatArithmetic(1e-4, 2.0**-24, 1e-3))
    with pytest.raises(PrecisionExhausted, match="float32") as info:
        va.learn_transformer(oracle, max_heads=2)
    text = str(info.value)
    assert "parameter_rtol 0.001" in text and oracle.queries == 0
    # the box's own precision, and what it would take
    assert "own precision is unit roundoff 5.96e-08 (-24 bits" in text
    assert "dtype='float64'" in text and "rounded at the box's precision" in text


def _block(post: str) -> Any:
    """T2 as a float black box with ``post`` changed: "relu" is T2; "layernorm" before the
    FFN, a "residual" connection into it, "gelu" for ReLU, a causal-style "mask" that lets
    the last position attend to the last two tokens only."""
    from scipy.special import erf

    Ws = [np.array([[2.0, 0], [0, 1]]), np.array([[0.0, -1], [1, 0]])]
    Vs = [np.eye(2), np.array([[1.0, 1], [-1, 0]])]
    cs = [np.array([1.0, 0]), np.array([0.0, 1])]
    A = np.array([[1.0, -1], [0, 1]])

    def fn(X: np.ndarray) -> float:
        X = np.asarray(X, dtype=np.float64)
        rows = X[-2:] if post == "mask" else X
        h = np.zeros(2)
        for W, V, c in zip(Ws, Vs, cs, strict=True):
            s = rows @ (W @ X[-1] + c)
            w = np.exp(s - s.max())
            h += V.T @ ((w / w.sum()) @ rows)
        if post == "layernorm":
            h = (h - h.mean()) / np.sqrt(h.var() + 0.1)
        if post == "residual":
            h = h + 0.5 * X[-1]
        z = A.T @ h + np.array([1.0, -1])
        act = 0.5 * z * (1 + erf(z / np.sqrt(2))) if post == "gelu" else np.maximum(z, 0)
        return float(np.array([1.0, 2]) @ act - 1)

    return fn


def test_the_in_class_box_is_t2_and_is_learned_so_the_refusals_mean_something() -> None:
    fn = _block("relu")
    X = np.array([[1.0, -1.0], [0.5, 2.0], [0.0, 1.0]])
    assert fn(X) == pytest.approx(float(T2.evaluate_batch(X[None])[0]), rel=1e-14)
    rec = va.learn_transformer(va.Oracle.from_callable(fn, d=2, model_class=CLASS), max_heads=2)
    assert rec.verified and relative_parameter_error(_learned(rec), _scores(T2)) < 1e-8


@pytest.mark.parametrize("kind", ["layernorm", "gelu"])
def test_out_of_class_refused_with_a_witness(kind: str) -> None:
    fn = _block(kind)
    oracle = va.Oracle.from_callable(fn, d=2, model_class=CLASS)
    with pytest.raises(ModelClassMismatch) as info:
        va.learn_transformer(oracle, max_heads=2)
    exc = info.value
    assert exc.query is not None and exc.observed is not None and exc.expected is not None
    assert "not piecewise linear" in str(exc)  # smooth on length 1


def test_a_residual_connection_is_refused_with_a_witness() -> None:
    # On length 1 the box is g(1.5 x), a ReLU network, which the float FFN learner gets
    # right (2 neurons); no two heads then fit the first cell's answers, and before the
    # cell is passed over the swap test shows a first-order odd part: refused, not guessed.
    fn = _block("residual")
    oracle = va.Oracle.from_callable(fn, d=2, model_class=CLASS)
    with pytest.raises(ModelClassMismatch, match="odd part of the swap") as info:
        va.learn_transformer(oracle, max_heads=2)
    exc = info.value
    # golden, counted on the oracle: 21 for the FFN, the first cell's centre and its three
    # learn_multi_head runs, then the 4 swap queries (phase cell1/swap)
    assert oracle.queries == 287 and oracle.queries_by_phase["cell1/swap"] == 4
    # the witness: four real queries with their real answers, re-checked on its own
    assert exc.query.shape == (4, 2, 2) and exc.expected is not None
    assert [fn(X) for X in exc.query] == list(exc.observed)
    assert "ratio 2" in check_swap_witness(fn, exc.query, exc.observed, 2.0**-53)
    # wrong witnesses fail the check: the in-class box's answers are not the box's; the
    # in-class box's own answers there have an odd part in the rounding (O(s^3)); the
    # sequences not one centre's swaps
    relu = _block("relu")
    with pytest.raises(CertificateError, match="the box answers"):
        check_swap_witness(relu, exc.query, exc.observed, 2.0**-53)
    mine = [relu(X) for X in exc.query]
    with pytest.raises(CertificateError, match="not first order"):
        check_swap_witness(relu, exc.query, mine, 2.0**-53)
    swapped = exc.query[[1, 0, 2, 3]]
    with pytest.raises(CertificateError, match="not X"):
        check_swap_witness(fn, swapped, exc.observed[[1, 0, 2, 3]], 2.0**-53)


def test_a_mask_over_the_last_row_is_refused_with_a_witness() -> None:
    # The last position attends to the last two tokens only: the head count's probes with
    # the same tokens in another order differ. The witness is the box's own sequence
    # (c + t Y, lifted from the cell oracle's): reordering its context tokens changes the
    # box's answer, which no sum of softmax heads does (the in-class box's stays).
    fn = _block("mask")
    oracle = va.Oracle.from_callable(fn, d=2, model_class=CLASS)
    with pytest.raises(ModelClassMismatch, match="order of the context tokens") as info:
        va.learn_transformer(oracle, max_heads=2)
    X = np.asarray(info.value.query)
    assert oracle.queries == 142  # golden, counted on the oracle
    reordered = np.concatenate([X[:-1][::-1], X[-1:]])
    assert abs(fn(X) - fn(reordered)) > 1e-3 * max(1.0, abs(fn(X)))
    relu = _block("relu")
    assert abs(relu(X) - relu(reordered)) <= 1e-12 * max(1.0, abs(relu(X)))


def test_the_swap_test_passes_boxes_of_the_class() -> None:
    """At the cells of T2's g, at the scale the learner uses and at 16 times it, the odd
    part of a class model's swap is not first order: no witness."""
    from verified_attn.transformer.multi_head_float_cells import ranked_cells
    from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn

    oracle = va.Oracle(T2, "float")
    net = learn_biased_relu_ffn(oracle, seed=0, lengths=(1,)).network
    for k, cell in enumerate(ranked_cells(net, 0)):
        c = cell.center
        y0 = float(T2.evaluate_batch(c[None, None, :])[0])
        for s in (mhf._start_t(cell, 2) * mhf.SWAP_SCALE * f for f in (1, 16)):
            assert swap_probe(oracle, c, s, at_center=y0, seed=k) is None


def test_a_wrong_unscaling_is_caught_by_the_fresh_sequences(monkeypatch: Any) -> None:
    """c_h = c_inner / t - W_h c: with the W_h c term left out the model is refuted."""
    real = mhf.unscale

    def wrong(rec: Any, cell: Any, t: float) -> Any:
        heads, err, inner = real(rec, cell, t)
        return [(W, c + W @ cell.center, v, e1, e2) for W, c, v, e1, e2 in heads], err, inner

    monkeypatch.setattr(mhf, "unscale", wrong)
    with pytest.raises(ModelClassMismatch, match="fresh sequence"):
        va.learn_transformer(va.Oracle(T2, "float"), max_heads=2)


def test_a_wrong_pattern_matrix_is_caught_by_the_shares_check(monkeypatch: Any) -> None:
    """Shares solved without the constant column's 1s do not sum to g's directions."""
    real = mhf.float_pattern_matrix

    def wrong(cells: Any) -> np.ndarray:
        P = real(cells)
        P[:, 0] = 0.5
        return P

    monkeypatch.setattr(mhf, "float_pattern_matrix", wrong)
    with pytest.raises(ModelClassMismatch, match="shares"):
        va.learn_transformer(va.Oracle(T2, "float"), max_heads=2)


def test_two_heads_matching_one_are_refused() -> None:
    W, c, v = np.eye(2), np.zeros(2), np.ones(2)
    near = (W + 1e-6, c, v, 0.0, 0.0)
    assert len(mhf._match([[(W, c, v, 0.0, 0.0)], [near]])[0]) == 1  # one head, matched
    far = (W + 1.0, c, v, 0.0, 0.0)
    assert len(mhf._match([[(W, c, v, 0.0, 0.0)], [far]])[0]) == 2  # two heads
    # heads 1.5e-4 apart in one cell, then one within MATCH_RTOL = 1e-4 of both
    pair = [(W, c, v, 0.0, 0.0), (W + 1.5e-4, c, v, 0.0, 0.0)]
    with pytest.raises(PrecisionExhausted, match="not told apart"):
        mhf._match([pair, [(W + 0.75e-4, c, v, 0.0, 0.0)]])


def test_a_float32_torch_block_with_two_heads_is_refused_before_any_query() -> None:
    """nn.MultiheadAttention(4, 2) in float32: refused naming its own precision (learning
    it was measured to fail at the FFN stage; docs/transformer.md, "float32 blocks")."""
    torch = pytest.importorskip("torch")
    from verified_attn.adapters.torch_block import block_oracle

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(4, 2, batch_first=True)
    oracle = block_oracle(mha, torch.nn.Linear(4, 8), torch.nn.Linear(8, 1), dtype="float32")
    with pytest.raises(PrecisionExhausted, match=r"own precision is unit roundoff 5\.96e-08"):
        va.learn_transformer(oracle, max_heads=2)
    assert oracle.queries == 0


def test_values_fit_needs_the_right_scores() -> None:
    """On a cell of T2's g the least-squares values of the true heads reproduce the box;
    with one score matrix off by 1e-3 (a wrong variant) the fit misses its answers and is
    refused (None: the caller then runs the full learner on the cell)."""
    from verified_attn.transformer.multi_head_float_cells import FloatCellOracle, ranked_cells
    from verified_attn.transformer.multi_head_float_values import fit_values, probe_radius
    from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn

    oracle = va.Oracle(T2, "float")
    net = learn_biased_relu_ffn(oracle, seed=0, lengths=(1,)).network
    cell = ranked_cells(net, 0)[0]
    offset = float(T2.evaluate_batch(cell.center[None, None, :])[0])
    arith = FloatArithmetic(1e-6, 2.0**-40, 1e-6)

    def fit(scores: Any) -> Any:
        r = probe_radius(cell, scores)
        box = FloatCellOracle(oracle, net, cell, r, offset, "c", cell.margin / 4, phase="values")
        return fit_values(box.evaluate_batch, cell, scores, r, arith, 0)

    right = fit(_scores(T2))
    assert right is not None and right[1] < 1e-9
    assert oracle.queries_by_phase["c/values"] == 8
    (W0, c0), rest = _scores(T2)[0], _scores(T2)[1:]
    assert fit([(W0 + 1e-3, c0), *rest]) is None


def test_a_strict_cell_oracle_asks_no_probe_outside_the_cell() -> None:
    """A probe batch reaching within margin / 4 of a hyperplane raises CellLeft before it
    is asked (nothing counted); a non-strict one is asked and records the probe."""
    from verified_attn.transformer.multi_head_float_cells import (
        CellLeft,
        FloatCellOracle,
        ranked_cells,
    )
    from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn

    oracle = va.Oracle(T2, "float")
    net = learn_biased_relu_ffn(oracle, seed=0, lengths=(1,)).network
    cell = ranked_cells(net, 0)[0]
    inside = np.zeros((1, 2, 2))
    far = np.full((1, 2, 2), 2 * cell.margin)  # t = 1: tokens 2.8 margins from the center
    strict = FloatCellOracle(oracle, net, cell, 1.0, 0.0, "s", cell.margin / 4, strict=True)
    strict.evaluate_batch(inside)
    before = oracle.queries
    with pytest.raises(CellLeft):
        strict.evaluate_batch(far)
    assert oracle.queries == before and strict.left is not None
    loose = FloatCellOracle(oracle, net, cell, 1.0, 0.0, "l", cell.margin / 4)
    loose.evaluate_batch(far)
    assert oracle.queries == before + 1 and loose.left is not None


def test_far_cells_come_next_only_while_wanted() -> None:
    """_cell_order: the bounded cells widest first; a far cell is slipped in only while
    ``far_wanted()`` holds (a cell failed and none gave the scores), each at most once."""
    from verified_attn.transformer.multi_head_float_cells import far_cells, ranked_cells
    from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn

    net = learn_biased_relu_ffn(va.Oracle(T2, "float"), seed=0, lengths=(1,)).network
    near, far = ranked_cells(net, 0), far_cells(net, 0)
    assert far[0].margin > near[0].margin  # the widest far cell is wider
    key = [c.pattern for c in near]
    assert [c.pattern for c in mhf._cell_order(net, 0, lambda: False)] == key
    flags = iter([True, False] + [False] * 100)  # wanted once, after the first near cell
    got = list(mhf._cell_order(net, 0, lambda: next(flags)))
    assert [c.pattern for c in got] == [far[0].pattern, *key]
    assert float(np.linalg.norm(got[0].center)) > 8


def test_the_residual_claim_passes_and_can_fail(monkeypatch: Any) -> None:
    """Claim transformer/heads-float-residual; with a swap check that accepts every odd
    part (a wrong variant), the in-class Transformer's answers would pass it: it fails."""
    from verified_attn.transformer import claims_biased, swap_witness

    (claim,) = [c for c in claims_biased.CLAIMS if c.id == "transformer/heads-float-residual"]
    result = claim.check(0)
    assert result.passed, result.detail
    assert "refused after 287 queries" in result.detail
    real = swap_witness._verdict
    monkeypatch.setattr(swap_witness, "_verdict", lambda a, u: real(a, u) or "accepted")
    assert not claim.check(0).passed
