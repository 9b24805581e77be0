(** * The skeleton identity behind exact low-rank recovery (verified_attn.low_rank.skeleton).

    W is d x d, C is d x r (C = W B_r: r measured columns), U_S is d x r (the pivot columns
    of the design), so U_S^T C is r x r. If the columns of C span the column space of W
    (W = C X for some r x d matrix X: this is where rank W = r enters) and U_S^T C has an
    inverse, then W = C (U_S^T C)^{-1} U_S^T W, for every d and r.

    [skeleton_determines] (Theorem 5.1's recovery): two d x d matrices W, W' whose columns
    are spanned by their r measured columns C = W B (rank r), with the same measurements
    W B and U_S^T W (2dr - r^2 distinct numbers, the r x r block U_S^T W B counted once) and
    U_S^T W B invertible (the pivots), are equal. *)

From Coq Require Import Reals Lra Lia.
From VerifiedAttn Require Import Defs.
Open Scope R_scope.

Lemma mat_mul_identity_l : forall r (X : mat) b j, (b < r)%nat ->
  mat_mul r identity X b j = X b j.
Proof. intros. unfold mat_mul. apply (sum_identity_l r b (fun k => X k j)). assumption. Qed.

Lemma mat_mul_ext_r : forall n (A B B' : mat) i j,
  (forall k, (k < n)%nat -> B k j = B' k j) -> mat_mul n A B i j = mat_mul n A B' i j.
Proof. intros. unfold mat_mul. apply sum_ext. intros. rewrite H by assumption. reflexivity. Qed.

(** Only a left inverse Ninv (U_S^T C) = I is needed. *)
Theorem skeleton_identity : forall d r (W C X US Ninv : mat),
  (forall i j, (i < d)%nat -> (j < d)%nat -> W i j = mat_mul r C X i j) ->
  (forall a b, (a < r)%nat -> (b < r)%nat ->
     mat_mul r Ninv (mat_mul d (transpose US) C) a b = identity a b) ->
  forall i j, (i < d)%nat -> (j < d)%nat ->
    mat_mul r (mat_mul r C Ninv) (mat_mul d (transpose US) W) i j = W i j.
Proof.
  intros d r W C X US Ninv HW HN i j Hi Hj.
  rewrite mat_mul_assoc.
  (* U_S^T W = (U_S^T C) X on the columns j < d *)
  rewrite (mat_mul_ext_r r C _ (mat_mul r Ninv (mat_mul r (mat_mul d (transpose US) C) X))).
  2: { intros b Hb. apply mat_mul_ext_r. intros a Ha.
       rewrite (mat_mul_ext_r d (transpose US) W (mat_mul r C X)) by (intros; apply HW; assumption).
       rewrite mat_mul_assoc. reflexivity. }
  rewrite (mat_mul_ext_r r C _ X).
  2: { intros b Hb. rewrite <- mat_mul_assoc.
       unfold mat_mul at 1. rewrite (sum_ext r _ (fun k => identity b k * X k j)).
       - apply (sum_identity_l r b (fun k => X k j)). assumption.
       - intros k Hk. rewrite HN by assumption. reflexivity. }
  symmetry. apply HW; assumption.
Qed.

(** The skeleton's measurement count: step k measures (d - k) + (d - k - 1) new entries,
    so r steps make sum_{k<r} (2 (d - k) - 1) = 2 d r - r^2 measurements. *)
Theorem skeleton_measurement_count : forall d r,
  sum r (fun k => 2 * (INR d - INR k) - 1) = 2 * INR d * INR r - INR r * INR r.
Proof.
  intros d r. induction r as [|r IH]; simpl sum; [simpl; ring|].
  rewrite IH, S_INR. ring.
Qed.

(** Theorem 5.1's recovery: the measured columns W B and pivot rows U_S^T W determine a W
    whose column space is that of W B, once U_S^T W B has a (left) inverse. *)
Theorem skeleton_determines : forall d r (W W' B US Ninv X X' : mat),
  (forall i j, (i < d)%nat -> (j < d)%nat -> W i j = mat_mul r (mat_mul d W B) X i j) ->
  (forall i j, (i < d)%nat -> (j < d)%nat -> W' i j = mat_mul r (mat_mul d W' B) X' i j) ->
  (forall i b, (i < d)%nat -> (b < r)%nat -> mat_mul d W B i b = mat_mul d W' B i b) ->
  (forall a j, (a < r)%nat -> (j < d)%nat ->
     mat_mul d (transpose US) W a j = mat_mul d (transpose US) W' a j) ->
  (forall a b, (a < r)%nat -> (b < r)%nat ->
     mat_mul r Ninv (mat_mul d (transpose US) (mat_mul d W B)) a b = identity a b) ->
  forall i j, (i < d)%nat -> (j < d)%nat -> W i j = W' i j.
Proof.
  intros d r W W' B US Ninv X X' HW HW' HC HR HN i j Hi Hj.
  assert (HN' : forall a b, (a < r)%nat -> (b < r)%nat ->
            mat_mul r Ninv (mat_mul d (transpose US) (mat_mul d W' B)) a b = identity a b).
  { intros a b Ha Hb. rewrite <- (HN a b Ha Hb). apply mat_mul_ext_r. intros k Hk.
    apply mat_mul_ext_r. intros l Hl. symmetry. apply HC; assumption. }
  rewrite <- (skeleton_identity d r W (mat_mul d W B) X US Ninv HW HN i j Hi Hj).
  rewrite <- (skeleton_identity d r W' (mat_mul d W' B) X' US Ninv HW' HN' i j Hi Hj).
  unfold mat_mul at 1. unfold mat_mul at 4. apply sum_ext. intros b Hb. f_equal.
  - apply sum_ext. intros a Ha. rewrite HC by assumption. reflexivity.
  - apply HR; assumption.
Qed.
