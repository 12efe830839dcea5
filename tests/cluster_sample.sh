#!/bin/bash
# cluster_sample.sh MANTA SAMPLE REGEX [ARGS...]: the sample runs unchanged as
# the driver of a cluster (a head, and the same binary started as a node by
# `manta start`); its output must match REGEX, and `manta stop` must leave no
# process of the cluster behind.
set -u
manta=$1 sample=$2 regex=$3
shift 3
dir=$(mktemp -d /tmp/manta-cluster-sample.XXXXXX)
tag="MANTA_SAMPLE_TAG=$$-$RANDOM"
export "${tag?}"
cleanup() {
  "$manta" stop --log-dir "$dir" > /dev/null 2>&1
  for p in $(grep -l -a "$tag" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do
    [ "$p" != "$$" ] && kill -9 "$p" 2> /dev/null
  done
  rm -rf "$dir"
}
trap cleanup EXIT
"$manta" start --head --log-dir "$dir" > /dev/null || exit 1
"$manta" start --log-dir "$dir" --num-workers 2 -- "$sample" > /dev/null || exit 1
address=$(cut -d' ' -f1 "$dir/head.address")
out=$(MANTA_ADDRESS=$address MANTA_TOKEN_FILE=$dir/cluster.token timeout 120 "$sample" "$@" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAILED: the sample exited $rc"; exit 1; }
echo "$out" | grep -Pzq "(?s)$regex" || { echo "FAILED: its output does not match: $regex"; exit 1; }
# The cluster's processes: the head (manta) and the node with its zygote,
# workers and actor hosts (the sample's image), all carrying the tag.
cluster_processes() {
  for p in $(grep -l -a "$tag" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    if [ "$exe" = "$(readlink -f "$sample")" ] || [ "$exe" = "$(readlink -f "$manta")" ]; then
      grep -q '^State:.*[RSDT]' "/proc/$p/status" 2>/dev/null && echo "$p"
    fi
  done
}
[ -n "$(cluster_processes)" ] || { echo "FAILED: the cluster's processes were not found"; exit 1; }
"$manta" stop --log-dir "$dir" > /dev/null 2>&1
for i in $(seq 100); do
  left=$(cluster_processes)
  [ -z "$left" ] && exit 0
  sleep 0.1  # (polling, bounded: the processes exit on their own)
done
echo "FAILED: processes left after manta stop: $left"
exit 1
