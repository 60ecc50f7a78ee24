#!/usr/bin/env bash
# The GPU numbers (issue 48), as one short script for a lent GPU: the paper's runtime table (Humanoid-v4, the paper's
# sizes, every script at its defaults) eager and CUDA-graphed, one timing.py process per script so that a stage cut
# short keeps the others; the real CUDA-graph capture checked against the eager numbers; DSDPG-MSMMD with --compile.
# Each stage has a time limit; what a stage writes lands in OUT_DIR (default benchmarks/timing/cuda), and the rows of
# the per-script tables end in one, OUT_DIR/humanoid_cuda.json, with every ratio taken to td3_huber's eager row.
# Usage: bash benchmarks/timing/cuda_humanoid.sh [OUT_DIR] [SECONDS]     (SECONDS: each script's timed part, default 2)
set -uo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,7p' "$0" | cut -c3-; exit 0; fi
[[ $# -le 2 && "${1:-}" != -* ]] || { echo "cuda_humanoid.sh: error: the arguments are [OUT_DIR] [SECONDS]" >&2; exit 1; }
cd "$(dirname "$0")/../.."
OUT_DIR=${1:-benchmarks/timing/cuda}
SECONDS_TIMED=${2:-2}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT_DIR/gpu.txt"
python -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name())" \
    | tee -a "$OUT_DIR/gpu.txt"
for script in td3_huber mage_huber_sobolev mmd_critic iqn dsdpg_mmd_sobolev dsdpg_msmmd_sobolev; do
    timeout 65 python benchmarks/timing.py --device cuda --env-id Humanoid-v4 --seconds "$SECONDS_TIMED" \
        --scripts "$script" "$script@cudagraphs=true" --out "$OUT_DIR/humanoid_cuda_$script.json" \
        > "$OUT_DIR/humanoid_cuda_$script.log" 2>&1
    echo "$script: exit $?; $(grep -h 'ms/iteration' "$OUT_DIR/humanoid_cuda_$script.log" | tr '\n' ' ')"
done
timeout 80 python -m pytest -q -s tests/test_cudagraphs.py -k real_capture_gives > "$OUT_DIR/cudagraphs_check.log" 2>&1
echo "capture check: exit $?; $(tail -1 "$OUT_DIR/cudagraphs_check.log")"
timeout 60 python benchmarks/timing.py --device cuda --env-id Humanoid-v4 --seconds "$SECONDS_TIMED" --no-breakdown \
    --scripts "dsdpg_msmmd_sobolev@compile=true" --out "$OUT_DIR/humanoid_cuda_compile.json" \
    > "$OUT_DIR/humanoid_cuda_compile.log" 2>&1
echo "compile: exit $?; $(grep -h 'ms/iteration' "$OUT_DIR/humanoid_cuda_compile.log" | tr '\n' ' ')"
python - "$OUT_DIR" <<'PY'
import glob, json, sys
out = sys.argv[1]
tables = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/humanoid_cuda_*.json"))]
rows = [row for table in tables for row in table["rows"]]
reference = next((row["ms_per_iteration"] for row in rows if row["script"] == "td3_huber"), None)
for row in rows:
    row["ratio"] = row["ms_per_iteration"] / reference if reference else None
if tables:
    merged = {key: tables[0][key] for key in ("env_id", "device", "matmul_gflops")}
    merged["matmul_gflops_per_table"] = [table["matmul_gflops"] for table in tables]
    json.dump({**merged, "rows": rows}, open(f"{out}/humanoid_cuda.json", "w"), indent=2)
    for row in rows:
        print(f"{row['script']:45s} {row['ms_per_iteration']:8.1f} ms  ratio {row['ratio'] or float('nan'):5.2f}  {row['gflops']:.0f} GFLOP/s")
PY
