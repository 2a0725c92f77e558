"""
The constraint fields: the descent constraints, their primal-dual training, the intermediate readouts and the
console, validated once and mixed into both trainer configs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_args

from ..constraints import DUAL_OPTIMIZERS as DUAL_OPTIMIZER_CLASSES
from ..constraints import EARLY_EXIT_SCALES as SCALES
from ..constraints import MODES, mode_of
from ..constraints.variants import is_number
from ..utils.fields import check_fields
from .variant_fields import VariantArguments, read_only_by, refuse_unread_fields

CONSTRAINT_MODES = MODES  # the registry itself, the config's choices: a mode registered later is one too
DUAL_OPTIMIZERS = DUAL_OPTIMIZER_CLASSES  # the registry itself, like CONSTRAINT_MODES
EARLY_EXIT_SCALES = tuple(SCALES)
ConsoleFormat: TypeAlias = Literal["compact", "full"]
CONSOLE_FORMATS: tuple[ConsoleFormat, ...] = get_args(ConsoleFormat)


@dataclass
class ConstraintArguments(VariantArguments):
    r"""
    Fields that define the layerwise descent constraints and their primal-dual training.

    The problem is `min f_L  s.t.  f_l <= (1 - alpha_l) f_{l-1}` for consecutive constrained layers, and optionally
    `f_first <= epsilon`, where `f_l` is the mean token loss of layer `l` read out through the model's own head.
    Mixed into [`ConstrainedSFTConfig`] (and the encoder config), so every trainer shares one definition.
    """

    # > The constrained problem
    constraints: str = field(
        default="descent",
        metadata={
            "help": " ".join(f"`'{mode.name}'`: {mode.help}" for mode in MODES.values())
            + " Every constrained layer is measured, logged and reported in every mode, so all runs share one "
            "instrument.",
            "choices": CONSTRAINT_MODES,
        },
    )
    # Union-with-list fields take their default through `default_factory`: HfArgumentParser ignores a plain default
    # for list-typed arguments and would hand over None.
    constrained_layers: str | list[str] | list[int] = field(
        default_factory=lambda: "all",
        metadata={
            "help": "`'all'` (layers 1..L) or a strictly increasing list of 1-based layer indices. Constraints link "
            "consecutive listed layers: f_{l_j} <= (1 - alpha_j) f_{l_{j-1}}."
        },
    )
    descent_alpha: float | list[float] | str = field(
        default_factory=lambda: 0.05,
        metadata={
            "help": "Step size alpha in (0, 1): each constrained layer must cut the previous layer's loss by this "
            "fraction. A float applies to every step; a list gives one alpha per step (number of constrained layers "
            "minus one). The L-layer chain can only be met if f_L <= (1 - alpha)^(L-1) f_1 is attainable: with 30 "
            "layers, alpha=0.05 allows a 4.4x reduction from the first layer to the last."
        },
    )
    descent_epsilon: float | None = field(
        default=None,
        metadata={
            "help": "Optional bound f_first <= epsilon on the first constrained layer. Without it the model can "
            "satisfy every descent constraint by making the first layer's readout worse (paper, Section 4)."
        },
    )

    # > The dual problem
    dual_lr: float = field(
        default=0.01,
        metadata={
            "help": "Learning rate of the dual ascent on the multipliers (>= 0; 0 freezes them at `dual_init`). Set "
            "per model (the recipes give theirs): a rule scaling it by the first step's slack measured worse."
        },
    )
    dual_optimizer: str = field(
        default="sgd",
        metadata={
            "help": " ".join(f"`'{name}'`: {cls.help}" for name, cls in DUAL_OPTIMIZER_CLASSES.items()),
            "choices": DUAL_OPTIMIZERS,
        },
    )
    dual_init: float = field(default=0.0, metadata={"help": "Initial value of every multiplier (>= 0)."})
    resilience: float = field(
        default=0.0,
        metadata={
            "help": "Resilience rho >= 0 (dual weight decay, paper Appendix A.5): relaxes each constraint by "
            "rho * lambda, so a constraint that cannot be met settles at a finite multiplier of about slack / rho "
            "instead of growing without bound."
        },
    )
    dual_max: float | None = field(
        default=None, metadata={"help": "Optional upper cap on every multiplier (> 0), applied with the projection."}
    )
    constraint_warmup_steps: int = field(
        default=0,
        metadata={
            "help": "Optimizer steps trained on f_L alone (no penalties, no dual updates) before the constraints "
            "switch on; layer losses are still measured. The paper warms up for one epoch."
        },
    )
    constraint_warmup_epochs: int = field(
        default=0,
        metadata={
            "help": "The same warm-up counted in epochs (the paper's 'primal warm-up': 1); with both set, the longer "
            "one applies."
        },
    )
    resilience_restarts: bool = field(
        default=False,
        metadata={
            "help": "The paper's video variant of resilience (B.2): each constraint's relaxation u is an explicit "
            "variable that moves toward resilience * lambda at rate min(1, dual_lr) per step (where the weight-decay "
            "form keeps it), reset to 0 at the start of every epoch after the first. Needs resilience > 0."
        },
    )

    # > The readout of intermediate layers
    readout_final_norm: bool = field(
        default=True,
        metadata={
            "help": "Apply the model's final norm before the LM head when reading out layers below the last (the "
            "'logit lens'). The last layer is always scored exactly as the model scores it."
        },
    )
    layer_loss_tokens: int | str | None = field(
        default="auto",
        metadata={
            "help": "Tokens read out per sequence for the layers below the last, in training: 'auto' (a sample sized "
            "so the readouts cost `readout_budget` of the step's FLOPs), an integer k (an unbiased sample of k "
            "supervised positions per sequence, the same for every layer, importance-weighted by the sequence's "
            "token count), or 'all' / None (every supervised token). The objective f_L always uses every token; "
            "evaluation reads every token."
        },
    )
    readout_budget: float = field(
        default=0.1,
        metadata={
            "help": "With layer_loss_tokens='auto': the intermediate readouts' share of a plain training step's FLOPs "
            "(0.1 = 10%). Each sampled token costs 6 x hidden x vocabulary FLOPs per constrained layer."
        },
    )
    console_format: ConsoleFormat = field(
        default="compact",
        metadata={
            "help": "What each logging step prints: 'compact' (one line: loss, f_L, feasible and descent fractions, "
            "the largest multiplier and its layer, step time; one table row per noise level at evaluation) or 'full' "
            "(transformers' dict of every metric). `report_to` backends and trainer_state.json get every metric "
            "either way."
        },
    )
    feasibility_window: int = field(
        default=20,
        metadata={
            "help": "Number of final optimizer steps whose mean slack decides, in `constraints.json`, whether each "
            "constraint holds at the end of training."
        },
    )

    @property
    def layer_setting(self) -> str | list[int]:
        """`constrained_layers` as validation leaves it: 'all' or 1-based indices (the parse is idempotent)."""
        return _parse_layers(self.constrained_layers)

    @property
    def alpha_setting(self) -> float | list[float]:
        """`descent_alpha` as validation leaves it: one alpha, or one per descent step."""
        return _parse_alpha(self.descent_alpha)

    def _validate_constraint_arguments(self) -> None:
        check_fields(self, ConstraintArguments)
        if self.constraints not in CONSTRAINT_MODES:
            raise ValueError(f"`constraints` must be one of {list(CONSTRAINT_MODES)}, got {self.constraints!r}.")
        if self.dual_optimizer not in DUAL_OPTIMIZERS:
            raise ValueError(f"`dual_optimizer` must be one of {list(DUAL_OPTIMIZERS)}, got {self.dual_optimizer!r}.")
        self._validate_variant_arguments()
        self.constrained_layers = _parse_layers(self.constrained_layers)
        self.descent_alpha = _parse_alpha(self.descent_alpha)
        for name in ("dual_lr", "dual_init", "resilience"):
            value = getattr(self, name)
            if not is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"`{name}` must be a finite number >= 0, got {value!r}.")
        if self.dual_max is not None and (not is_number(self.dual_max) or not self.dual_max > 0):
            raise ValueError(f"`dual_max` must be None or a number > 0, got {self.dual_max!r}.")
        if self.dual_max is not None and self.dual_init > self.dual_max:
            raise ValueError(f"`dual_init` ({self.dual_init}) must not exceed `dual_max` ({self.dual_max}).")
        mode = mode_of(self.constraints)
        if problem := mode.config_problem(self):
            raise ValueError(problem)
        if mode.fixed_weights and (self.resilience > 0 or self.resilience_restarts):
            raise ValueError(
                f"`resilience` relaxes the constraints through the dual ascent, which `constraints: {self.constraints}` "
                f"does not run (fixed weights); set `resilience: 0` and `resilience_restarts: false`, or use "
                "`constraints: descent`."
            )
        if self.descent_epsilon is not None and (
            not is_number(self.descent_epsilon) or not math.isfinite(self.descent_epsilon) or self.descent_epsilon <= 0
        ):
            raise ValueError(
                "`descent_epsilon` must be None or a finite number > 0 (a bound on the first constrained layer's loss, "
                f"which is never negative), got {self.descent_epsilon!r}."
            )
        if not isinstance(self.constraint_warmup_steps, int) or self.constraint_warmup_steps < 0:
            raise ValueError(
                f"`constraint_warmup_steps` must be an integer >= 0, got {self.constraint_warmup_steps!r}."
            )
        if not isinstance(self.constraint_warmup_epochs, int) or self.constraint_warmup_epochs < 0:
            raise ValueError(
                f"`constraint_warmup_epochs` must be an integer >= 0, got {self.constraint_warmup_epochs!r}."
            )
        if self.resilience_restarts and not self.resilience > 0:
            raise ValueError(
                "`resilience_restarts` resets the relaxations resilience gives: it needs `resilience` > 0, got "
                f"{self.resilience}."
            )
        self.layer_loss_tokens = _parse_tokens(self.layer_loss_tokens)
        if not is_number(self.readout_budget) or not 0 < self.readout_budget <= 10:
            raise ValueError(
                f"`readout_budget` must be a fraction of the step's FLOPs in (0, 10], got {self.readout_budget!r}."
            )
        if not isinstance(self.feasibility_window, int) or self.feasibility_window < 1:
            raise ValueError(f"`feasibility_window` must be an integer >= 1, got {self.feasibility_window!r}.")
        refuse_unread_fields(self)


WARMUP_FIELDS = ("constraint_warmup_steps", "constraint_warmup_epochs")
DUAL_ASCENT_FIELDS = (
    "dual_lr", "dual_optimizer", "dual_init", "resilience", "dual_max", "resilience_restarts",
    *(name for name, (picker, _) in read_only_by().items() if picker == "dual_optimizer"),
)  # fmt: skip


def mode_fields(constraints: str) -> set[str]:
    """The constraint fields beyond the layers and their readout (which every mode measures) that a mode reads, from
    its flags and settings."""
    mode = mode_of(constraints)
    return {
        *(s.field for s in mode.settings.values()),
        *(("descent_alpha", "descent_epsilon") if mode.descent_terms else ()),
        *(DUAL_ASCENT_FIELDS if mode.ascends else ()),
        *(WARMUP_FIELDS if mode.trains_layers else ()),
    }


def unread_fields(constraints: str, dual_optimizer: str) -> dict[str, str]:
    """{field: why} for the constraint fields a config with these `constraints` and `dual_optimizer` does not read:
    those of the other modes and of the other dual optimizers. A sweep searches none of them."""
    out = {}
    read = mode_fields(constraints)
    for other in MODES:
        for name in mode_fields(other) - read:
            out[name] = f"`constraints: {constraints}` does not read it"
    picked = {"constraints": constraints, "dual_optimizer": dual_optimizer}
    for name, (picker, variants) in read_only_by().items():
        if name not in out and picked[picker] not in variants:
            out[name] = f"only `{picker}: {' / '.join(variants)}` reads it"
    return out


def _parse_tokens(value: object) -> int | str | None:
    """'auto', None (every token; also 'all' / 'none'), or an integer >= 1; the CLI hands over strings."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        if text in ("all", "none", "null"):
            return None
        value = int(text) if text.isdecimal() else value  # isdigit() passes "²", which int() refuses
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ValueError(f"`layer_loss_tokens` must be 'auto', 'all' / None, or an integer >= 1, got {value!r}.")


