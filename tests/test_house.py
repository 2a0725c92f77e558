"""
The house rules a reviewer checked by hand (issue 59's bars), kept as tests so they stay true: few untyped dicts, one
concept per module (<= 350 lines), package data through importlib.resources, one version string, and a study run's
key spelled by its type alone.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "constrained_sft"
MODULES = sorted(PACKAGE.rglob("*.py"))
# annotations spelled `dict[str, Any]`: none since issue 81 (19 outside to_dict / from_dict at 2026-11-27, 30 at
# 2026-12-01, and 39 to_dict / from_dict): each such dict is named for its role in utils/types.py, JSON read
# (`JSONRead`) or written (`JSONObject`), keyword arguments handed on (`Kwargs`) or a torch-style `StateDict`
UNTYPED_DICTS = 0


def untyped_dicts(source: str) -> list[tuple[str | None, str]]:
    """(enclosing function, annotation) for each `dict[str, Any]` in an annotation (a type alias's string value is
    no annotation: utils/types.py names them)."""
    found: list[tuple[str | None, str]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        annotations: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            annotations = [a.annotation for a in every if a is not None] + [node.returns]
            function = node.name
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        for annotation in filter(None, annotations):
            text = ast.unparse(annotation).replace("'", "").replace('"', "")
            found.extend([(function, text)] * text.count("dict[str, Any]"))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), None)
    return found


def test_no_untyped_dict_but_the_named_ones():
    found = [(str(p.relative_to(ROOT)), *hit) for p in MODULES for hit in untyped_dicts(p.read_text())]
    assert len(found) == UNTYPED_DICTS, "\n".join(map(str, found))


def test_the_untyped_dict_count_sees_annotations_and_not_strings():
    source = (
        "def f(a: dict[str, Any], b: 'list[dict[str, Any]]') -> dict[str, Any]: ...\n"
        "x: dict[str, Any] = {}\n"
        "class C:\n    def to_dict(self) -> dict[str, Any]: ...\n"
        "    @classmethod\n    def from_dict(cls, data: dict[str, Any]) -> 'C': ...\n"
        "y = 'dict[str, Any]'  # a string, not an annotation\n"
    )
    assert untyped_dicts(source) == [
        ("f", "dict[str, Any]"),
        ("f", "list[dict[str, Any]]"),
        ("f", "dict[str, Any]"),
        (None, "dict[str, Any]"),
        ("to_dict", "dict[str, Any]"),
        ("from_dict", "dict[str, Any]"),
    ]
    alias = 'Kwargs: TypeAlias = "dict[str, Any]"\n'  # a name for a role, in utils/types.py
    assert untyped_dicts(alias) == []


def test_every_module_holds_one_concept_in_at_most_350_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 350}
    assert not long


def test_package_data_is_found_through_importlib_resources():
    assert not [str(p.relative_to(ROOT)) for p in MODULES if "__file__" in p.read_text()]


def test_the_version_is_written_once():
    project = (ROOT / "pyproject.toml").read_text().split("[project]", 1)[1].split("\n[", 1)[0]  # no tomllib on 3.10
    assert not re.search(r"^version\s*=", project, re.M) and re.search(r"^dynamic\s*=.*\"version\"", project, re.M)
    written = [p for p in MODULES if re.search(r"""^\s*\w*VERSION\w*\s*=\s*["']\d""", p.read_text(), re.M)]
    assert [p.name for p in written] == ["version.py"]


def test_a_study_runs_key_is_spelled_by_its_type_alone():
    spelled = [
        str(p.relative_to(ROOT))
        for p in MODULES
        if re.search(r"""f["'][^"']*\{[^}]*\}[/-]seed\{""", p.read_text())
        and p.name != "arms.py"  # comparison/arms.py: RunKey itself
    ]
    assert not spelled


ARM_NAMES = ("constrained", "erm")
# where an arm's name may be written: its one definition; and the ERM mode's model-card tag (`constraints: none`
# models are tagged `erm` on the Hub), a mode's identity on a floor below the comparison, not an arm
NAMED_HERE = {"constrained_sft/comparison/names.py", "constrained_sft/constraints/modes.py"}


def arm_name_literals(source: str) -> list[int]:
    """Lines of every string constant that is an arm's name (docstrings aside)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in ARM_NAMES and id(node) not in docstrings
    ]


def test_the_arms_names_are_written_only_by_the_comparison_layer():
    found = {
        str(p.relative_to(ROOT)): lines
        for p in MODULES
        if str(p.relative_to(ROOT)) not in NAMED_HERE and (lines := arm_name_literals(p.read_text()))
    }
    assert not found, f"arm names written outside comparison/names.py: {found}"
    assert arm_name_literals('"""erm"""\nx = "constrained"\ny = f"erm-{z}"\n') == [2]  # the check sees a literal


def test_a_task_is_annotated_wherever_it_is_handed_on():
    """Every parameter named `task` says it is a `Task` (issue 67: `task` was untyped in 20 of its 27 uses), and the
    package says it is typed (PEP 561's py.typed, shipped as package data)."""
    untyped = [
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"
        for p in MODULES
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        if arg.arg == "task" and arg.annotation is None
    ]
    assert not untyped, untyped
    assert (PACKAGE / "py.typed").is_file() and '"py.typed"' in (ROOT / "pyproject.toml").read_text()


def test_the_formatter_owns_the_librarys_layout():
    """`# fmt: skip` only for aligned tables (name lists, a report's columns): at most 10 in the library."""
    skips = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "# fmt: skip" in line
    ]
    assert len(skips) <= 10, skips
