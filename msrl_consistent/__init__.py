"""msrl-consistent: MindSpore RL whose exported policy provably acts like the trained one."""

__version__ = "0.2.0"
