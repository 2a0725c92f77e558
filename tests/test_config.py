"""ConstrainedSFTConfig: new fields only, validated with errors that name the field and the allowed values."""

import dataclasses

import pytest
from trl import SFTConfig, TrlParser

from constrained_sft import ConstrainedSFTConfig
from constrained_sft.config import ConstraintArguments, NoiseArguments, RunArguments


def make(**kwargs):
    return ConstrainedSFTConfig(output_dir="/tmp/unused", report_to="none", bf16=False, use_cpu=True, **kwargs)


def test_adds_only_new_fields():
    parent = {f.name for f in dataclasses.fields(SFTConfig)}
    ours = {f.name for cls in (ConstraintArguments, NoiseArguments, RunArguments) for f in dataclasses.fields(cls)}
    assert not parent & ours
    assert {f.name for f in dataclasses.fields(ConstrainedSFTConfig)} == parent | ours
    for f in [
        *dataclasses.fields(ConstraintArguments),
        *dataclasses.fields(NoiseArguments),
        *dataclasses.fields(RunArguments),
    ]:
        assert f.metadata.get("help"), f"{f.name} has no help text"


def test_defaults_validate():
    cfg = make()
    assert cfg.constraints == "descent" and cfg.constrained_layers == "all" and cfg.descent_alpha == 0.05


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"descent_alpha": 0.0}, r"descent_alpha.*\(0, 1\)"),
        ({"descent_alpha": 1.0}, r"descent_alpha.*\(0, 1\)"),
        ({"descent_alpha": [0.1, 1.5]}, r"descent_alpha.*\(0, 1\)"),
        ({"descent_alpha": "abc"}, r"descent_alpha"),
        ({"dual_lr": -0.1}, r"dual_lr.*>= 0"),
        ({"resilience": -1.0}, r"resilience.*>= 0"),
        ({"dual_init": -1.0}, r"dual_init.*>= 0"),
        ({"dual_max": 0.0}, r"dual_max.*> 0"),
        ({"dual_max": 1.0, "dual_init": 2.0}, r"dual_init"),
        ({"constraints": "soft"}, r"constraints.*\['descent', 'penalty', 'early_exit', 'none'\].*'soft'"),
        (
            {"dual_optimizer": "rmsprop"},
            r"dual_optimizer.*\['sgd', 'adam', 'nupi', 'augmented_lagrangian'\].*'rmsprop'",
        ),
        ({"nupi_ema": 1.0}, r"`nupi_ema` must lie in \[0, 1\), got 1.0"),
        ({"nupi_kp": 0.0, "nupi_ki": 0.0}, r"`nupi_kp` and `nupi_ki` are both 0"),
        ({"nupi_kp": -1.0}, r"`nupi_kp` must be a finite number >= 0, got -1.0"),
        ({"alm_penalty": 0.0}, r"`alm_penalty` must be None \(`dual_lr`\) or a finite number > 0, got 0.0"),
        ({"alm_growth": 0.9}, r"`alm_growth` must be a finite number >= 1, got 0.9"),
        ({"alm_tolerance": "x"}, r"`alm_tolerance` must be"),
        ({"constrained_layers": [0, 2]}, r"constrained_layers.*1-based"),
        ({"constrained_layers": [3, 2]}, r"constrained_layers.*strictly increasing"),
        ({"constrained_layers": "some"}, r"constrained_layers"),
        ({"constraint_warmup_steps": -1}, r"constraint_warmup_steps"),
        ({"layer_loss_tokens": 0}, r"layer_loss_tokens"),
        ({"layer_loss_tokens": "\u00b2"}, r"`layer_loss_tokens` must be .*got '\u00b2'"),  # a digit int() cannot read
        ({"feasibility_window": 0}, r"feasibility_window"),
    ],
)
def test_bad_values_name_the_field(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        make(**kwargs)


def test_command_line_forms_are_normalised(tmp_path):
    parser = TrlParser((ConstrainedSFTConfig,))
    (cfg,) = parser.parse_args_into_dataclasses(
        [
            "--output_dir",
            str(tmp_path),
            "--bf16",
            "false",
            "--use_cpu",
            "true",
            "--report_to",
            "none",
            "--constrained_layers",
            "2",
            "4",
            "6",
            "--descent_alpha",
            "0.1",
            "0.2",
            "--descent_epsilon",
            "3.5",
        ]
    )
    assert cfg.constrained_layers == [2, 4, 6] and cfg.descent_alpha == [0.1, 0.2] and cfg.descent_epsilon == 3.5
    (cfg,) = parser.parse_args_into_dataclasses(
        [
            "--output_dir",
            str(tmp_path),
            "--bf16",
            "false",
            "--use_cpu",
            "true",
            "--constrained_layers",
            "all",
            "--descent_alpha",
            "0.3",
        ]
    )
    assert cfg.constrained_layers == "all" and cfg.descent_alpha == 0.3
    # omitted flags keep the dataclass defaults
    (cfg,) = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--bf16", "false", "--use_cpu", "true"]
    )
    assert (cfg.constrained_layers, cfg.descent_alpha, cfg.noise_gamma, cfg.eval_noise_gammas) == (
        "all",
        0.05,
        0.0,
        None,
    )
    (cfg,) = parser.parse_args_into_dataclasses(
        [
            "--output_dir",
            str(tmp_path),
            "--bf16",
            "false",
            "--use_cpu",
            "true",
            "--noise_gamma",
            "0.5",
            "2",
            "--eval_noise_gammas",
            "0",
            "1.5",
        ]
    )
    assert cfg.noise_gamma == [0.5, 2.0] and cfg.eval_noise_gammas == [0.0, 1.5]


