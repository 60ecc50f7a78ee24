#!/usr/bin/env bash
# DSDPG learning MuJoCo on a 2-core CPU (issue 44), every task with multiplicative observation noise (--obs-noise mult):
#   InvertedDoublePendulum-v4 at the paper's 10 updates per step, 25 000 steps: TD3 --no-dyna (Huber), TD3 --no-dyna
#     --td-loss mse, TD3 (Dyna), MAGE, IQN, the MMD critic, DSDPG-MMD, DSDPG-MSMMD (--compile); eval every 2 500 steps;
#   HalfCheetah-v4 at 1 update per step, 150 000 steps: TD3 --no-dyna, TD3-MSE, MAGE, the MMD critic, DSDPG-MMD,
#     DSDPG-MSMMD; eval every 10 000 steps;
#   Walker2d-v4 (the README's task) at HalfCheetah's settings, 200 000 steps: TD3 --no-dyna, MAGE, DSDPG-MSMMD.
# CPU-scale sizes for every method alike: actor and critics 2 x 128, cVAE 3 x 256, batch 64, lr 3e-4 (world model too),
# 5 000 random steps, 10 eval episodes; everything else the paper's (TQC 25 %, N = 10, h = 100, Adam slicing search).
# Seeds in waves, so that a reading exists early: every IDP group at seeds 1-3, HalfCheetah 1-3, Walker2d 1-2, then IDP
# seeds 4-5. Two lanes of one worker and one thread each, each taking the other's groups once its own are done; run
# this file from a worktree of one commit (GRID_DIR may point elsewhere). Resumable: re-run the same command; a stopped
# run resumes from its last checkpoint (every 5 000 steps, and on a stop by Ctrl-C or, in the background, by
# `pkill -INT -f benchmarks/run_grid.py`). The cost plan: README.md beside this file.
#   bash benchmarks/mujoco_cpu/mujoco_cpu.sh [GRID_DIR]          (default benchmarks/mujoco_cpu/grid)
#   python benchmarks/aggregate.py benchmarks/mujoco_cpu/grid --out benchmarks/mujoco_cpu/results
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,16p' "$0" | cut -c3-; exit 0; fi
GIVEN_DIR=${1:+$(realpath -m -- "$1")}  # a GRID_DIR given is the caller's, relative to where they are
cd "$(dirname "$0")/../.."
[[ $# -le 1 ]] || { echo "mujoco_cpu.sh: error: one argument at most, GRID_DIR (got $#)" >&2; exit 1; }
[[ "${1:-}" != -* ]] || { echo "mujoco_cpu.sh: error: unknown option $1 (the one argument is GRID_DIR)" >&2; exit 1; }
GRID_DIR=${GIVEN_DIR:-benchmarks/mujoco_cpu/grid}
SIZES="--obs-noise mult --hidden-dim 128 --wm-hidden-dim 256 --batch-size 64 --learning-rate 3e-4 \
--wm-learning-rate 3e-4 --eval-episodes 10 --checkpoint-frequency 5000"
declare -A TASK=(
    [InvertedDoublePendulum-v4]="$SIZES --total-timesteps 25000 --updates-per-step 10 --eval-frequency 2500"
    [HalfCheetah-v4]="$SIZES --total-timesteps 150000 --updates-per-step 1 --eval-frequency 10000"
    [Walker2d-v4]="$SIZES --total-timesteps 200000 --updates-per-step 1 --eval-frequency 10000"
)
TD3="--no-dyna --exp-name td3_huber_no_dyna"
TD3_MSE="--no-dyna --td-loss mse --exp-name td3_mse_no_dyna"
grid() {  # ENV SEEDS SCRIPT [FLAG SET]: one worker of one thread; a failed run (named in the lane's log) does not stop
    local env=$1 seeds=$2 script=$3 rc=0 common=${TASK[$1]}  # the lane, an interrupt (run_grid's 129/130/143) does
    shift 3
    [[ "${1:-}" != --no-dyna* ]] || common=$(sed -E 's/ --wm-[a-z-]+ [^ ]+//g' <<< "$common")  # no world model
    # shellcheck disable=SC2086
    python benchmarks/run_grid.py --scripts "$script" --env-ids "$env" --seeds $seeds --grid-dir "$GRID_DIR" \
        --workers 1 --threads-per-job 1 --common "$common" ${1+--flag-sets "$1"} || rc=$?
    [[ $rc != 129 && $rc != 130 && $rc != 143 ]] || exit $rc  # SIGHUP, Ctrl-C, SIGTERM: the lane stops too
    [[ $rc == 0 ]] || failed=1
}
failed=0
IDP=InvertedDoublePendulum-v4 HC=HalfCheetah-v4 WALKER=Walker2d-v4
# A group is ENV|SEEDS|SCRIPT|FLAG SET. Each lane runs its own groups, then the other lane's in reverse order: the job
# locks let two lanes share a group (a job the other lane runs is reported busy and passed), so no core idles while
# runs remain. The other groups' IDP seeds 4-5 come last (the reading needs DSDPG-MSMMD's; the rest add seeds).
LANE1=(  # the DSDPG-MSMMD runs and what balances them
    "$IDP|1 2 3|dsdpg_msmmd_sobolev|--compile"
    "$HC|1 2 3|td3_huber|$TD3"
    "$HC|1 2 3|td3_huber|$TD3_MSE"
    "$IDP|1 2 3|mmd_critic|"
    "$HC|1 2 3|dsdpg_msmmd_sobolev|--compile"
    "$HC|1 2 3|mmd_critic|"
    "$WALKER|1 2|td3_huber|$TD3"
    "$WALKER|1 2|mage_huber_sobolev|"
    "$WALKER|1 2|dsdpg_msmmd_sobolev|--compile"
    "$IDP|4 5|dsdpg_msmmd_sobolev|--compile"
)
LANE2=(  # the IDP baselines first, then DSDPG-MMD and the distributional critics
    "$IDP|1 2 3|td3_huber|$TD3"
    "$IDP|1 2 3|td3_huber|$TD3_MSE"
    "$IDP|1 2 3|td3_huber|"
    "$IDP|1 2 3|mage_huber_sobolev|"
    "$IDP|1 2 3|dsdpg_mmd_sobolev|"
    "$IDP|1 2 3|iqn|"
    "$HC|1 2 3|dsdpg_mmd_sobolev|"
    "$HC|1 2 3|mage_huber_sobolev|"
)
EXTRA=()
for script in "td3_huber|$TD3" "td3_huber|$TD3_MSE" "td3_huber|" "mage_huber_sobolev|" "dsdpg_mmd_sobolev|" \
    "mmd_critic|" "iqn|"; do
    EXTRA+=("$IDP|4 5|$script")
done
lane() {  # OWN OTHER: the groups of array OWN, then those of OTHER in reverse, then EXTRA
    local -n own=$1 other=$2
    local groups=("${own[@]}") i env seeds script flags
    for ((i = ${#other[@]} - 1; i >= 0; i--)); do groups+=("${other[i]}"); done
    for group in "${groups[@]}" "${EXTRA[@]}"; do
        IFS='|' read -r env seeds script flags <<< "$group"
        grid "$env" "$seeds" "$script" ${flags:+"$flags"}
    done
    exit $failed
}
mkdir -p "$GRID_DIR"
(lane LANE1 LANE2) >> "$GRID_DIR/lane1.log" 2>&1 &
(lane LANE2 LANE1) >> "$GRID_DIR/lane2.log" 2>&1 &
status=0
wait %1 || status=1
wait %2 || status=1
exit $status
