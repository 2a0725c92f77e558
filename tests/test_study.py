"""`constrained-sft study` end to end on tiny models: two training seeds per arm, robustness with intervals, the
held-out instruction set, answers judged in both orders by the proxy judge, one report; a resumed study reuses
every finished stage; refused twins."""

import json
import os

import pytest

from constrained_sft.cli import main as cli
from constrained_sft.testing import tiny_causal_lm, tiny_encoder, tiny_tokenizer

pytest.importorskip("alpaca_eval")

RECIPE = """model_name_or_path: {model}
dataset_name: {data}
eval_size: 12
max_length: 32
max_steps: 4
per_device_train_batch_size: 8
per_device_eval_batch_size: 16
learning_rate: 1.0e-2
dual_init: 2.0
use_cpu: true
bf16: false
gradient_checkpointing: false
report_to: none
save_strategy: "no"
noise_gamma: 0.5
constraints: {constraints}
output_dir: {out}
"""


def rows(n: int) -> list[dict]:
    """Prompt / completion rows; prompt i repeats prompt i - 40 for i >= 40, so some held-out prompts were trained on."""
    return [{"prompt": f"s{i % 40 // 24} s{i % 24} =", "completion": f" s{(i + 1) % 24} s{i % 5}"} for i in range(n)]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    tiny_causal_lm("llama", seed=1).save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    tiny_encoder("bert", layers=2).save_pretrained(root / "encoder")  # the proxy judge's sentence encoder
    tiny_tokenizer().save_pretrained(root / "encoder")
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(56)))
    for kind in ("descent", "none", "penalty"):
        (root / f"{kind}.yaml").write_text(
            RECIPE.format(model=root / "model", data=root / "rows.jsonl", constraints=kind, out=root / "run")
        )
    return root


def study_argv(root, study_dir, *extra):
    return ["study", "--config", str(root / "descent.yaml"), "--erm_config", str(root / "none.yaml"),
            "--study_dir", str(study_dir), "--training_seeds", "2", "--bootstrap_samples", "300",
            "--generation_gammas", "0", "1.5", "--max_new_tokens", "4", "--judge", "proxy",
            "--judge_model", str(root / "encoder"), "--max_steps", "3", "--exit_new_tokens", "8", *extra]  # fmt: skip


