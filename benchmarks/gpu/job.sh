#!/usr/bin/env bash
# One campaign job on one GPU (campaigns/README.md): continue every campaign where campaigns/ left it and
# leave what it learned in OUT (`python -m tools.campaigns run`, from the repository's root). As a batch
# job: `sbatch benchmarks/gpu/job.sh OUT [OPTIONS]`; or run it as it is. The options go to the job as they
# are: the job's limits (--wall SECONDS, some 30 s under the scheduler's; --files N and --file-mib MIB, what
# may come back) default to those of the jobs the campaigns run in. PYTHON names the interpreter that has
# swarmctl's dependencies (default: python3).
#SBATCH --job-name=swarmctl-campaigns
#SBATCH --gres=gpu:1
#SBATCH --time=00:10:00
#SBATCH --signal=TERM@30
set -euo pipefail
OUT=${1:?usage: benchmarks/gpu/job.sh OUT [OPTIONS of python -m tools.campaigns run]}
shift
PY=${PYTHON:-python3}
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/../..}"
if ! "$PY" -c "import torch, typer" 2>/dev/null; then
  echo "error: torch cannot be imported here by $PY; set PYTHON to the Python that has swarmctl's dependencies" >&2
  exit 1
fi
PYTHONUNBUFFERED=1 PYTHONPATH=. exec "$PY" -m tools.campaigns run "$OUT" "$@"
