"""Re-check a ``relu-ffn`` certificate from its stored answers alone.

>>> import verified_attn as va
>>> from verified_attn.certificates.relu_ffn import verify_relu_ffn
>>> g = va.ReluFFN([[1, -1], [2, 1]], [3, -1])
>>> data = va.learn_relu_ffn(va.Oracle(g, "exact")).certificate()
>>> verify_relu_ffn(data).ok
True
>>> data["result"]["neurons"][0]["gamma"] = "7/1"
>>> verify_relu_ffn(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result: A and w_o are not the ReluFFN of the stated canonical form

What is re-checked (the ``relu-ffn`` steps of :mod:`~verified_attn.certificates.transformer`):
the counts against :func:`ffn_bound` at the stated canonical width, the canonical form,
every recorded answer reproduced by the learned network, and the verification answers.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint

from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import (
    MAX_WORK,
    Vec,
    exact_header,
    matrix,
    stored_answers,
    vector,
)
from verified_attn.errors import CertificateError
from verified_attn.models import ReluFFN, as_rational_sequence

__all__ = ["MAX_WORK", "Network", "ffn_bound", "fq", "relu_ffn", "verify_relu_ffn"]

#: Bisections per kink the FFN learner allows (its bound's constant).
MAX_DEPTH = 60
#: Largest grid and number of attempts a certificate may state (they size the bound).
MAX_GRID = 1 << 10
MAX_ATTEMPTS = 8


def ffn_bound(d: int, width: int, grid: int, attempts: int) -> int:
    """The FFN learner's query bound: sum over attempts i of 4(g_i + 1) + 2m' +
    (4 MAX_DEPTH + d - min(d, 2))(m' + 2), with g_i = grid 2^i and m' the width.

    >>> ffn_bound(5, 3, 4, 1)
    1241
    """
    per_piece = 4 * MAX_DEPTH + d - min(d, 2)
    return sum(4 * (grid * 2**i + 1) + 2 * width + per_piece * (width + 2) for i in range(attempts))


class Network:
    """The parsed canonical form ``l^T x + sum_j gamma_j ReLU(n_j^T x)`` and its ReluFFN."""

    def __init__(
        self,
        linear: Vec,
        neurons: list[tuple[Vec, Fraction]],
        A: list[list[Fraction]],
        w: list[Fraction],
    ) -> None:
        self.linear, self.neurons, self.A, self.w = linear, neurons, A, w

    @property
    def width(self) -> int:
        return len(self.neurons)

    def values(self, points: list[Vec]) -> list[Fraction]:
        """g at each point, exactly (one exact matrix product: flint, not Python loops)."""
        if not points:
            return []
        out = list((_row(self.linear) * _columns(points)).entries())
        Z = self.pre_activations(points)
        for j, (_, gamma) in enumerate(self.neurons):
            g = fq(gamma)
            for p in range(len(points)):
                if Z[j, p] > 0:
                    out[p] += g * Z[j, p]
        return [Fraction(int(q.p), int(q.q)) for q in out]

    def pre_activations(self, points: list[Vec]) -> flint.fmpq_mat:
        """Z[j, p] = n_j^T x_p."""
        d = len(self.linear)
        N = flint.fmpq_mat(
            max(len(self.neurons), 1),
            d,
            [fq(q) for n, _ in self.neurons for q in n] or [flint.fmpq(0)] * d,
        )
        return N * _columns(points)

    def v_eff(self) -> list[Fraction]:
        """g(x) - g(-x) = (2 l + sum_j gamma_j n_j)^T x."""
        out = [2 * a for a in self.linear]
        for n, gamma in self.neurons:
            out = [o + gamma * b for o, b in zip(out, n, strict=True)]
        return out

    def model(self) -> ReluFFN:
        return ReluFFN(self.A, self.w)


def _size(x: Any, path: str, *, low: int, high: int | None = None, bits: int = 64) -> int:
    """An int in [low, high] of at most ``bits`` bits, refused without printing a huge one."""
    if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > bits:
        raise CertificateError(
            f"{path} must be an int of at most {bits} bits, got {x.bit_length()}"
        )
    return kernel.as_int(x, path, low=low, high=high)


def _row(v: Vec) -> flint.fmpq_mat:
    return flint.fmpq_mat(1, len(v), [fq(q) for q in v])


def _columns(points: list[Vec]) -> flint.fmpq_mat:
    d, n = len(points[0]), len(points)
    return flint.fmpq_mat(d, n, [fq(points[p][i]) for i in range(d) for p in range(n)])


def _network(data: dict[str, Any], d: int) -> Network:
    res = kernel.get(data, "result")
    linear = vector(kernel.get(res, "linear"), "result.linear", d)
    raw = kernel.as_list(kernel.get(res, "neurons"), "result.neurons")
    if len(raw) * d > MAX_WORK:
        raise CertificateError("result.neurons: more neurons than a checker reads")
    neurons: list[tuple[Vec, Fraction]] = []
    for path, item in kernel.as_objects(raw, "result.neurons"):
        n = vector(kernel.get(item, "n"), f"{path}.n", d)
        gamma = kernel.rational(kernel.get(item, "gamma"), f"{path}.gamma")
        first = next((x for x in n if x != 0), None)
        if first != 1:
            raise CertificateError(f"{path}.n: the first nonzero entry must be 1, got {first}")
        if gamma == 0:
            raise CertificateError(f"{path}.gamma is 0 (a canonical neuron has gamma != 0)")
        if neurons and not neurons[-1][0] < n:
            raise CertificateError(f"{path}.n: the n_j must be distinct and sorted")
        neurons.append((n, gamma))
    cols = [list(n) for n, _ in neurons]
    out = [g for _, g in neurons]
    if any(linear):
        cols += [list(linear), [-a for a in linear]]
        out += [Fraction(1), Fraction(-1)]
    if not cols:
        cols, out = [[Fraction(0)] * d], [Fraction(0)]
    m = len(cols)
    A = matrix(kernel.get(res, "A"), "result.A", d, m)
    w = list(vector(kernel.get(res, "w_o"), "result.w_o", m))
    if A != [[cols[k][i] for k in range(m)] for i in range(d)] or w != out:
        raise CertificateError("result: A and w_o are not the ReluFFN of the stated canonical form")
    return Network(linear, neurons, A, w)


def _ffn_counts(data: dict[str, Any], d: int, net: Network, answers: int) -> tuple[str, int]:
    grid = _size(kernel.get(data, "grid"), "grid", low=1, high=MAX_GRID)
    attempts = _size(kernel.get(data, "attempts"), "attempts", low=1, high=MAX_ATTEMPTS)
    bound = ffn_bound(d, net.width, grid, attempts)
    count = kernel.as_int(kernel.get(data, "verification.count"), "verification.count")
    q = kernel.check_counts(
        data,
        learning=answers,
        bound=bound,
        phases={"ffn": answers},
        verification_phases=("ffn-verify",),
    )
    extra = set(q["by_phase"]) - {"ffn", "ffn-verify"}
    if extra:
        raise CertificateError(f"queries.by_phase has unknown phases {sorted(extra)}")
    if q["learning"] > bound:
        raise CertificateError(f"queries.learning {q['learning']} exceeds the bound {bound}")
    asked = q["by_phase"].get("ffn-verify", 0)
    rounds = asked // count if count else 0
    if (count == 0 and asked) or (count and (asked % count or not 1 <= rounds <= attempts)):
        raise CertificateError(
            f"queries.by_phase.ffn-verify is {asked}: not 1..{attempts} rounds of the "
            f"{count} verification sequences"
        )
    line = (
        f"queries: {answers} learning (one stored answer each, distinct points), within the "
        f"bound {bound} at width {net.width} (grid {grid}, {attempts} attempt(s)); "
        f"{q['verification']} verification"
    )
    return line, count


def _ffn_predictor(head: kernel.Header, net: Network) -> Any:
    model = net.model()

    def evaluate(X: Any) -> Any:
        return model.evaluate_rational(as_rational_sequence(X, head.d), head.arith)

    return evaluate


def relu_ffn(data: Any, kind: str = "relu-ffn") -> tuple[kernel.Header, Network, list[str]]:
    head = exact_header(data, kind, "ffn/relu", "FFN")
    d = head.d
    D = _size(kernel.get(data, "denominator_bound"), "denominator_bound", low=1, bits=1 << 16)
    if head.arith.name == "certified" and not any(
        f"denominator <= {D} " in a for a in head.assumptions
    ):
        # The exact result rests on it: a certificate that drops it claims too much.
        raise CertificateError(
            f"assumptions must state the denominator bound {D} the answers were decoded with"
        )
    net = _network(data, d)
    lines = [head.describe()]
    answers = stored_answers(data, head, net.values, net.width, D)
    line, count = _ffn_counts(data, d, net, answers)
    attempts = kernel.get(data, "attempts")
    if count and kernel.get(data, "verification.seed") != head.seed + attempts - 1:
        # The learner verifies attempt i with seed + i: the last one is the result's.
        raise CertificateError(
            f"verification.seed must be seed + attempts - 1 = {head.seed + attempts - 1}"
        )
    lines.append(line)
    lines.append(
        f"result: canonical width {net.width}; every recorded answer reproduced "
        + ("exactly (==)" if head.arith.name == "exact" else f"(in its ball, denominator <= {D})")
    )
    lines.append(
        kernel.check_verification(data, head, _ffn_predictor(head, net), expected_queries=count)
    )
    lines.extend(f"assumption: {a}" for a in head.assumptions)
    return head, net, lines


def verify_relu_ffn(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``relu-ffn`` certificate dict; CertificateError naming what fails."""
    head, _, lines = relu_ffn(data)
    return CertificateCheck(ok=True, kind="relu-ffn", theorem=head.theorem, summary=lines)


def fq(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)
