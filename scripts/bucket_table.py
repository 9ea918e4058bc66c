#!/usr/bin/env python3
"""Worked bucket table for tests/test_buckets.c, computed by SimpleTuner's own code (issue 41, part 3).

Runs SimpleTuner's TrainingSample.prepare() (which calls MultiaspectImage's size calculators and the crop handlers),
MetadataBackend.meets_resolution_requirements, MetadataBackend._compute_video_bucket, the factory's pixel_area
conversion and a video model's adjust_video_frames over images and video clips under many dataset settings, the way
helpers/metadata/backends/discovery.py:_process_for_bucket does, and writes one CSV row per sample.

Usage (a SimpleTuner checkout, e.g. `git archive HEAD simpletuner/helpers | tar -x -C /tmp/st`, and a venv with
pillow, numpy and trainingsample; the committed table: SimpleTuner bc8e6ab77, trainingsample 0.3.2, pillow 13.0.0,
numpy 2.4.6, and the same bytes again from them):
    python scripts/bucket_table.py /tmp/st > tests/fixtures/buckets/table.csv

Only the heavy imports are stubbed (torchvision, diffusers, tqdm, the StateTracker singleton, the model registry);
every rule that decides a size runs from SimpleTuner's files. Images are real PIL images (the image path of
discovery.py); videos go through the ffprobe metadata-only path (original_size and num_frames, no pixels).
"""
import ast
import importlib.util
import json
import random
import sys
import types
from math import floor

import numpy as np
from PIL import Image

ST = sys.argv[1] if len(sys.argv) > 1 else "/tmp/st"
H = ST + "/simpletuner/helpers/"


# --- stubs for the heavy imports -------------------------------------------------------------------------------------
class Args:
    aspect_bucket_alignment = 64
    aspect_bucket_rounding = 2


class Model:
    MAXIMUM_CANVAS_SIZE = None

    def get_transforms(self):
        return None


class VideoModel:
    """A model with SimpleTuner's 8k+1 frame rule; adjust_video_frames is replaced by Wan's own, below."""


class StateTracker:
    args = Args()
    model = Model()
    backend_config = {}
    aspect_resolution_map = {}
    model_family = None

    @classmethod
    def get_args(cls):
        return cls.args

    @classmethod
    def get_model(cls):
        return cls.model

    @classmethod
    def get_model_family(cls):
        return cls.model_family

    @classmethod
    def get_data_backend_config(cls, data_backend_id=None):
        return cls.backend_config

    @classmethod
    def get_metadata_by_filepath(cls, *a, **k):
        return None

    @classmethod
    def get_webhook_handler(cls):
        return None

    # the real ones (state_tracker.py) without the save to disk
    @classmethod
    def get_resolution_by_aspect(cls, dataloader_resolution, aspect):
        return cls.aspect_resolution_map.get(dataloader_resolution, {}).get(str(aspect), None)

    @classmethod
    def set_resolution_by_aspect(cls, dataloader_resolution, aspect, resolution):
        cls.aspect_resolution_map.setdefault(dataloader_resolution, {})[str(aspect)] = resolution


def module(name, **attrs):
    m = types.ModuleType(name)
    m.__path__ = []
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


for pkg in ["simpletuner", "simpletuner.helpers", "simpletuner.helpers.training", "simpletuner.helpers.multiaspect",
            "simpletuner.helpers.image_manipulation", "torchvision", "diffusers", "diffusers.utils"]:
    module(pkg)
module("torchvision.transforms")
module("diffusers.utils.export_utils", export_to_gif=None)
module("tqdm", tqdm=types.SimpleNamespace(write=lambda *a, **k: None))
module("simpletuner.helpers.training.state_tracker", StateTracker=StateTracker)
module("simpletuner.helpers.training.multi_process", should_log=lambda: False)
module("simpletuner.helpers.models", ModelRegistry=types.SimpleNamespace(model_families=lambda: {"video": VideoModel}))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    spec.loader.exec_module(m)
    return m


for name in ["multiaspect.video", "multiaspect.image", "image_manipulation.cropping",
             "image_manipulation.batched_training_samples", "image_manipulation.training_sample"]:
    load("simpletuner.helpers." + name, H + name.replace(".", "/") + ".py")
TrainingSample = sys.modules["simpletuner.helpers.image_manipulation.training_sample"].TrainingSample
_select = TrainingSample._select_random_aspect


def select_recorded(self):
    """SimpleTuner's own choice of a crop aspect, kept for the table (the C side takes the drawn aspect as input)."""
    select_recorded.last = _select(self)
    return select_recorded.last


TrainingSample._select_random_aspect = select_recorded


def method(path, cls, name, **glob):
    """One method of a class in a SimpleTuner file, compiled from its source as a plain function."""
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == name:
                    f.decorator_list, f.returns = [], None  # annotations name typing helpers not loaded here
                    for a in f.args.args:
                        a.annotation = None
                    ns = dict(glob)
                    exec(compile(ast.Module([f], []), path, "exec"), ns)
                    return ns[name]
    raise KeyError(f"{cls}.{name} not in {path}")


class DatasetType:
    IMAGE, VIDEO, AUDIO = "image", "video", "audio"


