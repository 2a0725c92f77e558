"""
lm-evaluation-harness models under embedding noise: `NoisyLM`, an `HFLM` whose every model call (loglikelihood
requests) and every `generate()` (generate_until requests) runs inside this library's `noisy` (its embedding noise), registered
with lm-eval as `constrained-sft-noisy`. lm-eval's own `steered` model wraps its calls in forward hooks the same way;
the hooks here are the ones `eval robustness` and `eval generate` use, so a level means the same everywhere:
N(mean, (gamma sigma_x)^2) on the token embeddings, padding never perturbed, gamma 0 the exact clean model.

From Python: `lm_eval.simple_evaluate(model=NoisyLM(pretrained=model_or_path, gamma=1.0, sigma_x=...), tasks=[...])`.
From lm-eval's command line (it has no plugin hook for models, so this module registers the name and hands over to
its CLI): `python -m constrained_sft.evaluation.harness.lm_eval_cli --model constrained-sft-noisy --model_args
pretrained=PATH,gamma=1.0,noise_seed=0 --tasks ...`.
"""

from __future__ import annotations

import math

from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from ...noise import embedding_sigma, noise_stream, noisy
from ..loading import reference_sigma

MODEL_NAME = "constrained-sft-noisy"


@register_model(MODEL_NAME)
class NoisyLM(HFLM):
    """
    `HFLM` plus `gamma` (the noise level, >= 0), `sigma_x` (the embedding scale; default: the one the run's
    `constraints.json` recorded when `pretrained` is a run folder, else measured on the loaded model, as `eval
    robustness` does), `noise_mean` and `noise_seed`. One random stream per instance, seeded once: lm-eval orders and
    batches requests deterministically, so the same seed gives the same draws run after run, and two models with one
    tokenizer see the same draws (common random numbers for a paired comparison). Other arguments are `HFLM`'s.
    """

    def __init__(
        self,
        pretrained,
        gamma: float = 0.0,
        sigma_x: float | None = None,
        noise_mean: float = 0.0,
        noise_seed: int = 0,
        **kwargs,
    ) -> None:
        gamma, noise_mean, noise_seed = float(gamma), float(noise_mean), int(noise_seed)
        if not (math.isfinite(gamma) and gamma >= 0):
            raise ValueError(f"`gamma` must be a finite number >= 0, got {gamma!r}.")
        if sigma_x is not None and not (math.isfinite(float(sigma_x)) and float(sigma_x) > 0):
            raise ValueError(f"`sigma_x` must be a finite number > 0 (or unset), got {sigma_x!r}.")
        if sigma_x is None and isinstance(pretrained, str):
            sigma_x, _ = reference_sigma(None, pretrained)
        super().__init__(pretrained=pretrained, **kwargs)
        self.gamma, self.noise_mean, self.noise_seed = gamma, noise_mean, noise_seed
        self.sigma_x = float(sigma_x) if sigma_x is not None else embedding_sigma(self.model)
        self.generator = noise_stream(self.model, noise_seed)  # one stream for every call of this instance

    def noise(self):
        """The noise block around one model call."""
        return noisy(self.model, self.gamma, self.generator, self.noise_mean, self.sigma_x)

    def _model_call(self, *args, **kwargs):
        with self.noise():
            return super()._model_call(*args, **kwargs)

    def _model_generate(self, *args, **kwargs):
        with self.noise():
            return super()._model_generate(*args, **kwargs)
