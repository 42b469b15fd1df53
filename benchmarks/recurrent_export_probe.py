"""Can a recurrent policy cell be exported with its state as inputs and outputs? A measurement, not
the export command (``msrl export`` refuses recurrent runs until it writes them with a manifest,
golden sequences and the bundle).

    python benchmarks/recurrent_export_probe.py RUN_DIR [--episodes 20] [--json OUT]

For a trained recurrent run: the training-time RecurrentPolicyCell written with MindSpore's own
writers, (obs, h, c, episode_start) -> (action, h', c'), as MindIR with a dynamic batch
(reloaded with nn.GraphCell) and as ONNX with a symbolic batch (ONNX Runtime). Then whole seeded
episodes driven by the training cell carrying its state; at every step the same inputs go to
both artifacts: the largest difference of the action and of h', c' per step, the first step
that differs. Then the same episodes driven by each artifact carrying its own state (the
deployed loop): their returns against the training cell's.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np


def onnx_dynamic(path):
    import onnx

    model = onnx.load(path)
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "batch"
    del model.graph.value_info[:]
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--seed", type=int, default=5000)
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args()

    import mindspore as ms
    import onnxruntime as ort
    from mindspore import Tensor, nn

    from msrl_consistent.envs import flat_obs, make_env
    from msrl_consistent.runtime import TrainCellPolicy

    ref = TrainCellPolicy(args.run_dir)
    if not ref.state_size:
        raise SystemExit(f"recurrent_export_probe: error: {args.run_dir} did not train a recurrent policy")
    cell, d, hid = ref.cell, ref.obs_dim, ref.state_size
    work = tempfile.mkdtemp(prefix="recurrent-export-")
    dyn = [Tensor(shape=[None, d], dtype=ms.float32), Tensor(shape=[None, hid], dtype=ms.float32),
           Tensor(shape=[None, hid], dtype=ms.float32), Tensor(shape=[None], dtype=ms.float32)]
    ms.export(cell, *dyn, file_name=os.path.join(work, "actor"), file_format="MINDIR")
    graph = nn.GraphCell(ms.load(os.path.join(work, "actor.mindir")))
    zeros = [np.zeros((1, d), np.float32), np.zeros((1, hid), np.float32), np.zeros((1, hid), np.float32),
             np.ones(1, np.float32)]
    import mindspore.onnx as ms_onnx
    ms_onnx.export(cell, *(Tensor(z) for z in zeros), file_name=os.path.join(work, "actor.onnx"),
                   input_names=["obs", "h", "c", "episode_start"])
    onnx_dynamic(os.path.join(work, "actor.onnx"))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(work, "actor.onnx"), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]

    def train_step(x, h, c, s):
        return [o.asnumpy() for o in cell(Tensor(x), Tensor(h), Tensor(c), Tensor(s))]

    def mindir_step(x, h, c, s):
        return [o.asnumpy() for o in graph(Tensor(x), Tensor(h), Tensor(c), Tensor(s))]

    def onnx_step(x, h, c, s):
        return sess.run(None, dict(zip(names, (x, h, c, s))))

    def episode(step, seed, compare=()):
        env = make_env(ref.env_config())
        obs, _ = env.reset(seed=seed)
        h, c, s = np.zeros((1, hid), np.float32), np.zeros((1, hid), np.float32), np.ones(1, np.float32)
        ret, t, worst = 0.0, 0, {name: {"action": 0.0, "state": 0.0, "first_diff": None} for name, _ in compare}
        done = False
        while not done:
            x = flat_obs(obs, 1)
            a, h2, c2 = step(x, h, c, s)
            for name, other in compare:
                oa, oh, oc = other(x, h, c, s)
                w = worst[name]
                da = float(np.abs(oa.astype(np.float64) - a).max())
                ds = float(max(np.abs(oh - h2).max(), np.abs(oc - c2).max()))
                w["action"], w["state"] = max(w["action"], da), max(w["state"], ds)
                if w["first_diff"] is None and (da > 0 or ds > 0):
                    w["first_diff"] = t
            obs, r, term, trunc, _ = env.step(int(a.reshape(-1)[0]) if ref.discrete else a.reshape(-1))
            ret, t, done = ret + float(r), t + 1, bool(term or trunc)
            h, c, s = h2, c2, np.zeros(1, np.float32)
        env.close()
        return ret, t, worst

    steps, per_ep = 0, []
    for i in range(args.episodes):
        ret, t, worst = episode(train_step, args.seed + i, (("mindir", mindir_step), ("onnxruntime", onnx_step)))
        steps += t
        per_ep.append({"return": ret, "steps": t, **worst})
    deployed = {name: [episode(f, args.seed + i)[0] for i in range(args.episodes)]
                for name, f in (("train", train_step), ("mindir", mindir_step), ("onnxruntime", onnx_step))}
    report = {"run_dir": os.path.abspath(args.run_dir), "episodes": args.episodes, "steps": steps,
              "mindir_bitwise_steps": sum(e["steps"] for e in per_ep if e["mindir"]["first_diff"] is None),
              "mindir_max_action_err": max(e["mindir"]["action"] for e in per_ep),
              "mindir_max_state_err": max(e["mindir"]["state"] for e in per_ep),
              "onnx_max_action_err": max(e["onnxruntime"]["action"] for e in per_ep),
              "onnx_max_state_err": max(e["onnxruntime"]["state"] for e in per_ep),
              "returns": deployed, "identical_returns": {k: v == deployed["train"] for k, v in deployed.items()},
              "per_episode": per_ep}
    summary = {k: v for k, v in report.items() if k not in ("per_episode", "returns")}
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
