"""The number of heads of a float box from an upper bound (issue 12): the Loewner rule.

The hard requirement is "never more heads than there are"; the tests below feed the rule
float64 boxes, float32 boxes (numpy and PyTorch), boxes with tiny heads and boxes noisier
than they declare, check that wrong variants of the rule do overcount (so the threshold
is what prevents it), and that a count below the truth ends in a refusal, not a model.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.cli import main
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
    QueryBudgetExceeded,
)
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_learner import learn_multi_head
from verified_attn.multi_head.counterexamples import random_multi_head
from verified_attn.multi_head.head_count_float import (
    ANSWER_ERROR,
    GAP,
    MAX_FLOAT_HEADS,
    NOISE_FACTOR,
    count_heads,
    count_rule,
    head_count_nodes,
    head_count_queries,
    loewner,
    probe_pairs,
    probe_spectra,
)
from verified_attn.oracle_wrappers import float32_multi_head_oracle

REFUSED = (ModelClassMismatch, PrecisionExhausted, NotIdentifiable)


def random_heads(d: int, H: int, seed: int, scale: float = 1.0) -> list[tuple]:
    """W_h ~ N(0, 1/d), v_h ~ N(0, scale^2) (the benchmark's boxes)."""
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1 / np.sqrt(d), (d, d)), scale * rng.normal(0, 1, d)) for _ in range(H)]


def box(heads: list[tuple]) -> MultiHeadAttention:
    return MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in heads])


def float32_oracle(heads: list[tuple], d: int) -> va.Oracle:
    """Every head's scores, softmax and values in float32; declared as a float32 box."""
    return float32_multi_head_oracle(heads)


# ---------------------------------------------------------------------------------------
# The algebra the rule rests on
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("H", [1, 2, 3])
def test_loewner_rank_is_the_number_of_poles(H: int) -> None:
    # Exact rationals: F(t) = c + sum r t lam / (1 + t lam) gives rank H, never more.
    from fractions import Fraction

    import sympy

    rows, cols = head_count_nodes(4)
    lams = [Fraction(1, 3), Fraction(2), Fraction(5, 2)][:H]

    def F(k: int, m: int) -> Fraction:
        t = Fraction(k, m)
        return Fraction(7) + sum(
            ((h + 2) * t * lam / (1 + t * lam) for h, lam in enumerate(lams)), Fraction(0)
        )

    def w(k: int, m: int) -> Fraction:
        t = Fraction(k, m)
        return (t - 1) / (t + 1)

    L = sympy.Matrix([[(F(*a) - F(*b)) / (w(*a) - w(*b)) for b in cols] for a in rows])
    assert L.rank() == H
    Lf, K = loewner(
        rows, np.array([float(F(*a)) for a in rows]), cols, np.array([float(F(*b)) for b in cols])
    )
    assert Lf.shape == K.shape == (6, 6)


def test_nodes_are_distinct_and_short() -> None:
    for H0 in range(1, MAX_FLOAT_HEADS + 1):
        rows, cols = head_count_nodes(H0)
        ratios = [k / m for k, m in rows + cols]
        assert len(rows) == len(cols) == H0 + 2
        assert len(set(ratios)) == len(ratios) and rows[0] == (0, 1)
        assert max(k + m for k, m in rows + cols) <= 24


# ---------------------------------------------------------------------------------------
# Counts
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d", "H0", "seed", "queries"), [(3, 4, 0, 56), (4, 2, 7, 40), (8, 8, 1, 88)]
)
def test_golden_head_count_queries(d: int, H0: int, seed: int, queries: int) -> None:
    # 4 pairs x (2 H0 + 4 Loewner nodes + 2 context-permuted noise queries).
    oracle = va.Oracle(random_multi_head(d, 1, seed), "float")
    found = count_heads(oracle, H0, seed=seed)
    assert found.queries == oracle.queries == queries == head_count_queries(H0)
    assert oracle.queries_by_phase == {"head-count": queries}


