"""The `constrained-sft train` command: recipes, data formats, errors that write nothing, accelerate configs."""

import glob
import json
import os
from pathlib import Path

import pytest
import yaml
from conftest import hang_limit, launch_failure, launch_on_cpu
from datasets import Dataset

from constrained_sft.cli import main as cli
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL_YAML = sorted(glob.glob(os.path.join(ROOT, "recipes", "**", "*.yaml"), recursive=True))
SPACES = [p for p in ALL_YAML if os.path.basename(p) == "sweep.yaml"]  # search spaces beside their recipes
RECIPES = [p for p in ALL_YAML if p not in SPACES]
ACCELERATE_CONFIGS = sorted(glob.glob(os.path.join(ROOT, "accelerate_configs", "*.yaml")))


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-model")
    tiny_causal_lm("llama").save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def _rows(fmt, n=24):
    rows = list(successor_dataset(n))
    if fmt == "alpaca":
        return [{"instruction": "continue", "input": r["prompt"], "output": r["completion"].strip()} for r in rows]
    if fmt == "sharegpt":
        return [
            {"conversations": [{"from": "human", "value": r["prompt"]}, {"from": "gpt", "value": r["completion"]}]}
            for r in rows
        ]
    if fmt == "messages":
        return [
            {"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]}
            for r in rows
        ]
    if fmt == "text":
        return [{"text": r["prompt"] + r["completion"]} for r in rows]
    return rows  # prompt_completion


def _write(path, rows):
    ext = os.path.splitext(path)[1]
    if ext == ".json":
        with open(path, "w") as f:
            json.dump(rows, f)
    elif ext == ".jsonl":
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    else:
        ds = Dataset.from_list(rows)
        ds.to_parquet(path) if ext == ".parquet" else ds.to_csv(path, index=False)
    return str(path)


def _args(model_dir, data, out, *extra):
    return [
        "train",
        "--model_name_or_path",
        model_dir,
        "--dataset_name",
        data,
        "--output_dir",
        str(out),
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--per_device_eval_batch_size",
        "8",
        "--eval_size",
        "4",
        "--bf16",
        "false",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--learning_rate",
        "1e-3",
        "--disable_tqdm",
        "true",
        *extra,
    ]


@pytest.mark.parametrize(
    ("fmt", "ext"),
    [
        ("alpaca", ".json"),
        ("sharegpt", ".jsonl"),
        ("messages", ".parquet"),
        ("prompt_completion", ".csv"),
        ("text", ".jsonl"),
    ],
)
def test_trains_from_every_format(tmp_path, tiny_model_dir, fmt, ext, capsys):
    data = _write(tmp_path / f"data{ext}", _rows(fmt))
    out = tmp_path / "out"
    assert cli(_args(tiny_model_dir, data, out, "--evaluate_before_training", "true")) == 0
    assert (out / "constraints.json").exists() and (out / "model.safetensors").exists()
    printed = capsys.readouterr().out
    assert "held-out loss before" in printed and "constraints report" in printed


def test_sharegpt_first_turn_and_local_folder_splits(tmp_path, tiny_model_dir):
    folder = tmp_path / "data"
    folder.mkdir()
    _write(folder / "train.jsonl", _rows("sharegpt", 20))
    _write(folder / "test.jsonl", _rows("sharegpt", 6))
    out = tmp_path / "out"
    assert (
        cli(
            _args(
                tiny_model_dir, str(folder), out, "--dataset_test_split", "test", "--conversation_mode", "first_turn"
            )
        )
        == 0
    )
    assert (out / "constraints.json").exists()


def test_held_out_carve_is_reproducible(tmp_path):
    from constrained_sft.data import DataArguments, load_train_eval

    data = _write(tmp_path / "d.jsonl", _rows("prompt_completion", 50))
    first = load_train_eval(DataArguments(dataset_name=data, eval_size=0.2))
    second = load_train_eval(DataArguments(dataset_name=data, eval_size=0.2))
    assert first[1]["prompt"] == second[1]["prompt"] and len(first[1]) == 10 and len(first[0]) == 40
    other = load_train_eval(DataArguments(dataset_name=data, eval_size=0.2, dataset_seed=1))
    assert other[1]["prompt"] != first[1]["prompt"]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_recipe_parses_and_starts_with_its_command(recipe):
    with open(recipe) as f:
        first = f.readline()
    rel = os.path.relpath(recipe, ROOT)
    assert first.startswith("# ") and rel in first, first
    assert "constrained-sft train" in first or "-m constrained_sft train" in first, first
    import torch

    from constrained_sft.tasks.recipes import dataclass_parser, parse, recipe_and_task

    # bf16 recipes are for GPUs; transformers refuses bf16 at parse time elsewhere unless use_cpu is set
    overrides = [] if torch.cuda.is_available() else ["--use_cpu", "true"]
    _, task, argv = recipe_and_task(["--config", recipe, *overrides], "constrained-sft train")
    recipe_ = task.recipe(parse(dataclass_parser(task.parser_classes(), "train", ""), argv))
    assert recipe_.script.task == task.name and recipe_.training.output_dir
    if task.name == "video":
        assert recipe_.script.video_source and recipe_.script.architecture in rel
    else:
        assert recipe_.script.dataset_name and recipe_.model.model_name_or_path


@pytest.mark.parametrize("space", SPACES, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_search_space_loads_and_starts_with_its_command(space):
    """Each space file sits beside its recipe, starts with the command that runs it, and every bound passes the
    recipe's own config validation."""
    import torch

    from constrained_sft.sweep import check_ranges, load_space
    from constrained_sft.tasks.recipes import dataclass_parser, parse, recipe_and_task

    lines = Path(space).read_text().splitlines()
    command = lines[0]
    for line in lines[1:]:  # the command, continued over comment lines ending in a backslash
        if not command.endswith("\\"):
            break
        command = command[:-1] + line.lstrip("# ")
    assert command.startswith("# constrained-sft sweep --config "), command
    config = command.split("--config ")[1].split()[0]
    rel = os.path.relpath(space, ROOT)
    assert os.path.dirname(config) == os.path.dirname(rel) and f"--space {rel}" in command, command
    overrides = [] if torch.cuda.is_available() else ["--use_cpu", "true"]
    _, task, argv = recipe_and_task(["--config", os.path.join(ROOT, config), *overrides], "sweep")
    recipe = task.recipe(parse(dataclass_parser(task.parser_classes(), "sweep", ""), argv))
    spaces = load_space(space, type(recipe.training))
    assert set(spaces) == {"constrained", "erm"} and "dual_lr" in spaces["constrained"].names
    check_ranges(spaces, recipe.training)


def test_recipe_twins_differ_only_in_constraints():
    twins = [r for r in RECIPES if os.path.basename(r).startswith("constrained")]
    assert twins
    for constrained in twins:
        erm = os.path.join(os.path.dirname(constrained), os.path.basename(constrained).replace("constrained", "erm"))
        a, b = (yaml.safe_load(Path(p).read_text()) for p in (constrained, erm))
        differing = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
        # a twin tuned by `constrained-sft sweep --baseline erm` keeps ERM's own best learning rate and seed
        tuned = (
            {"learning_rate", "seed"}
            if os.path.exists(os.path.join(os.path.dirname(constrained), "sweep.yaml"))
            else set()
        )
        assert differing <= {"constraints", "output_dir", "run_name"} | tuned, (constrained, differing)
        assert b.get("constraints") == "none" and a.get("constraints", "descent") == "descent"


MODE_FIELDS = {"penalty": {"penalty_weight"}, "early_exit": {"early_exit_scale", "early_exit_weight"}}


def test_penalty_and_early_exit_recipes_differ_from_their_constrained_twin_only_in_the_objective():
    """The arms a user compares constrained training with: the objective's fields, no resilience (there is no dual
    ascent to relax), the output folder; every other line as the constrained recipe has it."""
    others = [r for r in RECIPES if os.path.basename(r) in ("penalty.yaml", "early-exit.yaml")]
    assert len(others) >= 4
    for path in others:
        a = yaml.safe_load(Path(os.path.join(os.path.dirname(path), "constrained.yaml")).read_text())
        b = yaml.safe_load(Path(path).read_text())
        mode = b["constraints"]
        differing = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
        assert differing <= {"constraints", "output_dir", "resilience", *MODE_FIELDS[mode]}, (path, differing)
        assert b.get("resilience", 0) == 0 and Path(path).read_text().count("(changed)") == len(differing)


def test_the_neftune_recipe_is_the_erm_twin_with_neftunes_noise_instead_of_gaussian():
    for path in [r for r in RECIPES if os.path.basename(r) == "neftune.yaml"]:
        erm = yaml.safe_load(Path(os.path.join(os.path.dirname(path), "erm.yaml")).read_text())
        neft = yaml.safe_load(Path(path).read_text())
        differing = {k for k in set(erm) | set(neft) if erm.get(k) != neft.get(k)}
        assert differing == {"neftune_noise_alpha", "noise_gamma", "output_dir"}, (path, differing)
        assert neft["noise_gamma"] == 0 and neft["neftune_noise_alpha"] > 0 and neft["constraints"] == "none"
        assert Path(path).read_text().count("(changed)") == len(differing)


@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=os.path.basename)
def test_accelerate_configs_load(path):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(path)
    assert config.distributed_type is not None and config.compute_environment is not None


def test_module_entry_point_under_accelerate_launch(tmp_path, tiny_model_dir):
    data = _write(tmp_path / "d.jsonl", _rows("prompt_completion", 32))
    out = tmp_path / "out"
    result = launch_on_cpu(2, "-m", "constrained_sft", *_args(tiny_model_dir, data, out), timeout=hang_limit(20))
    assert result.returncode == 0, launch_failure(result)
    report = json.loads((out / "constraints.json").read_text())
    assert report["global_step"] == 2
