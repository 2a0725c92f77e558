"""
What importing the package and asking for help load: `import constrained_sft` and `constrained-sft --help` load no
torch (as `import trl` loads none), a command's `--help` is printed from the help cache without torch once built, and
no command needs another command's dependencies (the sweep's database driver and Optuna, alpaca_eval, PyAV). The time
these take is a benchmark (`benchmarks/import_time.py`), not a test: here only which modules load.
"""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import hang_limit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAVY = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "numpy", "optuna", "sqlalchemy")
# each command's own dependencies; the others must not be needed
OTHERS = ("sqlalchemy", "optuna", "alpaca_eval", "av")
NEEDS = {"sweep": {"sqlalchemy", "optuna"}, "eval alpaca": {"alpaca_eval"}, "study": {"alpaca_eval"}}
COMMANDS = ["train", "eval robustness", "eval generate", "eval alpaca", "eval exits", "sweep", "study"]

PROBE = """
import json, os, sys
for name in os.environ.get("BLOCK", "").split(","):
    if name:
        sys.modules[name] = None  # as if not installed: `import name` fails, find_spec(name) is None
{body}
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}})))
"""


def _python(body: str, *, block=(), cache=None, **env) -> tuple[list[str], str]:
    """Run `body` in a fresh interpreter; (the top-level packages it loaded, its stdout before that line)."""
    environ = {**os.environ, "BLOCK": ",".join(block), "CONSTRAINED_SFT_HELP_CACHE": "1", **env}
    if cache is not None:
        environ["CONSTRAINED_SFT_CACHE"] = str(cache)
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(body=body)], capture_output=True, text=True, env=environ, cwd=ROOT,
        timeout=hang_limit(30),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    *out, loaded = done.stdout.rstrip("\n").split("\n")
    return json.loads(loaded), "\n".join(out)


def _help(argv: list[str]) -> str:
    return f"""
from constrained_sft.cli import main
try:
    main({argv!r})
except SystemExit as done:
    assert done.code == 0, done.code
"""


def test_a_bare_import_and_the_command_line_module_load_no_heavy_package():
    loaded, _ = _python("import constrained_sft, constrained_sft.cli; print(constrained_sft.__version__)")
    assert not set(HEAVY) & set(loaded), sorted(set(HEAVY) & set(loaded))


def test_every_public_name_is_still_importable_from_the_package():
    import constrained_sft

    assert sorted(constrained_sft.__all__) == sorted(constrained_sft._EXPORTS)  # noqa: SLF001
    for name in constrained_sft.__all__:
        assert getattr(constrained_sft, name).__name__ == name
    assert set(constrained_sft.__all__) <= set(dir(constrained_sft))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        constrained_sft.Nope  # noqa: B018


def test_the_version_is_written_once():
    """pyproject.toml reads the version from constrained_sft/version.py, and the installed metadata says the same."""
    from importlib.metadata import version

    from constrained_sft.version import VERSION

    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    assert not re.search(r'^version = "', text, re.M) and 'dynamic = ["version"]' in text
    assert 'version = { attr = "constrained_sft.version.VERSION" }' in text
    assert version("constrained-sft") == VERSION


def test_top_level_help_loads_no_torch():
    loaded, out = _python(_help(["--help"]))
    assert "usage: constrained-sft" in out and "torch" not in loaded


