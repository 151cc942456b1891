#!/usr/bin/env bash
# The one GPU check of issue 49, for a GPU machine (about 9 minutes at most on one H100; each part has its own limit
# and a part that fails or runs out of time is recorded, and the next one runs):
#   1. the gpu-marked tests (tests/test_gpu.py: CUDA fp32 = CPU fp32 token for token, bf16 BLEU, syncs per step, ...)
#   2. decoding: sentences/s of evaluate's decoding, greedy and beam 4, fp32 and bf16, against one CPU thread and
#      transformers' generate on the same GPU (bench/gpu_check.py decode)
#   3. the train_step suite on CUDA (workbench bench --suite train_step)
#   4. a short gpu-base training run (GPU_CHECK_MINUTES, default 2) judged by the release's rules, and the test BLEU
#      of its snapshots against time (bench/gpu_check.py time-to-bleu)
# Results: JSON with provenance under $OUT (the device tool's folder) and bench/results/gpu/.
#
#   bash bench/gpu_check.sh        # from the repository root; Multi30k at $WORKBENCH_MULTI30K or runs/gpu-data
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/gpu}"
RESULTS=bench/results/gpu
mkdir -p "$OUT" "$RESULTS"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${WORKBENCH_MULTI30K:-}" ] && [ -d runs/gpu-data ]; then export WORKBENCH_MULTI30K="$PWD/runs/gpu-data"; fi
PY="${PYTHON:-python3}"
# the GPU image lacks platformdirs: a wheel carried in .whl/ (pip download --no-deps platformdirs -d .whl)
if ! $PY -c "import platformdirs" 2>/dev/null; then
  $PY -m pip install -q --no-deps .whl/*.whl 2>/dev/null || {  # a pure-Python wheel also imports from its zip
    for w in "$PWD"/.whl/*.whl; do export PYTHONPATH="$PYTHONPATH:$w"; done; }
fi
START_ALL=$(date +%s)
status=()
part() {  # part NAME LIMIT_SECONDS COMMAND...: run it under its limit, log to $OUT/NAME.log, remember its status
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  status+=("\"$name\": {\"rc\": $rc, \"seconds\": $(( $(date +%s) - t0 ))}")
  echo "== $name: rc=$rc in $(( $(date +%s) - t0 )) s"; tail -5 "$OUT/$name.log"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
part gpu-tests 100 $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
part decode 110 $PY bench/gpu_check.py decode --out "$OUT"
part train-step 100 $PY bench/core.py --suite train_step --device cuda --preset small --preset base --json "$OUT/train_step.json"
TRAIN_START=$(date +%s)
part gpu-base 190 $PY bench/translate_multi30k.py --recipe gpu-base --minutes "${GPU_CHECK_MINUTES:-2}" \
  --out runs/gpu-base --average 5 10 --json "$OUT/gpu_base.json"
part time-to-bleu 35 $PY bench/gpu_check.py time-to-bleu runs/gpu-base "$TRAIN_START" --out "$OUT"
( IFS=,; echo "{\"parts\": {${status[*]}}, \"total_seconds\": $(( $(date +%s) - START_ALL ))}" ) >"$OUT/parts.json"
cat "$OUT/parts.json"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
for f in decode.json time_to_bleu.json train_step.json gpu_base.json parts.json; do
  [ -f "$OUT/$f" ] && [ "$OUT" != "$RESULTS" ] && cp "$OUT/$f" "$RESULTS/${f%.json}-$commit.json"
done
exit 0
