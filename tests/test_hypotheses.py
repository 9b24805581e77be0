"""Is every assumption needed? The registry, each counterexample, its certificate and claim.

Every counterexample is re-evaluated here *independently* of the package's evaluation
(mpmath at 80 digits, from the exact parameters and the model formulas written out again),
and a perturbed pair must be refused by the checker.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest

import verified_attn as va
from verified_attn.certificates import verify_certificate
from verified_attn.certificates.pairs_models import read_model
from verified_attn.cli import main
from verified_attn.errors import CertificateError, InvalidArgument
from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.hypotheses import HYPOTHESES, hypotheses_markdown
from verified_attn.hypotheses_claims import CLAIM_D, perturb_certificate

ROOT = Path(__file__).resolve().parent.parent

REQUIRED = {
    ("thm-4.1", "v-zero"),
    ("thm-4.1", "one-query-short"),
    ("thm-4.1", "design-orthogonal"),
    ("thm-5.1", "rank-exceeds"),
    ("thm-5.1", "nuclear-below-constant"),
    ("thm-6.1", "margin"),
    ("thm-6.1", "tolerance"),
    ("app-b", "positive-scale"),
    ("transformer", "v-eff-zero"),
    ("transformer", "ffn-bias"),
    ("transformer", "dead-neuron"),
    ("transformer", "always-on-neuron"),
    ("transformer", "killed-head"),
    ("transformer", "colliding-heads"),
    ("prop-7.1", "permutation"),
    ("prop-7.1", "shared-score-split"),
    ("prop-7.1", "dead-head"),
    ("prop-7.1", "cancelling-values"),
}
CASES = [(h.theorem, h.kind) for h in HYPOTHESES]


def _d(kind: str) -> int:
    return CLAIM_D.get(kind, 3)


@pytest.fixture(scope="module")
def built() -> dict[tuple[str, str], va.Counterexample]:
    return {(t, k): va.counterexample(t, kind=k, d=_d(k), seed=0) for t, k in CASES}


# ---------------------------------------------------------------------------------------
# The registry.
# ---------------------------------------------------------------------------------------


def test_every_required_hypothesis_is_registered() -> None:
    got = {(h.theorem, h.kind) for h in va.hypotheses()}
    assert REQUIRED <= got, f"missing: {sorted(REQUIRED - got)}"
    assert len(got) == len(va.hypotheses()), "duplicate (theorem, kind)"


def test_records_and_theorem_filter() -> None:
    for h in va.hypotheses():
        assert h.theorem in ("thm-4.1", "thm-5.1", "thm-6.1", "app-b", "transformer", "prop-7.1")
        assert re.fullmatch(r"[a-z0-9-]+", h.kind) and h.statement and h.fails
    assert [h.kind for h in va.hypotheses("multi-head")] == [
        h.kind for h in va.hypotheses("prop-7.1")
    ]
    assert {h.theorem for h in va.hypotheses("thm-5.1")} == {"thm-5.1"}


def test_every_hypothesis_is_a_claim() -> None:
    ids = {c.id for c in va.claims.all_claims()}
    missing = [h.claim_id for h in va.hypotheses() if h.claim_id not in ids]
    assert not missing


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: va.counterexample("thm-9", kind="v-zero"), "theorem must be one of"),
        (lambda: va.counterexample("thm-4.1", kind="margin"), "kind must be one of"),
        (lambda: va.counterexample("thm-4.1", kind="design-orthogonal", d=1), "d must be >= 2"),
        (lambda: va.counterexample("thm-4.1", kind="v-zero", d=0), "d must be"),
        (lambda: va.counterexample("thm-4.1", kind="v-zero", seed=-1), "seed"),
        (lambda: va.counterexample("prop-7.1", kind="permutation", heads=1), "heads must be >= 2"),
        (lambda: va.counterexample("thm-4.1", kind="one-query-short", left_out="x"), "left_out"),
        (lambda: va.counterexample("thm-5.1", kind="rank-exceeds", d=3, rank=3), "rank"),
        (lambda: va.hypotheses("thm-0"), "theorem must be one of"),
    ],
)
def test_bad_arguments_name_the_argument(call, message) -> None:
    with pytest.raises(InvalidArgument, match=message):
        call()


def test_counterexample_needs_a_consistent_record() -> None:
    cx = va.counterexample("thm-4.1", kind="v-zero", d=2)
    with pytest.raises(InvalidArgument, match="relation"):
        va.Counterexample("t", "k", 2, 0, "", cx.first, cx.second, "close", None, cx.proof)
    with pytest.raises(InvalidArgument, match="tolerance"):
        va.Counterexample("t", "k", 2, 0, "", cx.first, cx.second, "within", None, cx.proof)
    with pytest.raises(InvalidArgument, match="failure"):
        va.Counterexample("t", "k", 2, 0, "", cx.first, None, "equal", None, cx.proof)


# ---------------------------------------------------------------------------------------
# Every counterexample: checks, certifies, and a perturbed one is refused.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("theorem", "kind"), CASES)
def test_counterexample_checks_and_certifies(built, theorem, kind, tmp_path: Path) -> None:
    cx = built[(theorem, kind)]
    assert cx.theorem == theorem and cx.kind == kind and cx.check()
    path = tmp_path / "cx.json"
    cx.certificate(path)
    check = verify_certificate(path)
    assert check.ok and check.kind == "counterexample" and check.theorem == theorem
    assert cx.relation in ("equal", "within", "same-sign")
    if cx.second is None:
        assert cx.failure
    else:
        assert _params(cx.first) != _params(cx.second)
    if cx.sequences is None:
        assert cx.proof is not None


@pytest.mark.parametrize(("theorem", "kind"), CASES)
def test_a_perturbed_pair_is_refused(built, theorem, kind) -> None:
    data = built[(theorem, kind)].certificate()
    with pytest.raises(CertificateError):
        verify_certificate(perturb_certificate(data))


@pytest.mark.parametrize(("theorem", "kind"), [c for c in CASES if c[1] != "tolerance"])
@pytest.mark.parametrize("seed", [1, 2])
def test_other_seeds_check_too(theorem, kind, seed) -> None:
    assert va.counterexample(theorem, kind=kind, d=_d(kind), seed=seed).check()


def test_seeded_and_reproducible() -> None:
    a = va.counterexample("thm-4.1", kind="one-query-short", seed=5).certificate()
    b = va.counterexample("thm-4.1", kind="one-query-short", seed=5).certificate()
    c = va.counterexample("thm-4.1", kind="one-query-short", seed=6).certificate()
    assert a == b and (a["first"], a["second"]) != (c["first"], c["second"])


# ---------------------------------------------------------------------------------------
# Independent re-evaluation at high precision (formulas written out again here).
# ---------------------------------------------------------------------------------------


def _params(model) -> dict:
    if isinstance(model, va.OneLayerTransformer):
        return {"W": model.W, "V": model.V, "A": model.A, "w_o": model.w_o}
    if isinstance(model, va.MultiHeadAttention):
        return {"heads": model.heads}
    if isinstance(model, MultiHeadTransformer):
        return {"heads": model.heads, "A": model.A, "w_o": model.w_o, "a": model.a, "b": model.b}
    return {k: np.asarray(v).tolist() for k, v in model.parameters().items()}


def _mp(x) -> mpmath.mpf:
    q = Fraction(str(x))
    return mpmath.mpf(q.numerator) / q.denominator


def _head_value(W, v, X) -> mpmath.mpf:
    q = X[-1]
    d = len(v)
    s = [sum(x[i] * W[i][j] * q[j] for i in range(d) for j in range(d)) for x in X]
    top = max(s)
    w = [mpmath.exp(si - top) for si in s]
    return sum(wi * sum(x[i] * v[i] for i in range(d)) for wi, x in zip(w, X, strict=True)) / sum(w)


def _pooled(W, c, X) -> list:
    """sum_i alpha_i x_i with alpha = softmax(X (W x_N + c))."""
    d = len(X[0])
    s = [
        sum(x[i] * (sum(W[i][j] * X[-1][j] for j in range(d)) + c[i]) for i in range(d)) for x in X
    ]
    top = max(s)
    w = [mpmath.exp(si - top) for si in s]
    return [sum(wi * x[i] for wi, x in zip(w, X, strict=True)) / sum(w) for i in range(d)]


def _transformer_value(model, X) -> mpmath.mpf:
    """T(X) = w_o^T ReLU(A^T sum_h V_h^T pooled_h + a) + b, from the exact parameters."""

    def rows(M) -> list:
        return [[_mp(x) for x in M.row(i)] for i in range(M.rows)]

    A, e = rows(model.A), model.e
    h = [mpmath.mpf(0)] * e
    for head in model.heads:
        W, V = rows(head[0]), rows(head[1])
        c = [_mp(x) for x in head[2]] if len(head) == 3 else [0] * model.d
        p = _pooled(W, c, X)
        h = [h[t] + sum(V[i][t] * p[i] for i in range(model.d)) for t in range(e)]
    out = _mp(model.b)
    for k in range(model.m):
        z = sum(A[t][k] * h[t] for t in range(e)) + _mp(model.a[k])
        out += _mp(model.w_o[k]) * max(z, 0)
    return out


def _value(model, X) -> mpmath.mpf:
    X = [[_mp(x) for x in row] for row in X]
    if isinstance(model, MultiHeadTransformer):
        return _transformer_value(model, X)
    if isinstance(model, va.SingleHeadAttention):
        W = [[_mp(x) for x in model.W.row(i)] for i in range(model.d)]
        return _head_value(W, [_mp(x) for x in model.v], X)
    if isinstance(model, va.MultiHeadAttention):
        total = mpmath.mpf(0)
        for W, v in model.heads:
            Wm = [[_mp(x) for x in W.row(i)] for i in range(W.rows)]
            total += _head_value(Wm, [_mp(x) for x in v], X)
        return total
    if isinstance(model, va.OneLayerTransformer):
        d = model.d
        W = [[_mp(x) for x in model.W.row(i)] for i in range(d)]
        q = X[-1]
        s = [sum(x[i] * W[i][j] * q[j] for i in range(d) for j in range(d)) for x in X]
        top = max(s)
        w = [mpmath.exp(si - top) for si in s]
        pooled = [sum(wi * x[i] for wi, x in zip(w, X, strict=True)) / sum(w) for i in range(d)]
        VA = model.V * model.A
        out = mpmath.mpf(0)
        for k in range(model.m):
            z = sum(pooled[i] * _mp(VA[i, k]) for i in range(d))
            out += _mp(model.w_o[k]) * max(z, 0)
        return out
    raise AssertionError(type(model))


def _random_sequences(d: int, n: int, seed: int) -> list[list[list[Fraction]]]:
    rng = np.random.default_rng(seed)
    return [
        [[Fraction(int(rng.integers(-8, 9)), 4) for _ in range(d)] for _ in range(int(L))]
        for L in rng.integers(1, 6, n)
    ]


@pytest.mark.parametrize(
    ("theorem", "kind"), [c for c in CASES if c != ("transformer", "ffn-bias")]
)
def test_relation_holds_at_high_precision(built, theorem, kind) -> None:
    cx = built[(theorem, kind)]
    seqs = cx.sequences if cx.sequences is not None else _random_sequences(cx.d, 12, 7)
    with mpmath.workdps(80):
        for X in seqs:
            a, b = _value(cx.first, X), _value(cx.second, X)
            if cx.relation == "equal":
                assert abs(a - b) <= mpmath.mpf(10) ** -70 * (1 + abs(a)), (X, a, b)
            elif cx.relation == "within":
                assert abs(a - b) <= _mp(cx.tolerance), (X, a, b)
            else:
                assert (a > 0 and b > 0) or (a < 0 and b < 0) or (a == 0 == b), (X, a, b)


def test_high_precision_check_can_fail(built) -> None:
    """The re-evaluation above detects a pair that differs (not comparing code with itself)."""
    cx = built[("thm-4.1", "one-query-short")]
    left = cx.proof.data["left_out"]
    k, j = left[1], left[2]
    U = [[Fraction(x) for x in row] for row in cx.proof.data["U"]]
    e = [Fraction(int(t == j)) for t in range(cx.d)]
    X = [[e[t] + U[t][k] for t in range(cx.d)], e]
    with mpmath.workdps(80):
        assert abs(_value(cx.first, X) - _value(cx.second, X)) > mpmath.mpf(10) ** -10


MULTI_HEAD_KINDS = ["dead-neuron", "always-on-neuron", "killed-head", "colliding-heads"]


def _read(raw: dict, d: int) -> MultiHeadTransformer:
    return read_model(raw, "model", d)[2]


@pytest.mark.parametrize("kind", MULTI_HEAD_KINDS)
def test_multi_head_transformer_without_its_reason_is_told_apart(built, kind) -> None:
    """The perturbation removes the reason (extra neuron on, constant not in b, the killed
    head's value seen, the colliding heads' W apart): the checker refuses it, and the
    independent evaluator finds the two models differ (so the agreement of the real pair
    above is not the evaluator agreeing with itself)."""
    data = built[("transformer", kind)].certificate()
    bad = perturb_certificate(data)
    with pytest.raises(CertificateError, match=_RULE[kind]):
        verify_certificate(bad)
    first, second = _read(bad["first"], 3), _read(bad["second"], 3)
    with mpmath.workdps(80):
        gaps = [abs(_value(first, X) - _value(second, X)) for X in _random_sequences(3, 12, 7)]
    assert max(gaps) > mpmath.mpf(10) ** -10


_RULE = {
    "dead-neuron": "never-active-neuron",
    "always-on-neuron": "always-on-neuron",
    "killed-head": "killed-head",
    "colliding-heads": "colliding-heads",
}


def test_multi_head_transformer_json_round_trip() -> None:
    """The reader gives back the model the writer was given: every parameter (score
    biases c, hidden biases a, output bias b included) shows in the exact values."""
    from verified_attn.counterexample import model_dict
    from verified_attn.transformer.multi_head_hypotheses import random_multi_head_transformer

    T = random_multi_head_transformer(2, 3, 4, 1)
    heads = [(W, V, [Fraction(h + 1, 2), Fraction(-1, 3)]) for h, (W, V) in enumerate(T.heads)]
    affine = MultiHeadTransformer(heads, T.A, T.w_o, a=T.a, b=T.b)
    for model in (T, affine):
        raw = json.loads(json.dumps(model_dict(model)))
        back = _read(raw, 2)
        assert raw["class"] == "one-layer-transformer-multi-head"
        assert _params(back) == _params(model)
        for X in _random_sequences(2, 6, 3):
            exact = model.evaluate(X, "exact")
            assert back.evaluate(X, "exact") == exact
            with mpmath.workdps(40):  # the independent evaluator is the same map
                assert abs(_value(model, X) - mpmath.mpf(str(exact.evalf(50)))) < 1e-30
    assert _params(T) != _params(affine)


@pytest.mark.parametrize("kind", MULTI_HEAD_KINDS)
def test_multi_head_transformer_rules_refuse_tampering(built, kind) -> None:
    base = built[("transformer", kind)].certificate()
    for other in set(_RULE.values()) - {_RULE[kind]}:  # another reason: it does not hold
        bad = json.loads(json.dumps(base))
        bad["proof"]["rule"] = other
        with pytest.raises(CertificateError, match=other):
            verify_certificate(bad)
    bad = json.loads(json.dumps(base))
    bad["sequences"] = bad["proof"]["checked"]
    with pytest.raises(CertificateError, match="sequences must be null"):
        verify_certificate(bad)
    bad = json.loads(json.dumps(base))
    bad["second"]["heads"] = bad["second"]["heads"] * 3  # more heads than the reader takes
    with pytest.raises(CertificateError, match="heads"):
        verify_certificate(bad)
    bad = json.loads(json.dumps(base))
    bad["second"]["b"] = _bump_str(bad["second"]["b"])  # the map itself moved
    with pytest.raises(CertificateError):
        verify_certificate(bad)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["heads"][1]["V"][0].append("1/1"), r"heads\[1\]\.V"),  # e differs
        (lambda m: m["heads"][0].update(c=["1/1"]), r"heads\[0\]\.c"),  # c of length 1
        (lambda m: m.update(heads={"W": [["1/1"]]}), r"\.heads"),  # not a list
        (lambda m: m["a"].pop(), r"\.a"),  # a shorter than w_o
        (lambda m: m.update(b="1/0"), r"\.b"),  # not a rational
    ],
)
def test_multi_head_transformer_reader_names_the_bad_entry(built, edit, message) -> None:
    bad = json.loads(json.dumps(built[("transformer", "killed-head")].certificate()))
    edit(bad["first"])
    with pytest.raises(CertificateError, match=message):
        verify_certificate(bad)


def _bump_str(q: str) -> str:
    return str(Fraction(q) + 1)


def test_multi_head_transformer_evaluation_is_bounded(built) -> None:
    """Exact evaluation sums over length^H token choices: a long spot check through four
    heads is refused before any work, not left to run."""
    bad = json.loads(json.dumps(built[("transformer", "colliding-heads")].certificate()))
    bad["first"]["heads"] = bad["first"]["heads"] * 2  # four heads: summed V doubled ...
    bad["second"]["heads"][0]["V"] = [
        [str(2 * Fraction(x)) for x in row] for row in bad["second"]["heads"][0]["V"]
    ]  # ... and so is second's: the structure holds
    bad["proof"]["checked"] = [[["1/1", "0/1", "0/1"]] * 16]
    with pytest.raises(CertificateError, match="too large"):
        verify_certificate(bad)
    bad["proof"]["checked"] = [[["1/1", "0/1", "0/1"]] * 4]
    assert verify_certificate(bad).ok


def test_ffn_bias_witness_independently() -> None:
    cx = va.counterexample("transformer", kind="ffn-bias", d=3)
    x, mx, x2, mx2 = (X[0] for X in cx.sequences)
    g = cx.first.ffn_value
    assert g(x2) - g(mx2) != 2 * (g(x) - g(mx))
    assert "raised" in cx.failure


# ---------------------------------------------------------------------------------------
# What each counterexample states.
# ---------------------------------------------------------------------------------------


def test_one_query_short_is_exact_rational_for_a_length_two_query(built) -> None:
    cx = built[("thm-4.1", "one-query-short")]
    assert cx.exact and cx.relation == "equal" and len(cx.sequences) == 3 * 3 + 3 - 1
    diff = cx.second.W - cx.first.W
    assert cx.second.v == cx.first.v and diff != diff * 0
    assert all(x.is_Rational for x in cx.second.W)


def test_one_query_short_length_one_is_certified_not_exact() -> None:
    cx = va.counterexample("thm-4.1", kind="one-query-short", d=2, left_out="v")
    assert not cx.exact and cx.relation == "within" and cx.tolerance == Fraction(1, 2**200)
    assert cx.first.v != cx.second.v and cx.check()


def test_design_orthogonal_column(built) -> None:
    cx = built[("thm-4.1", "design-orthogonal")]
    k = cx.proof.data["orthogonal"]
    U = [[Fraction(x) for x in row] for row in cx.proof.data["U"]]
    v = [Fraction(str(x)) for x in cx.first.v]
    assert sum(U[i][k] * v[i] for i in range(cx.d)) == 0
    assert len(cx.sequences) == cx.d**2 + cx.d


def test_rank_exceeds_ranks(built) -> None:
    cx = built[("thm-5.1", "rank-exceeds")]
    assert (cx.first.W.rank(), cx.second.W.rank()) == (1, 2)


def test_margin_figures(built) -> None:
    cx = built[("thm-6.1", "margin")]
    from verified_attn.noisy.planning import a_priori_bounds

    bound = a_priori_bounds(0.01, 1, 1, cx.d)["W_entry"]
    gap = max(abs(x) for x in cx.second.W - cx.first.W)
    assert gap > 2 * bound and min(abs(x) for x in cx.first.v) < 1


def test_tolerance_ratio_is_within_one_percent(built) -> None:
    cx = built[("thm-6.1", "tolerance")]
    assert 0.99 <= float(cx.figures["error / bound"]) <= 1


def test_multi_head_alias_keeps_working() -> None:
    cx = va.counterexample("multi-head", kind="dead-head", d=2, heads=2)
    _first, _second, proof = cx
    assert cx.theorem == "prop-7.1" and cx.heads == 2 and proof.holds
    assert verify_certificate(cx.certificate()).theorem == "prop-7.1"


def test_markdown_repr(built) -> None:
    md = built[("app-b", "positive-scale")]._repr_markdown_()
    assert "app-b / positive-scale" in md and "same-sign" in md


# ---------------------------------------------------------------------------------------
# Hostile certificates.
# ---------------------------------------------------------------------------------------


def test_hostile_certificates_are_refused(built) -> None:
    base = built[("thm-4.1", "design-orthogonal")].certificate()
    bad = json.loads(json.dumps(base))
    bad["proof"]["rule"] = "trust-me"
    with pytest.raises(CertificateError, match="rule"):
        verify_certificate(bad)
    bad = json.loads(json.dumps(base))
    bad["second"] = bad["first"]
    with pytest.raises(CertificateError, match="same parameters"):
        verify_certificate(bad)
    bad = json.loads(json.dumps(base))
    bad["sequences"] = bad["sequences"][1:]
    with pytest.raises(CertificateError, match="design's queries"):
        verify_certificate(bad)
    bad = json.loads(json.dumps(base))
    bad["d"] = 10**9
    with pytest.raises(CertificateError, match="d must be"):
        verify_certificate(bad)
    bad = json.loads(json.dumps(built[("thm-4.1", "v-zero")].certificate()))
    bad["sequences"] = [[["1/1", "0/1", "0/1"]]]
    with pytest.raises(CertificateError, match="sequences must be null"):
        verify_certificate(bad)


# ---------------------------------------------------------------------------------------
# CLI and docs.
# ---------------------------------------------------------------------------------------


def test_cli_hypotheses_lists_every_claim(capsys) -> None:
    assert main(["hypotheses"]) == 0
    out = capsys.readouterr().out
    for h in va.hypotheses():
        assert h.claim_id in out
    assert main(["hypotheses", "--markdown"]) == 0
    assert capsys.readouterr().out == hypotheses_markdown()


def test_cli_counterexample_writes_a_certificate(capsys, tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    argv = ["counterexample", "thm-4.1", "--kind", "design-orthogonal", "--d", "2"]
    assert main([*argv, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "design-orthogonal" in out and "equal (==, exact)" in out
    assert main(["verify-certificate", str(path)]) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["counterexample", "thm-4.1"],
        ["counterexample", "thm-4.1", "--kind", "v-zero", "--heads", "2"],
        ["counterexample", "thm-4.1", "--kind", "margin"],
        ["counterexample", "nope", "--kind", "v-zero"],
    ],
)
def test_cli_counterexample_bad_usage(capsys, argv) -> None:
    assert main(argv) == 2


def test_hypotheses_page_is_what_the_registry_renders() -> None:
    text = (ROOT / "docs" / "hypotheses.md").read_text()
    start, end = "<!-- hypotheses-table:start -->\n", "<!-- hypotheses-table:end -->"
    assert start in text and end in text, "docs/hypotheses.md lost its table markers"
    table = text.split(start, 1)[1].split(end, 1)[0]
    assert table == hypotheses_markdown(), (
        "docs/hypotheses.md is out of date; regenerate it with "
        "`python tests/test_hypotheses.py --write-docs`"
    )


def test_findings_page_names_registered_claims() -> None:
    text = (ROOT / "docs" / "findings.md").read_text()
    ids = {c.id for c in va.claims.all_claims()}
    named = re.findall(r"`([a-z0-9.-]+/[a-z0-9./-]+)`", text)
    assert named, "docs/findings.md names no claim"
    unknown = sorted(set(named) - ids)
    assert not unknown, f"docs/findings.md names unregistered claims: {unknown}"
    assert "THEORY" not in text and "THEORY" not in (ROOT / "docs" / "hypotheses.md").read_text()


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write-docs"]:
        page = ROOT / "docs" / "hypotheses.md"
        text = page.read_text()
        start, end = "<!-- hypotheses-table:start -->\n", "<!-- hypotheses-table:end -->"
        head, rest = text.split(start, 1)
        tail = rest.split(end, 1)[1]
        page.write_text(head + start + hypotheses_markdown() + end + tail)
        print(f"wrote {page}")
