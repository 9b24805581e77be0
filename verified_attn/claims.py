"""The claim registry: every checkable statement of the theory, collected from the rooms.

>>> import verified_attn as va
>>> ids = [c.id for c in va.claims.all_claims()]
>>> "thm-4.1/query-count" in ids
True

Each room declares its claims in ``<room>/claims.py`` as a module-level ``CLAIMS`` list of
:class:`~verified_attn.checks.Claim`; adding a room is one line in :data:`ROOM_MODULES`.

Claims with size support run bigger on request (``size`` a preset name, ``d`` an explicit
size); the others run at their default and say so in ``data["size_note"]``:

>>> [r] = check_claims(["thm-4.1/query-count"], size="small")
>>> r.passed, r.data["size"]
(True, {'d': 8})
>>> [r] = check_claims(["thm-4.1/v-zero"], d=5)
>>> r.data["size"] is None, r.data["size_note"]
(True, 'no size support: ran at its default size')
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace

from verified_attn.checks import SIZE_PRESETS, Claim, ClaimResult
from verified_attn.errors import InvalidArgument
from verified_attn.validation import check_choice, check_int, check_seed, require_size

__all__ = ["NO_SIZE_NOTE", "ROOM_MODULES", "all_claims", "check_claims", "get_claim", "run_claim"]

#: ``data["size_note"]`` of a claim asked for a size it does not have.
NO_SIZE_NOTE = "no size support: ran at its default size"

ROOM_MODULES = [
    "verified_attn.exact_recovery.claims",
    "verified_attn.low_rank.claims",
    "verified_attn.noisy.claims",
    "verified_attn.transformer.claims",
    "verified_attn.transformer.claims_biased",
    "verified_attn.multi_head.claims",
    "verified_attn.hypotheses_claims",
    "verified_attn.soundness_claims",
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


def run_claim(
    claim: Claim, seed: int, params: Mapping[str, int | float] | None = None
) -> ClaimResult:
    """Run one claim (at ``params`` if given), timed; a check that raises is a failure.

    >>> r = run_claim(get_claim("thm-4.1/query-count"), 0, {"d": 3})
    >>> r.passed, r.queries, r.data["size"]
    (True, 12, {'d': 3})
    """
    t0 = time.perf_counter()
    try:
        res = claim.run(seed, params)
    except Exception as exc:  # a crashing check is a failing claim, not a crash
        res = ClaimResult(
            claim.id,
            claim.paper_ref,
            claim.statement,
            passed=False,
            detail=f"check raised {type(exc).__name__}: {exc}",
        )
    data = res.data
    if params is not None:
        data = {**res.data, "size": dict(params)}
    # The registry's id, reference and statement: a check cannot restate them.
    return replace(
        res,
        id=claim.id,
        paper_ref=claim.paper_ref,
        statement=claim.statement,
        seconds=time.perf_counter() - t0,
        data=data,
    )


def _params_for(claim: Claim, size: str | None, d: int | None) -> dict[str, int | float] | None:
    """The size to run ``claim`` at for ``check --size/--d`` (None: its default check)."""
    if size is None and d is None:
        return None
    if not claim.sized or (d is not None and "d" not in (claim.sizes or {})):
        return None
    return claim.size_params(size, d=d)


def check_claims(
    ids: Iterable[str] | None = None,
    *,
    seed: int = 0,
    size: str | None = None,
    d: int | None = None,
    progress: bool = False,
) -> list[ClaimResult]:
    """Run the claims (all, or those with the given ids or id prefixes) and return results.

    An id may be a prefix ending in ``/`` or a theorem name (``thm-4.1``) to select a room.
    A claim whose check raises is reported as failed, with the exception in ``detail``.
    ``size`` (one of :data:`~verified_attn.checks.SIZE_PRESETS`) and ``d`` (an explicit
    size, applied after the preset) run the claims with size support at that size, their
    parameters in ``data["size"]``; the others run at their default and say so
    (``data["size"]`` None, ``data["size_note"]``). Neither given: the default checks.
    ``progress``: show a progress bar on standard error (the CLI does when it is a
    terminal).
    """
    seed = check_seed(seed)
    if size is not None:
        size = check_choice(size, "size", SIZE_PRESETS)
    d = check_int(d, "d", low=1, allow_none=True)
    if d is not None:  # every sized check builds at least one d x d exact model
        require_size(f"checking the claims at d = {d}", numbers=d * d)
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
        chosen: list[Claim] = []
        for want in ids:
            match = [c for c in claims if c.id == want or c.id.startswith(want.rstrip("/") + "/")]
            if not match:
                get_claim(want)  # raises with the list of known ids
            chosen.extend(c for c in match if c not in chosen)
        claims = chosen
    results = []
    for claim in _progress(claims, progress):
        params = _params_for(claim, size, d)
        res = run_claim(claim, seed, params)
        if params is None and (size is not None or d is not None):
            res = replace(res, data={**res.data, "size": None, "size_note": NO_SIZE_NOTE})
        results.append(res)
    return results


def _progress(claims: list[Claim], show: bool) -> Iterable[Claim]:
    if not show:
        return claims
    from tqdm import tqdm

    return tqdm(claims, desc="claims", unit="claim", file=sys.stderr, leave=False)
