#!/bin/bash
# One Slurm allocation for a whole scaling sweep: each configuration then runs on the first
# --nodes nodes of it, one srun step per node, and the sweep waits in the queue once.
#
#   sbatch --nodes=4 --gpus-per-node=8 --time=04:00:00 scripts/slurm-sweep.sh \
#       --nodes 1,2,4 --gpus-per-node 8 --out results
#
# Every argument goes to python -m bench.scaling --slurm. The nodes need this checkout and the
# same Python environment at the same paths (playbooks/bench.yml puts them there); `python` is
# the one on PATH when sbatch runs (sbatch passes the environment on). From an interactive
# `salloc --nodes=N --exclusive`, run `python -m bench.scaling --slurm ...` directly instead.
# sbatch(1), Slurm 22.05.8 (checked 2026-11-25): #SBATCH lines count until the first line that is
# not a comment; --export=ALL, the default, passes the submitting environment to the job.
#SBATCH --job-name=bench-scaling
#SBATCH --exclusive
#SBATCH --ntasks-per-node=1
#SBATCH --output=bench-scaling-%j.out
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
exec python -m bench.scaling --slurm --no-progress "$@"
