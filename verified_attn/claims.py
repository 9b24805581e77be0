"""The claim registry: every checkable statement of the theory, collected from the rooms.

>>> import verified_attn as va
>>> ids = [c.id for c in va.claims.all_claims()]
>>> "thm-4.1/query-count" in ids
True

Each room declares its claims in ``<room>/claims.py`` as a module-level ``CLAIMS`` list of
:class:`~verified_attn.checks.Claim`; adding a room is one line in :data:`ROOM_MODULES`.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterable

from verified_attn.checks import Claim, ClaimResult
from verified_attn.errors import InvalidArgument
from verified_attn.validation import check_seed

__all__ = ["ROOM_MODULES", "all_claims", "check_claims", "get_claim"]

ROOM_MODULES = [
    "verified_attn.exact_recovery.claims",
    "verified_attn.low_rank.claims",
    "verified_attn.noisy.claims",
    "verified_attn.transformer.claims",
    "verified_attn.multi_head.claims",
    "verified_attn.hypotheses_claims",
    "verified_attn.formal.claims",
]


def all_claims() -> list[Claim]:
    """Every registered claim, in registry order (rooms in :data:`ROOM_MODULES` order)."""
    out: list[Claim] = []
    seen: set[str] = set()
    for name in ROOM_MODULES:
        for claim in importlib.import_module(name).CLAIMS:
            if claim.id in seen:
                raise RuntimeError(f"duplicate claim id {claim.id!r} in {name}")
            seen.add(claim.id)
            out.append(claim)
    return out


def get_claim(claim_id: str) -> Claim:
    """The claim with this id; InvalidArgument naming the known ids otherwise."""
    for claim in all_claims():
        if claim.id == claim_id:
            return claim
    known = ", ".join(c.id for c in all_claims())
    raise InvalidArgument(f"unknown claim id {claim_id!r}; known ids: {known}")


def check_claims(
    ids: Iterable[str] | None = None, *, seed: int = 0, progress: bool = False
) -> list[ClaimResult]:
    """Run the claims (all, or those with the given ids or id prefixes) and return results.

    An id may be a prefix ending in ``/`` or a theorem name (``thm-4.1``) to select a room.
    A claim whose check raises is reported as failed, with the exception in ``detail``.
    ``progress``: show a progress bar on standard error (the CLI does when it is a
    terminal).
    """
    seed = check_seed(seed)
    claims = all_claims()
    if ids is not None:
        if isinstance(ids, str):
            ids = [ids]  # one id, not its characters
        try:
            ids = list(ids)
        except TypeError:
            raise InvalidArgument(f"ids must be claim ids (strings), got {ids!r}") from None
        bad = [i for i in ids if not isinstance(i, str)]
        if bad:
            raise InvalidArgument(f"ids must be claim ids (strings), got {bad[0]!r}")
        chosen = []
        for want in ids:
            match = [c for c in claims if c.id == want or c.id.startswith(want.rstrip("/") + "/")]
            if not match:
                get_claim(want)  # raises with the list of known ids
            chosen.extend(c for c in match if c not in chosen)
        claims = chosen
    results = []
    for claim in _progress(claims, progress):
        t0 = time.perf_counter()
        try:
            res = claim.check(seed)
        except Exception as exc:  # a crashing check is a failing claim, not a crash
            res = ClaimResult(
                claim.id,
                claim.paper_ref,
                claim.statement,
                passed=False,
                detail=f"check raised {type(exc).__name__}: {exc}",
            )
        elapsed = time.perf_counter() - t0
        # The registry's id, reference and statement: a check cannot restate them.
        results.append(
            ClaimResult(
                claim.id,
                claim.paper_ref,
                claim.statement,
                res.passed,
                res.detail,
                res.queries,
                res.bound,
                elapsed,
                res.data,
                res.skipped,
            )
        )
    return results


def _progress(claims: list[Claim], show: bool) -> Iterable[Claim]:
    if not show:
        return claims
    from tqdm import tqdm

    return tqdm(claims, desc="claims", unit="claim", file=sys.stderr, leave=False)
