#!/usr/bin/env bash
# Builds and runs every test, then prints one line "N passed, M failed, K skipped" (test cases, from
# the JUnit XML each test leaves; GoogleTest marks a GTEST_SKIP case result="skipped", and skipped
# cases are never counted as passed). The whole suite (no arguments) also runs every fuzz target
# briefly under ASan+UBSan (tools/fuzz.sh --smoke: one case each) and the deployment tests
# (tools/test_deploy.sh: the container image and a cluster in containers); every run checks the
# layering (tools/check_layering.sh). Extra arguments go to `bazel test`, in their order. Flags
# alone (each starting with "-", values joined with "=": --nocache_test_results, which reruns every
# test — the flake check of docs/testing.md) keep the whole suite: //... is added, and so are the fuzz
# and deployment tests. Any other argument (a target pattern, an exclusion -//x:y, a flag's separate
# value) hands the whole command to bazel as given and skips the fuzz and deployment tests.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="${HOME:-/root}/.cache/tessera/bazel-disk"
mkdir -p "$cache"
args=("$@")
whole=1
for arg in "$@"; do
  case "$arg" in
    -/*|-@*) whole=0 ;;  # An exclusion is a target pattern.
    -*) ;;
    *) whole=0 ;;
  esac
done
[ "$whole" = 0 ] || args+=(//...)
bazel test --disk_cache="$cache" "${args[@]}"
rc=$?
# The layering rule the compiler cannot check (tools/check_layering.sh), counted as one test case.
layering_junit="${TMPDIR:-/tmp}/tessera-layering-junit"
rm -rf "$layering_junit"
TESSERA_LAYERING_JUNIT="$layering_junit/layering.xml" bash tools/check_layering.sh || rc=1
# The whole suite also runs every fuzz target briefly under ASan+UBSan (tools/fuzz.sh --smoke).
fuzz_junit="${TMPDIR:-/tmp}/tessera-fuzz-junit"
rm -rf "$fuzz_junit"
deploy_junit="${TMPDIR:-/tmp}/tessera-deploy-junit"
rm -rf "$deploy_junit"
if [ "$whole" = 1 ]; then
  TESSERA_FUZZ_JUNIT="$fuzz_junit" bash tools/fuzz.sh --smoke || rc=1
  TESSERA_DEPLOY_JUNIT="$deploy_junit" bash tools/test_deploy.sh || rc=1
fi
python3 - "$(bazel info bazel-testlogs 2>/dev/null)" "$fuzz_junit" "$deploy_junit" "$layering_junit" <<'PY'
import pathlib, sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
xmls = list(pathlib.Path(sys.argv[1]).rglob("test.xml"))
for extra in sys.argv[2:]:
    if pathlib.Path(extra).is_dir():
        xmls += list(pathlib.Path(extra).glob("*.xml"))
for xml in xmls:
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError:
        failed += 1
        continue
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            skipped += 1
        elif case.get("status", "run") == "run":
            passed += 1
        else:  # status="notrun": a DISABLED_ case.
            skipped += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $rc
