#!/usr/bin/env bash
# Grade a class on Slurm: N shards as a job array, then the merge as a dependent job.
#
#   templates/slurm/submit.sh CLASS RESULTS [N]
#
# CLASS: the class folder (one entry per submission), RESULTS: where the shards and the merge go; both on a
# file system that every node sees. N: the number of shards (default 16). Run it from the kit's checkout, set
# up once with `make setup` (its .venv must be on the shared file system too).
# Environment: MHA_GPU=1 for a GPU partition (the CUDA checks run there), MHA_PARTITION=name to pick the
# partition (default: the cluster's default; gpu with MHA_GPU=1), MHA_SBATCH="--account=... --qos=..." for
# whatever else your cluster asks for.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 CLASS RESULTS [N]" >&2
    exit 2
fi
kit="$(cd "$(dirname "$0")/../.." && pwd)"
class="$(realpath "$1")"
results="$(realpath -m "$2")"
shards="${3:-16}"
mkdir -p "$results/logs"

partition=()
if [ "${MHA_GPU:-0}" = 1 ]; then
    partition=(--partition="${MHA_PARTITION:-gpu}" --gres=gpu:1)
elif [ -n "${MHA_PARTITION:-}" ]; then
    partition=(--partition="$MHA_PARTITION")
fi
# shellcheck disable=SC2206  # MHA_SBATCH is a list of options, split on purpose
extra=(${MHA_SBATCH:-})

export MHA_KIT="$kit" MHA_CLASS="$class" MHA_RESULTS="$results" MHA_SHARDS="$shards"
array_job="$(sbatch --parsable --array="0-$((shards - 1))" "${partition[@]}" "${extra[@]}" --export=ALL \
    --output="$results/logs/grade-%A_%a.out" "$kit/templates/slurm/grade-shard.sbatch")"
array_job="${array_job%%;*}"
merge_job="$(sbatch --parsable --dependency="afterany:$array_job" "${extra[@]}" --export=ALL \
    --output="$results/logs/merge-%j.out" "$kit/templates/slurm/merge.sbatch")"
echo "grading: job array $array_job (shards 0-$((shards - 1)) of $shards); merge: job ${merge_job%%;*}"
echo "gradebook: $results/merged/gradebook.csv once the merge has run (its log: $results/logs/)"