meets = method(H + "metadata/backends/base.py", "MetadataBackend", "meets_resolution_requirements",
               StateTracker=StateTracker, np=np, floor=floor, Image=Image, DatasetType=DatasetType,
               logger=types.SimpleNamespace(debug=lambda *a, **k: None, warning=lambda *a, **k: None))
video_bucket = method(H + "metadata/backends/base.py", "MetadataBackend", "_compute_video_bucket")
pixel_area = method(H + "data_backend/factory.py", "FactoryRegistry", "_handle_resolution_conversion",
                    ensure_dataset_type=lambda v, default=None: v or default, DatasetType=DatasetType)
VideoModel.adjust_video_frames = classmethod(method(H + "models/wan/model.py", "Wan", "adjust_video_frames"))


# --- one sample, as discovery.py's _process_for_bucket handles it ----------------------------------------------------
def backend_of(cfg):
    """The backend config and the metadata backend's fields, as the factory and MetadataBackend.__init__ set them."""
    b = {k: v for k, v in cfg.items() if k not in ("name", "alignment", "rounding", "canvas", "video", "frames_model")}
    pixel_area(types.SimpleNamespace(args=types.SimpleNamespace(resolution_type="pixel", resolution=1024)), b)
    video = cfg.get("video", {})
    mib = b.get("minimum_image_size")
    self = types.SimpleNamespace(
        dataset_config=b, id="d", resolution_type=b["resolution_type"],
        dataset_type=DatasetType.VIDEO if "video" in cfg else DatasetType.IMAGE,
        minimum_image_size=float(mib) if mib else None,
        minimum_num_frames=float(video["min_frames"]) if video.get("min_frames") else None,
        maximum_num_frames=float(video["max_frames"]) if video.get("max_frames") else None,
        video_frame_interval=video.get("frame_interval") if video.get("bucket_strategy") == "resolution_frames" else None,
        bucket_strategy=video.get("bucket_strategy", "aspect_ratio"))
    return b, self


def process(cfg, backend, mb, w, h, frames):
    StateTracker.backend_config = backend
    image, meta = None, {}
    if frames is None:
        image = Image.new("RGB", (w, h))
        if not meets(mb, image=image):
            return None
        meta["original_size"] = image.size
    else:
        meta = {"original_size": (w, h), "num_frames": frames}
        if cfg.get("frames_model"):
            meta["num_frames"] = VideoModel.adjust_video_frames(frames)
        if not meets(mb, image_metadata=meta):
            return None
    random.seed(1)  # crop_aspect random and crop_style random draw from Python's RNG
    s = TrainingSample(image=image, data_backend_id="d", image_metadata=meta, model=StateTracker.model)
    p = s.prepare()
    key, bframes = str(p.aspect_ratio), meta.get("num_frames", 0)
    if frames is not None and mb.bucket_strategy == "resolution_frames":
        key, bframes = video_bucket(mb, p.target_size[0], p.target_size[1], meta["num_frames"])
    return p, key, meta.get("num_frames", 0), bframes


# --- the settings and the samples ------------------------------------------------------------------------------------
IMAGES = [(1024, 1024), (4000, 3000), (3000, 4000), (1920, 1080), (1080, 1920), (512, 512), (640, 480), (800, 1200),
          (2048, 1365), (1365, 2048), (300, 300), (1280, 720), (720, 1280), (5000, 1000), (1000, 5000), (1500, 1000),
          (999, 777), (2560, 1440), (1024, 683), (700, 1000), (333, 1501), (4096, 4096), (1200, 1201), (801, 600),
          (1600, 900), (2000, 3000), (1023, 1025), (400, 300), (6000, 4000), (768, 1344), (1344, 768), (960, 640),
          (257, 1999), (3500, 2400), (1111, 2222), (2222, 1111), (640, 640), (1536, 1024), (1024, 1536), (600, 450),
          (4500, 3000), (1280, 1024), (1024, 1280), (2400, 1600), (500, 2000), (2000, 500), (1776, 1000), (1000, 1776),
          (3000, 2000), (850, 1100)]
CLIPS = [(1280, 720, 81), (832, 480, 81), (480, 832, 49), (1920, 1080, 120), (640, 360, 33), (720, 1280, 100),
         (960, 544, 17), (1024, 576, 64), (512, 512, 25), (768, 512, 49), (400, 240, 81), (1280, 720, 12)]

