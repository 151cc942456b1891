#!/usr/bin/env bash
# Issue 38's CPU figures on this machine in one go (bf16 against fp32; made for a short lease of another machine).
#
#     bash bench/archive/cpu_bf16_all.sh OUTDIR [THREADS]      (THREADS: torch's intra-op threads, default 2)
#
# Writes to OUTDIR: cpu.txt (lscpu, torch's CPU capability), precision.json (`workbench bench --suite precision`:
# the fp32 and bf16 matrix-product peaks, the small and base training steps raced, beam 4 on a synthetic batch, what
# `--precision auto` chose), shipped.json (bench/bf16_shipped.py: the shipped models on test_2016_flickr, beam 4, in
# both formats, scores against their cards, a batch-by-batch race) and e2e.json (bench/e2e_precision.py: the README
# recipe's tokens/s through `fit`, 2 passes a format), each with its log. Each step has its own time limit, so one
# slow step cannot take the others' time. Multi30k comes from WORKBENCH_MULTI30K (or the user cache).
set -u
out=${1:?usage: bench/cpu_bf16_all.sh OUTDIR [THREADS]}
threads=${2:-2}
py=${PYTHON:-python3}
mkdir -p "$out"
export OMP_NUM_THREADS=$threads PYTHONUNBUFFERED=1
{ lscpu; nproc; $py -c "import torch; print('torch', torch.__version__, torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(), 'threads')"; } >"$out/cpu.txt" 2>&1
grep -E 'Model name|Flags' "$out/cpu.txt" | tr ' ' '\n' | grep -E 'Model|amx|avx512_bf16|avx512f$' | tr '\n' ' '; echo
step() {  # step NAME SECONDS COMMAND...: run with a limit, log to OUTDIR/NAME.log, say how it ended
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "$name: exit $? after $((SECONDS - t0)) s"; tail -n 4 "$out/$name.log"
}
step precision "${PRECISION_LIMIT:-240}" $py -m workbench bench --suite precision --device cpu --json "$out/precision.json"
step shipped "${SHIPPED_LIMIT:-200}" $py bench/bf16_shipped.py --json "$out/shipped.json"
step e2e "${E2E_LIMIT:-240}" $py bench/e2e_precision.py --rounds 2 --json "$out/e2e.json"
