"""Prop 7.1's canonical form in Coq: same canonical form, same map; a weaker hypothesis fails.

``canonical_same_map`` (formal/Canonical.v) compares the summed v per W over the heads of
*both* models; asking it only for the W of the first model's heads makes the statement
false (a second model with one extra live head), and the proof no longer goes through.
"""

from __future__ import annotations

from coq_text import compiles, needs_coq

PRELUDE = (
    "From Coq Require Import Reals Lra Lia List.\n"
    "From VerifiedAttn Require Import Defs Prop71 Canonical.\n"
    "Import ListNotations.\nOpen Scope R_scope.\n"
)

VARIANT = """
Theorem variant : forall d (hs hs' : list head),
  (forall W v, In (W, v) {SIDE} -> forall i, (i < d)%nat -> vsum d hs W i = vsum d hs' W i) ->
  forall N X, multi_head d N X hs = multi_head d N X hs'.
Proof. intros d hs hs' H. apply canonical_same_map. exact H. Qed.
"""


def _compiles(body: str) -> bool:
    return compiles(PRELUDE, body)


@needs_coq
def test_canonical_form_needs_both_models_heads() -> None:
    assert _compiles(VARIANT.replace("{SIDE}", "(hs ++ hs')"))
    assert not _compiles(VARIANT.replace("{SIDE}", "hs"))
    assert not _compiles(VARIANT.replace("{SIDE}", "hs'"))
