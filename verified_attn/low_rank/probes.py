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
from verified_attn.errors import InvalidArgument
from verified_attn.oracle import Oracle, Scratch
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


@dataclass(frozen=True)
class _Batch:
    """One call of :meth:`Prober.measure`: probe k is [b + 16^-n_k u; b] with u, b given
    by their indices in the prober's vector table (probe vectors repeat: design columns,
    basis vectors, unit vectors), so the record costs O(probes + distinct * d)."""

    phase: str
    u: np.ndarray  # (n,) indices into Prober.vectors
    b: np.ndarray
    rescales: np.ndarray  # (n,) n_k: t = 16^-n_k
    answers: list[Any]
    verification: bool


class _TableRows:
    """Rows ``table[ids[k]]`` fetched on demand (re-asks and error reports need a few)."""

    ndim = 2

    def __init__(self, table: np.ndarray, ids: np.ndarray) -> None:
        self.table, self.ids = table, ids

    def __getitem__(self, k: Any) -> np.ndarray:
        return self.table[self.ids[k]]


@dataclass
class Prober:
    """The oracle, its arithmetic and the measured v: turns (u, b) pairs into u^T W b.

    ``v_answers`` are the answers to [e_i]; :attr:`log` every probe measured, in order
    (kept as batches over a table of the distinct probe vectors, :attr:`vectors`).
    """

    oracle: Oracle
    arith: Arithmetic
    v: np.ndarray
    v_answers: list[Any] = field(default_factory=list)
    #: The distinct probe vectors, in order of first use (float64, dyadic entries).
    vectors: list[np.ndarray] = field(default_factory=list)
    _index: dict[bytes, int] = field(default_factory=dict, repr=False)
    _batches: list[_Batch] = field(default_factory=list, repr=False)
    # A fixed generic vector: rows x, y with x . h != y . h differ; equal hashes are then
    # compared in full (so the interning is exact, the hash only groups).
    _hash: np.ndarray | None = field(default=None, repr=False)
    _table: np.ndarray = field(default_factory=lambda: np.empty((0, 0)), repr=False)
    _known: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    _known_ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64), repr=False)
    _dots_f: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    _dots_exact: dict[int, Any] = field(default_factory=dict, repr=False)  # by vector index
    # Reused buffers for the float batches (see oracle.Scratch: reused only when free).
    _scratch: Scratch = field(default_factory=Scratch, repr=False)
    _gather_u: Scratch = field(default_factory=Scratch, repr=False)
    _gather_b: Scratch = field(default_factory=Scratch, repr=False)

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

    @property
    def log(self) -> list[Measurement]:
        """Every probe measured, in order, one :class:`Measurement` each."""
        tuples = [tuple(x.tolist()) for x in self.vectors]
        return [
            Measurement(
                batch.phase,
                tuples[int(iu)],
                tuples[int(ib)],
                RESCALE_FACTOR ** int(n),
                answer,
                batch.verification,
            )
            for batch in self._batches
            for iu, ib, n, answer in zip(
                batch.u, batch.b, batch.rescales, batch.answers, strict=True
            )
        ]

    @property
    def probe_count(self) -> int:
        """How many probes have been measured (each with its final scale)."""
        return sum(len(batch.answers) for batch in self._batches)

    def _intern(self, rows: np.ndarray) -> np.ndarray:
        """Indices of the rows of ``rows`` ((n, d), or one (d,) vector for all n) in
        :attr:`vectors`; new rows are appended. Vectorised: rows are grouped and looked up
        by a generic linear hash, and every hit is compared in full (so equal indices mean
        equal vectors; a collision falls back to comparing bytes)."""
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim == 1:
            return self._intern(rows[None, :])
        d = rows.shape[1]
        if self._hash is None:
            self._hash = np.random.default_rng(0).standard_normal((d,))
            self._table = np.empty((16, d))
        _, first, inverse = np.unique(rows @ self._hash, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        reps = rows[first]
        h = reps @ self._hash  # the same hashes, of the representatives
        if not np.array_equal(reps[inverse], rows):  # pragma: no cover - a hash collision
            return np.array([self._intern_one(x) for x in rows], dtype=np.int64)
        ids = np.full(len(reps), -1, dtype=np.int64)
        if self._known.size:
            pos = np.minimum(np.searchsorted(self._known, h), self._known.size - 1)
            hit = self._known[pos] == h
            cand = self._known_ids[pos[hit]]
            if not np.array_equal(self._table[cand], reps[hit]):  # pragma: no cover
                return np.array([self._intern_one(x) for x in rows], dtype=np.int64)
            ids[hit] = cand
        new = np.flatnonzero(ids < 0)
        if new.size:
            for k in new[np.argsort(first[new])].tolist():  # new vectors in first-use order
                ids[k] = self._intern_one(reps[k])
            self._add_to_table(reps[new], h[new], ids[new])
        return ids[inverse]

    def _add_to_table(self, rows: np.ndarray, h: np.ndarray, ids: np.ndarray) -> None:
        """Index new vectors (already in :attr:`vectors`) by their hashes."""
        keys = np.concatenate([self._known, h])
        order = np.argsort(keys, kind="stable")
        self._known = keys[order]
        self._known_ids = np.concatenate([self._known_ids, ids])[order]

    def intern(self, rows: np.ndarray) -> np.ndarray:
        """The indices of these vectors in :attr:`vectors` (appended if new), for
        :meth:`measure_ids`: probe vectors that recur are named once, then by index.

        >>> import numpy as np, verified_attn as va
        >>> head = va.SingleHeadAttention([[1, 2], [3, 4]], [1, 1])
        >>> prober = Prober.start(va.Oracle(head, "float"))
        >>> ids = prober.intern(np.eye(2))
        >>> m = prober.measure_ids(ids, ids[1], "C")                   # e_i^T W e_2
        >>> ids.tolist(), [round(float(x), 9) for x in m]
        ([0, 1], [2.0, 4.0])
        """
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != self.oracle.d:
            raise InvalidArgument(f"rows must have shape (n, d = {self.oracle.d}), got {rows.shape}")
        return self._intern(rows)

    def measure_ids(
        self, iu: Any, ib: Any, phase: str, *, verification: bool = False
    ) -> np.ndarray:
        """:meth:`measure` of the probes whose u and b are the vectors with these indices
        (arrays of one length, or one index shared by every probe)."""
        iu, ib = np.asarray(iu, dtype=np.int64), np.asarray(ib, dtype=np.int64)
        if self.arith.name == "float":
            return self._measure_float_ids(iu, ib, phase, verification)
        us, bs = self._rows(iu), self._rows(ib)
        return self.measure(us, bs, phase, verification=verification, _ids=(iu, ib))

    def _measure_float_ids(
        self, iu: np.ndarray, ib: np.ndarray, phase: str, verification: bool
    ) -> np.ndarray:
        """:meth:`measure_ids` in float mode: the queries gathered from the vector table
        straight into the batch, u^T v and b^T v from one product per vector."""
        n = max(iu.size if iu.ndim else 0, ib.size if ib.ndim else 0)
        if n == 0:
            return measured_array(self.arith, [])
        d = self._table.shape[1]
        # [b + u; b] written once into a reused buffer (fresh pages cost more than the
        # writes at large d): a varying half is gathered into a second reused buffer, a
        # shared one is a row broadcast.
        X = self._scratch.take((n, 2, d))
        tu = self._gather(iu, n, d, self._gather_u)
        tb = self._gather(ib, n, d, self._gather_b)
        X[:, 1] = tb
        np.add(tu, tb, out=X[:, 0])  # b + u: exact (dyadic entries)
        del tu, tb
        dots = self._vector_dots()
        us = _TableRows(self._table, iu) if iu.ndim else self._table[int(iu)].copy()
        bs = _TableRows(self._table, ib) if ib.ndim else self._table[int(ib)].copy()
        uv = np.broadcast_to(dots[iu], (n,))
        bv = np.broadcast_to(dots[ib], (n,))
        return self._measure_float(
            us, bs, n, phase, verification, (iu, ib), prepared=(X, uv, bv)  # type: ignore[arg-type]
        )

    def _gather(self, ids: np.ndarray, n: int, d: int, scratch: Scratch) -> np.ndarray:
        """The table rows ``ids`` (n of them) in a reused buffer, or the one shared row."""
        if not ids.ndim:
            return self._table[int(ids)]
        out = scratch.take((n, d))
        np.take(self._table, ids, axis=0, out=out, mode="clip")  # ids valid: unbuffered
        return out

    def _vector_dots(self) -> np.ndarray:
        """x^T v for every vector of the table, each computed once."""
        k = len(self.vectors)
        if self._dots_f.size < k:
            v = np.asarray(self.v, dtype=np.float64)
            self._dots_f = np.concatenate([self._dots_f, self._table[self._dots_f.size : k] @ v])
        return self._dots_f

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        """The vectors with these indices (one (d,) vector for a scalar index)."""
        if ids.ndim == 0:
            return self.vectors[int(ids)]
        return self._table[ids]

    def _intern_one(self, x: np.ndarray) -> int:
        x = np.ascontiguousarray(x, dtype=np.float64)
        key = x.tobytes()
        k = self._index.get(key)
        if k is None:
            k = self._index[key] = len(self.vectors)
            self.vectors.append(x.copy())
            if k >= len(self._table):  # the table holds every vector, for measure_ids
                grown = np.empty((max(16, 2 * len(self._table)), len(x)))
                grown[: len(self._table)] = self._table
                self._table = grown
            self._table[k] = x
        return k

    def measure(
        self,
        us: np.ndarray,
        bs: np.ndarray,
        phase: str,
        *,
        verification: bool = False,
        _ids: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        """u_k^T W b_k for the rows of ``us`` and ``bs`` (shape (n, d), or one vector (d,)
        shared by all n probes); call in context.

        Every u_k must have u_k^T v != 0 (the caller's design guarantees it).
        ``verification`` declares the phase (and its re-asks, in phase "<phase>-rescale")
        a verification phase on the oracle.
        """
        arith = self.arith
        us = np.asarray(us, dtype=np.float64)
        bs = np.asarray(bs, dtype=np.float64)
        n = max(us.shape[0] if us.ndim == 2 else 0, bs.shape[0] if bs.ndim == 2 else 0)
        if n == 0:
            return measured_array(arith, [])
        if arith.name == "float":
            return self._measure_float(us, bs, n, phase, verification, _ids)
        us_given, bs_given = us, bs
        us, bs = np.broadcast_to(us, (n, us.shape[-1])), np.broadcast_to(bs, (n, bs.shape[-1]))
        if _ids is not None:  # vectors of the table: x^T v once per vector, not per call
            uv, bv = self._dots_of(_ids[0], n), self._dots_of(_ids[1], n)
        else:
            uv, bv = self._dots(us), self._dots(bs)
        scales = [Fraction(1)] * n
        with self.oracle.phase(phase, verification=verification):
            answers = self.oracle.query_many(np.stack([bs + us, bs], axis=1), owned=True)
        rescale = f"{phase}-rescale" if verification else "rescale"
        rescales = np.zeros(n, dtype=np.int64)
        for _ in range(MAX_RESCALES if arith.name != "exact" else 0):
            Y = self._ratios(answers, uv, bv, scales)
            todo = [ix[0] for ix in saturated(arith, Y, np.array(scales, dtype=object))]
            if not todo:
                break
            for k in todo:
                scales[k] *= RESCALE_FACTOR
                rescales[k] += 1
            queries = [self._query(us[k], bs[k], scales[k]) for k in todo]
            with self.oracle.phase(rescale, verification=verification):
                new = self.oracle.query_many(np.stack(queries))
            for k, a in zip(todo, new, strict=True):
                answers[k] = a
        self._log(phase, us_given, bs_given, rescales, answers, verification, _ids)
        Y = self._ratios(answers, uv, bv, scales)
        L, bad = logits(arith, Y)
        if bad:
            (k,) = bad[0]
            raise_bad_probe(arith, Y[k], self._query(us[k], bs[k], scales[k]), answers[k])
        t = measured_array(arith, [arith.rational(s) for s in scales])
        return L / t

    def _measure_float(
        self,
        us: np.ndarray,
        bs: np.ndarray,
        n: int,
        phase: str,
        verification: bool,
        ids: tuple[np.ndarray, np.ndarray] | None,
        prepared: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        """:meth:`measure` in float arithmetic, on arrays: no per-probe Python objects.

        The same queries, re-asks and formula as in the other arithmetics: t = 16^-n is a
        power of two, so t u and b + t u are exact in float64 and the ratio is
        (f - b^T v) / (t u^T v). A shared u or b is used once, not repeated n times.
        ``prepared``: the batch [b + u; b] and u^T v, b^T v, already built.
        """
        v = np.asarray(self.v, dtype=np.float64)
        d = v.shape[0]
        if prepared is None:
            uv = np.broadcast_to(us @ v, (n,))
            bv = np.broadcast_to(bs @ v, (n,))
            X = np.empty((n, 2, d))
            np.add(bs, us, out=X[:, 0])
            X[:, 1] = bs
        else:
            X, uv, bv = prepared
        with self.oracle.phase(phase, verification=verification):
            F = np.array(self.oracle.query_many(X, owned=True), dtype=np.float64)
        del X
        rescales = np.zeros(n, dtype=np.int64)
        t = np.ones(n)
        Y = (F - bv) / uv
        rescale = f"{phase}-rescale" if verification else "rescale"
        for _ in range(MAX_RESCALES):
            todo = np.array([ix[0] for ix in saturated(self.arith, Y)], dtype=np.int64)
            if not todo.size:
                break
            rescales[todo] += 1
            t[todo] *= float(RESCALE_FACTOR)
            u_t = us[todo] if us.ndim == 2 else us
            b_t = bs[todo] if bs.ndim == 2 else np.broadcast_to(bs, (todo.size, d))
            queries = np.stack([b_t + t[todo, None] * u_t, b_t], axis=1)
            with self.oracle.phase(rescale, verification=verification):
                F[todo] = self.oracle.query_many(queries, owned=True)
            Y[todo] = (F[todo] - bv[todo]) / (t[todo] * uv[todo])
        self._log(phase, us, bs, rescales, F.tolist(), verification, ids)
        L, bad = logits(self.arith, Y)
        if bad:
            (k,) = bad[0]
            u_k = us[k] if us.ndim == 2 else us
            b_k = bs[k] if bs.ndim == 2 else bs
            raise_bad_probe(self.arith, Y[k], self._query(u_k, b_k, Fraction(t[k])), float(F[k]))
        return L / t

    def _log(
        self,
        phase: str,
        us: np.ndarray,
        bs: np.ndarray,
        rescales: np.ndarray,
        answers: list[Any],
        verification: bool,
        ids: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        n = len(answers)
        iu, ib = (self._intern(us), self._intern(bs)) if ids is None else ids
        self._batches.append(
            _Batch(
                phase,
                np.broadcast_to(iu, (n,)),
                np.broadcast_to(ib, (n,)),
                rescales,
                list(answers),
                verification,
            )
        )

    def _dots_of(self, ids: np.ndarray, n: int) -> list[Any]:
        """x^T v for the table vectors with these indices (one index shared by n probes),
        each computed once per prober (the design columns recur in every column)."""
        cache = self._dots_exact
        out = []
        for k in np.broadcast_to(ids, (n,)).tolist():
            val = cache.get(k)
            if val is None:
                val = cache[k] = dot(self.arith, self.vectors[k], self.v)
            out.append(val)
        return out

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


def dump_probes(prober: Prober) -> dict[str, Any]:
    """Every probe [b + t u; b], with its phase and its answer, for a certificate.

    ``vectors`` holds each distinct probe vector once, as exact rationals; a probe names
    its u and b by their index there (a certificate at d = 768 would otherwise repeat
    ~10^5 vectors of d entries).

    >>> import numpy as np, verified_attn as va
    >>> oracle = va.Oracle(va.SingleHeadAttention([[1, 2], [3, 4]], [1, 1]), "exact")
    >>> prober = Prober.start(oracle)
    >>> _ = prober.measure(np.array([[1.0, 0.0]] * 2), np.eye(2), "C")
    >>> out = dump_probes(prober)
    >>> out["vectors"], [(p["u"], p["b"], p["scale"]) for p in out["probes"]]
    ([['1/1', '0/1'], ['0/1', '1/1']], [(0, 0, '1/1'), (0, 1, '1/1')])
    """
    scales: dict[int, str] = {}
    probes = []
    for batch in prober._batches:
        for iu, ib, n, answer in zip(
            batch.u.tolist(), batch.b.tolist(), batch.rescales.tolist(), batch.answers,
            strict=True,
        ):
            scale = scales.get(n)
            if scale is None:
                scale = scales[n] = dump_rational(RESCALE_FACTOR**n)
            probes.append(
                {"phase": batch.phase, "u": iu, "b": ib, "scale": scale,
                 "answer": dump_number(answer)}
            )
    return {"vectors": [exact_floats(x) for x in prober.vectors], "probes": probes}