def test_learner_counts_add_up() -> None:
    model = random_multi_head(3, 2, 0)
    oracle = va.Oracle(model, "float")
    rec = learn_multi_head(oracle, max_heads=4, seed=0)
    assert rec.H == 2 and rec.verified
    assert rec.queries + rec.verification_queries == oracle.queries
    assert rec.queries_by_phase["head-count"] == head_count_queries(4) == 56
    # The decoding afterwards asks exactly what heads=2 asks on its own.
    plain_oracle = va.Oracle(model, "float")
    plain = learn_multi_head(plain_oracle, heads=2, seed=0)
    assert rec.queries == head_count_queries(4) + plain.queries
    assert rec.verification_queries == plain.verification_queries
    assert rec.rounds == plain.rounds + 1 and rec.bound >= rec.queries
    assert any("head count 2" in a for a in rec.assumptions)
    assert "head count (float, at most 4): 2 heads" in rec.summary()
    # Same heads as the decoding told H.
    for a, b in zip(rec.heads, plain.heads, strict=True):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@settings(max_examples=15)
@given(
    d=st.integers(1, 5),
    H=st.integers(1, 4),
    extra=st.integers(0, 3),
    seed=st.integers(0, 10**6),
)
def test_count_equals_truth_on_random_float64_boxes(d: int, H: int, extra: int, seed: int) -> None:
    oracle = va.Oracle(box(random_heads(d, H, seed)), "float")
    found = count_heads(oracle, H + extra, seed=seed)
    assert found.count == H
    assert found.gap >= GAP


