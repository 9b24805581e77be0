(** * Theorem 4.1, affine form: d^2 + 2d + 1 queries identify (W, c, v, beta), for every d.

    [thm41_affine_identifiable]: let U be a design with an inverse (U Uinv = I on d x d),
    tc_k and t_kj nonzero scales, and u_k^T v <> 0 for every column u_k of U. If two affine
    heads (W, c, v, beta) and (W', c', v', beta') give the same answers to the queries
    [0], [e_i], [tc_k u_k; 0] and [e_j + t_kj u_k; e_j] (i, j, k < d: 1 + d + d + d^2 of
    them), then beta = beta', v = v', c = c' and W = W' on every coordinate below d.
    beta is read off [0], v off [e_i]; [tc_k u_k; 0] gives sigmoid (tc_k u_k^T c), hence
    u_k^T c; [e_j + t_kj u_k; e_j] gives u_k^T (W e_j + c); c = U^{-T}(U^T c), W = U^{-T}(U^T W).
    The learner's own design satisfies the hypotheses ([Thm41.design_invertible]). *)

From Coq Require Import Reals Lra Lia.
From VerifiedAttn Require Import Defs Softmax CertHead.
Open Scope R_scope.

Definition col (U : mat) (k : nat) : vec := fun i => U i k.

Definition same_answers (d : nat) (U t : mat) (tc : vec)
    (W : mat) (c v : vec) (beta : R) (W' : mat) (c' v' : vec) (beta' : R) : Prop :=
  let f N X := attention_affine d N X W c v beta in
  let f' N X := attention_affine d N X W' c' v' beta' in
  f 1%nat (seq1 zero_vec) = f' 1%nat (seq1 zero_vec) /\
  (forall i, (i < d)%nat -> f 1%nat (seq1 (unit_vec i)) = f' 1%nat (seq1 (unit_vec i))) /\
  (forall k, (k < d)%nat -> let X := seq2 (vscale (tc k) (col U k)) zero_vec in
     f 2%nat X = f' 2%nat X) /\
  (forall k j, (k < d)%nat -> (j < d)%nat ->
     let X := seq2 (vadd (unit_vec j) (vscale (t k j) (col U k))) (unit_vec j) in
     f 2%nat X = f' 2%nat X).

(** The answer to [t u; 0]: the query token is 0, so the score difference is t u^T c. *)
Lemma answer_c_probe : forall d W c v beta t u,
  attention_affine d 2 (seq2 (vscale t u) zero_vec) W c v beta =
  beta + sigmoid (t * dot d u c) * (t * dot d u v).
Proof.
  intros. unfold attention_affine. rewrite sum_two.
  rewrite softmax2_second, softmax2_sigmoid.
  unfold scores_affine, seq2, query_token. simpl pred.
  rewrite !dot_zero_l, !dot_vscale_l.
  rewrite (dot_ext d u u (vadd (mat_vec d W zero_vec) c) c)
    by (intros; try reflexivity; unfold vadd, mat_vec, zero_vec;
        rewrite sum_zero by (intros; ring); ring).
  replace (t * dot d u c - 0) with (t * dot d u c) by ring. ring.
Qed.

Lemma col_mat_unit : forall d U (M : mat) k j, (j < d)%nat ->
  dot d (col U k) (mat_vec d M (unit_vec j)) = sum d (fun l => U l k * M l j).
Proof.
  intros. unfold dot, col. apply sum_ext. intros l Hl. rewrite mat_vec_unit by assumption.
  reflexivity.
Qed.

(** a + sigmoid x * s = a + sigmoid y * s with s <> 0 and t <> 0: x = y. *)
Lemma cancel_sigmoid : forall a s t x y, s <> 0 -> t <> 0 ->
  a + sigmoid (t * x) * s = a + sigmoid (t * y) * s -> x = y.
Proof.
  intros a s t x y Hs Ht H.
  assert (E : sigmoid (t * x) = sigmoid (t * y)).
  { apply (Rmult_eq_reg_r s); [lra|exact Hs]. }
  apply sigmoid_injective in E. apply (Rmult_eq_reg_l t); [exact E|exact Ht].
Qed.

Theorem thm41_affine_identifiable : forall d (U Uinv t : mat) (tc : vec)
    (W W' : mat) (c c' v v' : vec) (beta beta' : R),
  (forall l i, (l < d)%nat -> (i < d)%nat -> mat_mul d U Uinv l i = identity l i) ->
  (forall k, (k < d)%nat -> tc k <> 0 /\ dot d (col U k) v <> 0) ->
  (forall k j, (k < d)%nat -> (j < d)%nat -> t k j <> 0) ->
  same_answers d U t tc W c v beta W' c' v' beta' ->
  beta = beta' /\ (forall i, (i < d)%nat -> v i = v' i /\ c i = c' i) /\
  (forall i j, (i < d)%nat -> (j < d)%nat -> W i j = W' i j).
