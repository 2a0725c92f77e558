"""
The noise fields: Gaussian noise on the token embeddings in training and evaluation, validated once and mixed into
both trainer configs; and the training level a run's noise field implies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..constraints.variants import is_number
from ..utils.fields import check_fields
from ..utils.types import NOISE_MODALITIES, NoiseModality


@dataclass
class NoiseArguments:
    r"""
    Gaussian noise on the token embeddings, e ~ N(noise_mean, (gamma * sigma_x)^2), where sigma_x is the std of the
    starting model's embedding matrix (see `constrained_sft.noise`). Mixed into every trainer config next to the
    constraints.
    """

    noise_gamma: float | list[float] | str = field(
        default_factory=lambda: 0.0,
        metadata={
            "help": "Training noise level gamma >= 0 (0 trains on clean embeddings), or a range [gamma_min, gamma_max] "
            "from which each example draws its own level uniformly. Applies to training batches only."
        },
    )
    noise_mean: float = field(
        default=0.0, metadata={"help": "Mean mu of the embedding noise, in training and evaluation."}
    )
    noise_sigma: float | None = field(
        default=None,
        metadata={
            "help": "sigma_x, the noise scale gamma multiplies. Default: measured once on the starting model's input "
            "embeddings and kept for the whole run (training and evaluation), then recorded as `noise_sigma_x` in "
            "constraints.json, so that models trained from the same start are perturbed alike when compared."
        },
    )
    noise_modality: NoiseModality = field(
        default="both",
        metadata={
            "help": "Which inputs of a vision-language model the noise perturbs, at its language model's input: "
            "'text' (the token embeddings), 'image' (the image features at the image positions) or 'both'. A "
            "text-only model has text only ('both' = 'text'; 'image' is refused). See docs/guides/vlm.md.",
            "choices": list(NOISE_MODALITIES),
        },
    )
    noise_image_sigma: float | None = field(
        default=None,
        metadata={
            "help": "sigma of the image-feature noise (gamma multiplies it). Default: the std of the image features "
            "the starting model gives the first training batch, kept for the run and recorded as "
            "`noise_image_sigma_x` in constraints.json."
        },
    )
    noise_clean_prob: float = field(
        default=0.0,
        metadata={"help": "Probability in [0, 1] that a training example is left clean (its gamma set to 0)."},
    )
    eval_noise_gammas: list[float] | None = field(
        default=None,
        metadata={
            "help": "Noise levels at which `evaluate()` also runs, reporting `eval_gamma_<gamma>_loss`, "
            "`eval_gamma_<gamma>_mean_token_accuracy` and the per-layer metrics at each level (seeded, reproducible)."
        },
    )

    def _validate_noise_arguments(self) -> None:
        check_fields(self, NoiseArguments)
        gamma: object = self.noise_gamma
        if isinstance(gamma, str):
            gamma = gamma.replace(",", " ").split()
        if isinstance(gamma, (list, tuple)):
            if len(gamma) == 1:
                gamma = gamma[0]
            elif len(gamma) != 2:
                raise ValueError(
                    f"`noise_gamma` must be a level >= 0 or a range [gamma_min, gamma_max], got {self.noise_gamma!r}."
                )
        given = list(gamma) if isinstance(gamma, (list, tuple)) else [gamma]
        values = [v for v in map(_level, given) if v is not None]
        if len(values) != (2 if isinstance(gamma, (list, tuple)) else 1) or any(
            not math.isfinite(v) or v < 0 for v in values
        ):
            raise ValueError(f"`noise_gamma` values must be finite numbers >= 0, got {self.noise_gamma!r}.")
        if len(values) == 2 and values[0] > values[1]:
            raise ValueError(f"`noise_gamma` range needs gamma_min <= gamma_max, got {self.noise_gamma!r}.")
        self.noise_gamma = values if len(values) == 2 else values[0]
        if not is_number(self.noise_mean) or not math.isfinite(self.noise_mean):
            raise ValueError(f"`noise_mean` must be a finite number, got {self.noise_mean!r}.")
        if self.noise_sigma is not None and (
            not is_number(self.noise_sigma) or not math.isfinite(self.noise_sigma) or self.noise_sigma <= 0
        ):
            raise ValueError(f"`noise_sigma` must be a finite number > 0, or unset, got {self.noise_sigma!r}.")
        if self.noise_modality not in NOISE_MODALITIES:
            raise ValueError(f"`noise_modality` must be one of {list(NOISE_MODALITIES)}, got {self.noise_modality!r}.")
        if self.noise_image_sigma is not None and (
            not is_number(self.noise_image_sigma)
            or not math.isfinite(self.noise_image_sigma)
            or self.noise_image_sigma <= 0
        ):
            raise ValueError(
                f"`noise_image_sigma` must be a finite number > 0, or unset, got {self.noise_image_sigma!r}."
            )
        if not is_number(self.noise_clean_prob) or not 0.0 <= self.noise_clean_prob <= 1.0:
            raise ValueError(f"`noise_clean_prob` must be a probability in [0, 1], got {self.noise_clean_prob!r}.")
        if self.eval_noise_gammas is not None:
            levels = [self.eval_noise_gammas] if is_number(self.eval_noise_gammas) else list(self.eval_noise_gammas)
            if not levels or any(not is_number(v) or not math.isfinite(v) or v < 0 for v in levels):
                raise ValueError(f"`eval_noise_gammas` must be a list of levels >= 0, got {self.eval_noise_gammas!r}.")
            self.eval_noise_gammas = [float(v) for v in levels]

    @property
    def gamma_setting(self) -> float | list[float]:
        """`noise_gamma` as validation leaves it: a level, or a `[gamma_min, gamma_max]` range (text is read then)."""
        if isinstance(self.noise_gamma, str):
            raise ValueError(f"`noise_gamma` {self.noise_gamma!r} is read when the config is built.")
        return self.noise_gamma

    @property
    def uses_noise(self) -> bool:
        """Whether training or evaluation perturbs the embeddings."""
        return self.trains_with_noise or bool(self.eval_noise_gammas)

    @property
    def trains_with_noise(self) -> bool:
        """Whether training batches get noise (gamma 0 leaves an example exactly clean, whatever the mean)."""
        return training_level(self.noise_gamma) > 0


def training_level(noise_gamma: object) -> float:
    """
    The training noise level of a `noise_gamma` value (a level, a `[gamma_min, gamma_max]` range: its top, or unset:
    0), the boundary between in-distribution (gamma <= it) and out-of-distribution test levels. Read from a config or
    from the value a run recorded in its `constraints.json`.
    """
    if isinstance(noise_gamma, (list, tuple)):
        return max(float(v) for v in noise_gamma) if noise_gamma else 0.0
    if not noise_gamma:
        return 0.0
    if isinstance(noise_gamma, (int, float, str)):
        return float(noise_gamma)
    raise ValueError(f"`noise_gamma` must be a level or a [gamma_min, gamma_max] range, got {noise_gamma!r}.")


def _level(value: object) -> float | None:
    """A `noise_gamma` entry as a number (a number or its text); None where it is none (a boolean is none)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None
