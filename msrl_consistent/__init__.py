"""msrl-consistent: MindSpore RL whose exported policy provably acts like the trained one."""

__version__ = "0.2.0"


def __getattr__(name):
    # ``msrl_consistent.train`` without importing MindSpore on ``import msrl_consistent``.
    if name == "train":
        from .training import train
        return train
    raise AttributeError(f"module 'msrl_consistent' has no attribute {name!r}")
