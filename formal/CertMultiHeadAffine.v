(** * Certified affine canonical multi-head runs: the theorem an exported run instantiates.

    The affine canonical learner (heads (W_h, c_h, v_h) with score biases c_h, one output
    bias beta) has d + 1 probes b_0 .. b_d (the rows of B, the last one generic: the lifted
    probes [b_j; 1] are independent). It asks F(0) = [b_j] at each probe; at each pair
    (u_k, b_j), k < d, j <= d, then (u_0 + u_k, b_0) for 0 < k < d, the queries
    F(k) = [b + u; ...; b + u; b] (k copies) for k = 1 .. 2 H0; and F(1) at
    (u_k, (b_0 + b_j)/2) per tie it resolved. On such a sequence an affine head answers
    b^T v + u^T v k / (k + exp (- u^T (W b + c))) ([answer_seqk_affine], every k and d),
    and the model adds beta once.

    [amh_answers_in] (every d, H0 and list of rational affine heads): if the recorded
    per-head numbers (b^T v_h, u^T v_h, u^T (W_h b + c_h)) of each query are the heads' own
    (checked over Q) and each recorded interval holds their sum of
    b^T v + u^T v k / (k + exp (- u^T (W b + c))) plus beta ([amh_hold], proved in a run by
    [interval]), then the heads with beta answer the i-th query of the design inside the
    i-th recorded interval, with exactly one interval per query; and every score
    u^T (W_h b + c_h) and residue u^T v_h at every pair of the design is a rational with
    denominator at most D.

    [amh_masses_determined] (every run): two affine models of at most H0 heads (each with
    its own output bias) that give the same answer to every query [amh_queries] generates
    have the same score masses at every pair: for every real s, the same sum of residues
    u^T v_h over their heads with score u^T (W_h b + c_h) = s (the interpolation step,
    [terms_identify]: F(0) .. F(2 H0) fix the poles and residues whatever the constant).

    Not covered for affine runs: the labelling across pairs and the steps from intervals
    ([CertMultiHeadLabel], [CertMultiHeadBound]), stated for the bias-free design. *)

From Coq Require Import Reals QArith Qreals Lra Lia List Bool.
From VerifiedAttn Require Import Defs CertHead CertMultiHead CertMultiHeadId.
Import ListNotations.
Open Scope R_scope.

(** An affine head on [b + u; ...; b + u; b] (k copies): a + r k / (k + e^(-m)) with
    a = b^T v, r = u^T v and the score m = u^T (W b + c). *)
Corollary answer_seqk_affine : forall d k u b W c v,
  attention_affine d (S k) (seqk k (vadd b u) b) W c v 0 =
  kprobe_value (INR k) (dot d b v) (dot d u v) (dot d u (vadd (mat_vec d W b) c)).
Proof.
  intros. rewrite attention_affine_seqk, !dot_vadd_l. f_equal; ring.
Qed.

(** ** The recorded run. *)

