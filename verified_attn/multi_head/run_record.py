"""What a multi-head learner's finished run reports, whatever its method: the header of its
certificate and the fields of its :class:`~verified_attn.recovery.MultiHeadRecovery` that
come from the run (arithmetic, seed, counts, bound, verification, assumptions).

>>> import verified_attn as va
>>> oracle = va.Oracle(va.SingleHeadAttention([[1]], [2]), "exact")
>>> with oracle.run() as run:
...     _ = oracle.query([[1]])
>>> record = RunRecord(oracle.arithmetic, 0, run.counts, 1, None, [])
>>> cert = record.certificate(1, "canonical", {"affine": False})
>>> cert["kind"], cert["method"], cert["affine"], cert["verification"]["count"]
('multi-head', 'canonical', False, 0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verified_attn.certificates import writer
from verified_attn.multi_head.canonical_bounds import THEOREM
from verified_attn.recovery import MultiHeadRecovery

__all__ = ["RunRecord"]


@dataclass(frozen=True)
class RunRecord(writer.RunRecord):
    """A finished run (the certificates' :class:`~verified_attn.certificates.writer.RunRecord`:
    arithmetic, seed, the oracle's counts, the learning bound it was held to, its
    verification, None for ``verify=0``, and the assumptions its result rests on), with the
    multi-head certificate and result built from it.

    >>> import verified_attn as va
    >>> oracle = va.Oracle(va.SingleHeadAttention([[1]], [2]), "exact")
    >>> with oracle.run() as run:
    ...     _ = oracle.query([[1]])
    >>> record = RunRecord(oracle.arithmetic, 0, run.counts, 6, None, [])
    >>> rec = record.recovery(method="canonical", learned_model=None, parameters={},
    ...                       exact=True, parameter_count=2, rounds=1, notes=[])
    >>> rec.queries, rec.bound, rec.verified
    (1, 6, False)
    """

    def certificate(self, d: int, method: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The multi-head certificate's data: the common header, ``method``, then ``fields``."""
        data = self.header("multi-head", THEOREM, d)
        data.update({"method": method, **fields})
        return data

    def recovery(self, *, method: str, learned_model: Any, **fields: Any) -> MultiHeadRecovery:
        """The run's result: ``fields`` are the method's own (parameters, exact,
        parameter_count, rounds, notes, certificate_data)."""
        return MultiHeadRecovery.from_record(
            self, theorem=THEOREM, method=method, learned_model=learned_model, **fields
        )
