"""A trainer takes the constrained problem built by hand (`primal_dual=`): the exported core classes are usable, a dual
optimizer of one's own included; the config's `dual_optimizer` names are exactly the core's classes."""

import pytest
import torch
from conftest import config_kwargs, hang_limit

from constrained_sft import (
    AdamDual,
    ConstrainedSFTConfig,
    ConstrainedSFTTrainer,
    DescentConstraints,
    Multipliers,
    PrimalDual,
)
from constrained_sft.config import DUAL_OPTIMIZERS as CONFIG_NAMES
from constrained_sft.constraints import DUAL_OPTIMIZERS
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer


def _trainer(tmp_path, **kwargs):
    args = ConstrainedSFTConfig(**config_kwargs(tmp_path, max_steps=3, dual_lr=0.5, dual_optimizer="sgd"))
    return ConstrainedSFTTrainer(model=tiny_causal_lm("llama"), args=args, train_dataset=successor_dataset(32),
                                 processing_class=tiny_tokenizer(), **kwargs)  # fmt: skip


def test_a_hand_built_primal_dual_is_the_one_trained(tmp_path):
    spec = DescentConstraints.resolve(4, [2, 4], 0.05, None)
    mine = PrimalDual(spec, dual_optimizer=AdamDual, dual_lr=0.2, resilience=0.1)
    trainer = _trainer(tmp_path, primal_dual=mine)
    trainer.train()
    assert trainer.primal_dual is mine and type(mine.dual) is AdamDual  # not the config's SGD at dual_lr 0.5
    assert mine.dual.optimizer.state_dict()["state"]  # Adam's moments: its steps ran
    assert [row.step for row in mine.history] == [1, 2, 3] and len(mine.history[0].dual) == len(spec)
    assert {f"dual/{k}" for k in spec.keys} <= set(trainer.state.log_history[0])


def test_a_primal_dual_for_other_layers_is_refused_naming_it(tmp_path):
    spec = DescentConstraints(layers=(2, 6), alphas=(0.05,), epsilon=None)
    with pytest.raises(ValueError, match=r"`primal_dual` measures layers \[2, 6\], but the model has layers 1..4"):
        _trainer(tmp_path, primal_dual=PrimalDual(spec))
    with pytest.raises(TypeError, match="`primal_dual` must be a constrained_sft.PrimalDual, got dict"):
        _trainer(tmp_path, primal_dual={})


def test_the_configs_dual_optimizer_names_are_the_cores_classes():
    assert list(CONFIG_NAMES) == list(DUAL_OPTIMIZERS)
    assert all(cls.name == name for name, cls in DUAL_OPTIMIZERS.items())
    assert type(DUAL_OPTIMIZERS["adam"](Multipliers(2)).optimizer) is torch.optim.Adam


MOMENTUM = '''
"""A dual optimizer of one's own, in one file: the class, its setting, its registration. Nothing else."""
import torch
from constrained_sft.constraints import DUAL_OPTIMIZERS, DualOptimizer, Setting
from constrained_sft.constraints.variants import finite_at_least


@DUAL_OPTIMIZERS.register
class MomentumDual(DualOptimizer):
    name = "momentum"
    settings = {"momentum": Setting("dual_momentum", float, 0.5, "Heavy-ball momentum of the ascent.",
                                    finite_at_least(0.0), "must be a finite number >= 0")}

    def __init__(self, multipliers, lr=0.01, resilience=0.0, explicit_relaxation=False, momentum=0.5):
        self.momentum = momentum
        super().__init__(multipliers, lr, resilience, explicit_relaxation)

    def make_optimizer(self, weight, lr):
        return torch.optim.SGD([weight], lr=lr, momentum=self.momentum, maximize=True)
'''

USE_IT = """
import json, sys
import momentum_dual  # the user's module, imported before the configs are built
from constrained_sft.cli import main
from constrained_sft import ConstrainedSFTConfig
refused = []
for fields in ({"dual_optimizer": "momentum", "plugin_settings": {"dual_momentum": -1.0}},
               {"plugin_settings": {"dual_momentum": 0.9}}, {"plugin_settings": {"dual_momentm": 0.9}}):
    try:
        ConstrainedSFTConfig(output_dir=sys.argv[1] + "/x", bf16=False, use_cpu=True, report_to="none", **fields)
    except ValueError as error:
        refused.append(str(error))
assert main(sys.argv[2:]) == 0
print(json.dumps(refused))
"""


