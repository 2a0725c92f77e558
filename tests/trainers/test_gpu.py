"""GPU smoke runs of the sharded accelerate configs (FSDP2, DeepSpeed ZeRO-2/3) on a tiny model: `-m gpu`."""

import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("config", ["fsdp2", "deepspeed_zero2", "deepspeed_zero3", "ddp"])
def test_sharded_config_trains_a_few_steps(tmp_path, config):
    if config.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

    model_dir = tmp_path / "model"
    tiny_causal_lm("llama", num_layers=4, hidden=64).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in successor_dataset(64)))
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        os.path.join(ROOT, "accelerate_configs", f"{config}.yaml"),
        "--num_processes",
        str(torch.cuda.device_count()),
        "-m",
        "constrained_sft",
        "train",
        "--model_name_or_path",
        str(model_dir),
        "--dataset_name",
        str(data),
        "--output_dir",
        str(out),
        "--max_steps",
        "4",
        "--per_device_train_batch_size",
        "4",
        "--eval_size",
        "8",
        "--bf16",
        "true",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--dual_lr",
        "0.5",
        "--noise_gamma",
        "0.5",
        "--layer_loss_tokens",
        "4",
        "--gradient_checkpointing",
        "false",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    report = json.loads((out / "constraints.json").read_text())
    assert report["global_step"] == 4 and all(v > 0 for v in report["dual"].values())


def test_cuda_readout_matches_the_cpu_kernel():
    """The CUDA readout (TRL's chunked kernel) agrees with the CPU kernel."""
    from constrained_sft import CausalLMReadout

    torch.manual_seed(0)
    K, D, V = 512, 256, 32000
    head = torch.nn.Linear(D, V, bias=False)
    h = torch.randn(K, D)
    targets = torch.randint(0, V, (K,))
    values, grads = [], []
    for device in ("cpu", "cuda"):
        readout = CausalLMReadout(lm_head=head.to(device), final_norm=None)
        x = h.to(device).detach().requires_grad_(True)  # a fresh leaf per device (h.to('cpu') is h itself)
        nll = readout.token_nll(x, targets.to(device), apply_norm=False)
        nll.sum().backward()
        values.append(nll.detach().cpu())
        grads.append(x.grad.cpu())
        head.weight.grad = None
    torch.testing.assert_close(values[1], values[0], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-3, atol=1e-4)


def test_bf16_readout_of_the_last_layer_equals_trls_fused_head():
    """In bf16 on CUDA, the readout of the last hidden state gives the log-probs TRL's fused head gives f_L: the
    same kernel and tiles, so the intermediate layers and the last are scored with the same numerics."""
    from trl.trainer.utils import add_fused_lm_head

    from constrained_sft import CausalLMReadout
    from constrained_sft.testing import tiny_causal_lm

    model = tiny_causal_lm("llama").to("cuda", torch.bfloat16).eval()
    add_fused_lm_head(model, outputs=("log_probs",))
    ids = torch.randint(4, 28, (4, 32), device="cuda")
    labels = ids.clone()
    labels[:, :5] = -100
    captured = []
    handle = model.model.register_forward_hook(lambda _m, _a, out: captured.append(out.last_hidden_state))
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels, fused_lm_head=True)
    handle.remove()
    mask = labels[:, 1:] != -100
    hidden = captured[0][:, :-1][mask]
    readout = CausalLMReadout.from_model(model)
    with torch.no_grad():
        ours = -readout.token_nll(hidden, labels[:, 1:][mask], apply_norm=False)
    torch.testing.assert_close(ours, out.log_probs[mask].float(), rtol=0, atol=1e-6)
