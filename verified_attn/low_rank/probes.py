"""Bilinear measurements u^T W b from two-token queries, in any arithmetic.

>>> import numpy as np, verified_attn as va
>>> from verified_attn.low_rank.probes import Prober
>>> oracle = va.Oracle(va.SingleHeadAttention([[1, 2], [3, 4]], [1, 1]), "exact")
>>> prober = Prober.start(oracle)
>>> prober.measure(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), "C")[0]   # e_1^T W e_2
2

The query [b + t u; b] has score difference s_1 - s_2 = t u^T W b, so
``alpha_1 = sigmoid(t u^T W b)`` and ``f = b^T v + alpha_1 t u^T v`` (docs/theory.md, Theorem 4.1, step 2,
with e_j replaced by any b). Hence ``u^T W b = logit((f - b^T v) / (t u^T v)) / t``.
Probe vectors are dyadic rationals held in float64 arrays (every entry exactly a float), so
the float query *is* the exact rational query; t starts at 1 and is divided by 16 where the
softmax saturates (each re-ask is a counted query in phase "rescale").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.oracle import Oracle
from verified_attn.probing import (
    MAX_RESCALES,
    RESCALE_FACTOR,
    logits,
    measured_array,
    raise_bad_probe,
    require_nonzero_v,
    saturated,
)
from verified_attn.serialize import dump_number, dump_rational

__all__ = ["Measurement", "Prober", "dot", "dump_probes", "exact_floats", "rational_vector"]


def rational_vector(arith: Arithmetic, x: np.ndarray) -> np.ndarray:
    """A dyadic float vector as numbers of ``arith`` (exact conversion)."""
    if arith.name == "float":
        return np.asarray(x, dtype=np.float64)
    out = np.empty(len(x), dtype=object)
    for i, xi in enumerate(np.asarray(x, dtype=np.float64).tolist()):
        out[i] = arith.rational(Fraction(xi))
    return out


def dot(arith: Arithmetic, x: np.ndarray, v: np.ndarray) -> Any:
    """x^T v for an exact dyadic float vector x and measured numbers v."""
    if arith.name == "float":
        return float(np.asarray(x, dtype=np.float64) @ v)
    acc: Any = arith.rational(Fraction(0))
    for i, xi in enumerate(np.asarray(x, dtype=np.float64).tolist()):
        if xi:
            acc = acc + arith.rational(Fraction(xi)) * v[i]
    return acc


@dataclass(frozen=True)
class Measurement:
    """One probe as finally asked: the query [b + t u; b], its phase and the answer.

    ``scale`` is t (16^-n after n re-asks, each a counted query in the rescale phase);
    certificates store these so that a checker can re-decode u^T W b without the oracle.
    """

    phase: str
    u: tuple[float, ...]
    b: tuple[float, ...]
    scale: Fraction
    answer: Any
    verification: bool = False


@dataclass
class Prober:
    """The oracle, its arithmetic and the measured v: turns (u, b) pairs into u^T W b.

    ``v_answers`` are the answers to [e_i]; ``log`` every probe measured, in order.
    """

    oracle: Oracle
    arith: Arithmetic
    v: np.ndarray
    v_answers: list[Any] = field(default_factory=list)
    log: list[Measurement] = field(default_factory=list)
    # Probe vectors repeat (design columns, basis vectors, unit vectors): the log keeps one
    # tuple per distinct vector, so it costs O(distinct * d), not O(probes * d).
    _vectors: dict[bytes, tuple[float, ...]] = field(default_factory=dict, repr=False)

    def _interned(self, x: np.ndarray) -> tuple[float, ...]:
        key = np.ascontiguousarray(x, dtype=np.float64).tobytes()
        out = self._vectors.get(key)
        if out is None:
            out = self._vectors[key] = tuple(x.tolist())
        return out

    @classmethod
    def start(cls, oracle: Oracle) -> Prober:
        """Measure v with the d length-1 queries [e_i] (phase "v"); v = 0 is unidentifiable."""
        arith = oracle.arithmetic
        d = oracle.d
        with arith.context(), oracle.phase("v"):
            answers = oracle.query_many(np.eye(d)[:, None, :])
            v = measured_array(arith, answers)
            require_nonzero_v(arith, v)
        return cls(oracle, arith, v, list(answers))

    def measure(
        self, us: np.ndarray, bs: np.ndarray, phase: str, *, verification: bool = False
    ) -> np.ndarray:
        """u_k^T W b_k for the rows of ``us`` and ``bs`` (shape (n, d)); call in context.

        Every u_k must have u_k^T v != 0 (the caller's design guarantees it).
        ``verification`` declares the phase (and its re-asks, in phase "<phase>-rescale")
        a verification phase on the oracle.
        """
        arith = self.arith
        n = us.shape[0]
        if n == 0:
            return measured_array(arith, [])
        uv = self._dots(us)
        bv = self._dots(bs)
        scales = [Fraction(1)] * n
        with self.oracle.phase(phase, verification=verification):
            answers = self.oracle.query_many(np.stack([bs + us, bs], axis=1), owned=True)
        rescale = f"{phase}-rescale" if verification else "rescale"
        for _ in range(MAX_RESCALES if arith.name != "exact" else 0):
            Y = self._ratios(answers, uv, bv, scales)
            todo = [
                ix[0]
                for ix in saturated(
                    arith, Y, None if arith.name == "float" else np.array(scales, dtype=object)
                )
            ]
            if not todo:
                break
            for k in todo:
                scales[k] *= RESCALE_FACTOR
            queries = [self._query(us[k], bs[k], scales[k]) for k in todo]
            with self.oracle.phase(rescale, verification=verification):
                new = self.oracle.query_many(np.stack(queries))
            for k, a in zip(todo, new, strict=True):
                answers[k] = a
        for k in range(n):
            self.log.append(
                Measurement(
                    phase,
                    self._interned(us[k]),
                    self._interned(bs[k]),
                    scales[k],
                    answers[k],
                    verification,
                )
            )
        Y = self._ratios(answers, uv, bv, scales)
        L, bad = logits(arith, Y)
        if bad:
            (k,) = bad[0]
            raise_bad_probe(arith, Y[k], self._query(us[k], bs[k], scales[k]), answers[k])
        t = measured_array(arith, [arith.rational(s) for s in scales])
        return L / t

    def _dots(self, xs: np.ndarray) -> list[Any]:
        """x_k^T v for every row, computed once per distinct row (rows repeat)."""
        memo: dict[bytes, Any] = {}
        out = []
        for x in xs:
            key = np.ascontiguousarray(x, dtype=np.float64).tobytes()
            val = memo.get(key)
            if val is None:
                val = memo[key] = dot(self.arith, x, self.v)
            out.append(val)
        return out

    def _ratios(self, answers: list[Any], uv: list[Any], bv: list[Any], scales: list[Fraction]):
        arith = self.arith
        F = measured_array(arith, answers)
        t = measured_array(arith, [arith.rational(s) for s in scales])
        return (F - measured_array(arith, bv)) / (t * measured_array(arith, uv))

    @staticmethod
    def _query(u: np.ndarray, b: np.ndarray, t: Fraction) -> np.ndarray:
        # t is a power of two and u, b are dyadic: b + t u is exact in float64.
        return np.stack([b + float(t) * u, b])


@functools.lru_cache(maxsize=1 << 16)
def _exact_float(x: float) -> str:
    return dump_rational(Fraction(x))


def exact_floats(x: Any) -> list[str]:
    """Dyadic float entries as their exact rationals "p/q" (for certificates).

    >>> exact_floats([0.5, -3.0, 0.0])
    ['1/2', '-3/1', '0/1']
    """
    # Probe vectors repeat few values (0, 1, the generic columns): cache their strings.
    return [_exact_float(float(q)) for q in x]


def dump_probes(log: list[Measurement]) -> list[dict[str, Any]]:
    """Every probe [b + t u; b] as exact rationals, with its phase and its answer."""
    return [
        {
            "phase": m.phase,
            "u": exact_floats(m.u),
            "b": exact_floats(m.b),
            "scale": dump_rational(m.scale),
            "answer": dump_number(m.answer),
        }
        for m in log
    ]
