(** * Certified low-rank (skeleton) certificates: the theorems an exported run instantiates.

    A certified skeleton run records, for each length-1 query [e_i], an interval holding
    the answer v_i, and for each learning probe [b + t u; b] an interval holding its
    answer b^T v + sigmoid (t u^T W b) t u^T v.

    [lowrank_cert_entries] (what every exported file applies) says, for every d and r: if
    the exact skeleton checks of [CertLowRank.check_lowrank] pass on the certified
    rationals (W, v) and their measurements m = u^T W b, the finite checks of
    [check_lrcert_entries] pass (W's and v's entries have denominators at most D; each v_i
    is the only rational of denominator at most D in its interval; cu u and cb b are
    integer vectors; each probe's logit bracket [mlo, mhi] holds m and is narrower than
    1/(D_m b), D_m = D^K cu cb, b the denominator of m), and the per-probe inequalities
    about exp hold ([lr_bracketed], [lr_hold], proved in the exported file by [interval]),
    then the certified head answers inside every recorded interval, and every head (W', v')
    whose columns are spanned by W' B, whose ENTRIES (of W' and v') are rationals with
    denominators at most D, and that answers inside the recorded intervals, is the
    certified one. [measure_den_le] turns the entry bound into the measurement bound D_m
    (the entry bound D alone is not one: [measure_den_D_fails]); each answer interval pins
    u^T W' b inside its bracket ([CertHead.brackets_spec]), D_m pins it to m
    ([unique_in_spec]), and [CertLowRank.lowrank_W] (from [Skeleton.skeleton_determines])
    does the rest.

    [lowrank_cert_identified] is the measurement-level form: its assumption is that the
    recorded measurements u^T W' b (and v's entries) have denominators at most D. Both
    follow from [lowrank_cert_core], which takes one bound per probe. *)

From Coq Require Import Reals QArith Qreals Lra Lia List Bool.
From VerifiedAttn Require Import Defs Softmax CertHead CertLowRank.
Import ListNotations.
Open Scope R_scope.

(** A recorded probe: the exact probe (u, b, m), its role, its scale t, the recorded
    answer interval [lo, hi], a logit bracket [mlo, mhi], a = b^T v, s = t u^T v, and
    two positive integers cu, cb that clear the denominators of u and b. *)
Record cprobe := {
  cpr : probe; crole : role; cpt : Q; cplo : Q; cphi : Q;
  cpmlo : Q; cpmhi : Q; cpa : Q; cps : Q;
  cpcu : positive; cpcb : positive  (** cpcu u and cpcb b have integer entries *) }.

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

