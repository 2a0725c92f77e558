"""
The feasibility report written as `constraints.json` at the end of training: per-layer losses, multipliers and mean
slack over the last optimizer steps the constraints were active, and which constraints hold there.

Two verdicts per constraint. **Strict**: the mean slack g is <= 0 (the descent constraint itself holds). **Relaxed**:
the mean of g - rho * lambda is <= 0, i.e. the constraint holds as resilient learning relaxes it (Appendix A.5: the
dual weight decay rho relaxes constraint c by u_c = rho * lambda_c, so a constraint that binds settles at
g = rho * lambda > 0). "Not above zero" allows for the step-to-step noise of sampled layer losses: the relaxed
verdict fails only when the mean gap exceeds twice its standard error over the window (and 1e-6). Without
resilience the strict verdict decides `feasible`; with resilience the relaxed one does (`feasible_by` says which).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..utils.fields import known_keys
from ..utils.types import JSONObject, JSONRead
from .lagrangian import DescentConstraints

REPORT = "constraints.json"  # the report's file name in a run's output_dir
SHOWN = 6  # constraints a message lists by name before "and N more"
GAP_FLOOR = 1e-6  # nats: below this a relaxed constraint counts as met whatever the noise estimate says


@dataclass
class FeasibilityReport:
    """
    The feasibility of a run over its last optimizer steps with the constraints active (`constraints.json`, its one
    JSON form): the layers and their descent factors, each layer's mean loss and each constraint's multiplier, mean
    slack and relaxation (keyed by layer as a string, the epsilon bound by "epsilon"), whether each holds strictly,
    as relaxed and by the verdict `feasible_by` names, and the run's own facts (objective, dual optimizer, step, the
    noise it trained with and the scale sigma_x every evaluation of its models should share). Fields a run of an
    earlier version did not record take their defaults when read.
    """

    constraints: bool = True
    layers: list[int] = field(default_factory=list)
    alpha: list[float] = field(default_factory=list)
    epsilon: float | None = None
    resilience: float = 0.0
    window_steps: list[int] | None = None
    layer_loss: dict[str, float] = field(default_factory=dict)
    dual: dict[str, float] = field(default_factory=dict)
    slack: dict[str, float] = field(default_factory=dict)
    relaxation: dict[str, float] = field(default_factory=dict)
    holds_strict: dict[str, bool] = field(default_factory=dict)
    holds_relaxed: dict[str, bool] = field(default_factory=dict)
    holds: dict[str, bool] = field(default_factory=dict)
    feasible_by: str = "strict"
    feasible: bool = False
    descent_fraction: float | None = None
    skipped_dual_steps: int = 0
    objective: str | None = None
    dual_optimizer: str | None = None
    enforced: bool = True  # False: fixed weights (penalty, early exit): the constraints were measured, not enforced
    nonfinite_steps_skipped: int = 0
    global_step: int | None = None
    noise_gamma: float | list[float] | None = None  # a level, or the [low, high] range each example drew from
    noise_sigma_x: float | None = None
    noise_image_sigma_x: float | None = None  # a VLM's image-feature scale (`noise_image_sigma`), where it had one

    def to_dict(self) -> JSONObject:
        out: JSONObject = dataclasses.asdict(self)
        return out

    @classmethod
    def from_dict(cls, data: JSONRead) -> FeasibilityReport:
        return cls(**known_keys(cls, data, f"the feasibility report ({REPORT})"))


@dataclass
class WindowStep:
    """
    One optimizer step of the feasibility window as `PrimalDual.step` records it: the step (1-based), each layer's
    sampled loss, each constraint's slack, multiplier and relaxation u (None in windows saved before the relaxation
    was recorded: rho * lambda then), the step's descent share and whether the dual step ran. Saved with a checkpoint
    in its `to_dict` form.
    """

    step: int
    layer_loss: list[float]
    slack: list[float]
    dual: list[float]
    relaxation: list[float] | None = None
    descent_fraction: float | None = None
    dual_updated: bool = True

    def relaxation_at(self, resilience: float) -> list[float]:
        """u per constraint: the recorded relaxation, else rho * lambda."""
        return self.relaxation if self.relaxation is not None else [resilience * d for d in self.dual]

    def to_dict(self) -> JSONObject:
        out: JSONObject = dataclasses.asdict(self)
        return out

    @classmethod
    def from_dict(cls, data: JSONRead) -> WindowStep:
        return cls(**known_keys(cls, data, "the feasibility window of a checkpoint"))


def window_means(vectors: Sequence[list[float]]) -> list[float]:
    """Elementwise mean of per-step vectors ([steps, n] -> [n]); empty without steps."""
    return torch.tensor(vectors, dtype=torch.float64).mean(0).tolist() if vectors else []


def relaxed_holds(rows: Sequence[WindowStep], resilience: float) -> list[bool]:
    """Per constraint: is the mean of g_t - u_t over the window not above zero (2 standard errors)? u_t is the
    recorded relaxation (rho * lambda_t in the weight-decay form; older windows have none: rho * lambda_t)."""
    if not rows:
        return []
    gap = torch.tensor([r.slack for r in rows], dtype=torch.float64) - torch.tensor(
        [r.relaxation_at(resilience) for r in rows], dtype=torch.float64
    )  # [steps, C]
    error = gap.std(0) / math.sqrt(len(rows)) if len(rows) > 1 else torch.zeros(gap.size(1), dtype=torch.float64)
    return (gap.mean(0) <= (2 * error).clamp(min=GAP_FLOOR)).tolist()


def feasibility_report(
    spec: DescentConstraints,
    rows: Sequence[WindowStep],
    dual: list[float],
    enabled: bool,
    skipped_dual_steps: int,
    resilience: float = 0.0,
) -> FeasibilityReport:
    """
    Feasibility over the recorded window `rows` (one per optimizer step with the constraints active, as
    `PrimalDual.step` records them; every step for an unconstrained run). `dual` is the current multiplier of each
    constraint.
    """
    keys = list(map(str, spec.keys))
    layer_loss, slack_mean = window_means([r.layer_loss for r in rows]), window_means([r.slack for r in rows])
    strict = [s <= 0 for s in slack_mean]
    relaxed = relaxed_holds(rows, resilience)
    feasible_by = "relaxed" if resilience > 0 else "strict"
    holds = relaxed if resilience > 0 else strict
    fractions = [r.descent_fraction for r in rows if r.descent_fraction is not None]
    relaxation = window_means([r.relaxation_at(resilience) for r in rows])
    return FeasibilityReport(
        constraints=enabled,
        layers=list(spec.layers),
        alpha=list(spec.alphas),
        epsilon=spec.epsilon,
        resilience=resilience,
        window_steps=[rows[0].step, rows[-1].step] if rows else None,
        layer_loss=dict(zip(map(str, spec.layers), layer_loss, strict=False)),
        dual=dict(zip(keys, dual, strict=True)),
        slack=dict(zip(keys, slack_mean, strict=False)),
        relaxation=dict(zip(keys, relaxation, strict=False)),
        holds_strict=dict(zip(keys, strict, strict=False)),
        holds_relaxed=dict(zip(keys, relaxed, strict=False)),
        holds=dict(zip(keys, holds, strict=False)),
        feasible_by=feasible_by,
        feasible=bool(rows) and all(holds),
        descent_fraction=(sum(fractions) / len(fractions)) if fractions else None,
        skipped_dual_steps=skipped_dual_steps,
    )


def verdict_message(report: FeasibilityReport, dual_max: float | None = None) -> tuple[int, str] | None:
    """
    (logging level, message) about a constrained run's report, with advice that fits the case, or None when every
    constraint holds strictly. Infeasible is a warning; holding only as relaxed by resilience is information.
    """
    if not report.constraints:
        return None
    steps = report.window_steps
    where = f"over optimizer steps {steps[0]}-{steps[1]}" if steps else "(no step with the constraints active)"
    if not report.enforced:  # penalty / early exit: the constraints are measured, not enforced
        held = sum(report.holds.values())
        return logging.INFO, (
            f"The descent constraints were measured, not enforced (objective `{report.objective}` with fixed "
            f"weights, no dual ascent): {held} of {len(report.holds)} hold {where}."
        )
    if not report.feasible:
        broken = [k for k, ok in report.holds.items() if not ok]
        if report.feasible_by == "strict":
            advice = (
                "train longer, raise `dual_lr`, lower `descent_alpha` or constrain fewer layers, or set `resilience` "
                "> 0 to relax the constraints that cannot be met"
            )
        else:
            capped = [k for k in broken if dual_max is not None and report.dual[k] >= dual_max]
            advice = (
                f"the multipliers of layers {capped} sit at `dual_max`={dual_max}: raise it or lower `resilience`"
                if capped
                else "the multipliers have not settled (slack still above resilience x lambda): train longer or "
                "raise `dual_lr`"
            )
        slacks = ", ".join(f"{k}: {report.slack[k]:+.3g}" for k in broken[:SHOWN])
        more = f" and {len(broken) - SHOWN} more" if len(broken) > SHOWN else ""
        return logging.WARNING, (
            f"Constrained training ended infeasible. Constraints that do not hold {where} (`feasible_by`: "
            f"{report.feasible_by}), with their mean slack (in the loss: nats for cross-entropy): layer {slacks}{more}. To change: {advice}."
        )
    relaxed_only = [k for k, ok in report.holds_strict.items() if not ok]
    if relaxed_only:
        sizes = ", ".join(f"{k}: {report.relaxation[k]:.3g}" for k in relaxed_only)
        return logging.INFO, (
            f"The constraints on layers {relaxed_only} hold {where} only as relaxed by resilience x lambda (mean "
            f"relaxation (in the loss): {sizes}); lower `resilience` for a stricter descent."
        )
    return None


WIDE_MARGIN = 10.0  # a bound this many times below the loss the last layer starts at is taken as out of reach


def last_layer_bound(spec: DescentConstraints, first_loss: float) -> float:
    """
    The bound the constraints imply on the last constrained layer when every one holds: epsilon x prod(1 - alpha_l)
    with the epsilon bound, else f_first x prod(1 - alpha_l) from the first constrained layer's loss `first_loss`.
    """
    start = spec.epsilon if spec.epsilon is not None else first_loss
    return start * math.prod(1 - a for a in spec.alphas)


def bound_message(spec: DescentConstraints, layer_loss: dict[int, float]) -> str | None:
    """A warning, with the numbers, when the implied last-layer bound is `WIDE_MARGIN` times below the loss the
    last constrained layer has now (`layer_loss`: measured losses by layer, at the first step); else None."""
    first, last = spec.layers[0], spec.layers[-1]
    if last not in layer_loss or not spec.alphas:
        return None
    bound = last_layer_bound(spec, layer_loss[first])
    if bound * WIDE_MARGIN >= layer_loss[last]:
        return None
    start = f"descent_epsilon {spec.epsilon:g}" if spec.epsilon is not None else f"f_{first} {layer_loss[first]:.3g}"
    alphas = sorted(set(spec.alphas))
    factor = f"(1 - {alphas[0]:g})^{len(spec.alphas)}" if len(alphas) == 1 else "prod(1 - alpha_l)"
    return (
        f"The constraints imply f_{last} <= {start} x {factor} = {bound:.3g} nats, {layer_loss[last] / bound:.0f}x "
        f"below the {layer_loss[last]:.3g} nats layer {last} has at the first step: they are most likely infeasible, "
        "and training would rest on resilience alone. Lower `descent_alpha` (a per-layer ratio 1 - alpha near 1 "
        "for deep models), constrain fewer layers, raise `descent_epsilon`, or mean it and set `resilience`."
    )
