"""scripts/gpu_bundle.py and scripts/wheelhouse.py without the network: parts never exceed their size, a file cut
into pieces comes back byte for byte (checked by its SHA-256), and a missing part is named."""

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_bundle  # noqa: E402
import wheelhouse  # noqa: E402

from constrained_sft.testing import tiny_encoder, tiny_tokenizer  # noqa: E402


def test_split_fills_parts_up_to_their_size(tmp_path):
    sizes = [700_000, 500_000, 400_000, 300_000, 100_000]
    files = []
    for i, size in enumerate(sizes):
        files.append(tmp_path / f"w{i}.whl")
        files[-1].write_bytes(b"x" * size)
    out = tmp_path / "house"
    out.mkdir()
    parts = wheelhouse.split([str(f) for f in files], str(out), 1.0)  # 1 MiB parts
    assert [size for _, size in parts] == [1_000_000, 1_000_000]  # 700k + 300k, then 500k + 400k + 100k
    assert all(size <= 2**20 for _, size in parts)
    assert sorted(f.name for f in out.rglob("*.whl")) == sorted(f.name for f in files)
    with pytest.raises(SystemExit, match="larger than a part"):
        big = tmp_path / "big.whl"
        big.write_bytes(b"x" * 2_000_000)
        wheelhouse.split([str(big)], str(out), 1.0)


def test_a_bundle_comes_back_byte_for_byte(tmp_path, capsys):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + os.urandom(2_500_000))  # cut into pieces of a 1 MiB part
    tiny_encoder("bert", layers=2).save_pretrained(tmp_path / "encoder")
    tiny_tokenizer().save_pretrained(tmp_path / "encoder")
    rows = [{"id": str(i), "conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"},
                                             {"from": "human", "value": "more"}]} for i in range(50)]  # fmt: skip
    # real ShareGPT: two user turns before the answer (carried up to it), and first exchanges with no answer (left)
    rows[3]["conversations"].insert(1, {"from": "human", "value": "and"})
    rows[5]["conversations"] = rows[5]["conversations"][:1] + [{"from": "human", "value": "hello?"}]
    rows[7]["conversations"][1]["value"] = " "
    (tmp_path / "sharegpt.json").write_text(json.dumps(rows))
    out = tmp_path / "bundle"
    argv = ["pack", str(out), "--no-wheels", "--part-mib", "1", "--conversations", "40", "--gguf", str(gguf),
            "--encoder", str(tmp_path / "encoder"), "--data", str(tmp_path / "sharegpt.json")]  # fmt: skip
    assert gpu_bundle.main(argv) == 0
    assert "conversations: 40 carried, their first exchanges; 2 of 50 left behind" in capsys.readouterr().out
    parts = sorted(out.glob("part-*"))
    assert len(parts) >= 3 and (out / "part-1" / "manifest.json").is_file()
    assert all(
        sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and f.name != "manifest.json") <= 2**20
        for p in parts
    )
    manifest = json.loads((out / "part-1" / "manifest.json").read_text())
    assert len(manifest["files"]["model.gguf"]["pieces"]) == 3

    assert gpu_bundle.main(["unpack", str(out), str(tmp_path / "assets"), "--no-dequantize"]) == 0
    assets = tmp_path / "assets"
    assert (assets / "model.gguf").read_bytes() == gguf.read_bytes()
    trains = [r for i, r in enumerate(rows) if i not in (5, 7)][:40]
    expected = [{**r, "conversations": r["conversations"][: 3 if r["id"] == "3" else 2]} for r in trains]
    assert json.loads((assets / "sharegpt.json").read_text()) == expected
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(assets / "encoder")
    assert next(encoder.parameters()).dtype.is_floating_point and (assets / "encoder" / "tokenizer.json").is_file()

    next(p for p in parts if p.name != "part-1").rename(tmp_path / "left-behind")  # a part not carried
    capsys.readouterr()
    with pytest.raises(SystemExit):
        gpu_bundle.main(["unpack", str(out), str(tmp_path / "again"), "--no-dequantize"])
    assert "carry every part" in capsys.readouterr().err and not (tmp_path / "again").exists()

    # the script's own folders are its to replace: packed again into the same folder, unpacked again into its own
    kept = (assets / "sharegpt.json").read_bytes()
    (tmp_path / "left-behind").rename(out / "part-2")
    assert gpu_bundle.main(argv) == 0 and sorted(out.glob("part-*")) == parts
    assert gpu_bundle.main(["unpack", str(out), str(assets), "--no-dequantize"]) == 0
    assert (assets / "sharegpt.json").read_bytes() == kept

    # a build that fails half way (a piece damaged in transit) leaves neither the folder nor its half-built twin
    piece = next((out / "part-2" / "assets").iterdir())
    piece.write_bytes(b"x" + piece.read_bytes()[1:])
    with pytest.raises(SystemExit, match="does not match its SHA-256"):
        gpu_bundle.main(["unpack", str(out), str(tmp_path / "damaged"), "--no-dequantize"])
    assert not (tmp_path / "damaged").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert (assets / "sharegpt.json").read_bytes() == kept


