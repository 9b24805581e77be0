"""Prop 7.1: pairs of distinct multi-head parameterisations with the same map.

>>> pair = counterexample("multi-head", d=2, heads=2, kind="shared-score-split", seed=1)
>>> first, second, proof = pair
>>> first.heads != second.heads, proof.holds
(True, True)

Four kinds (docs/theory.md, Proposition 7.1): ``permutation`` (reorder the heads), ``shared-score-split`` (two
heads with one W split their summed v differently), ``dead-head`` (a head with v = 0 has
an arbitrary W), ``cancelling-values`` (two equal-W heads with v and -v vanish, whatever W
is). Every pair comes with an :class:`~verified_attn.multi_head.symbolic.EquivalenceProof`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from verified_attn.errors import InvalidArgument
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.symbolic import EquivalenceProof, prove_same_map
from verified_attn.serialize import dump_rational
from verified_attn.validation import check_int, check_seed, require_size

#: The most heads of a random model or counterexample (drawing distinct W is quadratic in
#: the count; the learners' benchmarks use at most 32).
MAX_RANDOM_HEADS = 1024

__all__ = [
    "KINDS",
    "MAX_RANDOM_HEADS",
    "CounterexamplePair",
    "counterexample",
    "counterexample_report",
    "dumps",
    "perturb",
    "random_multi_head",
    "to_json",
]

THEOREM = "prop-7.1"
KINDS = ("permutation", "shared-score-split", "dead-head", "cancelling-values")
_MIN_HEADS = {"permutation": 2, "shared-score-split": 2, "dead-head": 1, "cancelling-values": 2}

Head = tuple[list[list[Fraction]], list[Fraction]]


@dataclass(frozen=True)
class CounterexamplePair:
    """Two models with distinct parameters and one map; unpacks as (first, second, proof)."""

    kind: str
    d: int
    heads: int
    seed: int
    first: MultiHeadAttention
    second: MultiHeadAttention
    proof: EquivalenceProof

    def __iter__(self) -> Any:
        return iter((self.first, self.second, self.proof))

    def _repr_markdown_(self) -> str:
        """Jupyter shows the verdict, then :func:`counterexample_report` (both models
        exactly, and the proof).

        >>> pair = counterexample(d=1, heads=2, kind="permutation", seed=0)
        >>> print(pair._repr_markdown_())  # doctest: +ELLIPSIS
        **Prop 7.1 counterexample (permutation)**: two 2-head models on d = 1 with distinct parameters, the same map (proved).
        <BLANKLINE>
        ```
        Prop 7.1 counterexample (permutation), d = 1, H = 2, seed 0
        ...
        holds: True
        ```
        """
        verdict = "the same map (proved)" if self.proof.holds else "the proof does **not** hold"
        head = (
            f"**Prop 7.1 counterexample ({self.kind})**: two {self.heads}-head models on "
            f"d = {self.d} with distinct parameters, {verdict}."
        )
        return f"{head}\n\n```\n{counterexample_report(self)}\n```"

    def certificate(self, path: str | Path | None = None) -> dict[str, Any]:
        """A ``counterexample`` certificate (a dict; also written as JSON to ``path``).

        It holds both models exactly, the structural proof's data (per distinct W, the
        summed v of each model) and the rational sequences of the exact checks; check it
        with :func:`verified_attn.verify_certificate`, which re-evaluates the pair exactly
        at those sequences and re-runs the structural proof without this module.

        >>> import verified_attn as va
        >>> pair = counterexample(d=2, heads=2, kind="permutation")
        >>> va.verify_certificate(pair.certificate()).ok
        True
        """
        from verified_attn.certificates.kernel import FORMAT
        from verified_attn.recovery import versions

        groups = []
        for W, first_v, second_v in _groups(self.first, self.second):
            groups.append(
                {
                    "W": [[dump_rational(x) for x in row] for row in W],
                    "first_v": [dump_rational(x) for x in first_v],
                    "second_v": [dump_rational(x) for x in second_v],
                }
            )
        data: dict[str, Any] = {
            "format": FORMAT,
            "kind": "counterexample",
            "theorem": THEOREM,
            "model_class": "multi-head",
            "counterexample_kind": self.kind,
            **_pair_fields(self),
            "proof": {
                "statement": self.proof.statement,
                "holds": self.proof.holds,
                "rule": "f(X) = sum_h g(X, W_h)^T v_h with g(X, W) = X^T softmax(X W x_N): "
                "models whose summed v agree for every distinct W are the same map",
                "groups": groups,
            },
            "sequences": [
                [[dump_rational(x) for x in row] for row in X] for X in self.proof.sequences
            ],
            "equal": [ok for _, ok in self.proof.concrete],
            "versions": versions(),
        }
        if path is not None:
            if not isinstance(path, str | Path):
                raise InvalidArgument(f"path must be a str or Path, got {type(path).__name__}")
            try:
                Path(path).write_text(json.dumps(data, indent=1))
            except OSError as exc:
                raise InvalidArgument(
                    f"cannot write the certificate to {str(path)!r}: {exc}"
                ) from exc
        return data


def _groups(
    first: MultiHeadAttention, second: MultiHeadAttention
) -> list[tuple[list[list[Fraction]], list[Fraction], list[Fraction]]]:
    """Per distinct W (sorted), the summed v of each model: the structural proof's data."""
    sums: dict[tuple[Fraction, ...], list[list[Fraction]]] = {}
    d = first.d
    for which, model in enumerate((first, second)):
        for W, v in ((m.W, m.v) for m in model.head_models):
            key = tuple(_fr(x) for x in W)
            acc = sums.setdefault(key, [[Fraction(0)] * d, [Fraction(0)] * d])
            for i, x in enumerate(v):
                acc[which][i] += _fr(x)
    return [
        ([list(key[i * d : (i + 1) * d]) for i in range(d)], a, b)
        for key, (a, b) in sorted(sums.items())
    ]


