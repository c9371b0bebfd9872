#!/usr/bin/env bash
# The deployment tests: what a user following deploy/ runs, run for real on this machine.
#   image            bash deploy/container/build.sh       (debootstrap + podman import + podman build)
#   container_demo   bash deploy/container/demo.sh        (coordinator + 2 workers in containers, mTLS,
#                                                          a worker container killed and the job resumed)
#   kubernetes_demo  bash deploy/kubernetes/demo.sh      (the Kubernetes manifests checked, the Pods of
#                                                          their StatefulSet and DaemonSet played with
#                                                          podman kube play, the demo job SUCCEEDED)
#   slurm_demo       bash deploy/slurm/demo.sh           (slurmctld + a slurmd per test host, munge: sbatch runs
#                                                          the demo job in its allocation's worker pool to
#                                                          SUCCEEDED; scancel mid-job leaves no worker or rank)
#   image_cuda       bash deploy/container/test_cuda_image.sh  (the GPU variant built; its libraries all
#                                                          resolve in it, a CPU run trains, device cuda
#                                                          stops with the no-GPU error)
#   systemd_units    bash deploy/systemd/test_units.sh    (the units under systemd as PID 1 in a container:
#                                                          start, restart on failure, journal, exposure, stop)
# One JUnit file per case in $TESSERA_DEPLOY_JUNIT when set (tools/test.sh counts them); logs in
# out/deploy-tests/. Needs root (rootful podman); without it each case is reported as skipped, never
# as passed. Exit 1 when a case failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
logs="$PWD/out/deploy-tests"
mkdir -p "$logs"
rc=0
report() {  # report NAME passed|failed|skipped SECONDS MESSAGE
  echo "deploy: $1 $2 ($3 s)${4:+: $4}" >&2
  [ -n "${TESSERA_DEPLOY_JUNIT:-}" ] || return 0
  mkdir -p "$TESSERA_DEPLOY_JUNIT"
  { echo "<testsuite name=\"deploy\"><testcase name=\"$1\" status=\"run\" time=\"$3\">"
    case "$2" in
      failed) echo "<failure message=\"see $logs/$1.log\"/>" ;;
      skipped) echo "<skipped message=\"$4\"/>" ;;
    esac
    echo "</testcase></testsuite>"; } >"$TESSERA_DEPLOY_JUNIT/$1.xml"
}
case_() {  # case_ NAME COMMAND...
  local name="$1" t0=$SECONDS
  shift
  if [ "$(id -u)" != 0 ]; then report "$name" skipped 0 "needs root (rootful podman)"; return; fi
  if "$@" >"$logs/$name.log" 2>&1; then
    report "$name" passed $((SECONDS - t0))
  else
    report "$name" failed $((SECONDS - t0)) ""
    tail -30 "$logs/$name.log" >&2
    rc=1
  fi
}
case_ image bash deploy/container/build.sh
case_ container_demo bash deploy/container/demo.sh
case_ kubernetes_demo bash deploy/kubernetes/demo.sh
case_ slurm_demo bash deploy/slurm/demo.sh
case_ image_cuda bash deploy/container/test_cuda_image.sh
case_ systemd_units bash deploy/systemd/test_units.sh
exit $rc
