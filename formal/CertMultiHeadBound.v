(** * The canonical multi-head identification step from answers known to eps.

    [cauchy_groups_bound] (every n), the quantitative [CertMultiHeadId.cauchy_groups_zero]:
    if |sum_j c_j / (x_i + z_j)| <= eps at n points at least g apart, over at most n pairs
    with 0 < x_i + z_j <= A and poles that differ at least delta apart, every group sum
    (of the c_j at one pole) is at most kbound A g delta n * eps = A (1 + 2 A^2 / (delta g))^n
    eps (the same elimination, each step bounded).
    [kprobe_masses_close] (every d, H0): answers F(0 .. 2 H0) at (u, b) within eps, scores
    in [-S, S] that differ at least sigma apart: score masses within kconst H0 S sigma * 2 eps.
    [kprobe_pairs_den]: if all scores and residues have denominators at most D ([den_sep]:
    1/D^2 apart; [mass_den]: a mass difference has denominator at most D^(2 H0)) and
    kconst * 2 eps * D^(2 H0) < 1, the same (residue, score) pairs up to order.
    [mh_pairs_close], [mh_identified_close] (every run): if [check_close] passes over Q
    (intervals at most eps wide, certified scores in [-Sm, Sm], kz * 2 eps * D^(2 H0) < 1),
    every model of at most H0 heads that [meets] the assumption and answers inside every
    recorded interval has the certified pairs at every pair, and is the certified model. *)

From Coq Require Import Reals QArith Qabs Qreals Lra Lia List Permutation FinFun ZArith.
From VerifiedAttn Require Import Defs CertHead CertMultiHead CertMultiHeadId CertMultiHeadLabel.
Import ListNotations.
Open Scope R_scope.

(** ** Lists: dropping a pole present in the list shortens it. *)

Lemma drop_le : forall w L, (length (drop w L) <= length L)%nat.
Proof.
  intros w. induction L as [|p L IH]; [simpl; lia|]. unfold drop in *. simpl.
  destruct (Req_EM_T (snd p) w); simpl; lia.
Qed.

Lemma drop_lt : forall w c L, In (c, w) L -> (length (drop w L) < length L)%nat.
Proof.
  intros w c. induction L as [|[c' z'] L IH]; intros H; [contradiction|].
  pose proof (drop_le w L). unfold drop in *. simpl.
  destruct H as [E|H]; simpl.
  - injection E as -> ->.
    destruct (Req_EM_T w w) as [_|n]; [lia|exfalso; apply n; reflexivity].
  - destruct (Req_EM_T z' w); simpl; [lia|]. specialize (IH H). lia.
Qed.

Lemma lscale_in : forall g c z L, In (c, z) (lscale g L) -> exists c', In (c', z) L.
Proof.
  intros g c z L H. unfold lscale in H. apply in_map_iff in H as [[c' z'] [E H]].
  injection E as _ <-. exists c'. exact H.
Qed.

(** A list whose poles all equal w: its psum is csum w / (x + w). *)
Lemma psum_single : forall x w L, (forall c z, In (c, z) L -> z = w) ->
  psum x L = csum w L * / (x + w).
Proof.
  intros x w L H. unfold psum. rewrite (lsum_split _ w L).
  replace (drop w L) with (@nil (R * R)); [simpl; ring|].
  symmetry. apply incl_l_nil. intros [c z] Hc. apply drop_in in Hc as [Hc Hz].
  simpl in Hz. exfalso. apply Hz, (H c z Hc).
Qed.

(** ** The growth factor. *)

Definition kbound (A g delta : R) (n : nat) : R := A * (1 + 2 * A * A / (delta * g)) ^ n.

Lemma kbound_ge : forall A g delta n, 0 <= A -> 0 < g -> 0 < delta ->
  A <= kbound A g delta n /\ 0 <= kbound A g delta n.
Proof.
  intros A g delta n HA Hg Hd. unfold kbound.
  assert (Q : 0 <= 2 * A * A / (delta * g)).
  { unfold Rdiv. apply Rmult_le_pos; [nra|]. left. apply Rinv_0_lt_compat. nra. }
  assert (P : 1 <= (1 + 2 * A * A / (delta * g)) ^ n) by (apply pow_R1_Rle; lra).
  split; nra.
Qed.

Lemma kbound_step : forall A g delta n, 0 <= A -> 0 < g -> 0 < delta ->
  A / delta * (kbound A g delta n * (2 * A / g)) <= kbound A g delta (S n).
Proof.
  intros A g delta n HA Hg Hd. destruct (kbound_ge A g delta n HA Hg Hd) as [_ K0].
  unfold kbound in *. simpl. set (P := (1 + 2 * A * A / (delta * g)) ^ n) in *.
  replace (A / delta * (A * P * (2 * A / g))) with (2 * A * A / (delta * g) * (A * P))
    by (field; lra).
  assert (0 <= A * P) by exact K0. nra.
Qed.

(** ** The quantitative Cauchy elimination. *)

(** One elimination step: take out the pole w0 with the last point x n; the rescaled
    remaining list is small at the first n points. *)
Lemma elim_small : forall n x L w0 c0 A g eps, In (c0, w0) L -> 0 < g ->
  (forall i j, (i < S n)%nat -> (j < S n)%nat -> i <> j -> g <= Rabs (x i - x j)) ->
  (forall i c z, (i < S n)%nat -> In (c, z) L -> 0 < x i + z <= A) ->
  (forall i, (i < S n)%nat -> Rabs (psum (x i) L) <= eps) ->
  forall i, (i < n)%nat ->
  Rabs (psum (x i) (lscale (fun z => (w0 - z) / (x n + z)) (drop w0 L))) <= 2 * A / g * eps.
