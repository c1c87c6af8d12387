"""Every array argument that models/ validates is refused, with its own name, when it has the
wrong number of dimensions.

A researcher's first mistake with these functions is a shape (a batch axis too many, a row for
a column). Each entry point checks its arrays with ``as_float_tensor``, ``as_float_array`` or
``as_index_array`` and names the argument in a one-line ValueError; this table calls each of
them with one argument given an extra axis and reads that name back. In a seeded mutmut sample
a dropped check (``ndim`` → None) or a misnamed argument ("W" → "w") survived every other test.

``test_the_table_covers_every_validated_argument`` keeps the table complete: a new validated
argument in models/ needs its row here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from models.flows import dynamics, joint, kqpath, mirror_joint, wtrain
from models.ntp import data as ntp_data_module
from models.ntp import linear as ntp_linear
from models.oracles import normsvm, selection, svm
from models.problems import cross, embedding, heads
from models.problems.attention import PromptProblem
from models.problems.losses import get_loss

REPO_ROOT = Path(__file__).resolve().parent.parent
DT = torch.float64

# One small instance: n = 2 inputs, T = 3 tokens, d = 2.
X = np.array([[[1.0, 0.2], [0.1, -0.5], [-0.3, 0.4]], [[0.6, -0.2], [-0.4, 0.9], [0.2, 0.1]]])
Y = np.array([1.0, -1.0])
V = np.array([1.0, 0.5])
W = np.eye(2)
P = np.array([0.3, -0.2])
Z = X[:, 0].copy()
ALPHA = np.array([0, 0])
SCORES = X @ V
A = np.array([[1.0, 0.0], [0.0, 1.0]])
E = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [-0.5, 0.2]])
SEQ = np.array([[0, 1], [2, 3]])


def t(x):
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


def prompt() -> PromptProblem:
    return PromptProblem(t(X), t(SCORES), get_loss("logistic"))


def emb() -> embedding.EmbeddingProblem:
    return embedding.EmbeddingProblem(torch.as_tensor(SEQ), t(Y), t(E), t(V))


def joint_problem() -> joint.JointProblem:
    return joint.JointProblem(t(X), t(Y), t(W))


def cross_joint() -> mirror_joint.CrossJointProblem:
    return mirror_joint.CrossJointProblem(t(X), t(Z), t(Y))


def w_problem() -> wtrain.WProblem:
    return wtrain.WProblem(t(X), t(Y), t(V), t(P))


#: (where: "module.function", the argument's name, a call that passes ``bad`` in its place).
ROWS = [
    ("problems.attention.PromptProblem.__post_init__", "keys",
     lambda b: PromptProblem(b, t(SCORES), get_loss("logistic"))),
    ("problems.attention.PromptProblem.__post_init__", "scores",
     lambda b: PromptProblem(t(X), b, get_loss("logistic"))),
    ("problems.attention.PromptProblem.__post_init__", "weights",
     lambda b: PromptProblem(t(X), t(SCORES), get_loss("logistic"), b)),
    ("problems.attention.PromptProblem.from_data", "X",
     lambda b: PromptProblem.from_data(b, Y, V, W)),
    ("problems.attention.PromptProblem.from_data", "y",
     lambda b: PromptProblem.from_data(X, b, V, W)),
    ("problems.attention.PromptProblem.from_data", "v",
     lambda b: PromptProblem.from_data(X, Y, b, W)),
    ("problems.attention.PromptProblem.from_data", "W",
     lambda b: PromptProblem.from_data(X, Y, V, b)),
    ("problems.attention.PromptProblem.gradient_scaled", "p",
     lambda b: prompt().gradient_scaled(b)),
    ("problems.cross.CrossProblem.__init__", "X", lambda b: cross.CrossProblem(b, Z, Y, V)),
    ("problems.cross.CrossProblem.__init__", "Z", lambda b: cross.CrossProblem(X, b, Y, V)),
    ("problems.cross.CrossProblem.__init__", "y", lambda b: cross.CrossProblem(X, Z, b, V)),
    ("problems.cross.CrossProblem.__init__", "v", lambda b: cross.CrossProblem(X, Z, Y, b)),
    ("problems.cross.CrossProblem._matrix", "W",
     lambda b: cross.CrossProblem(X, Z, Y, V).loss_value(b)),
    ("flows.dynamics._start", "p0", lambda b: dynamics._start(prompt(), b)),
    ("problems.embedding.check_labels", "y", lambda b: embedding.check_labels(b, 2)),
    ("problems.embedding.check_head", "E", lambda b: embedding.check_head(b, V)),
    ("problems.embedding.check_head", "v", lambda b: embedding.check_head(E, b)),
    ("problems.embedding.EmbeddingProblem.grad_E", "p", lambda b: emb().grad_E(b)),
    ("problems.embedding.one_step", "p0", lambda b: embedding.one_step(emb(), 1.0, b)),
    ("problems.embedding.max_margin_feasible_point", "E1",
     lambda b: embedding.max_margin_feasible_point(b, torch.ones(4, dtype=torch.bool))),
    ("problems.embedding.directional_derivative", "p",
     lambda b: embedding.directional_derivative(prompt(), b, t(P))),
    ("problems.embedding.directional_derivative", "q",
     lambda b: embedding.directional_derivative(prompt(), t(P), b)),
    ("problems.embedding.descent_slope", "p",
     lambda b: embedding.descent_slope(prompt(), b, [0, 0])),
    ("problems.embedding.derivative_along", "p",
     lambda b: embedding.derivative_along(E, SEQ, Y, V, b, None)),
    ("problems.heads.NonlinearHeadProblem.__init__", "X",
     lambda b: heads.NonlinearHeadProblem(b, Y, W)),
    ("problems.heads.NonlinearHeadProblem.__init__", "y",
     lambda b: heads.NonlinearHeadProblem(X, b, W)),
    ("problems.heads.NonlinearHeadProblem.__init__", "W",
     lambda b: heads.NonlinearHeadProblem(X, Y, b)),
    ("problems.heads.NonlinearHeadProblem.loss_value", "p",
     lambda b: heads.NonlinearHeadProblem(X, Y, W).loss_value(b)),
    ("flows.joint.JointProblem.__init__", "X", lambda b: joint.JointProblem(b, Y, W)),
    ("flows.joint.JointProblem.__init__", "y", lambda b: joint.JointProblem(X, b, W)),
    ("flows.joint.JointProblem.__init__", "W", lambda b: joint.JointProblem(X, Y, b)),
    ("flows.joint.JointProblem.scores", "v", lambda b: joint_problem().scores(b)),
    ("flows.joint.JointProblem.gradient_p_log", "v",
     lambda b: joint_problem().gradient_p_log(b, P)),
    ("flows.joint.JointProblem.gradient_p_log", "p",
     lambda b: joint_problem().gradient_p_log(V, b)),
    ("flows.joint.JointProblem.gradient_v_log", "v",
     lambda b: joint_problem().gradient_v_log(b, P)),
    ("flows.joint.JointProblem.gradient_v_log", "p",
     lambda b: joint_problem().gradient_v_log(V, b)),
    ("flows.joint.JointProblem.selected_mass", "p", lambda b: joint_problem().selected_mass(V, b)),
    ("flows.joint.joint_ngd", "v0", lambda b: joint.joint_ngd(joint_problem(), b, P, steps=1)),
    ("flows.joint.joint_ngd", "p0", lambda b: joint.joint_ngd(joint_problem(), V, b, steps=1)),
    ("flows.kqpath.normalized_margin", "W",
     lambda b: kqpath.normalized_margin(X, Z, ALPHA, b, "fro")),
    ("flows.kqpath.balanced_factors", "W", lambda b: kqpath.balanced_factors(b)),
    ("flows.kqpath.diagonal_keys", "X", lambda b: kqpath.diagonal_keys(b, Z)),
    ("flows.kqpath.diagonal_keys", "Z", lambda b: kqpath.diagonal_keys(X, b)),
    ("flows.kqpath.diag_constraints", "X", lambda b: kqpath.diag_constraints(b, Z, ALPHA)),
    ("flows.kqpath.diag_constraints", "Z", lambda b: kqpath.diag_constraints(X, b, ALPHA)),
    ("flows.kqpath.diag_constraints", "alpha", lambda b: kqpath.diag_constraints(X, Z, b)),
    ("flows.kqpath.diag_kq_ngd", "k0", lambda b: kqpath.diag_kq_ngd(prompt(), b, P, steps=1)),
    ("flows.kqpath.diag_kq_ngd", "q0", lambda b: kqpath.diag_kq_ngd(prompt(), P, b, steps=1)),
    ("flows.mirror_joint.CrossJointProblem.__init__", "Z",
     lambda b: mirror_joint.CrossJointProblem(X, b, Y)),
    ("flows.mirror_joint.CrossJointProblem.cross", "v", lambda b: cross_joint().cross(b)),
    ("flows.mirror_joint.CrossJointProblem.logits", "W", lambda b: cross_joint().logits(b)),
    ("flows.mirror_joint.CrossJointProblem.joint_margins", "W",
     lambda b: cross_joint().joint_margins(b, V)),
    ("flows.mirror_joint.CrossJointProblem.joint_margins", "v",
     lambda b: cross_joint().joint_margins(W, b)),
    ("flows.mirror_joint.CrossJointProblem.gradient_W_log", "v",
     lambda b: cross_joint().gradient_W_log(W, b)),
    ("flows.mirror_joint.CrossJointProblem.gradient_W_log", "W",
     lambda b: cross_joint().gradient_W_log(b, V)),
    ("flows.mirror_joint.CrossJointProblem.gradient_v_log_at", "W",
     lambda b: cross_joint().gradient_v_log_at(b, V)),
    ("flows.mirror_joint.CrossJointProblem.gradient_v_log_at", "v",
     lambda b: cross_joint().gradient_v_log_at(W, b)),
    ("flows.mirror_joint.joint_md", "W0",
     lambda b: mirror_joint.joint_md(cross_joint(), b, V, p=2)),
    ("flows.mirror_joint.joint_md", "v0",
     lambda b: mirror_joint.joint_md(cross_joint(), W, b, p=2)),
    ("flows.mirror_joint.lp_v_svm", "X", lambda b: mirror_joint.lp_v_svm(b, Y, ALPHA, 2.0)),
    ("flows.mirror_joint.lp_v_svm", "y", lambda b: mirror_joint.lp_v_svm(X, b, ALPHA, 2.0)),
    ("oracles.normsvm._as_instance", "X", lambda b: normsvm.norm_svm(b, Z, ALPHA)),
    ("oracles.normsvm._as_instance", "Z", lambda b: normsvm.norm_svm(X, b, ALPHA)),
    ("oracles.normsvm._as_instance", "alpha", lambda b: normsvm.norm_svm(X, Z, b)),
    ("oracles.normsvm.certify", "A", lambda b: normsvm.certify(b, W, None, 1.0, "fro")),
    ("oracles.normsvm.certify", "W",
     lambda b: normsvm.certify(np.ones((1, 4)), b, None, 1.0, "fro")),
    ("oracles.normsvm.nuclear_face_fit", "W",
     lambda b: normsvm.nuclear_face_fit(X, Z, ALPHA, 1.0, b)),
    ("oracles.normsvm.nuclear_face_fit", "known",
     lambda b: normsvm.nuclear_face_fit(X, Z, ALPHA, 1.0, W, known=b)),
    ("ntp.data.ntp_data", "embeddings",
     lambda b: ntp_data_module.ntp_data(b, [[0, 1], [1, 0]], [1, 0])),
    ("ntp.linear.linear_ntp", "H",
     lambda b: ntp_linear.linear_ntp(b, [[0.5, 0.5], [1.0, 0.0]], [0.5, 0.5])),
    ("ntp.linear.linear_ntp", "P",
     lambda b: ntp_linear.linear_ntp(np.eye(2), b, [0.5, 0.5])),
    ("ntp.linear.linear_ntp", "pi",
     lambda b: ntp_linear.linear_ntp(np.eye(2), [[0.5, 0.5], [1.0, 0.0]], b)),
    ("ntp.linear.LinearNTP._check_W", "W",
     lambda b: ntp_linear.linear_ntp(np.eye(2), [[0.5, 0.5], [1.0, 0.0]], [0.5, 0.5]).loss(b)),
    ("oracles.selection._keys_and_alpha", "keys", lambda b: selection.token_margins(b, ALPHA, P)),
    ("oracles.selection._keys_and_alpha", "alpha", lambda b: selection.token_margins(X, b, P)),
    ("oracles.selection.token_margins", "p", lambda b: selection.token_margins(X, ALPHA, b)),
    ("oracles.selection._scores", "scores", lambda b: selection.local_optimality(X, b, ALPHA)),
    ("oracles.selection.global_opt", "scores", lambda b: selection.global_opt(b)),
    ("oracles.selection.has_unique_opt", "scores", lambda b: selection.has_unique_opt(b)),
    ("oracles.selection.enumerate_locally_optimal", "keys",
     lambda b: selection.enumerate_locally_optimal(b, SCORES)),
    ("oracles.selection.norm_local_optimality", "X",
     lambda b: selection.norm_local_optimality(b, Z, SCORES, ALPHA, None)),
    ("oracles.selection.norm_local_optimality", "alpha",
     lambda b: selection.norm_local_optimality(X, Z, SCORES, b, None)),
    ("oracles.svm._as_problem", "A", lambda b: svm.solve_margin_qp(b, np.ones(2))),
    ("oracles.svm._as_problem", "b", lambda b: svm.solve_margin_qp(A, b)),
    ("oracles.svm.certify", "duals", lambda b: svm.certify(A, np.ones(2), np.ones(2), b)),
    ("oracles.svm.att_constraints", "keys", lambda b: svm.att_constraints(b, ALPHA)),
    ("oracles.svm.att_constraints", "alpha", lambda b: svm.att_constraints(X, b)),
    ("oracles.svm.tied_tokens", "scores", lambda b: svm.tied_tokens(b, ALPHA)),
    ("oracles.svm.tied_tokens", "alpha", lambda b: svm.tied_tokens(SCORES, b)),
    ("oracles.svm._w_constraints", "p", lambda b: svm.w_svm(X, b, ALPHA)),
    ("oracles.svm.w_svm", "X", lambda b: svm.w_svm(b, P, ALPHA)),
    ("oracles.svm.w_svm_closed_form", "X", lambda b: svm.w_svm_closed_form(b, P, ALPHA)),
    ("oracles.svm.v_svm", "Z", lambda b: svm.v_svm(b, Y)),
    ("oracles.svm.v_svm", "y", lambda b: svm.v_svm(Z, b)),
    ("oracles.svm.cls_svm", "E", lambda b: svm.cls_svm(b, SEQ, [0, 2])),
    ("oracles.svm.cls_svm", "sequences", lambda b: svm.cls_svm(E, b, [0, 2])),
    ("oracles.svm.cls_svm", "s_star", lambda b: svm.cls_svm(E, SEQ, b)),
    ("flows.wtrain.WProblem.__init__", "X", lambda b: wtrain.WProblem(b, Y, V, P)),
    ("flows.wtrain.WProblem.__init__", "p", lambda b: wtrain.WProblem(X, Y, V, b)),
    ("flows.wtrain.WProblem.loss_value", "W", lambda b: w_problem().loss_value(b)),
    ("flows.wtrain.WProblem.gradient_log", "W", lambda b: w_problem().gradient_log(b)),
    ("flows.wtrain.w_ngd", "W0", lambda b: wtrain.w_ngd(w_problem(), b, steps=1)),
    ("flows.wtrain.w_gd", "W0", lambda b: wtrain.w_gd(w_problem(), b, eta=0.1, steps=1)),
]  # fmt: skip

#: The good value of each argument name (the bad one is it with a leading axis added).
GOOD = {
    "keys": X, "X": X, "scores": SCORES, "y": Y, "v": V, "v0": V, "W": W, "W0": W, "p": P,
    "p0": P, "q": P, "k0": P, "q0": P, "Z": Z, "alpha": ALPHA, "E": E, "E1": E, "A": A,
    "b": np.ones(2), "duals": np.ones(2), "known": W, "embeddings": E, "H": np.eye(2),
    "P": np.array([[0.5, 0.5], [1.0, 0.0]]), "pi": np.array([0.5, 0.5]), "sequences": SEQ,
    "s_star": np.array([0, 2]), "weights": np.ones(len(X)),
}  # fmt: skip
#: Arguments checked by ``as_index_array`` (a shape), the rest by dimension count.
INDEX = {"alpha", "sequences", "s_star"}


def _bad(name: str) -> np.ndarray:
    return np.asarray(GOOD[name])[None]


@pytest.mark.parametrize(("where", "name", "call"), ROWS, ids=[f"{w}:{n}" for w, n, _ in ROWS])
def test_a_wrong_dimension_is_refused_with_the_arguments_name(where, name, call):
    expected = "shape" if name in INDEX else "dimensions"
    with pytest.raises(ValueError, match=rf"^{name}: expected .*{expected}"):
        call(_bad(name))


def _validated_arguments() -> set[tuple[str, str]]:
    """(module.function, argument name) of every validation call in models/ with a literal
    name, found in the source."""
    found = set()
    checks = {"as_float_tensor", "as_float_array", "as_index_array"}
    for path in sorted((REPO_ROOT / "models").rglob("*.py")):
        module = ".".join(path.relative_to(REPO_ROOT / "models").with_suffix("").parts)
        stack: list[str] = []

        def visit(node, module=module, stack=stack):
            named = isinstance(node, ast.FunctionDef | ast.ClassDef)
            if named:
                stack.append(node.name)
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                literal = len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                if called in checks and literal and stack and stack[-1] not in checks:
                    found.add((f"{module}.{'.'.join(stack)}", node.args[1].value))
            for child in ast.iter_child_nodes(node):
                visit(child)
            if named:
                stack.pop()

        visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


#: Validated arguments without a row, each with why (none is a shape a caller passes).
EXEMPT = {
    ("oracles.svm.certify", "x"): "any shape: x is flattened (no ndim is checked)",
    ("ntp.attention.NTPAttention._check", "W"): "reached only through NTPAttention's methods",
}


#: mutmut runs the tests on a copy of models/ whose source holds every mutant's variant of each
#: function (renamed, behind a trampoline): a static reading of it means nothing there.
MUTMUT_COPY = "_mutmut_mutated" in (REPO_ROOT / "models" / "oracles" / "svm.py").read_text(
    encoding="utf-8"
)


@pytest.mark.skipif(MUTMUT_COPY, reason="a static check of models/; this is mutmut's copy")
def test_the_table_covers_every_validated_argument():
    rows = {(where, name) for where, name, _ in ROWS}
    validated = _validated_arguments()
    missing = validated - rows - set(EXEMPT)
    assert not missing, f"validated arguments without a row in ROWS: {sorted(missing)}"
    stale = rows - validated
    assert not stale, f"rows naming no validation call in models/: {sorted(stale)}"
