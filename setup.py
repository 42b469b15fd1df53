"""Distribution `msrl-consistent`: MindSpore-native RL with train-inference consistency.

`algorithms/` and `export/` live at the top level of the repository and install as
sub-packages of `msrl_consistent` (see ../shared/ARCHITECTURE.md), so no generic
top-level name is put into site-packages.
"""
from setuptools import setup

setup(
    name="msrl-consistent",
    version="0.1.0",
    description="MindSpore reinforcement learning whose exported policy provably acts like the trained one",
    python_requires=">=3.9",
    packages=["msrl_consistent", "msrl_consistent.algorithms", "msrl_consistent.export"],
    package_dir={
        "msrl_consistent": "msrl_consistent",
        "msrl_consistent.algorithms": "algorithms",
        "msrl_consistent.export": "export",
    },
    install_requires=[
        "mindspore==2.10.0",
        # MindSpore 2.10 ships modules built against NumPy 1.x: under NumPy 2 its first
        # PyNative scalar op raises SystemError.
        "numpy>=1.24,<2",
        # 1.1 introduced AutoresetMode.SAME_STEP, which the rollout code relies on.
        "gymnasium>=1.1,<2",
        "pyyaml",
        "tensorboardX",
        "tqdm",
        "safetensors",
    ],
    extras_require={
        "test": ["pytest", "hypothesis", "onnx", "onnxruntime"],
        "onnx": ["onnx", "onnxruntime"],
        "mujoco": ["gymnasium[mujoco]>=1.1,<2"],
        "plot": ["matplotlib"],
        "bench": ["torch==2.13.0", "stable-baselines3", "onnx", "onnxruntime"],
    },
    entry_points={"console_scripts": ["msrl=msrl_consistent.entry:main"]},
)
