"""Learning multi-head attention from queries: the orthogonal-subspace learner (Prop 7.1, §7).

>>> import verified_attn as va
>>> from verified_attn.models import MultiHeadAttention
>>> B1, B2 = [[1], [1], [0]], [[1], [-1], [0]]                   # orthogonal subspaces of Q^3
>>> W1 = [[1, 1, 0], [1, 1, 0], [0, 0, 0]]                        # = B1 [1] B1^T
>>> W2 = [[-2, 2, 0], [2, -2, 0], [0, 0, 0]]                      # = B2 [-2] B2^T
>>> model = MultiHeadAttention([(W1, [3, 3, 0]), (W2, [1, -1, 0])])
>>> rec = learn_orthogonal_heads(va.Oracle(model, "certified"), [B1, B2])
>>> rec.heads == model.heads, rec.queries, rec.bound, rec.method
(True, 4, 4, 'orthogonal')

Setting (paper v2 §7): head h lives in a subspace S_h with a known rational basis B_h
(d x r_h), the subspaces pairwise orthogonal: ``W_h = P_h W_h P_h`` and ``v_h in S_h``
(``P_h`` the orthogonal projector). A sequence with every token in S_g gives every other
head the scores 0 (uniform softmax) and the values 0, so f restricted to S_g *is* head g.
With ``X = Y B_g^T`` head g is the r_g-dimensional head ``(B_g^T W_g B_g, B_g^T v_g)``,
which Thm 4.1 (``learn_single_head``) recovers from r_g^2 + r_g queries; then
``W_g = B_g G^{-1} (B_g^T W_g B_g) G^{-1} B_g^T`` and ``v_g = B_g G^{-1} (B_g^T v_g)``
with ``G = B_g^T B_g``. In all ``sum_h (r_h^2 + r_h) <= H (d^2 + d)`` queries.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Unpack

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.exact_recovery import learn_single_head
from verified_attn.learner_options import ExactOptions, learner_options
from verified_attn.models import MultiHeadAttention, as_rational_sequence
from verified_attn.multi_head.canonical_certified import dump_heads
from verified_attn.multi_head.refusals import restated
from verified_attn.multi_head.run_record import RunRecord
from verified_attn.oracle import Oracle
from verified_attn.oracle_subbox import SubBox
from verified_attn.progress import reporting
from verified_attn.recovery import MultiHeadRecovery, SingleHeadRecovery
from verified_attn.serialize import dump_number, dump_rational
from verified_attn.validation import (
    check_oracle,
)
from verified_attn.verification import verify_model

__all__ = ["learn_orthogonal_heads", "orthogonal_heads_model", "orthogonal_query_bound"]

METHOD = "orthogonal"


def orthogonal_query_bound(ranks: list[int]) -> int:
    """``sum_h (r_h^2 + r_h)``: Thm 4.1 once per subspace.

    >>> orthogonal_query_bound([1, 2])
    8
    """
    return sum(r * r + r for r in ranks)


class _Restricted(SubBox):
    """Head g seen through its subspace: Y (N x r) is sent as X = Y B^T to the outer oracle.

    A model for the inner oracle (the public model protocol: ``d``, ``evaluate_rational``,
    ``evaluate_batch``). Queries are counted on the outer oracle under
    ``head<g>/<inner phase>``, declared verification there exactly when the inner phase
    is, so the outer run's learning and verification counts are the inner ones summed.
    Every answer is kept in ``answers`` (inner phase, answer) for the certificate.
    """

    model_class = "single-head"

    def __init__(self, outer: Oracle, B: flint.fmpq_mat, label: str) -> None:
        super().__init__(outer, label)
        self.B_T = B.transpose()
        self.B_T_float = np.array(
            [
                [float(int(q.p)) / float(int(q.q)) for q in self.B_T.table()[i]]
                for i in range(B.ncols())
            ]
        )
        self.d = B.ncols()
        self.answers: list[tuple[str, Any]] = []

    def _keep(self, answers: Sequence[Any]) -> None:
        self.answers.extend((self.inner_phase, a) for a in answers)

    def evaluate_rational(self, Yq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        with self.forward():
            answer = self.outer.query(Yq * self.B_T)
        self._keep([answer])
        return answer

    def evaluate_batch(self, Ys: np.ndarray) -> np.ndarray:
        Xs = np.asarray(Ys, dtype=np.float64) @ self.B_T_float
        with self.forward():
            out = np.asarray(self.outer.query_many(Xs), dtype=np.float64)
        self._keep(out.tolist())
        return out


def _bases(bases: Any, d: int) -> list[flint.fmpq_mat]:
    if isinstance(bases, str | bytes) or not isinstance(bases, list | tuple) or not bases:
        raise InvalidArgument(
            f"bases must be a non-empty list of d x r matrices; got {bases!r}"[:200]
        )
    out = []
    for h, B in enumerate(bases):
        try:
            arr = np.asarray(B, dtype=object)
        except ValueError as exc:  # ragged rows
            raise InvalidArgument(f"bases[{h}] must be a d x r matrix: {exc}") from exc
        if arr.ndim != 2 or arr.shape[0] != d or arr.shape[1] < 1:
            raise InvalidArgument(
                f"bases[{h}] must be a d x r matrix with d = {d}, r >= 1; got shape {arr.shape}"
            )
        Bq = as_rational_sequence(arr, None, name=f"bases[{h}]")
        if Bq.rank() != Bq.ncols():
            raise InvalidArgument(f"bases[{h}] must have linearly independent columns")
        out.append(Bq)
    for g in range(len(out)):
        for h in range(g + 1, len(out)):
            if any(q != 0 for q in (out[g].transpose() * out[h]).entries()):
                raise InvalidArgument(
                    f"bases[{g}] and bases[{h}] are not orthogonal (B_g^T B_h != 0)"
                )
    return out


def _sym(m: flint.fmpq_mat) -> sympy.Matrix:
    return sympy.Matrix(
        m.nrows(), m.ncols(), [sympy.Rational(int(q.p), int(q.q)) for q in m.entries()]
    )


def _fmpq_mat(m: sympy.Matrix) -> flint.fmpq_mat:
    return flint.fmpq_mat(m.rows, m.cols, [flint.fmpq(int(x.p), int(x.q)) for x in m])


def learn_orthogonal_heads(
    oracle: Oracle,
    bases: Any,
    **options: Unpack[ExactOptions],
) -> MultiHeadRecovery:
    """Recover every head living in one of the known, pairwise orthogonal subspaces.

    ``bases[h]`` is a rational d x r_h basis of S_h. Heads whose restricted v is 0 are dead
    (they contribute nothing; their W is not identifiable) and are left out of the
    result, with a note. Exact and certified oracles give exact rational heads;
    float oracles give float64 heads. ``verify`` fresh sequences check each restricted head
    (inside Thm 4.1) and then the whole model (0: not verified, and the result says so).
    Returns a :class:`~verified_attn.recovery.MultiHeadRecovery` (``method ==
    "orthogonal"``) with ``model`` the learned :class:`~verified_attn.models.MultiHeadAttention`.
    ``progress``: a bar or callback over the queries (:mod:`verified_attn.progress`).

    >>> import verified_attn as va
    >>> learn_orthogonal_heads(va.Oracle(va.SingleHeadAttention([[1]], [1])), [[[1]], [[1]]])
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: bases[0] and bases[1] are not orthogonal (B_g^T B_h != 0)
    """
    check_oracle(oracle)
    if oracle.model_class in ("multi-head-affine", "single-head-affine"):
        # Restricted to S_h, head h becomes an affine single head (c = B_h^T c_h) and beta
        # shows up in every restriction: the bias-free Thm 4.1 per head does not apply.
        raise InvalidArgument(
            f"oracle declares model class {oracle.model_class!r}: learn_orthogonal_heads "
            "covers bias-free heads; use learn_multi_head (it learns c_h and beta)"
        )
    verify, seed, lengths, denominator_bound, progress = learner_options(
        "learn_orthogonal_heads", options
    )
    Bs = _bases(bases, oracle.d)
    bound = orthogonal_query_bound([B.ncols() for B in Bs])
    oracle.require_remaining(bound, verify * (len(Bs) + 1), "learn_orthogonal_heads")
    exact = oracle.arithmetic.name != "float"
    total = bound + verify * (len(Bs) + 1)
    notes: list[str] = []
    with reporting(oracle, progress, "learn_orthogonal_heads", total=total), oracle.run() as run:
        heads, parts = [], []  # the live heads lifted; per subspace, for the certificate
        for h, B in enumerate(Bs):
            head, part = _learn_subspace(oracle, B, h, verify, seed, lengths, denominator_bound)
            parts.append(part)
            if head is None:
                notes.append(
                    f"head {h + 1}: v = 0 in its subspace (a dead head); W_{h + 1} is free and "
                    "left out"
                )
            else:
                heads.append(head)
        if not heads:
            raise NotIdentifiable("every head is dead (v = 0 in its subspace): f is identically 0")
        candidate = MultiHeadAttention(
            [(np.asarray(W, dtype=object if exact else np.float64), v) for W, v in heads]
        )
        checked = (
            verify_model(
                oracle,
                candidate,
                count=verify,
                seed=seed,
                lengths=lengths,
                what="the recovered heads",
            )
            if verify
            else None
        )
    assumptions = sorted({a for part in parts if "live" in part for a in part["live"].assumptions})
    record = RunRecord(oracle.arithmetic, seed, run.counts, bound, checked, assumptions)
    d = oracle.d
    notes.append(
        f"orthogonal method: {run.counts.learning} learning queries against sum_h (r_h^2 + "
        f"r_h) = {bound}; unrestricted H (d^2 + d) = {len(Bs) * (d * d + d)}"
    )
    params = {
        "heads": candidate.heads if exact else [(np.asarray(W), np.asarray(v)) for W, v in heads]
    }
    return record.recovery(
        method=METHOD,
        parameters=params,
        learned_model=candidate,
        exact=exact,
        parameter_count=bound,
        rounds=2,
        notes=notes,
        certificate_data=functools.partial(
            _certificate_data, record, Bs, parts, params["heads"], exact
        ),
    )


def _learn_subspace(
    oracle: Oracle,
    B: flint.fmpq_mat,
    h: int,
    verify: int,
    seed: int,
    lengths: Sequence[int],
    denominator_bound: int | None,
) -> tuple[tuple[Any, Any] | None, dict[str, Any]]:
    """Head ``h`` learned through its subspace (Thm 4.1 on the restricted oracle) and lifted
    to Q^d, with its certificate part ``{"live": recovery}``; a dead head (v = 0 in the
    subspace) is None with ``{"dead": its answers}``."""
    arith = oracle.arithmetic
    adapter = _Restricted(oracle, B, f"head{h + 1}")
    inner = adapter.attach(arith)
    try:
        rec = learn_single_head(
            inner,
            affine=False,
            verify=verify,
            seed=seed + h,
            lengths=lengths,
            denominator_bound=denominator_bound,
        )
    except NotIdentifiable:
        return None, {"dead": [a for _, a in adapter.answers]}
    except ModelClassMismatch as exc:
        raise restated(
            exc, f"restricted to subspace {h + 1} the oracle is not one head: {exc}"
        ) from exc
    if arith.name != "float" and not rec.exact:
        raise PrecisionExhausted(
            f"head {h + 1}: the certified balls did not reconstruct to rationals; rerun "
            "at a higher precision or with a denominator_bound"
        )
    return _lift(B, rec, arith.name != "float"), {"live": rec}


def _lift(B: flint.fmpq_mat, rec: SingleHeadRecovery, exact: bool) -> tuple[Any, Any]:
    """(W, v) in Q^d from the restricted head: W = L W' L^T, v = L v', L = B (B^T B)^{-1}."""
    G_inv = (B.transpose() * B).inv()
    L = B * G_inv
    if exact:
        W = L * _fmpq_mat(rec.W) * L.transpose()
        v = L * _fmpq_mat(rec.v)
        return _sym(W).tolist(), list(_sym(v))
    Lf = np.array([[float(int(q.p)) / float(int(q.q)) for q in row] for row in L.table()])
    return Lf @ np.asarray(rec.W, dtype=np.float64) @ Lf.T, Lf @ np.asarray(rec.v, dtype=np.float64)


def _certificate_data(
    record: RunRecord,
    Bs: list[flint.fmpq_mat],
    parts: list[dict[str, Any]],
    heads: list[tuple[Any, Any]],
    exact: bool,
) -> dict[str, Any]:
    """The orthogonal certificate: the bases, per subspace the restricted head's own
    single-head certificate (or a dead head's answers), and the lifted heads.

    Checked by :mod:`verified_attn.certificates.multi_head`, which re-checks each restricted
    certificate with the single-head checker and lifts its claim itself.
    """
    d = Bs[0].nrows()
    subspaces = []
    for B, part in zip(Bs, parts, strict=True):
        entry: dict[str, Any] = {
            "basis": [[dump_rational(B[i, j]) for j in range(B.ncols())] for i in range(d)]
        }
        if "live" in part:
            sub = dict(part["live"].certificate())
            sub.pop("versions", None)
            entry["certificate"] = sub
            entry["dead_answers"] = None
        else:
            entry["certificate"] = None
            entry["dead_answers"] = [dump_number(a) for a in part["dead"]]
        subspaces.append(entry)
    return record.certificate(
        d,
        METHOD,
        {
            "affine": False,
            "subspaces": subspaces,
            "result": {"exact": exact, "heads": dump_heads(heads, d), "beta": None},
        },
    )


def orthogonal_heads_model(
    d: int, ranks: list[int], seed: int, *, dead: tuple[int, ...] = ()
) -> tuple[MultiHeadAttention, list[list[list[Fraction]]]]:
    """A random model whose heads live in pairwise orthogonal subspaces, and the bases.

    Bases: rational Gram-Schmidt (no normalisation) of a random integer matrix; head h is
    ``W_h = B_h M_h B_h^T``, ``v_h = B_h u_h`` with small random M_h, u_h (u_h = 0 for h
    in ``dead``).

    >>> model, bases = orthogonal_heads_model(3, [1, 2], 0)
    >>> model.H, [len(b[0]) for b in bases]
    (2, [1, 2])
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise InvalidArgument(f"d must be an int >= 1, got {d!r}")
    if not ranks or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in ranks):
        raise InvalidArgument(f"ranks must be a non-empty list of ints >= 1, got {ranks!r}")
    if sum(ranks) > d:
        raise InvalidArgument(f"ranks must sum to at most d = {d}, got {ranks!r}")
    rng = np.random.default_rng(seed)
    while True:
        A = [[Fraction(int(x)) for x in row] for row in rng.integers(-2, 3, (d, d))]
        if flint.fmpq_mat([[flint.fmpq(q.numerator) for q in r] for r in A]).rank() == d:
            break
    cols: list[list[Fraction]] = []
    for j in range(sum(ranks)):
        c = [A[i][j] for i in range(d)]
        for u in cols:  # rational Gram-Schmidt: orthogonal, not normalised
            coef = sum((a * b for a, b in zip(c, u, strict=True)), Fraction(0)) / sum(
                (b * b for b in u), Fraction(0)
            )
            c = [a - coef * b for a, b in zip(c, u, strict=True)]
        cols.append(c)
    heads, bases = [], []
    start = 0
    for h, r in enumerate(ranks):
        B = [[cols[start + k][i] for k in range(r)] for i in range(d)]
        start += r
        Bq = flint.fmpq_mat([[flint.fmpq(q.numerator, q.denominator) for q in row] for row in B])
        # Scale M by the Gram matrix so that the restricted head's scores stay O(1) and the
        # single-head probes do not saturate (saturation costs rescale queries).
        G = Bq.transpose() * Bq
        g = max(abs(int(G[k, k].p)) for k in range(r)) if r else 1
        M = flint.fmpq_mat(
            [[flint.fmpq(int(x), 2 * g * g) for x in row] for row in rng.integers(-2, 3, (r, r))]
        )
        u = [0] * r if h in dead else [int(x) for x in rng.integers(-3, 4, r)]
        if h not in dead and not any(u):
            u[0] = 1
        uq = flint.fmpq_mat(r, 1, [flint.fmpq(x) for x in u])
        W = Bq * M * Bq.transpose()
        v = Bq * uq
        heads.append((_sym(W), list(_sym(v))))
        bases.append(B)
    return MultiHeadAttention(heads), bases
