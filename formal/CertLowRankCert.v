(** * Certified low-rank (skeleton) certificates: the theorem an exported run instantiates.

    A certified skeleton run records, for each length-1 query [e_i], an interval holding
    the answer v_i, and for each learning probe [b + t u; b] an interval holding its
    answer b^T v + sigmoid (t u^T W b) t u^T v. [lowrank_cert_identified] says, for every
    d and r: if the exact skeleton checks of [CertLowRank.check_lowrank] pass on the
    certified rationals (W, v) and their measurements m = u^T W b, the finite checks of
    [check_lrcert] pass (each v_i is the only rational of denominator at most D in its
    interval; each probe's logit bracket [mlo, mhi] holds m and is narrower than 1/(D b)
    for b the denominator of m), and the per-probe inequalities about exp hold
    ([lr_bracketed], [lr_hold], proved in the exported file by [interval]), then the
    certified head answers inside every recorded interval, and every head (W', v') whose
    columns are spanned by W' B, whose v' entries and recorded measurements u^T W' b are
    rationals with denominators at most D, and that answers inside the recorded intervals,
    is the certified one. Each answer interval pins u^T W' b inside its bracket
    ([CertHead.brackets_spec]), the denominator bound pins it to m ([unique_in_spec]), and
    [CertLowRank.lowrank_W] (from [Skeleton.skeleton_determines]) does the rest. *)

From Coq Require Import Reals QArith Qreals Lra Lia List Bool.
From VerifiedAttn Require Import Defs Softmax CertHead CertLowRank.
Import ListNotations.
Open Scope R_scope.

(** A recorded probe: the exact probe (u, b, m), its role, its scale t, the recorded
    answer interval [lo, hi], a logit bracket [mlo, mhi], and a = b^T v, s = t u^T v. *)
Record cprobe := {
  cpr : probe; crole : role; cpt : Q; cplo : Q; cphi : Q;
  cpmlo : Q; cpmhi : Q; cpa : Q; cps : Q }.

Definition query_p (p : cprobe) : tokens :=
  seq2 (vadd (rvec (pb (cpr p))) (vscale (Q2R (cpt p)) (rvec (pu (cpr p)))))
       (rvec (pb (cpr p))).

(** The head answers [e_i] inside [vlo i, vhi i] and each probe inside [lo, hi]. *)
Definition answers_in_lr (d : nat) (vlo vhi : qvec) (ps : list cprobe) (W : mat) (v : vec)
  : Prop :=
  (forall i, (i < d)%nat -> inside (vlo i) (vhi i) (attention d 1 (query_v i) W v)) /\
  Forall (fun p => inside (cplo p) (cphi p) (attention d 2 (query_p p) W v)) ps.

(** The assumption on a head: its recorded measurements u^T W b are rationals with
    denominators at most D. *)
Definition measures_den_le (D : positive) (d : nat) (W : mat) (ps : list cprobe) : Prop :=
  Forall (fun p => den_le D (measure d W (rvec (pu (cpr p))) (rvec (pb (cpr p))))) ps.

Definition check_cprobe (D : positive) (d : nat) (v : qvec) (p : cprobe) : bool :=
  qlt 0 (cpt p) && Qeq_bool (cpa p) (qsum d (fun i => pb (cpr p) i * v i)%Q) &&
  Qeq_bool (cps p) (cpt p * qsum d (fun i => pu (cpr p) i * v i))%Q &&
  unique_in D (cpmlo p) (cpmhi p) (pm (cpr p)).

Definition check_lrcert (D : positive) (d : nat) (vlo vhi v : qvec) (ps : list cprobe) : bool :=
  all_lt d (fun i => unique_in D (vlo i) (vhi i) (v i) && den_ok D (v i)) &&
  forallb (check_cprobe D d v) ps.

(** The inequalities about exp, one pair per probe ([interval] proves them in a run). *)
Definition lr_bracketed (ps : list cprobe) : Prop :=
  Forall (fun p => brackets (Q2R (cpa p)) (Q2R (cps p)) (Q2R (cpt p))
                     (Q2R (cplo p)) (Q2R (cphi p)) (Q2R (cpmlo p)) (Q2R (cpmhi p))) ps.

Definition lr_hold (ps : list cprobe) : Prop :=
  Forall (fun p => inside (cplo p) (cphi p)
    (probe_value (Q2R (cpa p)) (Q2R (cps p)) (Q2R (cpt p)) (Q2R (pm (cpr p))))) ps.

Lemma answer_p : forall d W v p,
  attention d 2 (query_p p) W v =
  probe_value (dot d (rvec (pb (cpr p))) v) (Q2R (cpt p) * dot d (rvec (pu (cpr p))) v)
    (Q2R (cpt p)) (measure d W (rvec (pu (cpr p))) (rvec (pb (cpr p)))).
Proof.
  intros. unfold query_p. rewrite probe_identity_bias_free. unfold probe_value, measure. ring.
Qed.

Lemma dot_rvec : forall d (x v : qvec), dot d (rvec x) (rvec v) = Q2R (qsum d (fun i => x i * v i)%Q).
Proof.
  intros. rewrite Q2R_qsum. unfold dot, rvec. apply sum_ext. intros. rewrite Q2R_mult. reflexivity.
Qed.

