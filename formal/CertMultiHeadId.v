(** * The canonical multi-head learner's identification step at one pair, from exact answers.

    At a pair (u, b) the learner asks F(0) = [b] and F(k) = [b + u; ...; b + u; b] (k copies)
    for k = 1 .. 2 H0. A model with heads (W_h, v_h) answers
      F(k) = sum_h b^T v_h + k * sum_h r_h / (k + z_h),  r_h = u^T v_h,  z_h = exp (- u^T W_h b)
    ([CertMultiHead.answer_seqk]): a rational function of k whose poles -z_h give the scores
    and whose residues give the u^T v_h (docs/theory.md, the canonical learner).

    [cauchy_groups_zero] (every n): a sum sum_j c_j / (x + z_j) over a list of at most n
    pairs (c_j, z_j), with any repetitions among the z_j, that vanishes at n distinct points
    x_i with x_i + z_j > 0 has, for every w, sum of the c_j with z_j = w equal to 0 (the
    Cauchy matrix 1 / (x_i + z_j) of distinct points and poles is invertible; proved by
    elimination, no polynomials).

    [terms_identify] (every H0): A + k sum_{(c, z) in K} c / (k + z) at k = 0 .. 2 H0, with
    at most H0 pairs per side and positive poles, fixes the residues' group sums whatever
    the constant A. [kprobe_identifies] (every d and H0): two models with at most H0 heads each that give
    the same answers F(0), F(1), ..., F(2 H0) at (u, b) have, for every real s, the same sum
    of residues u^T v_h over their heads with score u^T W_h b = s ([score_mass]): the
    scores carrying a nonzero residue sum, and those sums, are determined.
    [kprobe_fewer_fails]: with F(0) .. F(2 H0 - 1) only, that is false (H0 = 1, d = 2).

    [mh_masses_determined] (every run): a model with at most H0 heads giving exactly the
    answers of a model with at most H0 heads to every query [CertMultiHead.mh_queries]
    generates has its score masses at every pair of the design.

    Not covered here: answers known only to lie in intervals (the learner's ball
    interpolation and the rational reconstruction under the denominator bound), and the
    labelling of heads across pairs (that is [CertMultiHeadLabel.mh_identified]). *)

From Coq Require Import Reals QArith Qreals Lra Lia List Permutation FinFun.
From VerifiedAttn Require Import Defs CertHead CertMultiHead.
Import ListNotations.
Open Scope R_scope.

(** ** Sums over lists of (coefficient, pole) pairs. *)

(** sum over (c, z) in L of c * f z. *)
Fixpoint lsum (f : R -> R) (L : list (R * R)) : R :=
  match L with [] => 0 | (c, z) :: L => c * f z + lsum f L end.

(** The indicator of w, and the sum of the c with z = w. *)
Definition ind (w z : R) : R := if Req_EM_T z w then 1 else 0.
Definition csum (w : R) (L : list (R * R)) : R := lsum (ind w) L.

(** The pairs whose pole is not w. *)
Definition drop (w : R) (L : list (R * R)) : list (R * R) :=
  filter (fun p => if Req_EM_T (snd p) w then false else true) L.

(** sum_j c_j / (x + z_j). *)
Definition psum (x : R) (L : list (R * R)) : R := lsum (fun z => / (x + z)) L.

Lemma lsum_ext : forall f g L, (forall c z, In (c, z) L -> c * f z = c * g z) ->
  lsum f L = lsum g L.
Proof.
  intros f g. induction L as [|[c z] L IH]; intros H; [reflexivity|]. simpl.
  rewrite (H c z (or_introl eq_refl)), IH; [reflexivity|]. intros; apply H; right; assumption.
Qed.

Lemma lsum_app : forall f L M, lsum f (L ++ M) = lsum f L + lsum f M.
Proof. intros f. induction L as [|[c z] L IH]; intros M; simpl; [ring|]. rewrite IH. ring. Qed.

Definition lscale (g : R -> R) (L : list (R * R)) : list (R * R) :=
  map (fun p => (g (snd p) * fst p, snd p)) L.

Lemma lsum_scale : forall f g L, lsum f (lscale g L) = lsum (fun z => g z * f z) L.
Proof. intros f g. induction L as [|[c z] L IH]; simpl; [reflexivity|]. rewrite IH. ring. Qed.

Lemma lsum_lin : forall f g a b L,
  lsum (fun z => a * f z + b * g z) L = a * lsum f L + b * lsum g L.
Proof. intros f g a b. induction L as [|[c z] L IH]; simpl; [ring|]. rewrite IH. ring. Qed.

(** Splitting off the pole w. *)
Lemma lsum_split : forall f w L, lsum f L = csum w L * f w + lsum f (drop w L).
Proof.
  intros f w. unfold csum, ind. induction L as [|[c z] L IH]; simpl; [ring|].
  destruct (Req_EM_T z w) as [->|n]; simpl; rewrite IH; ring.
