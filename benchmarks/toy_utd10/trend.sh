#!/usr/bin/env bash
# The point mass at 10 updates per step, every row of the paper's toy figure and the trend with M (issue 36), added to
# toy_utd10's grid at its settings (toy_utd10.sh: 10 000 env steps, 1 000 random, actor and critics 2 x 64, cVAE
# 3 x 64, batch 64, lr 1e-3, eval every 1 000 steps over 20 episodes, TQC 5 % for the distributional critics):
# IQN and the MMD critic at M = 5, then TD3 --no-dyna, MAGE and DSDPG-MMD at M = 3 and M = 6 (the ends of the paper's
# range), seeds 1-5: 40 runs, the missing M = 5 rows first; then DSDPG-MSMMD at M = 3 and 6 (10 runs, ~30 min each with a
# core, seed by seed). Run it from a worktree of one commit whose scripts give toy_utd10's
# numbers (README: the check). Resumable: re-run the same command to finish; the summaries go under GRID_DIR.
#   bash benchmarks/toy_utd10/trend.sh [GRID_DIR]          (default benchmarks/toy_utd10/grid)
#   python benchmarks/aggregate.py benchmarks/toy_utd10/grid --out benchmarks/toy_utd10/trend   (the trend with M)
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,10p' "$0" | cut -c3-; exit 0; fi
GIVEN_DIR=${1:+$(realpath -m -- "$1")}  # a GRID_DIR given is the caller's, relative to where they are
cd "$(dirname "$0")/../.."
[[ $# -le 1 ]] || { echo "trend.sh: error: one argument at most, GRID_DIR (got $#)" >&2; exit 1; }
[[ "${1:-}" != -* ]] || { echo "trend.sh: error: unknown option $1 (the one argument is GRID_DIR)" >&2; exit 1; }
GRID_DIR=${GIVEN_DIR:-benchmarks/toy_utd10/grid}
WORKERS=${WORKERS:-2}
COMMON="--total-timesteps 10000 --learning-starts 1000 --hidden-dim 64 --wm-hidden-dim 64 --batch-size 64 \
--updates-per-step 10 --learning-rate 1e-3 --wm-learning-rate 1e-3 --eval-frequency 1000 --eval-episodes 20 \
--checkpoint-frequency 2000"
MODEL_FREE=$(sed -E 's/ --wm-[a-z-]+ [^ ]+//g' <<< "$COMMON")  # --no-dyna builds no world model: its flags are refused
SEEDS="--seeds 1 2 3 4 5 --grid-dir $GRID_DIR --workers $WORKERS --threads-per-job 1"
python benchmarks/run_grid.py --scripts iqn mmd_critic --env-ids PointMass5-v0 $SEEDS --common "$COMMON --truncation 5"
python benchmarks/run_grid.py --scripts td3_huber --env-ids PointMass3-v0 PointMass6-v0 $SEEDS --common "$MODEL_FREE" \
    --flag-sets "--no-dyna --exp-name td3_huber_no_dyna"
python benchmarks/run_grid.py --scripts mage_huber_sobolev --env-ids PointMass3-v0 PointMass6-v0 $SEEDS --common "$COMMON"
python benchmarks/run_grid.py --scripts dsdpg_mmd_sobolev --env-ids PointMass3-v0 PointMass6-v0 $SEEDS \
    --common "$COMMON --truncation 5"
python benchmarks/run_grid.py --scripts dsdpg_msmmd_sobolev --env-ids PointMass3-v0 PointMass6-v0 $SEEDS \
    --common "$COMMON --truncation 5 --compile"
