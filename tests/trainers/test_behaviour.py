"""After a short training on a learnable task, constrained layers descend more often than ERM's, monotonically."""

from conftest import config_kwargs

from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

LAYERS = 8


def _train(tmp_path, constraints):
    args = ConstrainedSFTConfig(
        **config_kwargs(
            tmp_path / constraints,
            max_steps=60,
            per_device_train_batch_size=16,
            per_device_eval_batch_size=64,
            logging_steps=60,
        ),
        constraints=constraints,
        descent_alpha=0.05,
        descent_epsilon=3.0,
        dual_lr=0.3,
        resilience=0.1,
    )
    trainer = ConstrainedSFTTrainer(
        model=tiny_causal_lm("llama", num_layers=LAYERS, seed=0),
        args=args,
        train_dataset=successor_dataset(512, seed=0),
        processing_class=tiny_tokenizer(),
    )
    trainer.train()
    return trainer.evaluate(successor_dataset(128, seed=100))


def test_constrained_run_descends_more_than_erm(tmp_path):
    erm = _train(tmp_path, "none")
    constrained = _train(tmp_path, "descent")
    print(
        f"descent fraction: constrained {constrained['eval_descent_fraction']:.4f} vs ERM {erm['eval_descent_fraction']:.4f}"
    )
    assert constrained["eval_descent_fraction"] > erm["eval_descent_fraction"]
    means = [constrained[f"eval_layer_loss/{layer}"] for layer in range(1, LAYERS + 1)]
    assert all(b < a for a, b in zip(means, means[1:], strict=False)), means
