"""
Beyond the named cases: values of every wrong kind (wrong type, NaN / inf, negative, empty, out of range, lists of the
wrong length) fed into every field the library defines, and into the inherited fields users set most, for every
task's recipe classes and every command's arguments. Each either constructs or raises a `ValueError` that names the
field; never another exception (a TypeError from a comparison, an AttributeError deep in transformers).
"""

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained_sft.config import (
    ConstrainedConfig,
    ConstrainedSFTConfig,
    ConstraintArguments,
    NoiseArguments,
    ProcessArguments,
    RunArguments,
)
from constrained_sft.evaluation import RobustnessArguments
from constrained_sft.evaluation.alpaca.generate import GenerateArguments
from constrained_sft.evaluation.alpaca.judge_command import AlpacaArguments
from constrained_sft.evaluation.exits import ExitsArguments
from constrained_sft.evaluation.harness.arguments import HarnessArguments
from constrained_sft.study.arguments import StudyArguments
from constrained_sft.sweep.arguments import SweepArguments
from constrained_sft.tasks import get_task

INHERITED = [
    "learning_rate", "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
    "max_steps", "num_train_epochs", "eval_strategy", "save_strategy", "logging_strategy", "eval_steps", "save_steps",
    "logging_steps", "seed", "weight_decay", "max_grad_norm", "neftune_noise_alpha",
]  # fmt: skip
OURS = [f.name for cls in (ConstraintArguments, NoiseArguments, RunArguments) for f in dataclasses.fields(cls)]
CONFIG_BASE = dict(output_dir="/tmp/constrained-sft-properties", report_to="none", use_cpu=True)


def cases():
    """(label, constructor, field): every library-defined field of every task's recipe classes and every command."""
    out = []
    for name in ("sft", "classification", "video"):
        task = get_task(name)
        for cls in task.parser_classes():
            if cls in (ConstrainedSFTConfig, ConstrainedConfig):
                base = {**CONFIG_BASE, **({"bf16": False} if cls is ConstrainedSFTConfig else {})}
                fields = OURS + INHERITED + (["max_length"] if cls is ConstrainedSFTConfig else [])
                out += [(f"{name}:{cls.__name__}.{f}", cls, base, f) for f in fields]
            elif cls.__module__.startswith("constrained_sft"):
                out += [(f"{name}:{cls.__name__}.{f.name}", cls, {}, f.name) for f in dataclasses.fields(cls)]
    for cls in (RobustnessArguments, GenerateArguments, AlpacaArguments, SweepArguments, StudyArguments,
                HarnessArguments, ExitsArguments, ProcessArguments):  # fmt: skip
        out += [(f"{cls.__name__}.{f.name}", cls, {}, f.name) for f in dataclasses.fields(cls)]
    return out


CASES = cases()


class Opaque:
    """A value of no kind any field takes."""


BAD_VALUES = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1, -0.5, 0, "", [], {}, True, Opaque(), 10**12, 1e300, "-1"]),
    st.lists(st.sampled_from([0.1, 2, -1, "x", math.nan]), min_size=1, max_size=6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.text(max_size=4),
)


def test_every_task_and_command_field_is_covered():
    labels = {label for label, *_ in CASES}
    assert "sft:ConstrainedSFTConfig.descent_alpha" in labels and "video:VideoScriptArguments.patch_size" in labels
    assert "classification:ConstrainedConfig.learning_rate" in labels and "StudyArguments.training_seeds" in labels
    new = ("nupi_kp", "nupi_ki", "nupi_ema", "alm_penalty", "alm_growth", "alm_tolerance", "penalty_weight",
           "early_exit_scale", "early_exit_weight", "neftune_noise_alpha")  # fmt: skip
    assert all(f"sft:ConstrainedSFTConfig.{name}" in labels for name in new)
    assert "HarnessArguments.limit" in labels and "ExitsArguments.exit_layers" in labels
    assert len(CASES) > 240


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), value=BAD_VALUES)
def test_a_wrong_value_constructs_or_is_refused_naming_its_field(case, value):
    label, cls, base, name = case
    try:
        cls(**{**base, name: value})
    except ValueError as error:
        assert name in str(error), f"{label}={value!r}: the message does not name the field: {error}"
    except Exception as error:  # noqa: BLE001 - the property: nothing but a ValueError
        pytest.fail(f"{label}={value!r} raised {type(error).__name__}: {error}")
