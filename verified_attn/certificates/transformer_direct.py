"""The ``direct`` attention stage of a ``transformer`` certificate: W from one open cell of g.

>>> import verified_attn as va
>>> from verified_attn.certificates.transformer import verify
>>> T = va.OneLayerTransformer([[1, 0], [1, -1]], [[1, 0], [0, 1]], [[1, -1], [0, 2]], [1, 2])
>>> rec = va.learn_transformer(va.Oracle(T, "exact"), method="direct")
>>> print(verify(rec.certificate()).summary[-3][:60])
attention (direct): the design lies in one open cell of g, U

What is re-checked (step 2 of :mod:`verified_attn.certificates.transformer` for
"direct"): the design lies in one open cell of the claimed g (every base token and probe
strictly on the same side of every hyperplane), U and B are invertible, every G^T u_k !=
0, and ``W = U^{-T} M B^{-1}`` is re-decoded from the d^2 answers with
``M[k][j] = logit((y - G^T b_j) / (t G^T u_k)) / t``, compared exactly (``==``;
certified: the claimed rational in its ball and the only one of its denominator there).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import sympy

from verified_attn.arithmetic import OutsideUnitInterval, arb_bounds
from verified_attn.certificates import kernel
from verified_attn.certificates.common_checks import Vec, vector
from verified_attn.certificates.relu_ffn import Network, fq
from verified_attn.errors import CertificateError

__all__ = ["check_direct", "short_text"]


def _dot(a: Vec, b: Vec) -> Fraction:
    return sum((x * y for x, y in zip(a, b, strict=True)), Fraction(0))


def check_direct(
    attention: dict[str, Any], head: kernel.Header, net: Network, W: list[list[Fraction]]
) -> tuple[dict[str, int], int, str]:
    """W re-decoded from the d^2 two-token answers inside one open cell of g."""
    arith, d = head.arith, head.d
    base = [
        vector(b, f"attention.base[{j}]", d)
        for j, b in enumerate(kernel.as_list(kernel.get(attention, "base"), "attention.base", d))
    ]
    U = [
        vector(u, f"attention.directions[{k}]", d)
        for k, u in enumerate(
            kernel.as_list(kernel.get(attention, "directions"), "attention.directions", d)
        )
    ]
    t = kernel.rational(kernel.get(attention, "t"), "attention.t")
    if t <= 0:
        raise CertificateError(f"attention.t must be > 0, got {t}")
    Ut = flint.fmpq_mat(d, d, [fq(U[k][i]) for k in range(d) for i in range(d)])
    Bm = flint.fmpq_mat(d, d, [fq(base[j][i]) for i in range(d) for j in range(d)])
    if Ut.rank() < d or Bm.rank() < d:
        raise CertificateError("attention: the directions u_k and base tokens b_j must be bases")
    probes = [tuple(b[i] + t * u[i] for i in range(d)) for u in U for b in base]
    ref = base[0]
    points = base + probes
    _check_cell(net, points)
    G = list(net.linear)
    for n, gamma in net.neurons:
        if _dot(n, ref) > 0:
            G = [a + gamma * b for a, b in zip(G, n, strict=True)]
    gu = [_dot(tuple(G), u) for u in U]
    if any(x == 0 for x in gu):
        raise CertificateError("attention: some G^T u_k = 0 (that probe carries no information)")
    with arith.context():
        answers = [
            kernel.numbers(row, f"attention.answers[{k}]", arith, d)
            for k, row in enumerate(
                kernel.as_list(kernel.get(attention, "answers"), "attention.answers", d)
            )
        ]
        M = []
        for k in range(d):
            for j in range(d):
                gb = _dot(tuple(G), base[j])
                alpha = (answers[k][j] - arith.rational(gb)) / arith.rational(t * gu[k])
                try:
                    logit = arith.logit(alpha)
                except OutsideUnitInterval as exc:
                    raise CertificateError(
                        f"attention.answers[{k}][{j}]: alpha_1 = {alpha} is not certainly in (0, 1)"
                    ) from exc
                M.append(logit / arith.rational(t))
        left, right = Ut.inv(), Bm.inv()
        if arith.name == "exact":
            Wd = _sym(left) * sympy.Matrix(d, d, M) * _sym(right)
            for i in range(d):
                for j in range(d):
                    want = sympy.Rational(W[i][j].numerator, W[i][j].denominator)
                    got = sympy.sympify(Wd[i, j])
                    # The logits of a Transformer's probes are rational: compare, never simplify.
                    if not got.is_Rational or got != want:
                        raise CertificateError(
                            f"result W[{i}][{j}]: claimed {W[i][j]}, the stored answers give "
                            f"{short_text(got)}"
                        )
            rule = "== the claim"
        else:
            Wa = flint.arb_mat(left) * flint.arb_mat(d, d, M) * flint.arb_mat(right)
            bound = None
            for i in range(d):
                for j in range(d):
                    D = _in_ball(W[i][j], Wa[i, j], f"result W[{i}][{j}]")
                    if D is not None:
                        bound = D if bound is None else min(bound, D)
            rule = "every claimed rational in its ball and the only one there with " + (
                "any denominator" if bound is None else f"denominator <= {bound}"
            )
    line = (
        "attention (direct): the design lies in one open cell of g, U and B invertible, "
        f"every G^T u_k != 0; W re-decoded from the {d * d} answers: {rule}"
    )
    return {"attention-direct": d * d}, d * d, line


def _check_cell(net: Network, points: list[Vec]) -> None:
    """Every point strictly on the side of every hyperplane of g that the first one is."""
    Z = net.pre_activations(points)
    for j, (n, _) in enumerate(net.neurons):
        side = Z[j, 0] > 0
        for p in range(len(points)):
            if Z[j, p] == 0 or (Z[j, p] > 0) != side:
                raise CertificateError(
                    "attention: the design is not inside one open cell of g (a base token or "
                    f"probe is on the other side of, or on, the hyperplane n = {[str(q) for q in n]})"
                )


def _in_ball(q: Fraction, ball: Any, path: str) -> int | None:
    """CertificateError unless q is in the ball and unique there for its denominator."""
    lo, hi = arb_bounds(ball)
    if not lo <= q <= hi:
        raise CertificateError(f"{path}: claimed {q} lies outside the re-decoded ball {ball}")
    D = kernel.largest_unique_denominator(lo, hi)
    if D is None:
        return None
    if q.denominator > D:
        raise CertificateError(
            f"{path}: claimed {q} is not the only rational of its denominator in the ball "
            f"{ball} (unique only up to denominator {D})"
        )
    return D


def _sym(m: flint.fmpq_mat) -> sympy.Matrix:
    return sympy.Matrix(
        m.nrows(), m.ncols(), [sympy.Rational(int(q.p), int(q.q)) for q in m.entries()]
    )


def short_text(x: Any) -> str:
    """``str(x)``, cut to 80 characters for an error message.

    >>> short_text("x" * 100)[-5:]
    'xx...'
    """
    text = str(x)
    return text if len(text) <= 80 else text[:77] + "..."
