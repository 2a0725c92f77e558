"""
The package's layering: each folder (or top-level module) imports only from the floors below it, every folder says
in its docstring what it owns and may import, and the architecture guide's folder map
(docs/guides/architecture.md) lists exactly these folders and rules.

Why a test and not import-linter's contracts: the floors and the side-by-side units could be import-linter `layers`
and `independence` contracts, but the same table is also what every folder's docstring and the architecture guide
must say (checked here), and import circles inside a folder and a sub-package's floors are checked too; contracts in
pyproject.toml would be a second copy of the table to keep in step, and a dependency, for a subset of the checks.
The table stays here, once, with a test that each check catches what it forbids.
"""

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "constrained_sft")
BELOW_TRAINERS = {"utils", "config", "constraints", "readout", "noise"}

# unit -> the units it may import (its own modules always). Floors, bottom to top: utils, testing -> launch -> constraints ->
# config -> readout, noise, data, models -> trainers -> tasks -> comparison -> evaluation -> sweep, study -> cli; the package's
# __init__ / __main__ on top. (`config` reads the variants' registries of `constraints`: their settings are fields.)
ALLOWED = {
    "utils": set(),
    "config": {"utils", "constraints"},
    "testing": set(),
    "launch": {"utils"},
    "constraints": {"utils"},
    "readout": {"utils", "constraints"},
    "noise": {"utils"},
    "data": {"utils"},
    "models": {"utils"},
    "trainers": BELOW_TRAINERS,
    "tasks": BELOW_TRAINERS | {"data", "models", "trainers"},
    "comparison": BELOW_TRAINERS | {"data", "models", "trainers", "tasks"},
    "evaluation": BELOW_TRAINERS | {"data", "models", "trainers", "tasks", "comparison"},
    "sweep": BELOW_TRAINERS | {"launch", "data", "models", "trainers", "tasks", "comparison", "evaluation"},
    "study": BELOW_TRAINERS | {"launch", "data", "models", "trainers", "tasks", "comparison", "evaluation"},
    "cli": BELOW_TRAINERS
    | {"launch", "data", "models", "trainers", "tasks", "comparison", "evaluation", "sweep", "study"},
    "__init__": BELOW_TRAINERS | {"models", "trainers"},
    "__main__": {"cli"},
}
ALLOWED = {unit: {*deps, "version"} for unit, deps in ALLOWED.items()}  # the version string: any floor may read it
ALLOWED["version"] = set()
FLOORS = [  # bottom to top; a unit may import only units of lower floors, never one beside it
    {"version"},
    {"utils", "testing"},
    {"launch"},
    {"constraints"},
    {"config"},
    {"readout", "noise", "data", "models"},
    {"trainers"},
    {"tasks"},
    {"comparison"},
    {"evaluation"},
    {"sweep", "study"},
    {"cli"},
    {"__init__", "__main__"},
]


