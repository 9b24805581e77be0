(** * Certified canonical multi-head runs: the theorem an exported run instantiates.

    The canonical learner asks, at each probe b_j, F(0) = [b_j], and at each pair (u, b)
    of its design (the grid (u_k, b_j), then the links (u_0 + u_k, b_0)) the queries
    F(k) = [b + u; ...; b + u; b] (k copies of b + u, then b) for k = 1 .. 2 H0, and one
    F(1) at (u_k, (b_0 + b_j)/2) per tie it resolved. On such a sequence a head (W, v)
    answers b^T v + u^T v k / (k + exp (- u^T W b)) ([answer_seqk], every k, every d).

    [mh_answers_in]: for every d, H0 and list of rational heads, if the recorded per-head
    numbers (b^T v_h, u^T v_h, u^T W_h b) of each query are the heads' own (checked over
    Q by [check_mh]) and each recorded interval holds the sum over the heads of
    b^T v + u^T v k / (k + exp (- u^T W b)) ([mh_hold], proved in a run by [interval]),
    then the heads answer the i-th query of the design inside the i-th recorded interval,
    with exactly one interval per query; and every score u^T W_h b and residue u^T v_h at
    every pair of the design is a rational with denominator at most D.

    [grid_determines] (every d): with inverses of U and B, a head with another head's scores
    u_k^T W b_j and residues u_k^T v at the d^2 grid pairs has its W and v (the learner's
    linear solve); [grid_determines_model]: a model whose heads, in order, do so gives the
    same output on every sequence.

    Not covered: that another model answering inside the recorded intervals has the
    certified heads' scores and residues at the pairs. Identification from exact answers
    is [CertMultiHeadId.mh_masses_determined] (interpolation) and
    [CertMultiHeadLabel.mh_identified] (labelling); interpolation and pole isolation in
    ball arithmetic and rational reconstruction (from intervals) are not formalised. *)

From Coq Require Import Reals QArith Qreals Lra Lia List Bool.
From VerifiedAttn Require Import Defs Prop71 CertHead CertPair.
Import ListNotations.
Open Scope R_scope.

(** k copies of a, then the query token q (length k + 1; k = 0 is the query [q]). *)
Definition seqk (k : nat) (a q : vec) : tokens := fun t => if Nat.ltb t k then a else q.

(** What one head answers on [b + u; ...; b + u; b] (k copies): a + r k / (k + e^(-m)). *)
Definition kprobe_value (k a r m : R) : R := a + r * (k / (k + exp (- m))).

Lemma sum_const_lt : forall n f c, (forall i, (i < n)%nat -> f i = c) -> sum n f = INR n * c.
Proof.
  induction n as [|n IH]; intros f c H; cbn [sum]; [simpl; ring|].
  rewrite (IH f c) by (intros; apply H; lia). rewrite H by lia. rewrite S_INR. ring.
Qed.

(** An affine head (score bias c) on k copies of a, then q. *)
Lemma attention_affine_seqk : forall d k a q W c v,
  attention_affine d (S k) (seqk k a q) W c v 0 =
  kprobe_value (INR k) (dot d q v) (dot d a v - dot d q v)
    (dot d a (vadd (mat_vec d W q) c) - dot d q (vadd (mat_vec d W q) c)).
Proof.
  intros. rewrite attention_affine_ratio. cbn [sum].
  unfold scores_affine, query_token. simpl pred.
  assert (Eq : seqk k a q k = q) by (unfold seqk; rewrite Nat.ltb_irrefl; reflexivity).
  rewrite Eq.
  set (sa := dot d a (vadd (mat_vec d W q) c)).
  set (sq := dot d q (vadd (mat_vec d W q) c)).
  rewrite (sum_const_lt k _ (exp sa * dot d a v))
    by (intros i Hi; unfold seqk; rewrite (proj2 (Nat.ltb_lt i k) Hi); reflexivity).
  rewrite (sum_const_lt k _ (exp sa))
    by (intros i Hi; unfold seqk; rewrite (proj2 (Nat.ltb_lt i k) Hi); reflexivity).
  unfold kprobe_value.
  replace (exp (- (sa - sq))) with (exp sq * / exp sa)
    by (rewrite <- exp_Ropp, <- exp_plus; f_equal; ring).
  pose proof (exp_pos sa). pose proof (exp_pos sq). pose proof (pos_INR k).
  rewrite Rplus_0_r.
  assert (P : 0 < exp sq * / exp sa) by (apply Rmult_lt_0_compat; [lra|apply Rinv_0_lt_compat; lra]).
  assert (0 < INR k * exp sa + exp sq) by nra.
  field. repeat split; lra.
