"""A trainer takes the constrained problem built by hand (`primal_dual=`): the exported core classes are usable, a dual
optimizer of one's own included; the config's `dual_optimizer` names are exactly the core's classes."""

import pytest
import torch
from conftest import config_kwargs

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
    assert [row["step"] for row in mine.history] == [1, 2, 3] and len(mine.history[0]["dual"]) == len(spec)
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