def unit_of(module: str) -> str:
    """`constrained_sft.readout.probe` -> `readout`; `constrained_sft` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(package_dir: str, path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(package_dir))[: -len(".py")].split(os.sep)
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def imported_modules(path: str, module: str) -> set[str]:
    """Every package module `path` imports, at the top or inside functions, absolute or relative."""
    tree = ast.parse(Path(path).read_text())
    is_package = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if not node.level:
                found.add(node.module)
                continue
            parts = module.split(".")  # a package's own name counts as one level: `from .x` in a/__init__ is a.x
            base = ".".join(parts[: len(parts) - node.level + (1 if is_package else 0)])
            if node.module:
                found.add(f"{base}.{node.module}")
            else:  # `from . import x`: x may be a submodule
                found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m == "constrained_sft" or m.startswith("constrained_sft.")}


def violations(package_dir: str, allowed: dict[str, set[str]]) -> list[str]:
    """'<file>: <unit> imports <module> (<unit> may import: ...)' for every import that crosses the floors wrongly."""
    out = []
    for folder, _, files in os.walk(package_dir):
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            module = module_name(package_dir, path)
            unit = (
                "__main__" if module == "constrained_sft.__main__" else unit_of(module)
            )  # a sub-package's: its unit's
            if unit not in allowed:
                out.append(f"{os.path.relpath(path, package_dir)}: {unit!r} has no place in the layering table")
                continue
            for target in sorted(imported_modules(path, module)):
                dep = unit_of(target)
                if target == "constrained_sft" and unit != "__init__" or dep != unit and dep not in allowed[unit]:
                    out.append(
                        f"{os.path.relpath(path, package_dir)}: {unit} imports {target} "
                        f"({unit} may import: {sorted(allowed[unit]) or 'nothing of the package'})"
                    )
    return out


def test_every_import_respects_the_floors():
    assert violations(PACKAGE, ALLOWED) == []


def test_the_check_catches_a_forbidden_import(tmp_path):
    """The checker itself: a constraints module importing the trainers (absolute, relative, or inside a function)."""
    package = tmp_path / "constrained_sft"
    (package / "constraints").mkdir(parents=True)
    (package / "trainers").mkdir()
    (package / "__init__.py").write_text("")
    (package / "trainers" / "__init__.py").write_text("X = 1\n")
    (package / "constraints" / "__init__.py").write_text("from ..utils import unwrap_model\n")
    (package / "constraints" / "ok.py").write_text("from .lagrangian import slack\nfrom ..utils import write_json\n")
    (package / "constraints" / "bad.py").write_text(
        "from ..trainers import X\nimport constrained_sft.trainers.sft\n\ndef f():\n    from ..readout import probe\n"
    )
    (package / "utils.py").write_text("")
    found = violations(str(package), ALLOWED)
    assert len(found) == 3 and all(line.startswith(os.path.join("constraints", "bad.py")) for line in found)
    assert "constraints imports constrained_sft.trainers" in found[0] + found[1] + found[2]


def test_the_table_points_only_down():
    """No unit may import one on its own floor (sideways: `sweep` and `study`, `data` and `noise`) or above."""
    floor = {unit: i for i, units in enumerate(FLOORS) for unit in units}
    assert set(floor) == set(ALLOWED)
    assert {unit: sorted(d for d in deps if floor[d] >= floor[unit]) for unit, deps in ALLOWED.items()} == {
        unit: [] for unit in ALLOWED
    }


def test_the_check_catches_a_sideways_import(tmp_path):
    """Two units of one floor: `noise` importing `data` is refused like an import up."""
    package = tmp_path / "constrained_sft"
    for unit in ("noise", "data"):
        (package / unit).mkdir(parents=True)
        (package / unit / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "noise" / "collator.py").write_text("from ..data import chat\n")
    assert violations(str(package), ALLOWED) == [
        f"{os.path.join('noise', 'collator.py')}: noise imports constrained_sft.data (noise may import: "
        "['utils', 'version'])"
    ]


def test_units_on_disk_are_the_layering_table():
    modules = {n[: -len(".py")] for n in os.listdir(PACKAGE) if n.endswith(".py")}
    folders = {n for n in os.listdir(PACKAGE) if os.path.isfile(os.path.join(PACKAGE, n, "__init__.py"))}
    assert modules | folders == set(ALLOWED)


@pytest.mark.parametrize("unit", sorted(u for u in ALLOWED if os.path.isdir(os.path.join(PACKAGE, u))))
def test_every_folder_says_what_it_owns_and_may_import(unit):
    doc = ast.get_docstring(ast.parse(Path(PACKAGE, unit, "__init__.py").read_text()))
    assert doc and "May import" in doc, f"constrained_sft/{unit}/__init__.py needs a docstring with 'May import'"


def test_folder_map_matches_the_layering_table():
    """The architecture guide's map: one row per unit, `| \\`constrained_sft/<unit>\\` | owns | may import |`."""
    guide = Path(ROOT, "docs", "guides", "architecture.md").read_text()
    rows = re.findall(r"^\| `constrained_sft/([\w.]+?)(?:/|\.py)?` \| .+? \| (.+?) \|$", guide, flags=re.M)
    assert rows, "docs/guides/architecture.md has no folder map"
    table = {}
    for unit, may in rows:
        table[unit] = set(re.findall(r"`(\w+)`", may))
    expected = {u: a - {"version"} for u, a in ALLOWED.items() if not u.startswith("__") and u != "version"}
    assert table == expected


