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
import time
from collections.abc import Iterable

from verified_attn.checks import Claim, ClaimResult
from verified_attn.errors import InvalidArgument

__all__ = ["ROOM_MODULES", "all_claims", "check_claims", "get_claim"]

ROOM_MODULES = [
    "verified_attn.exact_recovery.claims",
    "verified_attn.low_rank.claims",
    "verified_attn.noisy.claims",
    "verified_attn.transformer.claims",
    "verified_attn.multi_head.claims",
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


def check_claims(ids: Iterable[str] | None = None, *, seed: int = 0) -> list[ClaimResult]:
    """Run the claims (all, or those with the given ids or id prefixes) and return results.

    An id may be a prefix ending in ``/`` or a theorem name (``thm-4.1``) to select a room.
    A claim whose check raises is reported as failed, with the exception in ``detail``.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")
    claims = all_claims()
    if ids is not None:
        ids = list(ids)
        chosen = []
        for want in ids:
            match = [c for c in claims if c.id == want or c.id.startswith(want.rstrip("/") + "/")]
            if not match:
                get_claim(want)  # raises with the list of known ids
            chosen.extend(c for c in match if c not in chosen)
        claims = chosen
    results = []
    for claim in claims:
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
        results.append(
            ClaimResult(
                res.id,
                res.paper_ref,
                res.statement,
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
