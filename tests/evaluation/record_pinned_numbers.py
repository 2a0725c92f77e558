"""Run the evaluation as it is at this commit on the pinned assets and write pinned_numbers.json (run once, before the task layer replaced this API; kept in this commit only)."""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pinned_assets import GAMMAS, VIDEO_GAMMAS, classification_assets, sft_assets, video_assets, video_data_fields  # noqa: E402

from constrained_sft.data import ClassificationDataArguments, DataArguments
from constrained_sft.data.video import VideoDataArguments
from constrained_sft.evaluation.robustness import RobustnessArguments, run
from constrained_sft.evaluation.video_report import run_video
from constrained_sft.sweep.compare import compare_arms

SUMMARY = ("auc", "id_accuracy", "ood_accuracy", "descent_share", "id_rmse", "ood_rmse")
LEVEL = (
    "gamma",
    "accuracy_mean",
    "accuracy_std",
    "loss_mean",
    "loss_std",
    "descent_share",
    "ratio_median",
    "rmse_mean",
    "rmse_std",
    "layer_loss",
    "layer_rmse",
)


def summaries(results):
    return {
        n: {
            **{k: m["summary"][k] for k in SUMMARY if k in m["summary"]},
            "levels": [{k: r[k] for k in LEVEL if k in r} for r in m["summary"]["levels"]],
        }
        for n, m in results["models"].items()
    }


out = {}
with tempfile.TemporaryDirectory() as root:
    c = classification_assets(root)
    names = [f"{arm}/seed{i}" for arm in c["models"] for i in range(2)]
    args = RobustnessArguments(
        task="classification",
        models=[p for ps in c["models"].values() for p in ps],
        names=names,
        output_dir=os.path.join(root, "c-out"),
        gammas=GAMMAS,
        seeds=1,
        batch_size=16,
    )
    results = run(args, ClassificationDataArguments(dataset_name=c["data"], max_seq_length=16))
    out["classification"] = {
        "summaries": summaries(results),
        "comparison": compare_arms(results, [("a", "b")], seeds=2, n_boot=500)["a - b"],
        "sigma_x": results["settings"]["sigma_x"],
    }
    s = sft_assets(root)
    args = RobustnessArguments(
        models=s["models"],
        names=["a", "b"],
        output_dir=os.path.join(root, "s-out"),
        gammas=GAMMAS,
        seeds=2,
        batch_size=8,
        max_length=64,
    )
    results = run(args, DataArguments(dataset_name=s["data"], eval_size=12))
    out["sft"] = {
        "summaries": summaries(results),
        "differences": results["differences"],
        "sigma_x": results["settings"]["sigma_x"],
    }
    v = video_assets(root)
    args = RobustnessArguments(
        task="video",
        models=v["models"],
        names=["a", "b"],
        output_dir=os.path.join(root, "v-out"),
        gammas=VIDEO_GAMMAS,
        seeds=2,
        batch_size=64,
    )
    results = run_video(args, VideoDataArguments(**video_data_fields(v["videos"])), {})
    out["video"] = {
        "summaries": summaries(results),
        "differences": results["differences"],
        "sigma_x": results["settings"]["sigma_x"],
    }
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pinned_numbers.json"), "w") as f:
    json.dump(out, f, indent=1)
print(json.dumps(out["classification"]["comparison"], indent=1)[:3000])
print(json.dumps(out["video"]["differences"], indent=1)[:2000])
