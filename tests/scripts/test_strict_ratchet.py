"""The `mypy --strict` ratchet (`make lint`) compares per-file counts with its committed baseline: a file that gained
is named with its count, one that fell asks for the baseline to be rewritten; the baseline covers the package."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("strict_ratchet", ROOT / "scripts" / "strict_ratchet.py")
assert spec and spec.loader
ratchet = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ratchet)


def test_a_file_that_gained_is_named_with_its_count_and_one_untouched_is_not():
    baseline = {"a.py": 3, "b.py": 2}
    gained, fell = ratchet.compare({"a.py": 3, "b.py": 4, "c.py": 1}, baseline)
    assert gained == ["b.py: 4 (baseline 2)", "c.py: 1 (baseline 0)"] and fell == []


def test_a_file_that_fell_asks_for_the_baseline_to_be_lowered():
    gained, fell = ratchet.compare({"a.py": 1}, {"a.py": 3, "b.py": 2})
    assert gained == [] and fell == ["a.py", "b.py"]


def test_the_baseline_names_files_of_the_package_outside_the_strict_floors():
    baseline = json.loads(ratchet.BASELINE.read_text())
    floors = tuple(f"constrained_sft/{floor}/" for floor in ratchet.STRICT)
    assert baseline and all((ROOT / f).is_file() and not f.startswith(floors) for f in baseline)
    assert all(isinstance(n, int) and n > 0 for n in baseline.values())
