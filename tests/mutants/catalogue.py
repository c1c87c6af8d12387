"""Hand-written semantic mutants of models/: plausible bugs of the mathematics, kept as data.

Each entry replaces one exact source snippet (``old``, which must occur exactly once in
``file``) by ``new``. ``tests/mutants/run.py`` applies one mutant at a time to a throwaway
copy of the committed tree and runs the claims gate and the unit tests against it;
``tests/mutants/test_catalogue.py`` keeps the snippets in step with the code.

The snippets are exact source lines, some longer than the line limit (hence the noqa).

Fields: id, file (relative to the repository root), old, new, category, fault (one sentence
on the mathematical fault the mutant injects).
"""

# ruff: noqa: E501

from __future__ import annotations

#: Every module of models/ that must carry at least one mutant (device.py is optional).
MODULES = (
    "problems/attention.py",
    "problems/losses.py",
    "numerics/logspace.py",
    "oracles/svm.py",
    "oracles/selection.py",
    "flows/dynamics.py",
    "flows/regpath.py",
    "flows/joint.py",
    "flows/wtrain.py",
    "problems/heads.py",
    "problems/embedding.py",
    "check/predict.py",
    "ntp/graph.py",
    "ntp/svm.py",
    "ntp/finite.py",
    "ntp/linear.py",
    "ntp/attention.py",
    "problems/cross.py",
    "check/cross_predict.py",
    "oracles/normsvm.py",
    "flows/kqpath.py",
    "flows/mirror_joint.py",
    "problems/nonlinear_head.py",
    "flows/kernels.py",
    "flows/batched.py",
    "flows/offset.py",
    "check/estimate.py",
    "flows/shared.py",
    "ntp/flow.py",
)

