"""Export of the hypothesis pairs that agree exactly on a learner's recorded queries.

``thm-4.1`` one-query-short and design-orthogonal and ``thm-5.1`` rank-exceeds export as
``pair_same_answers`` (``formal/CertQueries.v``): the heads differ and answer each recorded
query alike. A query that separates the heads, a changed v, two identical heads and
``Admitted`` must each fail.
"""

from __future__ import annotations

import copy
import re
from fractions import Fraction
from typing import Any

import pytest
from coq_text import needs_coq

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_check import compile_exported

KINDS = [
    ("thm-4.1", "one-query-short"),
    ("thm-4.1", "design-orthogonal"),
    ("thm-5.1", "rank-exceeds"),
]


def _data(theorem: str, kind: str, d: int = 2, **options: Any) -> dict[str, Any]:
    return va.counterexample(theorem, kind=kind, d=d, seed=1, **options).certificate()


def _separating(data: dict[str, Any]) -> list[list[str]]:
    """A two-token query [b + u; b] the two heads answer differently: u^T W b differs and
    u^T v != 0 (the answer b^T v + sigmoid(u^T W b) u^T v then differs, sigmoid being
    injective)."""
    d = data["d"]
    W1, W2 = ([[Fraction(q) for q in row] for row in data[s]["W"]] for s in ("first", "second"))
    v = [Fraction(q) for q in data["first"]["v"]]
    for n in range(1, 2**d):
        for j in range(d):
            u = [Fraction((n >> i) & 1) for i in range(d)]
            b = [Fraction(int(i == j)) for i in range(d)]
            m1, m2 = (sum(u[a] * W[a][j] for a in range(d)) for W in (W1, W2))
            if m1 != m2 and sum(x * y for x, y in zip(u, v, strict=True)):
                return [[str(x + y) for x, y in zip(b, u, strict=True)], [str(x) for x in b]]
    raise AssertionError("no separating query among the 0/1 vectors")


def test_queries_export_states_the_recorded_queries() -> None:
    data = _data("thm-4.1", "design-orthogonal")
    text = va.export_coq(data)
    assert "Theorem pair_same_answers" in text and "Admitted" not in text
    queries = re.search(r"Definition queries : list qseq := \[(.*?)\]\.", text, re.S)
    assert queries is not None
    assert queries.group(1).count("(one ") == 2 and queries.group(1).count("(two ") == 4
    assert len(data["sequences"]) == 6  # d^2 + d at d = 2


def test_queries_export_refuses_a_certified_pair() -> None:
    data = _data("thm-4.1", "one-query-short", left_out="v")
    assert data["exact"] is False
    with pytest.raises(CertificateError, match="agree exactly"):
        va.export_coq(data)
    bad = _data("thm-5.1", "rank-exceeds")
    bad["sequences"][0] = [["1/1", "0/1"]] * 3
    with pytest.raises(CertificateError, match="1 or 2 tokens"):
        va.export_coq(bad)


@needs_coq
@pytest.mark.parametrize(("theorem", "kind"), KINDS)
def test_each_recorded_queries_pair_is_proved(theorem: str, kind: str) -> None:
    check = compile_exported(va.export_coq(_data(theorem, kind, d=3)))
    assert check.ok, check.log[-2000:]
    assert check.theorem == "pair_same_answers"
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
@pytest.mark.parametrize(("theorem", "kind"), KINDS)
def test_a_separating_query_fails(theorem: str, kind: str) -> None:
    data = _data(theorem, kind)
    data["sequences"].append(_separating(data))
    assert not compile_exported(va.export_coq(data)).ok


@needs_coq
def test_changed_v_identical_heads_and_admitted_fail() -> None:
    data = _data("thm-5.1", "rank-exceeds")
    bad = copy.deepcopy(data)
    bad["second"]["v"][0] = str(Fraction(bad["second"]["v"][0]) + 1)
    assert not compile_exported(va.export_coq(bad)).ok
    same = copy.deepcopy(data)
    same["second"] = copy.deepcopy(same["first"])
    assert not compile_exported(va.export_coq(same)).ok
    text = va.export_coq(data)
    proof = text[text.index("Proof.", text.index("Theorem pair_same_answers")) :]
    check = compile_exported(text.replace(proof[: proof.index("Qed.") + 4], "Admitted."))
    assert not check.ok and "pair_same_answers" in check.log


@needs_coq
def test_another_runs_queries_fail() -> None:
    data = _data("thm-4.1", "design-orthogonal", d=3)
    other = va.counterexample("thm-4.1", kind="design-orthogonal", d=3, seed=2).certificate()
    assert other["sequences"] != data["sequences"]
    data["sequences"] = other["sequences"]  # this pair's blind column is not that design's
    assert not compile_exported(va.export_coq(data)).ok
