"""
What a run does with the measured layers (the config's `constraints`), one class per mode, registered in `MODES`
(`@MODES.register`): the settings it reads (`settings`), its behaviour flags, and the `PrimalDual` settings it builds from a
config, and how it is described (`help`: the `constraints` field's text; `card_tag`, `card_text`: the model card's).
Nothing outside this registry compares or describes mode names: code asks the flags and the descriptions.

- `descent`: primal-dual training, the descent terms weighted by multipliers that ascend on their slack;
- `penalty`: the same terms with every multiplier fixed at `penalty_weight` (the penalty method, no dual ascent);
- `early_exit`: f_L + sum_l w_l f_l with fixed weights (LayerSkip's / torchtune's early-exit loss);
- `none`: ERM, every layer still measured (the dual state kept as `descent` would keep it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, TypedDict

from ..utils.registry import Registry
from .dual_optimizer import DualOptimizer, FixedDual, dual_optimizer_class
from .lagrangian import DescentConstraints
from .objectives import EARLY_EXIT_SCALES, EarlyExit, LayerObjective
from .variants import HasSettings, Setting, SettingValues, finite_at_least


class ModeSettings(TypedDict, total=False):
    """The keyword arguments of `PrimalDual` a mode decides from a config (the others every mode shares)."""

    enabled: bool  # False: ERM, the layers measured only
    dual_optimizer: type[DualOptimizer]
    dual_init: float
    dual_settings: SettingValues  # the dual optimizer's own settings (`DualOptimizer.read_settings`)
    objective: LayerObjective


class Mode(HasSettings, ABC):
    """
    One value of `constraints`. Flags: `trains_layers` (False: ERM, the layers are only measured), `ascends` (the
    multipliers ascend: the dual fields are read), `fixed_weights` (the layers' terms have constant weights, so
    resilience, which relaxes through the ascent, is refused), `descent_terms` (its loss reads the descent
    constraints: `descent_alpha`, `descent_epsilon`).
    """

    name: ClassVar[str]
    help: ClassVar[str]  # what `constraints: <name>` does, in the field's help (`--help`, the reference pages)
    card_tag: ClassVar[str]  # the model card's tag of a run in this mode
    card_text: ClassVar[str]  # the model card's "trained ..." clause
    trains_layers: ClassVar[bool] = True
    ascends: ClassVar[bool] = False
    fixed_weights: ClassVar[bool] = False
    descent_terms: ClassVar[bool] = True

    @classmethod
    @abstractmethod
    def primal_dual_settings(cls, config: Any, spec: DescentConstraints, num_layers: int) -> ModeSettings:
        """The keyword arguments of `PrimalDual` beyond the ones every mode shares, from `config`'s fields."""

    @classmethod
    def config_problem(cls, config: Any) -> str | None:
        """A refusal that needs other config fields beside the mode's own (None: allowed)."""
        return None


# the config's `constraints` values and their classes, in the order they are registered
MODES: Registry[Mode] = Registry("training mode", Mode, needs=("name", "help", "card_tag", "card_text"))


def mode_of(name: str) -> type[Mode]:
    """The mode named `name` (a config's `constraints`); another name is refused listing them."""
    if name not in MODES:
        raise ValueError(f"`constraints` must be one of {list(MODES)}, got {name!r}.")
    return MODES[name]


@MODES.register
class Descent(Mode):
    """Primal-dual training: the descent terms weighted by multipliers that ascend on their slack (the dual
    optimizer's own settings from the config fields it names)."""

    name = "descent"
    ascends = True
    help = "every constrained layer must reduce the loss of the previous one (primal-dual training)."
    card_tag = "descent-constraints"
    card_text = (
        "with descent constraints: trained by primal-dual learning so that every constrained layer's readout loss "
        "falls below (1 - alpha) times the one before it, f_l <= (1 - alpha) f_(l-1), as the steps of a descent "
        "algorithm do"
    )

    @classmethod
    def primal_dual_settings(cls, config: Any, spec: DescentConstraints, num_layers: int) -> ModeSettings:
        method = dual_optimizer_class(config.dual_optimizer)
        return {"dual_optimizer": method, "dual_init": config.dual_init, "dual_settings": method.read_settings(config)}