MUTANTS: list[dict[str, str]] = [
    # ---------------------------------------------------------------- losses.py
    {
        "id": "M01-losses-logistic-deriv-sign",
        "file": "models/problems/losses.py",
        "old": "        return -torch.sigmoid(-x)\n",
        "new": "        return -torch.sigmoid(x)\n",
        "category": "wrong derivative",
        "fault": "The logistic ℓ'(x) becomes −σ(x) instead of −σ(−x): the derivative of "
        "log(1 + e^{x}), i.e. of the loss of the opposite margin.",
    },
    {
        "id": "M02-losses-logistic-logderiv-hotpath",
        "file": "models/flows/kernels.py",
        "old": "        return -(max(x, 0.0) + math.log1p(math.exp(-abs(x)))), -1.0\n",
        "new": "        return -(max(-x, 0.0) + math.log1p(math.exp(-abs(x)))), -1.0\n",
        "category": "wrong derivative",
        "fault": "The numpy log(−ℓ'(x)) of the logistic loss used by the engine's hot path "
        "returns log σ(x) instead of log σ(−x), so inputs with large margins get the largest "
        "weight in ∇L (the per-input weights are inverted; n = 1 directions are unchanged).",
    },
    # ---------------------------------------------------------------- logspace.py
    {
        "id": "M03-logspace-combine-drops-sign",
        "file": "models/numerics/logspace.py",
        "old": "    weights = np.where(live, sign * np.exp(np.where(live, log_abs, top) - top), 0.0)\n",
        "new": "    weights = np.where(live, np.exp(np.where(live, log_abs, top) - top), 0.0)\n",
        "category": "dropped sign",
        "fault": "combine_np sums |w_j|·vec_j instead of sign_j·|w_j|·vec_j: every negative "
        "coefficient of a signed log-space sum (the joint v-gradient) is added as positive.",
    },
    # ---------------------------------------------------------------- attention.py
    {
        "id": "M04-attention-logsoftmax-unnormalised",
        "file": "models/flows/kernels.py",
        "old": "            log_s -= log_total\n",
        "new": "            log_s -= 0.0\n",
        "category": "dropped factor",
        "fault": "The log-space gradient uses the unnormalised e^{z_t} instead of the softmax "
        "s_t = e^{z_t}/Σe^{z}: each input's term of ∇L is scaled by 1/(Σ_u e^{z_u})², which "
        "leaves n = 1 directions exact but re-weights the inputs when n ≥ 2.",
    },
    {
        "id": "M05-attention-smoothness-factor",
        "file": "models/problems/attention.py",
        "old": "        return float(self.weighted_mean(k2 * (m1 * rng**2 / 4 + 3 * m0 * rng)))\n",
        "new": "        return float(self.weighted_mean(k2 * (m1 * rng**2 / 4 + m0 * rng)))\n",
        "category": "dropped factor",
        "fault": "The Lipschitz constant of ∇L drops the factor 3 of ‖∇²_z m‖ ≤ 3R, so the "
        "'rigorous' smoothness bound L_p can fall below the true curvature and η = 1/L_p "
        "steps are no longer guaranteed to descend.",
    },
    {
        "id": "M06-attention-loss-gap-first-order",
        "file": "models/problems/attention.py",
        "old": "                self.loss.log_neg_deriv(top) + log_delta,\n",
        "new": "                log_delta,\n",
        "category": "dropped factor",
        "fault": "In the first-order branch of log(L − L*) the factor −ℓ'(γ_iα) is dropped: the "
        "loss gap becomes (1/n)Σδ_i instead of (1/n)Σ −ℓ'(γ_iα)δ_i once δ < e^{-600}.",
    },
    # ---------------------------------------------------------------- svm.py
    {
        "id": "M07-svm-constraint-direction",
        "file": "models/oracles/svm.py",
        "old": "    constraint = A @ x >= b\n",
        "new": "    constraint = A @ x <= b\n",
        "category": "flipped inequality",
        "fault": "The QP handed to the solvers asks A x ≤ b instead of A x ≥ b (the "
        "max-margin constraints point the wrong way; its optimum is x = 0).",
    },
    {
        "id": "M08-svm-att-constraints-index-set",
        "file": "models/oracles/svm.py",
        "old": "    constrained = np.arange(T)[None, :] != alpha[:, None]\n",
        "new": "    constrained = np.arange(T)[None, :] > alpha[:, None]\n",
        "category": "off-by-one index set",
        "fault": "ATT-SVM(α) only constrains the tokens after α_i (t > α_i) instead of every "
        "t ≠ α_i, so tokens before the selected one may out-score it.",
    },
    {
        "id": "M09-svm-wmm-closed-form-factor",
        "file": "models/oracles/svm.py",
        "old": "    W, duals = np.outer(q.x, p) / pp, q.duals / pp\n",
        "new": "    W, duals = np.outer(q.x, p) / np.sqrt(pp), q.duals / np.sqrt(pp)\n",
        "category": "wrong constant",
        "fault": "The closed form W^mm = q^mm pᵀ/‖p‖² is computed with ‖p‖ instead of ‖p‖², "
        "which is the right direction but the wrong scale (its margins are ‖p‖, not 1).",
    },
    {
        "id": "M10-svm-certificate-loosened",
        "file": "models/oracles/svm.py",
        "old": "        return self.worst <= self.tol\n",
        "new": "        return self.worst <= 1e4 * self.tol\n",
        "category": "loosened tolerance",
        "fault": "The KKT certificate accepts residuals up to 1e-3 instead of 1e-7, so "
        "approximate solver points pass as certified optima.",
    },
    # ---------------------------------------------------------------- selection.py
    {
        "id": "M11-selection-ties-locally-optimal",
        "file": "models/oracles/selection.py",
        "old": "            if gap <= tie:\n",
        "new": "            if gap < -tie:\n",
        "category": "non-strict inequality",
        "fault": "Def. 2 asks support tokens to score strictly below α_i; the mutant only "
        "rejects support tokens that beat α_i, so a tie counts as locally optimal.",
    },
    # ---------------------------------------------------------------- dynamics.py
    {
        "id": "M12-dynamics-converge-no-persistence",
        "file": "models/flows/dynamics.py",
        "old": "        if norm >= persist * start:\n",
        "new": "        if norm >= start:\n",
        "category": "dropped factor",
        "fault": "The tracer declares directional convergence at the first aligned point "
        "instead of requiring the alignment to persist while ‖p‖ grows tenfold, so a path "
        "passing near an unstable ray counts as converged.",
    },
    {
        "id": "M13-dynamics-gd-normalised-step",
        "file": "models/flows/dynamics.py",
        "old": "        p = p + eta * math.exp(min(lgn, 700.0)) * u\n",
        "new": "        p = p + eta * u\n",
        "category": "wrong step size",
        "fault": "Plain GD moves by η·∇L/‖∇L‖ (a normalised step) instead of η·∇L, so the "
        "step no longer shrinks with the gradient and the descent lemma's η ≤ 1/L_p "
        "guarantee does not apply.",
    },
    {
        "id": "M14-dynamics-ngd-ascent",
        "file": "models/flows/dynamics.py",
        "old": "        p = p + lr * u\n",
        "new": "        p = p - lr * u\n",
        "category": "dropped sign",
        "fault": "Normalised GD steps along +∇L/‖∇L‖ (u is already −∇L/‖∇L‖): gradient "
        "ascent on the loss.",
    },
    {
        "id": "M15-dynamics-converge-threshold",
        "file": "models/flows/dynamics.py",
        # (the heading may also pass at the relaxed offset: models.flows.offset, issue 23)
        "old": "                if off_p <= target and (off_u <= target or (relax and",
        "new": "                if off_p <= 1e3 * target and (off_u <= target or (relax and",
        "category": "loosened tolerance",
        "fault": "The tracer's stopping test accepts 1 − cos(p, p^mm) ≤ 1e-3 instead of 1e-6, "
        "so it stops far from the max-margin direction (the final status still asks 1e-6).",
    },
    # ---------------------------------------------------------------- regpath.py
    {
        "id": "M16-regpath-rank-negative-gap",
        "file": "models/flows/regpath.py",
        "old": "    return torch.where(sign > 0, log_abs, torch.where(sign < 0, -BIG - log_abs, -BIG))\n",
        "new": "    return torch.where(sign > 0, log_abs, torch.where(sign < 0, -BIG + log_abs, -BIG))\n",
        "category": "dropped sign",
        "fault": "The order-preserving image of a negative loss gap G < 0 uses −BIG + log|G|, "
        "which increases with |G|: among points whose loss is below the floor of a local α, "
        "the search prefers the highest loss.",
    },
    {
        "id": "M17-regpath-tangent-hessian-sign",
        "file": "models/flows/regpath.py",
        "old": "    return proj @ (H - radial * eye) @ proj + u[:, :, None] * u[:, None, :]\n",
        "new": "    return proj @ (H + radial * eye) @ proj + u[:, :, None] * u[:, None, :]\n",
        "category": "wrong derivative",
        "fault": "The Riemannian Hessian on the sphere ‖p‖ = R adds the Weingarten term "
        "(∇f·p̂/R)I instead of subtracting it, so the curvature of f restricted to the sphere "
        "is wrong (Newton steps and the strict-minimum test use it).",
    },
    # ---------------------------------------------------------------- joint.py
    {
        "id": "M18-joint-relaxed-set-flipped",
        "file": "models/flows/joint.py",
        "old": "    p_relax = att_svm(problem.keys, alpha, relaxed_inputs=~support)\n",
        "new": "    p_relax = att_svm(problem.keys, alpha, relaxed_inputs=support)\n",
        "category": "off-by-one index set",
        "fault": "The relaxed ATT-SVM of Theorem J relaxes the support vectors of the v-SVM "
        "instead of the inputs outside its support (the complement set).",
    },
    {
        "id": "M19-joint-vgrad-drops-label",
        "file": "models/flows/joint.py",
        "old": "        sign_w = np.repeat(sign_lp * y, X.shape[1])\n",
        "new": "        sign_w = np.repeat(sign_lp, X.shape[1])\n",
        "category": "dropped sign",
        "fault": "∇_v L = (1/n)Σ ℓ'(m_i) y_i X_iᵀs_i loses the label y_i, so negative inputs "
        "push v the wrong way.",
    },
    # ---------------------------------------------------------------- wtrain.py
    {
        "id": "M20-wtrain-gradient-transposed",
        "file": "models/flows/wtrain.py",
        "old": "        return log_scale, np.outer(g, self._p_np)\n",
        "new": "        return log_scale, np.outer(self._p_np, g)\n",
        "category": "wrong derivative",
        "fault": "∂L/∂W is returned as p gᵀ instead of g pᵀ (the transpose of the rank-one "
        "gradient of x_itᵀ W p).",
    },
    {
        "id": "M21-wtrain-singular-ratio-index",
        "file": "models/flows/wtrain.py",
        "old": "    return float(s[1] / s[0]) if s.numel() > 1 and s[0] > 0 else 0.0\n",
        "new": "    return float(s[-1] / s[0]) if s.numel() > 1 and s[0] > 0 else 0.0\n",
        "category": "off-by-one index",
        "fault": "The rank-one test reads σ_min/σ₁ instead of σ₂/σ₁ (identical for d = 2; for "
        "d ≥ 3 a rank-two W would pass as rank one).",
    },
    # ---------------------------------------------------------------- heads.py
    # M22 (the softmax Jacobian's centring in the nonlinear head's closed-form gradient) is
    # retired: that gradient was removed from models/problems/heads.py, since no claim and no path used
    # it (the regularization paths descend through autograd; tests/test_heads.py checks that
    # gradient against central differences).
    {
        "id": "M23-heads-token-scores-drop-label",
        "file": "models/problems/heads.py",
        "old": "        return self.y[:, None] * self.psi_of(self.X)\n",
        "new": "        return self.psi_of(self.X)\n",
        "category": "dropped sign",
        "fault": "The one-hot scores Y_i ψ(x_it) lose the label, so for y_i = −1 the "
        "'ψ-optimal' token of Theorem NL is the worst one.",
    },
    # ---------------------------------------------------------------- embedding.py
    {
        "id": "M24-embedding-r3-target-factor",
        "file": "models/problems/embedding.py",
        "old": "    r3_target = eta0 / 2 * v2 * alpha\n",
        "new": "    r3_target = eta0 * v2 * alpha\n",
        "category": "dropped factor",
        "fault": "Lemma 4.1's prediction ⟨E¹_s, v⟩ ≈ (η0/2)α_s loses the factor 1/2 "
        "(the logistic ℓ'(0) = −1/2).",
    },
    {
        "id": "M25-embedding-alpha-frequency",
        "file": "models/problems/embedding.py",
        "old": "    return check_labels(y, n) @ counts / (n * T)\n",
        "new": "    return check_labels(y, n) @ counts / n\n",
        "category": "dropped factor",
        "fault": "The average signed frequency α_s = (1/n)Σ y_i n_s(X_i)/T loses the 1/T: "
        "raw counts instead of frequencies.",
    },
    {
        "id": "M26-embedding-gradE-p-term-sign",
        "file": "models/problems/embedding.py",
        "old": "        return -(along_v[:, None] * self.v[None, :] + along_p[:, None] * p[None, :])\n",
        "new": "        return -(along_v[:, None] * self.v[None, :] - along_p[:, None] * p[None, :])\n",
        "category": "dropped sign",
        "fault": "In ∇_{E_s}L ∝ σ[v + (u_s − f)p] the p-term enters with the wrong sign "
        "(invisible at p = 0, the theory's p⁰).",
    },
    # ---------------------------------------------------------------- predict.py
    {
        "id": "M27-predict-max-error-factor",
        # The paper-form error once had a copy in `check` (the fault was planted there, where no
        # claim reads it), then a method of its own beside R3's error (OneStep.paper_error, where
        # Lemma 4.1's loose constant 11 cannot tell η0α from η0α/2). For ‖v‖ = 1 it is R3's
        # left-hand side, so all now read r3_error, and the fault is planted in its target.
        "file": "models/problems/embedding.py",
        "old": "    r3_target = eta0 / 2 * v2 * alpha\n",
        "new": "    r3_target = eta0 * v2 * alpha\n",
        "category": "dropped factor",
        "fault": "The paper-form error |⟨E¹_s, v⟩ − (η0/2)α_s| (R3's left-hand side at ‖v‖ = 1, "
        "read by the claims and `check`) is computed against η0·α_s.",
    },
    {
        "id": "M28-predict-local-opt-of-global",
        "file": "models/check/predict.py",
        "old": "    local = local_optimality(problem.keys, scores, sel)\n",
        "new": "    local = local_optimality(problem.keys, scores, opt)\n",
        "category": "wrong index set",
        "fault": "`check` reports whether the global optimum is locally optimal instead of "
        "whether the selection gradient flow reached is.",
    },
    # ---------------------------------------------------------------- cross.py
    {
        "id": "M29-cross-kq-grad-Q-untransposed",
        "file": "models/problems/cross.py",
        "old": "        uQ = _factor_step(M, G.T @ K, Q, penalty)\n",
        "new": "        uQ = _factor_step(M, G @ K, Q, penalty)\n",
        "category": "wrong derivative",
        "fault": "The (K, Q) chain rule takes ∇_Q L(KQᵀ) = G K instead of Gᵀ K (the transpose "
        "of G = ∇L(W) is dropped; identical only when G is symmetric).",
    },
    {
        "id": "M30-cross-polyak-squared-gradient-norm",
        "file": "models/problems/cross.py",
        "old": "        length = math.exp(min(log_gap - (M + math.log(nG)), 700.0))\n",
        "new": "        length = math.exp(min(log_gap - 2.0 * (M + math.log(nG)), 700.0))\n",
        "category": "wrong power",
        "fault": "The Polyak step moves (L − L*)/‖∇L‖² along the UNIT direction ∇L/‖∇L‖ "
        "(i.e. (L − L*)/‖∇L‖³·∇L) instead of (L − L*)/‖∇L‖²·∇L: the step length has the "
        "gradient norm squared where it should be to the first power.",
    },
    # ---------------------------------------------------------------- cross_predict.py
    {
        "id": "M31-cross_predict-kq-settles-on-fro",
        "file": "models/check/cross_predict.py",
        "old": '    W, status, reason, steps, history = _settle(problem, advance, (K0, Q0), "nuc", svms)\n',
        "new": '    W, status, reason, steps, history = _settle(problem, advance, (K0, Q0), "fro", svms)\n',
        "category": "wrong norm",
        "fault": "The (K, Q) run is declared settled on its correlation with the Frobenius SVM "
        "instead of the nuclear SVM its implicit bias targets (the ‖K‖² + ‖Q‖² geometry is "
        "the nuclear norm's).",
    },
    # ---------------------------------------------------------------- normsvm.py
    {
        "id": "M32-normsvm-nuclear-objective-frobenius",
        "file": "models/oracles/normsvm.py",
        "old": "        return cp.normNuc(W)\n",
        "new": '        return cp.norm(cp.vec(W, order="C"), 2)\n',
        "category": "wrong norm",
        "fault": "The nuclear attention SVM minimises the Frobenius norm ‖W‖_F instead of the "
        "nuclear norm ‖W‖_⋆ (the two agree only where the optimum is rank one).",
    },
    {
        "id": "M33-normsvm-rank-absolute-threshold",
        "file": "models/oracles/normsvm.py",
        "old": "    return int(np.count_nonzero(sigma > rel * sigma[0]))\n",
        "new": "    return int(np.count_nonzero(sigma > rel))\n",
        "category": "wrong threshold",
        "fault": "The rank counts σ_k > 1e-6 (absolute) instead of σ_k > 1e-6·σ_1 (spec F12: "
        "never absolute), so it is not scale invariant: a tiny SVM reads rank 0, a huge "
        "iterate's rounding noise counts as rank.",
    },
    # ---------------------------------------------------------------- kqpath.py
    {
        "id": "M34-kqpath-factors-unbalanced",
        "file": "models/flows/kqpath.py",
        "old": "    return U * r, Vt.T * r\n",
        "new": "    return U * s, Vt.T\n",
        "category": "wrong factorisation",
        "fault": "The 'balanced' factors K = UΣ, Q = V still multiply to W but put all of Σ in "
        "K, so ½(‖K‖² + ‖Q‖²) = ½(Σσ_k² + rank) instead of the least energy ‖W‖_⋆.",
    },
    {
        "id": "M35-kqpath-diag-chain-rule-swapped",
        "file": "models/flows/kqpath.py",
        "old": "        gk, gq = g * q, g * k\n",
        "new": "        gk, gq = g * k, g * q\n",
        "category": "wrong derivative",
        "fault": "Diagonal (K, Q)-NGD takes ∇_k = ∇_w ⊙ k and ∇_q = ∇_w ⊙ q instead of "
        "∇_k = ∇_w ⊙ q and ∇_q = ∇_w ⊙ k (the chain rule of w = k ⊙ q with the factors swapped).",
    },
    # ---------------------------------------------------------------- mirror_joint.py
    {
        "id": "M36-mirror_joint-W-l2-potential",
        "file": "models/flows/mirror_joint.py",
        "old": "            W = primal_map(theta_W, p)\n",
        "new": "            W = theta_W\n",
        "category": "wrong potential",
        "fault": "Joint mirror descent maps W's dual variable back with the ℓ2 potential "
        "(W = θ_W) instead of ℓp's inverse map sign(θ)|θ|^{1/(p−1)}: W takes ℓ_{p*}-normalised "
        "gradient steps (the ℓ2 geometry) while v keeps the ℓp one.",
    },
    {
        "id": "M37-mirror_joint-v-svm-drops-label",
        "file": "models/flows/mirror_joint.py",
        "old": "    tokens[:, 0] = y[:, None] * X[np.arange(n), alpha]\n",
        "new": "    tokens[:, 0] = X[np.arange(n), alpha]\n",
        "category": "dropped sign",
        "fault": "The ℓp head SVM asks x_{iα_i}ᵀv ≥ 1 instead of Y_i x_{iα_i}ᵀv ≥ 1: the "
        "label is dropped, so negative inputs are asked to score positive.",
    },
    # ---------------------------------------------------------------- nonlinear_head.py
    {
        "id": "M38-nonlinear_head-lambda-grad-factor",
        "file": "models/problems/nonlinear_head.py",
        "old": "        return (u * V.unsqueeze(-2)).sum(-1) - lam * (u * u).sum(-1), V.unsqueeze(-2) - 2 * lam * u\n",
        "new": "        return (u * V.unsqueeze(-2)).sum(-1) - lam * (u * u).sum(-1), V.unsqueeze(-2) - lam * u\n",
        "category": "dropped factor",
        "fault": "The λ head's gradient ∇ψ(u) = v − 2λu loses the 2 of ∇‖u‖² = 2u, so the "
        "exact (log-space) W-gradient of the λ head is wrong whenever λ ≠ 0.",
    },
    # ---------------------------------------------------------------- kernels.py
    {
        "id": "M39-kernels-selection-runner-up",
        "file": "models/flows/kernels.py",
        "old": "        for t in range(T):\n            if logits[t] > second:\n",
        "new": "        for t in range(best + 1, T):\n            if logits[t] > second:\n",
        "category": "off-by-one index",
        "fault": "The selection kernel looks for the runner-up only among the tokens after the "
        "top one, so the lead of the top logit over the runner-up is overestimated (+∞ when "
        "the top token is the last) and the flow tracer declares a selection saturated before "
        "it is. (Redefined 2026-12-04: the kernel now finds the runner-up in a second pass "
        "that skips the top token's twins; the old snippet, the top logit not demoted to "
        "runner-up in a one-pass scan, is gone.)",
    },
    # ---------------------------------------------------------------- nonlinear_head.py (W_dir)
    {
        "id": "M40-nonlinear_head-dir-margin-sign",
        "file": "models/problems/nonlinear_head.py",
        "old": "                rows.append(-diff)\n",
        "new": "                rows.append(diff)\n",
        "category": "dropped sign",
        "fault": "W_dir's margin row for a selected token τ₂ against an earlier non-selected "
        "t₁ reads (k_{it₁} − k_{iτ₂})·w ≥ 1 instead of (k_{iτ₂} − k_{it₁})·w ≥ 1: the "
        "non-selected token is asked to beat the selected one.",
    },
    # ---------------------------------------------------------------- ntp/ (issue 25)
    {
        "id": "M41-ntp-graph-edge-reversed",
        "file": "models/ntp/graph.py",
        "old": "        triples.update((seq[-1], y, j) for j in set(seq) if j != y)\n",
        "new": "        triples.update((seq[-1], j, y) for j in set(seq) if j != y)\n",
        "category": "flipped edge",
        "fault": "The priority graph's edges point from every other token to the label instead "
        "of from the label to them (y → j): every SCC is the same, the priorities and so the "
        "graph-SVM's margin rows are reversed.",
    },
    {
        "id": "M42-ntp-svm-equality-as-margin",
        "file": "models/ntp/svm.py",
        "old": "        (equal if graphs[k].same_component(y, j) else margin).append(triple)\n",
        "new": "        margin.append(triple)\n",
        "category": "dropped constraint kind",
        "fault": "Every (query, label, token) row of the graph-SVM is a margin row, also inside "
        "an SCC: the single-token SVM of control C3, infeasible whenever a cycle exists.",
    },
    {
        "id": "M43-ntp-finite-reduced-normaliser",
        "file": "models/ntp/finite.py",
        "old": "    return NTPAttention(data.embeddings, sample_table(seqs, labels, queries), float(data.n))\n",
        "new": "    return NTPAttention(data.embeddings, sample_table(seqs, labels, queries), 1.0)\n",
        "category": "dropped factor",
        "fault": "The reduced loss is not divided by n: W_fin is unchanged (a scaled loss has "
        "the same minimiser) but the loss floor L* is n times too large.",
    },
    {
        "id": "M44-ntp-linear-log-odds-reversed",
        "file": "models/ntp/linear.py",
        "old": "                targets.append(math.log(self.P[j, z] / self.P[j, a]))\n",
        "new": "                targets.append(math.log(self.P[j, a] / self.P[j, z]))\n",
        "category": "flipped sign",
        "fault": "The log-odds equations of Def. 1 ask log(p̂_ja/p̂_jz) of the logit gap "
        "(e_z − e_a)ᵀWh̄_j: W* fits the inverted odds.",
    },
    {
        "id": "M45-ntp-attention-label-coefficient-sign",
        "file": "models/ntp/attention.py",
        "old": "        sign[rows, t.label_slot] = np.where(np.isfinite(p.off), -1.0, 0.0)\n",
        "new": "        sign[rows, t.label_slot] = np.where(np.isfinite(p.off), 1.0, 0.0)\n",
        "category": "dropped sign",
        "fault": "The label's coefficient in the NTP gradient, −(mass off the label), loses its "
        "sign: GD pushes attention away from the label.",
    },
    # ---------------------------------------------------------------- offset.py
    {
        "id": "M46-offset-margin-residual-sign",
        "file": "models/flows/offset.py",
        "old": "    logw = np.log(weights[support]) - lam * (D @ u - 1.0 / norm)\n",
        "new": "    logw = np.log(weights[support]) + lam * (D @ u - 1.0 / norm)\n",
        "category": "wrong sign",
        "fault": "A support token whose margin exceeds 1 by ε pulls the offset e^{+λε} harder "
        "instead of e^{−λε} weaker: far out (λε ≳ 1) the equilibrium ρ*, and the heading "
        "the engine certifies there, balance the wrong forces.",
    },
    # ---------------------------------------------------------------- estimate.py
    {
        "id": "M47-estimate-no-jacobians",
        "file": "models/check/estimate.py",
        "old": "    evals = int(math.ceil(CONFIRMATION * (BASE_EVALS + JACOBIANS * (rank + 1))))\n",
        "new": "    evals = int(math.ceil(CONFIRMATION * BASE_EVALS))\n",
        "category": "dropped term",
        "fault": "check's time estimate leaves out the Jacobians, r + 1 field evaluations "
        "each: at d = 1024 it says ~6,000 evaluations where a decision takes ~150,000, and "
        "a user is told seconds for a run of minutes.",
    },
    {
        "id": "M48-grid-drop-unshifted",
        "file": "models/flows/kernels.py",
        "old": "            pos += math.exp(z[t] - pos_max) * drow[t]\n",
        "new": "            pos += math.exp(z[t] - z_max) * drow[t]\n",
        "category": "lost precision",
        "fault": "the grid's margin drop sums its positive part relative to the top logit "
        "instead of its own largest: where the selected token dominates (the regime the "
        "regularization path is about), every term underflows and the grid reads L − L_α "
        "as the wrong sign or −inf, so a sector or circle search picks a wrong witness. "
        "(Since 2026-12-05 the margin drop is one helper, ``drop_from_logits``, that the "
        "descents' closed-form log gap and the heads' grids share: the mutant reaches them "
        "too.)",
    },
    {
        "id": "M49-twin-group-tie-on-own-score",
        "file": "models/flows/dynamics.py",
        "old": "        tied[i] = [Fraction(g) == mean for g in scores[i].tolist()]\n",
        "new": "        tied[i] = scores[i] == scores[i, sel[i]]\n",
        "category": "wrong reference",
        "fault": "a twin group's tie test compares with the selected token's own score, not "
        "the group's mean: a token tied with that one member is taken to share the group's "
        "mass, its row is freed, and a flow that converges is left undecided (every row "
        "freed, SVM solution 0) or certified to the wrong SVM.",
    },
    {
        "id": "M50-linear-field-deviation-sign",
        "file": "models/flows/kernels.py",
        "old": "            dsum += ex[b + t] * (gam[i, t] - gam_r)\n",
        "new": "            dsum += ex[b + t] * (gam[i, t] + gam_r)\n",
        "category": "sign error",
        "fault": "the linear-space field sums D_i = Σ_t s_t(γ_t + γ_r) instead of (γ_t − γ_r): "
        "every input's margin and every token's γ_t − m_i are off by 2γ_r·(1 − s_r), so the "
        "flow the engine traces is not gradient flow wherever the linear form answers.",
    },
    {
        "id": "M51-jacobian-cross-term-sign",
        "file": "models/flows/kernels.py",
        "old": "                jac[k, j] += f1 * a[k] * a[j] - f3 * (a[k] * xbar[j] + xbar[k] * a[j])\n",
        "new": "                jac[k, j] += f1 * a[k] * a[j] + f3 * (a[k] * xbar[j] + xbar[k] * a[j])\n",
        "category": "sign error",
        "fault": "the closed-form Jacobian adds the −a x̄ᵀ − x̄ aᵀ part of ∇²m_i with the wrong "
        "sign: only the stiff integrator's Newton iterations read it, so steps are rejected or "
        "cost more; the accepted steps' error control is unchanged (expected to survive the "
        "gate: a slower engine, not a wrong verdict).",
    },
    {
        "id": "M52-batched-deviation-relative-to-top",
        "file": "models/flows/batched.py",
        "old": "    ref = torch.where(other, z, NEG_INF).amax(-1, keepdim=True)  # −inf: no such token\n",
        "new": "    ref = torch.where(live, z, NEG_INF).amax(-1, keepdim=True)  # −inf: no such token\n",
        "category": "lost precision",
        "fault": "the batched field sums D_i = Σ_u s_iu(γ_iu − γ_ir) relative to the top logit "
        "instead of the largest among its own tokens: once the softmax is saturated (every "
        "other token e^{−745} below the top) D_i underflows to 0, a token tied in score with "
        "the top one loses its weight s_t·(−D_i), and the batched transient steers differently "
        "from the CPU engine.",
    },
    {
        "id": "M53-line-trap-lower-end-unchecked",
        "file": "models/flows/limits.py",
        "old": "        if below is None or below[0] != -1:\n",
        "new": "        if below is None:\n",
        "category": "missing check",
        "fault": "the one-dimensional trap certificate checks the slope's sign at the upper end "
        "only: a flow that keeps moving one way (dL/dz > 0 on both sides of where a run stopped) "
        "is declared bounded, which would refute a divergence claim on a machinery stop.",
    },
    {
        "id": "M54-farkas-vector-unclipped",
        "file": "models/oracles/normsvm.py",
        "old": "    y = np.clip(lp.x, 0.0, None)\n",
        "new": "    y = lp.x\n",
        "category": "missing check",
        "fault": "the W-SVM's Farkas vector is returned as HiGHS gives it, with entries kept "
        "to its bound tolerance only (−1.1e-14 seen): a caller reading y ≥ 0 exactly sees a "
        "certificate that fails by rounding (TF-FEAS-NEC-MEDIUM's draw at n = 21, T = 4).",
    },
    # ---------------------------------------------------------------- shared.py
    {
        "id": "M55-shared-pinned-set-score-of-top-token",
        "file": "models/flows/shared.py",
        "old": "        new_scores[i, members] = float(w @ scores[i, members]) / total\n",
        "new": "        new_scores[i, members] = scores[i, tops[i]]\n",
        "category": "wrong reference",
        "fault": "the pinned problem gives each set the score of its top-logit member instead "
        "of the members' scores weighted by their split at q*: the outside tokens' weights "
        "ℓ'(m_i)·s_it·(γ̄_i − γ_it) in the D⊥ flow are wrong (zero where the top member shares "
        "the outside tokens' score, an NTP set whose top member is not the label).",
    },
    {
        "id": "M56-shared-reduced-loss-unmasked",
        "file": "models/flows/shared.py",
        "old": "        logits = torch.where(mask, keys @ q, neg_inf)\n",
        "new": "        logits = keys @ q\n",
        "category": "missing restriction",
        "fault": "the reduced loss L_S takes the softmax over every token, not over each input's "
        "set: q* minimises the full loss on D at the origin of D⊥ instead of the loss the flow "
        "tends to on the sets, so the finite part (and the shares) are wrong.",
    },
    {
        "id": "M57-shared-equality-svm-margin-rows-reversed",
        "file": "models/flows/shared.py",
        "old": "            rows_in.append(keys[i, r] - keys[i, t])\n",
        "new": "            rows_in.append(keys[i, t] - keys[i, r])\n",
        "category": "flipped sign",
        "fault": "the equality SVM's margin rows ask each outside token to lead the set by 1 "
        "instead of trailing it: p_dir is the SVM of the opposite selection (or infeasible), "
        "not the direction the flow takes.",
    },
    # ---------------------------------------------------------------- ntp/flow.py
    {
        "id": "M58-ntp-flow-key-transposed",
        "file": "models/ntp/flow.py",
        "old": '    keys = np.einsum("ita,ib->itab", E[seqs], E[queries]).reshape(len(seqs), seqs.shape[1], -1)\n',
        "new": '    keys = np.einsum("ita,ib->itba", E[seqs], E[queries]).reshape(len(seqs), seqs.shape[1], -1)\n',
        "category": "transposed",
        "fault": "the NTP prompt view's key is vec(x_q x_tokᵀ) instead of vec(x_tok x_qᵀ): the "
        "engine follows the flow of x_qᵀ W x_tok, i.e. of Wᵀ, so its limit is the transpose of "
        "the graph-SVM and W_fin (wrong wherever they are not symmetric).",
    },
    # ---------------------------------------------------------------- kernels.py (NEG_LOG)
    {
        "id": "M59-kernels-neg-log-second-deriv-factor",
        "file": "models/flows/kernels.py",
        "old": "        return -2.0 * math.log(x) if x > 0.0 else math.inf\n",
        "new": "        return -math.log(x) if x > 0.0 else math.inf\n",
        "category": "wrong derivative",
        "fault": "log ℓ'' of ℓ(x) = −log x is −log x (ℓ'' = 1/x) instead of −2 log x (1/x²): "
        "the closed-form Jacobian of the NTP flow field is wrong wherever the label mass is "
        "below 1 (only the stiff integrator's Newton iterations read it, as M51).",
    },
    {
        "id": "M63-shared-sets-not-closed",
        "file": "models/flows/shared.py",
        "old": "    return sets | (np.linalg.norm(off, axis=-1) <= SNAP_TOL * scale)\n",
        "new": "    return sets.copy()\n",
        "category": "missing step",
        "fault": "the sets read from the flow are not closed under D: a token whose key differs "
        "from its set's by a vector of D (its logit gap stays finite for ever, e^{-31} at the "
        "reading) is left out, its margin row lies in D and the equality SVM is infeasible: "
        "the shared limit is missed (undecided).",
    },
    {
        "id": "M64-svm-polish-rows-unscaled",
        "file": "models/oracles/svm.py",
        "old": "    norms[norms == 0.0] = 1.0\n",
        "new": "    norms[:] = 1.0\n",
        "category": "numerical accuracy",
        "fault": "the active-set polish solves A_S x = b_S without scaling its rows: lstsq's "
        "normwise backward error leaves a short active row a slack of ~ε·‖A_S‖·‖x‖, which its "
        "large multiplier turns into a complementarity above the certificate's 1e-7: an "
        "ill-conditioned SVM comes back inaccurate (the flow undecided), never wrong.",
    },
    {
        "id": "M65-settle-a-resolved-stall-confirms",
        "file": "models/flows/limits.py",
        "old": '        stalled = ext.stop.startswith("integrator stalled") and unresolved\n',
        "new": '        stalled = ext.stop.startswith("integrator stalled")\n',
        "category": "weakened certificate",
        "fault": "a confirming trace that stalls where the tracer still resolves the flow "
        "confirms a converged outcome: a flow that heads out and stops at a finite stationary "
        "point a decade further (pulls that balance far out) is called converged, not bounded.",
    },
    {
        "id": "M66-evaluation-budget-never-spent",
        "file": "models/flows/dynamics.py",
        "old": "    if _BUDGET[0] < 0:\n        raise EvaluationBudgetExhausted",
        "new": "    if _BUDGET[0] < -(10**18):\n        raise EvaluationBudgetExhausted",
        "category": "lost limit",
        "fault": "the field-evaluation budget is never enforced: a medium draw the engine cannot "
        "decide runs on until its own max_norm and step limits (minutes to hours) instead of "
        "ending as inconclusive (budget).",
    },
    # ---------------------------------------------------------------- input weights
    {
        "id": "M60-kernels-coefficients-ignore-input-weights",
        "file": "models/flows/kernels.py",
        "old": "        log_lp += log_wt[i]\n        for t in range(T):\n",
        "new": "        for t in range(T):\n",
        "category": "missing factor",
        "fault": "the log-space gradient coefficients drop each input's weight ω_i: every input "
        "counts 1 instead of 1/n (the papers' problems: ∇L scaled by n, direction unchanged) or "
        "π̂_j·p̂_jz (the linear NTP decoder: the gradient of another loss, whose finite part is "
        "not W*).",
    },
    {
        "id": "M61-kernels-field-linear-ignores-input-weights",
        "file": "models/flows/kernels.py",
        "old": "        lp = loss_deriv(code, param, gam_r + dev) * wt / total\n",
        "new": "        lp = loss_deriv(code, param, gam_r + dev) / total\n",
        "category": "missing factor",
        "fault": "the linear-space field, the tracer's field wherever the softmax is not "
        "saturated, weighs every input alike: the engine follows the unweighted loss's flow "
        "(the linear NTP decoder's W(t) then relaxes to another finite part).",
    },
    {
        "id": "M62-ntp-linear-view-weights-without-probabilities",
        "file": "models/ntp/flow.py",
        "old": "    weights = problem.pi[contexts] * problem.P[contexts, tokens]\n",
        "new": "    weights = problem.pi[contexts] + 0 * problem.P[contexts, tokens]\n",
        "category": "missing factor",
        "fault": "the linear NTP decoder's inputs (j, z) are weighted by π̂_j alone, not "
        "π̂_j·p̂_jz: the view's loss is the CE of uniform next-token distributions on the "
        "supports, so the flow's finite part is the uniform split, not W*.",
    },
    # ---------------------------------------------------------------- kernels.py (log-gap derivatives)
    {
        "id": "M67-kernels-log-gap-keys-not-centred",
        "file": "models/flows/kernels.py",
        "old": "            centred[t, j] = (keys[i, t, j] - keys[i, r, j]) - acc\n",
        "new": "            centred[t, j] = keys[i, t, j]\n",
        "category": "missing step",
        "fault": "the closed-form gradient and Hessian of the log loss gap use the keys k_t "
        "where the softmax's derivative needs k_t − k̄: ∇δ_i is off by sign(δ_i)·k̄_i, so the "
        "regularization-path descents follow a wrong gradient and stop away from p_R.",
    },
    # ---------------------------------------------------------------- kernels.py (joint objective)
    {
        "id": "M68-kernels-joint-margin-drops-label",
        "file": "models/flows/kernels.py",
        "old": "        m *= y[i]\n",
        "new": "        m *= 1.0\n",
        "category": "dropped sign",
        "fault": "the compiled joint objective takes input i's margin as Σ_t s_it x_itᵀv "
        "without its label y_i: every negative input is scored as if it were positive, so the "
        "joint regularization path minimises the wrong loss and ends away from (v^mm, p^relax).",
    },
    # ---------------------------------------------------------------- kernels.py (exp_array)
    {
        "id": "M69-kernels-exp-array-taylor-coefficient",
        "file": "models/flows/kernels.py",
        "old": "    1.0 / 120,\n",
        "new": "    1.0 / 100,\n",
        "category": "wrong constant",
        "fault": "the field's exponential takes 1/100 for the r⁵ coefficient of its Taylor "
        "polynomial instead of 1/5!: e^x is off by up to 9e-6 relative (0 at r = 0, i.e. at "
        "multiples of ln 2), so every softmax weight of the tracer's linear-space field, and "
        "with them the flow it follows, is slightly wrong.",
    },
]
