(** * Exact canonical multi-head runs: the theorems an exported exact run instantiates.

    An exact run of the canonical learner records every answer exactly: a rational (the
    query [b_j]) or a closed form of rationals and exp of rationals (the query
    [b + u; ...; b + u; b] with k copies). An exported file transcribes the answers into
    Coq's reals and proves, query by query, that the certified heads give exactly them
    ([xrecs_gives]: each head's answer is b^T v + u^T v k / (k + exp (- u^T W b)) with its
    numbers checked over Q; the file rewrites every exp of the identity as exp of a
    nonnegative rational, or its inverse, and closes it with [field], each exp an atom).

    [mh_exact_masses] (every d, H0): every model of at most H0 heads giving exactly those
    answers has, at every pair of the design, the certified heads' residue sum at every
    score (the interpolation step, [CertMultiHeadId.mh_masses_determined]).
    [mh_exact_identified] (every d, H0): when the run's H0 certified heads pass the
    labelling checks over Q (generic scores, unambiguous links, no ties:
    [CertMultiHeadLabel.mh_identified]), every such model gives the certified model's
    output on every sequence of every length.

    No denominator bound is assumed: the answers are exact. *)

From Coq Require Import Reals QArith Qreals Lra List.
From VerifiedAttn Require Import Defs CertHead CertMultiHead CertMultiHeadId CertMultiHeadLabel.
Import ListNotations.
Open Scope R_scope.

(** A model gives the answers [ys] to the run's learning queries, in order. *)
Definition gives (C : mh_run) (hs : list head) (ys : list R) : Prop :=
  Forall2 (fun q y => mh_answer (md C) hs q = y)
    (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) ys.

Lemma gives_same : forall C hs1 hs2 ys, gives C hs1 ys -> gives C hs2 ys ->
  same_answers C hs1 hs2.
Proof.
  intros C hs1 hs2. unfold gives, same_answers.
  generalize (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) as qs.
  induction qs as [|q qs IH]; intros ys G1 G2; [constructor|].
  inversion G1 as [|? y ? ys' E1 R1]; subst. inversion G2 as [|? ? ? ? E2 R2]; subst.
  constructor; [congruence|]. exact (IH _ R1 R2).
Qed.

(** ** The recorded answers with the certified heads' numbers, checked over Q. *)

(** A recorded answer: per head (b^T v_h, u^T v_h, u^T W_h b), and the answer itself. *)
Definition xrec := (list (Q * Q * Q) * R)%type.

Fixpoint check_xrecs (d : nat) (hs : list (qmat * qvec)) (qs : list (qvec * qvec * nat))
  (rs : list xrec) : bool :=
  match qs, rs with
  | [], [] => true
  | q :: qs, r :: rs => terms_eqb (map (term_of d q) hs) (fst r) && check_xrecs d hs qs rs
  | _, _ => false
  end.

(** What a file proves per query: the recorded terms' sum is the recorded answer. *)
Definition xhold (C : mh_run) (rs : list xrec) : Prop :=
  Forall2 (fun q r => tsum (INR (snd q)) (fst r) = snd r)
    (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) rs.

Theorem xrecs_gives : forall C rs,
  check_xrecs (md C) (mheads C) (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) rs = true ->
  xhold C rs -> gives C (rheads (mheads C)) (map snd rs).
Proof.
  intros C. unfold xhold, gives.
  generalize (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) as qs.
  induction qs as [|q qs IH]; intros [|r rs'] H F; simpl in H; try discriminate.
  - constructor.
  - apply andb_true_iff in H as [Ht Hr]. inversion F as [|? ? ? ? Hi Hrest]; subst.
    constructor; [|apply IH; assumption].
    rewrite mh_answer_terms, (terms_eqb_tsum _ _ _ Ht). exact Hi.
Qed.

(** ** Rewriting the exps of an answer: exp of a nonnegative rational, or its inverse. *)

Lemma exp_opp_q : forall m s, Qeq_bool (- m) s = true -> exp (- Q2R m) = exp (Q2R s).
Proof.
  intros m s H. apply qeq_spec in H. rewrite <- H, Q2R_opp. reflexivity.
Qed.

Lemma exp_neg_q : forall r s, Qeq_bool r (- s) = true -> exp (Q2R r) = / exp (Q2R s).
Proof.
  intros r s H. apply qeq_spec in H. rewrite H, Q2R_opp, exp_Ropp. reflexivity.
Qed.

Lemma exp_zero_q : forall r, Qeq_bool r 0 = true -> exp (Q2R r) = 1.
Proof.
  intros r H. apply qeq_spec in H. rewrite H. unfold Q2R. simpl. rewrite Rmult_0_l.
  apply exp_0.
Qed.

Ltac mh_pos :=
  repeat first [ assumption | apply exp_pos | apply Rplus_lt_0_compat
               | apply Rplus_le_lt_0_compat; [lra|] | apply Rmult_lt_0_compat | apply Rinv_0_lt_compat | apply pow_lt | lra ].

(** Closes an answer's identity once its exps are atoms: [field], each denominator a sum
    of positive terms. *)
Ltac mh_close :=
  unfold Q2R; cbn [Qnum Qden]; field; repeat split; try (apply Rgt_not_eq, Rlt_gt; mh_pos).

(** ** The theorems. *)

Theorem mh_exact_masses : forall C rs (hs' : list head),
  check_xrecs (md C) (mheads C) (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) rs = true ->
  xhold C rs -> (length (mheads C) <= mH0 C)%nat -> (length hs' <= mH0 C)%nat ->
  gives C hs' (map snd rs) -> same_masses C hs' (rheads (mheads C)).
Proof.
  intros C rs hs' Hc Hh Hl Hl' G.
  apply mh_masses_determined; [exact Hl' | unfold rheads; rewrite map_length; exact Hl |].
  apply (gives_same C hs' (rheads (mheads C)) (map snd rs)); [exact G|].
  apply xrecs_gives; assumption.
Qed.

Theorem mh_exact_identified : forall C (Uinv Binv : qmat) rs (hs' : list head),
  check_xrecs (md C) (mheads C) (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) rs = true ->
  xhold C rs ->
  check_inverse (md C) Uinv (mU C) = true -> check_inverse (md C) Binv (mB C) = true ->
  (0 < md C)%nat -> check_generic C = true -> length (mheads C) = mH0 C ->
  link_check (md C) (mU C) (mB C) (mheads C) = true ->
  row_check (md C) (mU C) (mB C) (mheads C) = true ->
  (length hs' <= mH0 C)%nat -> gives C hs' (map snd rs) ->
  forall N X, multi_head (md C) N X hs' = multi_head (md C) N X (rheads (mheads C)).
Proof.
  intros C Uinv Binv rs hs' Hc Hh HU HB Hd G Hl L R Hl' E.
  apply (mh_identified C Uinv Binv); try assumption.
  apply (gives_same C hs' (rheads (mheads C)) (map snd rs)); [exact E|].
  apply xrecs_gives; assumption.
Qed.
