(** * Exact single-head certificates: the general theorems an exported exact run instantiates.

    An exact run of the single-head learner records, for every query it asked, the oracle's
    exact answer: a rational, or a closed form built from rationals and exp of rationals
    (the softmax of rational scores). An exported file transcribes those answers into
    Coq's reals and proves (i) that the certified rational head gives exactly those answers
    (the per-query lemmas below turn the head's answer into a + s / (1 + exp nl) with a, s,
    nl rationals checked by computation over Q; the file then rewrites every exp of the
    answer as a power of one exp and closes the identity with [field]), and (ii) with
    Theorem 4.1 in its affine form ([Thm41Affine.thm41_affine_identifiable], proved for
    every d and every invertible design U), that every head giving those answers is the
    certified one: [exact_plain_identified] (c = 0, beta = 0; the d^2 + d queries [e_i] and
    [e_j + t_kj u_k; e_j]) and [exact_affine_identified] (the d^2 + 2d + 1 queries [0],
    [e_i], [tc_k u_k; 0] and [e_j + t_kj u_k; e_j]). No denominator bound is assumed: the
    answers are exact. *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith Bool.
From VerifiedAttn Require Import Defs Softmax CertHead CertAffine Thm41Affine.
Open Scope R_scope.

(** ** exp of rational multiples: every exp of an answer as a power of one exp. *)

Lemma exp_nat_mul : forall n x, exp (INR n * x) = exp x ^ n.
Proof.
  induction n as [|n IH]; intros x.
  - simpl. rewrite Rmult_0_l, exp_0. reflexivity.
  - rewrite S_INR, Rmult_plus_distr_r, Rmult_1_l, exp_plus, IH. simpl. ring.
Qed.

Lemma exp_q_pow : forall r g n, Qeq_bool r (inject_Z (Z.of_nat n) * g) = true ->
  exp (Q2R r) = exp (Q2R g) ^ n.
Proof.
  intros r g n H. apply qeq_spec in H. rewrite H, Q2R_mult, Q2R_inject_Z, <- INR_IZR_INZ.
  apply exp_nat_mul.
Qed.

Lemma exp_q_inv_pow : forall r g n, Qeq_bool r (- (inject_Z (Z.of_nat n) * g)) = true ->
  exp (Q2R r) = / exp (Q2R g) ^ n.
Proof.
  intros r g n H. apply qeq_spec in H.
  rewrite H, Q2R_opp, Q2R_mult, Q2R_inject_Z, <- INR_IZR_INZ, exp_Ropp, exp_nat_mul.
  reflexivity.
Qed.

(** ** The recorded design and the certified head of an exact run. *)

Record exact_run := {
  xd : nat;
  xU : qmat; xUinv : qmat;  (** the design U = [u_0 .. u_{d-1}] and an inverse *)
  xt : qmat;                (** the scale t_kj of the probe [e_j + t_kj u_k; e_j] *)
  xtc : qvec;               (** the scale tc_k of the affine probe [tc_k u_k; 0] *)
  xW : qmat; xc : qvec; xv : qvec; xbeta : Q  (** the certified head (c = 0, beta = 0: plain) *)
}.

Definition xcol (C : exact_run) (k : nat) : vec := col (rmat (xU C)) k.
Definition xquery_c (C : exact_run) (k : nat) : tokens :=
  seq2 (vscale (Q2R (xtc C k)) (xcol C k)) zero_vec.
Definition xquery_w (C : exact_run) (k j : nat) : tokens :=
  seq2 (vadd (unit_vec j) (vscale (Q2R (xt C k j)) (xcol C k))) (unit_vec j).

(** A plain head (W, v) gives exactly the recorded answers rv i to [e_i] and rw k j to
    [e_j + t_kj u_k; e_j]. *)
Definition plain_answers (C : exact_run) (rv : nat -> R) (rw : nat -> nat -> R)
    (W : mat) (v : vec) : Prop :=
  (forall i, (i < xd C)%nat -> attention (xd C) 1 (query_v i) W v = rv i) /\
  (forall k j, (k < xd C)%nat -> (j < xd C)%nat ->
     attention (xd C) 2 (xquery_w C k j) W v = rw k j).

(** An affine head gives exactly the recorded answers rb to [0], rv i to [e_i], rc k to
    [tc_k u_k; 0] and rw k j to [e_j + t_kj u_k; e_j]. *)
Definition affine_answers (C : exact_run) (rb : R) (rv rc : nat -> R) (rw : nat -> nat -> R)
    (W : mat) (c v : vec) (beta : R) : Prop :=
  let f N X := attention_affine (xd C) N X W c v beta in
  f 1%nat query_beta = rb /\
  (forall i, (i < xd C)%nat -> f 1%nat (query_v i) = rv i) /\
  (forall k, (k < xd C)%nat -> f 2%nat (xquery_c C k) = rc k) /\
  (forall k j, (k < xd C)%nat -> (j < xd C)%nat -> f 2%nat (xquery_w C k j) = rw k j).

(** ** The checks over Q: U has the inverse, the scales and every u_k^T v are nonzero. *)

Definition qdotc (C : exact_run) (k : nat) (x : qvec) : Q :=
  qsum (xd C) (fun i => xU C i k * x i)%Q.
Definition qcolw (C : exact_run) (k j : nat) : Q :=
  qsum (xd C) (fun l => xU C l k * xW C l j)%Q.
Definition qnz (q : Q) : bool := negb (Qeq_bool q 0).

Definition check_exact (C : exact_run) (affine : bool) : bool :=
  check_inverse (xd C) (xU C) (xUinv C) &&
  all_lt (xd C) (fun k => qnz (qdotc C k (xv C)) && (negb affine || qnz (xtc C k))) &&
  all_lt (xd C) (fun k => all_lt (xd C) (fun j => qnz (xt C k j))).

Lemma qnz_spec : forall q, qnz q = true -> Q2R q <> 0.
Proof.
  intros q H E. replace 0 with (Q2R 0) in E by (unfold Q2R; simpl; ring).
  apply eqR_Qeq, Qeq_bool_iff in E. unfold qnz in H. rewrite E in H. discriminate.
Qed.

Lemma xdot : forall C k (x : qvec), dot (xd C) (xcol C k) (rvec x) = Q2R (qdotc C k x).
Proof.
  intros. unfold qdotc. rewrite Q2R_qsum. unfold dot, xcol, col, rmat, rvec. apply sum_ext.
  intros. rewrite Q2R_mult. reflexivity.
Qed.

Lemma xcolw : forall C k j, (j < xd C)%nat ->
  dot (xd C) (xcol C k) (mat_vec (xd C) (rmat (xW C)) (unit_vec j)) = Q2R (qcolw C k j).
Proof.
  intros C k j Hj. unfold qcolw. rewrite Q2R_qsum. unfold dot, xcol, col, rmat. apply sum_ext.
  intros l Hl. rewrite mat_vec_unit by exact Hj. unfold rmat. rewrite Q2R_mult. reflexivity.
Qed.

Lemma split_exact : forall C affine, check_exact C affine = true ->
  (forall l i, (l < xd C)%nat -> (i < xd C)%nat ->
     mat_mul (xd C) (rmat (xU C)) (rmat (xUinv C)) l i = identity l i) /\
  (forall k, (k < xd C)%nat ->
     dot (xd C) (col (rmat (xU C)) k) (rvec (xv C)) <> 0 /\
     (affine = true -> Q2R (xtc C k) <> 0)) /\
  (forall k j, (k < xd C)%nat -> (j < xd C)%nat -> Q2R (xt C k j) <> 0).
Proof.
  intros C affine H. unfold check_exact in H. rewrite !andb_true_iff in H.
  destruct H as [[H1 H2] H3]. split; [exact (check_inverse_spec _ _ _ H1)|split].
  - intros k Hk. pose proof (all_lt_spec _ _ H2 k Hk) as E. apply andb_true_iff in E as [E1 E2].
    split; [fold (xcol C k); rewrite xdot; exact (qnz_spec _ E1)|].
    intros ->. apply qnz_spec. exact E2.
  - intros k j Hk Hj. exact (qnz_spec _ (all_lt_spec _ _ (all_lt_spec _ _ H3 k Hk) j Hj)).
Qed.

(** ** (ii) Identification: Theorem 4.1 applied to the run. *)

Theorem exact_affine_identified : forall C rb rv rc rw,
  check_exact C true = true ->
  affine_answers C rb rv rc rw (rmat (xW C)) (rvec (xc C)) (rvec (xv C)) (Q2R (xbeta C)) ->
  forall (W' : mat) (c' v' : vec) (beta' : R),
    affine_answers C rb rv rc rw W' c' v' beta' ->
    same_affine (xd C) (rmat (xW C)) (rvec (xc C)) (rvec (xv C)) (Q2R (xbeta C)) W' c' v' beta'.
Proof.
  intros C rb rv rc rw H [A0 [Av [Ac Aw]]] W' c' v' beta' [B0 [Bv [Bc Bw]]].
  destruct (split_exact C true H) as [Hinv [Hk Ht]].
  destruct (thm41_affine_identifiable (xd C) (rmat (xU C)) (rmat (xUinv C)) (rmat (xt C))
              (rvec (xtc C)) (rmat (xW C)) W' (rvec (xc C)) c' (rvec (xv C)) v'
              (Q2R (xbeta C)) beta') as [Eb [Evc Ew]].
  - exact Hinv.
  - intros k Hk0. destruct (Hk k Hk0) as [N1 N2]. split; [exact (N2 eq_refl)|exact N1].
  - exact Ht.
  - split; [|split; [|split]].
    + exact (eq_trans A0 (eq_sym B0)).
    + intros i Hi. exact (eq_trans (Av i Hi) (eq_sym (Bv i Hi))).
    + intros k Hk0. exact (eq_trans (Ac k Hk0) (eq_sym (Bc k Hk0))).
    + intros k j Hk0 Hj. exact (eq_trans (Aw k j Hk0 Hj) (eq_sym (Bw k j Hk0 Hj))).
  - split; [split|split].
    + intros i j Hi Hj. symmetry. exact (Ew i j Hi Hj).
    + intros i Hi. symmetry. exact (proj1 (Evc i Hi)).
    + intros i Hi. symmetry. exact (proj2 (Evc i Hi)).
    + symmetry. exact Eb.
Qed.

(** The plain head is the affine one with c = 0 and beta = 0; its answers to [0] and
    [tc u_k; 0] are then 0 and sigmoid 0 * u_k^T v, the same for two heads with the same v. *)
Theorem exact_plain_identified : forall C rv rw,
  check_exact C false = true ->
  plain_answers C rv rw (rmat (xW C)) (rvec (xv C)) ->
  forall (W' : mat) (v' : vec), plain_answers C rv rw W' v' ->
    same_head (xd C) (rmat (xW C)) (rvec (xv C)) W' v'.
Proof.
  intros C rv rw H [Av Aw] W' v' [Bv Bw].
  destruct (split_exact C false H) as [Hinv [Hk Ht]].
  assert (Ev : forall i, (i < xd C)%nat -> v' i = rvec (xv C) i).
  { intros i Hi. pose proof (Av i Hi) as A. pose proof (Bv i Hi) as B.
    unfold attention in A, B. rewrite answer_v in A, B by exact Hi. lra. }
  destruct (thm41_affine_identifiable (xd C) (rmat (xU C)) (rmat (xUinv C)) (rmat (xt C))
              (fun _ => 1) (rmat (xW C)) W' zero_vec zero_vec (rvec (xv C)) v' 0 0)
    as [_ [_ Ew]].
  - exact Hinv.
  - intros k Hk0. split; [lra|exact (proj1 (Hk k Hk0))].
  - exact Ht.
  - split; [cbv zeta; rewrite !attention_length1, !dot_zero_l; reflexivity|split; [|split]].
    + intros i Hi. exact (eq_trans (Av i Hi) (eq_sym (Bv i Hi))).
    + intros k Hk0. cbv zeta. rewrite !answer_c_probe.
      rewrite (dot_ext (xd C) (col (rmat (xU C)) k) (col (rmat (xU C)) k) v' (rvec (xv C))
                 (fun i _ => eq_refl) Ev).
      reflexivity.
    + intros k j Hk0 Hj. exact (eq_trans (Aw k j Hk0 Hj) (eq_sym (Bw k j Hk0 Hj))).
  - split; [intros i j Hi Hj; symmetry; exact (Ew i j Hi Hj)|exact Ev].
Qed.

(** ** (i) The certified head's answers in closed form, with rationals checked over Q. *)

Lemma exact_length1 : forall C i a, (i < xd C)%nat ->
  Qeq_bool (xv C i + xbeta C) a = true ->
  attention_affine (xd C) 1 (query_v i) (rmat (xW C)) (rvec (xc C)) (rvec (xv C)) (Q2R (xbeta C))
  = Q2R a.
Proof.
  intros C i a Hi E. rewrite answer_v by exact Hi. apply qeq_spec in E.
  rewrite <- E, Q2R_plus. reflexivity.
Qed.

Lemma exact_beta : forall C a, Qeq_bool (xbeta C) a = true ->
  attention_affine (xd C) 1 query_beta (rmat (xW C)) (rvec (xc C)) (rvec (xv C)) (Q2R (xbeta C))
  = Q2R a.
Proof. intros C a E. rewrite answer_beta. apply qeq_spec, E. Qed.

Lemma exact_c : forall C k a s nl,
  Qeq_bool (xbeta C) a && Qeq_bool (xtc C k * qdotc C k (xv C)) s &&
  Qeq_bool (- (xtc C k * qdotc C k (xc C))) nl = true ->
  attention_affine (xd C) 2 (xquery_c C k) (rmat (xW C)) (rvec (xc C)) (rvec (xv C))
    (Q2R (xbeta C)) = Q2R a + Q2R s * / (1 + exp (Q2R nl)).
Proof.
  intros C k a s nl E. rewrite !andb_true_iff in E. destruct E as [[E1 E2] E3].
  apply qeq_spec in E1. apply qeq_spec in E2. apply qeq_spec in E3.
  rewrite Q2R_mult in E2. rewrite Q2R_opp, Q2R_mult in E3.
  unfold xquery_c, xcol. rewrite answer_c_probe. fold (xcol C k). rewrite !xdot.
  rewrite <- E1, <- E2, <- E3. unfold sigmoid. ring.
Qed.

Lemma exact_w : forall C k j a s nl, (j < xd C)%nat ->
  Qeq_bool (xv C j + xbeta C) a && Qeq_bool (xt C k j * qdotc C k (xv C)) s &&
  Qeq_bool (- (xt C k j * (qcolw C k j + qdotc C k (xc C)))) nl = true ->
  attention_affine (xd C) 2 (xquery_w C k j) (rmat (xW C)) (rvec (xc C)) (rvec (xv C))
    (Q2R (xbeta C)) = Q2R a + Q2R s * / (1 + exp (Q2R nl)).
Proof.
  intros C k j a s nl Hj E. rewrite !andb_true_iff in E. destruct E as [[E1 E2] E3].
  apply qeq_spec in E1. apply qeq_spec in E2. apply qeq_spec in E3.
  rewrite Q2R_plus in E1. rewrite Q2R_mult in E2. rewrite Q2R_opp, Q2R_mult, Q2R_plus in E3.
  unfold xquery_w. rewrite probe_identity, dot_vadd_r, dot_unit_l by exact Hj.
  rewrite !xdot, xcolw by exact Hj.
  rewrite <- E1, <- E2, <- E3. unfold sigmoid, rvec. ring.
Qed.

(** The plain head's answers ([attention]: c = 0, beta = 0). *)
Lemma plain_length1 : forall C i a, (i < xd C)%nat -> Qeq_bool (xv C i) a = true ->
  attention (xd C) 1 (query_v i) (rmat (xW C)) (rvec (xv C)) = Q2R a.
Proof.
  intros C i a Hi E. unfold attention. rewrite answer_v by exact Hi. apply qeq_spec in E.
  unfold rvec. rewrite E. ring.
Qed.

Lemma plain_w : forall C k j a s nl, (j < xd C)%nat ->
  Qeq_bool (xv C j) a && Qeq_bool (xt C k j * qdotc C k (xv C)) s &&
  Qeq_bool (- (xt C k j * qcolw C k j)) nl = true ->
  attention (xd C) 2 (xquery_w C k j) (rmat (xW C)) (rvec (xv C))
    = Q2R a + Q2R s * / (1 + exp (Q2R nl)).
Proof.
  intros C k j a s nl Hj E. rewrite !andb_true_iff in E. destruct E as [[E1 E2] E3].
  apply qeq_spec in E1. apply qeq_spec in E2. apply qeq_spec in E3.
  rewrite Q2R_mult in E2. rewrite Q2R_opp, Q2R_mult in E3.
  unfold attention, xquery_w. rewrite probe_identity, dot_vadd_r, dot_unit_l by exact Hj.
  rewrite dot_zero_r, !xdot, xcolw by exact Hj.
  rewrite <- E2, <- E3. unfold sigmoid, rvec. rewrite E1, Rplus_0_r, Rplus_0_r. ring.
Qed.

(** ** The tactic that closes one answer's identity in an exported file.

    After the per-query lemma and the rewrites of every exp (Q2R r) as a power of
    X = exp (Q2R g), the goal is an identity of rational functions of X > 0 with
    rational coefficients: [field], then its side conditions (denominators that are sums
    of positive terms) by positivity. *)
Ltac exact_pos :=
  repeat first [ assumption | apply Rplus_lt_0_compat | apply Rmult_lt_0_compat
               | apply Rinv_0_lt_compat | apply pow_lt | lra ].

Ltac exact_close g :=
  let X := fresh "X" in let HX := fresh "HX" in
  set (X := exp (Q2R g)); assert (HX : 0 < X) by apply exp_pos; clearbody X;
  unfold Q2R; cbn [Qnum Qden];
  field; repeat split; try (apply Rgt_not_eq, Rlt_gt; exact_pos).
