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
"$manta" stop --log-dir "$dir" > /dev/null 2>&1
for i in $(seq 100); do
  left=$(grep -l -a "$tag" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -v "^$$\$" | while read -r p; do
    [ -e "/proc/$p" ] && grep -q '^State:.*[RSD]' "/proc/$p/status" 2>/dev/null && echo "$p"; done)
  [ -z "$left" ] && exit 0
  sleep 0.1
done
echo "FAILED: processes left after manta stop: $left"
exit 1
