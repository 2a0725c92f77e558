"""
What both training commands do around training: evaluate (optionally before), train, evaluate, save, print the
layer table on rank 0, and shut down cleanly; and which command a recipe's `task` selects.
"""

from __future__ import annotations

import difflib
import gc
import os
import re

from ..constraints.state_io import REPORT


def train_and_report(trainer, evaluate_before: bool, accuracy_key: str | None = "mean_token_accuracy") -> dict:
    """Evaluate (optionally before), train, evaluate, save, print the layer table on rank 0, and shut down cleanly."""
    args = trainer.args
    before = trainer.evaluate(metric_key_prefix="before") if evaluate_before else {}
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    after = trainer.evaluate()
    trainer.save_model(args.output_dir)
    if trainer.is_world_process_zero():
        print(summary_table(trainer, before, after, accuracy_key=accuracy_key))
    finish(trainer)
    return {"before": before, "after": after}


def finish(trainer) -> None:
    """Wait for every rank, close trackers and the process group, then drop the DDP wrapper while Python is alive.

    Without the barrier a non-main rank (which writes no shards) tears its group down while rank 0 still saves. A
    DDP wrapper left for interpreter teardown keeps gloo's worker threads and their tensors alive until then, and
    freeing them there can abort the process at exit ("terminate called without an active exception").
    """
    trainer.accelerator.wait_for_everyone()
    if hasattr(trainer, "end"):  # transformers >= 5.18: finish trackers, destroy the process group
        trainer.end()
    trainer.accelerator.free_memory()  # the prepared model / optimizer / scheduler references, then gc.collect()
    trainer.model_wrapped = trainer.model
    gc.collect()


def summary_table(trainer, before: dict, after: dict, accuracy_key: str | None = "mean_token_accuracy") -> str:
    """Per-layer held-out losses before / after, the multipliers, and where the feasibility report is."""
    spec = trainer.primal_dual.spec
    duals = trainer.primal_dual.dual_metrics() if trainer.primal_dual.enabled else {}

    def fmt(value: float | None, spec: str = ".4g") -> str:
        return "-" if value is None else format(value, spec)

    lines = [f"\n{'layer':>6} {'held-out loss before':>21} {'after':>9} {'lambda':>9}"]
    for layer in spec.layers:
        lines.append(
            f"{layer:>6} {fmt(before.get(f'before_layer_loss/{layer}')):>21} "
            f"{fmt(after.get(f'eval_layer_loss/{layer}')):>9} {fmt(duals.get(f'dual/{layer}'), '.4f'):>9}"
        )
    rows = [("descent_fraction", "descent fraction"), ("feasible_fraction", "feasible fraction")]
    for key, label in rows + ([(accuracy_key, "accuracy")] if accuracy_key else []):
        lines.append(f"{label:>28}: {fmt(before.get(f'before_{key}'))} -> {fmt(after.get(f'eval_{key}'))}")
    lines.append(f"constraints report: {os.path.join(trainer.args.output_dir, REPORT)}")
    lines.append(f"model saved to: {trainer.args.output_dir}")
    return "\n".join(lines)


def recipe_task(argv: list[str]) -> str:
    """`task` from the command line (the last one given, as the parser reads it), else from the `--config` YAML,
    else 'sft'."""
    if "--task" in argv:
        return argv[len(argv) - argv[::-1].index("--task")]
    return read_recipe(argv).get("task", "sft")


def read_recipe(argv: list[str]) -> dict:
    """The `--config` YAML of `argv` ({} without one), refused unless it is a mapping of field names to values."""
    if "--config" not in argv:
        return {}
    import yaml

    at = argv.index("--config") + 1
    path = argv[at] if at < len(argv) else ""
    if not os.path.isfile(path):
        raise ValueError(f"`--config` {path!r} is not a file; give the path of a YAML recipe (see recipes/).")
    with open(path) as f:
        recipe = yaml.safe_load(f)
    if recipe is not None and not isinstance(recipe, dict):
        raise ValueError(
            f"`--config` {path} must be a YAML mapping of field names to values (see recipes/), got a "
            f"{type(recipe).__name__}."
        )
    return recipe or {}


def parse(parser, argv: list[str] | None, with_config: bool = True) -> tuple:
    """
    The parser's dataclasses from `argv` (and a `--config` YAML when `with_config`); an unknown key or flag is
    refused with the closest known fields, so a typo in a recipe never passes as a default.
    """
    argv = list(argv or [])
    if with_config:
        read_recipe(argv)  # a clear error for a missing or malformed recipe, before the parser's own
    try:
        if with_config:
            return parser.parse_args_and_config(argv)
        return parser.parse_args_into_dataclasses(argv)
    except ValueError as error:
        text = str(error)
        source = "recipe key" if "config file" in text else "flag"
        if "not used by the HfArgumentParser" not in text and "Unknown arguments" not in text:
            raise
        known = sorted({action.dest for action in parser._actions if action.dest != "help"})
        hints = []
        for name in dict.fromkeys(re.findall(r"'--([A-Za-z_][\w.-]*)'", text)):
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hints.append(f"`{name}` (did you mean {' / '.join(f'`{c}`' for c in close)}?)" if close else f"`{name}`")
        raise ValueError(
            f"Unknown {source}(s): {', '.join(hints) or text}. Recipe keys and flags are the fields that `--help` "
            "lists."
        ) from None
