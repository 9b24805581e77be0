(** * Certificates of single heads: the general theorem an exported run instantiates.

    A certificate of a single head records rational data: the design U (and an inverse),
    the probe scales t, the certified W and v, and for every query the learner asked an
    interval that holds the oracle's answer. [plain_identified] says, for every d: if the
    finite checks over Q pass ([check_plain], run by computation) and the per-probe
    inequalities about exp hold ([probes_bracketed], [probes_hold], proved in the exported
    file by the [interval] tactic), then the certified head answers inside the recorded
    intervals, and every head whose entries are rationals with denominators at most D and
    that answers inside them is the certified one. This is Theorem 4.1's identifiability
    argument with measured answers: v is read off the length-1 answers, each probe pins
    u_k^T W e_j inside a logit bracket, W = U^{-T} M puts each W_ij in an interval, and an
    interval of width w < 1 / (D b) holds at most one rational of denominator at most D
    next to a/b. [CertAffine.affine_identified] is the same for the affine head. *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith Bool.
From VerifiedAttn Require Import Defs Softmax.
Open Scope R_scope.

(** ** Finite checks over Q, and their meaning over R. *)

Fixpoint qsum (n : nat) (f : nat -> Q) : Q :=
  match n with O => 0%Q | S k => (qsum k f + f k)%Q end.

Lemma Q2R_qsum : forall n f, Q2R (qsum n f) = sum n (fun k => Q2R (f k)).
Proof.
  induction n as [|n IH]; intros f; simpl.
  - unfold Q2R. simpl. lra.
  - rewrite Q2R_plus, IH. reflexivity.
Qed.

(** [all_lt n p]: p holds for 0 .. n-1. *)
Fixpoint all_lt (n : nat) (p : nat -> bool) : bool :=
  match n with O => true | S k => all_lt k p && p k end.

Lemma all_lt_spec : forall n p, all_lt n p = true -> forall i, (i < n)%nat -> p i = true.
Proof.
  induction n as [|n IH]; intros p H i Hi; [lia|]. simpl in H.
  apply andb_true_iff in H as [H1 H2].
  destruct (Nat.eq_dec i n) as [-> |]; [exact H2|]. apply IH; [exact H1|lia].
Qed.

Definition qle (x y : Q) : bool := Qle_bool x y.
Definition qlt (x y : Q) : bool := negb (Qle_bool y x).

Lemma qle_spec : forall x y, qle x y = true -> Q2R x <= Q2R y.
Proof. intros x y H. apply Qle_Rle, Qle_bool_iff, H. Qed.

Lemma qlt_spec : forall x y, qlt x y = true -> Q2R x < Q2R y.
Proof.
  intros x y H. apply Qlt_Rlt, Qnot_le_lt. intros Hle.
  unfold qlt in H. apply Qle_bool_iff in Hle. rewrite Hle in H. discriminate.
Qed.

Lemma qeq_spec : forall x y, Qeq_bool x y = true -> Q2R x = Q2R y.
Proof. intros x y H. apply Qeq_eqR, Qeq_bool_iff, H. Qed.

Lemma Q2R_inject_Z : forall z, Q2R (inject_Z z) = IZR z.
Proof. intros. unfold Q2R. simpl. field. Qed.

(** ** Rationals of bounded denominator. *)

(** x = n / m with 1 <= m <= D. *)
Definition den_le (D : positive) (x : R) : Prop :=
  exists (n : Z) (m : positive), (Zpos m <= Zpos D)%Z /\ x = IZR n / IZR (Zpos m).

Lemma Q2R_den_le : forall D q, (Zpos (Qden q) <= Zpos D)%Z -> den_le D (Q2R q).
Proof. intros D [a b] H. exists a, b. split; [exact H|]. reflexivity. Qed.

(** lo <= q <= hi, and (hi - lo) D b < 1 for b the stored denominator of q. *)
Definition unique_in (D : positive) (lo hi q : Q) : bool :=
  qle lo q && qle q hi &&
  qlt ((hi - lo) * inject_Z (Zpos D) * inject_Z (Zpos (Qden q))) 1.

Lemma int_gap : forall z : Z, z <> 0%Z -> 1 <= Rabs (IZR z).
Proof. intros z Hz. rewrite <- abs_IZR. apply IZR_le. lia. Qed.

(** Two distinct rationals n/m and a/b differ by at least 1/(m b): an interval narrower than
    1/(D b) around a/b holds no other rational of denominator at most D. *)
Theorem unique_in_spec : forall D lo hi q, unique_in D lo hi q = true ->
  forall x, den_le D x -> Q2R lo <= x <= Q2R hi -> x = Q2R q.
Proof.
  intros D lo hi q H x [n [m [Hm ->]]] [Hl Hh].
  unfold unique_in in H. apply andb_true_iff in H as [H H3].
  apply andb_true_iff in H as [H1 H2].
  apply qle_spec in H1. apply qle_spec in H2. apply qlt_spec in H3.
  rewrite !Q2R_mult, !Q2R_inject_Z, Q2R_minus in H3.
  destruct q as [a b]. unfold Q2R in *. simpl Qnum in *. simpl Qden in *.
  assert (Hm0 : 0 < IZR (Zpos m)) by (apply IZR_lt; lia).
  assert (Hb0 : 0 < IZR (Zpos b)) by (apply IZR_lt; lia).
  assert (HmD : IZR (Zpos m) <= IZR (Zpos D)) by (apply IZR_le; exact Hm).
  set (e := (n * Zpos b - a * Zpos m)%Z).
  assert (He : IZR e = (IZR n / IZR (Zpos m) - IZR a * / IZR (Zpos b))
                        * IZR (Zpos m) * IZR (Zpos b)).
  { unfold e. rewrite minus_IZR, !mult_IZR. field. lra. }
  destruct (Z.eq_dec e 0) as [He0|He0].
  - rewrite He0 in He. apply Rminus_diag_uniq.
    apply (Rmult_eq_reg_r (IZR (Zpos m) * IZR (Zpos b))); [|nra].
    rewrite Rmult_0_l, <- Rmult_assoc. lra.
  - exfalso. pose proof (int_gap e He0) as G. rewrite He in G.
    set (r := IZR n / IZR (Zpos m) - IZR a * / IZR (Zpos b)) in *.
    rewrite !Rabs_mult, (Rabs_right (IZR (Zpos m))), (Rabs_right (IZR (Zpos b))) in G by lra.
    assert (Hr : Rabs r <= Q2R hi - Q2R lo).
    { unfold r, Q2R in *. apply Rabs_le. lra. }
    unfold Q2R in Hr.
    assert (0 <= Rabs r) by apply Rabs_pos.
    assert (Rabs r * IZR (Zpos m) <= (IZR (Qnum hi) * / IZR (Zpos (Qden hi))
              - IZR (Qnum lo) * / IZR (Zpos (Qden lo))) * IZR (Zpos D)) by nra.
    nra.
Qed.

(** ** The sigmoid is increasing; a probe's answer brackets its score difference. *)

Lemma sigmoid_increasing : forall x y, x < y -> sigmoid x < sigmoid y.
Proof.
  intros x y H. unfold sigmoid. apply Rinv_lt_contravar.
  - pose proof (exp_pos (- x)). pose proof (exp_pos (- y)). nra.
  - apply Rplus_lt_compat_l, exp_increasing. lra.
Qed.

Lemma sigmoid_le : forall x y, x <= y -> sigmoid x <= sigmoid y.
Proof.
  intros x y [H| ->]; [apply Rlt_le, sigmoid_increasing, H|lra].
Qed.

(** A probe with scale t, score difference m, answers a + s sigmoid (t m). *)
Definition probe_value (a s t m : R) : R := a + s * sigmoid (t * m).

(** The answer interval [blo, bhi] lies strictly between the answers at mlo and mhi. *)
Definition brackets (a s t blo bhi mlo mhi : R) : Prop :=
  (0 < s /\ probe_value a s t mlo < blo /\ bhi < probe_value a s t mhi) \/
  (s < 0 /\ bhi < probe_value a s t mlo /\ probe_value a s t mhi < blo).

Lemma brackets_spec : forall a s t blo bhi mlo mhi m, 0 < t ->
  brackets a s t blo bhi mlo mhi -> blo <= probe_value a s t m <= bhi -> mlo < m < mhi.
Proof.
  intros a s t blo bhi mlo mhi m Ht Hb [Hl Hh]. unfold brackets, probe_value in *.
  split.
  - destruct (Rlt_or_le mlo m) as [H|H]; [exact H|exfalso].
    assert (S : sigmoid (t * m) <= sigmoid (t * mlo))
      by (apply sigmoid_le; apply Rmult_le_compat_l; lra).
    destruct Hb as [[Hs [H1 H2]]|[Hs [H1 H2]]].
    + pose proof (Rmult_le_compat_l s _ _ (Rlt_le _ _ Hs) S). lra.
    + pose proof (Rmult_le_compat_l (- s) _ _ ltac:(lra) S). lra.
  - destruct (Rlt_or_le m mhi) as [H|H]; [exact H|exfalso].
    assert (S : sigmoid (t * mhi) <= sigmoid (t * m))
      by (apply sigmoid_le; apply Rmult_le_compat_l; lra).
    destruct Hb as [[Hs [H1 H2]]|[Hs [H1 H2]]].
    + pose proof (Rmult_le_compat_l s _ _ (Rlt_le _ _ Hs) S). lra.
    + pose proof (Rmult_le_compat_l (- s) _ _ ltac:(lra) S). lra.
Qed.

(** ** Interval bounds of a rational linear form. *)

Definition lin_lo (n : nat) (a lo hi : nat -> Q) : Q :=
  qsum n (fun k => if Qle_bool 0 (a k) then a k * lo k else a k * hi k)%Q.
Definition lin_hi (n : nat) (a lo hi : nat -> Q) : Q :=
  qsum n (fun k => if Qle_bool 0 (a k) then a k * hi k else a k * lo k)%Q.

Lemma lin_bounds : forall n a lo hi (x : nat -> R),
  (forall k, (k < n)%nat -> Q2R (lo k) <= x k <= Q2R (hi k)) ->
  Q2R (lin_lo n a lo hi) <= sum n (fun k => Q2R (a k) * x k) <= Q2R (lin_hi n a lo hi).
Proof.
  induction n as [|n IH]; intros a lo hi x H; unfold lin_lo, lin_hi in *; simpl.
  - unfold Q2R. simpl. lra.
  - rewrite !Q2R_plus. destruct (IH a lo hi x) as [I1 I2]; [intros; apply H; lia|].
    destruct (H n ltac:(lia)) as [L1 L2].
    destruct (Qle_bool 0 (a n)) eqn:E; rewrite !Q2R_mult.
    + apply Qle_bool_iff, Qle_Rle in E. unfold Q2R at 1 in E. simpl in E.
      replace (0 * / 1) with 0 in E by field. nra.
    + assert (Q2R (a n) < 0).
      { assert (E' : (a n < 0)%Q).
        { apply Qnot_le_lt. intros C. apply Qle_bool_iff in C. congruence. }
        apply Qlt_Rlt in E'. unfold Q2R at 2 in E'. simpl in E'. lra. }
      nra.
Qed.

(** ** W = U^{-T} M: each W_ij is a rational combination of the u_k^T W e_j. *)

Definition qmat := nat -> nat -> Q.
Definition qvec := nat -> Q.
Definition rmat (A : qmat) : mat := fun i j => Q2R (A i j).
Definition rvec (x : qvec) : vec := fun i => Q2R (x i).

Definition check_inverse (d : nat) (U Uinv : qmat) : bool :=
  all_lt d (fun l => all_lt d (fun i =>
    Qeq_bool (qsum d (fun k => U l k * Uinv k i)%Q) (if Nat.eq_dec l i then 1 else 0)%Q)).

Lemma check_inverse_spec : forall d U Uinv, check_inverse d U Uinv = true ->
  forall l i, (l < d)%nat -> (i < d)%nat -> mat_mul d (rmat U) (rmat Uinv) l i = identity l i.
Proof.
  intros d U Uinv H l i Hl Hi. unfold check_inverse in H.
  pose proof (all_lt_spec _ _ (all_lt_spec _ _ H l Hl) i Hi) as E. apply qeq_spec in E.
  rewrite Q2R_qsum in E. unfold mat_mul, rmat. rewrite (sum_ext _ _ _ (fun k _ =>
    eq_sym (Q2R_mult (U l k) (Uinv k i)))). rewrite E.
  unfold identity. destruct (Nat.eq_dec l i); unfold Q2R; simpl; field.
Qed.

Lemma unmix : forall d (U Uinv : mat) (W : mat) i j, (i < d)%nat ->
  (forall l i, (l < d)%nat -> (i < d)%nat -> mat_mul d U Uinv l i = identity l i) ->
  sum d (fun k => Uinv k i * sum d (fun l => U l k * W l j)) = W i j.
Proof.
  intros d U Uinv W i j Hi Hinv.
  rewrite (sum_ext d _ (fun k => sum d (fun l => W l j * (U l k * Uinv k i))))
    by (intros; rewrite <- sum_scal_l; apply sum_ext; intros; ring).
  rewrite sum_swap.
  rewrite (sum_ext d _ (fun l => W l j * identity l i)).
  - apply (sum_identity_r d i (fun l => W l j)). exact Hi.
  - intros l Hl. rewrite sum_scal_l. f_equal. apply Hinv; assumption.
Qed.

(** ** The recorded data of one run of the plain head (scores x_t^T W x_N). *)

Record head_cert := {
  cd : nat;                  (** the token dimension d *)
  cD : positive;             (** the stated denominator bound D *)
  cU : qmat; cUinv : qmat;   (** the design U = [u_0 .. u_{d-1}] and an inverse *)
  ct : qmat;                 (** the scale t_kj of the probe [e_j + t_kj u_k; e_j] *)
  cW : qmat; cv : qvec;      (** the certified head *)
  cvlo : qvec; cvhi : qvec;  (** the recorded answers to [e_i] *)
  cblo : qmat; cbhi : qmat;  (** the recorded answers to [e_j + t_kj u_k; e_j] *)
  cmlo : qmat; cmhi : qmat;  (** logit brackets: mlo_kj < u_k^T W e_j < mhi_kj *)
  cs : qmat;                 (** t_kj u_k^T v of the certified v *)
  cm : qmat                  (** u_k^T W e_j of the certified W *)
}.

Definition ucol (C : head_cert) (k : nat) : vec := fun i => Q2R (cU C i k).
Definition query_v (i : nat) : tokens := seq1 (unit_vec i).
Definition query_w (C : head_cert) (k j : nat) : tokens :=
  seq2 (vadd (unit_vec j) (vscale (Q2R (ct C k j)) (ucol C k))) (unit_vec j).

Definition inside (lo hi : Q) (y : R) : Prop := Q2R lo <= y <= Q2R hi.

(** The head (W, v) answers every recorded query inside its recorded interval. *)
Definition answers_in (C : head_cert) (W : mat) (v : vec) : Prop :=
  (forall i, (i < cd C)%nat ->
     inside (cvlo C i) (cvhi C i) (attention (cd C) 1 (query_v i) W v)) /\
  (forall k j, (k < cd C)%nat -> (j < cd C)%nat ->
     inside (cblo C k j) (cbhi C k j) (attention (cd C) 2 (query_w C k j) W v)).

Definition denominators_at_most (D : positive) (d : nat) (W : mat) (v : vec) : Prop :=
  (forall i j, (i < d)%nat -> (j < d)%nat -> den_le D (W i j)) /\
  (forall i, (i < d)%nat -> den_le D (v i)).

Definition same_head (d : nat) (W : mat) (v : vec) (W' : mat) (v' : vec) : Prop :=
  (forall i j, (i < d)%nat -> (j < d)%nat -> W' i j = W i j) /\
  (forall i, (i < d)%nat -> v' i = v i).

(** What a run proves: the certified head answers inside the recorded intervals, has
    denominators at most D, and is the only head with both properties. *)
Definition identified (C : head_cert) : Prop :=
  answers_in C (rmat (cW C)) (rvec (cv C)) /\
  denominators_at_most (cD C) (cd C) (rmat (cW C)) (rvec (cv C)) /\
  forall (W' : mat) (v' : vec),
    denominators_at_most (cD C) (cd C) W' v' -> answers_in C W' v' ->
    same_head (cd C) (rmat (cW C)) (rvec (cv C)) W' v'.

(** ** The checks a run must pass. *)

Definition den_ok (D : positive) (q : Q) : bool := Z.leb (Zpos (Qden q)) (Zpos D).

Definition uv (C : head_cert) (k : nat) : Q := qsum (cd C) (fun i => cU C i k * cv C i)%Q.
Definition col_score (C : head_cert) (k j : nat) : Q :=
  qsum (cd C) (fun l => cU C l k * cW C l j)%Q.

Definition check_plain (C : head_cert) : bool :=
  let d := cd C in
  check_inverse d (cU C) (cUinv C) &&
  all_lt d (fun i => unique_in (cD C) (cvlo C i) (cvhi C i) (cv C i) && den_ok (cD C) (cv C i)) &&
  all_lt d (fun k => all_lt d (fun j =>
    qlt 0 (ct C k j) && Qeq_bool (cs C k j) (ct C k j * uv C k) &&
    Qeq_bool (cm C k j) (col_score C k j))) &&
  all_lt d (fun i => all_lt d (fun j =>
    unique_in (cD C)
      (lin_lo d (fun k => cUinv C k i) (fun k => cmlo C k j) (fun k => cmhi C k j))
      (lin_hi d (fun k => cUinv C k i) (fun k => cmlo C k j) (fun k => cmhi C k j))
      (cW C i j) && den_ok (cD C) (cW C i j))).

(** The inequalities about exp, one pair per probe ([interval] proves them in a run). *)
Definition probes_bracketed (C : head_cert) : Prop :=
  forall k j, (k < cd C)%nat -> (j < cd C)%nat ->
    brackets (Q2R (cv C j)) (Q2R (cs C k j)) (Q2R (ct C k j))
      (Q2R (cblo C k j)) (Q2R (cbhi C k j)) (Q2R (cmlo C k j)) (Q2R (cmhi C k j)).

Definition probes_hold (C : head_cert) : Prop :=
  forall k j, (k < cd C)%nat -> (j < cd C)%nat ->
    inside (cblo C k j) (cbhi C k j)
      (probe_value (Q2R (cv C j)) (Q2R (cs C k j)) (Q2R (ct C k j)) (Q2R (cm C k j))).

(** ** The proof. *)

Lemma den_ok_spec : forall D q, den_ok D q = true -> den_le D (Q2R q).
Proof. intros D q H. apply Q2R_den_le. apply Z.leb_le, H. Qed.

Lemma answer_length1 : forall d W v i, (i < d)%nat ->
  attention d 1 (query_v i) W v = v i.
Proof.
  intros. unfold attention, query_v. rewrite attention_length1, dot_unit_l by assumption.
  ring.
Qed.

Lemma answer_probe : forall C W v k j, (j < cd C)%nat ->
  attention (cd C) 2 (query_w C k j) W v =
  probe_value (v j) (Q2R (ct C k j) * dot (cd C) (ucol C k) v) (Q2R (ct C k j))
    (sum (cd C) (fun l => Q2R (cU C l k) * W l j)).
Proof.
  intros C W v k j Hj. unfold query_w. rewrite probe_identity_bias_free.
  rewrite dot_unit_l by exact Hj. unfold probe_value. f_equal.
  rewrite Rmult_comm. f_equal. f_equal. f_equal. unfold dot, ucol. apply sum_ext.
  intros l Hl. rewrite mat_vec_unit by exact Hj. reflexivity.
Qed.

Lemma split_checks : forall C, check_plain C = true ->
  check_inverse (cd C) (cU C) (cUinv C) = true /\
  (forall i, (i < cd C)%nat ->
     unique_in (cD C) (cvlo C i) (cvhi C i) (cv C i) = true /\ den_ok (cD C) (cv C i) = true) /\
  (forall k j, (k < cd C)%nat -> (j < cd C)%nat ->
     0 < Q2R (ct C k j) /\ Q2R (cs C k j) = Q2R (ct C k j) * Q2R (uv C k) /\
     Q2R (cm C k j) = Q2R (col_score C k j)) /\
  (forall i j, (i < cd C)%nat -> (j < cd C)%nat ->
     unique_in (cD C)
      (lin_lo (cd C) (fun k => cUinv C k i) (fun k => cmlo C k j) (fun k => cmhi C k j))
      (lin_hi (cd C) (fun k => cUinv C k i) (fun k => cmlo C k j) (fun k => cmhi C k j))
      (cW C i j) = true /\ den_ok (cD C) (cW C i j) = true).
Proof.
  intros C H. unfold check_plain in H. rewrite !andb_true_iff in H.
  destruct H as [[[H1 H2] H3] H4]. split; [exact H1|]. split; [|split].
  - intros i Hi. apply andb_true_iff, (all_lt_spec _ _ H2 i Hi).
  - intros k j Hk Hj. pose proof (all_lt_spec _ _ (all_lt_spec _ _ H3 k Hk) j Hj) as E.
    rewrite !andb_true_iff in E. destruct E as [[E1 E2] E3].
    apply qlt_spec in E1. apply qeq_spec in E2. apply qeq_spec in E3.
    rewrite Q2R_mult in E2. unfold Q2R at 1 in E1. simpl in E1.
    split; [lra|split; assumption].
  - intros i j Hi Hj. apply andb_true_iff, (all_lt_spec _ _ (all_lt_spec _ _ H4 i Hi) j Hj).
Qed.

Lemma dot_ucol : forall C (v : qvec) k,
  dot (cd C) (ucol C k) (rvec v) = Q2R (qsum (cd C) (fun i => cU C i k * v i)%Q).
Proof.
  intros. rewrite Q2R_qsum. unfold dot, ucol, rvec. apply sum_ext. intros.
  rewrite Q2R_mult. reflexivity.
Qed.

Theorem plain_identified : forall C,
  check_plain C = true -> probes_bracketed C -> probes_hold C -> identified C.
Proof.
  intros C HC Hbr Hho. destruct (split_checks C HC) as [Hinv [Hv [Hkj Hw]]].
  pose proof (check_inverse_spec _ _ _ Hinv) as Hinv0. clear Hinv. rename Hinv0 into Hinv.
  assert (Hm : forall k j, (j < cd C)%nat ->
            sum (cd C) (fun l => Q2R (cU C l k) * rmat (cW C) l j) = Q2R (col_score C k j)).
  { intros k j Hj. unfold col_score. rewrite Q2R_qsum. apply sum_ext. intros.
    unfold rmat. rewrite Q2R_mult. reflexivity. }
  split; [split|split].
  - intros i Hi. rewrite answer_length1 by exact Hi. destruct (Hv i Hi) as [U _].
    unfold unique_in in U. rewrite !andb_true_iff in U. destruct U as [[U1 U2] _].
    split; apply qle_spec; assumption.
  - intros k j Hk Hj. rewrite answer_probe by exact Hj. unfold rvec at 1.
    destruct (Hkj k j Hk Hj) as [Ht [Hs Hmc]].
    rewrite dot_ucol, Hm by exact Hj. fold (uv C k). rewrite <- Hs, <- Hmc.
    apply Hho; assumption.
  - split.
    + intros i j Hi Hj. apply den_ok_spec, (Hw i j Hi Hj).
    + intros i Hi. apply den_ok_spec, (Hv i Hi).
  - intros W' v' [DW Dv] [Av Aw].
    assert (Ev : forall i, (i < cd C)%nat -> v' i = rvec (cv C) i).
    { intros i Hi. destruct (Hv i Hi) as [U _]. apply (unique_in_spec _ _ _ _ U).
      - apply Dv, Hi.
      - pose proof (Av i Hi) as A. rewrite answer_length1 in A by exact Hi. exact A. }
    split; [|exact Ev].
    assert (Br : forall k j, (k < cd C)%nat -> (j < cd C)%nat ->
              Q2R (cmlo C k j) < sum (cd C) (fun l => Q2R (cU C l k) * W' l j)
                < Q2R (cmhi C k j)).
    { intros k j Hk Hj. destruct (Hkj k j Hk Hj) as [Ht [Hs _]].
      apply (brackets_spec (Q2R (cv C j)) (Q2R (cs C k j)) (Q2R (ct C k j))
               (Q2R (cblo C k j)) (Q2R (cbhi C k j))); [exact Ht| apply Hbr; assumption|].
      pose proof (Aw k j Hk Hj) as A. rewrite answer_probe in A by exact Hj.
      rewrite (dot_ext (cd C) (ucol C k) (ucol C k) v' (rvec (cv C))) in A
        by (try reflexivity; exact Ev).
      rewrite dot_ucol in A. fold (uv C k) in A. rewrite <- Hs in A.
      rewrite (Ev j Hj) in A. exact A. }
    intros i j Hi Hj. destruct (Hw i j Hi Hj) as [U _].
    apply (unique_in_spec _ _ _ _ U); [apply DW; assumption|].
    rewrite <- (unmix (cd C) (rmat (cU C)) (rmat (cUinv C)) W' i j Hi Hinv).
    unfold rmat. apply lin_bounds. intros k Hk. destruct (Br k j Hk Hj). split; lra.
Qed.
