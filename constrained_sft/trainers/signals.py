"""
Training that stops cleanly when the cluster warns (`utils.interrupt`): `SaveOnSignal` notes USR2 / TERM while the
trainer runs, has the trainer save a checkpoint at the end of the optimizer step it is in (the constraint state goes
with it, as at every save: `resume/`), then raises `Interrupted` once that checkpoint is on disk. The run resumes
from it (`resume_from_checkpoint`) with the steps it had done. Added by the study's Slurm jobs; one process only (a
launch over several processes is stopped by the cluster, and resumes from its last periodic checkpoint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformers import TrainerCallback

from ..utils.interrupt import Deferred, Interrupted

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments


class SaveOnSignal(TrainerCallback):
    """See the module docstring. `caught` is the signal that stopped training (None: none came)."""

    def __init__(self) -> None:
        self.deferred = Deferred()

    @property
    def caught(self) -> int | None:
        return self.deferred.caught

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        self.deferred.arm()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        if self.caught is not None:
            control.should_save = True  # saved by the trainer right after this step, as at `save_steps`

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object) -> None:
        if self.caught is not None:
            self.deferred.disarm()
            raise Interrupted(self.caught)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        self.deferred.disarm()