BASE = dict(resolution=1024, resolution_type="pixel", crop=False, crop_style="center", crop_aspect="square")
CONFIGS = [
    dict(BASE, name="px1024_nocrop"),
    dict(BASE, name="px512_nocrop_min384", resolution=512, minimum_image_size=384),
    dict(BASE, name="px1024_square_center", crop=True),
    dict(BASE, name="px768_preserve_corner", resolution=768, crop=True, crop_aspect="preserve", crop_style="corner"),
    dict(BASE, name="px1024_preserve_center_ds", crop=True, crop_aspect="preserve", maximum_image_size=1536,
         target_downsample_size=1280),
    dict(BASE, name="px1024_closest_a16", crop=True, crop_aspect="closest", alignment=16,
         crop_aspect_buckets=[0.5, 0.75, 1.0, 1.33, 1.78]),
    dict(BASE, name="area1_nocrop", resolution=1.0, resolution_type="area"),
    dict(BASE, name="area0.5_nocrop_a32_min0.25", resolution=0.5, resolution_type="area", alignment=32,
         minimum_image_size=0.25),
    dict(BASE, name="area1_square_center", resolution=1.0, resolution_type="area", crop=True, minimum_image_size=0.5),
    dict(BASE, name="area1_preserve_center_ds", resolution=1.0, resolution_type="area", crop=True,
         crop_aspect="preserve", maximum_image_size=2.0, target_downsample_size=1.5),
    dict(BASE, name="area1_closest", resolution=1.0, resolution_type="area", crop=True, crop_aspect="closest",
         crop_aspect_buckets=[0.56, 0.67, 0.75, 1.0, 1.33, 1.5, 1.78]),
    dict(BASE, name="area1_random_thr", resolution=1.0, resolution_type="area", crop=True, crop_aspect="random",
         crop_aspect_buckets=[0.5, 0.75, 1.0, 1.5, 2.0], max_upscale_threshold=0.2),
    dict(BASE, name="area1_random_weighted_thr", resolution=1.0, resolution_type="area", crop=True,
         crop_aspect="random", max_upscale_threshold=0.2,
         crop_aspect_buckets=[dict(aspect=0.5, weight=0.25), dict(aspect=1.0, weight=0.5), dict(aspect=2.0, weight=0.25)]),
    dict(BASE, name="px1024_closest_weighted", crop=True, crop_aspect="closest",
         crop_aspect_buckets=[dict(aspect=0.75, weight=0.5), dict(aspect=1.33, weight=0.25), dict(aspect=1.78, weight=0.1)]),
    dict(BASE, name="pxarea1024_nocrop", resolution_type="pixel_area"),
    dict(BASE, name="pxarea768_preserve_center_min512_a16", resolution=768, resolution_type="pixel_area", crop=True,
         crop_aspect="preserve", minimum_image_size=512, alignment=16),
    dict(BASE, name="pxarea1024_square_canvas", resolution_type="pixel_area", crop=True, canvas=1024 ** 2 - 1),
    dict(BASE, name="pxarea1024_preserve_corner_ds", resolution_type="pixel_area", crop=True, crop_aspect="preserve",
         crop_style="corner", maximum_image_size=2048, target_downsample_size=1536),
    dict(BASE, name="px1024_rounding3_a8", alignment=8, rounding=3),
]
VCONFIGS = [
    dict(BASE, name="v_pxarea480_wan", resolution=480, resolution_type="pixel_area", alignment=16, frames_model=True,
         video=dict(min_frames=17, max_frames=121)),
    dict(BASE, name="v_pxarea720_resframes", resolution=720, resolution_type="pixel_area", alignment=32,
         frames_model=True, video=dict(bucket_strategy="resolution_frames", frame_interval=16)),
    dict(BASE, name="v_px512_preserve_center", resolution=512, crop=True, crop_aspect="preserve", alignment=32,
         video=dict(min_frames=20)),
]


def fmt(v):
    return "-" if v is None else str(v)


COLUMNS = ["config", "w", "h", "frames", "skip", "target_w", "target_h", "inter_w", "inter_h", "crop_top", "crop_left",
           "aspect", "key", "num_frames", "bucket_frames", "random_aspect"]


def main():
    print("# made by scripts/bucket_table.py from SimpleTuner's helpers; configs as JSON after #config")
    for cfg in CONFIGS + VCONFIGS:
        print("#config " + json.dumps(cfg, sort_keys=True))
    print(",".join(COLUMNS))
    for cfg in CONFIGS + VCONFIGS:
        Args.aspect_bucket_alignment = cfg.get("alignment", 64)
        Args.aspect_bucket_rounding = cfg.get("rounding", 2)
        Model.MAXIMUM_CANVAS_SIZE = cfg.get("canvas")
        StateTracker.aspect_resolution_map = {}  # one dataset, in the order of its samples
        backend, mb = backend_of(cfg)
        samples = [(w, h, f) for w, h, f in CLIPS] if "video" in cfg else [(w, h, None) for w, h in IMAGES]
        for w, h, f in samples:
            r = process(cfg, backend, mb, w, h, f)
            row = [cfg["name"], w, h, f if f is not None else 0]
            if r is None:
                row += [1] + ["-"] * (len(COLUMNS) - 5)
            else:
                p, key, nf, bf = r
                crop = p.crop_coordinates if backend["crop_style"] != "random" else (None, None)
                rand = p.aspect_ratio if backend["crop"] and backend["crop_aspect"] == "random" else None
                if rand is not None:  # the aspect drawn before the size calculation: the one SimpleTuner chose
                    rand = select_recorded.last
                row += [0, *p.target_size, *p.intermediary_size, fmt(crop[0]), fmt(crop[1]), repr(p.aspect_ratio),
                        key, nf, bf, fmt(rand)]
            print(",".join(str(x) for x in row))


if __name__ == "__main__":
    main()
