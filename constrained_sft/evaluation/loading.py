"""What a saved run tells an evaluation: its training report (`constraints.json`), the noise scale and training level
it recorded, the layers it constrained; and the versions a result was computed with."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version

from ..config import training_level
from ..constraints.feasibility import REPORT, FeasibilityReport
from ..utils.files import read_saved
from ..version import VERSION


def auto_bf16() -> bool:
    """bf16 weights where the device has them, what every evaluation command takes when `--bf16` is not given (fp32 on
    CPU)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def training_report(path: str, flag: str = "--models") -> FeasibilityReport | None:
    """The feasibility report (`constraints.json`) written at the end of training, None where the folder has none;
    a damaged one is refused naming `flag`."""
    return read_saved(path, REPORT, FeasibilityReport.from_dict, flag) if os.path.isdir(path) else None


def reference_sigma(given: float | None, first_model: str) -> tuple[float | None, str | None]:
    """(sigma_x, where it comes from) for a comparison: `recorded_scale` of `--sigma_x` and `noise_sigma_x`."""
    return recorded_scale(given, first_model, "--sigma_x", "noise_sigma_x")


def recorded_scale(given: float | None, first_model: str, flag: str, field: str) -> tuple[float | None, str | None]:
    """(a noise scale, where it comes from) for a comparison: as given by `flag`, else as the first model's training
    recorded it (`field` of its constraints.json: `noise_sigma_x`, a VLM's `noise_image_sigma_x`); (None, None)
    when neither says, and the caller measures the first model."""
    if given is not None:
        return given, flag
    recorded = getattr(training_report(first_model), field, None)
    if recorded is not None:
        return float(recorded), f"{field} in {os.path.join(first_model, REPORT)}"
    return None, None


def recorded_gamma(given: float | None, first_model: str, recipe: dict) -> float:
    """The training noise level, the ID / OOD boundary: as given, else the first model's `constraints.json`, else
    the recipe's `noise_gamma`, else 0."""
    if given is not None:
        return given
    report = training_report(first_model)
    recorded = report.noise_gamma if report is not None else None
    return training_level(recorded if recorded is not None else recipe.get("noise_gamma", 0.0))


def trained_layers(choice: str, path: str):
    """`--layers`: 'trained' (the layers the model's `constraints.json` names, else all), 'all', or indices."""
    if choice == "trained":
        report = training_report(path)
        return report.layers if report is not None and report.layers else "all"  # a report without its layers: all
    if choice == "all":
        return "all"
    return layer_indices(choice)


def layer_indices(choice: str) -> list[int]:
    """`--layers` as comma-separated layer indices (1 = the first layer's output), refused in one line otherwise."""
    parts = choice.replace(",", " ").split()
    if not parts or not all(p.isdecimal() and int(p) >= 1 for p in parts):  # isdigit() passes "²": int() fails
        raise ValueError(
            f"`--layers` must be 'trained', 'all', or comma-separated layer indices >= 1 (e.g. 2,4,6), got {choice!r}."
        )
    return [int(p) for p in parts]


def versions(*packages: str) -> dict[str, str]:
    """Installed versions of `packages`; this library's own from the package when it runs from a source checkout."""
    out = {"constrained-sft": VERSION}
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out
