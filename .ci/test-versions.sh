#!/usr/bin/env bash
# Runs every test that talks to a database on each PostgreSQL version given.
#
# The packages are those whose tests use internal/pgtest (found with go
# list, in every module of the workspace, go.work), each compiled once, without -race, into a test binary; each binary
# then runs once per version, against a container of the image
# runclaim.local/postgres:MAJOR (see build-postgres-image.sh), with
# PGTEST_REQUIRED=1 and PGTEST_SERVER_MAJOR=MAJOR, so that a test that
# cannot get a database, or gets one of another version, fails. The runs go
# JOBS at a time (the tests mostly wait on the database and on timers, so
# they overlap well), the heaviest packages first, each with four parallel
# tests at once.
#
# The versions named with -s run only the smoke selection of
# .ci/version-smoke (the tests of version-specific SQL), and only the
# packages it names; those named with -r run every test of the root
# package (the store, its conformance suite, contention and upgrades) and
# the smoke selection of the others; the others run every database test.
#
# For each version it then prints what .ci/testsummary.go makes of the
# output (every package with the server it ran on, every failure and skip)
# and a closing line "PostgreSQL MAJOR: N passed, N failed, N skipped ...".
# It exits non-zero if any version failed.
#
# Usage: .ci/test-versions.sh [-j JOBS] [-o DIR] [-s MAJOR,...] [-r MAJOR,...] MAJOR...
#        .ci/test-versions.sh -l
#   -l       prints the packages with database tests, comma-separated, and exits
#   -j JOBS  test binaries running at once (default 4)
#   -s MAJORS  of the versions given, those (comma-separated) that run only
#            the smoke selection
#   -r MAJORS  of the versions given, those (comma-separated) that run the
#            root package whole and the other packages' smoke selection
#   -o DIR   keep the test binaries, the go test -json output of each run
#            (DIR/MAJOR/*.json) and the closing lines (DIR/MAJOR.line) in DIR
#            (default: a temporary directory, removed at the end)
set -euo pipefail

cd "$(dirname "$0")/.."

usage() { echo "usage: $0 [-j JOBS] [-o DIR] [-s MAJOR,...] [-r MAJOR,...] MAJOR... | $0 -l" >&2; exit 2; }
jobs=4
out=""
list=0
smoke=","
rootonly=","
while getopts 'j:o:lr:s:' opt; do
	case $opt in
	j) jobs=$OPTARG ;;
	o) out=$OPTARG ;;
	l) list=1 ;;
	s) smoke=",$OPTARG," ;;
	r) rootonly=",$OPTARG," ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
