"""Reading a certificate: a size cap before parsing, regular files only, standard input.

The hostile sources (/dev/zero, a 2 GB sparse file, a FIFO nobody writes to, an endless
standard input) run in a subprocess under an address-space cap and a timeout: reading
without a bound fails with MemoryError, waiting for a writer with the timeout.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import verified_attn as va
from verified_attn.certificates import MAX_FILE_BYTES, load_certificate
from verified_attn.cli import main
from verified_attn.errors import CertificateError, InvalidArgument

ROOT = Path(__file__).resolve().parent.parent
MEMORY_CAP = 1_200_000_000  # bytes of address space: enough for the imports, not for 4 GB
TIMEOUT = 90  # seconds: a shared, busy machine; a hang would be forever

_CAPPED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from verified_attn.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def capped(*argv: str, stdin: int | None = None) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _CAPPED.format(cap=MEMORY_CAP), *argv],
        cwd=ROOT,
        env=env,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return proc, time.perf_counter() - start


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> Path:
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1, 2], [0, -1]], [3, 0])))
    path = tmp_path_factory.mktemp("cert") / "c.json"
    rec.certificate(path)
    return path


def test_dev_zero_is_refused_at_once() -> None:
    proc, _ = capped("verify-certificate", "/dev/zero")
    assert proc.returncode == 1, proc.stderr
    assert "'/dev/zero' is a character device, not a regular file" in proc.stderr
    assert "verify-certificate -" in proc.stderr and "Traceback" not in proc.stderr


def test_sparse_2gb_file_is_refused_by_its_size(tmp_path) -> None:
    path = tmp_path / "sparse.json"
    with open(path, "wb") as f:
        f.truncate(2 << 30)
    proc, _ = capped("verify-certificate", str(path))
    assert proc.returncode == 1, proc.stderr
    assert f"is larger than max_bytes = {MAX_FILE_BYTES} bytes" in proc.stderr
    assert "--max-bytes N" in proc.stderr


def test_fifo_with_no_writer_is_refused_not_waited_for(tmp_path) -> None:
    fifo = tmp_path / "cert.fifo"
    os.mkfifo(fifo)
    proc, _ = capped("verify-certificate", str(fifo))
    assert proc.returncode == 1, proc.stderr
    assert "is a FIFO (named pipe), not a regular file" in proc.stderr


@pytest.mark.parametrize("max_bytes", [None, "1000000"])
def test_endless_stdin_is_cut_at_the_cap(max_bytes) -> None:
    argv = ["verify-certificate", "-"] + (["--max-bytes", max_bytes] if max_bytes else [])
    with open("/dev/zero", "rb") as zero:
        proc, _ = capped(*argv, stdin=zero.fileno())
    assert proc.returncode == 1, proc.stderr
    cap = max_bytes or str(MAX_FILE_BYTES)
    assert f"certificate '<stdin>' is larger than max_bytes = {cap} bytes" in proc.stderr


def test_stdin_certificate_verifies(certificate) -> None:
    with open(certificate, "rb") as f:
        proc, _ = capped("verify-certificate", "-", stdin=f.fileno())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("<stdin>: certificate OK (single-head, thm-4.1)")


def test_stdin_in_process(capsys, monkeypatch, certificate) -> None:
    class Stdin:
        buffer = io.BytesIO(certificate.read_bytes())

    monkeypatch.setattr(sys, "stdin", Stdin)
    assert main(["verify-certificate", "-"]) == 0
    assert "<stdin>: certificate OK (single-head" in capsys.readouterr().out


def test_the_cap_is_exact_and_can_be_raised(capsys, certificate) -> None:
    size = certificate.stat().st_size
    assert load_certificate(certificate, max_bytes=size)["kind"] == "single-head"
    with pytest.raises(CertificateError, match=f"larger than max_bytes = {size - 1} bytes"):
        load_certificate(certificate, max_bytes=size - 1)
    stream = io.BytesIO(certificate.read_bytes())
    assert load_certificate(stream, max_bytes=size)["kind"] == "single-head"
    with pytest.raises(CertificateError, match="larger than max_bytes"):
        va.verify_certificate(io.BytesIO(certificate.read_bytes()), max_bytes=size - 1)
    assert main(["verify-certificate", str(certificate), "--max-bytes", str(size - 1)]) == 1
    assert "larger than max_bytes" in capsys.readouterr().err
    assert main(["verify-certificate", str(certificate), "--max-bytes", str(size)]) == 0


def test_default_cap_is_256_mib() -> None:
    assert MAX_FILE_BYTES == 256 * 1024 * 1024


def test_bad_sources_and_caps(tmp_path, certificate) -> None:
    with pytest.raises(InvalidArgument, match="max_bytes"):
        load_certificate(certificate, max_bytes=0)
    with pytest.raises(InvalidArgument, match="must be binary"):
        load_certificate(io.StringIO(certificate.read_text()))
    with pytest.raises(InvalidArgument, match="a path or a dict \\(or a binary stream\\)"):
        load_certificate(42)  # type: ignore[arg-type]
    with pytest.raises(CertificateError, match="it is a directory"):
        load_certificate(tmp_path)
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"kind": "\xff"}')
    with pytest.raises(CertificateError, match="cannot read certificate"):
        load_certificate(bad)
    not_object = tmp_path / "list.json"
    not_object.write_text(json.dumps([1]))
    with pytest.raises(CertificateError, match="must hold a JSON object"):
        load_certificate(not_object)


def test_refusals_are_quick_in_process(tmp_path) -> None:
    # The figures the docs quote: each hostile source is refused without reading it.
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:
        f.truncate(2 << 30)
    fifo = tmp_path / "f.fifo"
    os.mkfifo(fifo)
    for source in ("/dev/zero", sparse, fifo):
        errors: list[BaseException] = []

        def load(source: object = source, errors: list[BaseException] = errors) -> None:
            try:
                load_certificate(source)  # type: ignore[arg-type]
            except BaseException as exc:  # the refusal, or a MemoryError
                errors.append(exc)

        # A daemon thread: a reader that waits for the FIFO's writer cannot hang the suite.
        worker = threading.Thread(target=load, daemon=True)
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive(), f"{source}: still reading after 10 s"
        assert len(errors) == 1 and isinstance(errors[0], CertificateError), errors
