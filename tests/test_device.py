"""models.numerics.device: the one place that reads ATTN_DEVICE."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from models.numerics import device as dev
from models.problems.embedding import uniform_token_problem


def test_cpu_is_the_default(monkeypatch):
    monkeypatch.delenv("ATTN_DEVICE", raising=False)
    assert dev.device() == torch.device("cpu")
    monkeypatch.setenv("ATTN_DEVICE", " CPU ")
    assert dev.device() == torch.device("cpu")
    assert dev.describe(torch.device("cpu")) == "cpu"


def test_auto_picks_a_gpu_only_when_there_is_one(monkeypatch):
    monkeypatch.setenv("ATTN_DEVICE", "auto")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert dev.device().type == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dev.device() == torch.device("cpu")


def test_a_missing_gpu_falls_back_to_cpu_with_a_warning(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("ATTN_DEVICE", "cuda")
    with pytest.warns(dev.DeviceWarning, match="ATTN_DEVICE='cuda': torch sees no CUDA"):
        assert dev.device() == torch.device("cpu")
    with pytest.warns(dev.DeviceWarning, match="'cuda:3'"):
        assert dev.device("cuda:3") == torch.device("cpu")


def test_too_high_a_gpu_index_falls_back(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert dev.device("cuda:0") == torch.device("cuda:0")
    with pytest.warns(dev.DeviceWarning, match="only 1 CUDA device"):
        assert dev.device("cuda:1") == torch.device("cpu")


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "tpu0"])
def test_a_name_that_is_no_device_is_a_clear_error(bad):
    with pytest.raises(ValueError, match=f"ATTN_DEVICE='{bad}' is not a torch device"):
        dev.device(bad)


def _attention_gradient(X, y, v, p):
    """∇_p of the logistic loss of f(X) = ⟨Xv, softmax(Xp)⟩, by autograd, on X's device."""
    p = p.clone().requires_grad_(True)
    margins = y * (torch.softmax(X @ p, dim=-1) * (X @ v)).sum(-1)
    torch.nn.functional.softplus(-margins).mean().backward()
    return p.grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_float64_work_on_the_gpu_matches_the_cpu():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(64, 32, 512, generator=gen, dtype=torch.float64)
    y = torch.where(torch.rand(64, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    v = torch.randn(512, generator=gen, dtype=torch.float64)
    p = torch.randn(512, generator=gen, dtype=torch.float64) / 10
    gpu = dev.device("cuda")
    assert "cuda" in dev.describe(gpu)
    on_gpu = _attention_gradient(X.to(gpu), y.to(gpu), v.to(gpu), p.to(gpu))
    assert on_gpu.device.type == "cuda" and on_gpu.dtype == torch.float64
    torch.testing.assert_close(on_gpu.cpu(), _attention_gradient(X, y, v, p), rtol=1e-9, atol=1e-12)


# ---- the torch work that ATTN_DEVICE moves (models.problems.embedding) ---------------------------
#
# CI has no GPU, so the device discipline of that work is checked on torch's "meta" device: a
# meta tensor has a shape and a device but no values, and torch refuses to mix it with a CPU
# tensor exactly as it refuses to mix a CUDA one. A tensor made on the CPU by mistake inside
# the work (a torch.zeros without device=) therefore fails here as it would fail on a GPU.


def _shape_only(check):
    """The check without the part that reads values (finite, ±1, ids in range): a meta tensor
    has none. The real checks are tested on CPU, and on CUDA by the tests below."""

    def shape_only(x, *args, **kwargs):
        if isinstance(x, torch.Tensor) and x.is_meta:
            return x if x.dtype == torch.int64 else x.to(torch.float64)
        return check(x, *args, **kwargs)

    return shape_only


@pytest.fixture
def meta_ok(monkeypatch):
    import models.problems.attention as attention
    import models.problems.embedding as embedding

    for module, name in (
        (attention, "as_float_tensor"),
        (embedding, "as_float_tensor"),
        (embedding, "check_sequences"),
        (embedding, "check_labels"),
    ):
        monkeypatch.setattr(module, name, _shape_only(getattr(module, name)))


def _problem():
    return uniform_token_problem(0, n=6, T=4, S=9, d=16)


def test_the_embedding_gradient_runs_wholly_on_the_problems_device(meta_ok):
    problem = _problem()
    on_meta = problem.to("meta")
    assert on_meta.device.type == "meta" and on_meta.sequences.device.type == "meta"
    p = torch.randn(problem.dim, dtype=torch.float64)  # a CPU p is moved to the problem
    g = on_meta.grad_E(p)
    assert g.device.type == "meta" and g.shape == problem.E.shape and g.dtype == torch.float64
    assert problem.to("cpu") is problem  # nothing to move: the same object


@pytest.mark.parametrize("kind", ["one", "two"])
def test_the_real_data_models_train_wholly_on_their_device(meta_ok, kind):
    from models.problems.embedding import OneLayerModel, TwoLayerModel, train_full_batch

    problem = _problem()
    cls = TwoLayerModel if kind == "two" else OneLayerModel
    model = cls(problem.vocab_size, problem.dim, train_v=True, seed=0).to("meta")
    # Every epoch (forward, backward, Adam) runs on the model's device; only the finished
    # loss curve is copied to the host, which a meta tensor cannot do.
    with pytest.raises(NotImplementedError, match="meta"):
        train_full_batch(model, problem.sequences, problem.y, epochs=2, lr=0.1, seed=1)
    assert all(q.device.type == "meta" for q in model.parameters())
    assert all(q.grad is not None and q.grad.device.type == "meta" for q in model.parameters())


def test_one_step_computes_the_gradient_on_the_device_setting(meta_ok, monkeypatch):
    import models.problems.embedding as embedding

    problem = _problem()
    reference = embedding.one_step(problem, 3.0)
    seen = []
    real_grad = embedding.EmbeddingProblem.grad_E

    def spy(self, p):
        seen.append((self.device, p.device))
        return real_grad(self.to("cpu"), p.to("cpu")).to(self.device)

    asked = []

    def setting(name=None):
        asked.append(name)
        return torch.device("meta")

    monkeypatch.setattr(embedding.EmbeddingProblem, "grad_E", spy)
    monkeypatch.setattr(embedding, "torch_device", setting)
    # On meta the gradient's values are lost on the way back; the point is where it ran.
    with pytest.raises(NotImplementedError, match="meta"):
        embedding.one_step(problem, 3.0)
    assert asked == [None] and seen == [(torch.device("meta"), torch.device("meta"))]
    # An explicit device overrides the setting; on the CPU the step is unchanged, bit for bit.
    monkeypatch.undo()
    step = embedding.one_step(problem, 3.0, device="cpu")
    assert step.E1.device.type == "cpu"
    assert torch.equal(step.E1, reference.E1) and torch.equal(step.shift, reference.shift)


def test_the_cls_flow_of_a_device_problem_copies_to_the_host_only_when_asked(meta_ok):
    # The log-space p-gradient is numpy on the host; a problem on another device makes its
    # host copies on first use, not at construction (a meta tensor cannot be copied at all).
    prompt = _problem().to("meta").prompt_problem()
    assert prompt.keys.device.type == "meta"
    assert "_np" not in vars(prompt)
    with pytest.raises(NotImplementedError, match="meta"):
        prompt.gradient_log_np(torch.zeros(prompt.dim, dtype=torch.float64).numpy())


# ---- on a real GPU (skipped where torch sees none) --------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_one_step_at_large_d_on_the_gpu_matches_the_cpu(monkeypatch):
    from models.problems.embedding import one_step

    problem = uniform_token_problem(1, n=200, T=8, S=30, d=4096)
    cpu = one_step(problem, 10.0, device="cpu")
    monkeypatch.setenv("ATTN_DEVICE", "cuda")
    gpu = one_step(problem, 10.0)  # the setting, as the claims use it
    assert gpu.E1.device.type == "cpu"  # results where the problem lives
    torch.testing.assert_close(gpu.E1, cpu.E1, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gpu.shift, cpu.shift, rtol=1e-10, atol=1e-15)
    assert abs(gpu.rank_one_residual - cpu.rank_one_residual) <= 1e-14
    on_gpu = one_step(problem.to("cuda"), 10.0, p0=torch.randn(problem.dim, dtype=torch.float64))
    assert on_gpu.E1.device.type == "cuda" and on_gpu.shift.device.type == "cuda"


@needs_cuda
@pytest.mark.parametrize("kind", ["one", "two"])
def test_training_on_the_gpu_matches_the_cpu(kind):
    from models.problems.embedding import OneLayerModel, TwoLayerModel, train_full_batch

    problem = uniform_token_problem(2, n=64, T=12, S=40, d=32)
    cls = TwoLayerModel if kind == "two" else OneLayerModel
    curves = []
    for where in ("cpu", "cuda"):
        model = cls(problem.vocab_size, problem.dim, train_v=True, seed=0).to(where)
        curves.append(train_full_batch(model, problem.sequences, problem.y, 20, 0.05, seed=4))
    assert curves[1].device.type == "cpu"
    torch.testing.assert_close(curves[1], curves[0], rtol=1e-9, atol=1e-12)


# ---- the GPU check script's promise ----------------------------------------------------------

NO_SOLVERS = """
import sys
for name in ("cvxpy", "clarabel", "scs", "osqp", "ecos"):
    sys.modules[name] = None  # an import fails as for a package that is not installed
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_the_device_checks_run_without_the_svm_solvers():
    """benchmarks/device_check.sh runs on a GPU image that has torch and pytest but no cvxpy:
    the device tests and the GPU benchmark must not import the SVM oracle."""
    root = Path(__file__).resolve().parent.parent
    files = ["tests/test_device.py", "benchmarks/test_device_speedup.py"]
    run = subprocess.run(
        [sys.executable, "-c", NO_SOLVERS, *files, "-q", "-p", "no:cacheprovider", "--no-gate",
         "-k", "not without_the_svm_solvers"],
        cwd=root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
