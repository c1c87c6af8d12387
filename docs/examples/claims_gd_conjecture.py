from theorems import att_svm, claim, equal_nonopt_instances, gd, given, one_minus_cos


@claim(id="CONJ-GD-ALIGNS", paper="2306.13596", kind="conjecture", provenance="[U]",
       statement="Under equal non-optimal scores, GD with η = 1/L_p from p(0) = 0 only ever "
       "turns towards p^mm(opt): 1 − cos(p(t), p^mm) never increases.")  # fmt: skip
@given(inst=equal_nonopt_instances())
def test_gd_only_turns_towards_the_svm(inst):
    sol = att_svm(inst.keys, inst.alpha)  # an oracle failure makes the example inconclusive
    run = gd(inst.problem, eta=1 / inst.problem.smoothness_bound(), steps=100)
    gaps = [one_minus_cos(p, sol.x) for p in run.ps[1:]]
    assert all(gaps[k + 1] <= gaps[k] + 1e-12 for k in range(len(gaps) - 1)), gaps[:5]
