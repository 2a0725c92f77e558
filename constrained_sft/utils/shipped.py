"""
The recipes, search spaces and accelerate launch configs that install with the package (`constrained_sft/recipes/`,
`constrained_sft/accelerate_configs/`; a checkout's top-level `recipes/` and `accelerate_configs/` are links to the
same files), found by name the way torchtune finds its configs (`tune ls`, `tune cp`):

    smollm2-135m/sharegpt/constrained     the recipe recipes/smollm2-135m/sharegpt/constrained.yaml
    ddp                                   the launch config accelerate_configs/ddp.yaml

A name may also be written as the checkout's path (`recipes/smollm2-135m/sharegpt/constrained.yaml`), so every
command in the docs runs for a user who installed the package with pip; a local file of that path wins.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import yaml


def package_data(*parts: str) -> Path:
    """A file or folder installed with the package (`importlib.resources`: wherever the package is installed; a
    wheel installs unzipped, so it is a real path that accelerate, lm-eval and alpaca_eval can open)."""
    return Path(str(files("constrained_sft").joinpath(*parts)))


PACKAGE = package_data()
RECIPES = PACKAGE / "recipes"
LAUNCH_CONFIGS = PACKAGE / "accelerate_configs"
SUFFIX = ".yaml"
CLOSE = 5  # close names an error lists
COMMANDS = ("constrained-sft ", "accelerate ", "python ", "bash ", "--")  # header lines that are commands


@dataclass(frozen=True)
class ShippedFile:
    """One shipped YAML: its name, kind ('recipe', 'sweep space' or 'launch config'), what `constrained-sft
    recipes` shows of it (the model and objective of a recipe, the distributed type of a launch config), the
    first sentence of its header comment and the command its header gives."""

    name: str
    kind: str
    path: Path
    model: str
    objective: str
    purpose: str
    command: str


def header_command(text: str) -> str:
    """The first command line of a YAML's header comment ('' without one)."""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if line[1:].strip().startswith(COMMANDS[:-1]):
            return line[1:].strip()
    return ""


def launch_config_of(recipe: str) -> str | None:
    """The shipped accelerate config a recipe's first line launches with (`--config_file accelerate_configs/X.yaml`),
    as its name; None where the line names none (or another file)."""
    try:
        with open(recipe, encoding="utf-8") as f:
            command = header_command(f.read())
    except OSError:
        return None
    found = re.search(r"--config_file\s+(?:\S*/)?accelerate_configs/([\w-]+)\.yaml", command)
    return found.group(1) if found else None


def purpose(text: str) -> str:
    """The first sentence of a YAML's header comment after its command lines (the recipes' convention: the exact
    command first, a blank comment line, then what the file is for)."""
    paragraphs: list[str] = []
    current: list[str] = []
    for raw in text.splitlines():
        line = raw[1:].strip() if raw.startswith("#") else None
        if line:
            current.append(line)
            continue
        if current:
            paragraphs.append(" ".join(current))
            current = []
        if line is None:  # the header ends at the first line that is not a comment
            break
    prose = [p for p in paragraphs if not p.startswith(COMMANDS)]
    first = prose[0] if prose else ""
    for end in re.finditer(r"\. ", first):
        if not re.search(r"\b(al|e\.g|i\.e|vs|cf)$", first[: end.start()]):
            return first[: end.start() + 1]
    return first


def _describe(name: str, path: Path, kind: str) -> ShippedFile:
    text = path.read_text()
    data = yaml.safe_load(text) or {}
    if kind == "launch config":
        model, objective = "", str(data.get("distributed_type", ""))
    elif path.stem == "sweep":
        kind, model, objective = "sweep space", "", ""
    else:
        model = str(
            data.get("model_name_or_path") or (f"{data['architecture']} (built)" if "architecture" in data else "-")
        )
        objective = str(data.get("constraints", "descent"))
        if data.get("neftune_noise_alpha"):
            objective += " + NEFTune"
    return ShippedFile(name, kind, path, model, objective, purpose(text), header_command(text))


def _paths(launch: bool) -> dict[str, Path]:
    """{name: path} of the shipped recipes and search spaces (`launch`: accelerate configs), in name order."""
    root = LAUNCH_CONFIGS if launch else RECIPES
    return {p.relative_to(root).with_suffix("").as_posix(): p for p in sorted(root.rglob(f"*{SUFFIX}"))}


def recipes() -> list[ShippedFile]:
    """Every shipped recipe and search space, by name."""
    return [_describe(name, p, "recipe") for name, p in _paths(False).items()]


def launch_configs() -> list[ShippedFile]:
    """Every shipped accelerate launch config, by name."""
    return [_describe(name, p, "launch config") for name, p in _paths(True).items()]