@settings(max_examples=15)
@given(
    d=st.integers(2, 6),
    H=st.integers(1, 4),
    extra=st.integers(0, 3),
    seed=st.integers(0, 10**6),
    tiny=st.sampled_from([1e-4, 1e-8, 1e-12, 1e-15]),
)
def test_never_more_heads_than_there_are(
    d: int, H: int, extra: int, seed: int, tiny: float
) -> None:
    # float64 and float32 boxes, the last head scaled down to `tiny`: at most H heads,
    # whatever the precision.
    heads = random_heads(d, H, seed)
    W, v = heads[-1]
    heads[-1] = (W, tiny * v)
    for oracle in (va.Oracle(box(heads), "float"), float32_oracle(heads, d)):
        try:
            found = count_heads(oracle, H + extra, seed=seed)
        except (PrecisionExhausted, NotIdentifiable):
            continue  # a refusal is allowed; a larger count never
        assert found.count <= H


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("E", "H"), [(4, 2), (8, 4)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_modules_never_overcount(E: int, H: int, seed: int, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    from verified_attn.adapters.torch import attention_oracle

    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, num_heads=H, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    oracle = attention_oracle(mha, np.random.default_rng(seed).standard_normal(E), dtype=dtype)
    found = count_heads(oracle, 8, seed=seed)
    assert 1 <= found.count <= H
    if dtype == "float64":
        assert found.count == H  # measured: 4 of 4 boxes per (E, H) here


def test_float32_box_tail_sits_under_the_floor() -> None:
    # The noise model, measured: beyond the true count every singular value is far under
    # its floor (the figure the docs quote: under 1/16 of it).
    d, H = 4, 2
    sp = probe_spectra(float32_oracle(random_heads(d, H, 3), d), 6, seed=3)
    for sv, tau in zip(sp.singular_values, sp.floors(), strict=True):
        assert max(sv[H:]) < tau / 16
    assert sp.noise >= sp.unit_noise > 0


# ---------------------------------------------------------------------------------------
# Wrong variants of the rule overcount (so the floor and the gap are what prevent it)
# ---------------------------------------------------------------------------------------


def _naive(singular_values, floors) -> int:
    """The count without the saturation and gap checks."""
    return max(
        sum(1 for s in sv if s > tau) for sv, tau in zip(singular_values, floors, strict=True)
    )


def test_floor_at_zero_overcounts() -> None:
    sp = probe_spectra(va.Oracle(box(random_heads(3, 1, 0)), "float"), 3)
    assert _naive(sp.singular_values, [0.0] * 4) == 5 > 1
    assert count_rule(sp.singular_values, sp.floors(), max_heads=3)[0] == 1


def test_float64_floor_on_a_float32_box_overcounts() -> None:
    # Ignoring the box's precision (unit roundoff 2^-53, no measured noise): the float32
    # rounding shows up as extra "heads"; the stated floor does not.
    d, H = 4, 2
    sp = probe_spectra(float32_oracle(random_heads(d, H, 1), d), 4, seed=1)
    wrong = sp.floors(noise=2.0**-53 * sp.unit_noise / 2.0**-24)
    assert _naive(sp.singular_values, wrong) > H
    with pytest.raises(PrecisionExhausted, match="above the noise floor"):
        count_rule(sp.singular_values, wrong, max_heads=4)
    assert count_rule(sp.singular_values, sp.floors(), max_heads=4)[0] == H


def test_a_box_noisier_than_it_declares_is_refused_not_overcounted() -> None:
    # Noise that ignores the token order (so the permuted probes do not see it), 1e-9 of
    # the answer, on a box declared float64: the count without saturation and gap checks
    # takes the noise for heads; the rule refuses.
    d, H = 3, 1
    model = box(random_heads(d, H, 2))

    def batch(Xs: np.ndarray) -> np.ndarray:
        clean = model.evaluate_batch(Xs)
        keys = np.round(np.sort(Xs.sum(axis=2), axis=1).sum(axis=1) * 1e6)
        return clean * (1 + 1e-9 * np.sin(keys))

    oracle = va.Oracle.from_callable(lambda X: float(batch(X[None])[0]), d, batch_fn=batch)
    sp = probe_spectra(oracle, 3, seed=0)
    assert _naive(sp.singular_values, sp.floors()) > H
    with pytest.raises(PrecisionExhausted):
        count_rule(sp.singular_values, sp.floors(), max_heads=3)
    with pytest.raises(PrecisionExhausted):
        learn_multi_head(
            va.Oracle.from_callable(lambda X: float(batch(X[None])[0]), d, batch_fn=batch),
            max_heads=3,
        )


def test_gap_requirement() -> None:
    # A count whose singular value is not GAP times the next one is refused.
    with pytest.raises(PrecisionExhausted, match="no gap"):
        count_rule([[1.0, 2e-12, 1e-12, 0.0]], [1.5e-12], max_heads=2)
    assert count_rule([[1.0, 2e-12, 1e-13, 0.0]], [1.5e-12], max_heads=2)[0] == 2


# ---------------------------------------------------------------------------------------
# A count below the truth is refused downstream, never returned as a model
# ---------------------------------------------------------------------------------------


def test_head_invisible_to_the_probes_is_refused_by_the_decoding() -> None:
    # A full-size third head whose v is orthogonal to every probe u: its residue u^T v is 0
    # at every head-count pair, so it is not counted; the decoding with 2 heads must refuse.
    d = 6
    heads = random_heads(d, 2, 5)
    U = np.array([u for u, _ in probe_pairs(d, 0)])
    v = 2 * np.linalg.svd(U)[2][-1]
    assert np.abs(U @ v).max() < 1e-12
    heads.append((np.random.default_rng(9).normal(0, 1 / np.sqrt(d), (d, d)), v))
    oracle = va.Oracle(box(heads), "float")
    assert count_heads(oracle, 4).count == 2
    with pytest.raises(ModelClassMismatch, match="2 heads were counted"):
        learn_multi_head(va.Oracle(box(heads), "float"), max_heads=4)


def test_tiny_extra_head() -> None:
    # Above the floor (1e-9 of the others): counted, never more than 3. Far under it (1e-13,
    # under the declared rtol 1e-6 too): not counted, and the 2-head result agrees with
    # the box to rtol on fresh sequences it never saw.
    d = 3
    heads = random_heads(d, 2, 4)
    W = np.random.default_rng(11).normal(0, 1 / np.sqrt(d), (d, d))
    v = np.random.default_rng(12).normal(0, 1, d)
    seen = va.Oracle(box([*heads, (W, 1e-9 * v)]), "float")
    assert count_heads(seen, 4).count == 3
    hidden = box([*heads, (W, 1e-13 * v)])
    assert count_heads(va.Oracle(hidden, "float"), 4).count == 2
    try:
        rec = learn_multi_head(va.Oracle(hidden, "float"), max_heads=4)
    except REFUSED:
        return
    rng = np.random.default_rng(99)
    for n in range(1, 17):
        X = rng.uniform(-1.5, 1.5, (n, d))
        want = float(hidden.evaluate_batch(X[None])[0])
        got = float(rec.model.evaluate_batch(X[None])[0])
        assert abs(got - want) <= 1e-6 * max(abs(want), 1.0)


# ---------------------------------------------------------------------------------------
# Out of class, bad arguments, budget, CLI
# ---------------------------------------------------------------------------------------


def test_more_heads_than_max_heads_is_refused() -> None:
    oracle = va.Oracle(box(random_heads(3, 3, 0)), "float")
    with pytest.raises(ModelClassMismatch, match="more than max_heads = 2 heads"):
        learn_multi_head(oracle, max_heads=2)


def test_single_head_box_gives_one() -> None:
    rec = learn_multi_head(
        va.Oracle(va.SingleHeadAttention([[1, 0], [0, -1]], [1, 2]), "float"), max_heads=3
    )
    assert rec.H == 1 and rec.verified


def test_constant_box_is_not_identifiable() -> None:
    oracle = va.Oracle.from_callable(lambda X: 2.5, 2)
    with pytest.raises(NotIdentifiable, match="do not depend"):
        count_heads(oracle, 2)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"max_heads": 0}, "max_heads"),
        ({"heads": 1, "max_heads": 2}, "heads"),
        ({"max_heads": MAX_FLOAT_HEADS + 1}, "max_heads"),
        ({"max_heads": 1.5}, "max_heads"),
    ],
)
def test_bad_arguments(kwargs: dict, word: str) -> None:
    oracle = va.Oracle(random_multi_head(2, 1, 0), "float")
    with pytest.raises(InvalidArgument, match=word):
        learn_multi_head(oracle, **kwargs)
    assert oracle.queries == 0