Qed.

Lemma attention_seqk : forall d k a q W v,
  attention d (S k) (seqk k a q) W v =
  kprobe_value (INR k) (dot d q v) (dot d a v - dot d q v)
    (dot d a (mat_vec d W q) - dot d q (mat_vec d W q)).
Proof.
  intros. unfold attention. rewrite attention_affine_seqk.
  assert (Z : forall x, dot d x (vadd (mat_vec d W q) zero_vec) = dot d x (mat_vec d W q))
    by (intros; rewrite dot_vadd_r, dot_zero_r; ring).
  rewrite !Z. reflexivity.
Qed.

(** The canonical learner's sequence at (u, b): k copies of b + u, then b. *)
Corollary answer_seqk : forall d k u b W v,
  attention d (S k) (seqk k (vadd b u) b) W v =
  kprobe_value (INR k) (dot d b v) (dot d u v) (dot d u (mat_vec d W b)).
Proof.
  intros. rewrite attention_seqk, !dot_vadd_l. f_equal; ring.
Qed.

(** ** The recorded run. *)

Definition qdot (d : nat) (x y : qvec) : Q := qsum d (fun i => x i * y i)%Q.
Definition qmv (d : nat) (W : qmat) (x : qvec) : qvec := fun i => qsum d (fun j => W i j * x j)%Q.

(** The design's pairs: (u_k, b_j) for k, j < d, then (u_0 + u_k, b_0) for 0 < k < d
    (u_k is row k of U, b_j row j of B). *)
Definition mh_pairs (d : nat) (U B : qmat) : list (qvec * qvec) :=
  flat_map (fun k => map (fun j => (U k, B j)) (seq 0 d)) (seq 0 d) ++
  map (fun k => ((fun i => U O i + U k i)%Q, B O)) (seq 1 (d - 1)).

(** The learning queries (u, b, k), in the certificate's order: F(0) at each b_j (u is not
    read when k = 0), F(1 .. 2 H0) at each pair, F(1) at (u_k, (b_0 + b_j)/2) per tie. *)
Definition mh_queries (d H0 : nat) (U B : qmat) (ties : list (nat * nat))
  : list (qvec * qvec * nat) :=
  map (fun j => (fun _ => 0%Q, B j, O)) (seq 0 d) ++
  flat_map (fun p => map (fun k => (fst p, snd p, k)) (seq 1 (2 * H0))) (mh_pairs d U B) ++
  map (fun t => (U (fst t), (fun i => (B O i + B (snd t) i) / 2)%Q, 1%nat)) ties.