@MODES.register
class Penalty(Mode):
    """The penalty method: the same terms with every multiplier fixed at `penalty_weight` (no dual ascent)."""

    name = "penalty"
    fixed_weights = True
    help = "the same descent terms with a fixed weight `penalty_weight` and no dual ascent (the penalty method)."
    card_tag = "descent-penalty"
    card_text = "with the descent terms as a fixed-weight penalty (no dual ascent): the constraints were measured, not enforced"
    settings = {
        "weight": Setting(
            "penalty_weight",
            help="`constraints: penalty`: the fixed multiplier of every descent term, f_L + w sum_c g_c (>= 0; 0 trains "
            "exactly as `constraints: none`).",
            valid=finite_at_least(0.0),
            requirement="must be a finite number >= 0",
        ),
    }

    @classmethod
    def primal_dual_settings(cls, config: Any, spec: DescentConstraints, num_layers: int) -> ModeSettings:
        return {"dual_optimizer": FixedDual, "dual_init": config.penalty_weight}

    @classmethod
    def config_problem(cls, config: Any) -> str | None:
        if config.dual_max is not None and config.penalty_weight > config.dual_max:
            return f"`penalty_weight` ({config.penalty_weight}) must not exceed `dual_max` ({config.dual_max})."
        return None


@MODES.register
class EarlyExitLoss(Mode):
    """Fixed per-layer weights on the measured layers below L; the multipliers stay 0 and unused."""

    name = "early_exit"
    fixed_weights = True
    descent_terms = False
    help = (
        "f_L plus fixed per-layer weights on the layers below (`early_exit_scale`, `early_exit_weight`; LayerSkip's / "
        "torchtune's early-exit loss)."
    )
    card_tag = "early-exit"
    card_text = (
        "with an early-exit objective (the final loss plus a fixed weight on each constrained layer's loss): the "
        "descent constraints were measured, not enforced"
    )
    settings = {
        "scale": Setting(
            "early_exit_scale",
            help="`constraints: early_exit`: torchtune's rule for the scale s(l) of each constrained layer l below L: "
            "'uniform' (1), 'linear' (l), 'sum' (the running sum of the exit layers), 'sqrt', 'inv' (1/l), "
            "'inv_sqrt'. Each gets the weight early_exit_weight x s(l) / s(L).",
            choices=tuple(EARLY_EXIT_SCALES),
        ),
        "weight": Setting(
            "early_exit_weight",
            help="`constraints: early_exit`: torchtune's e_scale (>= 0; 0 trains exactly as `constraints: none`). f_L keeps "
            "weight 1: torchtune divides every exit by the sum of the scales, a constant factor that Adam ignores.",
            valid=finite_at_least(0.0),
            requirement="must be a finite number >= 0",
        ),
    }

    @classmethod
    def primal_dual_settings(cls, config: Any, spec: DescentConstraints, num_layers: int) -> ModeSettings:
        objective = EarlyExit.from_scale(spec.layers, num_layers, config.early_exit_scale, config.early_exit_weight)
        return {"dual_optimizer": FixedDual, "dual_init": 0.0, "objective": objective}


@MODES.register
class Unconstrained(Mode):
    """ERM: nothing added to the loss; the layers measured, the (unused) dual state kept as `descent` would keep it."""

    name = "none"
    trains_layers = False
    descent_terms = False
    help = "the ERM baseline, trained exactly like `SFTTrainer`."
    card_tag = "erm"
    card_text = (
        "without constraints (ERM, the twin a constrained run is compared with): the layer losses below were "
        "measured, not trained"
    )

    @classmethod
    def primal_dual_settings(cls, config: Any, spec: DescentConstraints, num_layers: int) -> ModeSettings:
        return {**Descent.primal_dual_settings(config, spec, num_layers), "enabled": False}


ERM = Unconstrained.name  # the mode an ERM twin or a measuring trainer is set to
