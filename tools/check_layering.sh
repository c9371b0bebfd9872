#!/usr/bin/env bash
# Checks the layering of docs/architecture.md that the compiler cannot:
# - the control plane (client/, coordinator/, worker/ but worker/rank/, spec/, common/) and the
#   torch-free libraries it uses (layout/, plan/, formats/) never include a header under parallel/ or
#   kernels/, and their BUILD files never depend on LibTorch or on the engine;
# - nor do they name the engine's namespace (`parallel::`, `namespace tessera::parallel`): formats/
#   lives in tessera::formats::<folder>;
# - common/ is the ground floor: its BUILD files depend on nothing of the project but common/.
# Prints each offending line; exit 1 if any.
# With TESSERA_LAYERING_JUNIT=FILE it also writes the result as a JUnit test case there.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
problems="$(
  grep -rnE '#include "(parallel|kernels)/' client coordinator worker spec common layout plan formats rewards \
    --include='*.h' --include='*.cc' | grep -v '^worker/rank/'
  grep -rnE '(^|[^[:alnum:]_])parallel::|namespace tessera::parallel' client coordinator worker spec common \
    layout plan formats rewards --include='*.h' --include='*.cc' | grep -v '^worker/rank/'
  grep -nE '"@torch|"//(parallel|kernels)[/:]' layout/BUILD.bazel plan/BUILD.bazel formats/*/BUILD.bazel rewards/BUILD.bazel \
    client/BUILD.bazel coordinator/BUILD.bazel coordinator/ui/BUILD.bazel worker/BUILD.bazel \
    spec/BUILD.bazel common/*/BUILD.bazel
  grep -nE '"//' common/*/BUILD.bazel | grep -vE '"//(common/|visibility)'
)"
if [ -n "$problems" ]; then
  echo "layering: the control plane or a torch-free library reaches into the engine:"
  echo "$problems"
  rc=1
else
  echo "layering: OK (parallel/ and kernels/ neither included nor named outside the engine; common/ alone)"
  rc=0
fi
if [ -n "${TESSERA_LAYERING_JUNIT:-}" ]; then
  mkdir -p "$(dirname "$TESSERA_LAYERING_JUNIT")"
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo '<testsuites><testsuite name="layering" tests="1">'
    if [ $rc = 0 ]; then
      echo '<testcase name="ControlPlaneNeverIncludesTheEngine" status="run"/>'
    else
      echo '<testcase name="ControlPlaneNeverIncludesTheEngine" status="run"><failure message="see the log"/></testcase>'
    fi
    echo '</testsuite></testsuites>'
  } >"$TESSERA_LAYERING_JUNIT"
fi
exit $rc
