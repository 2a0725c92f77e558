"""The probe's lifetime on a model: attaching is idempotent, probes share one wrapper, detaching restores the model."""

import types

import pytest
import torch

from constrained_sft.readout import CausalLMReadout, LayerProbe, ProbeRequest, ReadoutError, select_tokens
from constrained_sft.readout.probe import HOOK_ATTRIBUTE
from constrained_sft.testing import tiny_causal_lm


def _probe(model, layers=(1, 2, 3, 4)):
    return LayerProbe(CausalLMReadout.from_model(model), layers, model.config.num_hidden_layers, True)


def _request(labels):
    return ProbeRequest(selection=select_tokens(labels), grad=False, shape=tuple(labels.shape))


def _batch():
    ids = torch.tensor([[4, 5, 6, 7, 8, 9], [4, 6, 8, 10, 12, 14]])
    return ids, ids.clone()


def test_attach_twice_is_idempotent_and_detach_restores_the_model():
    model = tiny_causal_lm("llama")
    probe = _probe(model)
    probe.attach(model)
    wrapped = model.__dict__["forward"]
    probe.attach(model)
    assert model.__dict__["forward"] is wrapped  # no second wrapper
    probe.detach(model)
    assert "forward" not in model.__dict__ and HOOK_ATTRIBUTE not in model.__dict__
    probe.detach(model)  # idempotent


def test_two_probes_share_one_wrapper_and_each_serves_its_own_request():
    model = tiny_causal_lm("llama").eval()
    every, two = _probe(model), _probe(model, layers=(2, 4))
    every.attach(model)
    wrapped = model.__dict__["forward"]
    two.attach(model)
    assert model.__dict__["forward"] is wrapped
    ids, labels = _batch()
    for probe, layers in ((two, 2), (every, 4)):
        request = _request(labels)
        with probe.serving(model, request):
            model(input_ids=ids)
        assert request.result is not None and request.result.sums.shape == (layers,)
    with torch.no_grad():  # outside a request the forward is the model's own: no hidden states asked for
        assert model(input_ids=ids).hidden_states is None
    every.detach(model)
    assert model.__dict__["forward"] is wrapped  # `two` still serves
    two.detach(model)
    assert "forward" not in model.__dict__


def test_serving_needs_an_attached_probe():
    model = tiny_causal_lm("llama")
    with pytest.raises(ReadoutError, match="not attached"), _probe(model).serving(model, _request(_batch()[1])):
        pass


def test_a_forward_wrapped_over_the_probe_is_wrapped_again_on_attach():
    """TRL's fused head, installed by each new SFTTrainer, calls the backbone directly: it cuts out what it wraps."""
    model = tiny_causal_lm("llama").eval()
    first = _probe(model)
    first.attach(model)
    model.forward = types.MethodType(lambda self, *a, **kw: type(self).forward(self, *a, **kw), model)  # bypasses
    ids, labels = _batch()
    request = _request(labels)
    with first.serving(model, request):
        model(input_ids=ids)
    assert request.result is None  # cut out: a trainer must not go on as if it had measured
    _probe(model).attach(model)  # a second trainer on the same model
    request = _request(labels)
    with first.serving(model, request):
        model(input_ids=ids)
    assert request.result is not None and request.result.sums.shape == (4,)


@pytest.mark.parametrize(
    ("sharded", "max_rows", "asks"),
    [(True, None, True), (True, 10**6, True), (True, 8, False), (False, None, False)],
)
def test_only_a_sharded_head_without_a_shared_bound_sizes_the_calls_across_ranks(monkeypatch, sharded, max_rows, asks):
    """With a head that DeepSpeed / FSDP may gather per readout call, every rank must make the same calls: one, when
    the request's rank-independent bound `max_rows` lets every layer fit in it (nothing asked of the other ranks),
    else sized by the largest selection of all ranks (an all-reduce and a read per forward). Under plain data
    parallelism nothing is gathered in a readout, so the probe asks nothing (no host-device sync per micro-batch)."""
    from constrained_sft.readout import layer_losses
    from constrained_sft.readout import probe as probe_module

    asked, calls = [], []
    monkeypatch.setattr(probe_module, "_largest_across_ranks", lambda rows, device: asked.append(rows) or rows)
    monkeypatch.setattr(layer_losses, "STACK_ROWS", 24)  # 3 layers of 10 rows need two calls, of 8 rows one
    model = tiny_causal_lm("llama").eval()
    readout = CausalLMReadout.from_model(model)
    token_nll = readout.token_nll
    monkeypatch.setattr(readout, "token_nll", lambda h, *a, **kw: calls.append(len(h)) or token_nll(h, *a, **kw))
    probe = LayerProbe(readout, (1, 2, 3, 4), model.config.num_hidden_layers, True, sharded)
    probe.attach(model)
    ids, labels = _batch()  # 10 supervised next-token positions
    request = _request(labels)
    request.max_rows = max_rows
    with torch.no_grad(), probe.serving(model, request):
        model(input_ids=ids)
    assert request.result is not None and asked == ([10] if asks else [])
    # layers 1-3 (a bound under the real 10 rows still gives one call on every rank: more memory, never a hang);
    # the last call reads layer 4, whose loss this bare forward does not carry
    assert calls[:-1] == ([30] if max_rows == 8 else [20, 10])
