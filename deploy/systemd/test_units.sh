#!/usr/bin/env bash
# deploy/systemd's units run under systemd for real: a container of the image built with --systemd
# (deploy/container/build.sh) boots systemd as PID 1 on an internal container network
# (198.18.65.0/24); in it systemd starts tessera-coordinator and tessera-worker from the shipped
# units (User=tessera and every sandboxing setting as written), with flags and certificates in
# /etc/tessera and data/outputs under /srv/tessera as the units' comments say. From this host:
#   - the CLI submits the demo job (mutual TLS) and waits for its first checkpoint;
#   - the worker's main process is SIGKILLed: systemd stops what is left of the unit (the ranks),
#     restarts the worker (Restart=always), and the job resumes from the checkpoint to SUCCEEDED;
#   - both units' logs are read from the journal; `systemd-analyze security` scores each unit;
#   - `systemctl stop` stops both.
# Prints "exposure UNIT SCORE LEVEL" lines; exit 0 only when every check passed. Needs root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source deploy/container/env.sh
image="${TESSERA_SYSTEMD_IMAGE:-localhost/tessera-systemd:latest}"
bash deploy/container/build.sh --systemd "$image"
net=tessera-systemd
ip=198.18.65.10
name=tessera-systemd-node
start_run systemd-test
in_node() { podman exec "$name" "$@"; }
cleanup() {
  in_node journalctl --no-pager -o short-iso >"$run/journal.log" 2>&1 || true
  podman rm -f -t 5 "$name" >/dev/null 2>&1 || true
  podman network rm -f "$net" >/dev/null 2>&1 || true
  echo "logs in $run"
}
podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
podman network rm -f "$net" >/dev/null 2>&1 || true
trap cleanup EXIT
pm network create --internal --subnet 198.18.65.0/24 "$net" >/dev/null

# /etc/tessera as the units' comments describe it: flag files and certificates.
etc="$run/etc"
mkdir -p "$etc" "$run/srv/data" "$run/srv/out"
"$cli" certs init "$etc/certs" --worker node1 --user demo --san "$ip" --days 2 >/dev/null
cat >"$etc/coordinator.flags" <<FLAGS
--listen=0.0.0.0:7070
--metrics_listen=0.0.0.0:9464
--db=/var/lib/tessera/coordinator.db
--tls_ca=/etc/tessera/certs/ca.pem
--tls_cert=/etc/tessera/certs/coordinator.pem
--tls_key=/etc/tessera/certs/coordinator.key
--data_roots=/srv/tessera/data
--output_root=/srv/tessera/out
FLAGS
cat >"$etc/worker.flags" <<FLAGS
--coordinator=$ip:7070
--name=node1
--devices=cpu:2
--threads_per_rank=1
--work_dir=/var/lib/tessera-worker
--metrics_listen=0.0.0.0:9465
--tls_ca=/etc/tessera/certs/ca.pem
--tls_cert=/etc/tessera/certs/worker-node1.pem
--tls_key=/etc/tessera/certs/worker-node1.key
--data_roots=/srv/tessera/data
--output_root=/srv/tessera/out
FLAGS
chown -R 10001 "$etc" "$run/srv/out"
text=/usr/share/common-licenses/GPL-3
[ -r "$text" ] || text=README.md
"$cli" data prepare "$text" "$run/srv/data/demo.bin" >/dev/null

pm run -d --name "$name" --hostname node1 --network "$net" --ip "$ip" --systemd=always --user root \
  --health-interval disable -v "$etc:/etc/tessera:ro" -v "$run/srv/data:/srv/tessera/data:ro" \
  -v "$run/srv/out:/srv/tessera/out" "$image" /sbin/init >/dev/null
for _ in $(seq 100); do
  state="$(in_node systemctl is-system-running 2>/dev/null || true)"
  [ "$state" = running ] || [ "$state" = degraded ] && break; sleep 0.2
done
echo "systemd in the container: $state"
in_node systemctl start tessera-coordinator.service tessera-worker.service
for u in tessera-coordinator tessera-worker; do
  in_node systemctl is-active --quiet "$u" || { in_node systemctl status "$u" --no-pager || true; fail "$u is not active"; }
done

export TESSERA_COORDINATOR="$ip:7070" TESSERA_TLS_CA="$etc/certs/ca.pem" TESSERA_TLS_CERT="$etc/certs/user-demo.pem" \
  TESSERA_TLS_KEY="$etc/certs/user-demo.key"
