"""
Security hygiene, checked on the source and on what a run writes: no pickle (saved state is safetensors and JSON;
transformers' optimizer / scheduler / RNG files are torch zip archives it reads with weights_only=True), every
torch.load with weights_only=True, trust_remote_code only when the user sets it, no secret in any written file.
"""

import ast
import os

import pytest

from constrained_sft.cli import main as cli
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE = ["constrained_sft", "eval", "benchmarks", "tests"]


def sources():
    for folder in CODE:
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    with open(path) as f:
                        yield os.path.relpath(path, ROOT), ast.parse(f.read())


def calls(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == name:
                yield node


def test_no_pickle_no_unsafe_torch_load_no_forced_remote_code():
    problems = []
    for path, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in ("pickle", "cloudpickle", "dill", "joblib") for n in names):
                    problems.append(f"{path}:{node.lineno} imports a pickle library")
        for node in calls(tree, "load"):
            func = node.func
            if isinstance(func, ast.Attribute) and getattr(func.value, "id", None) == "torch":
                safe = any(k.arg == "weights_only" and getattr(k.value, "value", None) is True for k in node.keywords)
                if not safe:
                    problems.append(f"{path}:{node.lineno} torch.load without weights_only=True")
        for node in ast.walk(tree):
            forced = isinstance(node, ast.keyword) and getattr(node.value, "value", None) is True
            if forced and node.arg == "trust_remote_code":
                problems.append(f"{path}:{node.value.lineno} forces trust_remote_code=True")
    assert not problems, problems


def test_trust_remote_code_is_off_unless_set():
    """The SFT command passes the user's `trust_remote_code` on (default False); the classifier command never sets it."""
    from trl import TrlParser

    from constrained_sft.tasks import get_task

    sft = get_task("sft")
    argv = ["--output_dir", "x", "--use_cpu", "true", "--bf16", "false"]
    parse = lambda extra: sft.recipe(TrlParser(sft.parser_classes()).parse_args_and_config([*argv, *extra]))  # noqa: E731
    assert parse([]).training.trust_remote_code is False
    assert parse(["--trust_remote_code", "true"]).training.trust_remote_code is True


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A CLI training run with a checkpoint, a Hub token among its arguments (not pushed)."""
    root = tmp_path_factory.mktemp("secure")
    tiny_causal_lm("llama").save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    successor_dataset(24).to_json(root / "data.jsonl")
    out = root / "out"
    argv = ["train", "--model_name_or_path", str(root / "model"), "--dataset_name", str(root / "data.jsonl")]
    argv += ["--output_dir", str(out), "--max_steps", "2", "--save_steps", "2", "--use_cpu", "true", "--bf16", "false"]
    argv += ["--report_to", "none", "--eval_size", "4", "--hub_token", SECRET, "--per_device_train_batch_size", "4"]
    assert cli(argv) == 0
    return out


SECRET = "hf_SENTINEL4e1b2c9d"


def test_saved_state_holds_no_pickle_and_no_secret(trained):
    files = [p for p in trained.rglob("*") if p.is_file()]
    assert (trained / "checkpoint-2" / "constraint_state.safetensors").exists()
    assert (trained / "training_args.json").exists() and (trained / "checkpoint-2" / "training_args.json").exists()
    assert not [p for p in files if p.suffix in (".bin", ".pkl", ".pickle")]
    for path in files:
        head = path.read_bytes()[:2]
        assert not head.startswith(b"\x80"), f"{path} is a raw pickle"
        if path.suffix in (".pt", ".pth"):  # transformers' optimizer / scheduler / RNG: zip archives, weights_only
            assert head == b"PK", path
        assert SECRET.encode() not in path.read_bytes(), f"{path} holds the Hub token"
