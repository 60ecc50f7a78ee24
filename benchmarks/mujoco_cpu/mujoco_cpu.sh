#!/usr/bin/env bash
# DSDPG on MuJoCo at a size a 2-core CPU runs (issue 35): Hopper-v4 and Walker2d-v4 with multiplicative observation
# noise (--obs-noise mult), the README's main setting. Hopper: TD3 --no-dyna, TD3 (Dyna), MAGE, DSDPG-MMD, DSDPG-MSMMD,
# seeds 1-3; Walker2d: TD3 --no-dyna, MAGE, DSDPG-MSMMD, seeds 1-2. The CPU-scale settings (chosen by the pilot,
# README.md beside this file): actor and critics 2 x 128, cVAE 3 x 256, batch 64, lr 3e-4 (world model too),
# UPDATES critic updates per env step over STEPS env steps (5 000 random), eval every 10 000 steps over 10 episodes;
# everything else the paper's (TQC 25 %, N = 10, h = 100, the Adam slicing search). 21 runs from one commit (run this
# file from a worktree of it; GRID_DIR may point elsewhere), in two lanes of one worker and one thread each, the costly
# runs balanced between them. Resumable: re-run the same command; an interrupted run resumes from its last checkpoint
# (every 10 000 steps, and on SIGINT/SIGTERM to run_grid.py). Then:
#   bash benchmarks/mujoco_cpu/mujoco_cpu.sh [GRID_DIR]          (default benchmarks/mujoco_cpu/grid)
#   python benchmarks/aggregate.py benchmarks/mujoco_cpu/grid --out benchmarks/mujoco_cpu
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,12p' "$0" | cut -c3-; exit 0; fi
cd "$(dirname "$0")/../.."
[[ "${1:-}" != -* ]] || { echo "mujoco_cpu.sh: error: unknown option $1 (the one argument is GRID_DIR)" >&2; exit 1; }
GRID_DIR=${1:-benchmarks/mujoco_cpu/grid}
STEPS=200000
UPDATES=1
COMMON="--obs-noise mult --total-timesteps $STEPS --updates-per-step $UPDATES --hidden-dim 128 --wm-hidden-dim 256 \
--batch-size 64 --learning-rate 3e-4 --wm-learning-rate 3e-4 --eval-frequency 10000 --eval-episodes 10 \
--checkpoint-frequency 10000"
MODEL_FREE=$(sed -E 's/ --wm-[a-z-]+ [^ ]+//g' <<< "$COMMON")  # --no-dyna builds no world model: its flags are refused
grid() {  # ENV SEEDS SCRIPT [FLAG SETS...]: one worker of one thread; a failed run (named in the lane's log) does
    local env=$1 seeds=$2 script=$3 rc=0 common=$COMMON  # not stop the lane, an interrupt (run_grid's exit 130) does
    shift 3
    [[ "${1:-}" != --no-dyna* ]] || common=$MODEL_FREE
    # shellcheck disable=SC2086
    python benchmarks/run_grid.py --scripts "$script" --env-ids "$env" --seeds $seeds --grid-dir "$GRID_DIR" \
        --workers 1 --threads-per-job 1 --common "$common" ${1+--flag-sets "$@"} || rc=$?
    [[ $rc != 130 ]] || exit 130
    [[ $rc == 0 ]] || failed=1
}
failed=0
lane1() {
    grid Hopper-v4 "1 2 3" td3_huber "--no-dyna --exp-name td3_huber_no_dyna"
    grid Hopper-v4 "1 2 3" td3_huber
    grid Hopper-v4 "1 2 3" mage_huber_sobolev
    grid Walker2d-v4 "1 2" td3_huber "--no-dyna --exp-name td3_huber_no_dyna"
    grid Walker2d-v4 "1 2" mage_huber_sobolev
    grid Hopper-v4 "1 2 3" dsdpg_mmd_sobolev
    exit $failed
}
lane2() {
    grid Hopper-v4 "1 2 3" dsdpg_msmmd_sobolev "--compile"
    grid Walker2d-v4 "1 2" dsdpg_msmmd_sobolev "--compile"
    exit $failed
}
mkdir -p "$GRID_DIR"
(lane1) > "$GRID_DIR/lane1.log" 2>&1 &
(lane2) > "$GRID_DIR/lane2.log" 2>&1 &
status=0
wait %1 || status=1
wait %2 || status=1
exit $status
