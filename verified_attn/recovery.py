"""What every learner returns: parameters, exact query counts, verification, certificate.

>>> import verified_attn as va
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
>>> rec.W, rec.v.T, rec.exact, rec.verified
(Matrix([[2]]), Matrix([[3]]), True, True)
>>> rec.queries, rec.bound, rec.queries_by_phase
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

    >>> split_counts({"v": 3, "W": 9, "ffn-verify": 8, "verify": 8})
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
