#!/usr/bin/env bash
# The paper's toy RL experiment at CPU scale: all six RL scripts on the point mass with 3 and 5 bonus locations,
# 3 seeds, 15 000 env steps each. One run takes, on one core with a second run beside it, about 3 min (td3_huber,
# mage_huber_sobolev), 4-5 min (iqn, mmd_critic), 7-8 min (dsdpg_mmd_sobolev) and 13-15 min (dsdpg_msmmd_sobolev), so
# the 36 runs are about 3.7 CPU-hours: about 2 hours with 2 workers on 2 cores.
# Archived: it predates --dyna-reward (its Dyna targets are today's --dyna-reward model); see benchmarks/toy_rl5.
# Resumable: re-run to finish. The runs' summary.json files are committed under benchmarks/archive/toy_rl/grid (the
# default GRID_DIR), so there it finds nothing left to run; to rerun the whole grid, give it a new folder:
#   bash benchmarks/archive/toy_rl/toy_rl.sh runs_grid/toy_rl        then
#   python benchmarks/aggregate.py runs_grid/toy_rl --out DIR
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,10p' "$0" | cut -c3-; exit 0; fi
cd "$(dirname "$0")/../../.."
[[ "${1:-}" != -* ]] || { echo "toy_rl.sh: error: unknown option $1 (the one argument is GRID_DIR)" >&2; exit 1; }
GRID_DIR=${1:-benchmarks/archive/toy_rl/grid}
COMMON="--total-timesteps 15000 --learning-starts 1000 --hidden-dim 64 --wm-hidden-dim 64 --batch-size 64 \
--updates-per-step 1 --learning-rate 1e-3 --wm-learning-rate 1e-3 --eval-frequency 1000 --eval-episodes 20 \
--checkpoint-frequency 5000"
GRID="--env-ids PointMass-v0 PointMass5-v0 --seeds 1 2 3 --grid-dir $GRID_DIR --workers 2 --threads-per-job 1"
python benchmarks/run_grid.py --scripts td3_huber mage_huber_sobolev $GRID --common "$COMMON"
python benchmarks/run_grid.py --scripts iqn mmd_critic dsdpg_mmd_sobolev dsdpg_msmmd_sobolev $GRID \
    --common "$COMMON --truncation 5"