(** The core: each probe p pinned by its own bound [Dm p] on u^T W' b. *)
Theorem lowrank_cert_core : forall L D (Dm : cprobe -> positive) vlo vhi ps,
  llearn L = map (fun p => (cpr p, crole p)) ps ->
  check_lowrank L = true ->
  all_lt (ld L) (fun i => unique_in D (vlo i) (vhi i) (lv L i) && den_ok D (lv L i)) = true ->
  forallb (fun p => check_cprobe (Dm p) (ld L) (lv L) p) ps = true ->
  lr_bracketed ps -> lr_hold ps ->
  answers_in_lr (ld L) vlo vhi ps (rmat (lW L)) (rvec (lv L)) /\
  measures (ld L) (rmat (lW L)) (map fst (llearn L) ++ lchecks L) /\
  spanned (ld L) (lr L) (rmat (lB L)) (rmat (lW L)) /\
  (forall i, (i < ld L)%nat -> den_le D (rvec (lv L) i)) /\
  forall (W' : mat) (v' : vec), spanned (ld L) (lr L) (rmat (lB L)) W' ->
    (forall i, (i < ld L)%nat -> den_le D (v' i)) ->
    Forall (fun p => den_le (Dm p) (measure (ld L) W' (rvec (pu (cpr p))) (rvec (pb (cpr p))))) ps ->
    answers_in_lr (ld L) vlo vhi ps W' v' ->
    same_head (ld L) (rmat (lW L)) (rvec (lv L)) W' v'.
Proof.
  intros L D Dm vlo vhi ps Hl HL Hv Hp Hbr Hho. destruct (lowrank_W L HL) as [Hm [Hs HW]].
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
  - intros W' v' HsW' Dv Dm' [Av Aw].
    assert (Ev : forall i, (i < ld L)%nat -> v' i = rvec (lv L) i).
    { intros i Hi. destruct (Hv' i Hi) as [U _]. apply (unique_in_spec _ _ _ _ U).
      - apply Dv, Hi.
      - pose proof (Av i Hi) as A. rewrite answer_length1 in A by exact Hi. exact A. }
    assert (Hm' : measures (ld L) W' (map fst (llearn L))).
    { unfold measures. rewrite Hl, map_map. apply Forall_map, Forall_forall.
      intros p Hin. cbn [fst].
      destruct (cprobe_spec _ _ _ _ (Hp p Hin)) as [Ht [Ha [Hsv U]]].
      apply (unique_in_spec _ _ _ _ U).
      - rewrite Forall_forall in Dm'. apply Dm', Hin.
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

(** The measurement-level theorem: the assumption is on the recorded measurements
    u^T W' b (and v'), each a rational with denominator at most D. *)
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
  intros L D vlo vhi ps Hl HL HC Hbr Hho.
  unfold check_lrcert in HC. apply andb_true_iff in HC as [Hv Hp].
  exact (lowrank_cert_core L D (fun _ => D) vlo vhi ps Hl HL Hv Hp Hbr Hho).
Qed.

(** ** From entries to measurements.

    With every entry of W' a rational of denominator at most D, and cu, cb positive
    integers with cu u and cb b integer vectors, cu cb u^T W' b = sum_ij (cu u_i)(cb b_j) W'_ij
    is a sum of K integer multiples of such entries (K: the pairs with u_i, b_j <> 0), so its
    denominator is at most D^K; u^T W' b has denominator at most D^K cu cb ([mden]). *)

Lemma den_le_0 : den_le 1 0.
Proof. exists 0%Z, 1%positive. split; [lia|]. unfold Rdiv. ring. Qed.

Lemma den_le_add : forall D1 D2 x y, den_le D1 x -> den_le D2 y -> den_le (D1 * D2) (x + y).
Proof.
  intros D1 D2 x y [n [m [Hm ->]]] [n' [m' [Hm' ->]]].
  exists (n * Zpos m' + n' * Zpos m)%Z, (m * m')%positive. split.
  - rewrite !Pos2Z.inj_mul. apply Z.mul_le_mono_nonneg; lia.
  - rewrite Pos2Z.inj_mul, plus_IZR, !mult_IZR. field.
    split; apply not_0_IZR; lia.
Qed.

Lemma den_le_zmul : forall D z x, den_le D x -> den_le D (IZR z * x).
Proof.
  intros D z x [n [m [Hm ->]]]. exists (z * n)%Z, m. split; [exact Hm|].
  rewrite mult_IZR. unfold Rdiv. ring.
Qed.

Lemma den_le_div : forall D c x, den_le D x -> den_le (D * c) (x / IZR (Zpos c)).
Proof.
  intros D c x [n [m [Hm ->]]]. exists n, (m * c)%positive. split.
  - rewrite !Pos2Z.inj_mul. apply Z.mul_le_mono_nonneg_r; lia.
  - rewrite Pos2Z.inj_mul, mult_IZR. field. split; apply not_0_IZR; lia.
Qed.

Fixpoint pprod (n : nat) (f : nat -> positive) : positive :=
  match n with O => 1%positive | S k => (pprod k f * f k)%positive end.

Lemma den_le_sum : forall n (B : nat -> positive) (f : nat -> R),
  (forall k, (k < n)%nat -> den_le (B k) (f k)) -> den_le (pprod n B) (sum n f).
Proof.
  induction n as [|n IH]; intros B f H; simpl.
  - exact den_le_0.
  - apply den_le_add; [apply IH; intros; apply H; lia|apply H; lia].
Qed.

(** A term's bound: 1 if it is 0 (u_i = 0 or b_j = 0), D otherwise. *)
Definition tbound (D : positive) (x y : Q) : positive :=
  if Qeq_bool x 0 || Qeq_bool y 0 then 1%positive else D.

(** The measurement bound D^K cu cb. *)
Definition mden (D : positive) (d : nat) (u b : qvec) (cu cb : positive) : positive :=
  (pprod d (fun i => pprod d (fun j => tbound D (u i) (b j))) * cu * cb)%positive.

Definition is_int (q : Q) : bool := Z.eqb (Zpos (Qden (Qred q))) 1.

(** c x is an integer vector (coordinates below d). *)
Definition ints_ok (d : nat) (c : positive) (x : qvec) : bool :=
  all_lt d (fun i => is_int (inject_Z (Zpos c) * x i)).

Lemma is_int_spec : forall q, is_int q = true -> Q2R q = IZR (Qnum (Qred q)).
Proof.
  intros q H. rewrite <- Q2R_red. unfold is_int in H. apply Z.eqb_eq in H.
  destruct (Qred q) as [n m]. simpl in *. inversion H. unfold Q2R. simpl. field.
Qed.

Lemma ints_scale : forall d c x i, ints_ok d c x = true -> (i < d)%nat ->
  Q2R (x i) = IZR (Qnum (Qred (inject_Z (Zpos c) * x i))) / IZR (Zpos c).
Proof.
  intros d c x i H Hi. rewrite <- (is_int_spec _ (all_lt_spec _ _ H i Hi)).
  rewrite Q2R_mult, Q2R_inject_Z. field. apply not_0_IZR. lia.
Qed.

(** Entries with denominators at most D (below d). *)
Definition entries_den_le (D : positive) (d : nat) (W : mat) : Prop :=
  forall i j, (i < d)%nat -> (j < d)%nat -> den_le D (W i j).

Theorem measure_den_le : forall D d (W : mat) u b cu cb, entries_den_le D d W ->
  ints_ok d cu u = true -> ints_ok d cb b = true ->
  den_le (mden D d u b cu cb) (measure d W (rvec u) (rvec b)).
Proof.
  intros D d W u b cu cb HW Hu Hb.
  set (zu := fun i => Qnum (Qred (inject_Z (Zpos cu) * u i))).
  set (zb := fun j => Qnum (Qred (inject_Z (Zpos cb) * b j))).
  assert (Hcu : IZR (Zpos cu) <> 0) by (apply not_0_IZR; lia).
  assert (Hcb : IZR (Zpos cb) <> 0) by (apply not_0_IZR; lia).
  assert (E : measure d W (rvec u) (rvec b) =
    sum d (fun i => sum d (fun j => IZR (zu i * zb j) * W i j)) / IZR (Zpos cu) / IZR (Zpos cb)).
  { unfold measure, dot, mat_vec, rvec. unfold Rdiv. rewrite <- !sum_scal_r.
    apply sum_ext. intros i Hi. rewrite (ints_scale d cu u i Hu Hi).
    rewrite <- sum_scal_l, <- !sum_scal_r. apply sum_ext. intros j Hj.
    rewrite (ints_scale d cb b j Hb Hj). fold (zu i) (zb j).
    rewrite mult_IZR. field. split; assumption. }
  rewrite E. unfold mden. apply den_le_div, den_le_div, den_le_sum. intros i Hi.
  apply den_le_sum. intros j Hj. unfold tbound.
  destruct (Qeq_bool (u i) 0) eqn:U0; [|destruct (Qeq_bool (b j) 0) eqn:B0].
  - assert (Z0 : IZR (zu i) = 0).
    { unfold zu. rewrite <- (is_int_spec _ (all_lt_spec _ _ Hu i Hi)).
      rewrite Q2R_mult, (qeq_spec _ _ U0), Q2R_0. ring. }
    rewrite mult_IZR, Z0, !Rmult_0_l. exact den_le_0.
  - assert (Z0 : IZR (zb j) = 0).
    { unfold zb. rewrite <- (is_int_spec _ (all_lt_spec _ _ Hb j Hj)).
      rewrite Q2R_mult, (qeq_spec _ _ B0), Q2R_0. ring. }
    rewrite mult_IZR, Z0, Rmult_0_r, Rmult_0_l. exact den_le_0.
  - apply den_le_zmul, HW; assumption.
Qed.

(** The entry bound alone is not a measurement bound: W with entries 1/13 and 1/11
    (denominators at most 13), u = (1, 1), b = (1, 0) give u^T W b = 24/143. *)
Theorem measure_den_D_fails : ~ (forall (W : mat) (u b : qvec),
  entries_den_le 13 2 W -> den_le 13 (measure 2 W (rvec u) (rvec b))).
Proof.
  intro H.
  set (W := fun i j : nat => match i, j with
                             | 0%nat, 0%nat => / 13 | 1%nat, 0%nat => / 11 | _, _ => 0 end).
  assert (HW : entries_den_le 13 2 W).
  { intros i j Hi Hj. destruct i as [|[|i]]; [| |lia]; destruct j as [|[|j]]; try lia; simpl.
    - exists 1%Z, 13%positive. split; [lia|]. simpl. field.
    - exists 0%Z, 1%positive. split; [lia|]. simpl. field.
    - exists 1%Z, 11%positive. split; [lia|]. simpl. field.
    - exists 0%Z, 1%positive. split; [lia|]. simpl. field. }
  destruct (H W (fun _ => 1%Q) (fun j => if Nat.eqb j 0 then 1%Q else 0%Q) HW)
    as [n [m [Hm E]]].
  assert (M : measure 2 W (rvec (fun _ => 1%Q)) (rvec (fun j => if Nat.eqb j 0 then 1%Q else 0%Q))
              = 24 / 143).
  { unfold measure, dot, mat_vec, rvec, W. simpl. unfold Q2R. simpl. field. }
  rewrite M in E.
  assert (Hm0 : IZR (Zpos m) <> 0) by (apply not_0_IZR; lia).
  assert (I : 24 * IZR (Zpos m) = 143 * IZR n).
  { replace (IZR n) with (IZR n / IZR (Zpos m) * IZR (Zpos m)) by (field; exact Hm0).
    rewrite <- E. field. }
  rewrite <- !mult_IZR in I. apply eq_IZR in I. lia.
Qed.

(** ** The entry-level theorem: the assumption is on the entries of W' and v'. *)

(** Probe p's measurement bound. *)
Definition pden (D : positive) (d : nat) (p : cprobe) : positive :=
  mden D d (pu (cpr p)) (pb (cpr p)) (cpcu p) (cpcb p).

Definition check_lrcert_entries (D : positive) (d : nat) (vlo vhi v : qvec) (W : qmat)
  (ps : list cprobe) : bool :=
  all_lt d (fun i => unique_in D (vlo i) (vhi i) (v i) && den_ok D (v i)) &&
  all_lt d (fun i => all_lt d (fun j => den_ok D (W i j))) &&
  forallb (fun p => check_cprobe (pden D d p) d v p &&
    ints_ok d (cpcu p) (pu (cpr p)) && ints_ok d (cpcb p) (pb (cpr p))) ps.

Theorem lowrank_cert_entries : forall L D vlo vhi ps,
  llearn L = map (fun p => (cpr p, crole p)) ps ->
  check_lowrank L = true -> check_lrcert_entries D (ld L) vlo vhi (lv L) (lW L) ps = true ->
  lr_bracketed ps -> lr_hold ps ->
  answers_in_lr (ld L) vlo vhi ps (rmat (lW L)) (rvec (lv L)) /\
  measures (ld L) (rmat (lW L)) (map fst (llearn L) ++ lchecks L) /\
  spanned (ld L) (lr L) (rmat (lB L)) (rmat (lW L)) /\
  entries_den_le D (ld L) (rmat (lW L)) /\
  (forall i, (i < ld L)%nat -> den_le D (rvec (lv L) i)) /\
  forall (W' : mat) (v' : vec), spanned (ld L) (lr L) (rmat (lB L)) W' ->
    entries_den_le D (ld L) W' -> (forall i, (i < ld L)%nat -> den_le D (v' i)) ->
    answers_in_lr (ld L) vlo vhi ps W' v' ->
    same_head (ld L) (rmat (lW L)) (rvec (lv L)) W' v'.
Proof.
  intros L D vlo vhi ps Hl HL HC Hbr Hho.
  unfold check_lrcert_entries in HC. rewrite !andb_true_iff in HC.
  destruct HC as [[Hv HWc] Hp].
  assert (Hp' : forallb (fun p => check_cprobe (pden D (ld L) p) (ld L) (lv L) p) ps = true).
  { rewrite forallb_forall in *. intros p Hin. specialize (Hp p Hin).
    rewrite !andb_true_iff in Hp. apply Hp. }
  destruct (lowrank_cert_core L D (pden D (ld L)) vlo vhi ps Hl HL Hv Hp' Hbr Hho)
    as [A [M [S [V I]]]].
  split; [exact A|split; [exact M|split; [exact S|split; [|split; [exact V|]]]]].
  - intros i j Hi Hj. apply den_ok_spec, (all_lt_spec _ _ (all_lt_spec _ _ HWc i Hi) j Hj).
  - intros W' v' HsW' DW Dv Aw. apply (I W' v' HsW' Dv); [|exact Aw].
    apply Forall_forall. intros p Hin. rewrite forallb_forall in Hp.
    specialize (Hp p Hin). rewrite !andb_true_iff in Hp. destruct Hp as [[_ Hu] Hb].
    apply measure_den_le; assumption.
Qed.
