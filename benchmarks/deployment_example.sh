#!/usr/bin/env bash
# Produces the worked example of docs/deployment.md: precision sweep, an ONNX Runtime trace
# replayed against the training cell, and an fp16 export's trace replayed to its divergence.
#   bash benchmarks/deployment_example.sh RUNS_DIR OUT_DIR
# RUNS_DIR holds ppo-CartPole-v1-seed0 and ppo-Pendulum-v1-seed0 (from benchmarks/ppo_acceptance.py).
set -euo pipefail
RUNS=$1
OUT=$2
export GLOG_v=3
mkdir -p "$OUT"
cd "$RUNS"
for env in CartPole-v1 Pendulum-v1; do
  R=ppo-$env-seed0
  E=$OUT/$env
  rm -rf "$E" "$E-fp16"
  echo "### $env"
  echo
  echo '```'
  echo "\$ msrl export $R --out exports/$env --format mindir,onnx --precision-sweep"
  msrl export "$R" --out "$E" --format mindir,onnx --precision-sweep | sed "s#$OUT#exports#g"
  echo "\$ msrl verify exports/$env --backend onnxruntime"
  msrl verify "$E" --backend onnxruntime | sed "s#$OUT#exports#g" || true
  echo "\$ msrl eval exports/$env --backend onnxruntime --episodes 5 --record traces/$env-ort.npz"
  msrl eval "$E" --backend onnxruntime --episodes 5 --record "$OUT/$env-ort.npz"
  echo "\$ msrl replay exports/$env traces/$env-ort.npz --against train"
  msrl replay "$E" "$OUT/$env-ort.npz" --against train | sed "s#$OUT#exports#g" || true
  echo "\$ msrl export $R --out exports/$env-fp16 --precision fp16"
  msrl export "$R" --out "$E-fp16" --precision fp16 | sed "s#$OUT#exports#g"
  echo "\$ msrl eval exports/$env-fp16 --episodes 5 --record traces/$env-fp16.npz"
  msrl eval "$E-fp16" --episodes 5 --record "$OUT/$env-fp16.npz"
  echo "\$ msrl replay exports/$env-fp16 traces/$env-fp16.npz --against train"
  msrl replay "$E-fp16" "$OUT/$env-fp16.npz" --against train | sed "s#$OUT#exports#g" || true
  echo '```'
  echo
  echo "precision_sweep.md:"
  echo
  sed 1,2d "$E/precision_sweep.md"
  echo
  echo "replay report of the fp16 trace (exports/$env-fp16/replay-train.md):"
  echo
  sed 1d "$E-fp16/replay-train.md" | sed "s#$OUT#traces#g"
  echo
done