Proof.
  intros d U Uinv t tc W W' c c' v v' beta beta' Hinv Hk Ht [A0 [Av [Ac Aw]]].
  cbv zeta in Ac, Aw.
  rewrite !attention_length1, !dot_zero_l in A0.
  assert (Eb : beta = beta') by lra.
  assert (Ev : forall i, (i < d)%nat -> v i = v' i).
  { intros i Hi. pose proof (Av i Hi) as A. rewrite !attention_length1, !dot_unit_l in A
      by exact Hi. lra. }
  assert (Euv : forall k, dot d (col U k) v = dot d (col U k) v')
    by (intros; apply dot_ext; [reflexivity|exact Ev]).
  assert (Euc : forall k, (k < d)%nat -> dot d (col U k) c = dot d (col U k) c').
  { intros k Hk0. destruct (Hk k Hk0) as [Htc Huv]. pose proof (Ac k Hk0) as A.
    rewrite !answer_c_probe, <- Euv, <- Eb in A.
    apply (cancel_sigmoid beta (tc k * dot d (col U k) v) (tc k)); [|exact Htc|exact A].
    apply Rmult_integral_contrapositive_currified; assumption. }
  assert (Ec : forall i, (i < d)%nat -> c i = c' i).
  { intros i Hi.
    rewrite <- (unmix d U Uinv (fun l _ => c l) i O Hi Hinv),
            <- (unmix d U Uinv (fun l _ => c' l) i O Hi Hinv).
    apply sum_ext. intros k Hk0. f_equal. exact (Euc k Hk0). }
  split; [exact Eb|split; [intros i Hi; split; [apply Ev|apply Ec]; exact Hi|]].
  assert (Em : forall k j, (k < d)%nat -> (j < d)%nat ->
            dot d (col U k) (mat_vec d W (unit_vec j)) =
            dot d (col U k) (mat_vec d W' (unit_vec j))).
  { intros k j Hk0 Hj. destruct (Hk k Hk0) as [_ Huv]. pose proof (Aw k j Hk0 Hj) as A.
    rewrite !probe_identity, !dot_vadd_r, <- Euv, <- (Euc k Hk0), <- Eb in A.
    rewrite !dot_unit_l in A by exact Hj. rewrite <- (Ev j Hj) in A.
    assert (A' : (v j + beta) + sigmoid (t k j * (dot d (col U k) (mat_vec d W (unit_vec j))
                   + dot d (col U k) c)) * (t k j * dot d (col U k) v) =
                 (v j + beta) + sigmoid (t k j * (dot d (col U k) (mat_vec d W' (unit_vec j))
                   + dot d (col U k) c)) * (t k j * dot d (col U k) v)) by lra.
    assert (Hs : t k j * dot d (col U k) v <> 0)
      by (apply Rmult_integral_contrapositive_currified; [apply Ht; assumption|exact Huv]).
    apply (cancel_sigmoid _ _ _ _ _ Hs (Ht k j Hk0 Hj)) in A'.
    lra. }
  intros i j Hi Hj.
  rewrite <- (unmix d U Uinv W i j Hi Hinv), <- (unmix d U Uinv W' i j Hi Hinv).
  apply sum_ext. intros k Hk0. f_equal.
  rewrite <- !col_mat_unit by exact Hj. apply Em; assumption.
Qed.
