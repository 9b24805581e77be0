"""Check any certificate without the oracle: dispatch on the kind of result it claims.

>>> import verified_attn as va
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1, 2], [0, -1]], [3, 0])))
>>> check = va.verify_certificate(rec.certificate())
>>> check.ok, check.kind, check.theorem
(True, 'single-head', 'thm-4.1')
>>> va.verify_certificate({"format": "verified-attn-certificate/2", "kind": "thm-0"})
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: unknown kind 'thm-0'; this version can check: counterexample, labels, low-rank, multi-head, noisy, relu-ffn, relu-ffn-biased, single-head, transformer, transformer-biased, transformer-heads, transformer-heads-float

A certificate is the JSON a result writes with ``certificate()``: the queries (or the
seed and rule that determine them), every answer exactly as the oracle gave it, the
tolerance and assumptions in force, the claimed result and the counts. Each kind has its
own checker module here, next to the shared :mod:`~verified_attn.certificates.kernel`;
a checker uses the core arithmetic and models, never its learner's code. Every failure,
including a malformed or hostile file, raises
:class:`~verified_attn.errors.CertificateError` naming the field.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from verified_attn.certificates.kernel import FORMAT, loads
from verified_attn.certificates.reading import MAX_FILE_BYTES, read_bounded, read_path
from verified_attn.errors import CertificateError, InvalidArgument, VerifiedAttnError
from verified_attn.serialize import short_repr
from verified_attn.validation import check_int

__all__ = [
    "FORMAT",
    "MAX_FILE_BYTES",
    "VERIFIERS",
    "CertificateCheck",
    "load_certificate",
    "verify_certificate",
]

#: kind -> "module:function"; the function takes the certificate dict and returns a
#: :class:`CertificateCheck` or raises :class:`CertificateError`. Imported lazily so a
#: kind's dependencies load only when its certificates are checked.
VERIFIERS: dict[str, str] = {
    "single-head": "verified_attn.certificates.single_head:verify",
    "low-rank": "verified_attn.certificates.low_rank:verify",
    "noisy": "verified_attn.certificates.noisy:verify",
    "labels": "verified_attn.certificates.labels:verify",
    "multi-head": "verified_attn.certificates.multi_head:verify",
    "transformer": "verified_attn.certificates.transformer:verify",
    "relu-ffn": "verified_attn.certificates.transformer:verify_relu_ffn",
    "relu-ffn-biased": "verified_attn.certificates.relu_biased:verify",
    "transformer-biased": "verified_attn.certificates.transformer_biased:verify",
    "transformer-heads": "verified_attn.certificates.transformer_heads:verify",
    "transformer-heads-float": "verified_attn.certificates.transformer_heads_float:verify",
    "counterexample": "verified_attn.certificates.counterexample:verify",
}


@dataclass(frozen=True)
class CertificateCheck:
    """A certificate that re-checked: the theorem and what was verified, line by line."""

    ok: bool
    kind: str
    theorem: str
    summary: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = (
            f"certificate OK ({self.kind}, {self.theorem})"
            if self.ok
            else f"certificate FAILED ({self.kind}, {self.theorem})"
        )
        return "\n".join([head, *(f"  {line}" for line in self.summary)])


def load_certificate(
    source: str | Path | Mapping[str, Any] | BinaryIO, *, max_bytes: int = MAX_FILE_BYTES
) -> dict[str, Any]:
    """The certificate as a dict, from a path, a binary stream or a dict.

    A path must be a regular file of at most ``max_bytes`` bytes (default
    :data:`MAX_FILE_BYTES`, 256 MiB), checked before it is read; a stream (such as
    ``sys.stdin.buffer``) is read in bounded chunks and refused past ``max_bytes``.
    CertificateError if unreadable, too large or not a JSON object.

    >>> load_certificate("/nonexistent/cert.json")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: cannot read certificate '/nonexistent/cert.json': No such file or directory
    """
    if isinstance(source, Mapping):
        return dict(source)
    max_bytes = check_int(max_bytes, "max_bytes", low=1)
    if isinstance(source, str | Path):
        text = read_path(source, max_bytes=max_bytes)
    elif callable(getattr(source, "read", None)):
        name = str(getattr(source, "name", "<stream>"))
        try:
            text = read_bounded(source, name, max_bytes=max_bytes)
        except OSError as exc:
            raise CertificateError(f"cannot read certificate {name!r}: {exc}") from exc
        source = name
    else:
        raise InvalidArgument(
            "path_or_dict must be a path or a dict (or a binary stream), got "
            f"{type(source).__name__} {short_repr(source)}"
        )
    try:
        data = loads(text)  # strict: a key twice in one object is refused
    except (ValueError, RecursionError) as exc:  # ValueError: also ints past 4300 digits
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise CertificateError(f"certificate {str(source)!r} is not valid JSON: {reason}") from exc
    if not isinstance(data, dict):
        raise CertificateError(
            f"certificate {str(source)!r} must hold a JSON object, got {type(data).__name__}"
        )
    return data


def verify_certificate(
    path_or_dict: str | Path | Mapping[str, Any] | BinaryIO, *, max_bytes: int = MAX_FILE_BYTES
) -> CertificateCheck:
    """Re-check a certificate (a JSON file path, a binary stream or the dict) without any oracle.

    Returns a :class:`CertificateCheck` with ``ok=True`` and a summary; raises
    :class:`CertificateError` naming the first thing that fails. A file or stream larger
    than ``max_bytes`` (default :data:`MAX_FILE_BYTES`, 256 MiB) is refused before it is
    parsed (see :func:`load_certificate`).
    """
    data = load_certificate(path_or_dict, max_bytes=max_bytes)
    fmt = data.get("format")
    if fmt != FORMAT:
        raise CertificateError(
            f"unknown certificate format {short_repr(fmt)[:80]}; expected {FORMAT!r}"
        )
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in VERIFIERS:
        known = ", ".join(sorted(VERIFIERS))
        raise CertificateError(
            f"unknown kind {short_repr(kind)[:80]}; this version can check: {known}"
        )
    try:
        return _verifier(kind)(data)
    except CertificateError:
        raise
    except RecursionError as exc:
        raise CertificateError("the certificate is nested too deeply") from exc
    except VerifiedAttnError as exc:  # a core check refusing a stored value
        raise CertificateError(f"{kind} certificate: {exc}") from exc


def _verifier(kind: str) -> Callable[[dict[str, Any]], CertificateCheck]:
    module, _, name = VERIFIERS[kind].partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:  # a registered checker not installed
        raise CertificateError(f"no checker for kind {kind!r} in this installation") from exc
