"""models.device: the one place that reads ATTN_DEVICE."""

import pytest
import torch

from models import device as dev


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
