"""Bring Stable-Baselines3 models in: ``msrl import MODEL.zip --out RUN_DIR`` (docs/sb3.md).

An SB3 zip (PPO, A2C, SAC, TD3, DQN) or an RL Zoo log folder becomes an ordinary msrl run
directory whose policy cell holds the SB3 policy's weights, VecNormalize's observation statistics
and SB3's action post-processing, so ``msrl eval``, ``export``, ``verify`` and
``train CONFIG --init-from RUN_DIR`` take it. No pickle of the model is executed (unpickle.py);
neither torch nor SB3 is needed, but for ``--check sb3``.
"""
from __future__ import annotations

import json

from .importer import import_model

__all__ = ["add_parser", "cmd_import", "import_model"]


def cmd_import(args) -> int:
    summary = import_model(args.model, args.out, vecnormalize=args.vecnormalize, env=args.env, check=args.check)
    src = summary["imported_from"]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"msrl: imported {src['sb3_algorithm']} ({src['policy_class']}) on {summary['env']} as msrl "
              f"{summary['algorithm']} -> {args.out} (params_sha256 {summary['params_sha256'][:12]})")
    check = summary.get("check")
    if check is None:
        return 0
    figure = (f"{check['identical_fraction']:.2%} identical" if check["kind"] == "discrete"
              else f"max |diff| {check['max_abs_diff']:.3g}")
    if not args.json:
        print(f"msrl: check against {check['source']}: {check['observations']} observations, {figure} "
              f"({check['criterion']}): {'passed' if check['passed'] else 'MISMATCH'}")
    return 0 if check["passed"] else 1


def add_parser(sub) -> None:
    p = sub.add_parser("import", help="a Stable-Baselines3 model zip or RL Zoo log folder as an msrl run directory")
    p.add_argument("model", help="SB3 model .zip (PPO, A2C, SAC, TD3, DQN), or an RL Zoo folder logs/ALGO/ENV_1/")
    p.add_argument("--out", required=True, help="run directory to create")
    p.add_argument("--vecnormalize", metavar="PKL", help="VecNormalize statistics saved beside the model "
                                                         "(an RL Zoo folder's ENV/vecnormalize.pkl is found itself)")
    p.add_argument("--env", metavar="ID", help="the gymnasium id the model was trained on (an RL Zoo folder names it)")
    p.add_argument("--check", metavar="PREDICT.npz",
                   help="compare with SB3's predict(deterministic=True): a .npz of arrays obs and actions, or 'sb3' "
                        "to let an installed Stable-Baselines3 load the model (it runs the zip's pickles) and predict; "
                        "exit 1 on a mismatch")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_import)