versions=("$@")
((list || ${#versions[@]})) || usage

log() { printf 'test-versions: %s\n' "$*" >&2; }

# The packages whose tests use a database, heaviest (most test code) first.
mapfile -t pkgs < <(
	go list -f '{{.ImportPath}}|{{.Dir}}|{{join .TestGoFiles ","}},{{join .XTestGoFiles ","}}|{{join .TestImports " "}} {{join .XTestImports " "}}' github.com/runclaim/runclaim/... |
		while IFS='|' read -r path dir files imports; do
			[[ $path == */internal/pgtest || " $imports " == *" github.com/runclaim/runclaim/internal/pgtest "* ]] || continue
			size=0
			IFS=, read -ra fs <<<"$files"
			for f in "${fs[@]}"; do [[ -n $f ]] && size=$((size + $(wc -c <"$dir/$f"))); done
			echo "$size $path $dir"
		done | sort -rn | cut -d' ' -f2-
)
((${#pkgs[@]})) || { log "no package uses internal/pgtest"; exit 1; }
names=()
for p in "${pkgs[@]}"; do names+=("${p%% *}"); done
need="$(
	IFS=,
	echo "${names[*]}"
)"
if ((list)); then
	echo "$need"
	exit 0
fi
log "packages with database tests: ${names[*]}"

for v in "${versions[@]}"; do
	docker image inspect "runclaim.local/postgres:$v" >/dev/null 2>&1 ||
		{ log "no image runclaim.local/postgres:$v (bash .ci/build-postgres-image.sh $v)"; exit 1; }
done
if [[ -z $out ]]; then
	out="$(mktemp -d -t runclaim-versions.XXXXXX)"
	trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out/bin"

# smoke_run DIR: the -test.run pattern of the package in DIR (relative to
# the module's root, "." for the root) from .ci/version-smoke; empty if the
# file names none of its tests.
smoke_run() {
	local rel=$1 names=() f item
	while read -r d items; do
		[[ $d == "$rel" ]] || continue
		for item in $items; do
			if [[ $item == *.go ]]; then
				f="$rel/$item"
				[[ -f $f ]] || { log ".ci/version-smoke: no file $f"; exit 1; }
				mapfile -t -O "${#names[@]}" names < <(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$f")
			else
				names+=("$item")
			fi
		done
	done < <(awk '!/^#/ && NF' .ci/version-smoke)
	((${#names[@]})) || return 0
	local IFS='|'
	echo "^(${names[*]})\$"
}
root="$(pwd)"
smoke_pkgs=() smoke_runs=() smoke_names=()
for p in "${pkgs[@]}"; do
	dir=${p#* }
	rel=${dir#"$root"}
	rel=${rel#/}
	run="$(smoke_run "${rel:-.}")"
	[[ -n $run ]] || continue
	smoke_pkgs+=("$p")
	smoke_runs+=("$run")
	smoke_names+=("${p%% *}")
done
smoke_need="$(
	IFS=,
	echo "${smoke_names[*]}"
)"

t=$SECONDS
go build -o "$out/bin/testsummary" .ci/testsummary.go
# Two at a time: linking is mostly serial, and the machines have two cores.
# Only the smoke packages when no version runs every package.
build=("${smoke_pkgs[@]}")
for v in "${versions[@]}"; do
	[[ $smoke == *",$v,"* || $rootonly == *",$v,"* ]] || build=("${pkgs[@]}")
done
for p in "${build[@]}"; do
	path=${p%% *}
	printf '%s\0%s\0' "$out/bin/${path//\//_}.test" "$path"
done | xargs -0 -n 2 -P 2 go test -c -o
log "compiled ${#build[@]} test binaries in $((SECONDS - t)) s"

# run_one MAJOR IMPORTPATH DIR [RUN [SHARD]]: one test binary against one
# version, only the tests RUN matches if given; SHARD names a part of a
# package's tests that runs beside the others (RUN lists its tests).
run_one() {
	local v=$1 path=$2 dir=$3 run=${4:-} shard=${5:-}
	local bin="$out/bin/${path//\//_}.test" json="$out/$v/${path//\//_}${shard:+.$shard}.json"
	local start=$SECONDS rc=0 args=()
	[[ -n $run ]] && args=(-test.run "$run")
	(cd "$dir" && PGTEST_IMAGE="runclaim.local/postgres:$v" PGTEST_SERVER_MAJOR="$v" \
		PGTEST_REQUIRED=1 TESTCONTAINERS_RYUK_DISABLED=true \
		"$test2json" -t -p "$path" "$bin" -test.v=test2json -test.count=1 -test.parallel=4 \
		-test.paniconexit0 -test.timeout=10m "${args[@]}") >"$json" 2>&1 || rc=$?
	local what=""
	[[ -n $run ]] && what=" (smoke)"
	[[ -n $shard ]] && what=" ($shard)"
	printf 'test-versions: PostgreSQL %s %s%s: exit %d after %d s\n' "$v" "$path" "$what" "$rc" "$((SECONDS - start))" >&2
}
test2json="$(go tool -n test2json)"
export -f run_one
export out test2json

# The order of the runs: round r runs the r-th package of each version's
# list, and each list is the packages heaviest first, except that version i
# starts its heavier half i places later, so that the runs going at once are
# mostly of different packages (several runs of one contention test at once
# would slow each other down the most).
# The longest runs go first, so that the short ones fill the gaps at the
# end: the whole runs of the three heaviest packages (the root package,
# the CLI, and internal/chaos, whose lease-timed scenarios take the longest
# of all and mostly wait), then the smoke runs of the heaviest smoke
# package (the root package's), then the other whole runs, then the other
# smoke runs.
t=$SECONDS
full=() smokes=() roots=()
for v in "${versions[@]}"; do
	mkdir -p "$out/$v"
	if [[ $smoke == *",$v,"* ]]; then
		smokes+=("$v")
	elif [[ $rootonly == *",$v,"* ]]; then
		roots+=("$v")
	else
		full+=("$v")
	fi
done
root_pkg="github.com/runclaim/runclaim $root"
n=${#pkgs[@]}
half=$(((n + 1) / 2))
full_rounds() { # full_rounds FROM TO: the whole runs of rounds FROM..TO-1
	local r i k p
	for ((r = $1; r < $2 && r < n; r++)); do
		for i in "${!full[@]}"; do
			k=$r
			((r < half)) && k=$(((r + i) % half))
			p=${pkgs[$k]}
			printf '%s\0%s\0%s\0\0\0' "${full[$i]}" "${p%% *}" "${p#* }"
		done
	done
}
smoke_runs_of() { # smoke_runs_of FROM TO: the smoke runs of smoke packages FROM..TO-1
	local i v p
	for ((i = $1; i < $2 && i < ${#smoke_pkgs[@]}; i++)); do
		p=${smoke_pkgs[$i]}
		for v in "${smokes[@]}" "${roots[@]}"; do
			# The -r versions run the root package whole (root_runs).
			[[ $p == "$root_pkg" && " ${roots[*]} " == *" $v "* ]] && continue
			printf '%s\0%s\0%s\0%s\0\0' "$v" "${p%% *}" "${p#* }" "${smoke_runs[$i]}"
		done
	done
}
root_runs() { # the whole runs of the root package on the -r versions
	# In two halves at once, each against a server of its own: whole, it
	# was the step's longest run by far (its serial tests and its waits on
	# leases), and the last minute of the step had the two cores half idle.
	local v i names=() halves=("" "") rp=${root_pkg%% *}
	((${#roots[@]})) || return 0
	mapfile -t names < <(cd "${root_pkg#* }" && "$out/bin/${rp//\//_}.test" -test.list '.*' | grep -E '^(Test|Fuzz|Example)')
	for i in "${!names[@]}"; do
		halves[i % 2]+="${halves[i % 2]:+|}${names[$i]}"
	done
	for v in "${roots[@]}"; do
		for i in 0 1; do
			printf '%s\0%s\0%s\0%s\0%s\0' "$v" "${root_pkg%% *}" "${root_pkg#* }" "^(${halves[$i]})\$" "half-$((i + 1))-of-2"
		done
	done
}
{
	root_runs
	full_rounds 0 3
	smoke_runs_of 0 1
	full_rounds 3 "$n"
	smoke_runs_of 1 "${#smoke_pkgs[@]}"
} | xargs -0 -n 5 -P "$jobs" bash -c 'run_one "$@"' run_one
log "ran ${#pkgs[@]} packages on ${#full[@]} versions, the root package and the others' smoke selection on ${#roots[@]}, and ${#smoke_pkgs[@]} packages' smoke selection on ${#smokes[@]}, $jobs at a time, in $((SECONDS - t)) s"

rc=0
for v in "${versions[@]}"; do
	printf '\n=== tests on PostgreSQL %s\n' "$v"
	what=$need
	[[ $smoke == *",$v,"* ]] && what=$smoke_need
	[[ $rootonly == *",$v,"* ]] && what=$smoke_need
	cat "$out/$v"/*.json | "$out/bin/testsummary" -label "PostgreSQL $v" -major "$v" -need-db "$what" -line "$out/$v.line" || rc=1
done
exit "$rc"
