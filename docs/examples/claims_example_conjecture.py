from attention_theorems import att_svm, claim, equal_nonopt_instances, evidence, given, support_sets


@claim(
    id="CONJ-ALL-SUPPORT",
    paper="2306.13596",
    kind="conjecture",
    statement="With equal non-optimal scores, every non-optimal token is a support vector "
    "of ATT-SVM(opt): its constraint (k_opt − k_t)ᵀ p^mm ≥ 1 is tight.",
    provenance="[U]",
    expected="unknown",
)
@given(inst=equal_nonopt_instances())
def test_every_token_is_a_support_vector(inst):
    evidence.instance(inst.to_json())
    sol = evidence.solved(att_svm(inst.keys, inst.alpha), "ATT-SVM(opt)")
    support = support_sets(inst.keys, inst.alpha, sol)
    assert all(len(s) == inst.T - 1 for s in support), f"support sets {support}"
