"""A transformers or TRL upgrade is an audit of one file: every private `Trainer` / `SFTTrainer` method the trainers
override is in `trainers/resume/overrides.py`, each under a comment, and no other trainer module reads a private
name of theirs."""

import ast
import os
import re
from pathlib import Path

import trl
from transformers import Trainer

ROOT = Path(__file__).resolve().parents[2] / "constrained_sft" / "trainers"
OVERRIDES = ROOT / "resume" / "overrides.py"
PRIVATE = {n for cls in (Trainer, trl.SFTTrainer) for n in dir(cls) if n.startswith("_") and not n.startswith("__")}
PRIVATE |= {"_metrics"}  # TRL's metric buffers, an attribute set in __init__


def overridden(path: Path) -> dict[str, int]:
    """Methods of `path`'s classes named like a private method of Trainer / SFTTrainer: name -> line."""
    tree = ast.parse(path.read_text())
    return {
        node.name: node.lineno
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name in PRIVATE
    }


def private_reads(path: Path) -> set[str]:
    """`<object>._name` attribute reads of a private Trainer / SFTTrainer name."""
    tree = ast.parse(path.read_text())
    found = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in PRIVATE}
    found |= {c.args[1].value for c in ast.walk(tree) if isinstance(c, ast.Call) and getattr(c.func, "id", "") ==
              "getattr" and len(c.args) > 1 and isinstance(c.args[1], ast.Constant) and c.args[1].value in PRIVATE}  # fmt: skip
    return found


def test_every_private_override_is_in_the_overrides_file_with_a_comment():
    elsewhere = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in ROOT.rglob("*.py")
        if path != OVERRIDES
        for name in {*overridden(path), *private_reads(path)}
    }
    assert elsewhere == set()
    lines = OVERRIDES.read_text().splitlines()
    methods = overridden(OVERRIDES)
    assert len(methods) == 9
    for name, line in methods.items():
        assert lines[line - 2].strip().startswith("#"), f"{name} has no comment naming the behaviour it changes"
        assert f"`{name}`" in OVERRIDES.read_text().split('"""')[1], f"{name} is not listed in the module docstring"


def test_the_scan_sees_an_override_and_a_private_read(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("class A:\n    def _save(self):\n        return self._metrics, getattr(self, '_prepare_inputs')\n")
    assert set(overridden(path)) == {"_save"} and private_reads(path) == {"_metrics", "_prepare_inputs"}
    assert os.path.isfile(OVERRIDES) and re.search(r"def _get_grad_norm", OVERRIDES.read_text())
