#!/usr/bin/env bash
# Grade a class on Slurm: N shards as a job array, then the merge as a dependent job.
#
#   templates/slurm/submit.sh CLASS RESULTS [N]            the class, in N shards (default 16)
#   templates/slurm/submit.sh --resume CLASS RESULTS [N]   the same run again: only the shards that did not
#                                                          finish (grader_cli.py unfinished), then the merge
#
# CLASS: the class folder (one entry per submission), RESULTS: where the shards (RESULTS/shards/K), the merge
# (RESULTS/merged) and every job's log (RESULTS/logs/) go; both on a file system that every node sees. Run it
# from anywhere; the kit is the checkout that holds this script, set up once with `make setup` (its .venv on
# the shared file system too).
#
# Resources come from the partition (sinfo), so that no job asks for more than its nodes have (such a job
# would pend for ever, reason PartitionConfig): per shard, MHA_CPUS CPUs (default: the partition's smallest
# node's, at most 4; grade-all runs as many gradings at once) and MHA_MEM memory (default: 2 GiB per CPU and
# 2 GiB more, at most the smallest node's; none asked where the nodes state no memory). Where sinfo says
# nothing: 2 CPUs and 6G, which fit a 2-CPU node. MHA_TIME: each shard's time limit (default 04:00:00, or the
# partition's limit where it is shorter). Every request is tried first (sbatch --test-only): one that cannot
# run stops here, saying why.
#
# Environment: MHA_GPU=1 for the CUDA checks (--gres=gpu:1 on a partition whose nodes have GPUs: it is checked
# before anything is submitted), MHA_PARTITION=name to pick the partition (default: the cluster's default
# partition; with MHA_GPU=1 the one named gpu where there is one), MHA_SBATCH="--account=... --qos=..." for
# whatever else your cluster asks for.
set -euo pipefail

resume=0
if [ "${1:-}" = --resume ]; then
    resume=1
    shift
fi
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 [--resume] CLASS RESULTS [N]" >&2
    exit 2
fi
kit="$(cd "$(dirname "$0")/../.." && pwd)"
class="$(realpath "$1")"
results="$(realpath -m "$2")"
shards="${3:-16}"
die() { echo "submit.sh: $*" >&2; exit 2; }
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || die "N, the number of shards, must be a whole number from 1: got '$shards'"
[ -x "$kit/.venv/bin/python" ] || die "the kit in $kit is not set up: run make setup there first"
[ -d "$class" ] || die "no class folder $class"
command -v sbatch >/dev/null || die "sbatch is not here: run this on a Slurm login node"

# ---- the partition, and what its nodes have ---------------------------------------------------------------
default_partition="$(sinfo -h -o '%P' | sed -n 's/\*$//p' | head -n 1)"
if [ -n "${MHA_PARTITION:-}" ]; then
    partition="$MHA_PARTITION"
elif [ "${MHA_GPU:-0}" = 1 ] && [ -n "$(sinfo -h -p gpu -o '%P')" ]; then
    partition=gpu
else
    partition="$default_partition"
fi
[ -n "$partition" ] || die "this cluster has no default partition: name one, MHA_PARTITION=name (sinfo lists them)"
nodes="$(sinfo -h -N -p "$partition" -o '%c %m %G')"   # per node: CPUs, memory (MB), generic resources
[ -n "$nodes" ] || die "no partition '$partition' here (partitions: $(sinfo -h -o '%P' | sort -u | paste -sd ' '))"
if [ "${MHA_GPU:-0}" = 1 ] && ! awk '$3 ~ /gpu/ { found = 1 } END { exit !found }' <<<"$nodes"; then
    die "MHA_GPU=1, but partition '$partition' has no GPUs (its nodes' generic resources: $(awk '{print $3}' \
<<<"$nodes" | sort -u | paste -sd ' ')); name a partition with GPU nodes (MHA_PARTITION=name), or leave MHA_GPU out \
to grade on CPUs (the CUDA checks are then skipped)"
fi
node_cpus="$(awk 'NR == 1 || $1 + 0 < min { min = $1 + 0 } END { print min }' <<<"$nodes")"
node_mem="$(awk 'NR == 1 || $2 + 0 < min { min = $2 + 0 } END { print min }' <<<"$nodes")"   # MB
[ "${node_cpus:-0}" -ge 1 ] 2>/dev/null || node_cpus=2
cpus="${MHA_CPUS:-$((node_cpus < 4 ? node_cpus : 4))}"
[[ "$cpus" =~ ^[1-9][0-9]*$ ]] || die "MHA_CPUS must be a whole number from 1: got '$cpus'"
[ "$cpus" -le "$node_cpus" ] || die "MHA_CPUS=$cpus, but the nodes of partition '$partition' have $node_cpus CPUs \
(the job would wait for ever): MHA_CPUS=$node_cpus or fewer"
mem=()
if [ -n "${MHA_MEM:-}" ]; then
    mem=(--mem="$MHA_MEM")