Proof.
  intros n x L w0 c0 A g eps Hw0L Hg Hgap Hpos Heps i Hi.
  set (xl := x n). set (L' := drop w0 L). set (S0 := csum w0 L).
  assert (Hw0 : forall j, (j < S n)%nat -> 0 < x j + w0 <= A)
    by (intros j Hj; exact (Hpos j c0 w0 Hj Hw0L)).
  assert (Split : forall j, (j < S n)%nat ->
    (x j + w0) * psum (x j) L' = (x j + w0) * psum (x j) L - S0).
  { intros j Hj. unfold psum. rewrite (lsum_split _ w0 L). fold S0 L'.
    pose proof (Hw0 j Hj). field. lra. }
  assert (Hxi : x i <> xl).
  { intros E. pose proof (Hgap i n ltac:(lia) ltac:(lia) ltac:(lia)). unfold xl in E.
    rewrite E, Rminus_diag_eq, Rabs_R0 in H by reflexivity. lra. }
  assert (Eq : psum (x i) (lscale (fun z => (w0 - z) / (xl + z)) L') =
    / (xl - x i) * ((x i + w0) * psum (x i) L - (xl + w0) * psum xl L)).
  { rewrite elim_psum; [|exact Hxi|].
    - rewrite (Split i) by lia. unfold xl. rewrite (Split n) by lia. ring.
    - intros c z Hc. apply drop_in in Hc as [Hc _]. simpl in Hc.
      pose proof (Hpos i c z ltac:(lia) Hc). pose proof (Hpos n c z ltac:(lia) Hc). unfold xl. lra. }
  fold xl. fold L'. rewrite Eq.
  pose proof (Hgap n i ltac:(lia) ltac:(lia) ltac:(lia)) as G. fold xl in G.
  pose proof (Hw0 i ltac:(lia)). pose proof (Hw0 n ltac:(lia)). fold xl in H0.
  pose proof (Heps i ltac:(lia)). pose proof (Heps n ltac:(lia)). fold xl in H2.
  assert (T : Rabs ((x i + w0) * psum (x i) L - (xl + w0) * psum xl L) <= 2 * A * eps).
  { unfold Rminus. eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_Ropp, !Rabs_mult.
    rewrite (Rabs_pos_eq (x i + w0)), (Rabs_pos_eq (xl + w0)) by lra.
    assert (0 <= Rabs (psum (x i) L)) by apply Rabs_pos.
    assert (0 <= Rabs (psum xl L)) by apply Rabs_pos. nra. }
  rewrite Rabs_mult, Rabs_inv.
  assert (Gp : 0 < Rabs (xl - x i)) by lra.
  replace (2 * A / g * eps) with (/ g * (2 * A * eps)) by (field; lra).
  apply Rmult_le_compat; [left; apply Rinv_0_lt_compat; lra|apply Rabs_pos| |exact T].
  apply Rinv_le_contravar; lra.
Qed.

(** Every n: at most n pairs, n points at least g apart with 0 < x_i + z_j <= A, poles
    that differ at least delta apart, |psum| <= eps at every point: every group sum is at
    most kbound A g delta n * eps. *)
Theorem cauchy_groups_bound : forall n (x : nat -> R) (L : list (R * R)) A g delta eps,
  (length L <= n)%nat -> 0 <= A -> 0 < g -> 0 < delta -> 0 <= eps ->
  (forall i j, (i < n)%nat -> (j < n)%nat -> i <> j -> g <= Rabs (x i - x j)) ->
  (forall i c z, (i < n)%nat -> In (c, z) L -> 0 < x i + z <= A) ->
  (forall c z c' z', In (c, z) L -> In (c', z') L -> z <> z' -> delta <= Rabs (z - z')) ->
  (forall i, (i < n)%nat -> Rabs (psum (x i) L) <= eps) ->
  forall w, Rabs (csum w L) <= kbound A g delta n * eps.
Proof.
  induction n as [|n IH]; intros x L A g delta eps Hlen HA Hg Hd He Hgap Hpos Hsep Heps w1.
  { destruct L; [|simpl in Hlen; lia]. unfold csum. simpl. rewrite Rabs_R0.
    destruct (kbound_ge A g delta O HA Hg Hd). nra. }
  destruct (Req_EM_T (csum w1 L) 0) as [Z|Hne].
  { rewrite Z, Rabs_R0. destruct (kbound_ge A g delta (S n) HA Hg Hd). nra. }
  destruct (csum_in w1 L Hne) as [c1 Hc1].
  destruct (find (fun p => if Req_EM_T (snd p) w1 then false else true) L)
    as [[c0 w0]|] eqn:F.
  - (* another pole w0: eliminate it *)
    apply find_some in F as [Hw0L Fw]. simpl in Fw.
    destruct (Req_EM_T w0 w1) as [_|Hw]; [discriminate|].
    set (L'' := lscale (fun z => (w0 - z) / (x n + z)) (drop w0 L)).
    assert (B'' : Rabs (csum w1 L'') <= kbound A g delta n * (2 * A / g * eps)).
    { apply (IH x L'' A g delta); try assumption.
      - unfold L'', lscale. rewrite map_length. pose proof (drop_lt w0 c0 L Hw0L). lia.
      - unfold Rdiv. apply Rmult_le_pos; [|exact He]. apply Rmult_le_pos; [lra|].
        left. apply Rinv_0_lt_compat, Hg.
      - intros i j Hi Hj. apply Hgap; lia.
      - intros i c z Hi Hc. apply lscale_in in Hc as [c' Hc]. apply drop_in in Hc as [Hc _].
        apply (Hpos i c' z); [lia|exact Hc].
      - intros c z c' z' H1 H2. apply lscale_in in H1 as [b1 H1]. apply lscale_in in H2 as [b2 H2].
        apply drop_in in H1 as [H1 _]. apply drop_in in H2 as [H2 _]. exact (Hsep _ _ _ _ H1 H2).
      - intros i Hi. exact (elim_small n x L w0 c0 A g eps Hw0L Hg Hgap Hpos Heps i Hi). }
    unfold L'' in B''. rewrite csum_scale, csum_drop_other in B'' by (intros E; apply Hw; auto).
    pose proof (Hpos n c1 w1 ltac:(lia) Hc1) as P1.
    pose proof (Hsep c0 w0 c1 w1 Hw0L Hc1 Hw) as Sep.
    replace (csum w1 L) with ((x n + w1) / (w0 - w1) * ((w0 - w1) / (x n + w1) * csum w1 L)).
    2:{ field. split; [lra|]. intros E. apply Hw. lra. }
    rewrite Rabs_mult. eapply Rle_trans; [|apply Rmult_le_compat_r; [exact He|apply (kbound_step A g delta n HA Hg Hd)]].
    replace (kbound A g delta n * (2 * A / g * eps)) with (kbound A g delta n * (2 * A / g) * eps)
      in B'' by ring.
    replace (A / delta * (kbound A g delta n * (2 * A / g)) * eps)
      with (A / delta * (kbound A g delta n * (2 * A / g) * eps)) by ring.
    apply Rmult_le_compat; [apply Rabs_pos|apply Rabs_pos| |exact B''].
    unfold Rdiv. rewrite Rabs_mult, Rabs_inv, (Rabs_pos_eq (x n + w1)) by lra.
    apply Rmult_le_compat; [lra|left; apply Rinv_0_lt_compat; lra|lra|].
    apply Rinv_le_contravar; [exact Hd|exact Sep].
  - (* every pole is w1: psum (x 0) L = csum w1 L / (x 0 + w1) *)
    assert (All : forall c z, In (c, z) L -> z = w1).
    { intros c z Hc. pose proof (find_none _ L F (c, z) Hc) as E. simpl in E.
      destruct (Req_EM_T z w1); [assumption|discriminate]. }
    pose proof (psum_single (x O) w1 L All) as E.
    pose proof (Hpos O c1 w1 ltac:(lia) Hc1) as P.
    pose proof (Heps O ltac:(lia)) as H0.
    replace (csum w1 L) with ((x O + w1) * psum (x O) L) by (rewrite E; field; lra).
    rewrite Rabs_mult, (Rabs_pos_eq (x O + w1)) by lra.
    destruct (kbound_ge A g delta (S n) HA Hg Hd) as [K1 _].
    assert (0 <= Rabs (psum (x O) L)) by apply Rabs_pos. nra.
Qed.

Lemma exp_le : forall a b, a <= b -> exp a <= exp b.
Proof.
  intros a b H. destruct (Rle_lt_or_eq_dec a b H) as [H1|H1]; [left; apply exp_increasing, H1|rewrite H1; lra].
Qed.

(** Poles e^a, e^b of scores in [-S, S] are at least e^-S |a - b| apart. *)
Lemma exp_sep : forall a b S, Rabs a <= S -> Rabs b <= S ->
  exp (- S) * Rabs (a - b) <= Rabs (exp a - exp b).
Proof.
  assert (W : forall a b S, Rabs b <= S -> b <= a ->
            exp (- S) * Rabs (a - b) <= Rabs (exp a - exp b)).
  { intros a b S Hb Hab. rewrite (Rabs_pos_eq (a - b)) by lra.
    replace a with (b + (a - b)) at 2 by ring. rewrite exp_plus.
    pose proof (exp_ineq1_le (a - b)). pose proof (exp_pos b).
    assert (exp (- S) <= exp b) by (apply exp_le; split_Rabs; lra).
    rewrite Rabs_pos_eq by nra. pose proof (exp_pos (- S)). nra. }
  intros a b S Ha Hb. destruct (Rle_dec b a) as [H|H]; [apply W; assumption|].
  rewrite Rabs_minus_sym, (Rabs_minus_sym (exp a)). apply W; [assumption|lra].
Qed.

Lemma nat_gap : forall i j : nat, i <> j -> 1 <= Rabs (INR i - INR j).
Proof.
  intros i j H. destruct (Nat.lt_total i j) as [L|[E|L]]; [|contradiction|].
  - apply le_INR in L. rewrite S_INR in L. split_Rabs; lra.
  - apply le_INR in L. rewrite S_INR in L. split_Rabs; lra.
Qed.

Lemma IZR_small : forall m, Rabs (IZR m) < 1 -> m = 0%Z.
Proof.
  intros m H. destruct (Z.eq_dec m 0) as [|N]; [assumption|exfalso].
  destruct (Z.lt_total m 0) as [L|[E|L]]; [|contradiction|].
  - assert (L' : (m <= -1)%Z) by lia. apply IZR_le in L'. split_Rabs; lra.
  - assert (L' : (1 <= m)%Z) by lia. apply IZR_le in L'. split_Rabs; lra.
Qed.

(** ** Answers known to eps at one pair (u, b). *)

Definition hscore (d : nat) (u b : vec) (h : head) : R := dot d u (mat_vec d (fst h) b).

(** The poles of the difference list are the heads' e^-score. *)
Definition kdiff (d : nat) (u b : vec) (hs hs' : list head) : list (R * R) :=
  kterms d u b hs ++ lscale (fun _ => -1) (kterms d u b hs').

Lemma kdiff_pole : forall d u b hs hs' c z, In (c, z) (kdiff d u b hs hs') ->
  exists h, In h (hs ++ hs') /\ z = exp (- hscore d u b h).
Proof.
  intros d u b hs hs' c z H. unfold kdiff in H. apply in_app_or in H as [H|H].
  - unfold kterms in H. apply in_map_iff in H as [h [E Hh]]. injection E as _ <-.
    exists h. split; [apply in_or_app; left; exact Hh|reflexivity].
  - apply lscale_in in H as [c' H]. unfold kterms in H. apply in_map_iff in H as [h [E Hh]].
    injection E as _ <-. exists h. split; [apply in_or_app; right; exact Hh|reflexivity].
Qed.

Lemma kdiff_mass : forall d u b hs hs' s,
  score_mass d u b s hs - score_mass d u b s hs' = csum (exp (- s)) (kdiff d u b hs hs').
Proof.
  intros. rewrite !score_mass_csum. unfold kdiff, csum. rewrite lsum_app.
  fold (csum (exp (- s)) (lscale (fun _ => -1) (kterms d u b hs'))). rewrite csum_scale.
  unfold csum. ring.
Qed.

Lemma kdiff_psum : forall d u b hs hs' x,
  psum x (kdiff d u b hs hs') = psum x (kterms d u b hs) - psum x (kterms d u b hs').
Proof. intros. unfold kdiff, psum. rewrite lsum_app. fold (psum x (lscale (fun _ => -1)
  (kterms d u b hs'))). rewrite psum_neg. unfold psum. ring. Qed.

(** The constant of [kprobe_masses_close]: points 1 .. 2 H0 (gap 1), poles e^-score in
    [e^-S, e^S], so x + z <= 2 H0 + e^S, and poles that differ at least e^-S sigma apart. *)
Definition kconst (H0 : nat) (Sm sigma : R) : R :=
  kbound (INR (2 * H0) + exp Sm) 1 (exp (- Sm) * sigma) (2 * H0).

(** Every d and H0: two models of at most H0 heads whose answers F(0 .. 2 H0) at (u, b)
    differ by at most eps, with every score in [-S, S] and two scores that differ at least
    sigma apart, have, for every real s, score masses within kconst H0 Sm sigma * 2 eps. *)
Theorem kprobe_masses_close : forall d H0 u b (hs hs' : list head) Sm sigma eps,
  (length hs <= H0)%nat -> (length hs' <= H0)%nat -> 0 < sigma -> 0 <= eps ->
  (forall h, In h (hs ++ hs') -> Rabs (hscore d u b h) <= Sm) ->
  (forall h h', In h (hs ++ hs') -> In h' (hs ++ hs') -> hscore d u b h <> hscore d u b h' ->
     sigma <= Rabs (hscore d u b h - hscore d u b h')) ->
  (forall k, (k <= 2 * H0)%nat -> Rabs (kanswer d u b k hs - kanswer d u b k hs') <= eps) ->
  forall s, Rabs (score_mass d u b s hs - score_mass d u b s hs') <= kconst H0 Sm sigma * (2 * eps).
Proof.
  intros d H0 u b hs hs' Sm sigma eps Hl Hl' Hs He HS Hsig HF s.
  rewrite kdiff_mass. unfold kconst.
  assert (A0 : Rabs (abase d b hs - abase d b hs') <= eps).
  { pose proof (HF O ltac:(lia)) as E0. rewrite !kanswer_form in E0. simpl INR in E0.
    replace (abase d b hs + 0 * psum 0 (kterms d u b hs) -
             (abase d b hs' + 0 * psum 0 (kterms d u b hs'))) with
      (abase d b hs - abase d b hs') in E0 by ring. exact E0. }
  apply (cauchy_groups_bound (2 * H0) (fun i => INR (S i))).
  - unfold kdiff, lscale, kterms. rewrite app_length, !map_length. unfold head in Hl, Hl'. lia.
  - pose proof (pos_INR (2 * H0)). pose proof (exp_pos Sm). lra.
  - lra.
  - apply Rmult_lt_0_compat; [apply exp_pos|exact Hs].
  - lra.
  - intros i j _ _ N. apply nat_gap. lia.
  - intros i c z Hi Hc. apply kdiff_pole in Hc as [h [Hh ->]].
    pose proof (HS h Hh). pose proof (lt_0_INR (S i) ltac:(lia)).
    pose proof (exp_pos (- hscore d u b h)).
    assert (INR (S i) <= INR (2 * H0)) by (apply le_INR; lia).
    assert (exp (- hscore d u b h) <= exp Sm) by (apply exp_le; split_Rabs; lra). lra.
  - intros c z c' z' H1 H2 N. apply kdiff_pole in H1 as [h [Hh ->]].
    apply kdiff_pole in H2 as [h' [Hh' ->]].
    assert (Ns : hscore d u b h <> hscore d u b h') by (intros E; apply N; rewrite E; reflexivity).
    pose proof (Hsig h h' Hh Hh' Ns). pose proof (exp_pos (- Sm)).
    eapply Rle_trans; [|apply exp_sep; rewrite Rabs_Ropp; auto; apply HS; assumption].
    replace (- hscore d u b h - - hscore d u b h') with (- (hscore d u b h - hscore d u b h'))
      by ring. rewrite Rabs_Ropp. apply Rmult_le_compat_l; lra.
  - intros i Hi. rewrite kdiff_psum. pose proof (HF (S i) ltac:(lia)) as Ei.
    rewrite !kanswer_form in Ei. pose proof (lt_0_INR (S i) ltac:(lia)) as P.
    assert (1 <= INR (S i)) by (rewrite S_INR; pose proof (pos_INR i); lra).
    set (D := psum (INR (S i)) (kterms d u b hs) - psum (INR (S i)) (kterms d u b hs')).
    assert (T : Rabs (INR (S i) * D) <= 2 * eps).
    { replace (INR (S i) * D) with
        ((abase d b hs + INR (S i) * psum (INR (S i)) (kterms d u b hs) -
          (abase d b hs' + INR (S i) * psum (INR (S i)) (kterms d u b hs'))) -
         (abase d b hs - abase d b hs')) by (unfold D; ring).
      unfold Rminus at 1. eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_Ropp. lra. }
    rewrite Rabs_mult, (Rabs_pos_eq (INR (S i))) in T by lra.
    pose proof (Rabs_pos D). nra.
Qed.

(** ** Under the denominator bound D. *)

(** A nonzero rational of denominator at most M is at least 1/M in absolute value. *)
Lemma den_small : forall M x, den_le M x -> Rabs x * IZR (Zpos M) < 1 -> x = 0.
Proof.
  intros M x [n [m [Hm ->]]] H. apply IZR_le in Hm.
  assert (P : 0 < IZR (Zpos m)) by (apply IZR_lt; lia).
  unfold Rdiv in *. rewrite Rabs_mult, Rabs_inv, (Rabs_pos_eq (IZR (Zpos m))) in H by lra.
  assert (Rabs (IZR n) < 1).
  { assert (Rabs (IZR n) * / IZR (Zpos m) * IZR (Zpos m) <=
            Rabs (IZR n) * / IZR (Zpos m) * IZR (Zpos M)).
    { apply Rmult_le_compat_l; [|exact Hm]. apply Rmult_le_pos; [apply Rabs_pos|].
      left. apply Rinv_0_lt_compat, P. }
    replace (Rabs (IZR n) * / IZR (Zpos m) * IZR (Zpos m)) with (Rabs (IZR n)) in H0
      by (field; lra). lra. }
  apply IZR_small in H0. rewrite H0. unfold IZR at 1. ring.
Qed.

Definition Dr (D : positive) : R := IZR (Zpos D).

(** Two rationals of denominator at most D that differ are at least 1/D^2 apart. *)
Lemma den_sep : forall D x y, den_le D x -> den_le D y -> x <> y -> / (Dr D * Dr D) <= Rabs (x - y).
Proof.
  intros D x y [n [m [Hm ->]]] [n' [m' [Hm' ->]]] N. unfold Dr.
  apply IZR_le in Hm. apply IZR_le in Hm'.
  assert (P : 0 < IZR (Zpos m)) by (apply IZR_lt; lia).
  assert (P' : 0 < IZR (Zpos m')) by (apply IZR_lt; lia).
  replace (IZR n / IZR (Zpos m) - IZR n' / IZR (Zpos m'))
    with (IZR (n * Zpos m' - n' * Zpos m) / (IZR (Zpos m) * IZR (Zpos m')))
    by (rewrite minus_IZR, !mult_IZR; field; lra).
  assert (Z : (n * Zpos m' - n' * Zpos m <> 0)%Z).
  { intros E. apply N. assert (IZR (n * Zpos m' - n' * Zpos m) = 0) by (rewrite E; reflexivity).
    rewrite minus_IZR, !mult_IZR in H.
    replace (IZR n / IZR (Zpos m)) with (IZR n * IZR (Zpos m') / (IZR (Zpos m) * IZR (Zpos m')))
      by (field; lra).
    replace (IZR n' / IZR (Zpos m')) with (IZR n' * IZR (Zpos m) / (IZR (Zpos m) * IZR (Zpos m')))
      by (field; lra).
    replace (IZR n * IZR (Zpos m')) with (IZR n' * IZR (Zpos m)) by lra. reflexivity. }
  assert (One : 1 <= Rabs (IZR (n * Zpos m' - n' * Zpos m))).
  { destruct (Rlt_le_dec (Rabs (IZR (n * Zpos m' - n' * Zpos m))) 1) as [L|L]; [|exact L].
    apply IZR_small in L. contradiction. }
  unfold Rdiv. rewrite Rabs_mult, Rabs_inv, (Rabs_pos_eq (_ * _)) by nra.
  assert (0 < IZR (Zpos m) * IZR (Zpos m') <= IZR (Zpos D) * IZR (Zpos D)) by (split; nra).
  replace (/ (IZR (Zpos D) * IZR (Zpos D))) with (1 * / (IZR (Zpos D) * IZR (Zpos D))) by ring.
  apply Rmult_le_compat; [lra|left; apply Rinv_0_lt_compat; nra|exact One|].
  apply Rinv_le_contravar; lra.
Qed.

(** Denominators multiply under sums. *)
Lemma den_le_add : forall P Q x y, den_le P x -> den_le Q y -> den_le (P * Q) (x + y).
Proof.
  intros P Q x y [n [m [Hm ->]]] [n' [m' [Hm' ->]]].
  exists (n * Zpos m' + n' * Zpos m)%Z, (m * m')%positive. split; [rewrite !Pos2Z.inj_mul; nia|].
  assert (0 < IZR (Zpos m)) by (apply IZR_lt; lia). assert (0 < IZR (Zpos m')) by (apply IZR_lt; lia).
  rewrite Pos2Z.inj_mul, plus_IZR, !mult_IZR. field. lra.
Qed.

Lemma den_le_mono : forall P Q x, (Zpos P <= Zpos Q)%Z -> den_le P x -> den_le Q x.
Proof. intros P Q x H [n [m [Hm E]]]. exists n, m. split; [lia|exact E]. Qed.

Lemma den_le_opp : forall P x, den_le P x -> den_le P (- x).
Proof.
  intros P x [n [m [Hm ->]]]. exists (- n)%Z, m. split; [exact Hm|]. rewrite opp_IZR.
  unfold Rdiv. ring.
Qed.

Fixpoint ppow (D : positive) (n : nat) : positive :=
  match n with O => 1%positive | S n => (D * ppow D n)%positive end.

Lemma ppow_le : forall D m n, (m <= n)%nat -> (Zpos (ppow D m) <= Zpos (ppow D n))%Z.
Proof.
  intros D m n H. induction H as [|n H IH]; [lia|]. simpl. rewrite Pos2Z.inj_mul. nia.
Qed.

Lemma ppow_add : forall D m n, ppow D (m + n) = (ppow D m * ppow D n)%positive.
Proof. intros D m n. induction m as [|m IH]; simpl; [reflexivity|]. rewrite IH. lia. Qed.

(** A score mass of heads whose residues have denominators at most D: at most D^(heads). *)
Lemma mass_den : forall d u b s hs D, (forall h, In h hs -> den_le D (dot d u (snd h))) ->
  den_le (ppow D (length hs)) (score_mass d u b s hs).
Proof.
  intros d u b s hs D. induction hs as [|h hs IH]; intros H.
  - exists 0%Z, 1%positive. split; [lia|]. unfold score_mass. simpl. unfold Rdiv. ring.
  - unfold score_mass in *. simpl. unfold ind at 1.
    destruct (Req_EM_T (dot d u (mat_vec d (fst h) b)) s).
    + rewrite Rmult_1_r. apply den_le_add; [apply H; left; reflexivity|].
      apply IH. intros h' Hh'. apply H. right. exact Hh'.
    + rewrite Rmult_0_r, Rplus_0_l. apply (den_le_mono (ppow D (length hs))).
      * simpl. rewrite Pos2Z.inj_mul. nia.
      * apply IH. intros h' Hh'. apply H. right. exact Hh'.
Qed.

(** Mass differences of denominator at most M, and the bound below 1/M: equal masses. *)
Theorem kprobe_masses_equal : forall d H0 u b (hs hs' : list head) Sm sigma eps M,
  (length hs <= H0)%nat -> (length hs' <= H0)%nat -> 0 < sigma -> 0 <= eps ->
  (forall h, In h (hs ++ hs') -> Rabs (hscore d u b h) <= Sm) ->
  (forall h h', In h (hs ++ hs') -> In h' (hs ++ hs') -> hscore d u b h <> hscore d u b h' ->
     sigma <= Rabs (hscore d u b h - hscore d u b h')) ->
  (forall s, den_le M (score_mass d u b s hs - score_mass d u b s hs')) ->
  kconst H0 Sm sigma * (2 * eps) * IZR (Zpos M) < 1 ->
  (forall k, (k <= 2 * H0)%nat -> Rabs (kanswer d u b k hs - kanswer d u b k hs') <= eps) ->
  forall s, score_mass d u b s hs = score_mass d u b s hs'.
Proof.
  intros d H0 u b hs hs' Sm sigma eps M Hl Hl' Hs He HS Hsig Den Small HF s.
  pose proof (kprobe_masses_close d H0 u b hs hs' Sm sigma eps Hl Hl' Hs He HS Hsig HF s) as B.
  assert (PM : 0 < IZR (Zpos M)) by (apply IZR_lt; lia).
  enough (score_mass d u b s hs - score_mass d u b s hs' = 0) by lra.
  apply (den_small M); [apply Den|]. eapply Rle_lt_trans; [|exact Small].
  apply Rmult_le_compat_r; lra.
Qed.

(** Every d and H0: if a model hs of H0 heads has pairwise distinct scores and nonzero
    residues at (u, b), every score and residue of hs and of a model hs' of at most H0
    heads is a rational of denominator at most D, every score lies in [-Sm, Sm], the two
    models' answers F(0 .. 2 H0) at (u, b) differ by at most eps and
    kconst H0 Sm (1/D^2) * 2 eps * D^(2 H0) < 1, then hs' has hs's (residue, score) pairs
    at (u, b), up to order. *)
Theorem kprobe_pairs_den : forall d H0 u b (hs hs' : list head) D Sm eps,
  length hs = H0 -> (length hs' <= H0)%nat -> 0 <= eps ->
  NoDup (map snd (score_pairs d u b hs)) ->
  (forall c s, In (c, s) (score_pairs d u b hs) -> c <> 0) ->
  (forall h, In h (hs ++ hs') ->
     den_le D (hscore d u b h) /\ den_le D (dot d u (snd h)) /\ Rabs (hscore d u b h) <= Sm) ->
  kconst H0 Sm (/ (Dr D * Dr D)) * (2 * eps) * IZR (Zpos (ppow D (2 * H0))) < 1 ->
  (forall k, (k <= 2 * H0)%nat -> Rabs (kanswer d u b k hs - kanswer d u b k hs') <= eps) ->
  Permutation (score_pairs d u b hs) (score_pairs d u b hs').
Proof.
  intros d H0 u b hs hs' D Sm eps Hl Hl' He N NZ Hden Small HF.
  assert (PD : 0 < Dr D) by (unfold Dr; apply IZR_lt; lia).
  apply masses_pairs; [lia|exact N|exact NZ|].
  apply (kprobe_masses_equal d H0 u b hs hs' Sm (/ (Dr D * Dr D)) eps (ppow D (2 * H0))).
  - lia.
  - exact Hl'.
  - apply Rinv_0_lt_compat. nra.
  - exact He.
  - intros h Hh. apply Hden, Hh.
  - intros h h' Hh Hh' Ne. apply den_sep; [apply Hden, Hh|apply Hden, Hh'|exact Ne].
  - intros s. apply (den_le_mono (ppow D (length hs + length hs'))).
    + apply ppow_le. lia.
    + rewrite ppow_add. unfold Rminus. apply den_le_add.
      * apply mass_den. intros h Hh. apply Hden. apply in_or_app. left. exact Hh.
      * apply den_le_opp, mass_den. intros h Hh. apply Hden. apply in_or_app. right. exact Hh.
  - exact Small.
  - exact HF.
Qed.

(** ** A certified run: every model answering inside the recorded intervals. *)

(** The bound over Z: A = 2 H0 + 3^Sm >= 2 H0 + e^Sm, 1/delta = 3^Sm D^2 >= e^Sm D^2. *)
Definition kz (H0 Sm : nat) (D : positive) : Z :=
  let A := (Z.of_nat (2 * H0) + 3 ^ Z.of_nat Sm)%Z in
  (A * (1 + 2 * A * A * 3 ^ Z.of_nat Sm * Zpos D * Zpos D) ^ Z.of_nat (2 * H0))%Z.

Lemma exp_nat_le : forall n, exp (INR n) <= 3 ^ n.
Proof.
  induction n as [|n IH]; [simpl; rewrite exp_0; lra|].
  rewrite S_INR, exp_plus. simpl. pose proof exp_le_3. pose proof (exp_pos (INR n)).
  pose proof (exp_pos 1). nra.
Qed.

Lemma kconst_le : forall H0 Sm D, kconst H0 (INR Sm) (/ (Dr D * Dr D)) <= IZR (kz H0 Sm D).
Proof.
  intros H0 Sm D. unfold kconst, kbound, kz.
  cbv zeta. repeat first [rewrite mult_IZR | rewrite plus_IZR | rewrite <- pow_IZR | rewrite <- INR_IZR_INZ].
  assert (PD : 0 < Dr D) by (unfold Dr; apply IZR_lt; lia). unfold Dr in *.
  set (Dq := IZR (Zpos D)) in *. set (n := (2 * H0)%nat).
  pose proof (exp_nat_le Sm) as E3. pose proof (exp_pos (INR Sm)) as Ep. pose proof (pos_INR n).
  set (A := INR n + exp (INR Sm)). set (Aq := INR n + IZR 3 ^ Sm).
  replace (IZR 3) with 3 in Aq |- * by reflexivity.
  assert (HA : 0 <= A <= Aq) by (unfold A, Aq; lra).
  assert (Hq : 2 * A * A / (exp (- INR Sm) * / (Dq * Dq) * 1) <= 2 * Aq * Aq * 3 ^ Sm * Dq * Dq).
  { rewrite exp_Ropp. replace (2 * A * A / (/ exp (INR Sm) * / (Dq * Dq) * 1))
      with (2 * (A * A) * exp (INR Sm) * (Dq * Dq)) by (field; lra).
    assert (A * A <= Aq * Aq) by nra. assert (0 <= Dq * Dq) by nra.
    replace (2 * Aq * Aq * 3 ^ Sm * Dq * Dq) with (2 * (Aq * Aq) * 3 ^ Sm * (Dq * Dq)) by ring.
    apply Rmult_le_compat_r; [lra|]. apply Rmult_le_compat; nra. }
  assert (Q0 : 0 <= 2 * A * A / (exp (- INR Sm) * / (Dq * Dq) * 1)).
  { unfold Rdiv. apply Rmult_le_pos; [nra|]. left. apply Rinv_0_lt_compat.
    rewrite Rmult_1_r. apply Rmult_lt_0_compat; [apply exp_pos|apply Rinv_0_lt_compat; nra]. }
  apply Rmult_le_compat; [lra|apply pow_le; lra|lra|]. apply pow_incr. lra.
Qed.

Definition Sq (Sm : nat) : Q := inject_Z (Z.of_nat Sm).

(** The width check, the bound check and the certified scores' magnitudes, over Q. *)
Definition check_close (C : mh_run) (Sm : nat) (eps : Q) : bool :=
  qle 0 eps && forallb (fun r => qle (ahi r - alo r) eps) (mrecs C) &&
  qlt (inject_Z (kz (mH0 C) Sm (mD C)) * (2 * eps) * inject_Z (Zpos (ppow (mD C) (2 * mH0 C)))) 1 &&
  forallb (fun p => forallb (fun h =>
      qle (Qabs (qdot (md C) (fst p) (qmv (md C) (fst h) (snd p)))) (Sq Sm)) (mheads C))
    (mh_pairs (md C) (mU C) (mB C)).

(** The stated assumption on another model: at every pair of the design, each head's score
    and residue are rationals of denominator at most D and its score lies in [-Sm, Sm]. *)
Definition meets (C : mh_run) (Sm : nat) (hs : list head) : Prop :=
  Forall (fun p => Forall (fun h =>
      den_le (mD C) (hscore (md C) (rvec (fst p)) (rvec (snd p)) h) /\
      den_le (mD C) (dot (md C) (rvec (fst p)) (snd h)) /\
      Rabs (hscore (md C) (rvec (fst p)) (rvec (snd p)) h) <= INR Sm) hs)
    (mh_pairs (md C) (mU C) (mB C)).

Lemma Q2R_Z : forall z, Q2R (inject_Z z) = IZR z.
Proof. intros z. unfold Q2R. simpl. field. Qed.

Lemma forall2_close : forall (f g : qvec * qvec * nat -> R) eps qs rs,
  Forall2 (fun q a => inside (alo a) (ahi a) (f q)) qs rs ->
  Forall2 (fun q a => inside (alo a) (ahi a) (g q)) qs rs ->
  forallb (fun r => qle (ahi r - alo r) eps) rs = true ->
  Forall (fun q => Rabs (f q - g q) <= Q2R eps) qs.
Proof.
  intros f g eps qs rs F. induction F as [|q a qs rs Pa F IH]; intros G W; [constructor|].
  inversion G as [|? ? ? ? Ga G']; subst. simpl in W. apply andb_true_iff in W as [W1 W2].
  constructor; [|exact (IH G' W2)]. apply qle_spec in W1. rewrite Q2R_minus in W1.
  unfold inside in Pa, Ga. split_Rabs; lra.
Qed.

(** Every run whose checks pass: every model of at most H0 heads that meets the
    assumption and answers inside every recorded interval has, at every pair of the
    design, the certified heads' (residue, score) pairs, up to order. *)
Theorem mh_pairs_close : forall C Sm eps (hs' : list head),
  check_mh C = true -> mh_hold C -> check_generic C = true -> check_close C Sm eps = true ->
  length (mheads C) = mH0 C -> (length hs' <= mH0 C)%nat ->
  meets C Sm hs' -> answers_mh C hs' ->
  Forall (fun p => Permutation
      (score_pairs (md C) (rvec (fst p)) (rvec (snd p)) (rheads (mheads C)))
      (score_pairs (md C) (rvec (fst p)) (rvec (snd p)) hs'))
    (mh_pairs (md C) (mU C) (mB C)).
Proof.
  intros C Sm eps hs' Hc Hhold G K Hl Hl' Mt A'.
  destruct (mh_answers_in C Hc Hhold) as [A Den].
  unfold check_close in K. apply andb_true_iff in K as [K K4]. apply andb_true_iff in K as [K K3].
  apply andb_true_iff in K as [K1 K2]. apply qle_spec in K1. apply qlt_spec in K3.
  replace (Q2R 0) with 0 in K1 by (unfold Q2R; simpl; ring).
  replace (Q2R 1) with 1 in K3 by (unfold Q2R; simpl; field).
  pose proof (forall2_close _ _ eps _ _ A A' K2) as Close.
  apply Forall_forall. intros p Hp.
  unfold check_generic in G. rewrite forallb_forall in G. specialize (G p Hp).
  unfold generic_at in G. apply andb_true_iff in G as [G1 G2].
  apply (kprobe_pairs_den _ (mH0 C) _ _ _ _ (mD C) (INR Sm) (Q2R eps)).
  - unfold rheads. rewrite map_length. exact Hl.
  - exact Hl'.
  - exact K1.
  - rewrite score_pairs_q, map_map. simpl. rewrite <- (map_map _ Q2R).
    apply qnodup_spec, G1.
  - intros c s H. rewrite score_pairs_q in H. apply in_map_iff in H as [h [Eh Hh']].
    injection Eh as <- _. rewrite forallb_forall in G2. pose proof (G2 h Hh') as F.
    intros Z. replace 0 with (Q2R 0) in Z by (unfold Q2R; simpl; ring).
    apply eqR_Qeq, Qeq_bool_iff in Z. rewrite Z in F. discriminate.
  - intros h Hh. apply in_app_or in Hh as [Hh|Hh].
    + unfold rheads in Hh. apply in_map_iff in Hh as [[W v] [<- Hw]].
      unfold pairs_den_le in Den. rewrite Forall_forall in Den. specialize (Den p Hp).
      rewrite Forall_forall in Den. destruct (Den (W, v) Hw) as [D1 D2].
      split; [exact D1|split; [exact D2|]].
      rewrite forallb_forall in K4. specialize (K4 p Hp). rewrite forallb_forall in K4.
      pose proof (K4 (W, v) Hw) as S1. unfold qle in S1. apply Qle_bool_iff in S1.
      apply Qabs_Qle_condition in S1 as [S1 S2]. apply Qle_Rle in S1. apply Qle_Rle in S2.
      unfold hscore. simpl fst. rewrite dot_mv_q. unfold Sq in *.
      rewrite Q2R_opp, Q2R_Z, <- INR_IZR_INZ in S1. rewrite Q2R_Z, <- INR_IZR_INZ in S2.
      simpl fst in S1, S2. split_Rabs; lra.
    + unfold meets in Mt. rewrite Forall_forall in Mt. specialize (Mt p Hp).
      rewrite Forall_forall in Mt. exact (Mt h Hh).
  - eapply Rle_lt_trans; [|rewrite Q2R_mult, Q2R_mult, Q2R_Z, Q2R_Z in K3; exact K3].
    pose proof (kconst_le (mH0 C) Sm (mD C)) as KL.
    assert (0 <= IZR (Zpos (ppow (mD C) (2 * mH0 C)))) by (apply IZR_le; lia).
    replace (Q2R (2 * eps)) with (2 * Q2R eps)
      by (rewrite Q2R_mult; replace (Q2R 2) with 2 by (unfold Q2R; simpl; field); reflexivity).
    apply Rmult_le_compat_r; [exact H|]. apply Rmult_le_compat_r; [lra|exact KL].
  - intros k Hk. exact (pair_kanswers (fun a b => Rabs (a - b) <= Q2R eps) C _ _ p k Close Hp Hk).
Qed.

(** Every run whose checks pass, with no ties and unambiguous links: every model of at
    most H0 heads that meets the assumption and answers inside every recorded interval
    gives the certified model's output on every sequence. *)
Theorem mh_identified_close : forall C Sm eps (Uinv Binv : qmat) (hs' : list head),
  check_inverse (md C) Uinv (mU C) = true -> check_inverse (md C) Binv (mB C) = true ->
  (0 < md C)%nat -> check_mh C = true -> mh_hold C -> check_generic C = true ->
  check_close C Sm eps = true -> length (mheads C) = mH0 C ->
  link_check (md C) (mU C) (mB C) (mheads C) = true ->
  row_check (md C) (mU C) (mB C) (mheads C) = true ->
  (length hs' <= mH0 C)%nat -> meets C Sm hs' -> answers_mh C hs' ->
  forall N X, multi_head (md C) N X hs' = multi_head (md C) N X (rheads (mheads C)).
Proof.
  intros C Sm eps Uinv Binv hs' HU HB Hd Hc Hh G K Hl L R Hl' Mt A'.
  apply (mh_identified_pairs C Uinv Binv); try assumption.
  exact (mh_pairs_close C Sm eps hs' Hc Hh G K Hl Hl' Mt A').
Qed.
