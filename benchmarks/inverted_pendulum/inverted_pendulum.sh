#!/usr/bin/env bash
# A first check on a real control task (issue "Dyna targets ...", item 5): td3_huber (Dyna), mage_huber_sobolev and
# dsdpg_msmmd_sobolev on InvertedPendulum-v4 with multiplicative observation noise (--obs-noise mult, scale 0.2), both
# --dyna-reward modes, seeds 1 and 2: 12 runs. Sizes for this 2-core CPU (a DSDPG run ~25 min on one core): 2 x 64
# networks and world model, batch 64, lr 1e-3, 2 critic updates per env step (the paper: 400 wide, batch 256, 10),
# 20 000 steps, evaluation every 1 000 steps over 10 episodes. Resumable: re-run the same command.
#   bash benchmarks/inverted_pendulum/inverted_pendulum.sh [GRID_DIR]      (default benchmarks/inverted_pendulum/grid)
#   python benchmarks/aggregate.py benchmarks/inverted_pendulum/grid --out benchmarks/inverted_pendulum
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,8p' "$0" | cut -c3-; exit 0; fi
GIVEN_DIR=${1:+$(realpath -m -- "$1")}  # a GRID_DIR given is the caller's, relative to where they are
cd "$(dirname "$0")/../.."
[[ $# -le 1 ]] || { echo "inverted_pendulum.sh: error: one argument at most, GRID_DIR (got $#)" >&2; exit 1; }
[[ "${1:-}" != -* ]] || { echo "inverted_pendulum.sh: error: unknown option $1 (the one argument is GRID_DIR)" >&2; exit 1; }
GRID_DIR=${GIVEN_DIR:-benchmarks/inverted_pendulum/grid}
WORKERS=${WORKERS:-2}
python benchmarks/run_grid.py --scripts dsdpg_msmmd_sobolev mage_huber_sobolev td3_huber --env-ids InvertedPendulum-v4 \
    --seeds 1 2 --grid-dir "$GRID_DIR" --workers "$WORKERS" --threads-per-job 1 \
    --flag-sets "--dyna-reward replay" "--dyna-reward model" \
    --common "--obs-noise mult --total-timesteps 20000 --learning-starts 1000 --hidden-dim 64 --wm-hidden-dim 64 \
--batch-size 64 --updates-per-step 2 --learning-rate 1e-3 --wm-learning-rate 1e-3 --eval-frequency 1000 \
--eval-episodes 10 --checkpoint-frequency 5000"
