"""Re-check the orthogonal method of a multi-head certificate: one single-head certificate per subspace.

>>> from verified_attn.certificates.multi_head_orthogonal import verify_orthogonal
>>> verify_orthogonal({"format": "verified-attn-certificate/2", "kind": "multi-head"})
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: missing field theorem
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import (
    Arithmetic,
    fmpq_matrix,
)
from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import check_phases, passed
from verified_attn.certificates.multi_head_parts import (
    FLOAT_RTOL,
    MAX_D,
    claimed_heads,
    heads_model,
    predictor,
    read_entries,
    to_fraction,
)
from verified_attn.errors import (
    CertificateError,
)

__all__ = ["verify_orthogonal"]


def verify_orthogonal(data: dict[str, Any]) -> CertificateCheck:
    from verified_attn.certificates.single_head import verify as verify_single_head

    head = kernel.parse_header(data, "multi-head", max_d=MAX_D)
    d, arith = head.d, head.arith
    if kernel.as_bool(kernel.get(data, "affine"), "affine"):
        raise CertificateError("affine must be false for the orthogonal method")
    exact = kernel.as_bool(kernel.get(data, "result.exact"), "result.exact")
    if exact != (arith.name != "float"):
        raise CertificateError(f"result.exact is {exact} in {arith.name} arithmetic")
    subspaces = kernel.as_list(kernel.get(data, "subspaces"), "subspaces")
    if not 1 <= len(subspaces) <= d:
        raise CertificateError(f"subspaces has {len(subspaces)} entries, expected 1..{d}")
    bases = _bases(subspaces, d)
    ranks = [B.ncols() for B in bases]
    if sum(ranks) > d:
        raise CertificateError(f"the subspaces' ranks {ranks} add up to more than d = {d}")
    phases: dict[str, int] = {}
    inner_verification = []
    lifted = []
    lines = [head.describe() + ", method orthogonal", ""]
    for h, (entry, B) in enumerate(zip(subspaces, bases, strict=True)):
        path = f"subspaces[{h}]"
        sub = kernel.get(entry, "certificate")
        dead = kernel.get(entry, "dead_answers")
        if (sub is None) == (dead is None):
            raise CertificateError(f"{path}: give exactly one of certificate or dead_answers")
        if sub is None:
            with arith.context():
                values = kernel.numbers(dead, f"{path}.dead_answers", arith, B.ncols())
                if any(arith.sign(x) != 0 for x in values):
                    raise CertificateError(f"{path}.dead_answers: not all zero (v != 0)")
            phases[f"head{h + 1}/v"] = B.ncols()
            lines.append(f"subspace {h + 1}: dead (its {B.ncols()} v answers are zero)")
            continue
        if not isinstance(sub, dict):
            raise CertificateError(f"{path}.certificate must be a JSON object")
        for key in ("arithmetic", "precision", "rtol"):
            if sub.get(key) != data.get(key):
                raise CertificateError(f"{path}.certificate.{key} differs from the certificate's")
        if sub.get("d") != B.ncols() or sub.get("affine") is not False:
            raise CertificateError(f"{path}.certificate must be a bias-free head of d = r_h")
        try:
            inner = verify_single_head(sub)
        except CertificateError as exc:
            raise CertificateError(f"{path}.certificate: {exc}") from exc
        lines.append(f"subspace {h + 1} (rank {B.ncols()}): " + "; ".join(inner.summary[2:4]))
        for name, n in kernel.get(sub, "queries.by_phase").items():
            phases[f"head{h + 1}/{name}"] = n
        if kernel.get(sub, "queries.verification"):
            inner_verification.append(f"head{h + 1}/verify")
        lifted.append(_lift(B, sub, head, path))
    if not lifted:
        raise CertificateError("every subspace is dead: there is no head to certify")
    learning = sum(n for name, n in phases.items() if not name.endswith("/verify"))
    bound = sum(r * r + r for r in ranks)
    q = kernel.check_counts(
        data,
        learning=learning,
        phases=phases,
        bound=bound,
        verification_phases=("verify", *inner_verification),
    )
    check_phases(q["by_phase"], phases)
    lines[1] = (
        f"queries: {learning} learning (bound sum_h (r_h^2 + r_h) = {bound}, ranks {ranks}); "
        f"{q['verification']} verification"
    )
    claimed, _ = claimed_heads(data, head, False, len(bases))
    _compare_lifted(claimed, lifted, arith)
    lines.append(
        f"lifting: the {len(lifted)} re-checked restricted heads lift to the claimed heads"
    )
    model = heads_model(claimed, None, False)
    outer = q["by_phase"].get("verify", 0)
    with arith.context():
        lines.append(
            kernel.check_verification(data, head, predictor(head, model), expected_queries=outer)
        )
    return passed(head, lines)


def _bases(subspaces: list[Any], d: int) -> list[flint.fmpq_mat]:
    """The subspaces' bases, full rank and pairwise orthogonal."""
    bases = [_basis(s, f"subspaces[{h}]", d) for h, s in enumerate(subspaces)]
    for g in range(len(bases)):
        for h in range(g + 1, len(bases)):
            if any(q != 0 for q in (bases[g].transpose() * bases[h]).entries()):
                raise CertificateError(f"subspaces[{g}] and subspaces[{h}] are not orthogonal")
    return bases


