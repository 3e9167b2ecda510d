#!/usr/bin/env bash
# One campaign job on one GPU (campaigns/README.md): continue every campaign where campaigns/ left it and
# leave what it learned in OUT (`swarmctl campaign run`). As a batch job: `sbatch benchmarks/gpu/job.sh OUT`;
# or run it as it is. PYTHON names the interpreter that has swarmctl's dependencies (default: python3).
#SBATCH --job-name=swarmctl-campaigns
#SBATCH --gres=gpu:1
#SBATCH --time=00:10:00
#SBATCH --signal=TERM@30
set -euo pipefail
OUT=${1:?usage: benchmarks/gpu/job.sh OUT [WALL_SECONDS]}
WALL=${2:-540}  # the job's own limit: some 30 s under the scheduler's
PY=${PYTHON:-python3}
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/../..}"
if ! "$PY" -c "import torch, typer" 2>/dev/null; then
  echo "torch cannot be imported here by $PY; set PYTHON to the Python that has swarmctl's dependencies"
  exit 1
fi
PYTHONUNBUFFERED=1 PYTHONPATH=. exec "$PY" -m swarmctl campaign run "$OUT" --wall "$WALL"