(** The design's pairs: (u_k, b_j) for k < d and j <= d, then (u_0 + u_k, b_0), 0 < k < d. *)
Definition amh_pairs (d : nat) (U B : qmat) : list (qvec * qvec) :=
  flat_map (fun k => map (fun j => (U k, B j)) (seq 0 (S d))) (seq 0 d) ++
  map (fun k => ((fun i => U O i + U k i)%Q, B O)) (seq 1 (d - 1)).

(** The learning queries (u, b, k) in the certificate's order: F(0) at each of the d + 1
    probes, F(1 .. 2 H0) at each pair, F(1) at (u_k, (b_0 + b_j)/2) per tie. *)
Definition amh_queries (d H0 : nat) (U B : qmat) (ties : list (nat * nat))
  : list (qvec * qvec * nat) :=
  map (fun j => (fun _ => 0%Q, B j, O)) (seq 0 (S d)) ++
  flat_map (fun p => map (fun k => (fst p, snd p, k)) (seq 1 (2 * H0))) (amh_pairs d U B) ++
  map (fun t => (U (fst t), (fun i => (B O i + B (snd t) i) / 2)%Q, 1%nat)) ties.

(** A rational affine head (W, c, v), and its real form. *)
Definition qahead := (qmat * qvec * qvec)%type.
Definition raheads (hs : list qahead) : list affine_head :=
  map (fun h => (rmat (fst (fst h)), rvec (snd (fst h)), rvec (snd h))) hs.

Definition amh_answer (d : nat) (hs : list affine_head) (beta : R) (q : qvec * qvec * nat) : R :=
  let '(u, b, k) := q in multi_head_affine d (S k) (seqk k (vadd (rvec b) (rvec u)) (rvec b)) hs beta.

Record amh_run := {
  ad : nat; aH0 : nat; aD : positive;
  aU : qmat; aB : qmat; aties : list (nat * nat);
  aheads : list qahead;  (** the certified canonical heads (W_h, c_h, v_h) *)
  abeta : Q;             (** the certified output bias *)
  arecs : list mh_rec }.

Definition queries_of (C : amh_run) := amh_queries (ad C) (aH0 C) (aU C) (aB C) (aties C).

(** What a run proves. *)
Definition answers_amh (C : amh_run) (hs : list affine_head) (beta : R) : Prop :=
  Forall2 (fun q a => inside (alo a) (ahi a) (amh_answer (ad C) hs beta q)) (queries_of C) (arecs C).

Definition ascore (d : nat) (u b : vec) (h : affine_head) : R :=
  dot d u (vadd (mat_vec d (fst (fst h)) b) (snd (fst h))).

Definition apairs_den_le (C : amh_run) : Prop :=
  Forall (fun p => Forall (fun h =>
      den_le (aD C) (ascore (ad C) (rvec (fst p)) (rvec (snd p)) h) /\
      den_le (aD C) (dot (ad C) (rvec (fst p)) (snd h))) (raheads (aheads C)))
    (amh_pairs (ad C) (aU C) (aB C)).

(** ** The checks over Q. *)

(** W b + c over Q. *)
Definition qmvc (d : nat) (W : qmat) (c b : qvec) : qvec := fun i => (qmv d W b i + c i)%Q.

Definition aterm_of (d : nat) (q : qvec * qvec * nat) (h : qahead) : Q * Q * Q :=
  let '(u, b, _) := q in let '(W, c, v) := h in (qdot d b v, qdot d u v, qdot d u (qmvc d W c b)).

Fixpoint check_arecs (d : nat) (hs : list qahead) (qs : list (qvec * qvec * nat))
  (rs : list mh_rec) : bool :=
  match qs, rs with
  | [], [] => true
  | q :: qs, r :: rs => terms_eqb (map (aterm_of d q) hs) (aterms r) && check_arecs d hs qs rs
  | _, _ => false
  end.

Definition check_amh (C : amh_run) : bool :=
  let d := ad C in
  check_arecs d (aheads C) (queries_of C) (arecs C) &&
  forallb (fun p => forallb (fun h =>
      den_okr (aD C) (qdot d (fst p) (qmvc d (fst (fst h)) (snd (fst h)) (snd p))) &&
      den_okr (aD C) (qdot d (fst p) (snd h))) (aheads C)) (amh_pairs d (aU C) (aB C)).

(** Each recorded interval holds the recorded terms' sum plus beta; [interval] proves it. *)
Definition amh_hold (C : amh_run) : Prop :=
  Forall2 (fun q a => inside (alo a) (ahi a) (tsum (INR (snd q)) (aterms a) + Q2R (abeta C)))
    (queries_of C) (arecs C).

(** With k = 0 (the query [b]) the answer is the sum of the b^T v_h plus beta, over Q. *)
Lemma inside_k0_beta : forall lo hi ts beta,
  qle lo (asum ts + beta) && qle (asum ts + beta) hi = true ->
  inside lo hi (tsum (INR 0) ts + Q2R beta).
Proof.
  intros lo hi ts beta H.
  assert (E : tsum (INR 0) ts = Q2R (asum ts)).
  { clear H. induction ts as [|[[a r] m] ts IH]; cbn [tsum asum].
    - unfold Q2R. simpl. field.
    - rewrite IH, Q2R_plus. unfold kprobe_value. simpl INR. unfold Rdiv.
      rewrite Rmult_0_l, Rmult_0_r. ring. }
  apply andb_true_iff in H as [H1 H2]. apply qle_spec in H1, H2. rewrite Q2R_plus in H1, H2.
  unfold inside. rewrite E. lra.
Qed.

(** ** The proof. *)

Lemma dot_mvc_q : forall d u W c b,
  dot d (rvec u) (vadd (mat_vec d (rmat W) (rvec b)) (rvec c)) = Q2R (qdot d u (qmvc d W c b)).
Proof.
  intros. rewrite <- dot_q. apply dot_ext; [reflexivity|]. intros i _.
  unfold vadd. change (rvec (qmvc d W c b) i) with (Q2R (qmv d W b i + c i)%Q).
  rewrite Q2R_plus, mv_q. reflexivity.
Qed.

Lemma amh_answer_terms : forall d hs beta q,
  amh_answer d (raheads hs) (Q2R beta) q = tsum (INR (snd q)) (map (aterm_of d q) hs) + Q2R beta.
Proof.
  intros d hs beta [[u b] k]. unfold amh_answer, multi_head_affine. simpl snd. f_equal.
  induction hs as [|[[W c] v] hs IH]; [reflexivity|]. unfold raheads in *.
  cbn [map affine_heads_sum fst snd tsum]. rewrite IH, answer_seqk_affine.
  unfold aterm_of. cbn [fst snd tsum]. rewrite dot_mvc_q, !dot_q. reflexivity.
Qed.

Lemma arecs_answers : forall d hs beta qs rs, check_arecs d hs qs rs = true ->
  Forall2 (fun q a => inside (alo a) (ahi a) (tsum (INR (snd q)) (aterms a) + Q2R beta)) qs rs ->
  Forall2 (fun q a => inside (alo a) (ahi a) (amh_answer d (raheads hs) (Q2R beta) q)) qs rs.
Proof.
  intros d hs beta. induction qs as [|q qs IH]; intros [|r rs] H F; simpl in H; try discriminate.
  - constructor.
  - apply andb_true_iff in H as [Ht Hr]. inversion F as [|? ? ? ? Hi Hrest]; subst.
    constructor; [|apply IH; assumption].
    rewrite amh_answer_terms, (terms_eqb_tsum _ _ _ Ht). exact Hi.
Qed.

Theorem amh_answers_in : forall C, check_amh C = true -> amh_hold C ->
  answers_amh C (raheads (aheads C)) (Q2R (abeta C)) /\ apairs_den_le C.
Proof.
  intros C H Hh. unfold check_amh in H. apply andb_true_iff in H as [Hr Hd]. split.
  - apply arecs_answers; assumption.
  - unfold apairs_den_le. apply Forall_forall. intros p Hp. apply Forall_forall. intros h Hin.
    unfold raheads in Hin. apply in_map_iff in Hin as [[[W c] v] [<- Hin]].
    rewrite forallb_forall in Hd. specialize (Hd p Hp). rewrite forallb_forall in Hd.
    pose proof (Hd _ Hin) as E. apply andb_true_iff in E as [H1 H2]. cbn [fst snd] in H1, H2.
    unfold ascore. cbn [fst snd]. rewrite dot_mvc_q, dot_q.
    split; apply den_okr_spec; assumption.
Qed.

(** ** The answers at one pair determine the score masses, whatever the constant. *)

(** Per affine head: (u^T v, exp (- u^T (W b + c))). *)
Definition akterms (d : nat) (u b : vec) (hs : list affine_head) : list (R * R) :=
  map (fun h => (dot d u (snd h), exp (- ascore d u b h))) hs.

(** The sum of the residues u^T v_h of the heads with score u^T (W_h b + c_h) = s. *)
Definition ascore_mass (d : nat) (u b : vec) (s : R) (hs : list affine_head) : R :=
  lsum (ind s) (map (fun h => (dot d u (snd h), ascore d u b h)) hs).

Definition aabase (d : nat) (b : vec) (hs : list affine_head) : R :=
  lsum (fun _ => 1) (map (fun h => (dot d b (snd h), 0)) hs).

Lemma aheads_form : forall d u b k hs,
  affine_heads_sum d (S k) (seqk k (vadd b u) b) hs =
  aabase d b hs + INR k * psum (INR k) (akterms d u b hs).
Proof.
  intros d u b k. unfold aabase, akterms, psum.
  induction hs as [|[[W c] v] hs IH]; simpl; [ring|]. rewrite IH, answer_seqk_affine.
  unfold kprobe_value, ascore, Rdiv. simpl. ring.
Qed.

Lemma ascore_mass_csum : forall d u b s hs,
  ascore_mass d u b s hs = csum (exp (- s)) (akterms d u b hs).
Proof.
  intros. unfold ascore_mass, csum, akterms, ind.
  induction hs as [|h hs IH]; simpl; [reflexivity|]. rewrite IH. f_equal. f_equal.
  destruct (Req_EM_T (ascore d u b h) s) as [E|E];
    destruct (Req_EM_T (exp (- ascore d u b h)) (exp (- s))) as [F|F]; try reflexivity.
  - exfalso. apply F. rewrite E. reflexivity.
  - exfalso. apply E. apply exp_inv in F. lra.
Qed.

(** Every d and H0: two affine models of at most H0 heads, with any output biases, giving
    the same F(0), ..., F(2 H0) at (u, b) have the same score masses. *)
Theorem akprobe_identifies : forall d H0 u b (hs hs' : list affine_head) beta beta',
  (length hs <= H0)%nat -> (length hs' <= H0)%nat ->
  (forall k, (k <= 2 * H0)%nat ->
     multi_head_affine d (S k) (seqk k (vadd b u) b) hs beta =
     multi_head_affine d (S k) (seqk k (vadd b u) b) hs' beta') ->
  forall s, ascore_mass d u b s hs = ascore_mass d u b s hs'.
Proof.
  intros d H0 u b hs hs' beta beta' Hl Hl' E s. rewrite !ascore_mass_csum.
  apply (terms_identify H0 _ _ (aabase d b hs + beta) (aabase d b hs' + beta')).
  - unfold akterms. rewrite map_length. exact Hl.
  - unfold akterms. rewrite map_length. exact Hl'.
  - intros c z Hc. apply in_app_or in Hc as [Hc|Hc]; unfold akterms in Hc;
      apply in_map_iff in Hc as [h [Eh _]]; injection Eh as _ <-; apply exp_pos.
  - intros k Hk. pose proof (E k Hk) as Ek. unfold multi_head_affine in Ek.
    rewrite !aheads_form in Ek. lra.
Qed.

(** ** Every pair of a run's design. *)

Definition asame_answers (C : amh_run) (hs' : list affine_head) beta' hs beta : Prop :=
  Forall (fun q => amh_answer (ad C) hs' beta' q = amh_answer (ad C) hs beta q) (queries_of C).

Definition asame_masses (C : amh_run) (hs' hs : list affine_head) : Prop :=
  Forall (fun p => forall s,
      ascore_mass (ad C) (rvec (fst p)) (rvec (snd p)) s hs' =
      ascore_mass (ad C) (rvec (fst p)) (rvec (snd p)) s hs)
    (amh_pairs (ad C) (aU C) (aB C)).

Lemma apair_probe : forall d U B (p : qvec * qvec), In p (amh_pairs d U B) ->
  exists j, (j < S d)%nat /\ snd p = B j.
Proof.
  intros d U B p Hp. unfold amh_pairs in Hp. apply in_app_or in Hp as [Hp|Hp].
  - apply in_flat_map in Hp as [k [_ Hp]]. apply in_map_iff in Hp as [j [<- Hj]].
    apply in_seq in Hj. exists j. split; [lia|reflexivity].
  - apply in_map_iff in Hp as [k [<- Hk]]. exists O. split; [lia|reflexivity].
Qed.

Lemma apair_queries : forall d H0 U B ties (p : qvec * qvec) k,
  In p (amh_pairs d U B) -> (1 <= k <= 2 * H0)%nat ->
  In (fst p, snd p, k) (amh_queries d H0 U B ties).
Proof.
  intros d H0 U B ties p k Hp Hk. unfold amh_queries. apply in_or_app. right. apply in_or_app.
  left. apply in_flat_map. exists p. split; [exact Hp|]. apply in_map_iff. exists k.
  split; [reflexivity|]. apply in_seq. lia.
Qed.

Lemma aprobe_query : forall d H0 U B ties j, (j < S d)%nat ->
  In ((fun _ => 0%Q), B j, O) (amh_queries d H0 U B ties).
Proof.
  intros. unfold amh_queries. apply in_or_app. left. apply in_map_iff. exists j.
  split; [reflexivity|]. apply in_seq. lia.
Qed.

(** Every run: affine models of at most H0 heads with the same answers to the design's
    queries (each with its own output bias) have the same score masses at every pair. *)
Theorem amh_masses_determined : forall C (hs' hs : list affine_head) beta' beta,
  (length hs' <= aH0 C)%nat -> (length hs <= aH0 C)%nat ->
  asame_answers C hs' beta' hs beta -> asame_masses C hs' hs.
Proof.
  intros C hs' hs beta' beta Hl' Hl E. unfold asame_masses. apply Forall_forall.
  intros p Hp s. apply (akprobe_identifies _ (aH0 C) _ _ _ _ beta' beta Hl' Hl).
  intros k Hk. unfold asame_answers, queries_of in E. rewrite Forall_forall in E.
  destruct k as [|k].
  - destruct (apair_probe _ _ _ p Hp) as [j [Hj Ej]].
    pose proof (E _ (aprobe_query (ad C) (aH0 C) (aU C) (aB C) (aties C) j Hj)) as F.
    unfold amh_answer in F. rewrite Ej. exact F.
  - exact (E _ (apair_queries (ad C) (aH0 C) (aU C) (aB C) (aties C) p (S k) Hp ltac:(lia))).
Qed.