def train_with_a_module(tmp_path, module: str, source: str, program: str, *extra: str):
    """`program` run in a fresh interpreter that can import the user's `module` (`source`), with the argv of a
    2-step `train` on a tiny model plus `extra` after its own argument (tmp_path)."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / module).write_text(source)
    tiny_causal_lm("llama").save_pretrained(tmp_path / "model")
    tiny_tokenizer().save_pretrained(tmp_path / "model")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in successor_dataset(16)))
    argv = ["train", "--model_name_or_path", str(tmp_path / "model"), "--dataset_name", str(data), "--output_dir",
            str(tmp_path / "out"), "--max_steps", "2", "--per_device_train_batch_size", "4", "--bf16", "false",
            "--use_cpu", "true", "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-c", program, str(tmp_path), *argv], capture_output=True, text=True,
                          env=env, timeout=hang_limit(30))  # fmt: skip


def test_a_new_dual_optimizer_is_one_class_in_one_file(tmp_path):
    """Registered from its own module, a dual optimizer's setting becomes a config field, a flag and a recipe key,
    validated by its `Setting` and refused beside another dual optimizer; the command trains with it."""
    import json

    argv = "--dual_optimizer", "momentum", "--plugin_settings", '{"dual_momentum": 0.9}', "--dual_lr", "0.5"
    done = train_with_a_module(tmp_path, "momentum_dual.py", MOMENTUM, USE_IT, *argv)
    assert done.returncode == 0, done.stderr[-3000:]
    refused = json.loads(done.stdout.strip().splitlines()[-1])
    assert refused == [
        "`dual_momentum` must be a finite number >= 0, got -1.0.",
        "`dual_momentum` (0.9) is read only by `dual_optimizer: momentum`, and this config has `dual_optimizer: sgd`, "
        "so it would be ignored: remove it (default 0.5) or set `dual_optimizer: momentum`.",
        "`plugin_settings` holds `dual_momentm`, which no registered training mode or dual optimizer reads; known: "
        "['dual_momentum'] (a variant's module must be imported before the config is built).",
    ]
    report = json.loads((tmp_path / "out" / "constraints.json").read_text())
    assert report["dual_optimizer"] == "momentum" and report["enforced"] and report["global_step"] == 2


HALF_PENALTY = '''
"""A training mode of one's own, in one file: the class, its description, its typed settings, its registration."""
from dataclasses import dataclass, field

from constrained_sft.constraints import MODES, FixedDual
from constrained_sft.constraints.modes import Mode
from constrained_sft.constraints.variants import finite_at_least


@dataclass
class HalfPenaltySettings:
    half_weight: float = field(default=1.0, metadata={"help": "`constraints: half_penalty`: twice the weight.",
                               "valid": finite_at_least(0.0), "requirement": "must be a finite number >= 0"})


@MODES.register
class HalfPenalty(Mode):
    name = "half_penalty"
    help = "the penalty method at half of `half_weight` (a test's mode)."
    card_tag = "half-penalty"
    card_text = "with the descent terms at half a fixed weight (a mode registered from its own module)"
    fixed_weights = True
    settings_class = HalfPenaltySettings

    @classmethod
    def primal_dual_settings(cls, config, spec, num_layers):
        settings: HalfPenaltySettings = cls.typed_settings(config)  # read typed
        assert type(settings.half_weight) is float
        return {"dual_optimizer": FixedDual, "dual_init": settings.half_weight / 2}
'''

USE_THE_MODE = """
import contextlib, io, json, sys
import half_penalty  # the user's module, imported before the configs are built
from constrained_sft.cli import main
from constrained_sft import ConstrainedSFTConfig
refused = []
for fields in ({"constraints": "half_penalty", "plugin_settings": {"half_weight": -1.0}},
               {"plugin_settings": '{"half_weight": 0.4}'}, {"constraints": "halfpenalty"}):
    try:
        ConstrainedSFTConfig(output_dir=sys.argv[1] + "/x", bf16=False, use_cpu=True, report_to="none", **fields)
    except ValueError as error:
        refused.append(str(error))
shown = io.StringIO()
with contextlib.redirect_stdout(shown), contextlib.suppress(SystemExit):
    main(["train", "--help"])
assert main(sys.argv[2:]) == 0
print(json.dumps({"refused": refused, "help": shown.getvalue()}))
"""


def test_a_new_mode_is_one_class_in_one_file(tmp_path):
    """Registered from its own module, a training mode is a `constraints` value with its description in `--help`,
    its settings a typed dataclass (`settings_class`): a validated field refused beside another mode, read typed by
    the mode; its text and tag in the model card, and it trains. (The dual optimizer above declares its setting the
    previous release's way, a `Setting` with its type and default: both stay supported.)"""
    import json

    argv = "--constraints", "half_penalty", "--plugin_settings", '{"half_weight": 0.6}'
    done = train_with_a_module(tmp_path, "half_penalty.py", HALF_PENALTY, USE_THE_MODE, *argv)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["refused"][0] == "`half_weight` must be a finite number >= 0, got -1.0."
    assert "`half_weight` (0.4) is read only by `constraints: half_penalty`" in out["refused"][1]
    assert "half_penalty" in out["refused"][2] and "'descent'" in out["refused"][2]
    assert "`'half_penalty'`: the penalty method at half of `half_weight`" in " ".join(out["help"].split())
    card = (tmp_path / "out" / "README.md").read_text()
    assert "half-penalty" in card and "at half a fixed weight (a mode registered from its own module)" in card
    report = json.loads((tmp_path / "out" / "constraints.json").read_text())
    assert set(report["dual"].values()) == {0.3} and not report["enforced"]
