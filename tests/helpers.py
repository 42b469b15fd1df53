"""Helpers shared by the test modules (import them as ``from helpers import ...``)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")


def train_run(tmp_root, config, overrides, name):
    """Train through the public API into tmp_root/name; returns (run_dir, summary)."""
    from msrl_consistent import registry
    from msrl_consistent.checkpoint import atomic_write_text
    from msrl_consistent.config import dump_config, load_config

    cfg = load_config(os.path.join(CONFIGS, config), overrides)
    run_dir = os.path.join(str(tmp_root), name)
    os.makedirs(run_dir, exist_ok=True)
    atomic_write_text(os.path.join(run_dir, "config.yaml"), dump_config(cfg))
    algo = registry.get(cfg.algorithm)(cfg)
    summary = algo.learn(run_dir, progress=False)
    return run_dir, summary, algo