def test_a_commands_help_is_printed_from_the_cache_without_torch(tmp_path):
    """The first help builds and keeps the text; the second prints it without torch; the same recipe path with other
    contents (its `task` decides whose fields are shown) is another key."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("task: classification\n")
    argv = ["train", "--config", str(recipe), "--help"]
    built, first = _python(_help(argv), cache=tmp_path / "cache")
    assert "torch" in built and "--classifier_readout" in first
    cached, second = _python(_help(argv), cache=tmp_path / "cache")
    assert second == first and not set(HEAVY) & set(cached)
    recipe.write_text("task: video\n")
    os.utime(recipe, ns=(os.stat(recipe).st_atime_ns, os.stat(recipe).st_mtime_ns + 10**9))
    _, video = _python(_help(argv), cache=tmp_path / "cache")
    assert "--video_source" in video and len(os.listdir(tmp_path / "cache" / "help")) == 2


def _fake_help(text: str, code: int):
    def build() -> int:
        print(text)
        raise SystemExit(code)

    return build


def test_only_a_help_that_exits_0_is_kept_and_the_cache_can_be_turned_off(tmp_path, monkeypatch, capsys):
    from constrained_sft.cli.help_cache import cached_help

    monkeypatch.setenv("CONSTRAINED_SFT_CACHE", str(tmp_path))
    monkeypatch.setenv("CONSTRAINED_SFT_HELP_CACHE", "1")
    with pytest.raises(SystemExit, match="2"):
        cached_help(["train", "--nope", "--help"], _fake_help("an error", 2))
    assert not (tmp_path / "help").exists() and capsys.readouterr().out == "an error\n"
    for text in ("kept", "not read again"):
        with pytest.raises(SystemExit, match="0"):
            cached_help(["train", "--help"], _fake_help(text, 0))
        assert capsys.readouterr().out == "kept\n"
    monkeypatch.setenv("CONSTRAINED_SFT_HELP_CACHE", "0")
    with pytest.raises(SystemExit, match="0"):
        cached_help(["train", "--help"], _fake_help("built", 0))
    assert capsys.readouterr().out == "built\n"


# the commands grouped by the dependencies they may load: one interpreter per group
GROUPS = [["train", "eval robustness", "eval generate", "eval exits"], ["eval alpaca", "study"], ["sweep"]]


@pytest.mark.parametrize("commands", GROUPS, ids=lambda c: ", ".join(c))
def test_no_command_needs_another_commands_dependencies(commands):
    """Each command builds its parser (importing everything its `run` imports) with the other commands' dependencies
    absent."""
    assert sorted(c for g in GROUPS for c in g) == sorted(COMMANDS)
    allowed = set.union(*(NEEDS.get(c, set()) for c in commands))
    assert all(NEEDS.get(c, set()) == allowed for c in commands)  # a group shares its dependencies
    block = [name for name in OTHERS if name not in allowed]
    body = "\n".join(_help([*c.split(), "--help"]) for c in commands)
    loaded, out = _python(body, block=block, CONSTRAINED_SFT_HELP_CACHE="0")
    assert [line.split()[1:3] for line in out.splitlines() if line.startswith("usage:")] == [
        ["constrained-sft", c.split()[0]] for c in commands
    ]
    assert not set(block) & set(loaded)


def test_train_runs_without_the_sweep_judge_and_video_dependencies(tmp_path):
    from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

    model = tmp_path / "model"
    tiny_causal_lm("llama").save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in successor_dataset(16)))
    argv = [
        "train", "--model_name_or_path", str(model), "--dataset_name", str(data), "--output_dir",
        str(tmp_path / "out"), "--max_steps", "2", "--per_device_train_batch_size", "4", "--eval_size", "4",
        "--bf16", "false", "--use_cpu", "true", "--report_to", "none", "--save_strategy", "no", "--disable_tqdm",
        "true",
    ]  # fmt: skip
    body = f"from constrained_sft.cli import main\nassert main({argv!r}) == 0"
    loaded, _ = _python(body, block=OTHERS)
    assert not set(OTHERS) & set(loaded)
    assert (tmp_path / "out" / "constraints.json").is_file()


def test_importing_the_package_changes_no_warning_filter():
    """No module of the package installs a process-wide warnings filter when it loads (the alpaca_eval import's
    pkg_resources warning is silenced for that import only: `judges.load_alpaca_eval`); what third-party packages
    install when they load is imported first."""
    body = """
import importlib, pkgutil, warnings
import accelerate, datasets, peft, requests, torch, transformers, trl, urllib3
before = list(warnings.filters)
import constrained_sft
from constrained_sft.evaluation.alpaca.annotator_configs import load_alpaca_eval
names = [m.name for m in pkgutil.walk_packages(constrained_sft.__path__, "constrained_sft.")
         if not m.name.endswith(("__main__", "offline_utils"))]
for name in names:
    importlib.import_module(name)
load_alpaca_eval()
print(len(names), [str(f) for f in warnings.filters if f not in before])
"""
    _, out = _python(body)
    count, added = out.strip().split(" ", 1)
    assert int(count) > 150 and added == "[]", out


def test_a_refused_recipe_file_is_answered_before_the_stack_loads(tmp_path):
    """A recipe that is missing, mistyped, not a mapping or a search space, given to any command that reads recipes,
    is refused naming its flag with none of torch, transformers, peft or TRL loaded (they take seconds to import)."""
    listed = tmp_path / "list.yaml"
    listed.write_text("- 0.1\n")
    good, space = "smollm2-135m/sharegpt/constrained", "smollm2-135m/sharegpt/sweep"
    rows = [  # (argv, what the one-line error starts with)
        (["train", "--config", str(tmp_path / "none.yaml")], "`--config` '"),
        (["train", "--config", "smollm2-135m/sharegpt/constraned"], "`--config` 'smollm2"),
        (["train", f"--config={listed}"], f"`--config` {listed} must be a YAML mapping"),
        (["train", "--config", space, "--max_steps", "1"], f"`--config` {space} is a search space"),
        (["study", "--config", good, "--erm_config", str(listed)], f"`--erm_config` {listed} must be"),
        (["study", "--config", good, "--arm", f"penalty={space}"], f"`--arm penalty` {space} is a search space"),
        (["sweep", "--config", good, "--space", "nope"], "`--space` 'nope' is neither a file nor a shipped search"),
        (["eval", "robustness", "--recipe", "nope", "--models", "x"], "`--recipe` 'nope' is neither a file"),
    ]
    body = f"""
from constrained_sft.cli import main
for argv in {[argv for argv, _ in rows]!r}:
    try:
        main(argv)
    except ValueError as error:
        print(str(error).replace(chr(10), " "))
    else:
        raise AssertionError(argv)
"""
    loaded, out = _python(body)
    errors = out.splitlines()
    assert len(errors) == len(rows)
    for (argv, start), error in zip(rows, errors, strict=True):
        assert error.startswith(start), (argv, error)
    assert "Close: smollm2-135m/sharegpt/constrained" in errors[1]
    assert not set(HEAVY) & set(loaded), sorted(set(HEAVY) & set(loaded))
