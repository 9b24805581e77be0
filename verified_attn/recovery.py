"""What every learner returns: the learned model, exact counts, verification, certificate.

>>> import verified_attn as va
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
>>> rec.W, rec.v.T, rec.exact, rec.verified
(Matrix([[2]]), Matrix([[3]]), True, True)
>>> rec.queries, rec.bound, rec.verification_queries, rec.queries_by_phase
(2, 2, 8, {'v': 1, 'W': 1, 'verify': 8})
>>> rec.model.evaluate([[1], [2]], "exact") == va.SingleHeadAttention([[2]], [3]).evaluate([[1], [2]], "exact")
True

Every public learner returns a :class:`Recovery` (a subclass per kind adds named
accessors). The contract, for every kind:

- :attr:`Recovery.model` (a property) is the learned model as one of the package's model
  objects, exact where the result is exact, float otherwise; ``rec.model.evaluate(X,
  arithmetic)`` works for every kind;
- :attr:`~Recovery.queries` counts learning queries, :attr:`~Recovery.verification_queries`
  those of the phases the learner *declared* verification on the oracle; together they are
  everything the call asked; ``tokens_sent`` and ``max_length`` are this call's;
- :attr:`~Recovery.bound` is the formula the learner is held to (never the measured count);
- :attr:`~Recovery.verified` is True only if fresh queries were asked and agreed
  (``verify=0`` gives False, and the summary says so); :attr:`~Recovery.verification`
  says on which sequences and under which rule;
- :attr:`~Recovery.enclosures` has one schema: ``{name: {"lower": array, "upper":
  array}}`` per parameter that has certified bounds (extras documented per kind);
- :meth:`~Recovery.certificate` writes JSON that
  :func:`verified_attn.verify_certificate` re-checks without any oracle.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import sympy

from verified_attn.errors import CertificateError
from verified_attn.oracle import QueryCounts
from verified_attn.precision import ErrorFigures, stated_relative_error
from verified_attn.serialize import write_certificate
from verified_attn.verification import Verification

__all__ = [
    "LabelRecovery",
    "LowRankRecovery",
    "MultiHeadRecovery",
    "NoisyRecovery",
    "Recovery",
    "ReluFFNRecovery",
    "SingleHeadRecovery",
    "TransformerRecovery",
    "count_fields",
    "enclosures_from_balls",
    "versions",
]


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



def count_fields(counts: QueryCounts) -> dict[str, Any]:
    """The result fields that come from a run's counts (what :meth:`Recovery.from_run` sets).

    >>> from verified_attn.oracle import QueryCounts
    >>> count_fields(QueryCounts(3, 1, {"v": 3, "verify": 1}, ("verify",), 5, 2))["queries"]
    3
    """
    return {
        "queries": counts.learning,
        "verification_queries": counts.verification,
        "queries_by_phase": dict(counts.by_phase),
        "verification_phases": tuple(counts.verification_phases),
        "tokens_sent": counts.tokens_sent,
        "max_length": counts.max_length,
    }

@dataclass(repr=False)
class Recovery:
    """A learned model with its provenance (see the module docstring for the contract).

    ``parameters`` maps names to exact SymPy matrices when :attr:`exact` (compared with
    ``==``), to numpy object arrays of flint ``arb`` balls in certified mode otherwise (each
    ball contains the truth), and to float64 arrays in float mode; each kind documents its
    keys. ``assumptions`` lists what the result's exactness or enclosures rest on beyond
    the model class (e.g. a denominator bound); ``notes`` are remarks for people.
    """

    kind: ClassVar[str] = "recovery"
    #: The kind's own fields, stored by :meth:`to_dict` at its top level.
    extra_fields: ClassVar[tuple[str, ...]] = ()

    theorem: str
    parameters: dict[str, Any]
    learned_model: Any
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
    verification_phases: tuple[str, ...] = ()
    verification: Verification | None = None
    enclosures: dict[str, Any] | None = None
    assumptions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The bound's terms where it has more than one, e.g. ``{"d^2 + d": 272, "refine round
    #: of a low-precision box, at most d^2": 256}`` (empty: the bound is one formula).
    bound_terms: dict[str, int] = field(default_factory=dict)
    # A dict, or a zero-argument callable that builds it on first use (large runs).
    certificate_data: dict[str, Any] | Callable[[], dict[str, Any]] | None = field(
        default=None, repr=False
    )

    @classmethod
    def from_run(cls, counts: QueryCounts, **fields: Any) -> Any:
        """Build a result with its counts taken from the oracle run (the one bookkeeping).

        ``fields`` are the other dataclass fields; ``verified`` defaults to whether a
        verification with at least one sequence is given.
        """
        verification = fields.get("verification")
        fields.setdefault("verified", verification is not None and verification.count > 0)
        return cls(**count_fields(counts), **fields)

    @classmethod
    def from_record(cls, record: Any, **fields: Any) -> Any:
        """:meth:`from_run` with the facts a certificate's header states of the run taken
        from ``record`` (a :class:`~verified_attn.certificates.writer.RunRecord`): its
        counts, arithmetic and precision, seed, bound, verification and assumptions (the
        same list). ``fields`` are the other fields; one named there (e.g. a bound with a
        refine round the header does not count) is the result's.
        """
        run = {
            "arithmetic": record.arith.name,
            "precision": record.arith.precision,
            "seed": record.seed,
            "bound": record.bound,
            "verification": record.verification,
            "assumptions": record.assumptions,
        }
        return cls.from_run(record.counts, **{**run, **fields})

    @property
    def model(self) -> Any:
        """The learned model as one of the package's model objects."""
        return self.learned_model

    @property
    def verification_error(self) -> float | None:
        """The largest relative gap on the fresh sequences (float mode), else None."""
        return None if self.verification is None else self.verification.max_gap

    @property
    def error_figures(self) -> ErrorFigures:
        """The figures a float result states, each with its bits (:mod:`verified_attn.precision`):
        the verification's largest relative gap, and (where the kind states one) the
        parameter error relative to the largest entry; None outside float mode."""
        gap = self.verification_error if self.arithmetic == "float" else None
        return ErrorFigures(None, gap)

    def to_numpy(self) -> dict[str, Any]:
        """The parameters as float64 values (ball midpoints in certified mode)."""
        return {k: as_float(val) for k, val in self.parameters.items()}

    def summary(self) -> str:
        """A few lines for people: counts against the bound, exactness, verification."""
        lines = [
            f"{self.theorem} ({self.kind}): {self.queries} learning queries (bound "
            f"{self.bound_text()}, parameters {self.parameter_count}), "
            f"{self.verification_queries} verification",
            f"  by phase: {self.queries_by_phase}",
            f"  arithmetic: {self.arithmetic}"
            + (f" at {self.precision} bits" if self.precision else "")
            + f"; exact: {self.exact}; verified: {self.verified}",
        ]
        if self.verification is not None:
            lines.append(f"  verification: {self.verification.describe()}")
            if self.arithmetic == "float":
                lines.append(f"  precision: {self.error_figures.text()}")
        elif not self.verified:
            lines.append("  verification: none (verify=0): the result is NOT verified")
        lines.extend(f"  assumption: {a}" for a in self.assumptions)
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)

    def bound_text(self) -> str:
        """The bound, with its terms where it has several (what summaries print).

        >>> import verified_attn as va
        >>> va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "float")).bound_text()
        '2'
        """
        if not self.bound_terms:
            return str(self.bound)
        terms = " + ".join(f"{n} ({what})" for what, n in self.bound_terms.items())
        return f"{self.bound} = {terms}"

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready data; :meth:`from_dict` reads it back.

        Numbers are "p/q" strings where exact (rationals), floats in float mode, balls
        ``{"mid": "p/q", "rad": "p/q"}`` (exact dyadic rationals); vectors flat lists,
        matrices lists of rows (see :mod:`verified_attn.recovery_io`).

        >>> import verified_attn as va
        >>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
        >>> rec.to_dict()["parameters"]
        {'v': ['3'], 'W': [['2']]}
        """
        from verified_attn.recovery_io import recovery_to_dict

        return recovery_to_dict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Any:
        """The result :meth:`to_dict` gave (its model rebuilt; no certificate data).

        Raises :class:`~verified_attn.errors.InvalidArgument` naming the problem for a dict
        that is not such a result, or one of another kind than ``cls``.

        >>> import verified_attn as va
        >>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
        >>> again = va.Recovery.from_dict(rec.to_dict())
        >>> again.to_dict() == rec.to_dict(), again.model.W == rec.model.W
        (True, True)
        """
        from verified_attn.recovery_io import recovery_from_dict

        return recovery_from_dict(data, cls)

    def to_torch(self) -> Any:
        """The learned head(s) as ``(nn.MultiheadAttention, nn.Linear(E, 1))`` (float64).

        Single- and multi-head results; needs the ``torch`` extra. See
        :func:`verified_attn.adapters.torch_export.to_torch`.
        """
        from verified_attn.adapters.torch_export import to_torch

        return to_torch(self)

    def __repr__(self) -> str:
        """One line: kind, sizes, arithmetic, queries against the bound, verified."""
        from verified_attn.recovery_io import recovery_repr

        return recovery_repr(self)

    def certificate(self, path: str | Path | None = None) -> dict[str, Any]:
        """The certificate as a dict; also written as JSON to ``path`` if given.

        Check it later with :func:`verified_attn.verify_certificate` or
        ``verified-attn verify-certificate FILE``; it needs no oracle.
        """
        if self.certificate_data is None:
            raise CertificateError(f"this {self.kind} result carries no certificate data")
        if callable(self.certificate_data):
            self.certificate_data = self.certificate_data()
        data = dict(self.certificate_data)
        data["versions"] = versions()
        if path is not None:
            write_certificate(data, path)
        return data

    def _repr_markdown_(self) -> str:
        """Jupyter shows the summary."""
        return "```\n" + self.summary() + "\n```"


def _parameter(name: str, *, optional: bool = False) -> Any:
    """A read-only property giving ``self.parameters[name]`` (None when ``optional`` and
    absent): the named parameters every result kind exposes as attributes."""

    def get(self: Recovery) -> Any:
        return self.parameters.get(name) if optional else self.parameters[name]

    return property(get, doc=f"The learned parameter ``{name}``.")


@dataclass(repr=False)
class SingleHeadRecovery(Recovery):
    """Theorem 4.1: one head. Parameters ``W`` (d x d), ``v`` (d x 1); affine: ``c``
    (d x 1) and ``beta``. ``model`` is a :class:`~verified_attn.models.SingleHeadAttention`."""

    kind: ClassVar[str] = "single-head"
    extra_fields: ClassVar[tuple[str, ...]] = ("parameter_error_estimate",)
    #: A float result's first-order parameter error estimate, relative to max(1, |beta|,
    #: largest entry) (:func:`~verified_attn.exact_recovery.float_bound.parameter_error_estimate`);
    #: None otherwise.
    parameter_error_estimate: float | None = None

    W = _parameter("W")
    v = _parameter("v")
    c = _parameter("c", optional=True)
    beta = _parameter("beta", optional=True)

    @property
    def error_figures(self) -> ErrorFigures:
        """As :attr:`Recovery.error_figures`, with the parameter figure of a float result:
        :attr:`parameter_error_estimate` relative to the largest entry of W, v (and c)."""
        figures = super().error_figures
        if self.parameter_error_estimate is None or self.arithmetic != "float":
            return figures
        head = tuple(self.parameters[k] for k in ("W", "v", "c") if k in self.parameters)
        beta = float(self.parameters.get("beta") or 0.0)
        error = stated_relative_error(self.parameter_error_estimate, [head], beta)
        return ErrorFigures(error, figures.prediction_error)


@dataclass(repr=False)
class LowRankRecovery(SingleHeadRecovery):
    """Theorem 5.1: a head with rank(W) <= r. Parameters ``W`` (d x d) and ``v`` (d x 1).

    ``rank`` is the rank of the learned W (found, or at most the given rank; the nuclear
    method reports the given rank, else its numerical rank), ``rank_given`` the rank the
    caller gave (None: found), ``method`` "skeleton" or "nuclear", ``residual`` (nuclear
    only) the relative residual ||A(W) - t|| / ||t|| of the rank-one measurements.
    """

    kind: ClassVar[str] = "low-rank"
    extra_fields: ClassVar[tuple[str, ...]] = ("rank", "rank_given", "method", "residual")
    rank: int = 0
    rank_given: int | None = None
    method: str = "skeleton"
    residual: float | None = None


@dataclass(repr=False)
class NoisyRecovery(SingleHeadRecovery):
    """Theorem 6.1: a head learned from answers within a tolerance; ``enclosures`` hold the
    per-entry intervals ``"W"``, ``"v"`` that contain the truth under the assumptions, and
    the extras ``"W_error"``, ``"v_error"``, ``"W_a_priori"``, ``"probe_scale"``,
    ``"design"`` (see :func:`verified_attn.noisy.learn_noisy`). ``model`` is the float
    head of the estimates (the intervals' midpoints). ``tolerance`` is tau (exact) and
    ``repeats`` how often each query was asked (the answers averaged)."""

    kind: ClassVar[str] = "noisy"
    extra_fields: ClassVar[tuple[str, ...]] = ("tolerance", "repeats")
    tolerance: Any = None
    repeats: int = 1

    @property
    def W_error(self) -> Any:
        return None if self.enclosures is None else self.enclosures.get("W_error")

    @property
    def v_error(self) -> Any:
        return None if self.enclosures is None else self.enclosures.get("v_error")


@dataclass(repr=False)
class LabelRecovery(SingleHeadRecovery):
    """Appendix B: a head learned from labels sign(f); v only up to a positive scale.

    ``v`` is normalised so that |v_p| = 1 (``p``: the first coordinate with v_p != 0) and
    ``model`` is the float head with that normalised v; ``enclosures`` hold ``"W"``, ``"v"``
    (certified intervals, of the normalised v) and the extras ``"v_exact"``, ``"p"`` (see
    :func:`verified_attn.noisy.labels.learn_from_labels`). ``bits``: halvings per unknown.
    """

    kind: ClassVar[str] = "labels"
    extra_fields: ClassVar[tuple[str, ...]] = ("p", "bits")
    p: int = 0
    bits: int = 0


@dataclass(repr=False)
class MultiHeadRecovery(Recovery):
    """Proposition 7.1 and its follow-up: the canonical form of a multi-head model.

    Parameters ``heads`` (a list of (W_h, v_h) or (W_h, v_h, c_h) in canonical order) and,
    affine, ``beta``: exact SymPy matrices when :attr:`exact`, float64 arrays otherwise.
    ``model`` is a :class:`~verified_attn.models.MultiHeadAttention` (there is no ``W``: it
    is not one head). ``method`` says which learner: "canonical" or "orthogonal".
    """

    kind: ClassVar[str] = "multi-head"
    extra_fields: ClassVar[tuple[str, ...]] = (
        "method",
        "parameter_rtol",
        "parameter_error_estimate",
        "parameter_error_estimate_groups",
    )
    #: "canonical" (learn_multi_head) or "orthogonal" (learn_orthogonal_heads).
    method: str = ""
    #: Float canonical results: the relative tolerance stated for the parameters (relative
    #: to max(1, largest parameter); the box's ``parameter_rtol``, which is its rtol unless
    #: it declares a looser one, e.g. a float32 module), apart from the predictions' rtol
    #: in :attr:`verification`; None otherwise.
    parameter_rtol: float | None = None
    #: The first-order parameter error estimate that tolerance covers (float), else None.
    parameter_error_estimate: float | None = None
    #: A refined float result's estimate per parameter group: per head the largest figure
    #: of its W, its value and (affine) its score bias, and beta ({"W": [...], "v": [...],
    #: "c": [...], "beta": ...}); None otherwise.
    parameter_error_estimate_groups: dict[str, Any] | None = None

    heads = _parameter("heads")
    beta = _parameter("beta", optional=True)

    @property
    def H(self) -> int:
        return len(self.parameters["heads"])

    @property
    def error_figures(self) -> ErrorFigures:
        """As :attr:`Recovery.error_figures`, with the parameter figure of a float result:
        :attr:`parameter_error_estimate` relative to the largest entry of the heads."""
        figures = super().error_figures
        if self.parameter_error_estimate is None or self.arithmetic != "float":
            return figures
        beta = float(self.parameters.get("beta") or 0.0)
        error = stated_relative_error(self.parameter_error_estimate, self.parameters["heads"], beta)
        return ErrorFigures(error, figures.prediction_error)


@dataclass(repr=False)
class TransformerRecovery(Recovery):
    """A one-layer Transformer: parameters ``W`` (d x d), ``v_eff`` (= V A w_o, d x 1), and
    the canonical FFN ``A`` (d x m), ``w_o`` (m x 1), exact SymPy matrices. ``model`` is a
    :class:`~verified_attn.models.OneLayerTransformer` ``(W, V = I, A, w_o)``.

    ``method`` is "paper" or "direct"; ``attention_queries`` and ``ffn_queries`` split the
    learning count; ``network`` is the canonical length-1 function g
    (:class:`~verified_attn.transformer.relu.ReluNetwork`); ``bound`` is the attention
    formula (2(d^2 + d) paper, d^2 direct) plus the FFN learner's worst case at the learned
    width (:func:`~verified_attn.transformer.relu.ffn_query_bound`).
    """

    kind: ClassVar[str] = "transformer"
    extra_fields: ClassVar[tuple[str, ...]] = ("method", "attention_queries", "ffn_queries", "attention_bound", "network")
    method: str = ""
    attention_queries: int = 0
    ffn_queries: int = 0
    attention_bound: int = 0
    network: Any = None

    W = _parameter("W")
    v_eff = _parameter("v_eff")
    A = _parameter("A")
    w_o = _parameter("w_o")

    def summary(self) -> str:
        """The common summary, with the attention / FFN split of the learning count."""
        width = self.network.width if self.network is not None else 0
        formula = {"paper": "2(d^2 + d)", "multi-head-cells": "cells x learn_multi_head"}.get(
            self.method, "d^2"
        )
        return (
            super().summary()
            + f"\n  split: {self.attention_queries} attention ({formula} = "
            f"{self.attention_bound}) + {self.ffn_queries} FFN (canonical width {width})"
        )


@dataclass(repr=False)
class ReluFFNRecovery(Recovery):
    """A bias-free ReLU FFN in canonical form: parameters ``A`` (d x m) and ``w_o`` (m x 1),
    exact SymPy matrices. ``model`` is a :class:`~verified_attn.models.ReluFFN`.

    ``network`` is the canonical form (:class:`~verified_attn.transformer.relu.ReluNetwork`)
    with ``width`` distinct hyperplanes; ``attempts`` the random planes used; ``bound`` the
    learner's worst case at the learned width
    (:func:`~verified_attn.transformer.relu.ffn_query_bound`); ``line_counts`` the last
    attempt's pieces, half pieces, probes and kinks, from which
    :func:`~verified_attn.transformer.relu.ffn_query_count` (bias-free) or
    :func:`~verified_attn.transformer.relu_biased.biased_ffn_query_count` (biased) gives its
    learning queries.
    """

    kind: ClassVar[str] = "relu-ffn"
    extra_fields: ClassVar[tuple[str, ...]] = ("network", "attempts")
    network: Any = None
    attempts: int = 1
    line_counts: dict[str, int] = field(default_factory=dict)

    A = _parameter("A")
    w_o = _parameter("w_o")

    @property
    def width(self) -> int:
        return int(self.network.width) if self.network is not None else 0

    def summary(self) -> str:
        """The common summary, with the canonical width and the planes used."""
        return (
            super().summary()
            + f"\n  canonical width {self.width}, {self.attempts} random plane(s)"
        )


def enclosures_from_balls(balls: dict[str, Any]) -> dict[str, Any]:
    """``{name: {"lower", "upper"}}`` (exact Fractions in object arrays) from arb balls.

    >>> import flint, numpy as np
    >>> e = enclosures_from_balls({"v": np.array([flint.arb(1, 0.5)], dtype=object)})
    >>> lo, hi = e["v"]["lower"][0], e["v"]["upper"][0]
    >>> lo <= 0.5 and 1.5 <= hi and hi - lo < 1 + 1e-8      # the radius is rounded up
    True
    """
    from verified_attn.arithmetic import arb_bounds

    out: dict[str, Any] = {}
    for name, val in balls.items():
        arr = np.asarray(val, dtype=object)
        lo = np.empty(arr.shape, dtype=object)
        hi = np.empty(arr.shape, dtype=object)
        for ix in np.ndindex(arr.shape):
            lo[ix], hi[ix] = arb_bounds(arr[ix])
        out[name] = {"lower": lo, "upper": hi}
    return out


def as_float(val: Any) -> Any:
    """A parameter value as float64 (ball midpoints; nested lists of heads kept nested)."""
    if isinstance(val, list | tuple):
        return [as_float(x) for x in val]
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
