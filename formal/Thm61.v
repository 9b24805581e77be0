(** * Theorem 6.1's error propagation: from Lemma A.1's constant to the bound on each entry.

    [thm61_entry_bound]: for the probe [b e_i + a e_j; a e_j] with answer
    f = a v_j + sigmoid (a b W_ij) b v_i, answers off by at most tau (e_f, e_i, e_j),
    |v_i| >= mu > tau and a b W_ij in [-1/2, 1/2], the learner's estimate
    W^_ij = logit (clip alpha^) / (a b), alpha^ = (f^ - a v^_j) / (b v^_i), satisfies
    |W^_ij - W_ij| <= L tau (1 + a + sigmoid (1/2) b) / (a b^2 (mu - tau)),
    with L = 2 + e^{1/2} + e^{-1/2} (Lemma A.1), for all reals. *)

From Coq Require Import Reals Lra Lia.
From VerifiedAttn Require Import Defs Softmax LemmaA1 CertHead.
Open Scope R_scope.

Definition s_lo : R := sigmoid (- (1/2)).
Definition s_hi : R := sigmoid (1/2).
Definition clip (y : R) : R := Rmax s_lo (Rmin y s_hi).

Lemma clip_nonexpansive : forall y x, s_lo <= x <= s_hi ->
  Rabs (clip y - x) <= Rabs (y - x) /\ s_lo <= clip y <= s_hi.
Proof.
  intros y x Hx. unfold clip, Rmax, Rmin.
  repeat destruct Rle_dec; split; try lra; split_Rabs; lra.
Qed.

Theorem thm61_entry_bound : forall a b vi vj W ef ei ej tau mu,
  0 < a -> 0 < b -> 0 < tau < mu -> mu <= Rabs vi ->
  Rabs ef <= tau -> Rabs ei <= tau -> Rabs ej <= tau ->
  - (1/2) <= a * b * W <= 1/2 ->
  let f := a * vj + sigmoid (a * b * W) * b * vi in
  let alpha_hat := (f + ef - a * (vj + ej)) / (b * (vi + ei)) in
  Rabs (logit (clip alpha_hat) / (a * b) - W) <=
    lipschitz_L * tau * (1 + a + s_hi * b) / (a * b ^ 2 * (mu - tau)).
Proof.
  intros a b vi vj W ef ei ej tau mu Ha Hb Ht Hmu Hf Hi Hj HW f alpha_hat.
  set (alpha := sigmoid (a * b * W)).
  assert (Hal : s_lo <= alpha <= s_hi).
  { unfold s_lo, s_hi, alpha. split; apply sigmoid_le; lra. }
  assert (Hpos : 0 < alpha) by apply sigmoid_pos.
  assert (Hden : mu - tau <= Rabs (vi + ei)).
  { pose proof (Rabs_triang_inv vi (- ei)). rewrite Rabs_Ropp in H.
    replace (vi - - ei) with (vi + ei) in H by ring. lra. }
  assert (Hne : vi + ei <> 0) by (intro E; rewrite E, Rabs_R0 in Hden; lra).
  assert (Eq : alpha_hat - alpha = (ef - a * ej - alpha * b * ei) / (b * (vi + ei))).
  { unfold alpha_hat, f. fold alpha. field. split; lra. }
  assert (Num : Rabs (ef - a * ej - alpha * b * ei) <= tau * (1 + a + s_hi * b)).
  { eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_Ropp.
    eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|]. rewrite Rabs_Ropp.
    rewrite !Rabs_mult, (Rabs_right a), (Rabs_right alpha), (Rabs_right b) by lra.
    assert (alpha * b * Rabs ei <= s_hi * b * tau).
    { apply Rmult_le_compat; try nra. apply Rabs_pos. }
    nra. }
  assert (Err : Rabs (alpha_hat - alpha) <= tau * (1 + a + s_hi * b) / (b * (mu - tau))).
  { rewrite Eq. unfold Rdiv. rewrite Rabs_mult, Rabs_inv, Rabs_mult, (Rabs_right b) by lra.
    apply Rmult_le_compat; try apply Rabs_pos; [|exact Num|].
    - left. apply Rinv_0_lt_compat. apply Rmult_lt_0_compat; [lra|]. lra.
    - apply Rinv_le_contravar; [apply Rmult_lt_0_compat; lra|].
      apply Rmult_le_compat_l; lra. }
  destruct (clip_nonexpansive alpha_hat alpha Hal) as [Hc Hcr].
  pose proof (lemmaA1_lipschitz (clip alpha_hat) alpha Hcr Hal) as A1.
  assert (Lg : logit alpha = a * b * W) by (unfold alpha; apply logit_sigmoid).
  rewrite Lg in A1.
  assert (HL : 0 < lipschitz_L) by (unfold lipschitz_L; pose proof (exp_pos (1/2));
                                    pose proof (exp_pos (- (1/2))); lra).
  replace (logit (clip alpha_hat) / (a * b) - W)
    with ((logit (clip alpha_hat) - a * b * W) / (a * b)) by (field; lra).
  unfold Rdiv at 1. rewrite Rabs_mult, Rabs_inv, (Rabs_right (a * b)) by nra.
  apply (Rmult_le_reg_r (a * b)); [nra|].
  rewrite Rmult_assoc, Rinv_l, Rmult_1_r by nra.
  eapply Rle_trans; [exact A1|].
  replace (lipschitz_L * tau * (1 + a + s_hi * b) / (a * b ^ 2 * (mu - tau)) * (a * b))
    with (lipschitz_L * (tau * (1 + a + s_hi * b) / (b * (mu - tau)))) by (field; lra).
  apply Rmult_le_compat_l; [lra|]. lra.
Qed.
