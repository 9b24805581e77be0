"""Reading a certificate's bytes with a size cap, before any parsing.

>>> import io
>>> read_bounded(io.BytesIO(b'{"kind": "x"}'), "stdin", max_bytes=100)
'{"kind": "x"}'
>>> read_bounded(io.BytesIO(b"x" * 101), "stdin", max_bytes=100)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: certificate 'stdin' is larger than max_bytes = 100 bytes; raise max_bytes (verify-certificate --max-bytes N) to read it

A path must name a regular file: its size is checked with ``stat`` before it is opened,
and a device (``/dev/zero``), a FIFO, a socket or a directory is refused at once, so that
nothing reads without end or waits for a writer; pipe such a stream to standard input
instead (``verify-certificate -``), where the bytes are read in bounded chunks and
refused as soon as they pass the cap.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from verified_attn.errors import CertificateError, InvalidArgument

__all__ = ["MAX_FILE_BYTES", "read_bounded", "read_path"]

#: The default cap on a certificate's size in bytes (256 MiB). The largest certificates
#: the benchmarks write are the float skeleton ones at d = 768 (about 61 MB).
MAX_FILE_BYTES = 256 << 20

_CHUNK = 1 << 20

_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _too_large(name: str, max_bytes: int) -> CertificateError:
    return CertificateError(
        f"certificate {name!r} is larger than max_bytes = {max_bytes} bytes; raise max_bytes "
        "(verify-certificate --max-bytes N) to read it"
    )


def read_bounded(stream: BinaryIO, name: str, *, max_bytes: int) -> str:
    """The UTF-8 text of ``stream``, read in chunks; CertificateError past ``max_bytes``."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = stream.read(min(_CHUNK, max_bytes + 1 - total))
        if not chunk:
            break
        if not isinstance(chunk, bytes):
            raise InvalidArgument(
                f"the certificate stream {name!r} must be binary (open(path, 'rb'), "
                f"sys.stdin.buffer), got {type(chunk).__name__} chunks"
            )
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise _too_large(name, max_bytes)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CertificateError(f"cannot read certificate {name!r}: {exc}") from exc


def read_path(path: str | Path, *, max_bytes: int) -> str:
    """The text of the regular file ``path``, its size checked before it is read.

    >>> read_path("/dev/null", max_bytes=10)
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: certificate '/dev/null' is a character device, not a regular file; to check a stream, pipe it to standard input (verify-certificate -)
    """
    name = str(path)
    try:
        _check_regular(os.stat(path), name, max_bytes)
        # O_NONBLOCK: should the path become a FIFO after the stat, opening does not wait.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as stream:
            _check_regular(os.fstat(stream.fileno()), name, max_bytes)
            return read_bounded(stream, name, max_bytes=max_bytes)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CertificateError(f"cannot read certificate {name!r}: {reason}") from exc


def _check_regular(st: os.stat_result, name: str, max_bytes: int) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise CertificateError(f"cannot read certificate {name!r}: it is a directory")
    for test, what in _KINDS:
        if test(st.st_mode):
            raise CertificateError(
                f"certificate {name!r} is {what}, not a regular file; to check a stream, "
                "pipe it to standard input (verify-certificate -)"
            )
    if not stat.S_ISREG(st.st_mode):
        raise CertificateError(f"certificate {name!r} is not a regular file")
    if st.st_size > max_bytes:
        raise _too_large(name, max_bytes)
