#!/usr/bin/env bash
# The GPU run of issue 17 in one script, nothing downloaded:
#   1. benchmarks.model: the TFT forward in bf16 on CUDA beside CPU fp32, batch 1..256;
#   2. benchmarks.pipeline with BARCAST_DEVICE=cuda: the 1,000-symbol burst (goal <= 100 ms),
#      and its encoders variant: workers serving the window and the stream encoder (issue 44),
#      restarted in turn, each encoder's burst, live latency and engine alone;
#   3. benchmarks.gpu.check: CUDA forecasts vs CPU fp32 on the same 6EH4 windows, of a window-
#      and of a stream-encoder checkpoint (each within its stated tolerance, or this script
#      fails), GPU memory at inference (target <= 125 MB); it folds 1 and 2 into
#      benchmarks/results/gpu.json, with provenance.
#
#   benchmarks/gpu/gpu.sh            # a machine with a CUDA GPU and a CUDA build of torch
#   benchmarks/gpu/gpu.sh --dry-run  # or BARCAST_GPU_DRY_RUN=1: the same steps on CPU at tiny
#                                    # sizes, results in a new temporary folder (printed)
#
# The window encoder's checkpoint: the one benchmarks.model_report trains
# (var/model_report/model_report, the product default model; gpu.json records its sizes) where
# it exists, else random weights at the product's size, which the stream encoder's check uses
# too; the pipeline trains its stream-encoder checkpoint by its own short recipe
# (benchmarks/pipeline/models.py) unless BARCAST_MODEL_DIR holds one. PYTHON overrides the
# interpreter (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PYTHON:-.venv/bin/python}
DRY=${BARCAST_GPU_DRY_RUN:-0}
for arg in "$@"; do
  case $arg in
    --dry-run) DRY=1 ;;
    *) echo "usage: benchmarks/gpu/gpu.sh [--dry-run]" >&2; exit 2 ;;
  esac
done
export NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1  # as benchmarks/pipeline/run.py's docstring runs it

if [[ $DRY == 1 ]]; then
  OUT=$(mktemp -d "${TMPDIR:-/tmp}/barcast-gpu-dry.XXXXXX")
  export BARCAST_DEVICE=cpu BARCAST_WORK_DIR=$OUT/work
  SIZE=(--hidden 16 --heads 2)
  MODEL=(--hidden 16 --batches 1,8 --budget-s 0.2)
  PIPELINE=(--symbols 8 --live-symbols 2 --rounds 2 --repeats 1 --pairs 1 --variant-repeats 1
    "${SIZE[@]}")
  CHECK=(--windows 64 --dry-run "${SIZE[@]}")
else
  if ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    build=$("$PY" -c 'import torch; print(torch.__version__, "built for CUDA", torch.version.cuda)')
    echo "benchmarks/gpu/gpu.sh: no CUDA device is visible (torch $build). Without a GPU," \
      "rehearse the very same steps on CPU: benchmarks/gpu/gpu.sh --dry-run" \
      "(or BARCAST_GPU_DRY_RUN=1)" >&2
    exit 1
  fi
  OUT=benchmarks/results
  export BARCAST_DEVICE=cuda
  TRAINED=var/model_report/model_report
  read -r HIDDEN HEADS < <("$PY" -c 'from model.config import TFTConfig as C
print(C().hidden, C().heads)')  # the product's size
  SIZE=(--hidden "$HIDDEN" --heads "$HEADS")
  if [[ -f $TRAINED/config.json ]]; then SIZE=(--checkpoint "$TRAINED"); fi
  MODEL=(--hidden "$HIDDEN" --budget-s 5)
  PIPELINE=(--symbols 1000 --rounds 10 --repeats 5 "${SIZE[@]}")
  CHECK=(--windows 2000 "${SIZE[@]}")
fi

"$PY" -m benchmarks.model "${MODEL[@]}" --no-anchors --no-train-memory --out "$OUT/gpu_model.json"
"$PY" -m benchmarks.pipeline "${PIPELINE[@]}" --minutes 140 --variants encoders \
  --out "$OUT/gpu_pipeline.json"
"$PY" -m benchmarks.gpu.check "${CHECK[@]}" --device "$BARCAST_DEVICE" \
  --model-json "$OUT/gpu_model.json" --pipeline-json "$OUT/gpu_pipeline.json" \
  --out "$OUT/gpu.json"
echo "wrote $OUT/gpu.json"