def test_tiny_study_end_to_end_then_resumes_without_work(assets, tmp_path, capsys, monkeypatch):
    out = tmp_path / "study"
    assert cli(study_argv(assets, out)) == 0
    printed = capsys.readouterr().out
    study = json.loads((out / "study.json").read_text())
    for arm in ("constrained", "erm"):
        for seed in (0, 1):
            args = json.loads((out / "train" / arm / f"seed{seed}" / "training_args.json").read_text())
            assert args["seed"] == seed and args["max_steps"] == 3  # the command line's override reached both twins
    assert study["robustness"]["arms"] == {"constrained": ["constrained/seed0", "constrained/seed1"],
                                           "erm": ["erm/seed0", "erm/seed1"]}  # fmt: skip
    pair = study["robustness"]["comparisons"]["constrained - erm"]
    assert {"accuracy@0", "accuracy@2", "id_accuracy", "ood_accuracy", "auc", "descent_share"} <= set(pair)
    for row in pair.values():
        d = row["difference"]
        assert d["low"] <= d["estimate"] <= d["high"] and len(row["seed_std"]) == 2

    # the instruction set: held-out first turns, none of which opens a training row
    instructions = [json.loads(line) for line in (out / "instructions.jsonl").read_text().splitlines()]
    counts = study["settings"]["instructions"]
    assert counts["used"] == len(instructions) > 0 and counts["in_training"] > 0  # repeats were dropped, and counted
    from constrained_sft.data.chat import DataArguments
    from constrained_sft.data.splits import source_splits

    pool, _, _ = source_splits(DataArguments(dataset_name=str(assets / "rows.jsonl"), eval_size=12))
    assert not {r["instruction"] for r in instructions} & {r["prompt"] for r in pool}
    assert all(r["reference"] for r in instructions)

    head = study["head_to_head"]
    assert head["judge_is_proxy"] and head["orders"] == "both" and [lv["gamma"] for lv in head["levels"]] == [0, 1.5]
    for lv in head["levels"]:
        assert lv["n_verdicts"] + lv["unparsed"] == 2 * 2 * len(instructions)  # 2 seed pairs x 2 orders
        assert lv["low"] <= lv["win_rate"] <= lv["high"]
        assert lv["order_agreement"] == 1.0  # the proxy scores each answer alone
    verdicts = json.loads((out / "judging" / "gamma_1.5" / "verdicts-1.json").read_text())
    assert len(verdicts) == len(instructions) and {"model_first", "model_second"} <= set(verdicts[0])

    html, md = (out / "report.html").read_text(), (out / "report.md").read_text()
    for text in (html, md):
        assert "PROXY" in text and "Answers at gamma = 1.5" in text and "constrained - erm" in text
    assert "| constrained - erm | auc |" in md and "![win rate](win_rate_vs_gamma.png)" in md
    assert "order agreement" in html and "data:image/png;base64" in html
    exits = study["exits"]["models"]  # each arm's seed-0 model drafting with its first layers
    assert set(exits) == {"constrained", "erm"} and set(exits["erm"]["exits"]) == {"1", "2", "3"}
    assert all(r["identical_to_greedy"] for m in exits.values() for r in m["exits"].values())
    assert set(exits["constrained"]["layers"]) == {"0.0", "1.5"}  # each layer's readout at the generation levels
    assert "Self-speculative decoding" in html and "Self-speculative decoding" in md
    timings = json.loads((out / "timings.json").read_text())
    assert set(timings["train"]) == {f"{a}/seed{s}" for a in ("constrained", "erm") for s in (0, 1)}
    assert {"robustness", "answers", "exits", "judging"} <= set(timings)
    for name, phases in timings["runs"].items():  # every run's phases: measured seconds beside the plan's estimate
        expected = {"train", "robustness", "answers"} | ({"exits"} if name.endswith("seed0") else set())
        assert set(phases) == expected and all(p["measured"] >= 0 and "estimate" in p for p in phases.values())
    record = json.loads((out / "runs" / "erm-seed0.json").read_text())
    assert set(record["seconds"]) == {"train", "robustness", "answers", "exits"} and record["run"] == "erm/seed0"
    assert set(record["empty_answers"]) == {"0.0", "1.5"}  # empty answers per level, counted
    assert "constrained beats ERM" in printed and "PROXY" in printed.upper() and "resolved" in printed
    # results with no head-to-head yet (no seed has every arm's answers) print as such; before: an AttributeError
    from constrained_sft.cli.study import summary_lines
    from constrained_sft.study.results import StudyResults

    unjudged = StudyResults.from_dict({k: v for k, v in study.items() if k != "head_to_head"})
    unjudged.files = {"html": "report.html", "md": "report.md"}
    lines = summary_lines(unjudged)
    assert "head to head: not judged yet" in lines[1] and "differences are resolved" in lines[2]
    assert not any("beats" in line or "proxy" in line for line in lines)

    # resumed: no training and no evaluation run again, the same numbers come back
    from constrained_sft.evaluation.robustness import measure
    from constrained_sft.tasks import sft

    def refuse(*args, **kwargs):
        raise AssertionError("a finished stage ran again")

    monkeypatch.setattr(sft.SFTTraining, "train", refuse)
    monkeypatch.setattr(measure, "evaluate_level", refuse)
    from constrained_sft.evaluation.exits import command as exits_module

    monkeypatch.setattr(exits_module, "measure_model", refuse)  # the finished exits stage is reused too
    assert cli(study_argv(assets, out)) == 0
    again = json.loads((out / "study.json").read_text())
    assert again["robustness"]["comparisons"] == study["robustness"]["comparisons"]
    kept = json.loads((out / "timings.json").read_text())  # a resume adds to the stages' times, never resets them
    assert kept["train"] == timings["train"] and kept["robustness"] >= timings["robustness"] > 0
    assert again["head_to_head"]["levels"] == head["levels"]

    # a changed recipe behind the same arm names is another study: refused before any run, nothing touched
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    with pytest.raises(
        ValueError, match=r"holds `study` results made with other settings \(arms.constrained.training"
    ):
        cli(study_argv(assets, out, "--learning_rate", "0.05"))
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == stamps