(** A head's answer to the query (u, b, k). *)
Definition rheads (hs : list (qmat * qvec)) : list head :=
  map (fun h => (rmat (fst h), rvec (snd h))) hs.
Definition mh_answer (d : nat) (hs : list head) (q : qvec * qvec * nat) : R :=
  let '(u, b, k) := q in multi_head d (S k) (seqk k (vadd (rvec b) (rvec u)) (rvec b)) hs.

(** A recorded answer: its interval [alo, ahi], and per head (b^T v, u^T v, u^T W b). *)
Record mh_rec := { alo : Q; ahi : Q; aterms : list (Q * Q * Q) }.

Record mh_run := {
  md : nat; mH0 : nat; mD : positive;
  mU : qmat; mB : qmat; mties : list (nat * nat);
  mheads : list (qmat * qvec);  (** the certified canonical heads (W_h, v_h) *)
  mrecs : list mh_rec }.

(** What a run proves. *)
Definition answers_mh (C : mh_run) (hs : list head) : Prop :=
  Forall2 (fun q a => inside (alo a) (ahi a) (mh_answer (md C) hs q))
    (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) (mrecs C).

Definition pairs_den_le (C : mh_run) : Prop :=
  Forall (fun p => Forall (fun h =>
      den_le (mD C) (dot (md C) (rvec (fst p)) (mat_vec (md C) (rmat (fst h)) (rvec (snd p)))) /\
      den_le (mD C) (dot (md C) (rvec (fst p)) (rvec (snd h)))) (mheads C))
    (mh_pairs (md C) (mU C) (mB C)).

(** ** The checks over Q. *)

Definition term_of (d : nat) (q : qvec * qvec * nat) (h : qmat * qvec) : Q * Q * Q :=
  let '(u, b, _) := q in (qdot d b (snd h), qdot d u (snd h), qdot d u (qmv d (fst h) b)).

Fixpoint terms_eqb (xs ys : list (Q * Q * Q)) : bool :=
  match xs, ys with
  | [], [] => true
  | (a, r, m) :: xs, (a', r', m') :: ys =>
      Qeq_bool a a' && Qeq_bool r r' && Qeq_bool m m' && terms_eqb xs ys
  | _, _ => false
  end.

Fixpoint check_recs (d : nat) (hs : list (qmat * qvec)) (qs : list (qvec * qvec * nat))
  (rs : list mh_rec) : bool :=
  match qs, rs with
  | [], [] => true
  | q :: qs, r :: rs => terms_eqb (map (term_of d q) hs) (aterms r) && check_recs d hs qs rs
  | _, _ => false
  end.

Definition den_okr (D : positive) (q : Q) : bool := den_ok D (Qred q).

Definition check_mh (C : mh_run) : bool :=
  let d := md C in
  check_recs d (mheads C) (mh_queries d (mH0 C) (mU C) (mB C) (mties C)) (mrecs C) &&
  forallb (fun p => forallb (fun h =>
      den_okr (mD C) (qdot d (fst p) (qmv d (fst h) (snd p))) &&
      den_okr (mD C) (qdot d (fst p) (snd h))) (mheads C)) (mh_pairs d (mU C) (mB C)).

(** The sum over the heads of the recorded terms at k; [interval] proves [mh_hold]. *)
Fixpoint tsum (k : R) (ts : list (Q * Q * Q)) : R :=
  match ts with
  | [] => 0
  | (a, r, m) :: ts => kprobe_value k (Q2R a) (Q2R r) (Q2R m) + tsum k ts
  end.

Definition mh_hold (C : mh_run) : Prop :=
  Forall2 (fun q a => inside (alo a) (ahi a) (tsum (INR (snd q)) (aterms a)))
    (mh_queries (md C) (mH0 C) (mU C) (mB C) (mties C)) (mrecs C).

(** With k = 0 (the query [b]) the answer is the sum of the b^T v_h, checked over Q. *)
Fixpoint asum (ts : list (Q * Q * Q)) : Q :=
  match ts with [] => 0%Q | (a, _, _) :: ts => (a + asum ts)%Q end.

Lemma inside_k0 : forall lo hi ts, qle lo (asum ts) && qle (asum ts) hi = true ->
  inside lo hi (tsum (INR 0) ts).
Proof.
  intros lo hi ts H.
  assert (E : tsum (INR 0) ts = Q2R (asum ts)).
  { clear H. induction ts as [|[[a r] m] ts IH]; cbn [tsum asum].
    - unfold Q2R. simpl. field.
    - rewrite IH, Q2R_plus. unfold kprobe_value. simpl INR. unfold Rdiv.
      rewrite Rmult_0_l, Rmult_0_r. ring. }
  apply andb_true_iff in H as [H1 H2]. apply qle_spec in H1, H2.
  unfold inside. rewrite E. lra.
Qed.

(** ** The proof. *)

Lemma dot_q : forall d x y, dot d (rvec x) (rvec y) = Q2R (qdot d x y).
Proof.
  intros. unfold qdot. rewrite Q2R_qsum. apply sum_ext. intros. unfold rvec.
  rewrite Q2R_mult. reflexivity.
Qed.

Lemma mv_q : forall d W x i, mat_vec d (rmat W) (rvec x) i = Q2R (qmv d W x i).
Proof.
  intros. unfold qmv, mat_vec. rewrite Q2R_qsum. apply sum_ext. intros. unfold rmat, rvec.
  rewrite Q2R_mult. reflexivity.
Qed.

Lemma dot_mv_q : forall d u W b,
  dot d (rvec u) (mat_vec d (rmat W) (rvec b)) = Q2R (qdot d u (qmv d W b)).
Proof.
  intros. rewrite <- dot_q. apply dot_ext; [reflexivity|]. intros. rewrite mv_q. reflexivity.
Qed.

Lemma terms_eqb_tsum : forall k xs ys, terms_eqb xs ys = true -> tsum k xs = tsum k ys.
Proof.
  intros k. induction xs as [|[[a r] m] xs IH]; intros [|[[a' r'] m'] ys] H; simpl in *;
    try discriminate; [reflexivity|].
  rewrite !andb_true_iff in H. destruct H as [[[Ha Hr] Hm] Ht].
  apply qeq_spec in Ha, Hr, Hm. rewrite Ha, Hr, Hm, (IH ys Ht). reflexivity.
Qed.

Lemma mh_answer_terms : forall d hs q,
  mh_answer d (rheads hs) q = tsum (INR (snd q)) (map (term_of d q) hs).
Proof.
  intros d hs [[u b] k]. unfold mh_answer. simpl snd.
  induction hs as [|[W v] hs IH]; [reflexivity|]. unfold rheads in *.
  cbn [map multi_head fst snd tsum]. rewrite IH, answer_seqk. unfold term_of. cbn [fst snd tsum].
  rewrite dot_mv_q, !dot_q. reflexivity.
Qed.

Lemma recs_answers : forall d hs qs rs, check_recs d hs qs rs = true ->
  Forall2 (fun q a => inside (alo a) (ahi a) (tsum (INR (snd q)) (aterms a))) qs rs ->
  Forall2 (fun q a => inside (alo a) (ahi a) (mh_answer d (rheads hs) q)) qs rs.
Proof.
  intros d hs. induction qs as [|q qs IH]; intros [|r rs] H F; simpl in H; try discriminate.
  - constructor.
  - apply andb_true_iff in H as [Ht Hr]. inversion F as [|? ? ? ? Hi Hrest]; subst.
    constructor; [|apply IH; assumption].
    rewrite mh_answer_terms, (terms_eqb_tsum _ _ _ Ht). exact Hi.
Qed.

Lemma den_okr_spec : forall D q, den_okr D q = true -> den_le D (Q2R q).
Proof.
  intros D q H. rewrite <- (Qeq_eqR _ _ (Qred_correct q)). apply den_ok_spec, H.
Qed.

Theorem mh_answers_in : forall C, check_mh C = true -> mh_hold C ->
  answers_mh C (rheads (mheads C)) /\ pairs_den_le C.
Proof.
  intros C H Hh. unfold check_mh in H. apply andb_true_iff in H as [Hr Hd]. split.
  - apply recs_answers; assumption.
  - unfold pairs_den_le. apply Forall_forall. intros p Hp. apply Forall_forall. intros h Hin.
    rewrite forallb_forall in Hd. specialize (Hd p Hp). rewrite forallb_forall in Hd.
    pose proof (Hd h Hin) as E. apply andb_true_iff in E as [H1 H2].
    rewrite dot_mv_q, dot_q. split; apply den_okr_spec; assumption.
Qed.

(** ** The linear solve: the grid's labelled scores and residues determine the heads. *)

(** Head h' has head h's scores u_k^T W b_j and residues u_k^T v at the grid pairs. *)
Definition grid_same (d : nat) (U B : qmat) (h' h : head) : Prop :=
  (forall k j, (k < d)%nat -> (j < d)%nat ->
     dot d (rvec (U k)) (mat_vec d (fst h') (rvec (B j))) =
     dot d (rvec (U k)) (mat_vec d (fst h) (rvec (B j)))) /\
  (forall k, (k < d)%nat -> dot d (rvec (U k)) (snd h') = dot d (rvec (U k)) (snd h)).

Lemma solve_left : forall d (A Ainv : mat) (x : vec),
  (forall i l, (i < d)%nat -> (l < d)%nat -> mat_mul d Ainv A i l = identity i l) ->
  forall i, (i < d)%nat -> sum d (fun k => Ainv i k * sum d (fun l => A k l * x l)) = x i.
Proof.
  intros d A Ainv x H i Hi.
  rewrite (sum_ext d _ (fun k => sum d (fun l => Ainv i k * A k l * x l)))
    by (intros; rewrite <- sum_scal_l; apply sum_ext; intros; ring).
  rewrite sum_swap.
  rewrite (sum_ext d _ (fun l => identity i l * x l)).
  - apply sum_identity_l, Hi.
  - intros l Hl. transitivity (mat_mul d Ainv A i l * x l).
    + unfold mat_mul. rewrite <- sum_scal_r. reflexivity.
    + rewrite H by assumption. reflexivity.
Qed.

(** For every d: with inverses of U and B (rows u_k, b_j), a head with another head's
    scores and residues at the d^2 grid pairs (u_k, b_j) has its W and v. *)
Theorem grid_determines : forall d (U Uinv B Binv : qmat) h' h,
  check_inverse d Uinv U = true -> check_inverse d Binv B = true -> grid_same d U B h' h ->
  head_agree d h' h.
Proof.
  intros d U Uinv B Binv [W' v'] [W v] HU HB [HW Hv]. cbn [fst snd] in *.
  pose proof (check_inverse_spec _ _ _ HU) as IU. pose proof (check_inverse_spec _ _ _ HB) as IB.
  split; cbn [fst snd].
  - intros i j Hi Hj.
    assert (C : forall l, (l < d)%nat ->
               mat_vec d W' (rvec (B l)) i = mat_vec d W (rvec (B l)) i).
    { intros l Hl.
      rewrite <- (solve_left d (rmat U) (rmat Uinv) (mat_vec d W' (rvec (B l))) IU i Hi).
      rewrite <- (solve_left d (rmat U) (rmat Uinv) (mat_vec d W (rvec (B l))) IU i Hi).
      apply sum_ext. intros k Hk. f_equal. exact (HW k l Hk Hl). }
    pose proof (solve_left d (rmat B) (rmat Binv) (fun m => W' i m) IB j Hj) as L1.
    pose proof (solve_left d (rmat B) (rmat Binv) (fun m => W i m) IB j Hj) as L2.
    cbv beta in L1, L2. rewrite <- L1, <- L2.
    apply sum_ext. intros l Hl. f_equal.
    transitivity (mat_vec d W' (rvec (B l)) i).
    + unfold mat_vec, rvec, rmat. apply sum_ext. intros. ring.
    + rewrite (C l Hl). unfold mat_vec, rvec, rmat. apply sum_ext. intros. ring.
  - intros i Hi.
    rewrite <- (solve_left d (rmat U) (rmat Uinv) v' IU i Hi).
    rewrite <- (solve_left d (rmat U) (rmat Uinv) v IU i Hi).
    apply sum_ext. intros k Hk. f_equal. exact (Hv k Hk).
Qed.

(** So a model whose heads, in order, have the certified heads' grid scores and residues
    gives the certified model's output on every sequence of every length. *)
Theorem grid_determines_model : forall d (U Uinv B Binv : qmat) hs' hs,
  check_inverse d Uinv U = true -> check_inverse d Binv B = true ->
  Forall2 (grid_same d U B) hs' hs -> forall N X, multi_head d N X hs' = multi_head d N X hs.
Proof.
  intros d U Uinv B Binv hs' hs HU HB F. apply multi_head_ext.
  induction F as [|h' h hs' hs G F IH]; constructor; [|exact IH].
  exact (grid_determines d U Uinv B Binv h' h HU HB G).
Qed.
