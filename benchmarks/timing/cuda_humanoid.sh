#!/usr/bin/env bash
# The GPU numbers (issues 48 and 70) as one short script for a lent GPU, inside a total time BUDGET (seconds, default 540):
# 1. the paper's runtime table: Humanoid-v4 at the paper's sizes, the six scripts at their defaults (on a GPU: CUDA
#    graphs and TF32 matmuls) and eager in full float32 (the earlier default), in one timing.py process whose JSON is
#    rewritten after every script (OUT_DIR/humanoid_cuda.json; a stage cut short keeps the scripts it finished);
# 2. the real CUDA-graph capture against the eager numbers, and the default (graphs, TF32) against eager float32
#    (tests/test_cudagraphs.py -k real_capture_gives: the largest relative differences, printed);
# 3. seeds on one GPU at once: DSDPG-MSMMD on InvertedDoublePendulum-v4 at the paper's sizes, run_grid.py --workers N
#    for N = 1, 4, 8, 300 learning steps per run: iterations per second per run and in all (OUT_DIR/seeds.json).
# Everything lands in OUT_DIR (default benchmarks/timing/cuda) as it is made: six files, run.log the summary.
# Usage: bash benchmarks/timing/cuda_humanoid.sh [OUT_DIR] [BUDGET] [SECONDS]   (SECONDS: each timed part, default 2)
set -uo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,11p' "$0" | cut -c3-; exit 0; fi
usage="cuda_humanoid.sh: error: the arguments are [OUT_DIR] [BUDGET] [SECONDS]"
[[ $# -le 3 && "${1:-}" != -* ]] || { echo "$usage" >&2; exit 1; }
cd "$(dirname "$0")/../.."
OUT_DIR=${1:-benchmarks/timing/cuda}
DEADLINE=$(($(date +%s) + ${2:-540}))
SECONDS_TIMED=${3:-2}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
log() { echo "$(date +%T) $*" | tee -a "$OUT_DIR/run.log"; }
left() { local s=$((DEADLINE - $(date +%s) - $1)); echo $((s > 5 ? s : 5)); }  # seconds left, keeping $1 for later
log "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
log "$(python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())")"
SCRIPTS=()
for script in td3_huber mage_huber_sobolev mmd_critic iqn dsdpg_mmd_sobolev dsdpg_msmmd_sobolev; do
    SCRIPTS+=("$script" "$script@cudagraphs=false,matmul_precision=highest")
done
timeout "$(left 300)" python3 benchmarks/timing.py --device cuda --env-id Humanoid-v4 --seconds "$SECONDS_TIMED" \
    --scripts "${SCRIPTS[@]}" --out "$OUT_DIR/humanoid_cuda.json" > "$OUT_DIR/timing.log" 2>&1
log "timing: exit $?"
grep -h "ms/iteration" "$OUT_DIR/timing.log" | tee -a "$OUT_DIR/run.log"
timeout "$(left 200)" python3 -m pytest -q -s tests/test_cudagraphs.py -k real_capture_gives \
    > "$OUT_DIR/cudagraphs_check.log" 2>&1
log "capture check: exit $?; $(grep -h 'graphs vs eager' "$OUT_DIR/cudagraphs_check.log" | wc -l) runs compared"
grep -h "graphs vs eager\|passed\|failed" "$OUT_DIR/cudagraphs_check.log" | tee -a "$OUT_DIR/run.log"
SEEDS_GRID=$(mktemp -d)  # the runs' folders (too deep to come back); their summaries go to OUT_DIR/seeds.json
SEEDS_FLAGS="--total-timesteps 556 --learning-starts 256 --eval-frequency 100000 --eval-episodes 1 \
--checkpoint-frequency 0 --contraction-frequency 0"
for workers in 1 4 8; do
    timeout "$(left $((workers == 8 ? 0 : workers == 4 ? 90 : 150)))" python3 benchmarks/run_grid.py \
        --scripts dsdpg_msmmd_sobolev --env-ids InvertedDoublePendulum-v4 --seeds $(seq -s ' ' 1 "$workers") \
        --workers "$workers" --threads-per-job 2 --grid-dir "$SEEDS_GRID/workers$workers" --common "$SEEDS_FLAGS" \
        >> "$OUT_DIR/seeds.log" 2>&1
    log "seeds, $workers worker(s): exit $?"
done
python3 - "$SEEDS_GRID" "$OUT_DIR/seeds.json" <<'PY' | tee -a "$OUT_DIR/run.log"
import glob, json, sys
grid, out = sys.argv[1:]
rows = []
for workers in (1, 4, 8):
    runs = [json.load(open(p)) for p in glob.glob(f"{grid}/workers{workers}/*/*/*/seed*/runs/*/summary.json")]
    if not runs:
        continue
    steps = runs[0]["args"]["total_timesteps"] - runs[0]["args"]["learning_starts"]
    per_run = [steps / run["wall_time_s"] for run in runs]  # the wall time from the loop's start: warm-up steps included
    total = sum(per_run)
    rows.append(dict(workers=workers, runs=len(runs), learning_steps=steps, it_per_s_per_run=per_run, it_per_s_total=total))
    print(f"{workers} worker(s), {len(runs)} runs: {min(per_run):.2f}-{max(per_run):.2f} it/s per run, {total:.2f} in all")
json.dump({"rows": rows}, open(out, "w"), indent=1)
PY