def test_count_heads_refuses_non_float_oracles_and_bad_pairs() -> None:
    with pytest.raises(InvalidArgument, match="float oracle"):
        count_heads(va.Oracle(random_multi_head(2, 1, 0), "exact"), 2)
    with pytest.raises(InvalidArgument, match="pairs"):
        count_heads(va.Oracle(random_multi_head(2, 1, 0), "float"), 2, pairs=0)


def test_budget_checked_before_any_query() -> None:
    oracle = va.Oracle(random_multi_head(2, 1, 0), "float", budget=head_count_queries(2) + 5)
    with pytest.raises(QueryBudgetExceeded):
        learn_multi_head(oracle, max_heads=2)
    assert oracle.queries == 0


def test_noise_factor_is_stated_in_the_assumption() -> None:
    rec = learn_multi_head(va.Oracle(random_multi_head(2, 1, 0), "float"), max_heads=2)
    assert f"within {ANSWER_ERROR:g} x" in rec.assumptions[-1]
    assert 2 * ANSWER_ERROR < NOISE_FACTOR  # room for float64's own rounding of L


def test_cli_find_heads_float(capsys, tmp_path) -> None:
    cert = tmp_path / "c.json"
    code = main(
        [
            "learn",
            "multi-head",
            "--d",
            "4",
            "--heads",
            "2",
            "--find-heads",
            "--arithmetic",
            "float",
            "--certificate",
            str(cert),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "heads found: 2 (upper bound 2; the box has 2)" in out
    assert "head-count 40" in out
    assert main(["verify-certificate", str(cert)]) == 0


def test_a_box_that_depends_on_token_order_is_refused() -> None:
    # A position-weighted box (later tokens count more): the context-permuted probes differ.
    d = 2
    model = box(random_heads(d, 1, 0))

    def batch(Xs: np.ndarray) -> np.ndarray:
        w = np.linspace(1.0, 2.0, Xs.shape[1])[None, :, None]
        return model.evaluate_batch(Xs * w)

    oracle = va.Oracle.from_callable(lambda X: float(batch(X[None])[0]), d, batch_fn=batch)
    with pytest.raises(ModelClassMismatch, match="order of the context tokens") as err:
        count_heads(oracle, 2)
    assert err.value.query is not None


def test_quick_benchmark(tmp_path) -> None:
    # benchmarks/head_count_float.py --quick: the JSON it writes, its golden query counts.
    import importlib.util
    import json
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "head_count_float.py"
    spec = importlib.util.spec_from_file_location("bench_head_count_float", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.main(["--quick", "--out", str(tmp_path), "--no-plots"])
    data = json.loads((tmp_path / "head_count_float.json").read_text())
    assert data["overcounts"] == 0
    assert data["queries"] == {"1": 32, "2": 40, "3": 48}  # 4 (2 H0 + 6), written out
    random64 = [s for s in data["summary"] if (s["kind"], s["dtype"]) == ("random", "float64")]
    assert random64 and all(s["correct"] == s["runs"] for s in random64)
    assert all(s["max_tail_over_floor"] < 1 for s in data["summary"])
    assert data["counts"] == sum(s["runs"] for s in data["summary"])
    assert all(r["counted"]["learned"] and r["counted"]["H"] == r["H"] for r in data["end_to_end"])