def import_graph(package_dir: str) -> dict[str, set[str]]:
    """module -> the package modules it imports (functions' imports included; `if TYPE_CHECKING:` blocks too, which
    only `constrained_sft/__init__` has, for type checkers)."""
    graph = {}
    for folder, _, files in os.walk(package_dir):
        for name in (f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            module = module_name(package_dir, path)
            graph[module] = imported_modules(path, module) - {module}
    return {m: {t for t in targets if t in graph} for m, targets in graph.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan): each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = [stack.pop()]
            while group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_anywhere():
    """Between modules of any depth, not only between floors (a circle inside a folder is invisible to the floors)."""
    assert circles(import_graph(PACKAGE)) == []


def test_the_circle_check_finds_one_inside_a_folder(tmp_path):
    package = tmp_path / "constrained_sft"
    (package / "evaluation" / "alpaca").mkdir(parents=True)
    for init in (package, package / "evaluation", package / "evaluation" / "alpaca"):
        (init / "__init__.py").write_text("")
    (package / "evaluation" / "report.py").write_text("def f():\n    from .alpaca.report import g\n")
    (package / "evaluation" / "alpaca" / "report.py").write_text("from ..report import f\n")
    assert circles(import_graph(str(package))) == [
        ["constrained_sft.evaluation.alpaca.report", "constrained_sft.evaluation.report"]
    ]


# sub-package -> the modules of its own top-level folder it may import besides its own: below the folder's other
# modules, so nothing in it imports back up
SUB_FLOORS = {
    "constrained_sft.trainers.resume": set(),
    # evaluation's shared core, below every measurement (robustness, alpaca, exits, harness) of the folder
    "constrained_sft.evaluation.bootstrap": set(),
    "constrained_sft.evaluation.instructions": set(),
    "constrained_sft.evaluation.loading": set(),
    "constrained_sft.evaluation.comparisons": {"constrained_sft.evaluation.bootstrap"},
    "constrained_sft.evaluation.report": {
        "constrained_sft.evaluation.comparisons",
        "constrained_sft.evaluation.bootstrap",
    },
}
# modules side by side inside a folder, none of which may import another: what two of them share sits below them
SIDE_BY_SIDE = [
    {f"constrained_sft.evaluation.{m}" for m in ("alpaca", "exits", "harness", "robustness")},  # the eval commands
    {f"constrained_sft.trainers.{m}" for m in ("sft", "readout")},  # the two trainers
    {f"constrained_sft.tasks.{m}" for m in ("sft", "classification", "video")},
    {
        f"constrained_sft.cli.{m}"
        for m in (
            "train",
            "sweep",
            "study",
            "eval_robustness",
            "eval_generate",
            "eval_alpaca",
            "eval_exits",
            "eval_harness",
        )
    },  # fmt: skip
]


def sideways_violations(graph: dict[str, set[str]], groups: list[set[str]]) -> list[str]:
    """'<module> imports <target> (both of <group>)' for every import between two members of one group (a member
    is a module or a package and everything in it)."""

    def member(module: str, group: set[str]) -> str | None:
        return next((m for m in group if module == m or module.startswith(m + ".")), None)

    out = []
    for group in groups:
        for module, targets in sorted(graph.items()):
            own = member(module, group)
            if own is None:
                continue
            for target in sorted(targets):
                other = member(target, group)
                if other is not None and other != own:
                    out.append(f"{module} imports {target} (side by side: {own} and {other})")
    return out


def test_modules_side_by_side_do_not_import_each_other():
    """The eval commands, the two trainers, the tasks and the CLI commands share only what sits below them."""
    assert sideways_violations(import_graph(PACKAGE), SIDE_BY_SIDE) == []


def test_the_sideways_check_catches_one_command_importing_another():
    graph = {
        "constrained_sft.evaluation.exits": {"constrained_sft.evaluation.alpaca.generate"},
        "constrained_sft.evaluation.alpaca.generate": {"constrained_sft.evaluation.instructions"},
    }
    assert sideways_violations(graph, SIDE_BY_SIDE) == [
        "constrained_sft.evaluation.exits imports constrained_sft.evaluation.alpaca.generate (side by side: "
        "constrained_sft.evaluation.exits and constrained_sft.evaluation.alpaca)"
    ]


def sub_floor_violations(graph: dict[str, set[str]], floors: dict[str, set[str]]) -> list[str]:
    out = []
    for sub, allowed in floors.items():
        folder = ".".join(sub.split(".")[:2])
        for module, targets in graph.items():
            if module != sub and not module.startswith(sub + "."):
                continue
            for target in sorted(targets):
                inside = target == sub or target.startswith(sub + ".")
                if target.startswith(folder + ".") and not inside and target not in allowed:
                    out.append(
                        f"{module} imports {target} ({sub} may import of {folder}: {sorted(allowed) or 'none'})"
                    )
    return out


def test_sub_packages_sit_below_the_rest_of_their_folder():
    """`trainers/resume/` knows nothing of the trainers; evaluation's shared core nothing of the measurements."""
    assert sub_floor_violations(import_graph(PACKAGE), SUB_FLOORS) == []


def test_the_sub_floor_check_catches_an_import_back_up():
    graph = {"constrained_sft.trainers.resume.files": {"constrained_sft.trainers.sft", "constrained_sft.utils"}}
    assert sub_floor_violations(graph, SUB_FLOORS) == [
        "constrained_sft.trainers.resume.files imports constrained_sft.trainers.sft (constrained_sft.trainers.resume "
        "may import of constrained_sft.trainers: none)"
    ]


def test_the_package_docstrings_floor_map_is_the_table():
    """`constrained_sft/__init__.py` draws the floors for a reader, bottom to top: the same floors as `FLOORS`."""
    doc = ast.get_docstring(ast.parse(Path(PACKAGE, "__init__.py").read_text())) or ""
    drawn = doc.split("bottom to top", 1)[1].split(":", 1)[1].split("\n\n", 1)[0]
    floors = [set(re.findall(r"`(\w+)`", floor)) for floor in drawn.split("->")]
    assert floors == [f for f in FLOORS if not f & {"__init__", "__main__"}]


EVALUATIONS = [f"constrained_sft.evaluation.{m}" for m in ("alpaca", "exits", "harness", "robustness")]


def reaches_inside(graph: dict[str, set[str]], readers: str) -> list[str]:
    """'<module> imports <target>' for each module under `readers` that imports a module inside an evaluation's
    package (its command, its results) instead of the package itself."""
    return [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if module.startswith(readers + ".")
        for target in sorted(targets)
        if any(target.startswith(package + ".") for package in EVALUATIONS)
    ]


def test_the_study_reads_each_evaluation_through_its_package():
    """Each evaluation owns its folder (a typed folder object exported from its package: `RobustnessFolder`,
    `AnswersFolder`, `VerdictsFolder`, `ExitsFolder`, `HarnessFolder`); the study imports the packages, never a
    module inside one (an eval command's module)."""
    graph = import_graph(PACKAGE)
    assert reaches_inside(graph, "constrained_sft.study") == []
    made_up = {"constrained_sft.study.study_folder": {"constrained_sft.evaluation.alpaca.generate"}}
    assert reaches_inside(made_up, "constrained_sft.study") == [
        "constrained_sft.study.study_folder imports constrained_sft.evaluation.alpaca.generate"
    ]
