"""The command line's Coq commands: ``export-coq`` and ``verify-certificate --coq``.

>>> import argparse
>>> sub = argparse.ArgumentParser(prog="verified-attn").add_subparsers(dest="command")
>>> add_export_parser(sub).prog
'verified-attn export-coq'
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_export_parser", "cmd_export_coq", "cmd_verify_coq"]

EXIT_OK, EXIT_FAIL = 0, 1


def add_export_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``export-coq CERT.json -o CERT.v`` to a subparsers object."""
    p = sub.add_parser(
        "export-coq", help="write a Coq file proving a theorem about a certificate's run"
    )
    p.add_argument("path", metavar="F", type=Path, help="certificate JSON file")
    p.add_argument("-o", "--output", type=Path, required=True, help="the .v file to write")
    return p


def cmd_export_coq(args: argparse.Namespace) -> int:
    """Write the Coq file; exit 1 with the reason if the certificate cannot be exported."""
    from verified_attn.errors import CertificateError
    from verified_attn.formal.coq_check import theorem_of
    from verified_attn.formal.export import export_coq

    try:
        text = export_coq(args.path, args.output)
    except CertificateError as exc:
        print(f"export FAILED: {args.path}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    print(
        f"wrote {args.output}: theorem {theorem_of(text)} (check it: coqc -R formal VerifiedAttn "
        f"{args.output}, or verified-attn verify-certificate {args.path} --coq)"
    )
    return EXIT_OK


def cmd_verify_coq(args: argparse.Namespace) -> int:
    """Export and compile with coqc; report the theorem checked, or what to install."""
    from verified_attn import formal
    from verified_attn.errors import CertificateError
    from verified_attn.formal.coq_check import check_with_coq

    if not formal.coq_available():
        print(
            f"Coq is not available (coqc or formal/ missing); install it with: "
            f"{formal.COQ_INSTALL_HINT}",
            file=sys.stderr,
        )
        return EXIT_FAIL
    try:
        result = check_with_coq(args.path)
    except CertificateError as exc:
        print(f"export FAILED: {args.path}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    print(f"{args.path}: {result}")
    return EXIT_OK if result.ok else EXIT_FAIL
