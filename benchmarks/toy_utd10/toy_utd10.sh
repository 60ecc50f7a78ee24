#!/usr/bin/env bash
# The paper's update ratio on the point mass (issue 27): PointMass5-v0, 5 seeds, 10 critic updates per env step,
# 10 000 env steps (1 000 random), the toy grid's other sizes (actor and critics 2 x 64, cVAE 3 x 64, batch 64, lr 1e-3,
# eval every 1 000 steps over 20 episodes), TQC 5 % for DSDPG: DSDPG-MSMMD with the Adam search (the paper's table) and
# with plain ascent (its Algorithm 1), DSDPG-MMD, MAGE, TD3 with Dyna and TD3 --no-dyna, each under its own --exp-name:
# 30 runs, all from one commit (run this file from a worktree of it; GRID_DIR may point elsewhere). DSDPG-MSMMD runs
# with --compile (its search's fused steps: the same numbers to float rounding, 3 x faster at these sizes;
# benchmarks/toy_speed/README.md); for the others --compile gains nothing. Resumable: re-run the same command to
# finish; finished runs' summary.json files are committed under the grid folder as they come.
#   bash benchmarks/toy_utd10/toy_utd10.sh [GRID_DIR]          (default benchmarks/toy_utd10/grid)
#   python benchmarks/aggregate.py benchmarks/toy_utd10/grid --out benchmarks/toy_utd10
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,11p' "$0" | cut -c3-; exit 0; fi
GIVEN_DIR=${1:+$(realpath -m -- "$1")}  # a GRID_DIR given is the caller's, relative to where they are
cd "$(dirname "$0")/../.."
[[ $# -le 1 ]] || { echo "toy_utd10.sh: error: one argument at most, GRID_DIR (got $#)" >&2; exit 1; }
[[ "${1:-}" != -* ]] || { echo "toy_utd10.sh: error: unknown option $1 (the one argument is GRID_DIR)" >&2; exit 1; }
GRID_DIR=${GIVEN_DIR:-benchmarks/toy_utd10/grid}
WORKERS=${WORKERS:-2}
COMMON="--total-timesteps 10000 --learning-starts 1000 --hidden-dim 64 --wm-hidden-dim 64 --batch-size 64 \
--updates-per-step 10 --learning-rate 1e-3 --wm-learning-rate 1e-3 --eval-frequency 1000 --eval-episodes 20 \
--checkpoint-frequency 2000"
MODEL_FREE=$(sed -E 's/ --wm-[a-z-]+ [^ ]+//g' <<< "$COMMON")  # --no-dyna builds no world model: its flags are refused
GRID="--env-ids PointMass5-v0 --seeds 1 2 3 4 5 --grid-dir $GRID_DIR --workers $WORKERS --threads-per-job 1"
python benchmarks/run_grid.py --scripts td3_huber $GRID --common "$COMMON"
python benchmarks/run_grid.py --scripts td3_huber $GRID --common "$MODEL_FREE" \
    --flag-sets "--no-dyna --exp-name td3_huber_no_dyna"
python benchmarks/run_grid.py --scripts mage_huber_sobolev $GRID --common "$COMMON"
python benchmarks/run_grid.py --scripts dsdpg_mmd_sobolev $GRID --common "$COMMON --truncation 5"
python benchmarks/run_grid.py --scripts dsdpg_msmmd_sobolev $GRID --common "$COMMON --truncation 5 --compile" \
    --flag-sets "" "--slice-optimizer ascent --exp-name dsdpg_msmmd_sobolev_ascent"
