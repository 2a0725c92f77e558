"""Training warned by the cluster (`trainers.signals.SaveOnSignal`): the signal noted, a checkpoint saved at the end
of the step it came in, `Interrupted` raised once it is on disk, and the handlers found put back; resumed from that
checkpoint, the run ends where the uninterrupted one does."""

import os
import signal

import pytest
import torch
from datasets import Dataset
from transformers import Trainer, TrainerCallback, TrainingArguments

from constrained_sft.testing import tiny_causal_lm
from constrained_sft.trainers.signals import SaveOnSignal
from constrained_sft.utils.interrupt import Interrupted


class Warn(TrainerCallback):
    """Sends this process `signum` at the start of step `at` (as Slurm does, from outside the training loop)."""

    def __init__(self, signum: int, at: int) -> None:
        self.signum, self.at = signum, at

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            os.kill(os.getpid(), self.signum)


def trainer(out, *callbacks) -> Trainer:
    args = TrainingArguments(str(out), max_steps=6, per_device_train_batch_size=4, learning_rate=1e-2, use_cpu=True,
                             report_to="none", save_strategy="no", seed=0, disable_tqdm=True)  # fmt: skip
    ids = torch.randint(0, 32, (32, 8), generator=torch.Generator().manual_seed(0)).tolist()
    data = Dataset.from_list([{"input_ids": i, "labels": i} for i in ids])
    return Trainer(tiny_causal_lm("llama", seed=0), args, train_dataset=data, callbacks=list(callbacks))


@pytest.mark.parametrize("signum", [signal.SIGUSR2, signal.SIGTERM])
def test_a_warned_run_saves_at_the_step_stops_and_resumes_to_the_same_end(tmp_path, signum):
    before = signal.signal(signum, lambda *_: pytest.fail("the handler in place ran: the signal was not deferred"))
    try:
        with pytest.raises(Interrupted) as stopped:
            trainer(tmp_path / "run", SaveOnSignal(), Warn(signum, 2)).train()
        assert stopped.value.signum == signum
        assert sorted(os.listdir(tmp_path / "run")) == ["checkpoint-3"]  # step 2 warned, saved as it ended
        handler = signal.getsignal(signum)  # put back: the one found before
        assert callable(handler) and handler.__name__ == "<lambda>"
    finally:
        signal.signal(signum, before)
    resumed = trainer(tmp_path / "run", SaveOnSignal())
    resumed.train(resume_from_checkpoint=True)
    whole = trainer(tmp_path / "whole")
    whole.train()
    for (name, a), b in zip(resumed.model.state_dict().items(), whole.model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
