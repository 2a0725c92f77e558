"""The linear-readout NLL kernel matches cross-entropy on full logits, values and gradients, in all three regimes."""

import pytest
import torch
import torch.nn.functional as F

from constrained_sft.readout import linear_nll as module
from constrained_sft.readout.linear_nll import linear_nll


@pytest.mark.parametrize("regime", ["native", "keep", "recompute"])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_cross_entropy(monkeypatch, regime, bias):
    monkeypatch.setattr(module, "NATIVE_ELEMENTS", 10**9 if regime == "native" else 0)
    monkeypatch.setattr(module, "KEEP_ELEMENTS", 10**9 if regime == "keep" else 0)
    monkeypatch.setattr(module, "CHUNK_ELEMENTS", 7 * 50)  # several token chunks of 7
    torch.manual_seed(0)
    K, D, V = 30, 16, 50
    x = torch.randn(K, D, requires_grad=True)
    w = torch.randn(V, D, requires_grad=True)
    b = torch.randn(V, requires_grad=True) if bias else None
    t = torch.randint(0, V, (K,))
    g = torch.rand(K)  # an arbitrary upstream gradient per token
    ours = linear_nll(x, w, b, t, scale=0.7)
    (ours * g).sum().backward()
    got = [x.grad.clone(), w.grad.clone()] + ([b.grad.clone()] if bias else [])
    for p in [x, w] + ([b] if bias else []):
        p.grad = None
    ref = F.cross_entropy(0.7 * F.linear(x, w, b), t, reduction="none")
    (ref * g).sum().backward()
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    for a, r in zip(got, [x.grad, w.grad] + ([b.grad] if bias else []), strict=True):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5)


def test_no_grad_keeps_nothing_and_empty_input():
    x, w, t = torch.randn(4, 8), torch.randn(20, 8), torch.randint(0, 20, (4,))
    with torch.no_grad():
        out = linear_nll(x, w, None, t)
    assert out.shape == (4,) and not out.requires_grad
    assert linear_nll(x[:0], w, None, t[:0]).shape == (0,)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("autocast", [False, True])
def test_a_half_precision_head_with_or_without_autocast(monkeypatch, dtype, autocast, native):
    """The matmuls run in the head's dtype whatever the autocast (an fp16 head under a bf16 autocast used to meet an
    fp32 gradient: 'expected m1 and m2 to have the same dtype'); values and gradients match fp32 to half precision."""
    monkeypatch.setattr(module, "NATIVE_ELEMENTS", 10**9 if native else 0)
    torch.manual_seed(0)
    x = torch.randn(12, 16)
    weight = torch.randn(40, 16) * 0.3
    targets = torch.randint(0, 40, (12,))
    ref_x, ref_w = x.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    reference = linear_nll(ref_x, ref_w, None, targets)
    reference.sum().backward()
    half_x, half_w = x.clone().requires_grad_(True), weight.to(dtype).requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        nll = linear_nll(half_x, half_w, None, targets)
        nll.sum().backward()
    assert nll.dtype == torch.float32 and half_w.grad.dtype == dtype and half_x.grad.dtype == torch.float32
    torch.testing.assert_close(nll, reference, rtol=0.02, atol=0.02)
    torch.testing.assert_close(half_x.grad, ref_x.grad, rtol=0.05, atol=0.02)
    torch.testing.assert_close(half_w.grad.float(), ref_w.grad, rtol=0.05, atol=0.02)