def _q(rng: np.random.Generator) -> Fraction:
    return Fraction(int(rng.integers(-3, 4)), int(rng.integers(1, 3)))


def _matrix(d: int, rng: np.random.Generator) -> list[list[Fraction]]:
    return [[_q(rng) for _ in range(d)] for _ in range(d)]


def _vector(d: int, rng: np.random.Generator) -> list[Fraction]:
    v = [_q(rng) for _ in range(d)]
    v[int(rng.integers(d))] = Fraction(int(rng.choice([-2, -1, 1, 2])))  # v != 0
    return v


def _distinct_heads(d: int, H: int, rng: np.random.Generator) -> list[Head]:
    """H heads with pairwise distinct W (so the permutation is a real change)."""
    heads: list[Head] = []
    while len(heads) < H:
        W = _matrix(d, rng)
        if all(W != other for other, _ in heads):
            heads.append((W, _vector(d, rng)))
    return heads


def _other_matrix(W: list[list[Fraction]], rng: np.random.Generator) -> list[list[Fraction]]:
    d = len(W)
    while True:
        W2 = _matrix(d, rng)
        if W2 != W:
            return W2


def _pair(kind: str, d: int, H: int, rng: np.random.Generator) -> tuple[list[Head], list[Head]]:
    base = _distinct_heads(d, H, rng)
    if kind == "permutation":
        return base, base[1:] + base[:1]  # cyclic shift: every position changes
    if kind == "shared-score-split":
        W, v1 = base[0]
        v2 = _vector(d, rng)
        shift = _vector(d, rng)
        first = [(W, v1), (W, v2), *base[2:]]
        second = [
            (W, [a + s for a, s in zip(v1, shift, strict=True)]),
            (W, [b - s for b, s in zip(v2, shift, strict=True)]),
            *base[2:],
        ]
        return first, second
    if kind == "dead-head":
        zero = [Fraction(0)] * d
        W = base[0][0]
        return [(W, zero), *base[1:]], [(_other_matrix(W, rng), zero), *base[1:]]
    # cancelling-values: (W, u), (W, -u) vanish for any W and u.
    u1, u2 = _vector(d, rng), _vector(d, rng)
    W1 = base[0][0]
    W2 = _other_matrix(W1, rng)
    first = [(W1, u1), (W1, [-a for a in u1]), *base[2:]]
    second = [(W2, u2), (W2, [-a for a in u2]), *base[2:]]
    return first, second


