"""Lemma A.1 and the error propagation of Theorem 6.1, derived in SymPy from the model.

>>> from verified_attn.noisy.symbolic import lipschitz_constant
>>> check = lipschitz_constant()
>>> check.holds, check.data["L"]
(True, exp(-1/2) + exp(1/2) + 2)

Everything here starts from :func:`verified_attn.models.attention_output` (the single
definition of the model) and returns :class:`~verified_attn.checks.SymbolicCheck` objects
whose ``data`` carry the derived expressions. The constants the paper hides in O() are
explicit: see :func:`error_bounds` and :func:`tolerance_for`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import flint
import mpmath
import sympy

from verified_attn.checks import SymbolicCheck
from verified_attn.models import attention_output

__all__ = [
    "LIPSCHITZ",
    "a_priori_bounds",
    "error_bounds",
    "error_propagation",
    "lipschitz_constant",
    "probe_identity",
    "sigmoid",
    "tolerance_for",
]

a, b, tau, mu, Wbar, d = sympy.symbols("a b tau mu Wbar d", positive=True)
e_f, e_i, e_j, alpha, z = sympy.symbols("e_f e_i e_j alpha z", real=True)
y = sympy.symbols("y", positive=True)
HALF = sympy.Rational(1, 2)


def sigmoid(x: Any) -> Any:
    """1 / (1 + e^-x), symbolically.

    >>> sigmoid(0)
    1/2
    """
    return 1 / (1 + sympy.exp(-x))


#: The sharp Lipschitz constant of logit on [sigmoid(-1/2), sigmoid(1/2)] (derived below).
LIPSCHITZ = 2 + sympy.exp(HALF) + sympy.exp(-HALF)


def probe_identity() -> SymbolicCheck:
    """For [b e_i + a e_j; a e_j]: f = a v_j + sigmoid(a b W_ij) b v_i, from the model.

    Checked for i != j and i == j on a 2 x 2 model with symbolic W, v.

    >>> probe_identity().holds
    True
    """
    W = sympy.Matrix(2, 2, sympy.symbols("W00 W01 W10 W11", real=True))
    v = sympy.symbols("v0 v1", real=True)
    ok = True
    for i, j in ((0, 1), (1, 0), (0, 0)):
        e = [[sympy.Integer(int(k == t)) for k in range(2)] for t in range(2)]
        top = [b * e[i][k] + a * e[j][k] for k in range(2)]
        bottom = [a * e[j][k] for k in range(2)]
        f = attention_output([top, bottom], W.tolist(), list(v))
        claimed = a * v[j] + sigmoid(a * b * W[i, j]) * b * v[i]
        ok &= sympy.simplify(sympy.expand(f - claimed).rewrite(sympy.exp)) == 0
    return SymbolicCheck(
        "thm-6.1/probe-identity",
        "f([b e_i + a e_j; a e_j]) = a v_j + sigmoid(a b W_ij) b v_i (score gap a b W_ij)",
        bool(ok),
        detail="derived from attention_output with symbolic W (2x2), v, a, b",
    )


@cache
def lipschitz_constant() -> SymbolicCheck:
    """Lemma A.1: logit' = 1/(y(1-y)) is largest at the interval's ends; value and < 5.

    The check derives logit', shows logit'' = (2y - 1)/(y^2 (1-y)^2) (so logit' falls then
    rises: the max over an interval is at an end), evaluates both ends, simplifies to
    2 + e^(1/2) + e^(-1/2), and certifies < 5 in ball arithmetic.
    """
    logit = sympy.log(y / (1 - y))
    d1 = sympy.simplify(sympy.diff(logit, y))
    d2 = sympy.simplify(sympy.diff(d1, y))
    shape_ok = sympy.simplify(d1 - 1 / (y * (1 - y))) == 0
    convex_ok = sympy.simplify(d2 - (2 * y - 1) / (y**2 * (1 - y) ** 2)) == 0
    lo_end, hi_end = sigmoid(-HALF), sigmoid(HALF)
    at_hi = sympy.simplify(d1.subs(y, hi_end))
    at_lo = sympy.simplify(d1.subs(y, lo_end))
    value_ok = sympy.simplify(at_hi - LIPSCHITZ) == 0 and sympy.simplify(at_lo - LIPSCHITZ) == 0
    # Certified comparison with the paper's constant 5, and with logit'(1/2) = 4.
    ball = 2 + flint.arb(0.5).exp() + flint.arb(-0.5).exp()
    below_five = bool(ball < 5)
    above_four = bool(ball > 4)
    holds = bool(shape_ok and convex_ok and value_ok and below_five and above_four)
    return SymbolicCheck(
        "lemma-a.1/lipschitz",
        "logit is Lipschitz on [sigmoid(-1/2), sigmoid(1/2)] with sharp constant "
        "2 + e^(1/2) + e^(-1/2) < 5",
        holds,
        detail=f"L = {sympy.N(LIPSCHITZ, 12)} (ball {ball.str(10)}); the paper's 5 is valid",
        data={"L": LIPSCHITZ, "derivative": d1, "second_derivative": d2, "ball": ball},
    )


@cache
def error_propagation() -> SymbolicCheck:
    """The exact error of alpha_hat, and its worst case over the tolerance box.

    alpha_hat = (f_hat - a v_hat_j) / (b v_hat_i) with f_hat = f + e_f, v_hat = v + e:
    alpha_hat - alpha = (e_f - a e_j - alpha b e_i) / (b v_hat_i)  (exact identity), and
    max over |e_f|, |e_j|, |e_i| <= tau of the numerator is tau (1 + a + alpha b).
    """
    vi, vj = sympy.symbols("v_i v_j", real=True)
    f = a * vj + alpha * b * vi  # the probe identity (checked by probe_identity)
    alpha_hat = (f + e_f - a * (vj + e_j)) / (b * (vi + e_i))
    numerator = e_f - a * e_j - alpha * b * e_i
    identity_ok = sympy.simplify(alpha_hat - alpha - numerator / (b * (vi + e_i))) == 0
    # A linear form's max modulus over a box is at a vertex: check all 8 equal the formula.
    worst = tau * (1 + a + alpha * b)
    vertices = [
        abs(numerator.subs({e_f: sf * tau, e_j: sj * tau, e_i: si * tau}))
        for sf in (-1, 1)
        for sj in (-1, 1)
        for si in (-1, 1)
    ]
    sample = {a: HALF, b: sympy.Rational(1, 3), alpha: sympy.Rational(3, 5), tau: 1}
    vertex_ok = max(vx.subs(sample) for vx in vertices) == worst.subs(sample)
    return SymbolicCheck(
        "thm-6.1/alpha-error",
        "alpha_hat - alpha = (e_f - a e_j - alpha b e_i)/(b v_hat_i); |numerator| <= "
        "tau (1 + a + alpha b), attained at a vertex",
        bool(identity_ok and vertex_ok),
        data={"numerator": numerator, "worst": worst},
    )


@cache
def error_bounds() -> dict[str, sympy.Expr]:
    """The a-priori bounds of Thm 6.1 (paper design), as expressions in tau, mu, Wbar, d.

    Keys: ``alpha`` (per probe), ``W_entry`` (per entry, probe scales a, b), ``W_entry_paper``
    (a = 1/2, b = 1/Wbar), ``W_entry_dyadic`` (a = 1/2, worst power-of-two b >= 1/(2 Wbar)),
    ``W_frobenius`` (d times the paper's entry bound: d^2 entries), ``v_entry``, ``v_norm``.

    >>> sympy.simplify(error_bounds()["W_entry_paper"] - LIPSCHITZ * tau * Wbar * (3 * Wbar + 2 * sigmoid(sympy.Rational(1, 2))) / (mu - tau)) == 0
    True
    """
    s_plus = sigmoid(HALF)
    alpha_err = tau * (1 + a + s_plus * b) / (b * (mu - tau))
    w_entry = LIPSCHITZ * alpha_err / (a * b)
    paper = sympy.simplify(w_entry.subs({a: HALF, b: 1 / Wbar}))
    dyadic = sympy.simplify(w_entry.subs({a: HALF, b: 1 / (2 * Wbar)}))
    return {
        "alpha": alpha_err,
        "W_entry": w_entry,
        "W_entry_paper": paper,
        "W_entry_dyadic": dyadic,
        "W_frobenius": d * paper,
        "v_entry": tau,
        "v_norm": sympy.sqrt(d) * tau,
    }


@cache
def norm_design_bounds() -> dict[str, sympy.Expr]:
    """A-priori bounds of the norm-margin design (ours): needs only ||v||_2 >= mu.

    Probes [b u_k + a e_j; a e_j] with u_k = e_k or e_k + e_p (p = argmax |v_hat|), so
    ||u_k||_1 <= 2, ||u_k||_2 <= sqrt 2, |u_k^T v_hat| >= |v_hat_p| / 4 >= (mu/sqrt d - tau)/4
    and W = (I - s e_p^T) M costs a factor 2. b is a power of two >= 1/(2 sqrt 2 Wbar).
    """
    s_plus = sigmoid(HALF)
    margin = (mu / sympy.sqrt(d) - tau) / 4
    alpha_err = tau * (1 + a + 2 * s_plus * b) / (b * margin)
    entry = 2 * LIPSCHITZ * alpha_err / (a * b)
    dyadic = sympy.simplify(entry.subs({a: HALF, b: 1 / (2 * sympy.sqrt(2) * Wbar)}))
    return {"alpha": alpha_err, "W_entry": entry, "W_entry_dyadic": dyadic}


def a_priori_bounds(
    tolerance: float,
    margin: float,
    w_bound: float,
    dim: int,
    *,
    probe_scale: float,
    design: str = "paper",
) -> dict[str, float]:
    """The derived bounds at numbers, with the learner's probe scale b (a = 1/2).

    ``W_entry`` per entry, ``W_frobenius`` = d * W_entry, ``v_entry`` = tau (floats,
    rounded up by 1e-12 relative).

    >>> round(a_priori_bounds(1e-3, 1, 1, 2, probe_scale=1)["W_entry"], 5)
    0.01808
    """
    fn = _entry_function(design)
    with mpmath.workdps(30):
        entry = float(fn(tolerance, margin, w_bound, dim, HALF, probe_scale)) * (1 + 1e-12)
    return {"W_entry": entry, "W_frobenius": dim * entry, "v_entry": float(tolerance)}


@cache
def _entry_function(design: str) -> Any:
    """The derived per-entry W bound, compiled once (mpmath: 30 digits, then rounded up)."""
    exprs = error_bounds() if design == "paper" else norm_design_bounds()
    return sympy.lambdify((tau, mu, Wbar, d, a, b), exprs["W_entry"], "mpmath")


@cache
def tolerance_for() -> SymbolicCheck:
    """The largest tau with W error (Frobenius) <= eps_W and ||v error|| <= eps_v, solved.

    Shows tau_W(eps) ~ mu eps / (3 L Wbar^2 d) as eps -> 0 for large Wbar (b = 1/Wbar): the paper's
    O(mu eps_W / (Wbar^2 d)) with its constant made explicit.
    """
    eps = sympy.symbols("epsilon", positive=True)
    frob = error_bounds()["W_frobenius"]
    sols = sympy.solve(sympy.Eq(frob, eps), tau)
    tau_w = sympy.simplify(sols[0])
    tau_v = eps / sympy.sqrt(d)
    lead = sympy.limit(tau_w / eps, eps, 0)
    paper_form = mu / (Wbar**2 * d)
    ratio = sympy.limit(sympy.simplify(lead / paper_form), Wbar, sympy.oo)
    ok = (
        sympy.simplify(frob.subs(tau, tau_w) - eps) == 0
        and sympy.simplify(ratio - 1 / (3 * LIPSCHITZ)) == 0
    )
    return SymbolicCheck(
        "thm-6.1/tolerance",
        "tau <= min(mu, eps_v/sqrt d, tau_W(eps_W)) with tau_W ~ mu eps_W/(3 L Wbar^2 d)",
        bool(ok),
        detail=f"tau_W(eps) = {tau_w}; constant 1/(3L) = {sympy.N(1 / (3 * LIPSCHITZ), 6)}",
        data={"tau_W": tau_w, "tau_v": tau_v, "constant": 1 / (3 * LIPSCHITZ)},
    )