def test_deepspeed_without_a_gpu_runs_on_gloo_and_refuses_use_cpu(monkeypatch):
    """accelerate turns DeepSpeed off under `use_cpu` and starts no process group without a GPU unless a backend is
    named: the config check picks gloo, and refuses `use_cpu` naming it, before any work. (The DeepSpeed launches
    in tests/trainers/test_deepspeed.py depend on it end to end.)"""
    from types import SimpleNamespace

    import torch

    from constrained_sft.config.run_fields import deepspeed_without_gpu

    if torch.cuda.is_available():
        pytest.skip("the check applies to machines without a GPU")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    args = SimpleNamespace(use_cpu=False, ddp_backend=None)
    deepspeed_without_gpu(args)
    assert args.ddp_backend == "gloo"
    with pytest.raises(ValueError, match="`use_cpu` is true under a DeepSpeed launch"):
        deepspeed_without_gpu(SimpleNamespace(use_cpu=True, ddp_backend=None))
    with pytest.raises(ValueError, match="`ddp_backend` must be 'gloo'"):
        deepspeed_without_gpu(SimpleNamespace(use_cpu=False, ddp_backend="nccl"))
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    args = SimpleNamespace(use_cpu=True, ddp_backend=None)
    deepspeed_without_gpu(args)  # nothing changes outside a DeepSpeed launch
    assert args.ddp_backend is None


@pytest.mark.parametrize("config", ["sft", "classifier"])
def test_context_and_sequence_parallelism_are_refused_before_any_work(monkeypatch, config):
    """Both split every sequence across ranks (transformers then hands the loss pre-shifted `shift_labels`), and the
    layers are read on whole sequences: refused with the config, naming where it was asked for, whether it comes as
    `parallelism_config` or from an accelerate config (the environment accelerate reads); other parallelism passes."""
    from accelerate.parallelism_config import ParallelismConfig

    from constrained_sft import ConstrainedConfig

    cls = ConstrainedSFTConfig if config == "sft" else ConstrainedConfig

    def build(**kwargs):
        return cls(output_dir="/tmp/unused", report_to="none", bf16=False, use_cpu=True, **kwargs)

    with pytest.raises(
        ValueError, match=r"^`parallelism_config` asks for .*\(cp_size=2\).*Set `cp_size` and `sp_size`"
    ):
        build(parallelism_config=ParallelismConfig(cp_size=2))
    with pytest.raises(ValueError, match=r"`parallelism_config` asks for .*\(sp_size=4\)"):
        build(parallelism_config=ParallelismConfig(sp_size=4))
    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_SIZE", "2")
    with pytest.raises(ValueError, match=r"^the accelerate config's `parallelism_config` asks for .*\(cp_size=2\)"):
        build()
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_SIZE", "1")
    build()  # a parallelism config that keeps sequences whole
    monkeypatch.delenv("ACCELERATE_USE_PARALLELISM_CONFIG")
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_SIZE", "2")
    build()  # accelerate reads those sizes only when its config turned the parallelism config on
