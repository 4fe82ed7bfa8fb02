#!/usr/bin/env bash
# Cold start and warm round trip of launched services, next to their floors, in one run:
#   the demo's echo service and the test fixture (a lean Swift service), sandboxed and not;
#   plain spawn and bubblewrap spawn of /usr/bin/true; the raw C seqpacket ping-pong.
# Usage: Benchmarks/raw/cold-start.sh [COLD-STARTS] [ROUND-TRIPS]   (from the repository root)
# Until the benchmark package (issue 5) takes over, this is how the launcher's figures are made.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
starts=${1:-50}
trips=${2:-20000}
swift build -c release --product demo-share >/dev/null
swift build -c release --product remoteview-test-service >/dev/null
root=$(pwd)
services=$(mktemp -d /tmp/remoteview-bench-XXXXXX)
trap 'rm -rf "$services"' EXIT
cat >"$services/fixture.json" <<JSON
{ "identifier": "com.example.fixture", "executable": "$root/.build/release/remoteview-test-service",
  "arguments": ["serve"], "display": { "title": "Fixture" } }
JSON
cat >"$services/echo.json" <<JSON
{ "identifier": "com.example.demo-share.echo", "executable": "$root/.build/release/demo-share",
  "arguments": ["service"], "display": { "title": "Echo" }, "idleTimeout": 1.5 }
JSON
demo=.build/release/demo-share
for sandbox in "" --unsandboxed; do
  echo "== ${sandbox:-sandboxed}"
  "$demo" --services "$services" --round-trips "$trips" --cold-starts "$starts" $sandbox 2>&1 | grep -E 'warm|cold start of'
  "$demo" --services "$services" --round-trips 0 --cold-starts "$starts" --cold-start-service com.example.fixture $sandbox 2>&1 | grep -E 'cold start of'
done
echo "== floors"
time_runs() {  # the mean time of N runs of a command, in µs
  local n=$1; shift
  local t0 t1
  t0=$(date +%s%N); for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 || true; done; t1=$(date +%s%N)
  echo $(((t1 - t0) / n / 1000))
}
echo "plain spawn of /usr/bin/true: $(time_runs "$starts" /usr/bin/true) µs (mean)"
echo "bwrap + /usr/bin/true: $(time_runs "$starts" bwrap --unshare-all --die-with-parent --new-session --clearenv --cap-drop ALL \
  --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/bin /bin --proc /proc --dev /dev \
  --tmpfs /tmp -- /usr/bin/true) µs (mean)"
echo "fixture start-up alone (exits at once): $(time_runs "$starts" .build/release/remoteview-test-service no-such-mode) µs (mean)"
cc -O2 -o "$services/baselines" Benchmarks/raw/baselines.c
"$services/baselines" pingpong "$trips"
