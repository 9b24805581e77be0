"""Re-check ``relu-ffn-biased`` certificates from their stored answers alone.

>>> import verified_attn as va
>>> g = va.ReluFFN([[1, -1], [2, 1]], [3, -1], a=[1, -2], b=4)
>>> data = va.learn_relu_ffn(va.Oracle(g, "exact")).certificate()
>>> check = verify(data)
>>> check.ok, check.kind
(True, 'relu-ffn-biased')
>>> data["result"]["neurons"][0]["c"] = "7/1"
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result: A, w_o, a, b are not the ReluFFN of the stated canonical form

What is re-checked, with the core arithmetic and models only (never the learner's code):

1. header and counts (:mod:`~verified_attn.certificates.kernel`): one stored answer per
   learning query, all at distinct points, within the stated bound (the learner's
   derived count of the lines it searched; the checker cannot re-derive the search, so
   the bound is only held to be at least the learning count);
2. the canonical form: every n_j has first nonzero entry 1, the (n_j, c_j) are distinct
   and sorted, every gamma_j != 0, and ``A``, ``w_o``, ``a``, ``b`` are exactly the
   biased ReluFFN built from it;
3. every recorded answer is reproduced by the learned network: ``==`` in exact mode; in
   certified mode the network's exact value lies in the answer's ball and has a
   denominator within the stated bound;
4. the verification answers agree with the learned ReluFFN under the one rule.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import (
    MAX_WORK,
    Vec,
    exact_header,
    matrix,
    passed,
    stored_answers,
    vector,
)
from verified_attn.errors import CertificateError
from verified_attn.models import ReluFFN, as_rational_sequence

__all__ = ["MAX_WORK", "stated_network", "verify"]

Neuron = tuple[tuple[Vec, Fraction], Fraction]


def _neurons(res: Any, d: int) -> list[Neuron]:
    raw = kernel.as_list(kernel.get(res, "neurons"), "result.neurons")
    if len(raw) * d > MAX_WORK:
        raise CertificateError("result.neurons: more neurons than a checker reads")
    out: list[Neuron] = []
    for path, item in kernel.as_objects(raw, "result.neurons"):
        n = vector(kernel.get(item, "n"), f"{path}.n", d)
        c = kernel.rational(kernel.get(item, "c"), f"{path}.c")
        gamma = kernel.rational(kernel.get(item, "gamma"), f"{path}.gamma")
        if next((x for x in n if x != 0), None) != 1:
            raise CertificateError(f"{path}.n: the first nonzero entry must be 1")
        if gamma == 0:
            raise CertificateError(f"{path}.gamma is 0 (a canonical neuron has gamma != 0)")
        if out and not out[-1][0] < (n, c):
            raise CertificateError(f"{path}: the (n_j, c_j) must be distinct and sorted")
        out.append(((n, c), gamma))
    return out


def stated_network(data: dict[str, Any], d: int) -> tuple[ReluFFN, Fraction, Vec, list[Neuron]]:
    """The stated canonical form (constant, linear, neurons) and the ReluFFN it gives,
    checked against the stored A, w_o, a, b."""
    res = kernel.get(data, "result")
    constant = kernel.rational(kernel.get(res, "constant"), "result.constant")
    linear = vector(kernel.get(res, "linear"), "result.linear", d)
    neurons = _neurons(res, d)
    cols = [list(n) for (n, _), _ in neurons]
    bias = [c for (_, c), _ in neurons]
    out = [g for _, g in neurons]
    if any(linear):
        cols += [list(linear), [-x for x in linear]]
        bias += [Fraction(0), Fraction(0)]
        out += [Fraction(1), Fraction(-1)]
    if not cols:
        cols, bias, out = [[Fraction(0)] * d], [Fraction(0)], [Fraction(0)]
    m = len(cols)
    A = matrix(kernel.get(res, "A"), "result.A", d, m)
    w = list(vector(kernel.get(res, "w_o"), "result.w_o", m))
    a = list(vector(kernel.get(res, "a"), "result.a", m))
    b = kernel.rational(kernel.get(res, "b"), "result.b")
    want_A = [[cols[k][i] for k in range(m)] for i in range(d)]
    if A != want_A or w != out or a != bias or b != constant:
        raise CertificateError(
            "result: A, w_o, a, b are not the ReluFFN of the stated canonical form"
        )
    return ReluFFN(A, w, a=a, b=b), constant, linear, neurons


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``relu-ffn-biased`` certificate dict; CertificateError naming what fails."""
    head = exact_header(data, "relu-ffn-biased", "ffn/relu-biased", "biased FFN")
    D = kernel.as_int(kernel.get(data, "denominator_bound"), "denominator_bound", low=1)
    if head.arith.name == "certified" and not any(
        f"denominator <= {D} " in a for a in head.assumptions
    ):
        raise CertificateError(
            f"assumptions must state the denominator bound {D} the answers were decoded with"
        )
    if not any(a.startswith("every hyperplane of g crosses the search line") for a in
               head.assumptions):
        raise CertificateError(
            "assumptions must state the search line's window (every hyperplane of g crosses "
            "the search line within it): a neuron outside it is not seen"
        )
    model, _, _, neurons = stated_network(data, head.d)
    width = len(neurons)
    answers = stored_answers(data, head, lambda xs: [model.value(x) for x in xs], width, D)
    q = kernel.check_counts(
        data, learning=answers, phases={"ffn": answers}, verification_phases=("ffn-verify",)
    )
    if set(q["by_phase"]) - {"ffn", "ffn-verify"}:
        raise CertificateError(f"queries.by_phase has unknown phases {sorted(q['by_phase'])}")
    if q["bound"] < answers:
        raise CertificateError(f"queries.bound {q['bound']} is below the learning count {answers}")

    def predict(X: Any) -> Any:
        return model.evaluate_rational(as_rational_sequence(X, head.d), head.arith)

    lines = [
        head.describe(),
        f"queries: {answers} learning (one stored answer each, distinct points), stated "
        f"bound {q['bound']}; {q['verification']} verification",
        f"result: canonical width {width}; every recorded answer reproduced "
        + ("exactly (==)" if head.arith.name == "exact" else f"(in its ball, denominator <= {D})"),
        kernel.check_verification(data, head, predict),
    ]
    return passed(head, lines)
