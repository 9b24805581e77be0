(** * Theorem 4.1: the learner's design is invertible, and d^2 + d queries identify a head. *)

From Coq Require Import Reals Lra Lia.
From VerifiedAttn Require Import Defs Softmax.
Open Scope R_scope.

(** ** The design U = I + e_p s^T. *)

Lemma design_shift_p : forall v p, design_shift v p p = 0.
Proof. intros. unfold design_shift. destruct (Nat.eq_dec p p); [reflexivity|congruence]. Qed.

(** (I + a s^T)(I - a s^T) = I when s^T a = 0, and in the other order. *)
Lemma rank_one_inverse : forall d (a s : vec) i j, (i < d)%nat -> (j < d)%nat ->
  sum d (fun k => s k * a k) = 0 ->
  sum d (fun k => (identity i k + a i * s k) * (identity k j - a k * s j)) = identity i j /\
  sum d (fun k => (identity i k - a i * s k) * (identity k j + a k * s j)) = identity i j.
Proof.
  intros d a s i j Hi Hj Hsa. split.
  - rewrite (sum_ext d _ (fun k => (identity i k * identity k j - identity i k * (a k * s j))
        + (a i * (s k * identity k j) - a i * s j * (s k * a k)))) by (intros; ring).
    rewrite sum_plus, !sum_minus, !sum_scal_l, sum_identity_l, sum_identity_r, Hsa by exact Hj
      || exact Hi.
    rewrite sum_identity_l by exact Hi. ring.
  - rewrite (sum_ext d _ (fun k => (identity i k * identity k j + identity i k * (a k * s j))
        - (a i * (s k * identity k j) + a i * s j * (s k * a k)))) by (intros; ring).
    rewrite sum_minus, !sum_plus, !sum_scal_l, sum_identity_l, sum_identity_r, Hsa by exact Hj
      || exact Hi.
    rewrite sum_identity_l by exact Hi. ring.
Qed.

Lemma design_shift_dot : forall d v p, (p < d)%nat ->
  sum d (fun k => design_shift v p k * unit_vec p k) = 0.
Proof.
  intros d v p Hp. apply sum_zero. intros k Hk. unfold unit_vec.
  destruct (Nat.eq_dec k p) as [->|]; [rewrite design_shift_p|]; ring.
Qed.

(** u_k^T v = v_k + s_k v_p. *)
Lemma design_col_dot : forall d v p k, (k < d)%nat -> (p < d)%nat ->
  dot d (design_col v p k) v = v k + design_shift v p k * v p.
Proof.
  intros d v p k Hk Hp. unfold dot, design_col, design.
  rewrite (sum_ext d _ (fun i => identity k i * v i + design_shift v p k * (unit_vec p i * v i)))
    by (intros; unfold identity; destruct (Nat.eq_dec i k), (Nat.eq_dec k i); subst;
        try congruence; ring).
  rewrite sum_plus, sum_identity_l by exact Hk. rewrite sum_scal_l.
  fold (dot d (unit_vec p) v). rewrite dot_unit_l by exact Hp. reflexivity.
Qed.

(** The design is invertible with inverse I - e_p s^T, and every u_k^T v <> 0 when v <> 0
    and p is an index of a largest |v_p|. Indeed |u_k^T v| >= |v_p| / 4 > 0. *)
Theorem design_invertible : forall d (v : vec) (p : nat), (p < d)%nat ->
  (forall i j, (i < d)%nat -> (j < d)%nat ->
     mat_mul d (design v p) (design_inverse v p) i j = identity i j /\
     mat_mul d (design_inverse v p) (design v p) i j = identity i j) /\
  ((exists i, (i < d)%nat /\ v i <> 0) ->
   (forall i, (i < d)%nat -> Rabs (v i) <= Rabs (v p)) ->
   forall k, (k < d)%nat ->
     Rabs (v p) / 4 <= Rabs (dot d (design_col v p k) v) /\ dot d (design_col v p k) v <> 0).
Proof.
  intros d v p Hp. split.
  - intros i j Hi Hj. unfold mat_mul, design, design_inverse.
    apply (rank_one_inverse d (unit_vec p) (design_shift v p) i j Hi Hj).
    apply design_shift_dot. exact Hp.
  - intros [i0 [Hi0 Hv0]] Hmax k Hk.
    assert (Hvp : 0 < Rabs (v p)).
    { pose proof (Hmax i0 Hi0). pose proof (Rabs_pos_lt (v i0) Hv0). lra. }
    rewrite design_col_dot by assumption.
    assert (Hq : Rabs (v p) / 4 <= Rabs (v k + design_shift v p k * v p)).
    { unfold design_shift. destruct (Nat.eq_dec k p) as [->|Hne].
      - rewrite Rmult_0_l, Rplus_0_r. lra.
      - destruct (Rlt_dec (4 * Rabs (v k)) (Rabs (v p))) as [Hsmall|Hbig].
        + rewrite Rmult_1_l. pose proof (Rabs_triang_inv (v p) (- v k)) as T.
          rewrite Rabs_Ropp in T. rewrite Rplus_comm.
          replace (v p + v k) with (v p - - v k) by ring. pose proof (Rabs_pos (v k)). lra.
        + rewrite Rmult_0_l, Rplus_0_r. lra. }
    split; [exact Hq|]. intros H0. rewrite H0, Rabs_R0 in Hq. lra.
Qed.

(** If U Uinv = I, then U^T w = 0 forces w = 0. *)
Lemma transpose_cancel : forall d (U Uinv : mat) (w : vec),
  (forall i j, (i < d)%nat -> (j < d)%nat -> mat_mul d U Uinv i j = identity i j) ->
  (forall k, (k < d)%nat -> sum d (fun i => U i k * w i) = 0) ->
  forall i, (i < d)%nat -> w i = 0.
Proof.
  intros d U Uinv w Hinv Hz i0 Hi0.
  assert (E : sum d (fun k => sum d (fun i => U i k * w i) * Uinv k i0) = 0).
  { apply sum_zero. intros k Hk. rewrite Hz by exact Hk. ring. }
  rewrite (sum_ext d _ (fun k => sum d (fun i => w i * (U i k * Uinv k i0)))) in E
    by (intros; rewrite <- sum_scal_r; apply sum_ext; intros; ring).
  rewrite sum_swap in E.
  rewrite (sum_ext d _ (fun i => w i * identity i i0)) in E.
  - rewrite sum_identity_r in E by exact Hi0. exact E.
  - intros i Hi. rewrite sum_scal_l. f_equal. apply Hinv; assumption.
Qed.

(** ** The learner's queries. *)

(** The argmax is an index of a largest |v_i|. *)
Lemma argmax_abs_spec : forall v n, (0 < n)%nat ->
  (argmax_abs v n < n)%nat /\ forall i, (i < n)%nat -> Rabs (v i) <= Rabs (v (argmax_abs v n)).
Proof.
  intros v n. induction n as [|n IH]; intros Hn; [lia|].
  destruct n as [|n'].
  - simpl. split; [lia|]. intros i Hi. assert (i = O) by lia. subst. lra.
  - destruct (IH ltac:(lia)) as [Hlt Hmax].
    change (argmax_abs v (S (S n'))) with
      (if Rlt_dec (Rabs (v (argmax_abs v (S n')))) (Rabs (v (S n')))
       then S n' else argmax_abs v (S n')).
    destruct (Rlt_dec (Rabs (v (argmax_abs v (S n')))) (Rabs (v (S n')))) as [Hl|Hnl].
    + split; [lia|]. intros i Hi. destruct (Nat.eq_dec i (S n')) as [->|]; [lra|].
      pose proof (Hmax i ltac:(lia)). lra.
    + split; [lia|]. intros i Hi. destruct (Nat.eq_dec i (S n')) as [->|]; [lra|].
      apply Hmax. lia.
Qed.

(** An oracle: the answer f N X to the query X of length N. *)
Definition oracle := nat -> tokens -> R.

(** The v-phase answers f([e_i]). *)
Definition answers_v (f : oracle) : vec := fun i => f 1%nat (seq1 (unit_vec i)).

(** The design the learner builds from the v-phase answers (p = argmax |v_i|). *)
Definition learner_design (d : nat) (f : oracle) : mat :=
  design (answers_v f) (argmax_abs (answers_v f) d).

(** The W-phase query [e_j + u_k; e_j]. *)
Definition w_query (d : nat) (f : oracle) (j k : nat) : tokens :=
  seq2 (vadd (unit_vec j) (fun i => learner_design d f i k)) (unit_vec j).

(** f and g agree on the learner's d + d^2 queries (asked adaptively of f; since the
    v-phase answers agree, the learner sends g the same W-phase queries). *)
Definition same_answers (d : nat) (f g : oracle) : Prop :=
  (forall i, (i < d)%nat -> f 1%nat (seq1 (unit_vec i)) = g 1%nat (seq1 (unit_vec i))) /\
  (forall j k, (j < d)%nat -> (k < d)%nat -> f 2%nat (w_query d f j k) = g 2%nat (w_query d f j k)).

Definition head_oracle (d : nat) (W : mat) (v : vec) : oracle := fun N X => attention d N X W v.

Lemma attention_length1_bias_free : forall d x W v, attention d 1 (seq1 x) W v = dot d x v.
Proof. intros. unfold attention. rewrite attention_length1. ring. Qed.

(** Two heads with v <> 0 that answer the learner's d^2 + d queries alike are equal. *)
Lemma head_probe : forall d W v b u, head_oracle d W v 2%nat (seq2 (vadd b u) b) =
  dot d b v + sigmoid (dot d u (mat_vec d W b)) * dot d u v.
Proof.
  intros. unfold head_oracle, attention. rewrite probe_identity_unscaled.
  rewrite dot_vadd_r, dot_zero_r, !Rplus_0_r. reflexivity.
Qed.

Theorem thm41_identifiable : forall d (W W' : mat) (v v' : vec),
  (exists i, (i < d)%nat /\ v i <> 0) ->
  same_answers d (head_oracle d W v) (head_oracle d W' v') ->
  (forall i j, (i < d)%nat -> (j < d)%nat -> W i j = W' i j) /\
  (forall i, (i < d)%nat -> v i = v' i).
Proof.
  intros d W W' v v' Hv [H1 H2].
  assert (Hvh : forall i, (i < d)%nat -> answers_v (head_oracle d W v) i = v i).
  { intros i Hi. unfold answers_v, head_oracle.
    rewrite attention_length1_bias_free, dot_unit_l by exact Hi. reflexivity. }
  assert (Hvv : forall i, (i < d)%nat -> v i = v' i).
  { intros i Hi. pose proof (H1 i Hi) as E. unfold head_oracle in E.
    rewrite !attention_length1_bias_free, !dot_unit_l in E by exact Hi. exact E. }
  split; [|exact Hvv].
  assert (Hd : (0 < d)%nat) by (destruct Hv as [i [Hi _]]; lia).
  destruct (argmax_abs_spec (answers_v (head_oracle d W v)) d Hd) as [Hp Hmax].
  set (p := argmax_abs (answers_v (head_oracle d W v)) d) in *.
  destruct (design_invertible d (answers_v (head_oracle d W v)) p Hp) as [Hinv Hnz].
  assert (Hvh0 : exists i, (i < d)%nat /\ answers_v (head_oracle d W v) i <> 0).
  { destruct Hv as [i [Hi Hvi]]. exists i. rewrite Hvh by exact Hi. split; assumption. }
  set (u := design_col (answers_v (head_oracle d W v)) p) in *.
  (* each probe pins down u_k^T W e_j *)
  assert (Hprobe : forall j k, (j < d)%nat -> (k < d)%nat ->
            dot d (u k) (mat_vec d W (unit_vec j)) = dot d (u k) (mat_vec d W' (unit_vec j))).
  { intros j k Hj Hk. pose proof (H2 j k Hj Hk) as E.
    unfold w_query in E.
    change (fun i => learner_design d (head_oracle d W v) i k) with (u k) in E.
    rewrite !head_probe in E.
    rewrite !dot_unit_l in E by exact Hj. rewrite <- (Hvv j Hj) in E.
    assert (Huv : dot d (u k) v' = dot d (u k) v).
    { apply dot_ext; [reflexivity|]. intros. symmetry. apply Hvv. assumption. }
    rewrite Huv in E.
    assert (Hnz' : dot d (u k) v <> 0).
    { rewrite (dot_ext d (u k) (u k) v (answers_v (head_oracle d W v))); [| reflexivity |].
      - apply (Hnz Hvh0 Hmax k Hk).
      - intros. symmetry. apply Hvh. assumption. }
    apply sigmoid_injective. apply (Rmult_eq_reg_r (dot d (u k) v)); [|exact Hnz']. lra. }
  intros i j Hi Hj.
  assert (Hcol : forall i, (i < d)%nat -> W i j - W' i j = 0).
  { apply (transpose_cancel d (design (answers_v (head_oracle d W v)) p) (design_inverse (answers_v (head_oracle d W v)) p)).
    - intros a b Ha Hb. apply (Hinv a b Ha Hb).
    - intros k Hk. pose proof (Hprobe j k Hj Hk) as E. unfold dot in E.
      rewrite (sum_ext d _ (fun i => u k i * W i j)) in E
        by (intros; rewrite mat_vec_unit by exact Hj; reflexivity).
      rewrite (sum_ext d (fun i => u k i * mat_vec d W' (unit_vec j) i)
                 (fun i => u k i * W' i j)) in E
        by (intros; rewrite mat_vec_unit by exact Hj; reflexivity).
      rewrite (sum_ext d _ (fun i => u k i * W i j - u k i * W' i j)) by (intros; unfold u, design_col; ring).
      rewrite sum_minus, E. ring. }
  pose proof (Hcol i Hi). lra.
Qed.
