from attention_theorems import att_svm, conjecture, equal_nonopt_instances, gd, given, one_minus_cos


@conjecture(
    "CONJ-GD-ALIGNS",
    "With equal non-optimal scores, 1 − cos(p(t), p^mm(opt)) never grows along GD from p(0) = 0.",
)
@given(inst=equal_nonopt_instances())
def test_gd_only_turns_towards_the_svm(inst):
    sol, eta = att_svm(inst.keys, inst.alpha), 1 / inst.problem.smoothness_bound()
    gaps = [one_minus_cos(p, sol.x) for p in gd(inst.problem, eta=eta, steps=100).ps[1:]]
    assert all(gaps[k + 1] <= gaps[k] + 1e-12 for k in range(len(gaps) - 1)), gaps[:5]
