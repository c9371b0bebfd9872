#!/usr/bin/env bash
# tessera under Slurm, for real: Debian's slurm-wlm (slurmctld and one slurmd per node, munge
# authentication) on three test hosts this script makes — network namespaces "ctl" (198.18.66.1:
# slurmctld and tessera-coordinator), "node1" and "node2" (.11, .12: a slurmd each), on a bridge with
# no default route, each with its own host name. Then, from this host:
#   1. sbatch --nodes=2 deploy/slurm/tessera.sbatch: the demo GPT (dp=2) runs on the allocation's two
#      nodes, in the pool slurm-JOBID, and the batch job ends with the tessera job SUCCEEDED and no
#      worker or rank left;
#   2. the same with a long job, scancel'ed once it runs: the tessera job is cancelled and every
#      worker and rank of the allocation is gone;
#   3. TESSERA_WORK set to a directory another user owns: refused before any worker starts.
# Everything (daemons, namespaces, bridge) is removed at the end; logs stay in RUN.
#   bash deploy/slurm/demo.sh          Exit 0 only when both hold. Needs root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ "$(id -u)" = 0 ] || { echo "error: needs root (network namespaces, slurmd)" >&2; exit 1; }
fail() { echo "FAIL: $*" >&2; exit 1; }
need=()
for cmd in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge ip:iproute2; do
  command -v "${cmd%%:*}" >/dev/null || need+=("${cmd#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }
fi
cache="${HOME:-/root}/.cache/tessera/bazel-disk"
bazel build --disk_cache="$cache" //client:tessera //coordinator:tessera-coordinator //worker:tessera-worker \
  //worker/rank:tessera-rank >/dev/null 2>&1 || fail "bazel build failed"
bin="$PWD/out/slurm-demo/bin"
rm -rf "$bin" && mkdir -p "$bin"
for b in client/tessera coordinator/tessera-coordinator worker/tessera-worker worker/rank/tessera-rank; do
  cp -L "bazel-bin/$b" "$bin/"
done
run="$PWD/out/slurm-demo/run-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run"/{state,spool,data,out,nodes}
tag="tsl$(( $$ % 100000 ))"  # Namespace and link names of this run (links ≤ 15 characters).
net=198.18.66
pids=()
started_munge=0
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 1
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  pkill -KILL -f "$run/" 2>/dev/null
  [ "$started_munge" = 1 ] && pkill -x munged
  for h in ctl node1 node2; do ip netns pids "$tag-$h" 2>/dev/null | xargs -r kill -KILL; ip netns del "$tag-$h" 2>/dev/null; done
  ip link del "$tag-br" 2>/dev/null
  echo "logs in $run"
}
trap cleanup EXIT

# Test hosts: a bridge in this namespace (198.18.66.254, so that the CLI here reaches them), one
# namespace per host with a veth on it, no default route.
ip link add "$tag-br" type bridge
ip addr add "$net.254/24" dev "$tag-br"
ip link set "$tag-br" up
host() {  # host NAME ADDRESS (the bridge end of its veth: TAG + the address's last byte, ≤ 15 characters)
  ip netns add "$tag-$1"
  ip link add "$tag-${2##*.}" type veth peer name eth0 netns "$tag-$1"
  ip link set "$tag-${2##*.}" master "$tag-br" up
  ip -n "$tag-$1" addr add "$2/24" dev eth0
  ip -n "$tag-$1" link set eth0 up
  ip -n "$tag-$1" link set lo up
}
host ctl "$net.1"
host node1 "$net.11"
host node2 "$net.12"
# on HOST CMD...: a process in the host's network namespace (nsenter: /sys stays this machine's, with
# its cgroups), with its own host name (slurmd knows its node by it).
on() { local h="$1"; shift; nsenter --net="/run/netns/$tag-$h" unshare --uts sh -c "hostname $h && exec \"\$@\"" sh "$@"; }

# munge: the daemon of this machine (its socket is shared by every namespace: one file system).
install -d -o munge -g munge -m 0755 /run/munge
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- munged --force || fail "munged did not start"
  started_munge=1  # Started here: stopped at the end.
fi
for _ in $(seq 50); do munge -n </dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
munge -n </dev/null | unmunge >/dev/null || fail "munge does not work"