def test_the_scripts_replace_only_their_own_folders(tmp_path, capsys):
    """What a script wrote is told by its record (`.written-by.json`: names and SHA-256): an earlier version's folder
    (its `.written-by` mark, the script's own layout) is replaced; a symlinked OUT is resolved and built at its
    target, the link kept; a folder the record covers is replaced once another file appears in it no more."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    tiny_encoder("bert", layers=2).save_pretrained(tmp_path / "encoder")
    tiny_tokenizer().save_pretrained(tmp_path / "encoder")
    (tmp_path / "sharegpt.json").write_text(json.dumps([{"conversations": [{"from": "human", "value": "q"},
                                                                           {"from": "gpt", "value": "a"}]}]))  # fmt: skip

    def pack(out):
        return gpu_bundle.main(["pack", str(out), "--no-wheels", "--gguf", str(gguf), "--encoder",
                                str(tmp_path / "encoder"), "--data", str(tmp_path / "sharegpt.json")])  # fmt: skip

    earlier = tmp_path / "earlier"
    (earlier / "part-1" / "assets").mkdir(parents=True)
    (earlier / ".written-by").write_text("gpu_bundle.py\n")
    (earlier / "part-1" / "manifest.json").write_text("{}")
    (earlier / "part-1" / "assets" / "model.gguf").write_bytes(b"old")
    assert pack(earlier) == 0
    record = json.loads((earlier / ".written-by.json").read_text())
    assert record["by"] == "gpu_bundle.py" and "part-1/manifest.json" in record["files"]
    assert not (earlier / ".written-by").exists()

    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    assert pack(tmp_path / "link") == 0
    assert (tmp_path / "link").is_symlink() and (target / "part-1" / "manifest.json").is_file()

    (target / "notes.md").write_text("mine")
    with pytest.raises(SystemExit):
        pack(tmp_path / "link")
    assert "(notes.md)" in capsys.readouterr().err and (target / "notes.md").read_text() == "mine"
    (target / "notes.md").unlink()
    assert pack(tmp_path / "link") == 0


def test_a_target_version_older_than_the_lock_is_carried_over():
    """A lent H100 had transformers 5.17, which this package cannot import with: the lock's wheel is carried and
    installed over it; a newer or unknown version on the target is kept."""
    assert wheelhouse.older_than("5.17.0", "5.24.0")
    assert not wheelhouse.older_than("5.24.0", "5.24.0") and not wheelhouse.older_than("6.0", "5.24.0")
    assert not wheelhouse.older_than("", "5.24.0") and not wheelhouse.older_than(None, "1.0")
    assert not wheelhouse.older_than("not a version", "1.0")
