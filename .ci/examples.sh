#!/usr/bin/env bash
# Builds every example program and runs the ones that need no database.
#
# Usage: .ci/examples.sh
#   With EXAMPLES_DATABASE_URL set, also runs every example against that
#   database (as DATABASE_URL), and the ones that need one; they create the
#   examples' runclaim_example_runs table in it. .ci/run sets it to a container of its own.
#
# The examples, examples/metrics, runclaimotel and runclaimprom are modules of their own
# (they keep gocron, robfig/cron, Prometheus and the OpenTelemetry SDK out
# of the runclaim module), in the workspace of go.work; .ci/run tests them
# with every other module.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'examples: %s\n' "$*" >&2; }

# The examples that run without a database, each bounded to a few seconds.
no_db=(quickstart replicas ticker gocron cron redeploy feed pacedsweep)
# The examples that need a database.
db_only=(fence)

# Each example is built once, into bin; the runs below run the binaries.
bin="$(mktemp -d -t runclaim-examples.XXXXXX)"
trap 'rm -rf "$bin"' EXIT
log "build ./examples/..."
go build -o "$bin/" ./examples/...
log "build examples/metrics and runclaimotel's example"
go build -o "$bin/metrics" ./examples/metrics
go build -o "$bin/runclaimotel" ./runclaimotel/example

run() { # run NAME [DATABASE_URL]
	local name=$1 url=${2:-} envs=(-u DATABASE_URL)
	[[ -n $url ]] && envs=("DATABASE_URL=$url")
	log "run $name${url:+ with a database}"
	if [[ $name == runclaimotel ]]; then
		env "${envs[@]}" timeout 60 "$bin/$name" >/dev/null
	else
		env "${envs[@]}" timeout 60 "$bin/$name"
	fi
}

# Two lanes: the runs without a database (in memory) in the background,
# their output kept and shown once they end, and the runs against the
# database meanwhile. The examples mostly wait on their own periods.
(
	for ex in "${no_db[@]}" metrics runclaimotel; do
		run "$ex"
	done
) >"$bin/memory.log" 2>&1 &
memory=$!
rc=0
if [[ -n ${EXAMPLES_DATABASE_URL:-} ]]; then
	for ex in "${no_db[@]}" metrics runclaimotel "${db_only[@]}"; do
		run "$ex" "$EXAMPLES_DATABASE_URL" || { rc=$?; break; }
	done
else
	log "not run, for want of EXAMPLES_DATABASE_URL: ${db_only[*]}"
fi
wait "$memory" || rc=$?
cat "$bin/memory.log"
if ((rc != 0)); then
	log "FAILED (exit $rc)"
	exit "$rc"
fi
log "all examples built and ran"