conf="$run/slurm.conf"
cat >"$conf" <<CONF
ClusterName=tessera-demo
SlurmctldHost=ctl($net.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$run/state
SlurmdSpoolDir=$run/spool/%n
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.%n.pid
SlurmctldLogFile=$run/slurmctld.log
SlurmdLogFile=$run/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/linear
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
KillWait=15
NodeName=node1 NodeAddr=$net.11 CPUs=1 State=UNKNOWN
NodeName=node2 NodeAddr=$net.12 CPUs=1 State=UNKNOWN
PartitionName=demo Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$conf"
on ctl slurmctld -D -i -f "$conf" >"$run/slurmctld.out" 2>&1 & pids+=($!)
sleep 1
for n in node1 node2; do on "$n" slurmd -D -f "$conf" >"$run/slurmd.$n.out" 2>&1 & pids+=($!); done
for _ in $(seq 100); do [ "$(sinfo -h -t idle -o %D 2>/dev/null || echo 0)" = 2 ] && break; sleep 0.2; done
sinfo
[ "$(sinfo -h -t idle -o %D)" = 2 ] || fail "the two slurmd did not come up (see $run/slurm*.log)"

# The cluster's tessera coordinator on ctl; certificates for it, the two nodes' workers and the user.
certs="$run/certs"
"$bin/tessera" certs init "$certs" --worker node1 --worker node2 --user demo --san "$net.1" --days 2 >/dev/null
on ctl "$bin/tessera-coordinator" --listen="$net.1:7070" --metrics_listen="$net.1:9464" --db="$run/coordinator.db" \
  --tls_ca="$certs/ca.pem" --tls_cert="$certs/coordinator.pem" --tls_key="$certs/coordinator.key" \
  --data_roots="$run/data" --output_root="$run/out" --heartbeat_timeout_s=5 >"$run/coordinator.log" 2>&1 & pids+=($!)
export TESSERA_COORDINATOR="$net.1:7070" TESSERA_TLS_CA="$certs/ca.pem" TESSERA_TLS_CERT="$certs/user-demo.pem" \
  TESSERA_TLS_KEY="$certs/user-demo.key" TESSERA_BIN="$bin" TESSERA_WORKER_CERTS="$certs" \
  TESSERA_DATA_ROOTS="$run/data" TESSERA_OUTPUT_ROOT="$run/out" TESSERA_WORK="$run/nodes" \
  TESSERA_RANK_BINARY="$bin/tessera-rank"
for _ in $(seq 100); do "$bin/tessera" workers >/dev/null 2>&1 && break; sleep 0.1; done
text=/usr/share/common-licenses/GPL-3
[ -r "$text" ] || text=README.md
"$bin/tessera" data prepare "$text" "$run/data/demo.bin" >/dev/null

left() { pgrep -f "$run/nodes/worker-" | wc -l || true; }  # Workers and ranks of the allocations (their work dirs).
wait_job() {  # wait_job SLURM_JOB: until it has left the queue
  for _ in $(seq 1500); do [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0; sleep 0.2; done
  return 1
}
sets=(--set data.path="$run/data/demo.bin")
repo="$PWD"

# 1. A job that runs to its end inside the allocation.
t0=$SECONDS
sj="$(cd "$run" && sbatch --parsable --nodes=2 "$repo/deploy/slurm/tessera.sbatch" "$repo/examples/gpt-demo.yaml" \
  "${sets[@]}" --set output_dir="$run/out/demo/first" --set train.steps=30)" || fail "sbatch"
echo "slurm job $sj submitted"
wait_job "$sj" || fail "slurm job $sj did not end"
cat "$run/tessera-$sj.out"
grep -q "SUCCEEDED" "$run/tessera-$sj.out" || fail "the tessera job of slurm job $sj did not succeed"
sacct_state="$(scontrol show job "$sj" 2>/dev/null | grep -o 'JobState=[A-Z]*' || true)"
echo "slurm job $sj: ${sacct_state:-ended}, $((SECONDS - t0)) s"
for _ in $(seq 50); do [ "$(left)" = 0 ] && break; sleep 0.2; done
[ "$(left)" = 0 ] || fail "workers or ranks of slurm job $sj are left: $(pgrep -af "$run/nodes")"

# 2. scancel mid-job: the tessera job is cancelled, no worker or rank is left.
sj="$(cd "$run" && sbatch --parsable --nodes=2 "$repo/deploy/slurm/tessera.sbatch" "$repo/examples/gpt-demo.yaml" \
  "${sets[@]}" --set output_dir="$run/out/demo/cancelled" --set train.steps=100000)" || fail "sbatch"
for _ in $(seq 600); do grep -q "^tessera job " "$run/tessera-$sj.out" 2>/dev/null && break; sleep 0.2; done
tj="$(sed -n 's/^tessera job \([^ ]*\) .*/\1/p' "$run/tessera-$sj.out")"
[ -n "$tj" ] || { cat "$run/tessera-$sj.out"; fail "slurm job $sj did not submit its tessera job"; }
for _ in $(seq 600); do "$bin/tessera" job "$tj" 2>/dev/null | grep -q "RUNNING" && break; sleep 0.2; done
"$bin/tessera" job "$tj" | sed -n 1,3p
ranks="$(pgrep -f "tessera-rank .*$run/nodes/" | wc -l || true)"
echo "slurm job $sj runs tessera job $tj ($ranks rank processes); scancel"
t0=$SECONDS
scancel "$sj"
wait_job "$sj" || fail "slurm job $sj did not end after scancel"
for _ in $(seq 100); do [ "$(left)" = 0 ] && break; sleep 0.2; done
[ "$(left)" = 0 ] || fail "after scancel, left: $(pgrep -af "$run/nodes")"
echo "scancel → nothing of the allocation left after $((SECONDS - t0)) s"
"$bin/tessera" job "$tj" | sed -n 1,3p
"$bin/tessera" job "$tj" | grep -q "CANCELLED" || fail "tessera job $tj is not CANCELLED"

# 3. A work dir that another user made first (in /tmp, say) is refused: no worker starts there.
mkdir -p "$run/theirs"
chown 12345:12345 "$run/theirs"
sj="$(cd "$run" && TESSERA_WORK="$run/theirs" sbatch --parsable --nodes=1 "$repo/deploy/slurm/tessera.sbatch" \
  "$repo/examples/gpt-demo.yaml" "${sets[@]}" --set output_dir="$run/out/demo/theirs" --set train.steps=5)" || fail "sbatch"
wait_job "$sj" || fail "slurm job $sj did not end"
grep -q "the work dir $run/theirs is not a directory of this user" "$run/tessera-$sj.out" ||
  { cat "$run/tessera-$sj.out"; fail "slurm job $sj used a work dir of another user"; }
[ -z "$(ls -A "$run/theirs")" ] || fail "the worker wrote into another user's directory"
echo "a work dir owned by another user: refused"
echo "slurm demo: the job SUCCEEDED in its allocation; scancel left no worker or rank; another user's work dir refused"