elif [ "${node_mem:-0}" -ge 1024 ] 2>/dev/null; then   # below 1 GiB: the nodes state no memory (RealMemory=1)
    want=$((2048 * (cpus + 1)))
    mem=(--mem="$((want < node_mem ? want : node_mem))M")
fi
limit="$(sinfo -h -p "$partition" -o '%l' | head -n 1)"
minutes() {   # Slurm's [days-]hours:minutes:seconds (or minutes:seconds, or minutes) -> whole minutes
    local t="$1" d=0 h=0 m=0 s=0
    if [[ "$t" == *-* ]]; then d="${t%%-*}"; t="${t#*-}"; fi
    IFS=: read -r -a part <<<"$t"
    case "${#part[@]}" in
        3) h="${part[0]}"; m="${part[1]}"; s="${part[2]}" ;;
        2) if [ "$d" != 0 ]; then h="${part[0]}"; m="${part[1]}"; else m="${part[0]}"; s="${part[1]}"; fi ;;
        1) if [ "$d" != 0 ]; then h="${part[0]}"; else m="${part[0]}"; fi ;;
    esac
    echo $(((10#$d * 24 + 10#$h) * 60 + 10#$m + (10#$s > 0)))
}
time_limit="${MHA_TIME:-04:00:00}"
if [ -z "${MHA_TIME:-}" ] && [[ "$limit" =~ ^[0-9] ]] && [ "$(minutes "$limit")" -lt "$(minutes "$time_limit")" ]; then
    time_limit="$limit"
fi

gpu=()
[ "${MHA_GPU:-0}" = 1 ] && gpu=(--gres=gpu:1)
# shellcheck disable=SC2206  # MHA_SBATCH is a list of options, split on purpose
extra=(${MHA_SBATCH:-})
tag="mha-kit:$results"   # the jobs' comment: how --resume finds the jobs of this RESULTS still in the queue
grade_options=(--partition="$partition" --cpus-per-task="$cpus" "${mem[@]}" --time="$time_limit" "${gpu[@]}"
    "${extra[@]}" --comment="$tag" --export=ALL --open-mode=append --output="$results/logs/shard-%a.out")
merge_mem=()
[ "${#mem[@]}" = 0 ] || merge_mem=(--mem=2G)
merge_time=00:30:00
[ "$(minutes "$time_limit")" -ge 30 ] || merge_time="$time_limit"
merge_options=(--partition="$partition" --cpus-per-task=1 "${merge_mem[@]}" --time="$merge_time" "${extra[@]}"
    --comment="$tag" --export=ALL --open-mode=append --output="$results/logs/merge.out")

# ---- which shards --------------------------------------------------------------------------------------------
array="0-$((shards - 1))"
if [ "$resume" = 1 ]; then
    queued="$(squeue -h -u "$(id -un)" -o '%A %k' | awk -v tag="$tag" '{ id = $1; $1 = ""; sub(/^ /, "") }
        $0 == tag { print id }' | sort -u | paste -sd ' ')"
    [ -z "$queued" ] || die "jobs of $results are still queued or running ($queued): wait for them to end, or \
cancel them (scancel $queued), then run --resume again"
    unfinished() { (cd "$kit" && .venv/bin/python grader_cli.py unfinished "$results/shards" "$shards"); }
    left="$(unfinished)" || die "cannot tell which shards of $results/shards are unfinished (above)"
    array="$(echo $left | tr ' ' ',')"
fi

export MHA_KIT="$kit" MHA_CLASS="$class" MHA_RESULTS="$results" MHA_SHARDS="$shards"
dependency=()
if [ -n "$array" ]; then
    why="$(sbatch --test-only --array="$array" "${grade_options[@]}" "$kit/templates/slurm/grade-shard.sbatch" 2>&1)" \
        || die "Slurm would not run the shards as asked (partition $partition, $cpus CPUs${mem:+, ${mem[*]}}, \
--time=$time_limit): $why"
    mkdir -p "$results/logs"
    array_job="$(sbatch --parsable --array="$array" "${grade_options[@]}" "$kit/templates/slurm/grade-shard.sbatch")"
    array_job="${array_job%%;*}"
    dependency=(--dependency="afterany:$array_job")
    echo "grading: job array $array_job, shards $array of $shards (partition $partition, $cpus CPUs${mem:+ and \
${mem[*]#--mem=}} each)"
else
    mkdir -p "$results/logs"
    echo "every shard of $results/shards has finished: merging them"
fi
merge_job="$(sbatch --parsable "${dependency[@]}" "${merge_options[@]}" "$kit/templates/slurm/merge.sbatch")"
echo "merge: job ${merge_job%%;*}; gradebook: $results/merged/gradebook.csv once it has run (logs: $results/logs/)"
echo "if a shard fails or is cancelled, run the rest again and merge: $kit/templates/slurm/submit.sh --resume $class $results $shards"
