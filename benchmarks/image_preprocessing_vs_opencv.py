"""The in-cell image preprocessing (networks.image.ImageEncoder: grayscale + area resize as MatMuls)
against gymnasium's AtariPreprocessing path (OpenCV: cvtColor RGB2GRAY to uint8, then resize
INTER_AREA to uint8), on 210x160x3 frames resized to 84x84. Not bitwise, and it need not be:
training and the export both use the in-cell version; this states how far a policy trained on
the OpenCV frames would be from ours.

Frames (no ROMs needed): Atari-like frames (random rectangles of a 16-colour palette on a
black background) and uniform noise frames (the worst case for resampling differences).

    PYTHONPATH=<dir with cv2> python benchmarks/image_preprocessing_vs_opencv.py [--frames 200]
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def atari_like(rng: np.random.Generator, n: int) -> np.ndarray:
    palette = rng.integers(0, 256, (16, 3))
    out = np.zeros((n, 210, 160, 3), np.uint8)
    for f in out:
        for _ in range(rng.integers(5, 40)):
            r, c = rng.integers(0, 210), rng.integers(0, 160)
            h, w = rng.integers(1, 40), rng.integers(1, 40)
            f[r:r + h, c:c + w] = palette[rng.integers(0, 16)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=200)
    a = ap.parse_args()
    import cv2
    from gymnasium import spaces
    from mindspore import Tensor

    from msrl_consistent.envs import space_spec
    from msrl_consistent.networks.image import ImageEncoder

    spec = space_spec(spaces.Box(0, 255, (210, 160, 3), np.uint8), spaces.Discrete(4))
    enc = ImageEncoder(np.random.default_rng(0), spec, "nature", True, [84, 84], True)
    rng = np.random.default_rng(0)
    report = {"opencv": cv2.__version__}
    for name, frames in (("atari_like", atari_like(rng, a.frames)),
                         ("uniform_noise", rng.integers(0, 256, (a.frames, 210, 160, 3)).astype(np.uint8))):
        ours = enc.preprocess(Tensor(frames.reshape(len(frames), -1))).asnumpy()[:, 0]  # [0, 1]
        theirs = np.stack([cv2.resize(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY), (84, 84), interpolation=cv2.INTER_AREA)
                           for f in frames]).astype(np.float64) / 255.0
        err = np.abs(ours.astype(np.float64) - theirs) * 255.0  # in gray levels
        report[name] = {"frames": len(frames), "max_abs_gray_levels": round(float(err.max()), 3),
                        "mean_abs_gray_levels": round(float(err.mean()), 4),
                        "p99_abs_gray_levels": round(float(np.percentile(err, 99)), 3),
                        "share_within_0.5_level": round(float((err <= 0.5).mean()), 4),
                        "share_within_1_level": round(float((err <= 1.0).mean()), 4)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