Qed.

Lemma drop_length : forall w c L, (length (drop w ((c, w) :: L)) <= length L)%nat.
Proof.
  intros. unfold drop. simpl. destruct (Req_EM_T w w) as [_|n]; [|exfalso; apply n; reflexivity].
  induction L as [|q L IH]; simpl; [lia|]. destruct (if Req_EM_T (snd q) w then _ else _);
  simpl; lia.
Qed.

Lemma drop_in : forall w p L, In p (drop w L) -> In p L /\ snd p <> w.
Proof.
  intros w p L H. unfold drop in H. apply filter_In in H as [H1 H2]. split; [exact H1|].
  destruct (Req_EM_T (snd p) w); [discriminate|assumption].
Qed.

Lemma csum_drop_same : forall w L, csum w (drop w L) = 0.
Proof.
  intros w L. unfold csum. transitivity (lsum (fun _ => 0) (drop w L)).
  - apply lsum_ext. intros c z H. apply drop_in in H as [_ H]. simpl in H.
    unfold ind. destruct (Req_EM_T z w); [contradiction|ring].
  - clear. induction (drop w L) as [|[c z] M IH]; simpl; [reflexivity|]. rewrite IH. ring.
Qed.

Lemma csum_drop_other : forall w w' L, w' <> w -> csum w' (drop w L) = csum w' L.
Proof.
  intros w w' L H. unfold csum at 2. rewrite (lsum_split (ind w') w L). unfold ind at 1.
  destruct (Req_EM_T w w'); [congruence|]. unfold csum. ring.
Qed.

Lemma csum_scale : forall g w L, csum w (lscale g L) = g w * csum w L.
Proof.
  intros g w. unfold csum, ind. induction L as [|[c z] L IH]; simpl; [ring|].
  rewrite IH. destruct (Req_EM_T z w) as [->|]; ring.
Qed.

Lemma csum_in : forall w L, csum w L <> 0 -> exists c, In (c, w) L.
Proof.
  intros w. unfold csum, ind. induction L as [|[c z] L IH]; simpl; intros H; [lra|].
  destruct (Req_EM_T z w) as [->|n].
  - exists c. left. reflexivity.
  - destruct IH as [c' Hc]; [lra|]. exists c'. right. exact Hc.
Qed.

(** All group sums zero: every [lsum] is zero. *)
Lemma groups_zero_lsum : forall L f, (forall w, csum w L = 0) -> lsum f L = 0.
Proof.
  intros L f. remember (length L) as m eqn:Hm. assert (Hle : (length L <= m)%nat) by lia.
  clear Hm. revert L Hle. induction m as [|m IH]; intros [|[c z] L] Hle H; simpl in Hle;
    try reflexivity; [lia|].
  rewrite (lsum_split f z), H, Rmult_0_l, Rplus_0_l.
  apply IH; [pose proof (drop_length z c L); lia|].
  intros w. destruct (Req_EM_T w z) as [->|n]; [apply csum_drop_same|].
  rewrite csum_drop_other by exact n. apply H.
Qed.

(** ** The Cauchy matrix of distinct points and poles is invertible. *)

Lemma elim_step : forall xi xl w0 c z, xi + z > 0 -> xl + z > 0 -> xi <> xl ->
  c * ((w0 - z) / (xl + z) * / (xi + z)) =
  / (xl - xi) * ((xi + w0) * (c * / (xi + z)) - (xl + w0) * (c * / (xl + z))).
Proof.
  intros. field. assert (xl - xi <> 0) by (intros E; apply H1; lra). repeat split; lra.
Qed.

(** One elimination step: rescaling by (w0 - z)/(xl + z) turns the sums at xi and xl into
    one sum at xi (also used with bounds, CertMultiHeadBound.v). *)
Lemma elim_psum : forall xi xl w0 L, xi <> xl ->
  (forall c z, In (c, z) L -> xi + z > 0 /\ xl + z > 0) ->
  psum xi (lscale (fun z => (w0 - z) / (xl + z)) L) =
  / (xl - xi) * ((xi + w0) * psum xi L - (xl + w0) * psum xl L).
Proof.
  intros xi xl w0 L Hxi Hpos. unfold psum. rewrite lsum_scale.
  transitivity (lsum (fun z => / (xl - xi) * ((xi + w0) * / (xi + z) -
                                             (xl + w0) * / (xl + z))) L).
  - apply lsum_ext. intros c z Hc. destruct (Hpos c z Hc).
    rewrite elim_step by assumption. ring.
  - rewrite (lsum_ext _ (fun z => (/ (xl - xi) * (xi + w0)) * / (xi + z) +
                                  (- (/ (xl - xi) * (xl + w0))) * / (xl + z)))
      by (intros; ring).
    rewrite lsum_lin. ring.
Qed.

Theorem cauchy_groups_zero : forall n (x : nat -> R) (L : list (R * R)),
  (length L <= n)%nat ->
  (forall i j, (i < n)%nat -> (j < n)%nat -> x i = x j -> i = j) ->
  (forall i c z, (i < n)%nat -> In (c, z) L -> x i + z > 0) ->
  (forall i, (i < n)%nat -> psum (x i) L = 0) ->
  forall w, csum w L = 0.
Proof.
  induction n as [|n IH]; intros x L Hlen Hinj Hpos H0 w1.
  - destruct L; [reflexivity|simpl in Hlen; lia].
  - destruct L as [|[c0 w0] L0]; [reflexivity|].
    set (L := (c0, w0) :: L0) in *.
    set (xl := x n).
    set (L' := drop w0 L).
    set (S0 := csum w0 L).
    assert (Hin' : forall c z, In (c, z) L' -> In (c, z) L /\ z <> w0)
      by (intros c z Hc; exact (drop_in w0 (c, z) L Hc)).
    assert (Hw0 : forall i, (i < S n)%nat -> x i + w0 > 0)
      by (intros i Hi; apply (Hpos i c0 w0 Hi); left; reflexivity).
    (* psum (x i) L = S0 / (x i + w0) + psum (x i) L' *)
    assert (Split : forall i, (i < S n)%nat -> (x i + w0) * psum (x i) L' = - S0).
    { intros i Hi. pose proof (H0 i Hi) as E. unfold psum in E.
      rewrite (lsum_split _ w0) in E. fold S0 in E. fold L' in E. unfold psum.
      pose proof (Hw0 i Hi). cbv beta in E.
      replace (lsum (fun z => / (x i + z)) L') with (- (S0 * / (x i + w0))) by lra.
      field. lra. }
    set (L'' := lscale (fun z => (w0 - z) / (xl + z)) L').
    assert (IH'' : forall w, csum w L'' = 0).
    { apply (IH x).
      - unfold L'', lscale, L', L. rewrite map_length.
        pose proof (drop_length w0 c0 L0). simpl in Hlen. lia.
      - intros i j Hi Hj. apply Hinj; lia.
      - intros i c z Hi Hc. unfold L'', lscale in Hc. apply in_map_iff in Hc as [[c' z'] [E Hc]].
        injection E as <- <-. apply (Hpos i c' z'); [lia|]. apply Hin' in Hc. apply Hc.
      - intros i Hi. unfold L''.
        assert (Hxi : x i <> xl) by (intros E; apply Hinj in E; lia).
        rewrite elim_psum; [|exact Hxi|].
        + rewrite (Split i) by lia. unfold xl. rewrite (Split n) by lia. ring.
        + intros c z Hc. apply Hin' in Hc as [Hc _].
          split; [apply (Hpos i c z)|apply (Hpos n c z)]; (lia || exact Hc). }
    (* every pole other than w0 has group sum 0 *)
    assert (Other : forall w, w <> w0 -> csum w L = 0).
    { intros w Hw. destruct (Req_EM_T (csum w L) 0) as [|Hne]; [assumption|].
      pose proof (IH'' w) as E. unfold L'' in E. rewrite csum_scale in E.
      unfold L' in E. rewrite csum_drop_other in E by exact Hw.
      destruct (csum_in w L Hne) as [c Hc].
      pose proof (Hpos n c w ltac:(lia) Hc). fold xl in H.
      assert (F : (w0 - w) / (xl + w) <> 0).
      { unfold Rdiv. apply Rmult_integral_contrapositive_currified;
          [lra|apply Rinv_neq_0_compat; lra]. }
      apply Rmult_integral in E as [E|E]; [contradiction|assumption]. }
    destruct (Req_EM_T w1 w0) as [->|Hw]; [|apply Other, Hw].
    (* the pole w0 itself: psum (x 0) L' = 0, so S0 = 0 *)
    assert (Z : psum (x O) L' = 0).
    { apply groups_zero_lsum. intros w. destruct (Req_EM_T w w0) as [->|n'].
      - apply csum_drop_same.
      - unfold L'. rewrite csum_drop_other by exact n'. apply Other, n'. }
    pose proof (Split O ltac:(lia)) as E. rewrite Z, Rmult_0_r in E. fold S0. lra.
Qed.

(** ** The answers at one pair (u, b) determine the score masses. *)

(** Per head: (u^T v, exp (- u^T W b)), the residue and pole of F(k)/k - F(0)/k. *)
Definition kterms (d : nat) (u b : vec) (hs : list head) : list (R * R) :=
  map (fun h => (dot d u (snd h), exp (- dot d u (mat_vec d (fst h) b)))) hs.

(** The sum of the residues u^T v_h of the heads with score u^T W_h b = s. *)
Definition score_mass (d : nat) (u b : vec) (s : R) (hs : list head) : R :=
  lsum (ind s) (map (fun h => (dot d u (snd h), dot d u (mat_vec d (fst h) b))) hs).

(** F(k) at (u, b): k copies of b + u, then b (k = 0: the query [b]). *)
Definition kanswer (d : nat) (u b : vec) (k : nat) (hs : list head) : R :=
  multi_head d (S k) (seqk k (vadd b u) b) hs.

Definition abase (d : nat) (b : vec) (hs : list head) : R :=
  lsum (fun _ => 1) (map (fun h => (dot d b (snd h), 0)) hs).

Lemma kanswer_form : forall d u b k hs,
  kanswer d u b k hs = abase d b hs + INR k * psum (INR k) (kterms d u b hs).
Proof.
  intros d u b k. unfold kanswer, abase, kterms, psum.
  induction hs as [|[W v] hs IH]; simpl; [ring|]. rewrite IH, answer_seqk.
  unfold kprobe_value, Rdiv. ring.
Qed.

Lemma score_mass_csum : forall d u b s hs,
  score_mass d u b s hs = csum (exp (- s)) (kterms d u b hs).
Proof.
  intros. unfold score_mass, csum, kterms, ind.
  induction hs as [|[W v] hs IH]; simpl; [reflexivity|]. rewrite IH. f_equal. f_equal.
  destruct (Req_EM_T (dot d u (mat_vec d W b)) s) as [E|E];
    destruct (Req_EM_T (exp (- dot d u (mat_vec d W b))) (exp (- s))) as [F|F];
    try reflexivity.
  - exfalso. apply F. rewrite E. reflexivity.
  - exfalso. apply E. apply exp_inv in F. lra.
Qed.

Lemma psum_neg : forall x L, psum x (lscale (fun _ => -1) L) = - psum x L.
Proof.
  intros x L. unfold psum. rewrite lsum_scale.
  induction L as [|[c z] L IH]; simpl; [ring|]. rewrite IH. ring.
Qed.

(** Every H0: A + k sum_{(c, z) in K} c / (k + z) at k = 0 .. 2 H0, with at most H0 pairs
    on each side and positive poles, determines the group sums of the residues, whatever
    the constant A (also used with an output bias, CertMultiHeadAffine.v). *)
Lemma terms_identify : forall H0 (K K' : list (R * R)) A A',
  (length K <= H0)%nat -> (length K' <= H0)%nat ->
  (forall c z, In (c, z) (K ++ K') -> 0 < z) ->
  (forall k, (k <= 2 * H0)%nat -> A + INR k * psum (INR k) K = A' + INR k * psum (INR k) K') ->
  forall w, csum w K = csum w K'.
Proof.
  intros H0 K K' A A' Hl Hl' Hz E w.
  set (L := K ++ lscale (fun _ => -1) K').
  assert (AA : A = A') by (pose proof (E O ltac:(lia)) as E0; simpl INR in E0; lra).
  assert (Z : csum w L = 0).
  { apply (cauchy_groups_zero (2 * H0) (fun i => INR (S i))).
    - unfold L, lscale. rewrite app_length, map_length. lia.
    - intros i j _ _ Eij. apply INR_eq in Eij. lia.
    - intros i c z _ Hc. pose proof (lt_0_INR (S i) (Nat.lt_0_succ i)).
      assert (0 < z).
      { unfold L, lscale in Hc. apply in_app_or in Hc as [Hc|Hc].
        - apply (Hz c z). apply in_or_app. left. exact Hc.
        - apply in_map_iff in Hc as [[c' z'] [Ep Hp]]. injection Ep as _ <-.
          apply (Hz c' z'). apply in_or_app. right. exact Hp. }
      lra.
    - intros i Hi. pose proof (E (S i) ltac:(lia)) as Ei. rewrite AA in Ei.
      pose proof (lt_0_INR (S i) (Nat.lt_0_succ i)).
      unfold L, psum. rewrite lsum_app.
      fold (psum (INR (S i)) K) (psum (INR (S i)) (lscale (fun _ => -1) K')). rewrite psum_neg.
      assert (P : INR (S i) * (psum (INR (S i)) K - psum (INR (S i)) K') = 0) by lra.
      apply Rmult_integral in P as [P|P]; lra. }
  unfold L, csum in Z. rewrite lsum_app in Z. fold (csum w K) in Z.
  fold (csum w (lscale (fun _ => -1) K')) in Z. rewrite csum_scale in Z. lra.
Qed.

(** Every d and H0: equal answers F(0), ..., F(2 H0) at (u, b) from two models of at most
    H0 heads give equal score masses, for every real s. *)
Theorem kprobe_identifies : forall d H0 u b (hs hs' : list head),
  (length hs <= H0)%nat -> (length hs' <= H0)%nat ->
  (forall k, (k <= 2 * H0)%nat -> kanswer d u b k hs = kanswer d u b k hs') ->
  forall s, score_mass d u b s hs = score_mass d u b s hs'.
Proof.
  intros d H0 u b hs hs' Hl Hl' E s. rewrite !score_mass_csum.
  apply (terms_identify H0 _ _ (abase d b hs) (abase d b hs')).
  - unfold kterms. rewrite map_length. exact Hl.
  - unfold kterms. rewrite map_length. exact Hl'.
  - intros c z Hc. apply in_app_or in Hc as [Hc|Hc]; unfold kterms in Hc;
      apply in_map_iff in Hc as [h [Eh _]]; injection Eh as _ <-; apply exp_pos.
  - intros k Hk. rewrite <- !kanswer_form. exact (E k Hk).
Qed.

(** The wrong variant: with F(0) .. F(2 H0 - 1) only the masses are not determined (H0 = 1,
    d = 2, u = e_0, b = e_1: (score 0, residue 2) and (score - ln 2, residue 3) both answer
    F(0) = 0 and F(1) = 1). *)
Theorem kprobe_fewer_fails : ~ (forall d H0 u b (hs hs' : list head),
  (length hs <= H0)%nat -> (length hs' <= H0)%nat ->
  (forall k, (k <= 2 * H0 - 1)%nat -> kanswer d u b k hs = kanswer d u b k hs') ->
  forall s, score_mass d u b s hs = score_mass d u b s hs').
Proof.
  intros H.
  pose (W1 := (fun _ _ => 0) : mat). pose (W2 := (fun i j => if Nat.eq_dec i 0 then
    (if Nat.eq_dec j 1 then - ln 2 else 0) else 0) : mat).
  pose (v1 := (fun i => if Nat.eq_dec i 0 then 2 else 0) : vec).
  pose (v2 := (fun i => if Nat.eq_dec i 0 then 3 else 0) : vec).
  assert (S1 : dot 2 (unit_vec 0) (mat_vec 2 W1 (unit_vec 1)) = 0)
    by (unfold W1, dot, mat_vec, unit_vec; simpl; ring).
  assert (S2 : dot 2 (unit_vec 0) (mat_vec 2 W2 (unit_vec 1)) = - ln 2)
    by (unfold W2, dot, mat_vec, unit_vec; simpl; ring).
  assert (R1 : dot 2 (unit_vec 0) v1 = 2) by (unfold v1, dot, unit_vec; simpl; ring).
  assert (R2 : dot 2 (unit_vec 0) v2 = 3) by (unfold v2, dot, unit_vec; simpl; ring).
  assert (B1 : dot 2 (unit_vec 1) v1 = 0) by (unfold v1, dot, unit_vec; simpl; ring).
  assert (B2 : dot 2 (unit_vec 1) v2 = 0) by (unfold v2, dot, unit_vec; simpl; ring).
  specialize (H 2%nat 1%nat (unit_vec 0) (unit_vec 1) [(W1, v1)] [(W2, v2)]
    ltac:(simpl; lia) ltac:(simpl; lia)).
  assert (M : score_mass 2 (unit_vec 0) (unit_vec 1) 0 [(W1, v1)] = 2).
  { unfold score_mass, ind. simpl. rewrite S1, R1.
    destruct (Req_EM_T 0 0) as [_|n]; [ring|exfalso; apply n; reflexivity]. }
  assert (M' : score_mass 2 (unit_vec 0) (unit_vec 1) 0 [(W2, v2)] = 0).
  { unfold score_mass, ind. simpl. rewrite S2, R2.
    destruct (Req_EM_T (- ln 2) 0) as [E|_]; [|ring].
    exfalso. pose proof (ln_lt_2). assert (ln 2 = 0) by lra.
    pose proof (exp_ln 2 ltac:(lra)). rewrite H1, exp_0 in H2. lra. }
  enough (E : score_mass 2 (unit_vec 0) (unit_vec 1) 0 [(W1, v1)] =
              score_mass 2 (unit_vec 0) (unit_vec 1) 0 [(W2, v2)]) by lra.
  apply H. intros k Hk. rewrite !kanswer_form. unfold abase, psum, kterms. simpl.
  rewrite S1, S2, R1, R2, B1, B2, Ropp_0, exp_0, Ropp_involutive, (exp_ln 2) by lra.
  destruct k as [|[|k]]; [simpl; ring| |simpl in Hk; lia]. simpl INR. field.
Qed.

(** ** Distinct poles, nonzero residues: the same multiset of pairs. *)

Lemma lsum_zero : forall L, lsum (fun _ => 0) L = 0.
Proof. induction L as [|[? ?] L IH]; simpl; [reflexivity|]. rewrite IH. ring. Qed.

Lemma csum_absent : forall L z, ~ In z (map snd L) -> csum z L = 0.
Proof.
  intros L z N. unfold csum. rewrite <- (lsum_zero L). apply lsum_ext. intros c1 z1 Hin.
  unfold ind. destruct (Req_EM_T z1 z) as [->|]; [|ring].
  exfalso. apply N. apply in_map_iff. exists (c1, z). split; [reflexivity|exact Hin].
Qed.

Lemma csum_nodup : forall L c z, NoDup (map snd L) -> In (c, z) L -> csum z L = c.
Proof.
  intros L c z. induction L as [|[c' z'] L IH]; simpl; intros N H; [contradiction|].
  inversion N as [|? ? Nz N']; subst. unfold csum in *. simpl. unfold ind at 1.
  destruct H as [E|H].
  - injection E as -> ->. destruct (Req_EM_T z z) as [_|n]; [|exfalso; apply n; reflexivity].
    fold (csum z L). rewrite csum_absent by exact Nz. ring.
  - destruct (Req_EM_T z' z) as [->|_].
    + exfalso. apply Nz. apply in_map_iff. exists (c, z). split; [reflexivity|exact H].
    + rewrite (IH N' H). ring.
Qed.

(** Lists of (residue, pole) with the same group sum at every pole, the first with
    distinct poles and nonzero residues, the second no longer: the same multiset. *)
Theorem atoms_permutation : forall A B : list (R * R),
  NoDup (map snd A) -> (forall c z, In (c, z) A -> c <> 0) -> (length B <= length A)%nat ->
  (forall w, csum w A = csum w B) -> Permutation A B.
Proof.
  intros A B NA NZ Hl E.
  assert (Sub : incl (map snd A) (map snd B)).
  { intros z Hz. apply in_map_iff in Hz as [[c z'] [<- Hc]]. simpl.
    destruct (in_dec Req_EM_T z' (map snd B)) as [|N]; [assumption|].
    exfalso. apply (NZ c z' Hc). rewrite <- (csum_nodup A c z' NA Hc), E.
    apply csum_absent, N. }
  assert (Hl' : (length (map snd B) <= length (map snd A))%nat) by (rewrite !map_length; exact Hl).
  pose proof (NoDup_incl_NoDup NA Hl' Sub) as NB.
  pose proof (NoDup_length_incl NA Hl' Sub) as Sup.
  apply NoDup_Permutation; [exact (NoDup_map_inv _ _ NA)|exact (NoDup_map_inv _ _ NB)|].
  intros [c z]. split; intros H.
  - assert (Hz : In z (map snd B)) by (apply Sub, in_map_iff; exists (c, z); auto).
    apply in_map_iff in Hz as [[c' z'] [Ez Hc']]. simpl in Ez. subst z'.
    rewrite <- (csum_nodup A c z NA H), E, (csum_nodup B c' z NB Hc'). exact Hc'.
  - assert (Hz : In z (map snd A)) by (apply Sup, in_map_iff; exists (c, z); auto).
    apply in_map_iff in Hz as [[c' z'] [Ez Hc']]. simpl in Ez. subst z'.
    rewrite <- (csum_nodup B c z NB H), <- E, (csum_nodup A c' z NA Hc'). exact Hc'.
Qed.

(** The pairs (residue u^T v_h, score u^T W_h b) of a model's heads at (u, b). *)
Definition score_pairs (d : nat) (u b : vec) (hs : list head) : list (R * R) :=
  map (fun h => (dot d u (snd h), dot d u (mat_vec d (fst h) b))) hs.

(** Every d and H0: if a model of H0 heads has pairwise distinct scores and nonzero
    residues at (u, b), every model of at most H0 heads with its answers F(0 .. 2 H0) at
    (u, b) has the same (residue, score) pairs there, up to order. *)
(** The same from equal score masses (the step after [kprobe_identifies]; also used with
    masses known to be equal from answers known to eps, CertMultiHeadBound.v). *)
Theorem masses_pairs : forall d u b (hs hs' : list head),
  (length hs' <= length hs)%nat ->
  NoDup (map snd (score_pairs d u b hs)) ->
  (forall c s, In (c, s) (score_pairs d u b hs) -> c <> 0) ->
  (forall s, score_mass d u b s hs = score_mass d u b s hs') ->
  Permutation (score_pairs d u b hs) (score_pairs d u b hs').
Proof.
  intros d u b hs hs' Hl N NZ M.
  set (back := fun p : R * R => (fst p, - ln (snd p))).
  assert (Back : forall hs0, score_pairs d u b hs0 = map back (kterms d u b hs0)).
  { intros hs0. unfold score_pairs, kterms. rewrite map_map. apply map_ext. intros h.
    unfold back. simpl. rewrite ln_exp. f_equal. ring. }
  rewrite !Back. apply Permutation_map.
  assert (Pos : forall hs0 c z, In (c, z) (kterms d u b hs0) -> 0 < z).
  { intros hs0 c z H. unfold kterms in H. apply in_map_iff in H as [h [Eh _]].
    injection Eh as _ <-. apply exp_pos. }
  apply atoms_permutation.
  - replace (map snd (kterms d u b hs))
      with (map (fun s => exp (- s)) (map snd (score_pairs d u b hs))).
    + apply Injective_map_NoDup; [|exact N]. intros x y Exy. apply exp_inv in Exy. lra.
    + unfold score_pairs, kterms. rewrite !map_map. reflexivity.
  - intros c z H. apply (NZ c (- ln z)). rewrite Back. apply in_map_iff.
    exists (c, z). split; [reflexivity|exact H].
  - unfold kterms. rewrite !map_length. unfold head in *. lia.
  - intros w. destruct (Rlt_le_dec 0 w) as [Hw|Hw].
    + rewrite <- (exp_ln w Hw). replace (ln w) with (- (- ln w)) by ring.
      rewrite <- !score_mass_csum. apply M.
    + rewrite !csum_absent; [reflexivity| |];
        intros H; apply in_map_iff in H as [[c z] [Ez H]]; simpl in Ez; subst z;
        apply Pos in H; lra.
Qed.

Theorem kprobe_pairs : forall d H0 u b (hs hs' : list head),
  length hs = H0 -> (length hs' <= H0)%nat ->
  NoDup (map snd (score_pairs d u b hs)) ->
  (forall c s, In (c, s) (score_pairs d u b hs) -> c <> 0) ->
  (forall k, (k <= 2 * H0)%nat -> kanswer d u b k hs = kanswer d u b k hs') ->
  Permutation (score_pairs d u b hs) (score_pairs d u b hs').
Proof.
  intros d H0 u b hs hs' Hl Hl' N NZ E. assert (Hle : (length hs <= H0)%nat) by (rewrite Hl; apply le_n).
  apply masses_pairs; [lia|exact N|exact NZ|].
  exact (kprobe_identifies d H0 u b hs hs' Hle Hl' E).
Qed.

(** ** Every pair of a run's design. *)

(** Two models give the same answer to every query the design generates. *)
Definition same_answers (C : mh_run) (hs' hs : list head) : Prop :=
  Forall (fun q => mh_answer (md C) hs' q = mh_answer (md C) hs q)
    (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)).

(** Two models have the same score masses at every pair of the design. *)
Definition same_masses (C : mh_run) (hs' hs : list head) : Prop :=
  Forall (fun p => forall s,
      score_mass (md C) (rvec (fst p)) (rvec (snd p)) s hs' =
      score_mass (md C) (rvec (fst p)) (rvec (snd p)) s hs)
    (mh_pairs (md C) (mU C) (mB C)).

Lemma pair_probe : forall d U B (p : qvec * qvec), In p (mh_pairs d U B) ->
  exists j, (j < d)%nat /\ snd p = B j.
Proof.
  intros d U B p Hp. unfold mh_pairs in Hp. apply in_app_or in Hp as [Hp|Hp].
  - apply in_flat_map in Hp as [k [_ Hp]]. apply in_map_iff in Hp as [j [<- Hj]].
    apply in_seq in Hj. exists j. split; [lia|reflexivity].
  - apply in_map_iff in Hp as [k [<- Hk]]. apply in_seq in Hk. exists O. split; [lia|reflexivity].
Qed.

Lemma pair_queries : forall d H0 U B ties (p : qvec * qvec) k,
  In p (mh_pairs d U B) -> (1 <= k <= 2 * H0)%nat ->
  In (fst p, snd p, k) (mh_queries d H0 U B ties).
Proof.
  intros d H0 U B ties p k Hp Hk. unfold mh_queries. apply in_or_app. right. apply in_or_app.
  left. apply in_flat_map. exists p. split; [exact Hp|]. apply in_map_iff. exists k.
  split; [reflexivity|]. apply in_seq. lia.
Qed.

Lemma probe_query : forall d H0 U B ties j, (j < d)%nat ->
  In ((fun _ => 0%Q), B j, O) (mh_queries d H0 U B ties).
Proof.
  intros. unfold mh_queries. apply in_or_app. left. apply in_map_iff. exists j.
  split; [reflexivity|]. apply in_seq. lia.
Qed.

(** The per-k answer step, for any relation P between two models' answers (equality for
    exact answers, closeness for answers in intervals): if P holds at every query the
    design generates, it holds between the k-probe answers F(0) .. F(2 H0) at every pair. *)
Lemma pair_kanswers : forall (P : R -> R -> Prop) C (hs1 hs2 : list head) p k,
  Forall (fun q => P (mh_answer (md C) hs1 q) (mh_answer (md C) hs2 q))
    (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) ->
  In p (mh_pairs (md C) (mU C) (mB C)) -> (k <= 2 * mH0 C)%nat ->
  P (kanswer (md C) (rvec (fst p)) (rvec (snd p)) k hs1)
    (kanswer (md C) (rvec (fst p)) (rvec (snd p)) k hs2).
Proof.
  intros P C hs1 hs2 p k E Hp Hk. rewrite Forall_forall in E. destruct k as [|k].
  - destruct (pair_probe _ _ _ p Hp) as [j [Hj Ej]].
    pose proof (E _ (probe_query (md C) (mH0 C) (mU C) (mB C) (mties C) j Hj)) as F.
    unfold mh_answer in F. unfold kanswer. rewrite Ej. exact F.
  - exact (E _ (pair_queries (md C) (mH0 C) (mU C) (mB C) (mties C) p (S k) Hp ltac:(lia))).
Qed.

(** Every run: models of at most H0 heads with the same answers to the design's queries
    have the same score masses at every pair (u, b) of the design. *)
Theorem mh_masses_determined : forall C (hs' hs : list head),
  (length hs' <= mH0 C)%nat -> (length hs <= mH0 C)%nat ->
  same_answers C hs' hs -> same_masses C hs' hs.
Proof.
  intros C hs' hs Hl' Hl E. unfold same_masses. apply Forall_forall. intros p Hp s.
  apply (kprobe_identifies _ (mH0 C)); [exact Hl'|exact Hl|]. intros k Hk.
  exact (pair_kanswers eq C hs' hs p k E Hp Hk).
Qed.

(** ** Generic runs: the (residue, score) pairs at every pair of the design. *)

Fixpoint qnodup (l : list Q) : bool :=
  match l with
  | [] => true
  | x :: l => forallb (fun y => negb (Qeq_bool x y)) l && qnodup l
  end.

Lemma qnodup_spec : forall l, qnodup l = true -> NoDup (map Q2R l).
Proof.
  induction l as [|x l IH]; simpl; intros H; [constructor|].
  apply andb_true_iff in H as [H1 H2]. constructor; [|exact (IH H2)].
  intros Hin. apply in_map_iff in Hin as [y [E Hy]]. rewrite forallb_forall in H1.
  pose proof (H1 y Hy) as F. apply eqR_Qeq in E. apply Qeq_sym, Qeq_bool_iff in E.
  rewrite E in F. discriminate.
Qed.

(** At the pair (u, b): the certified heads' scores are pairwise distinct and their
    residues nonzero (checked over Q). *)
Definition generic_at (d : nat) (hs : list (qmat * qvec)) (p : qvec * qvec) : bool :=
  qnodup (map (fun h => qdot d (fst p) (qmv d (fst h) (snd p))) hs) &&
  forallb (fun h => negb (Qeq_bool (qdot d (fst p) (snd h)) 0)) hs.

Definition check_generic (C : mh_run) : bool :=
  forallb (generic_at (md C) (mheads C)) (mh_pairs (md C) (mU C) (mB C)).

Lemma score_pairs_q : forall d u b (hs : list (qmat * qvec)),
  score_pairs d (rvec u) (rvec b) (rheads hs) =
  map (fun h => (Q2R (qdot d u (snd h)), Q2R (qdot d u (qmv d (fst h) b)))) hs.
Proof.
  intros. unfold score_pairs, rheads. rewrite map_map. apply map_ext. intros [W v].
  simpl. rewrite dot_q, dot_mv_q. reflexivity.
Qed.

(** Every run whose certified heads number H0 and are generic at every pair: a model of
    at most H0 heads with the certified heads' answers to every query the design generates
    has, at every pair of the design, the certified heads' (residue, score) pairs, up to
    order. *)
Theorem mh_pairs_determined : forall C (hs' : list head),
  check_generic C = true -> length (mheads C) = mH0 C -> (length hs' <= mH0 C)%nat ->
  same_answers C hs' (rheads (mheads C)) ->
  Forall (fun p => Permutation
      (score_pairs (md C) (rvec (fst p)) (rvec (snd p)) (rheads (mheads C)))
      (score_pairs (md C) (rvec (fst p)) (rvec (snd p)) hs'))
    (mh_pairs (md C) (mU C) (mB C)).
Proof.
  intros C hs' G Hl Hl' E. apply Forall_forall. intros p Hp.
  unfold check_generic in G. rewrite forallb_forall in G. specialize (G p Hp).
  unfold generic_at in G. apply andb_true_iff in G as [G1 G2].
  apply (kprobe_pairs _ (mH0 C)).
  - unfold rheads. rewrite map_length. exact Hl.
  - exact Hl'.
  - rewrite score_pairs_q, map_map. simpl. rewrite <- (map_map _ Q2R).
    apply qnodup_spec, G1.
  - intros c s H. rewrite score_pairs_q in H. apply in_map_iff in H as [h [Eh Hh]].
    injection Eh as <- _. rewrite forallb_forall in G2. pose proof (G2 h Hh) as F.
    intros Z. replace 0 with (Q2R 0) in Z by (unfold Q2R; simpl; ring).
    apply eqR_Qeq, Qeq_bool_iff in Z. rewrite Z in F. discriminate.
  - intros k Hk. symmetry. exact (pair_kanswers eq C hs' _ p k E Hp Hk).
Qed.