def _basis(entry: Any, path: str, d: int) -> flint.fmpq_mat:
    rows = kernel.as_list(kernel.get(entry, "basis"), f"{path}.basis", d)
    r = len(kernel.as_list(rows[0], f"{path}.basis[0]"))
    if not 1 <= r <= d:
        raise CertificateError(f"{path}.basis must have 1..{d} columns, got {r}")
    B = [
        [kernel.rational(q, f"{path}.basis[{i}][{j}]") for j, q in enumerate(row)]
        for i, row in enumerate(kernel.as_matrix(rows, f"{path}.basis", d, r))
    ]
    Bq = fmpq_matrix(B)
    if Bq.rank() != r:
        raise CertificateError(f"{path}.basis does not have independent columns")
    return Bq


def _lift(
    B: flint.fmpq_mat, sub: dict[str, Any], head: kernel.Header, path: str
) -> tuple[Any, Any]:
    """The sub-certificate's claimed (W', v') lifted to Q^d: W = L W' L^T, v = L v'."""
    r = B.ncols()
    params = kernel.get(sub, "result.parameters")
    L = B * (B.transpose() * B).inv()
    arith = head.arith
    where = f"{path}.certificate.result.parameters"
    rows = kernel.as_list(kernel.get(params, "W"), f"{where}.W", r)
    Wr = [read_entries(row, f"{where}.W[{i}]", head, r) for i, row in enumerate(rows)]
    vr = read_entries(kernel.get(params, "v"), f"{where}.v", head, r)
    if arith.name != "float":
        Wq = fmpq_matrix(Wr)
        vq = fmpq_matrix([[x] for x in vr])
        W = L * Wq * L.transpose()
        v = L * vq
        d = B.nrows()
        return [to_fraction(W[i, j]) for i in range(d) for j in range(d)], [
            to_fraction(v[i, 0]) for i in range(d)
        ]
    Lf = np.array([[float(int(q.p)) / float(int(q.q)) for q in row] for row in L.table()])
    Wf = Lf @ np.array(Wr, dtype=np.float64) @ Lf.T
    vf = Lf @ np.array(vr, dtype=np.float64)
    return Wf.ravel().tolist(), vf.tolist()


def _compare_lifted(
    claimed: Sequence[tuple[list[Any], ...]], lifted: list[tuple[Any, Any]], arith: Arithmetic
) -> None:
    if len(claimed) != len(lifted):
        raise CertificateError(
            f"result.heads claims {len(claimed)} heads, the live subspaces give {len(lifted)}"
        )
    for h, ((W, v, _), (W2, v2)) in enumerate(zip(claimed, lifted, strict=True)):
        for name, a, b in (("W", W, W2), ("v", v, v2)):
            scale = max([1.0, *(abs(float(x)) for x in b)])
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                bad = x != y if arith.name != "float" else abs(x - y) > FLOAT_RTOL * scale
                if bad:
                    raise CertificateError(
                        f"result.heads[{h}].{name} entry {i}: claimed {x}, the re-checked "
                        f"restricted head lifts to {y}"
                    )
