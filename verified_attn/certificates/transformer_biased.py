"""Re-check ``transformer-biased`` certificates (a one-layer Transformer whose FFN has
biases) from their stored answers alone.

>>> import verified_attn as va
>>> T = va.OneLayerTransformer([[1, -1], [0, 2]], [[1, 0], [1, 1]], [[1, 0], [1, -1]],
...                            [2, -1], a=[1, -2], b=3)
>>> data = va.learn_transformer(va.Oracle(T, "certified")).certificate()
>>> verify(data).ok
True
>>> data["result"]["parameters"]["W"][0][0] = "2/1"
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result.parameters.W[0][0] = 2 is not the W the answers decode to

What is re-checked, with the core arithmetic and models only (never the learners' code):

1. the FFN stage is a whole ``relu-ffn-biased`` certificate
   (:func:`verified_attn.certificates.relu_biased.verify`), and ``A``, ``w_o``, ``a``, ``b``
   of the result are its network's;
2. the design: every base token b_j and probe b_j + t u_k lies strictly on b_1's side of
   every hyperplane of the FFN (one open cell, where g = G^T x + beta), every G^T u_k != 0,
   and U, B are invertible;
3. W re-decoded from the d^2 answers: ``M[k][j] = logit((y - G^T b_j - beta) /
   (t G^T u_k)) / t``, ``W = U^{-T} M B^{-1}``, equal (==) to the claimed W in exact mode; in
   certified mode each claimed entry lies in its ball with a denominator at most the
   stated bound;
4. the counts (the FFN's, plus exactly d^2 in ``attention-direct``) and the verification
   answers against ``OneLayerTransformer(W, I, A, w_o, a=a, b=b)``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import sympy

from verified_attn.arithmetic import OutsideUnitInterval
from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import matches_exact, passed
from verified_attn.certificates.relu_biased import Neuron, Vec, stated_network
from verified_attn.certificates.relu_biased import verify as verify_ffn
from verified_attn.errors import CertificateError
from verified_attn.models import OneLayerTransformer, as_rational_sequence

__all__ = ["verify"]


def _vectors(raw: Any, path: str, d: int) -> list[Vec]:
    rows = kernel.as_matrix(raw, path, d, d)
    return [
        tuple(kernel.rational(q, f"{path}[{i}][{j}]") for j, q in enumerate(r))
        for i, r in enumerate(rows)
    ]


def _cell(neurons: list[Neuron], constant: Fraction, linear: Vec, points: list[Vec]) -> tuple:
    """(G, beta) of the open cell holding every point; CertificateError otherwise."""
    G, beta = list(linear), constant
    for j, ((n, c), gamma) in enumerate(neurons):
        zs = [sum((a * b for a, b in zip(n, p, strict=True)), c) for p in points]
        if any(z == 0 for z in zs) or len({z > 0 for z in zs}) != 1:
            raise CertificateError(
                f"attention: the design is not inside one open cell of g (hyperplane {j})"
            )
        if zs[0] > 0:
            G = [x + gamma * y for x, y in zip(G, n, strict=True)]
            beta += gamma * c
    return tuple(G), beta


def _fq(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)


def _inverse(rows: list[list[Fraction]], what: str) -> flint.fmpq_mat:
    d = len(rows)
    M = flint.fmpq_mat(d, d, [_fq(q) for r in rows for q in r])
    if M.rank() != d:
        raise CertificateError(f"attention: {what} is singular")
    return M.inv()


def _decode(data: dict[str, Any], head: Any, net: tuple, d: int) -> list[list[Any]]:
    """W from the stored design and answers, in the certificate's arithmetic."""
    arith = head.arith
    att = kernel.get(data, "attention")
    base = _vectors(kernel.get(att, "base"), "attention.base", d)
    U = _vectors(kernel.get(att, "directions"), "attention.directions", d)
    t = kernel.rational(kernel.get(att, "t"), "attention.t")
    if t <= 0:
        raise CertificateError("attention.t must be positive")
    _, constant, linear, neurons = net
    points = base + [tuple(b[i] + t * u[i] for i in range(d)) for b in base for u in U]
    G, beta = _cell(neurons, constant, linear, points)
    gu = [sum((x * y for x, y in zip(G, u, strict=True)), Fraction(0)) for u in U]
    if any(x == 0 for x in gu):
        raise CertificateError("attention: some G^T u_k is 0")
    answers = kernel.as_matrix(kernel.get(att, "answers"), "attention.answers", d, d)
    M = []
    with arith.context():
        for k in range(d):
            for j in range(d):
                y = kernel.number(answers[k][j], f"attention.answers[{k}][{j}]", arith)
                gb = sum((x * z for x, z in zip(G, base[j], strict=True)), beta)
                alpha = (y - arith.rational(gb)) / arith.rational(t * gu[k])
                try:
                    M.append(arith.logit(alpha) / arith.rational(t))
                except OutsideUnitInterval as exc:
                    raise CertificateError(
                        f"attention.answers[{k}][{j}]: alpha_1 = {alpha} is not in (0, 1)"
                    ) from exc
        left = _inverse([list(u) for u in U], "U")  # rows u_k: U^T, inverted
        right = _inverse([[b[i] for b in base] for i in range(d)], "B")
        if arith.name == "exact":
            L = sympy.Matrix(d, d, [sympy.Rational(int(q.p), int(q.q)) for q in left.entries()])
            R = sympy.Matrix(d, d, [sympy.Rational(int(q.p), int(q.q)) for q in right.entries()])
            Wm = L * sympy.Matrix(d, d, M) * R
            return [[sympy.sympify(Wm[i, j]) for j in range(d)] for i in range(d)]
        Wa = flint.arb_mat(left) * flint.arb_mat(d, d, M) * flint.arb_mat(right)
        return [[Wa[i, j] for j in range(d)] for i in range(d)]


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``transformer-biased`` certificate; CertificateError naming what fails."""
    head = kernel.parse_header(data, "transformer-biased")
    d, arith = head.d, head.arith
    if arith.name == "float":
        raise CertificateError("arithmetic must be exact or certified for this certificate")
    if head.theorem != "transformer/biased-direct":
        raise CertificateError(f"theorem is {head.theorem!r}, expected 'transformer/biased-direct'")
    ffn = kernel.get(data, "ffn")
    try:
        ffn_lines = verify_ffn(ffn).summary
    except CertificateError as exc:
        raise CertificateError(f"ffn: {exc}") from exc
    if kernel.get(ffn, "d") != d or kernel.get(ffn, "seed") != head.seed:
        raise CertificateError("ffn: d and seed must be the certificate's")
    net = stated_network(ffn, d)
    g = net[0]
    params = kernel.get(data, "result.parameters")
    W = [
        [kernel.rational(q, f"result.parameters.W[{i}][{j}]") for j, q in enumerate(r)]
        for i, r in enumerate(
            kernel.as_matrix(kernel.get(params, "W"), "result.parameters.W", d, d)
        )
    ]
    for key, want in (("A", g.A), ("w_o", g.w_o), ("a", g.a)):
        got = sympy.Matrix(kernel.as_list(kernel.get(params, key), f"result.parameters.{key}"))
        if [sympy.Rational(str(x)) for x in got] != list(want):
            raise CertificateError(f"result.parameters.{key} is not the FFN's")
    if kernel.rational(kernel.get(params, "b"), "result.parameters.b") != Fraction(str(g.b)):
        raise CertificateError("result.parameters.b is not the FFN's")
    D = kernel.as_int(kernel.get(data, "denominator_bound"), "denominator_bound", low=1)
    decoded = _decode(data, head, net, d)
    for i in range(d):
        for j in range(d):
            w, got = W[i][j], decoded[i][j]
            if not matches_exact(got, w, arith, D):
                raise CertificateError(
                    f"result.parameters.W[{i}][{j}] = {w} is not the W the answers decode to"
                )
    ffn_q = kernel.as_int(kernel.get(ffn, "queries.learning"), "ffn.queries.learning")
    q = kernel.check_counts(
        data,
        learning=ffn_q + d * d,
        phases={"attention-direct": d * d},
        verification_phases=("ffn-verify", "verify"),
    )
    if q["bound"] < q["learning"]:
        raise CertificateError("queries.bound is below the learning count")
    ffn_v = kernel.as_int(kernel.get(ffn, "queries.verification"), "ffn.queries.verification")
    if q["by_phase"].get("ffn-verify", 0) != ffn_v or q["by_phase"].get("ffn", 0) != ffn_q:
        raise CertificateError("queries: the ffn phases are not the FFN stage's counts")
    V = [[Fraction(int(i == j)) for j in range(d)] for i in range(d)]
    model = OneLayerTransformer(W, V, g.A, g.w_o, a=g.a, b=g.b)

    def predict(X: Any) -> Any:
        return model.evaluate_rational(as_rational_sequence(X, d), arith)

    lines = [
        head.describe() + ", method biased-direct",
        *(f"ffn {line}" for line in ffn_lines[1:] if not line.startswith("assumption")),
        f"attention: the design lies in one open cell of g; W re-decoded from {d * d} answers "
        + ("(==)" if arith.name == "exact" else f"(in its balls, denominator <= {D})"),
        f"queries: {q['learning']} learning = {ffn_q} FFN + {d * d} attention",
        kernel.check_verification(
            data, head, predict, expected_queries=q["by_phase"].get("verify", 0)
        ),
    ]
    return passed(head, lines)
