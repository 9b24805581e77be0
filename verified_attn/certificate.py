"""Check a learner's certificate without the oracle: dispatch on the theorem it claims.

>>> import verified_attn as va
>>> from verified_attn.certificate import verify_certificate
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1, 2], [0, -1]], [3, 0])))
>>> check = verify_certificate(rec.certificate())
>>> check.ok, check.theorem
(True, 'thm-4.1')
>>> verify_certificate({"format": "verified-attn-certificate/1", "theorem": "thm-0"})
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: unknown theorem 'thm-0'; this version can check: thm-4.1

A certificate is the JSON a :class:`~verified_attn.recovery.Recovery` writes with
:meth:`~verified_attn.recovery.Recovery.certificate`: the exact design, every answer the
oracle gave, the claimed parameters and counts. Each room checks its own theorem's
certificates; adding a room is one line in :data:`VERIFIERS`. Every failure, including a
malformed file, raises :class:`~verified_attn.errors.CertificateError` with the reason.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verified_attn.errors import CertificateError, InvalidArgument

__all__ = ["FORMAT", "VERIFIERS", "CertificateCheck", "load_certificate", "verify_certificate"]

FORMAT = "verified-attn-certificate/1"

#: theorem name -> "module:function"; the function takes the certificate dict and returns
#: a :class:`CertificateCheck` or raises :class:`CertificateError`. Imported lazily so a
#: room's dependencies load only when its certificates are checked.
VERIFIERS: dict[str, str] = {
    "thm-4.1": "verified_attn.exact_recovery.certificate:verify",
}


@dataclass(frozen=True)
class CertificateCheck:
    """A certificate that re-checked: the theorem and what was verified, line by line."""

    ok: bool
    theorem: str
    summary: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = (
            f"certificate OK ({self.theorem})"
            if self.ok
            else f"certificate FAILED ({self.theorem})"
        )
        return "\n".join([head, *(f"  {line}" for line in self.summary)])


def load_certificate(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """The certificate as a dict, from a path or a dict; CertificateError if unreadable.

    >>> load_certificate("/nonexistent/cert.json")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: cannot read certificate '/nonexistent/cert.json': No such file or directory
    """
    if isinstance(source, Mapping):
        return dict(source)
    if not isinstance(source, str | Path):
        raise InvalidArgument(
            f"path_or_dict must be a path or a dict, got {type(source).__name__} {source!r}"
        )
    try:
        text = Path(source).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CertificateError(f"cannot read certificate {str(source)!r}: {reason}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CertificateError(f"certificate {str(source)!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CertificateError(
            f"certificate {str(source)!r} must hold a JSON object, got {type(data).__name__}"
        )
    return data


def verify_certificate(path_or_dict: str | Path | Mapping[str, Any]) -> CertificateCheck:
    """Re-check a certificate (a JSON file path or the dict itself) without any oracle.

    Returns a :class:`CertificateCheck` with ``ok=True`` and a summary; raises
    :class:`CertificateError` naming the first thing that fails.
    """
    data = load_certificate(path_or_dict)
    fmt = data.get("format")
    if fmt != FORMAT:
        raise CertificateError(f"unknown certificate format {fmt!r}; expected {FORMAT!r}")
    theorem = data.get("theorem")
    if theorem not in VERIFIERS:
        known = ", ".join(sorted(VERIFIERS))
        raise CertificateError(f"unknown theorem {theorem!r}; this version can check: {known}")
    return _verifier(theorem)(data)


def _verifier(theorem: str) -> Callable[[dict[str, Any]], CertificateCheck]:
    module, _, name = VERIFIERS[theorem].partition(":")
    return getattr(importlib.import_module(module), name)
