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
# The test results of this invocation only (its build events): bazel-testlogs also keeps the logs of
# targets renamed or removed since, which would be counted again.
events="${TMPDIR:-/tmp}/tessera-test-events.json"
rm -f "$events"
bazel test --disk_cache="$cache" --build_event_json_file="$events" "${args[@]}"
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
python3 - "$events" "$fuzz_junit" "$deploy_junit" "$layering_junit" <<'PY'
import json, pathlib, sys, urllib.parse, urllib.request, xml.etree.ElementTree as ET
passed = failed = skipped = 0
# Each test's (run, shard) counts once, with its last attempt's test.xml.
latest = {}
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            key = event.get("id", {}).get("testResult")
            if key is None or "testResult" not in event:
                continue
            for out in event["testResult"].get("testActionOutput", []):
                if out.get("name") == "test.xml" and out.get("uri", "").startswith("file://"):
                    run = (key.get("label"), key.get("run", 1), key.get("shard", 1))
                    if key.get("attempt", 1) >= latest.get(run, (0, None))[0]:
                        latest[run] = (key.get("attempt", 1), urllib.request.url2pathname(urllib.parse.urlparse(out["uri"]).path))
except (OSError, ValueError) as e:
    print(f"test.sh: cannot read the build events ({e}); counting no Bazel test", file=sys.stderr)
xmls = [pathlib.Path(path) for _, path in latest.values()]
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