def test_a_three_arm_study_compares_every_arm_with_the_reference(assets, tmp_path, capsys):
    """`--arm penalty=... --reference constrained`: trained, measured and judged beside the twins; every other arm
    against the constrained recipe with intervals, its answers shown beside the reference's in the report."""
    out = tmp_path / "three"
    argv = study_argv(assets, out, "--arm", f"penalty={assets / 'penalty.yaml'}", "--training_seeds", "1",
                      "--max_steps", "2", "--reference", "constrained")  # fmt: skip
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    study = json.loads((out / "study.json").read_text())
    assert set(study["robustness"]["arms"]) == {"constrained", "erm", "penalty"}
    assert set(study["robustness"]["comparisons"]) == {"erm - constrained", "penalty - constrained"}
    for pair in study["robustness"]["comparisons"].values():
        auc = pair["auc"]["difference"]
        assert auc["low"] <= auc["estimate"] <= auc["high"] and auc["verdict"] in ("better", "same", "worse")
    assert study["head_to_head"]["model"] == "erm" and study["head_to_head"]["reference"] == "constrained"
    penalty = study["more_head_to_heads"]["penalty"]
    assert penalty["model"] == "penalty" and all(lv["low"] <= lv["win_rate"] <= lv["high"] for lv in penalty["levels"])
    assert "penalty beats constrained" in printed and "ERM beats constrained" in printed
    md = (out / "report.md").read_text()
    assert "| penalty - constrained | auc |" in md and "## Head-to-head: penalty vs constrained" in md
    verdicts = json.loads((out / "judging" / "erm-vs-constrained" / "gamma_0.0" / "verdicts-0.json").read_text())
    assert verdicts[0]["model_output"][:20] in md  # the first pair's answers, read from its own judging folder
    assert (out / "win_rate_penalty_vs_gamma.png").stat().st_size > 0
    args = json.loads((out / "train" / "penalty" / "seed0" / "training_args.json").read_text())
    assert args["constraints"] == "penalty" and args["max_steps"] == 2  # the command line's override reached it
    state = json.loads((out / "train" / "penalty" / "seed0" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["log_history"]  # the log (per `logging_steps`) is kept beside the model


def test_study_refuses_recipes_that_are_not_twins(assets, tmp_path, capsys, monkeypatch):
    from constrained_sft.cli import console

    other = tmp_path / "other.yaml"
    other.write_text((assets / "none.yaml").read_text().replace("eval_size: 12", "eval_size: 10"))
    argv = ["study", "--config", str(assets / "descent.yaml"), "--erm_config", str(other),
            "--study_dir", str(tmp_path / "s")]  # fmt: skip
    assert console(argv) == 2
    err = capsys.readouterr().err
    assert "must be twins" in err and "`eval_size` (12 vs 10)" in err
    assert not os.path.exists(tmp_path / "s")
    swapped = ["study", "--config", str(assets / "none.yaml"), "--erm_config", str(assets / "descent.yaml")]
    assert console(swapped) == 2
    assert "`constraints: none`; give the constrained recipe" in capsys.readouterr().err
    missing = [*argv[:3], "--erm_config", str(assets / "none.yaml"), "--study_dir", str(tmp_path / "s"),
               "--judge_model", str(tmp_path / "no-encoder")]  # fmt: skip
    assert console(missing) == 2  # the proxy's encoder is looked for before any training
    assert "judge_model" in capsys.readouterr().err and not os.path.exists(tmp_path / "s")
    import importlib
    from types import SimpleNamespace

    study_plan = importlib.import_module("constrained_sft.study.plan")
    twins = [*argv[:3], "--erm_config", str(assets / "none.yaml"), "--study_dir", str(tmp_path / "s")]
    with monkeypatch.context() as m:  # under `accelerate launch`, as accelerate's process state says: training only
        m.setattr(study_plan, "launch", lambda training: SimpleNamespace(num_processes=2, is_main_process=True))
        assert console(twins) == 2
    assert "`--stage all` under 2 processes" in capsys.readouterr().err and not os.path.exists(tmp_path / "s")
    monkeypatch.setenv("WORLD_SIZE", "2")  # a launcher's two processes that accelerate would run one by one
    assert console([*twins, "--stage", "train", "--use_cpu", "false"]) == 2  # (no LOCAL_RANK: not distributed)
    err = capsys.readouterr().err
    assert "2 processes were launched, but accelerate runs this one alone" in err and not os.path.exists(
        tmp_path / "s"
    )


def test_the_plan_resolves_the_settings_once_and_leaves_the_options_as_given(assets, tmp_path):
    """`study.plan.plan`: the folder's default, the runs seed-major, the pairs, the evaluation reading the held-out
    instructions where the study writes them, one process; frozen, the caller's options unchanged, nothing written."""
    import dataclasses

    from trl import TrlParser

    from constrained_sft.study import StudyArguments
    from constrained_sft.study.plan import plan
    from constrained_sft.tasks import get_task

    sft = get_task("sft")
    parse = lambda kind: sft.recipe(  # noqa: E731  (a parser per recipe: it keeps the recipe's keys as defaults)
        TrlParser(sft.parser_classes()).parse_args_and_config(["--config", str(assets / f"{kind}.yaml")])
    )
    options = StudyArguments(
        erm_config=str(assets / "none.yaml"), training_seeds=2, judge_model=str(assets / "encoder")
    )
    p = plan(options, sft, parse("descent"), parse("none"), {"penalty": parse("penalty")})
    assert p.folder.root == p.options.study_dir == f"{assets / 'run'}-study" and options.study_dir is None
    assert [r.name for r in p.runs] == [f"{arm}/seed{s}" for s in (0, 1) for arm in ("constrained", "erm", "penalty")]
    assert p.pairs == (("constrained", "erm"), ("penalty", "erm")) and p.differences == ()
    assert p.evaluation is not None and p.evaluation.instructions == p.folder.instructions
    assert p.evaluation.gammas == [0.0, 0.5, 1.0, 1.5, 2.0] and p.evaluation.sigma_x is None
    assert p.processes.num_processes == 1 and p.processes.is_main_process
    assert not os.path.exists(p.folder.root)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.runs = ()  # type: ignore[misc]
    trained_only = plan(dataclasses.replace(options, stage="train"), sft, parse("descent"), parse("none"), {})
    assert trained_only.evaluation is None and trained_only.pairs == (("constrained", "erm"),)


def test_training_stage_under_accelerate_launch_then_evaluation_in_one_process(assets, tmp_path):
    """Two gloo CPU processes train both twins one after the other in one launch (the process group outlives the
    first run), the main process late to look at the study folder (tests/scripts/study_late_main.py: the order that
    failed in CI), then `--stage evaluate` runs in one process on the finished runs."""
    from conftest import hang_limit, launch_failure, launch_on_cpu

    out = tmp_path / "study"
    argv = study_argv(assets, out, "--training_seeds", "1", "--stage", "train")
    script = os.path.join(os.path.dirname(__file__), "scripts", "study_late_main.py")
    result = launch_on_cpu(2, script, *argv, timeout=hang_limit(45))
    assert result.returncode == 0, launch_failure(result)
    for arm in ("constrained", "erm"):
        assert (out / "train" / arm / "seed0" / "training_args.json").is_file()
    assert cli(study_argv(assets, out, "--training_seeds", "1", "--stage", "evaluate")) == 0
    assert json.loads((out / "study.json").read_text())["head_to_head"]["levels"]


def test_a_study_judged_by_a_self_hosted_server(assets, tmp_path, monkeypatch):
    """`--judge openai-compatible`: the server reached before any training, every non-empty pair asked in both
    orders over HTTP, the judge named with its host and its cost in study.json and the report; the key in no file."""
    from evaluation.openai_server import OpenAIServer

    key = "sk-STUDY-SENTINEL-0042"
    monkeypatch.setenv("OPENAI_API_KEY", key)  # a vLLM started with --api-key
    out = tmp_path / "study"
    with OpenAIServer(keys=(key,)) as server:
        argv = study_argv(assets, out, "--training_seeds", "1", "--exit_prompts", "0", "--judge", "openai-compatible",
                          "--judge_base_url", server.url, "--judge_model", "gpt-5")  # fmt: skip
        assert cli(argv) == 0
    assert server.requests[0]["path"].endswith("/models")
    head = json.loads((out / "study.json").read_text())["head_to_head"]
    assert head["judge_config"].startswith("openai-compatible at 127.0.0.1:") and not head["judge_is_proxy"]
    asked = [r for r in server.requests if r["body"] is not None]
    assert head["cost"]["requests"] == len(asked) > 0 and head["cost"]["price_usd"] is None
    assert sum(lv["n_verdicts"] + lv["unparsed"] for lv in head["levels"]) >= len(asked)  # empty answers: by rule
    assert "Judge cost" in (out / "report.md").read_text()
    assert not [p for p in out.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
