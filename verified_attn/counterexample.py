"""The one result type of a counterexample: why a hypothesis of a theorem is needed.

>>> import verified_attn as va
>>> cx = va.counterexample("thm-4.1", kind="v-zero", d=2)
>>> cx.relation, cx.sequences is None, cx.proof.rule, cx.check()
('equal', True, 'zero-value', True)
>>> va.verify_certificate(cx.certificate()).ok
True

A :class:`Counterexample` holds two model objects of the package with different
parameters (``first``, ``second``) and the relation between their answers: ``"equal"``
(decided exactly, ``==`` on SymPy closed forms), ``"within"`` (``|f1 - f2| <= tolerance``,
decided in ball arithmetic: a rigorous inequality, not a float comparison) or
``"same-sign"``. The relation holds either on every sequence (``sequences is None``; then
``proof`` is a structural proof the certificate checker re-runs) or on the recorded
``sequences`` (then ``proof`` names the rule that fixes them, e.g. the learner's design).
Where the counterexample is a learner's failure, ``second`` is None and ``failure`` says
what failed, with the witness in ``proof``.

:meth:`Counterexample.check` and :meth:`Counterexample.certificate` go through the
counterexample checker (:mod:`verified_attn.certificates.counterexample`), which uses the
core models and arithmetic only, never the module that built the pair.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from verified_attn.errors import CertificateError, InvalidArgument
from verified_attn.serialize import dump_rational, write_certificate

__all__ = ["RELATIONS", "Counterexample", "Proof", "model_dict", "multi_head_transformer_dict"]

RELATIONS = ("equal", "within", "same-sign")


@dataclass(frozen=True)
class Proof:
    """A structural proof (or the rule fixing the sequences), re-run by the checker.

    ``rule`` names the argument; ``statement`` says it in words; ``data`` holds what the
    checker needs (exact rationals as "p/q" strings); ``holds`` is what the builder found.
    """

    rule: str
    statement: str
    holds: bool
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Counterexample:
    """Two models (or a model and a learner's failure) showing a hypothesis is needed."""

    theorem: str
    kind: str
    d: int
    seed: int
    statement: str
    first: Any
    second: Any
    relation: str
    sequences: list[list[list[Fraction]]] | None
    proof: Proof | Any
    tolerance: Fraction | None = None
    failure: str | None = None
    exact: bool = True
    figures: dict[str, Any] = field(default_factory=dict)
    #: The data the certificate is made of (built by the room; see :func:`model_dict`).
    payload: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise InvalidArgument(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        if self.relation == "within" and self.tolerance is None:
            raise InvalidArgument("a 'within' relation needs a tolerance")
        if self.second is None and self.failure is None:
            raise InvalidArgument("second may be None only for a learner's failure")

    def certificate(self, path: str | Path | None = None) -> dict[str, Any]:
        """The ``counterexample`` certificate (a dict; also written as JSON to ``path``)."""
        data = self._data()
        if path is not None:
            write_certificate(data, path)
        return data

    def _data(self) -> dict[str, Any]:
        legacy = self.payload.get("pair")
        if legacy is not None:  # Prop 7.1: the multi-head certificate of its own room
            data = legacy.certificate()
            data["theorem"] = self.theorem
            return data
        from verified_attn.certificates.kernel import FORMAT
        from verified_attn.recovery import versions

        out: dict[str, Any] = {
            "format": FORMAT,
            "kind": "counterexample",
            "theorem": self.theorem,
            "counterexample_kind": self.kind,
            "d": self.d,
            "seed": self.seed,
            "statement": self.statement,
            "relation": self.relation,
            "tolerance": None if self.tolerance is None else dump_rational(self.tolerance),
            "exact": self.exact,
            "failure": self.failure,
            "sequences": None
            if self.sequences is None
            else [[[dump_rational(x) for x in row] for row in X] for X in self.sequences],
            "proof": {
                "rule": self.proof.rule,
                "statement": self.proof.statement,
                "holds": self.proof.holds,
                **self.proof.data,
            },
            "versions": versions(),
        }
        out.update(self.payload)
        return out

    def check(self) -> bool:
        """Re-check exactly with the counterexample checker: True, or False if it refuses.

        The reason for a refusal is :meth:`explain`'s.
        """
        try:
            self.explain()
        except CertificateError:
            return False
        return True

    def explain(self) -> list[str]:
        """The checker's summary lines; CertificateError naming what fails."""
        from verified_attn.certificates.counterexample import verify

        return verify(json.loads(json.dumps(self._data()))).summary

    def __iter__(self) -> Any:
        """Unpacks as (first, second, proof), as Prop 7.1's pairs always did."""
        return iter((self.first, self.second, self.proof))

    @property
    def heads(self) -> Any:
        """Prop 7.1 pairs: the number of heads (None elsewhere)."""
        pair = self.payload.get("pair")
        return None if pair is None else pair.heads

    def text(self) -> str:
        """Plain text: the statement, the models, the relation, and the check."""
        lines = [f"{self.theorem} counterexample ({self.kind}), d = {self.d}, seed {self.seed}"]
        lines.append(self.statement)
        for label, model in (("first", self.first), ("second", self.second)):
            if model is not None:
                lines.append(f"{label}: {_describe(model, sep=chr(10) + '  ')}")
        if self.failure is not None:
            lines.append(f"failure: {self.failure}")
        where = (
            "every sequence (structural proof)"
            if self.sequences is None
            else f"the {len(self.sequences)} recorded sequences"
        )
        rel = self.relation + (f" (tolerance {self.tolerance})" if self.tolerance else "")
        lines.append(f"relation: {rel} on {where}")
        lines.append(f"proof: {getattr(self.proof, 'statement', '')}")
        for key, value in self.figures.items():
            lines.append(f"  {key}: {value}")
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        rel = self.relation + (f" (tolerance {self.tolerance})" if self.tolerance else "")
        where = "every sequence" if self.sequences is None else f"{len(self.sequences)} sequences"
        rows = [
            f"**{self.theorem} / {self.kind}** (d = {self.d}, seed {self.seed})",
            "",
            self.statement,
            "",
            "| | |",
            "|---|---|",
            f"| first | `{_describe(self.first)}` |",
            f"| second | `{_describe(self.second)}` |"
            if self.second is not None
            else f"| failure | {self.failure} |",
            f"| relation | {rel} on {where} |",
            f"| proof | {getattr(self.proof, 'statement', '')} |",
        ]
        rows += [f"| {k} | {v} |" for k, v in self.figures.items()]
        return "\n".join(rows)


def _describe(model: Any, sep: str = "; ") -> str:
    """One model's exact parameters for people: ``parameters()`` where the model has it,
    else a ReLU-layer model's heads and FFN (:func:`_describe_layer`), parts joined by
    ``sep``; else its repr."""
    if model is None:
        return "None"
    if (
        hasattr(model, "w_o")
        and hasattr(model, "A")
        and not callable(getattr(model, "parameters", None))
    ):
        return _describe_layer(model, sep)
    params = getattr(model, "parameters", None)
    if callable(params):
        try:
            parts = []
            for name, value in params().items():
                if hasattr(value, "tolist"):
                    value = value.tolist()
                parts.append(f"{name} = {value}")
            return f"{type(model).__name__}({'; '.join(parts)})"
        except Exception:  # a model without exact parameters: its repr
            pass
    return repr(model)


def _show(name: str, M: Any) -> str:
    """``name = M``: a SymPy matrix as nested lists of exact entries, a vector (c, w_o, a)
    as one flat list, a number as itself."""
    if not hasattr(M, "tolist"):
        return f"{name} = {M}"
    return f"{name} = {list(M) if name in ('c', 'w_o', 'a') else M.tolist()}"


def _describe_layer(model: Any, sep: str) -> str:
    """A model with a ReLU FFN after its heads (multi-head or one-head Transformer, or the
    FFN alone): its repr, each head's W_h, V_h (and c_h), then A, w_o (and a, b if biased).

    >>> from verified_attn.ffn_heads import MultiHeadTransformer
    >>> T = MultiHeadTransformer([([[1]], [[2]], [1]), ([[-1]], [[3]])], [[1]], [1], b=2)
    >>> print(_describe_layer(T, "\\n  "))
    MultiHeadTransformer(biased, d=1, H=2, e=1, m=1)
      head 1: W = [[1]], V = [[2]], c = [1]
      head 2: W = [[-1]], V = [[3]], c = [0]
      FFN: A = [[1]], w_o = [1], a = [0], b = 2
    """
    heads = getattr(model, "heads", None)
    if heads is None and hasattr(model, "W"):  # one head: (W, V)
        heads = [(model.W, model.V)]
    parts = [repr(model)]
    for h, head in enumerate(heads or [], 1):
        named = ", ".join(_show(n, M) for n, M in zip(("W", "V", "c"), head, strict=False))
        parts.append(f"head {h}: {named}" if len(heads or []) > 1 else named)
    ffn = ["A", "w_o"] + (["a", "b"] if getattr(model, "biased", False) else [])
    parts.append("FFN: " + ", ".join(_show(n, getattr(model, n)) for n in ffn))
    return sep.join(parts)


def _q_list(xs: Any) -> list[str]:
    return [dump_rational(Fraction(int(x.p), int(x.q))) for x in xs]


def _rows(M: Any) -> list[list[str]]:
    return [_q_list(M.row(i)) for i in range(M.rows)]


def model_dict(model: Any) -> dict[str, Any]:
    """A package model's exact parameters as JSON ("p/q" strings), with its class."""
    from verified_attn.ffn_heads import MultiHeadTransformer
    from verified_attn.models import OneLayerTransformer, SingleHeadAttention

    if isinstance(model, SingleHeadAttention):
        if model.affine:
            raise InvalidArgument("counterexample certificates hold the paper's model (no c, beta)")
        return {"class": "single-head", "W": _rows(model.W), "v": _q_list(model.v)}
    if isinstance(model, OneLayerTransformer):
        return {
            "class": "one-layer-transformer",
            "W": _rows(model.W),
            "V": _rows(model.V),
            "A": _rows(model.A),
            "w_o": _q_list(model.w_o),
        }
    if isinstance(model, MultiHeadTransformer):
        return multi_head_transformer_dict(model)
    raise InvalidArgument(f"no counterexample form for {type(model).__name__}")


def multi_head_transformer_dict(model: Any) -> dict[str, Any]:
    """A :class:`~verified_attn.ffn_heads.MultiHeadTransformer` as JSON: per head W, V and
    c (null without a score bias), then A, w_o, the hidden biases a and the output bias b,
    every entry an exact "p/q" string.

    >>> from verified_attn.ffn_heads import MultiHeadTransformer
    >>> T = MultiHeadTransformer([([[1]], [[1, 0]], [2])], [[1], [3]], [-1], a=[0], b=5)
    >>> multi_head_transformer_dict(T)["heads"], multi_head_transformer_dict(T)["b"]
    ([{'W': [['1/1']], 'V': [['1/1', '0/1']], 'c': ['2/1']}], '5/1')
    """
    heads = [
        {"W": _rows(h[0]), "V": _rows(h[1]), "c": _q_list(h[2]) if model.affine else None}
        for h in model.heads
    ]
    return {
        "class": model.model_class,
        "heads": heads,
        "A": _rows(model.A),
        "w_o": _q_list(model.w_o),
        "a": _q_list(model.a),
        "b": dump_rational(Fraction(int(model.b.p), int(model.b.q))),
    }
