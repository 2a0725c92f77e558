"""
Resume, in one place: every file a checkpoint gains and its format (`files`), which checkpoint a run resumes from and
whether it fits (`select`), the run folder's identity and the refusal of a folder that holds other work
(`run_folder`), and every private `Trainer` method the trainers override (`overrides`).
"""

from .files import ConstraintStateError, load_state, read_state, save_state
from .overrides import TrainerOverrides, prepare_inputs, trl_eval_metrics
from .run_folder import (
    RUN_JSON,
    OutputDirError,
    RunIdentity,
    check_output_dir,
    deciding,
    model_source,
    refusal_leaves_nothing,
    run_identity,
    start_run,
)
from .select import CheckpointError, resolve_resume

__all__ = [
    "RUN_JSON",
    "CheckpointError",
    "ConstraintStateError",
    "OutputDirError",
    "TrainerOverrides",
    "check_output_dir",
    "deciding",
    "load_state",
    "model_source",
    "prepare_inputs",
    "read_state",
    "refusal_leaves_nothing",
    "resolve_resume",
    "RunIdentity",
    "run_identity",
    "save_state",
    "start_run",
    "trl_eval_metrics",
]
