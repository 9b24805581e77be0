(** * Coq Interval's [interval] tactic over floats with [Z] mantissas.

    The library's default instance computes with primitive 63-bit integers, whose
    specifications are axioms; this instance ([StdZRadix2]) uses [Z] only, so a proof by
    [interval] after [Require Import IntervalZ] rests on the standard reals' axioms alone.
    Import it after [Interval.Tactic] (which provides the [i_prec] options). *)

From Interval Require Import Tactic Specific_ops Specific_stdz.

Module SFZ := SpecificFloat StdZRadix2.
Module ITZ := Tactic.IntervalTactic SFZ.
Export ITZ.
