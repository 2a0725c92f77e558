"""
lm-eval's command line with `constrained-sft-noisy` registered (lm-eval has no plugin hook for models):

    python -m constrained_sft.evaluation.harness.lm_eval_cli --model constrained-sft-noisy \
        --model_args pretrained=outputs/run,gamma=1.0,noise_seed=0 --tasks ifeval --batch_size 8

Every argument is lm-eval's; the model's are `HFLM`'s plus `gamma`, `sigma_x`, `noise_mean` and `noise_seed`.
"""

from __future__ import annotations


def main() -> None:
    from lm_eval.__main__ import cli_evaluate

    from . import model  # noqa: F401  (registers constrained-sft-noisy)

    cli_evaluate()


if __name__ == "__main__":
    main()
