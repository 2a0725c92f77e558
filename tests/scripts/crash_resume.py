"""
One attempt of a constrained run that may be SIGKILLed, for tests/trainers/test_crash_resume.py and
benchmarks/crash_resume.py.

    python crash_resume.py <sft|classifier> <output_dir> <kill> [<overrides-json>]

resumes with `resume_from_checkpoint=True` whenever `output_dir` holds a checkpoint folder, and `kill` says where
this attempt SIGKILLs itself (on rank `RANK`, default 0; `kill` = 'rank<r>:<point>' picks another rank):

- `none`: run to the end, then write `final.safetensors` (weights, multipliers, dual-optimizer tensors) and
  `final.json` (the rest of the constraint state) to `output_dir`;
- `step:N`: at the end of optimizer step N, before its logging, checkpoint or evaluation;
- `save:N:model|rng|state|marker|constraint` inside the save of checkpoint N: after the weights, before the RNG
  state, halfway through writing trainer_state.json, before the completion marker, or inside the atomic write of the
  constraint state (its temporary file written, not yet renamed);
- `eval:N`: during the evaluation at step N, on its second batch;
- `report`: inside the atomic write of constraints.json at the end of training.
"""

import json
import os
import signal
import sys
import warnings

if __name__ == "__main__":  # imported by the test and the benchmark for `finished` / `largest_difference`
    warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import Trainer, TrainerCallback, TrainerState  # noqa: E402

from constrained_sft import (  # noqa: E402
    ConstrainedConfig,
    ConstrainedSFTConfig,
    ConstrainedSFTTrainer,
    ConstrainedTrainer,
)
from constrained_sft.testing import (  # noqa: E402
    presence_dataset,
    successor_dataset,
    tiny_causal_lm,
    tiny_encoder,
    tiny_tokenizer,
)
from constrained_sft.testing.vlm import image_dataset, tiny_vlm_pair  # noqa: E402
from constrained_sft.trainers.resume import overrides, select  # noqa: E402
from constrained_sft.trainers.resume.files import to_files  # noqa: E402
from constrained_sft.utils import files  # noqa: E402 - the atomic writes' module