def _parse_layers(value: object) -> str | list[int]:
    """`'all'` or a strictly increasing list of positive ints; the CLI hands over a list of strings."""
    if isinstance(value, str):
        value = [value] if value.strip() == "all" else [v for v in value.replace(",", " ").split()]
    if isinstance(value, (list, tuple)) and len(value) == 1 and str(value[0]).strip() == "all":
        return "all"
    error = (
        f"`constrained_layers` must be 'all' or a strictly increasing list of 1-based layer indices, got {value!r}."
    )
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(error)
    layers = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise ValueError(error)
        try:
            layers.append(int(item))
        except ValueError:
            raise ValueError(error) from None
    if any(layer < 1 for layer in layers) or any(b <= a for a, b in zip(layers, layers[1:], strict=False)):
        raise ValueError(error)
    return layers


def _parse_alpha(value: object) -> float | list[float]:
    """A float, or a list of floats, each in (0, 1); a one-element list (what the CLI gives) is a float."""
    if isinstance(value, str):
        parts = value.replace(",", " ").split()
        value = parts[0] if len(parts) == 1 else parts
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    values: list[Any] = list(value) if isinstance(value, (list, tuple)) else [value]
    parsed = []
    for item in values:
        try:
            number = float(item) if not isinstance(item, bool) else math.nan
        except (TypeError, ValueError):
            number = math.nan
        if not 0.0 < number < 1.0:
            raise ValueError(f"`descent_alpha` values must lie in the open interval (0, 1), got {value!r}.")
        parsed.append(number)
    return parsed if isinstance(value, (list, tuple)) else parsed[0]
