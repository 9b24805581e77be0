(** * Two heads that answer a list of recorded queries alike: the theorem an exported pair applies.

    Some hypotheses' counterexamples (Theorem 4.1 with a query left out or a design column
    orthogonal to v, Theorem 5.1 without the rank test) are two heads with the same v that
    agree exactly on every query a learner recorded, not on every sequence. The queries
    are sequences of one token [x] or two tokens [a; b] with rational entries.
    [queries_agree] says, for every d: if v1 = v2 below d and, for each two-token query,
    (a - b)^T W1 b = (a - b)^T W2 b or (a - b)^T v1 = 0 (finite checks over Q), then the two
    heads give the same answer to each query. The answer to [x] is x^T v; the answer to
    [a; b] is b^T v + sigmoid((a - b)^T W b) (a - b)^T v ([Softmax.probe_identity]). *)

From Coq Require Import Reals QArith Qreals Lra List Bool FunctionalExtensionality.
From VerifiedAttn Require Import Defs Softmax Thm41 CertHead CertLowRank.
Import ListNotations.
Open Scope R_scope.

(** A recorded query: one token, or two tokens (the last is the query token). *)
Inductive qseq := one (x : qvec) | two (a b : qvec).

Definition qsub (a b : qvec) : qvec := fun i => (a i - b i)%Q.

Definition seq_len (s : qseq) : nat := match s with one _ => 1%nat | two _ _ => 2%nat end.

Definition seq_tokens (s : qseq) : tokens :=
  match s with one x => seq1 (rvec x) | two a b => seq2 (rvec a) (rvec b) end.

(** The head's answer to the query. *)
Definition answer (d : nat) (s : qseq) (W : mat) (v : vec) : R :=
  attention d (seq_len s) (seq_tokens s) W v.

Definition same_answer (d : nat) (W1 : qmat) (v1 : qvec) (W2 : qmat) (s : qseq) : bool :=
  match s with
  | one _ => true
  | two a b =>
      Qeq_bool (qmeasure d W1 (qsub a b) b) (qmeasure d W2 (qsub a b) b) ||
      Qeq_bool (qsumr d (fun i => qsub a b i * v1 i)%Q) 0
  end.

Lemma answer_two : forall d a b W v,
  answer d (two a b) W v =
  dot d (rvec b) v + sigmoid (1 * measure d W (rvec (qsub a b)) (rvec b)) * (1 * dot d (rvec (qsub a b)) v).
Proof.
  intros. unfold answer, seq_len, seq_tokens, measure.
  replace (seq2 (rvec a) (rvec b)) with (seq2 (vadd (rvec b) (vscale 1 (rvec (qsub a b)))) (rvec b)).
  - apply probe_identity_bias_free.
  - apply functional_extensionality. intros [|t]; [|reflexivity]. simpl.
    apply functional_extensionality. intros i. unfold vadd, vscale, rvec, qsub.
    rewrite Q2R_minus. ring.
Qed.

Theorem queries_agree : forall d (W1 W2 : qmat) (v1 v2 : qvec) qs,
  all_lt d (fun i => Qeq_bool (v1 i) (v2 i)) = true ->
  forallb (same_answer d W1 v1 W2) qs = true ->
  Forall (fun s => answer d s (rmat W1) (rvec v1) = answer d s (rmat W2) (rvec v2)) qs.
Proof.
  intros d W1 W2 v1 v2 qs Hv Hq. apply Forall_forall. intros s Hs.
  rewrite forallb_forall in Hq. specialize (Hq s Hs).
  assert (Ev : forall x, dot d x (rvec v1) = dot d x (rvec v2)).
  { intros x. apply dot_ext; [reflexivity|]. intros i Hi. apply qeq_spec, (all_lt_spec _ _ Hv i Hi). }
  destruct s as [x|a b].
  - unfold answer, seq_len, seq_tokens. rewrite !attention_length1_bias_free. apply Ev.
  - rewrite !answer_two, <- !Ev. simpl in Hq. apply orb_true_iff in Hq as [Hm|Hz].
    + apply qeq_spec in Hm. rewrite !Q2R_qmeasure in Hm. rewrite Hm. reflexivity.
    + apply qeq_spec in Hz. rewrite Q2R_qsumr in Hz.
      assert (Z : dot d (rvec (qsub a b)) (rvec v1) = 0).
      { unfold dot. rewrite <- (Q2R_0). rewrite <- Hz. apply sum_ext. intros. unfold rvec.
        rewrite Q2R_mult. reflexivity. }
      rewrite Z. ring.
Qed.
