#!/usr/bin/env bash
# The paper's toy RL experiment at CPU scale: all six RL scripts on the point mass with 3 and 5 bonus locations,
# 3 seeds, 15 000 env steps each (about 2 hours on 2 CPU cores with 2 workers). Resumable: re-run to finish.
#   bash benchmarks/toy_rl.sh [GRID_DIR]            then
#   python benchmarks/aggregate.py GRID_DIR --out benchmarks/toy_rl
set -euo pipefail
cd "$(dirname "$0")/.."
GRID_DIR=${1:-runs_grid/toy_rl}
COMMON="--total-timesteps 15000 --learning-starts 1000 --hidden-dim 64 --wm-hidden-dim 64 --batch-size 64 \
--updates-per-step 1 --learning-rate 1e-3 --wm-learning-rate 1e-3 --eval-frequency 1000 --eval-episodes 20 \
--checkpoint-frequency 5000"
GRID="--env-ids PointMass-v0 PointMass5-v0 --seeds 1 2 3 --grid-dir $GRID_DIR --workers 2 --threads-per-job 1"
python benchmarks/run_grid.py --scripts td3_huber mage_huber_sobolev $GRID --common "$COMMON"
python benchmarks/run_grid.py --scripts iqn mmd_critic dsdpg_mmd_sobolev dsdpg_msmmd_sobolev $GRID \
    --common "$COMMON --truncation 5"
