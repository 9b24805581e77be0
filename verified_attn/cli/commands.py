"""The commands of ``verified-attn``: one function per subcommand, returning the exit status.

>>> sorted(COMMANDS)  # doctest: +NORMALIZE_WHITESPACE
['check', 'claims', 'counterexample', 'export-coq', 'hypotheses', 'learn', 'sweep', 'verify-certificate']
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from verified_attn.cli.common import EXIT_FAIL, EXIT_OK, PROG, UsageError, suggest, write_text
from verified_attn.cli.kinds import LEARN_KINDS
from verified_attn.errors import InvalidArgument

__all__ = ["COMMANDS"]


def _unknown_claim_ids(wanted: Sequence[str]) -> None:
    """UsageError for the first id that selects no claim, with "did you mean"."""
    from verified_attn import claims as registry

    ids = [c.id for c in registry.all_claims()]
    prefixes = {i.rsplit("/", k)[0] for i in ids for k in (1, 2) if "/" in i}
    for want in wanted:
        if any(i == want or i.startswith(want.rstrip("/") + "/") for i in ids):
            continue
        hint = suggest(want, [*ids, *sorted(prefixes)]) or (
            f"; `{PROG} claims` lists the {len(ids)} claim ids"
        )
        raise UsageError(f"unknown claim id {want!r}{hint}")


def _cmd_check(args: argparse.Namespace) -> int:
    import time

    from verified_attn.claims import check_claims
    from verified_attn.report import claims_json, claims_markdown, claims_table, claims_verbose

    _unknown_claim_ids(args.ids)
    start = time.perf_counter()
    try:
        results = check_claims(
            args.ids or None,
            seed=args.seed,
            size=args.size,
            d=args.d,
            progress=sys.stderr.isatty(),
        )
    except InvalidArgument as exc:
        raise UsageError(str(exc)) from exc
    to_stdout = args.json == "-"
    out = sys.stderr if to_stdout else sys.stdout  # keep stdout pure JSON
    print(claims_verbose(results) if args.verbose else claims_table(results), file=out)
    if args.size is not None or args.d is not None:
        sized = [r for r in results if r.data.get("size")]
        at = " ".join(f"--{k} {v}" for k, v in (("size", args.size), ("d", args.d)) if v)
        print(
            f"{len(sized)} of {len(results)} claims ran at {at}; the other "
            f"{len(results) - len(sized)} have no size support and ran at their default size",
            file=out,
        )
    print(f"total {time.perf_counter() - start:.1f} s", file=out)
    if args.json is not None:
        data = json.dumps(claims_json(results, seed=args.seed), indent=1) + "\n"
        if to_stdout:
            sys.stdout.write(data)
        else:
            write_text(Path(args.json), data, out)
    if args.markdown is not None:
        write_text(args.markdown, claims_markdown(results), out)
    return EXIT_OK if all(r.passed or r.skipped for r in results) else EXIT_FAIL


def _cmd_claims(args: argparse.Namespace) -> int:
    from verified_attn.claims import all_claims
    from verified_attn.report import claim_list_markdown, claim_list_text, claim_list_verbose

    claims = all_claims()
    if args.markdown:
        print(claim_list_markdown(claims), end="")
    else:
        print(claim_list_verbose(claims) if args.verbose else claim_list_text(claims))
    return EXIT_OK


def _writable(path: Path, what: str) -> None:
    """UsageError unless ``path`` can be written: checked before any query is asked.

    The file is opened for appending (so an existing one is not truncated) and removed
    again if this created it.
    """
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(f"cannot write the {what} to {str(path)!r}: {reason}") from exc
    if not existed:
        path.unlink()


def _certificate_path(args: argparse.Namespace) -> Path | None:
    """Where ``learn`` writes the certificate: --certificate, else (unless --no-certificate
    or --json -, which keeps the current folder clean) certificate-KIND-dN.json here."""
    if args.no_certificate:
        return None
    if args.certificate is not None:
        return Path(args.certificate)
    if args.json == "-":
        return None
    return Path(f"certificate-{args.kind}-d{args.d}.json")


def _cmd_learn(args: argparse.Namespace) -> int:
    from verified_attn.recovery_report import recovery_json, recovery_text

    if args.kind is None:
        raise UsageError("learn needs a model kind: " + ", ".join(LEARN_KINDS))
    kind = LEARN_KINDS[args.kind]
    if (
        kind.arithmetics
        and args.arithmetic is None
        and not (args.kind == "low-rank" and args.method == "nuclear")
    ):
        args.arithmetic = kind.arithmetics[0]
    if args.precision is not None and args.arithmetic not in (None, "certified"):
        raise UsageError("--precision applies to --arithmetic certified only")
    path = _certificate_path(args)
    if path is not None:
        _writable(path, "certificate")
    if args.json not in (None, "-"):
        _writable(Path(args.json), "JSON result")
    outcome = kind.run(args)
    rec = outcome.recovery
    to_stdout = args.json == "-"
    out = sys.stderr if to_stdout else sys.stdout  # keep stdout pure JSON
    text = recovery_text(rec, parameters=args.show_parameters)
    print(text, file=out)
    for line in outcome.comparison:
        print(line, file=out)
    if args.json is not None:
        data = json.dumps(recovery_json(rec), indent=1) + "\n"
        if to_stdout:
            sys.stdout.write(data)
        else:
            write_text(Path(args.json), data, out)
    if path is not None:
        rec.certificate(path)
        print(
            f"certificate written to {path} (check it: {PROG} verify-certificate {path})", file=out
        )
    else:
        print("no certificate written (--certificate F writes one)", file=out)
    return EXIT_OK if outcome.equals_truth is not False else EXIT_FAIL


def _cmd_verify_certificate(args: argparse.Namespace) -> int:
    from verified_attn.certificates import verify_certificate
    from verified_attn.errors import CertificateError

    source: Any = sys.stdin.buffer if args.path == "-" else Path(args.path)
    name = "<stdin>" if args.path == "-" else args.path
    if args.coq and args.path == "-":
        raise UsageError("--coq needs a certificate file, not standard input ('-')")
    try:
        check = verify_certificate(source, max_bytes=args.max_bytes)
    except CertificateError as exc:
        print(f"certificate FAILED: {name}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    print(f"{name}: {check}")
    if args.coq:
        from verified_attn.formal.cli_coq import cmd_verify_coq

        return cmd_verify_coq(argparse.Namespace(path=Path(args.path)))
    return EXIT_OK


def _cmd_counterexample(args: argparse.Namespace) -> int:
    from verified_attn.errors import CertificateError
    from verified_attn.hypotheses import ALIASES, counterexample

    theorem = ALIASES.get(args.theorem, args.theorem)
    kind = args.kind
    if kind is None:
        if theorem != "prop-7.1":
            raise UsageError(
                f"counterexample {args.theorem} needs --kind (see `{PROG} hypotheses`)"
            )
        kind = "shared-score-split"
    options: dict[str, Any] = {}
    for name, applies in (
        ("heads", theorem == "prop-7.1"),
        ("left_out", kind == "one-query-short"),
        ("rank", kind == "rank-exceeds"),
    ):
        value = getattr(args, name)
        if value is not None:
            if not applies:
                raise UsageError(f"--{name.replace('_', '-')} does not apply to {theorem} {kind}")
            options[name] = value
    cx = counterexample(theorem, kind=kind, d=args.d, seed=args.seed, **options)
    pair = cx.payload.get("pair")
    if pair is not None:  # Prop 7.1: the room's report (both models, then the proof)
        from verified_attn.multi_head.counterexamples import counterexample_report

        print(counterexample_report(pair))
    else:
        print(cx.text())
    try:
        lines = cx.explain()
    except CertificateError as exc:
        print(f"check FAILED: {exc}")
        return EXIT_FAIL
    print("check (the counterexample checker, exact where the relation is 'equal'):")
    for line in lines:
        print(f"  {line}")
    if args.json is not None:
        write_text(args.json, json.dumps(cx.certificate(), indent=1) + "\n")
        print(f"check it: {PROG} verify-certificate {args.json}")
    return EXIT_OK


def _cmd_hypotheses(args: argparse.Namespace) -> int:
    from verified_attn.hypotheses import hypotheses, hypotheses_markdown, hypotheses_text

    found = hypotheses(args.theorem)
    print(hypotheses_markdown(found) if args.markdown else hypotheses_text(found), end="")
    return EXIT_OK


def _cmd_sweep(args: argparse.Namespace) -> int:
    from concurrent.futures import ProcessPoolExecutor

    from verified_attn.sweep import check_workers, dask_client, sweep

    _unknown_claim_ids([args.claim])

    def run(executor: Any) -> dict[str, Any]:
        try:
            return sweep(
                args.claim,
                sizes=args.sizes,
                seeds=args.seeds,
                executor=executor,
                progress=sys.stderr.isatty(),
            )
        except InvalidArgument as exc:
            raise UsageError(str(exc)) from exc

    if args.scheduler is not None:
        try:  # the address's form, Dask installed, and a Dask scheduler answering there
            client = dask_client(args.scheduler)
        except InvalidArgument as exc:
            raise UsageError(f"--scheduler: {exc}") from exc
        with client:
            out = run(client.get_executor())
            out["executor"] = f"dask scheduler {args.scheduler}"
            out["dask_workers"] = len(client.scheduler_info().get("workers", {}))
    elif args.workers is not None:
        try:
            workers = check_workers(args.workers)
        except InvalidArgument as exc:
            raise UsageError(f"--workers: {exc}") from exc
        with ProcessPoolExecutor(workers) as pool:
            out = run(pool)
    else:
        out = run(None)
    for c in out["cells"]:
        size = ", ".join(f"{k} = {v}" for k, v in c["size"].items())
        verdict = "PASS" if c["passed"] else "FAIL"
        print(f"{verdict}  {size}, seed {c['seed']}  ({c['seconds']:.2f} s)  {c['detail'][:100]}")
    print(
        f"{out['claim']}: {out['passed']} passed, {out['failed']} failed; "
        f"{out['executor']}, {out['seconds']:.2f} s"
    )
    if not out["versions_agree"]:
        print(f"warning: workers ran other versions: {out['worker_versions']}", file=sys.stderr)
    if args.json is not None:
        write_text(args.json, json.dumps(out, indent=1) + "\n")
    return EXIT_OK if out["all_passed"] else EXIT_FAIL


def _cmd_export_coq(args: argparse.Namespace) -> int:
    from verified_attn.formal.cli_coq import cmd_export_coq

    return cmd_export_coq(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "counterexample": _cmd_counterexample,
    "export-coq": _cmd_export_coq,
    "hypotheses": _cmd_hypotheses,
    "check": _cmd_check,
    "claims": _cmd_claims,
    "learn": _cmd_learn,
    "sweep": _cmd_sweep,
    "verify-certificate": _cmd_verify_certificate,
}
