"""TEMPORARY: the pre-contract Recovery and verification helpers, while rooms are ported.

Deleted once every learner returns the new verified_attn.recovery contract.

Old docstring: What every learner returns.

    import verified_attn as va
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
    rec.W, rec.v.T, rec.exact, rec.verified
(Matrix([[2]]), Matrix([[3]]), True, True)
    rec.queries, rec.bound, rec.queries_by_phase
(2, 2, {'v': 1, 'W': 1, 'verify': 8})

A :class:`Recovery` is never returned unverified: learners check it on fresh queries first
and raise :class:`~verified_attn.errors.ModelClassMismatch` on a mismatch.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sympy

__all__ = ["Recovery", "split_counts", "versions"]

import flint

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import ModelClassMismatch
from verified_attn.models import SingleHeadAttention, attention_output
from verified_attn.probing import flat, scalar

BIAS_ULPS = 1024



def versions() -> dict[str, str]:
    """Versions of everything a result depends on, for reports and certificates."""
    import flint
    import mpmath

    from verified_attn import __version__

    return {
        "verified_attn": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sympy": sympy.__version__,
        "mpmath": mpmath.__version__,
        "python-flint": flint.__version__,
    }


def split_counts(by_phase: dict[str, int]) -> tuple[int, int]:
    """(learning, verification) queries: verification phases are those ending in "verify".

        split_counts({"v": 3, "W": 9, "ffn-verify": 8, "verify": 8})
    (12, 16)
    """
    verification = sum(n for k, n in by_phase.items() if k.endswith("verify"))
    return sum(by_phase.values()) - verification, verification


@dataclass
class Recovery:
    """A learned model with its provenance.

    ``parameters`` maps names ("W", "v", and for the affine model "c", "beta") to
    - exact SymPy matrices when :attr:`exact` (exact mode, or certified mode whose balls
      reconstructed to rationals), compared with ``==``;
    - numpy object arrays of flint ``arb`` balls in certified mode otherwise (each ball
      contains the truth);
    - float64 numpy arrays in float mode.
    """

    theorem: str
    parameters: dict[str, Any]
    arithmetic: str
    precision: int | None
    exact: bool
    verified: bool
    queries: int
    verification_queries: int
    queries_by_phase: dict[str, int]
    bound: int
    parameter_count: int
    seed: int
    tokens_sent: int = 0
    max_length: int = 0
    rounds: int = 0
    enclosures: dict[str, Any] | None = None
    verification_error: float | None = None
    notes: list[str] = field(default_factory=list)
    # A dict, or a zero-argument callable that builds it on first use (large runs).
    certificate_data: dict[str, Any] | Callable[[], dict[str, Any]] | None = field(
        default=None, repr=False
    )

    @property
    def W(self) -> Any:
        return self.parameters["W"]

    @property
    def v(self) -> Any:
        return self.parameters["v"]

    @property
    def c(self) -> Any:
        return self.parameters.get("c")

    @property
    def beta(self) -> Any:
        return self.parameters.get("beta")

    def to_numpy(self) -> dict[str, Any]:
        """The parameters as float64 arrays (ball midpoints in certified mode)."""
        return {k: _as_float(val) for k, val in self.parameters.items()}

    def model(self) -> Any:
        """The recovered model as a :class:`~verified_attn.models.SingleHeadAttention`."""
        from verified_attn.models import SingleHeadAttention

        p = self.parameters if self.exact else self.to_numpy()
        return SingleHeadAttention(p["W"], p["v"], c=p.get("c"), beta=p.get("beta"))

    def summary(self) -> str:
        """A few lines for people: counts against the bound, exactness, verification."""
        lines = [
            f"{self.theorem}: {self.queries} learning queries (bound {self.bound}, "
            f"parameters {self.parameter_count}), {self.verification_queries} verification",
            f"  by phase: {self.queries_by_phase}",
            f"  arithmetic: {self.arithmetic}"
            + (f" at {self.precision} bits" if self.precision else "")
            + f"; exact: {self.exact}; verified: {self.verified}",
        ]
        if self.verification_error is not None:
            lines.append(f"  max relative verification discrepancy: {self.verification_error:.3e}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)

    def certificate(self, path: str | Path | None = None) -> dict[str, Any]:
        """The certificate as a dict; also written as JSON to ``path`` if given.

        Check it later with :func:`verified_attn.verify_certificate` or
        ``verified-attn verify-certificate FILE``; it needs no oracle.
        """
        if self.certificate_data is None:
            raise ValueError("this recovery carries no certificate data")
        if callable(self.certificate_data):
            self.certificate_data = self.certificate_data()
        data = dict(self.certificate_data)
        data["versions"] = versions()
        if path is not None:
            Path(path).write_text(json.dumps(data, indent=1))
        return data


def _as_float(val: Any) -> Any:
    if isinstance(val, sympy.MatrixBase):
        arr = np.array([[float(x) for x in row] for row in val.tolist()], dtype=np.float64)
        return arr[:, 0] if arr.shape[1] == 1 else arr
    if isinstance(val, sympy.Basic):
        return float(val)
    arr = np.asarray(val)
    if arr.dtype == object:
        flat = [float(x.mid()) if hasattr(x, "mid") else float(x) for x in arr.ravel()]
        return np.array(flat, dtype=np.float64).reshape(arr.shape) if arr.ndim else flat[0]
    return arr.astype(np.float64) if arr.ndim else float(arr)


def verification_queries(d: int, count: int, seed: int) -> list[np.ndarray]:
    """Fresh random queries of lengths 1..4 with entries in {+-1/2, +-1}.

    The first entry of the last token is +-1/2, so none equals a learning query (whose
    last token is 0 or some e_j).
    """
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = 1 + i % 4
        X = rng.choice(np.array([-1.0, -0.5, 0.5, 1.0]), size=(n, d))
        X[-1, 0] = rng.choice(np.array([-0.5, 0.5]))
        out.append(X)
    return out


def verify_on_fresh_queries(
    oracle: Any,
    arith: Arithmetic,
    candidate: SingleHeadAttention | None,
    params: dict[str, Any],
    exact: bool,
    count: int,
    seed: int,
) -> tuple[list[tuple[np.ndarray, Any]], float | None]:
    queries = verification_queries(oracle.d, count, seed)
    answers = oracle.query_many(queries)
    log = list(zip(queries, answers, strict=True))
    worst = 0.0
    for X, observed in log:
        expected = predict(arith, candidate, params, X)
        ok, gap = answers_agree(arith, params, X, observed, expected)
        if not ok:
            raise ModelClassMismatch(
                f"the oracle is not the recovered single head: on the fresh query "
                f"{X.tolist()} it answered {observed}, the recovered model gives {expected}",
                query=X,
                observed=observed,
                expected=expected,
            )
        worst = max(worst, gap)
    return log, (worst if arith.name == "float" else None)


def answers_agree(
    arith: Arithmetic, params: dict[str, Any], X: Any, observed: Any, expected: Any
) -> tuple[bool, float]:
    """Whether an answer agrees with the recovered model's prediction, and the relative gap.

    Exact: ==; certified: the balls overlap; float: relative to :func:`answer_scale`. The
    learner's verification and the certificate checker both decide with this one function.
    """
    scale = answer_scale(arith, params, X)
    a, b = observed, expected
    if arith.name == "float" and "beta" in params:
        # The output bias is common to both sides; comparing with it removed keeps a large
        # beta from swallowing the head's part of the answer in the relative test.
        # (Float mode only: subtracting a float from a SymPy number would make it a Float.)
        bias = float(params["beta"])
        a, b = observed - bias, expected - bias
    ok = arith.agree(a, b, scale=scale)
    gap = abs(a - b) / max(scale, abs(a), 1e-300) if arith.name == "float" else 0.0
    return ok, gap


def predict(
    arith: Arithmetic, candidate: SingleHeadAttention | None, params: dict[str, Any], X: Any
) -> Any:
    if candidate is not None:
        if arith.name == "float":
            return float(candidate.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])
        from verified_attn.models import as_rational_sequence

        return candidate._evaluate_rational(as_rational_sequence(X, candidate.d), arith)
    # Certified balls that did not reconstruct: evaluate the definition in ball arithmetic.

    rows = [[flint.arb(float(x)) for x in row] for row in np.asarray(X, dtype=np.float64)]
    W = np.asarray(params["W"], dtype=object).tolist()
    v = flat(params["v"])
    c = flat(params["c"]) if "c" in params else None
    beta = scalar(params["beta"]) if "beta" in params else flint.arb(0)
    return attention_output(rows, W, v, c, beta, exp=lambda s: s.exp())


def answer_scale(arith: Arithmetic, params: dict[str, Any], X: Any) -> float:
    """The float comparison scale: a bound on |f(X) - beta| plus room for beta's rounding.

    ``sum |v_i| max |x|`` bounds the head's part of the answer. The bias enters only
    through the rounding it causes (a few ulps of |beta| in a float64 answer): including
    |beta| itself, as an earlier version did, let a two-head oracle with beta = 1e7 pass
    verification at rtol 1e-6.
    """
    if arith.name != "float":
        return 1.0
    v = np.asarray(params["v"], dtype=np.float64)
    beta = abs(float(params.get("beta", 0.0)))
    rtol = getattr(arith, "rtol", 1e-6)
    head = float(np.abs(v).sum() * np.abs(np.asarray(X, dtype=np.float64)).max())
    return head + beta * BIAS_ULPS * np.finfo(np.float64).eps / rtol