Lemma cprobe_spec : forall D d v p, check_cprobe D d v p = true ->
  0 < Q2R (cpt p) /\ dot d (rvec (pb (cpr p))) (rvec v) = Q2R (cpa p) /\
  Q2R (cpt p) * dot d (rvec (pu (cpr p))) (rvec v) = Q2R (cps p) /\
  unique_in D (cpmlo p) (cpmhi p) (pm (cpr p)) = true.
Proof.
  intros D d v p H. unfold check_cprobe in H. rewrite !andb_true_iff in H.
  destruct H as [[[H1 H2] H3] H4]. apply qlt_spec in H1. apply qeq_spec in H2, H3.
  rewrite Q2R_mult in H3. rewrite !dot_rvec, H2, H3. unfold Q2R at 1 in H1. simpl in H1.
  repeat split; [lra|exact H4].
Qed.

Theorem lowrank_cert_identified : forall L D vlo vhi ps,
  llearn L = map (fun p => (cpr p, crole p)) ps ->
  check_lowrank L = true -> check_lrcert D (ld L) vlo vhi (lv L) ps = true ->
  lr_bracketed ps -> lr_hold ps ->
  answers_in_lr (ld L) vlo vhi ps (rmat (lW L)) (rvec (lv L)) /\
  measures (ld L) (rmat (lW L)) (map fst (llearn L) ++ lchecks L) /\
  spanned (ld L) (lr L) (rmat (lB L)) (rmat (lW L)) /\
  (forall i, (i < ld L)%nat -> den_le D (rvec (lv L) i)) /\
  forall (W' : mat) (v' : vec), spanned (ld L) (lr L) (rmat (lB L)) W' ->
    (forall i, (i < ld L)%nat -> den_le D (v' i)) -> measures_den_le D (ld L) W' ps ->
    answers_in_lr (ld L) vlo vhi ps W' v' ->
    same_head (ld L) (rmat (lW L)) (rvec (lv L)) W' v'.
Proof.
  intros L D vlo vhi ps Hl HL HC Hbr Hho. destruct (lowrank_W L HL) as [Hm [Hs HW]].
  unfold check_lrcert in HC. apply andb_true_iff in HC as [Hv Hp].
  assert (Hv' : forall i, (i < ld L)%nat ->
            unique_in D (vlo i) (vhi i) (lv L i) = true /\ den_ok D (lv L i) = true)
    by (intros i Hi; apply andb_true_iff, (all_lt_spec _ _ Hv i Hi)).
  rewrite forallb_forall in Hp.
  assert (Hmc : forall p, In p ps ->
            measure (ld L) (rmat (lW L)) (rvec (pu (cpr p))) (rvec (pb (cpr p))) = Q2R (pm (cpr p))).
  { intros p Hin. unfold measures in Hm. rewrite Forall_forall in Hm. apply Hm.
    apply in_or_app. left. rewrite Hl, map_map. apply (in_map cpr), Hin. }
  unfold lr_bracketed, lr_hold in *. rewrite Forall_forall in Hbr, Hho.
  split; [split|split; [exact Hm|split; [exact Hs|split]]].
  - intros i Hi. rewrite answer_length1 by exact Hi. destruct (Hv' i Hi) as [U _].
    unfold unique_in in U. rewrite !andb_true_iff in U. destruct U as [[U1 U2] _].
    split; apply qle_spec; assumption.
  - apply Forall_forall. intros p Hin. rewrite answer_p, Hmc by exact Hin.
    destruct (cprobe_spec _ _ _ _ (Hp p Hin)) as [_ [Ha [Hsv _]]].
    rewrite Ha, Hsv. apply Hho, Hin.
  - intros i Hi. apply den_ok_spec, (Hv' i Hi).
  - intros W' v' HsW' Dv Dm [Av Aw].
    assert (Ev : forall i, (i < ld L)%nat -> v' i = rvec (lv L) i).
    { intros i Hi. destruct (Hv' i Hi) as [U _]. apply (unique_in_spec _ _ _ _ U).
      - apply Dv, Hi.
      - pose proof (Av i Hi) as A. rewrite answer_length1 in A by exact Hi. exact A. }
    assert (Hm' : measures (ld L) W' (map fst (llearn L))).
    { unfold measures. rewrite Hl, map_map. apply Forall_map, Forall_forall.
      intros p Hin. cbn [fst].
      destruct (cprobe_spec _ _ _ _ (Hp p Hin)) as [Ht [Ha [Hsv U]]].
      apply (unique_in_spec _ _ _ _ U).
      - unfold measures_den_le in Dm. rewrite Forall_forall in Dm. apply Dm, Hin.
      - assert (B : Q2R (cpmlo p) < measure (ld L) W' (rvec (pu (cpr p))) (rvec (pb (cpr p)))
                      < Q2R (cpmhi p)).
        { apply (brackets_spec (Q2R (cpa p)) (Q2R (cps p)) (Q2R (cpt p))
                   (Q2R (cplo p)) (Q2R (cphi p))); [exact Ht|apply Hbr, Hin|].
          rewrite Forall_forall in Aw. pose proof (Aw p Hin) as A. rewrite answer_p in A.
          rewrite !(dot_ext (ld L) _ _ v' (rvec (lv L))) in A by (try reflexivity; exact Ev).
          rewrite Ha, Hsv in A. exact A. }
        lra. }
    split.
    + intros i j Hi Hj. apply HW; assumption.
    + intros i Hi. apply Ev, Hi.
Qed.