def _name(value: str, launch: bool) -> str:
    """`recipes/a/b.yaml`, `./recipes/a/b.yaml`, `a/b.yaml`, `a/b` and the installed file's own path (what
    `recipes path` prints) all name `a/b`."""
    root = LAUNCH_CONFIGS if launch else RECIPES
    with contextlib.suppress(ValueError, OSError):
        value = Path(value).resolve().relative_to(root.resolve()).as_posix() if os.path.isabs(value) else value
    folder = "accelerate_configs" if launch else "recipes"
    return value.replace(os.sep, "/").removeprefix("./").removeprefix(f"{folder}/").removesuffix(SUFFIX)


def yaml_kind(data: object) -> str:
    """'search space' for a mapping of sections, each a mapping of field names to mappings (a field's range:
    `sweep --space`), else 'recipe' (field names to values: `train --config`), so that each flag can name what it
    got when given the other kind. Told by shape alone: what a range holds is the sweep's to say
    (`sweep.space.KEYS`), and no recipe is a mapping of mappings of mappings."""

    def is_section(value: object) -> bool:
        return isinstance(value, dict) and bool(value) and all(isinstance(v, dict) for v in value.values())

    sections = list(data.values()) if isinstance(data, dict) else []
    return "search space" if sections and all(is_section(s) for s in sections) else "recipe"


def find_shipped(value: str, launch: bool | None = False, flag: str = "NAME", what: str | None = None) -> str:
    """The shipped recipe or search space (`launch`: accelerate config; None: either, a recipe first) that `value`
    names; anything else is refused in one line naming `flag` and `what` it takes, with the close names."""
    kinds = [False, True] if launch is None else [launch]
    found = {}
    for kind in kinds:
        shipped = _paths(kind)  # names only: finding one reads no YAML
        if _name(value, kind) in shipped:
            return str(shipped[_name(value, kind)])
        found.update({n: _name(value, kind) for n in shipped})
    close = []
    for name, wanted in found.items():
        if (
            difflib.get_close_matches(wanted, [name], n=1, cutoff=0.5)
            or name.rsplit("/")[-1] == wanted.rsplit("/")[-1]
        ):
            close.append((difflib.SequenceMatcher(None, wanted, name).ratio(), name))
    hint = f" Close: {', '.join(n for _, n in sorted(close, reverse=True)[:CLOSE])}." if close else ""
    what = what or {None: "recipe or accelerate config", False: "recipe", True: "accelerate config"}[launch]
    where = LAUNCH_CONFIGS if launch else RECIPES if launch is False else PACKAGE
    raise ValueError(
        f"`{flag}` {value!r} is neither a file nor a shipped {what} name: give the path of a YAML {what.split(' or ')[0]} "
        f"or a name that `constrained-sft recipes` lists (installed in {where}).{hint}"
    )


def find(value: str, flag: str, launch: bool = False, what: str | None = None) -> str:
    """The file `value` names for `flag`: a local file as given (it wins), else the shipped file of that name."""
    return value if os.path.isfile(value) else find_shipped(value, launch, flag, what)


def check_launch_config(path: str, flag: str) -> None:
    """The accelerate config at `path` read as `accelerate launch` reads it (`ClusterConfig.from_yaml_file`), before
    any work: a file that is not YAML, not a mapping, or has keys or values accelerate does not know, refused in
    one line naming `flag`."""
    import yaml
    from accelerate.commands.config.config_args import ClusterConfig

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"`{flag}` {path} is not a readable YAML file: {first}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"`{flag}` {path} is not an accelerate config: give a YAML mapping as `accelerate config` writes "
            f"(got {type(data).__name__})."
        )
    try:
        ClusterConfig.from_yaml_file(path)
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"`{flag}` {path}: accelerate cannot read it: {str(error).strip()[:300]}") from None


def copy(name: str, destination: str = ".") -> str:
    """
    Copy the shipped recipe, search space or accelerate config `name` to `destination` (a folder: the file keeps its
    base name), to edit; an existing file is never overwritten, and a destination that cannot be written is refused
    naming DEST. Returns the path written.
    """
    source = find_shipped(name, None)
    target = os.path.join(destination, os.path.basename(source)) if os.path.isdir(destination) else destination
    if os.path.exists(target):
        raise ValueError(
            f"{target} exists, and a copy never replaces a file; give another path (constrained-sft recipes cp {name} NEW.yaml)."
        )
    parent = os.path.dirname(os.path.abspath(target))
    above = parent
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ValueError(
            f"`DEST` {destination}: {above} is a file, not a folder; give a file or folder path to copy to."
        )
    try:
        os.makedirs(parent, exist_ok=True)
        shutil.copyfile(source, target)
    except OSError as error:
        raise ValueError(
            f"`DEST` {destination} cannot be written ({error.strerror}); give a path you can write."
        ) from None
    return target