# Every random stream on: token sampling, a gamma range with a clean probability, the Adam dual with resilience,
# 2 accumulated micro-batches, an epoch boundary at step 8, a checkpoint every 2 steps, noisy evaluation every 4.
CONFIG = dict(
    report_to="none", use_cpu=True, disable_tqdm=True, seed=0, learning_rate=3e-3, logging_steps=1, max_steps=12,
    per_device_train_batch_size=2, gradient_accumulation_steps=2, per_device_eval_batch_size=4,
    save_strategy="steps", save_steps=2, eval_strategy="steps", eval_steps=4, eval_noise_gammas=[1.0],
    dual_optimizer="adam", dual_lr=0.05, resilience=0.1, descent_alpha=0.1, noise_gamma=[0.0, 1.0],
    noise_clean_prob=0.3, dataloader_num_workers=0,
)  # fmt: skip


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(kill: str, rank: int, trainer) -> TrainerCallback:
    """Install the kill point `kill` (see the module docstring); a callback when it needs one."""
    if kill.startswith("rank"):
        target, kill = kill.split(":", 1)
        kill = kill if int(target.removeprefix("rank")) == rank else "none"
    where, *rest = kill.split(":")
    step = int(rest[0]) if rest else None
    state = {"step": -1}

    class Watch(TrainerCallback):
        def on_train_begin(self, args, s, control, **kwargs):
            if os.environ.get("CRASH_STARTED"):  # for kills from outside: training (not importing) has begun
                open(os.environ["CRASH_STARTED"], "w").close()

        def on_step_end(self, args, s, control, **kwargs):
            state["step"] = s.global_step
            if where == "step" and s.global_step == step:
                die()

    if where == "save":
        stage = rest[1]
        if stage in ("model", "rng"):
            name = {"model": "_save_optimizer_and_scheduler", "rng": "_save_rng_state"}[stage]
            original = getattr(Trainer, name)

            def patched(self, *a, **kw):
                if state["step"] == step:
                    die()
                return original(self, *a, **kw)

            setattr(Trainer, name, patched)
        elif stage == "state":
            original_save = TrainerState.save_to_json

            def half(self, path):
                if state["step"] == step:
                    text = json.dumps(self.__dict__, default=str)
                    with open(path, "w") as f:
                        f.write(text[: len(text) // 2])
                    die()
                return original_save(self, path)

            TrainerState.save_to_json = half
        elif stage == "marker":
            original_mark = overrides.mark_complete  # as the save calls it

            def mark(directory, global_step):
                if global_step == step:
                    die()
                return original_mark(directory, global_step)

            overrides.mark_complete = mark
        elif stage == "constraint":
            kill_on_replace("constraint_state.json", lambda: state["step"] == step)
    elif where == "eval":
        original_step = trainer.prediction_step  # the subclass's own (TRL overrides it)
        batches = {"n": 0}

        def predict(*a, **kw):
            if state["step"] == step:
                batches["n"] += 1
                if batches["n"] == 2:
                    die()
            return original_step(*a, **kw)

        trainer.prediction_step = predict
    elif where == "report":
        kill_on_replace("constraints.json", lambda: True)
    elif where not in ("none", "step"):
        raise ValueError(f"unknown kill point {kill!r}")
    return Watch()


def kill_on_replace(name: str, when) -> None:
    """SIGKILL in the atomic write of `name`, after its temporary file is written and before the rename."""
    replace = files.os.replace

    def patched(src, dst):
        if os.path.basename(dst) == name and when():
            die()
        return replace(src, dst)

    files.os.replace = patched


def build(task: str, output_dir: str, overrides: dict):
    """`task` 'sft', 'sft-streamed' (the same rows as an IterableDataset), 'vlm' (a tiny Idefics3 on images, noise on
    text and image features) or 'classifier'."""
    kw = {**CONFIG, "output_dir": output_dir, **overrides}
    if task == "vlm":
        model, processor = tiny_vlm_pair("idefics3")
        return ConstrainedSFTTrainer(
            model=model,
            args=ConstrainedSFTConfig(**kw, bf16=False, max_length=None, layer_loss_tokens=3),
            train_dataset=image_dataset(16),
            eval_dataset=image_dataset(4, seed=1),
            processing_class=processor,
        )
    if task.startswith("sft"):
        rows = successor_dataset(32)
        return ConstrainedSFTTrainer(
            model=tiny_causal_lm("llama"),
            args=ConstrainedSFTConfig(**kw, bf16=False, layer_loss_tokens=3),
            train_dataset=rows.to_iterable_dataset() if task == "sft-streamed" else rows,
            eval_dataset=successor_dataset(16, seed=1),
            processing_class=tiny_tokenizer(),
        )
    return ConstrainedTrainer(
        model=tiny_encoder(),
        args=ConstrainedConfig(**kw),
        train_dataset=presence_dataset(32),
        eval_dataset=presence_dataset(16, seed=1),
        data_collator=transformers.DataCollatorWithPadding(tiny_tokenizer()),
    )


def dump(trainer, output_dir: str) -> None:
    """The finished run's weights and full constraint state, for an exact comparison."""
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in trainer.model.state_dict().items()}
    dual, meta = to_files(trainer.primal_dual.state_dict())  # the checkpoint's own form of the constraint state
    tensors.update({f"dual.{k}": v for k, v in dual.items()})
    suffix = f".rank{trainer.args.process_index}" if trainer.args.world_size > 1 else ""
    save_file(tensors, os.path.join(output_dir, f"final{suffix}.safetensors"))
    with open(os.path.join(output_dir, f"final{suffix}.json"), "w") as f:
        json.dump(meta, f, sort_keys=True)


def finished(output_dir, suffix: str = "") -> tuple[dict, dict]:
    """(tensors, constraint-state JSON) that `dump` wrote in `output_dir`."""
    with open(os.path.join(output_dir, f"final{suffix}.json")) as f:
        return load_file(os.path.join(output_dir, f"final{suffix}.safetensors")), json.load(f)


def largest_difference(a: tuple[dict, dict], b: tuple[dict, dict]) -> float:
    """Largest absolute difference between two `finished` runs holding the same tensors; inf when their JSON
    (settings, dual-optimizer scalars such as Adam's step, the feasibility history) differs."""
    (ta, ja), (tb, jb) = a, b
    assert ta.keys() == tb.keys()
    largest = max((ta[k].double() - tb[k].double()).abs().max().item() for k in ta)
    return largest if ja == jb else float("inf")


def main(task: str, output_dir: str, kill: str, overrides: str = "{}") -> None:
    rank = int(os.environ.get("RANK", 0))
    trainer = build(task, output_dir, json.loads(overrides))
    trainer.add_callback(arm(kill, rank, trainer))
    resume = bool(select.checkpoints(output_dir))
    trainer.train(resume_from_checkpoint=resume)
    dump(trainer, output_dir)
    trainer.accelerator.wait_for_everyone()
    if hasattr(trainer, "end"):
        trainer.end()


def forked(argv: list[str], env: dict[str, str], stderr_path: str) -> None:
    """`python crash_resume.py ARGV` with `env`, in a child of the test's fork server, which imported this module (and
    with it torch, transformers and the package: ~4.5 s a process) once; stderr to `stderr_path`, stdout dropped. The
    child is a new process like the script's: a kill ends it, and nothing of an earlier attempt is in its memory."""
    os.environ.update(env)
    os.dup2(os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    main(*argv)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(*sys.argv[1:])