def counterexample(
    model_class: str = "multi-head",
    *,
    d: int = 3,
    heads: int = 2,
    kind: str = "shared-score-split",
    seed: int = 0,
) -> CounterexamplePair:
    """Two multi-head models with distinct exact parameters and the same map, with proof.

    >>> counterexample("multi-head", d=2, heads=1, kind="permutation")
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: heads must be >= 2 for kind 'permutation', got 1
    """
    if model_class != "multi-head":
        raise InvalidArgument(
            f"model_class must be 'multi-head' (single heads are identifiable, Thm 4.1); "
            f"got {model_class!r}"
        )
    if kind not in KINDS:
        raise InvalidArgument(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    d = check_int(d, "d", low=1)
    H = check_int(heads, "heads", low=1, high=MAX_RANDOM_HEADS)
    require_size(f"a counterexample at d = {d}, {H} heads", numbers=4 * H * (d * d + d))
    if H < _MIN_HEADS[kind]:
        raise InvalidArgument(f"heads must be >= {_MIN_HEADS[kind]} for kind {kind!r}, got {H}")
    seed = check_seed(seed)
    rng = np.random.default_rng(seed)
    first_heads, second_heads = _pair(kind, d, H, rng)
    first = MultiHeadAttention(first_heads)
    second = MultiHeadAttention(second_heads)
    if first.heads == second.heads:  # cannot happen by construction; never hand back a non-pair
        raise AssertionError("counterexample construction produced identical parameters")
    proof = prove_same_map(first, second, seed=seed)
    return CounterexamplePair(kind, d, H, seed, first, second, proof)


def _head_dict(W: Any, v: Any) -> dict[str, Any]:
    return {
        "W": [[dump_rational(_fr(x)) for x in W.row(i)] for i in range(W.rows)],
        "v": [dump_rational(_fr(x)) for x in v],
    }


def _fr(x: Any) -> Fraction:
    return Fraction(int(x.p), int(x.q))


def _pair_fields(pair: CounterexamplePair) -> dict[str, Any]:
    """The size, seed and both models' heads, as both JSON forms of a pair give them."""
    return {
        "d": pair.d,
        "heads": pair.heads,
        "seed": pair.seed,
        "first": [_head_dict(W, v) for W, v in pair.first.heads],
        "second": [_head_dict(W, v) for W, v in pair.second.heads],
    }


def to_json(pair: CounterexamplePair) -> dict[str, Any]:
    """The pair as JSON-ready data: exact rationals as strings, and the proof.

    >>> data = to_json(counterexample(d=1, heads=1, kind="dead-head"))
    >>> data["kind"], data["proof"]["holds"], data["first"][0]["v"]
    ('dead-head', True, ['0/1'])
    """
    p = pair.proof
    return {
        "format": "verified-attn-counterexample/1",
        "model_class": "multi-head",
        "kind": pair.kind,
        **_pair_fields(pair),
        "proof": {
            "statement": p.statement,
            "holds": p.holds,
            "opaque_first": str(p.opaque_first),
            "opaque_second": str(p.opaque_second),
            "difference": str(p.difference),
            "linearity": {"statement": p.linearity.statement, "holds": p.linearity.holds},
            "concrete": [{"length": n, "equal": ok} for n, ok in p.concrete],
            "symbols": p.symbols,
        },
    }


def counterexample_report(pair: CounterexamplePair) -> str:
    """The pair with exact rational entries, then the proof, as plain text.

    >>> print(counterexample_report(counterexample(d=1, heads=1, kind="dead-head")))
    ... # doctest: +ELLIPSIS
    Prop 7.1 counterexample (dead-head), d = 1, H = 1, seed 0
    first model:
      head 1: W = [[...]], v = [0]
    ...
    holds: True
    """
    lines = [
        f"Prop 7.1 counterexample ({pair.kind}), d = {pair.d}, H = {pair.heads}, seed {pair.seed}"
    ]
    for label, model in (("first", pair.first), ("second", pair.second)):
        lines.append(f"{label} model:")
        for h, (W, v) in enumerate(model.heads, 1):
            w_txt = (
                "["
                + ", ".join("[" + ", ".join(map(str, W.row(i))) + "]" for i in range(W.rows))
                + "]"
            )
            lines.append(f"  head {h}: W = {w_txt}, v = [{', '.join(map(str, v))}]")
    lines.append("proof:")
    lines.append(pair.proof.text())
    return "\n".join(lines)


def dumps(pair: CounterexamplePair) -> str:
    """:func:`to_json` as a JSON string (what ``--json F`` writes).

    >>> json.loads(dumps(counterexample(d=1, heads=2, kind="permutation")))["kind"]
    'permutation'
    """
    return json.dumps(to_json(pair), indent=1)


def perturb(
    model: MultiHeadAttention, *, head: int = 0, entry: int = 0, delta: Fraction = Fraction(1)
) -> MultiHeadAttention:
    """``model`` with ``v_head[entry] += delta``: a deliberately wrong partner for tests.

    >>> m = MultiHeadAttention([([[1]], [2])])
    >>> perturb(m).heads[0][1]
    Matrix([[3]])
    """
    if not isinstance(model, MultiHeadAttention):
        raise InvalidArgument(f"model must be a MultiHeadAttention, got {type(model).__name__}")
    if not 0 <= head < model.H:
        raise InvalidArgument(f"head must be in 0..{model.H - 1}, got {head}")
    if not 0 <= entry < model.d:
        raise InvalidArgument(f"entry must be in 0..{model.d - 1}, got {entry}")
    heads: list[tuple[Any, ...]] = []
    for h, m in enumerate(model.head_models):
        vv = [Fraction(int(x.p), int(x.q)) for x in m.v]
        if h == head:
            vv[entry] += Fraction(delta)
        heads.append((m.W, vv, m.c) if model.affine else (m.W, vv))
    return MultiHeadAttention(heads, beta=model.beta if model.affine else None)


def random_multi_head(d: int, heads: int, seed: int) -> MultiHeadAttention:
    """A random model with ``heads`` distinct-W live heads and small rational entries.

    >>> random_multi_head(2, 3, 0).H
    3
    """
    d = check_int(d, "d", low=1)
    H = check_int(heads, "heads", low=1, high=MAX_RANDOM_HEADS)
    require_size(f"a random multi-head model at d = {d}, {H} heads", numbers=H * (d * d + d))
    return MultiHeadAttention(_distinct_heads(d, H, np.random.default_rng(check_seed(seed))))
