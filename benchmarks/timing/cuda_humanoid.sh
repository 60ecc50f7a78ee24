#!/usr/bin/env bash
# The GPU numbers (issue 48) as one short script for a lent GPU, inside a total time BUDGET (seconds, default 420):
# 1. the paper's runtime table: Humanoid-v4 at the paper's sizes, the six scripts at their defaults, each eager and
#    CUDA-graphed, in one timing.py process whose JSON is rewritten after every script (OUT_DIR/humanoid_cuda.json;
#    a stage cut short by the budget keeps the scripts it finished);
# 2. the real CUDA-graph capture against the eager numbers (tests/test_cudagraphs.py -k real_capture_gives);
# 3. DSDPG-MSMMD with --compile (OUT_DIR/humanoid_cuda_compile.json).
# Everything lands in OUT_DIR (default benchmarks/timing/cuda) as it is made: five files, run.log the summary.
# Usage: bash benchmarks/timing/cuda_humanoid.sh [OUT_DIR] [BUDGET] [SECONDS]   (SECONDS: each timed part, default 2)
set -uo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,9p' "$0" | cut -c3-; exit 0; fi
usage="cuda_humanoid.sh: error: the arguments are [OUT_DIR] [BUDGET] [SECONDS]"
[[ $# -le 3 && "${1:-}" != -* ]] || { echo "$usage" >&2; exit 1; }
cd "$(dirname "$0")/../.."
OUT_DIR=${1:-benchmarks/timing/cuda}
DEADLINE=$(($(date +%s) + ${2:-420}))
SECONDS_TIMED=${3:-2}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
log() { echo "$(date +%T) $*" | tee -a "$OUT_DIR/run.log"; }
left() { local s=$((DEADLINE - $(date +%s) - $1)); echo $((s > 5 ? s : 5)); }  # seconds left, keeping $1 for later
log "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
log "$(python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())")"
SCRIPTS=()
for script in td3_huber mage_huber_sobolev mmd_critic iqn dsdpg_mmd_sobolev dsdpg_msmmd_sobolev; do
    SCRIPTS+=("$script" "$script@cudagraphs=true")
done
timeout "$(left 150)" python3 benchmarks/timing.py --device cuda --env-id Humanoid-v4 --seconds "$SECONDS_TIMED" \
    --scripts "${SCRIPTS[@]}" --out "$OUT_DIR/humanoid_cuda.json" > "$OUT_DIR/timing.log" 2>&1
log "timing: exit $?"
grep -h "ms/iteration" "$OUT_DIR/timing.log" | tee -a "$OUT_DIR/run.log"
timeout "$(left 60)" python3 -m pytest -q -s tests/test_cudagraphs.py -k real_capture_gives \
    > "$OUT_DIR/cudagraphs_check.log" 2>&1
log "capture check: exit $?; $(grep -h 'graphs vs eager' "$OUT_DIR/cudagraphs_check.log" | wc -l) runs compared"
grep -h "graphs vs eager\|passed\|failed" "$OUT_DIR/cudagraphs_check.log" | tee -a "$OUT_DIR/run.log"
timeout "$(left 0)" python3 benchmarks/timing.py --device cuda --env-id Humanoid-v4 --seconds "$SECONDS_TIMED" \
    --no-breakdown --scripts "dsdpg_msmmd_sobolev@compile=true" --out "$OUT_DIR/humanoid_cuda_compile.json" \
    >> "$OUT_DIR/timing.log" 2>&1
log "compile: exit $?; $(grep -h 'compile=true: .*ms/iteration' "$OUT_DIR/timing.log")"