for _ in $(seq 150); do "$cli" workers 2>/dev/null | grep -q ALIVE && break; sleep 0.2; done
"$cli" workers
job="$("$cli" --output json submit examples/gpt-demo.yaml --max-restarts 2 --set data.path=/srv/tessera/data/demo.bin \
  --set output_dir=/srv/tessera/out/demo/gpt-demo | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
echo "submitted $job"
field() { "$cli" --output json job "$job" | python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }
for _ in $(seq 900); do
  [ "$(field 'int(j.get("progress", {}).get("last_checkpoint_step", 0))')" -ge 50 ] && break; sleep 0.2
done
[ "$(field 'int(j.get("progress", {}).get("last_checkpoint_step", 0))')" -ge 50 ] || fail "no checkpoint at step 50"

# Restart on failure: SIGKILL the worker's main process only; systemd must take the ranks down too.
main_pid="$(in_node systemctl show -p MainPID --value tessera-worker)"
# (The image has no procps: processes are read from /proc.)
# A rank: a process whose argv[0] ends in tessera-rank.
rank_pids() { in_node sh -c 'for d in /proc/[0-9]*; do tr "\0" "\n" <"$d/cmdline" 2>/dev/null | head -1 | grep -q "tessera-rank$" && echo "${d#/proc/}"; done; true'; }
ranks="$(rank_pids | tr '\n' ' ')"
[ -n "$ranks" ] || fail "no rank processes under tessera-worker"
echo "killing tessera-worker's main process $main_pid (SIGKILL); its ranks: $ranks"
in_node systemctl kill --kill-who=main --signal=SIGKILL tessera-worker
# RestartSec plus the worker's start, on a machine whose two cores the rest of the suite may share: a
# generous deadline, and what systemd says when it passes.
deadline=$((SECONDS + 120))
while [ $SECONDS -lt $deadline ]; do
  [ "$(in_node systemctl show -p NRestarts --value tessera-worker)" -ge 1 ] &&
    in_node systemctl is-active --quiet tessera-worker && break
  sleep 0.2
done
restarts="$(in_node systemctl show -p NRestarts --value tessera-worker)"
new_pid="$(in_node systemctl show -p MainPID --value tessera-worker)"
[ "$restarts" -ge 1 ] && [ "$new_pid" != "$main_pid" ] || {
  in_node systemctl status tessera-worker --no-pager || true
  fail "systemd did not restart tessera-worker in 120 s (NRestarts=$restarts, MainPID $main_pid -> $new_pid)"
}
for p in $ranks; do
  [[ " $(rank_pids | tr '\n' ' ') " == *" $p "* ]] && fail "rank process $p outlived the killed worker"
done
echo "systemd restarted tessera-worker (NRestarts=$restarts, main pid $main_pid -> $new_pid); old ranks gone"
"$cli" follow "$job" >"$run/follow.log" 2>&1 || { tail -5 "$run/follow.log"; fail "the job did not succeed"; }
"$cli" job "$job" | tail -4
resumed="$(field 'max(int(a.get("resumed_from_step", 0)) for a in j["history"])')"
[ "$resumed" -ge 50 ] || fail "no attempt resumed from the checkpoint"
echo "job $job SUCCEEDED; an attempt resumed from step $resumed after the worker restart"

# The journal holds both daemons' logs.
for u in tessera-coordinator tessera-worker; do
  n="$(in_node journalctl -u "$u" --no-pager -o cat | wc -l)"
  [ "$n" -gt 0 ] || fail "no journal lines for $u"
  echo "journal: $u $n lines, e.g. $(in_node journalctl -u "$u" --no-pager -o cat | grep -v '^$' | head -1 | cut -c1-100)"
done
in_node journalctl -u tessera-worker --no-pager -o cat | grep -q "Main process exited, code=killed" ||
  in_node journalctl --no-pager -o cat | grep -q "tessera-worker.service: Main process exited, code=killed" ||
  fail "the journal does not show the worker's kill"

for u in tessera-coordinator tessera-worker; do
  line="$(in_node systemd-analyze security "$u.service" --no-pager | grep 'Overall exposure level')"
  echo "exposure $u $(echo "$line" | sed -E 's/.*: ([0-9.]+) ([A-Z]+).*/\1 \2/')"
done | tee "$run/exposure.txt"
in_node systemctl stop tessera-worker.service tessera-coordinator.service
for u in tessera-coordinator tessera-worker; do
  in_node systemctl is-active --quiet "$u" && fail "$u still active after stop"
done
echo "systemd test: passed (both units stopped)"
