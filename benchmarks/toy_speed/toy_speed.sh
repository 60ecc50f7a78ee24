#!/usr/bin/env bash
# Wall clock of whole toy-sized runs (issue 27's table): PointMass5-v0, 2 500 steps (500 random, 2 000 learning), 2
# critic updates per step, the toy grid's sizes, TQC 5 % for DSDPG; one thread, one process at a time, eager and
# --compile interleaved round by round. Every --compile run starts with an empty inductor cache, so its compile time is
# counted as a new user's first run would pay it. Appends "round,script,mode,seconds" to benchmarks/toy_speed/runs.csv.
#   taskset -c 0 bash benchmarks/toy_speed/toy_speed.sh [ROUNDS] [SCRIPT...]
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,6p' "$0" | cut -c3-; exit 0; fi
cd "$(dirname "$0")/../.."
ROUNDS=${1:-2}
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "toy_speed.sh: error: ROUNDS must be a positive integer (got '$ROUNDS')" >&2; exit 1; }
shift || true
SCRIPTS=${*:-mage_huber_sobolev dsdpg_mmd_sobolev dsdpg_msmmd_sobolev}
OUT=benchmarks/toy_speed/runs.csv
COMMON="--env-id PointMass5-v0 --total-timesteps 2500 --learning-starts 500 --hidden-dim 64 --wm-hidden-dim 64 \
--batch-size 64 --updates-per-step 2 --learning-rate 1e-3 --wm-learning-rate 1e-3 --eval-frequency 1000 \
--eval-episodes 20"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for script in $SCRIPTS; do
    [ -f "$script.py" ] || { echo "toy_speed.sh: error: no script $script.py" >&2; exit 1; }
done
[ -f "$OUT" ] || echo "round,script,mode,seconds" > "$OUT"
for round in $(seq 1 "$ROUNDS"); do
    for script in $SCRIPTS; do
        extra=""
        case $script in dsdpg_*) extra="--truncation 5" ;; esac
        for mode in eager compile; do
            flag=--no-compile
            [ "$mode" = compile ] && flag=--compile
            rm -rf "$WORK/cache" "$WORK/runs"
            start=$(date +%s.%N)
            (cd "$WORK" && OMP_NUM_THREADS=1 TORCHINDUCTOR_CACHE_DIR="$WORK/cache" \
                python "$OLDPWD/$script.py" $COMMON $extra $flag > /dev/null 2> "$WORK/stderr") \
                || { cat "$WORK/stderr"; exit 1; }
            seconds=$(echo "$(date +%s.%N) - $start" | bc)
            echo "$round,$script,$mode,$seconds" | tee -a "$OUT"
        done
    done
done
