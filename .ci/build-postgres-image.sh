#!/usr/bin/env bash
# Builds the local PostgreSQL test image runclaim.local/postgres:15.
#
# No container registry is needed: the image is assembled FROM scratch out of
# this Debian host's own postgresql-15 binaries, the shared libraries they
# link against (found with ldd, dynamic loader included), PostgreSQL's share
# directory, the system time zone database, a C.UTF-8 locale and
# busybox-static for /bin/sh and the usual shell tools.
#
# The entrypoint follows the contract of the official postgres image
# (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, POSTGRES_INITDB_ARGS,
# POSTGRES_HOST_AUTH_METHOD, /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz,
# extra "-c name=value" arguments passed on to postgres), which is what the
# testcontainers-go postgres module relies on.
#
# Usage: .ci/build-postgres-image.sh [--force]
#   Does nothing if the image already exists, unless --force is given.
#   IMAGE=name:tag overrides the tag.
#   Needs: docker (with a running daemon), postgresql-15, busybox-static.
set -euo pipefail

IMAGE="${IMAGE:-runclaim.local/postgres:15}"
PGVER=15
PGBIN="/usr/lib/postgresql/$PGVER/bin"
PGLIB="/usr/lib/postgresql/$PGVER/lib"
PGSHARE="/usr/share/postgresql/$PGVER"
BUSYBOX=/bin/busybox

log() { printf 'build-postgres-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

force=0
case "${1:-}" in
--force) force=1 ;;
"") ;;
*) die "unknown argument: $1 (usage: $0 [--force])" ;;
esac

if [[ $force == 0 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
	log "image $IMAGE already exists; nothing to do (use --force to rebuild)"
	exit 0
fi

[[ -x $PGBIN/postgres ]] || die "$PGBIN/postgres not found (apt-get install postgresql-$PGVER)"
[[ -d $PGSHARE ]] || die "$PGSHARE not found (apt-get install postgresql-$PGVER)"
[[ -d /usr/share/zoneinfo ]] || die "/usr/share/zoneinfo not found (apt-get install tzdata)"
is_static() { [[ "$(LC_ALL=C ldd "$1" 2>&1 || true)" == *'not a dynamic executable'* ]]; }
if ! [[ -x $BUSYBOX ]] || ! is_static "$BUSYBOX"; then
	die "$BUSYBOX is missing or not statically linked (apt-get install busybox-static)"
fi

start=$SECONDS
ctx="$(mktemp -d -t pgimage.XXXXXX)"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
log "assembling build context in $ctx"

# Merged-/usr layout, as on Debian 12.
mkdir -p "$root"/usr/bin "$root"/usr/lib/x86_64-linux-gnu "$root"/usr/lib64 \
	"$root"/etc "$root"/tmp "$root"/var/run/postgresql "$ctx"/pghome/data \
	"$root"/docker-entrypoint-initdb.d "$root"/usr/local/bin "$root"/proc "$root"/sys "$root"/dev
ln -s usr/bin "$root/bin"
ln -s usr/bin "$root/sbin"
ln -s bin "$root/usr/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
chmod 1777 "$root/tmp"
chmod 3777 "$root/var/run/postgresql"
chmod 700 "$ctx/pghome/data"

# busybox and its applets.
cp "$BUSYBOX" "$root/usr/bin/busybox"
n=0
for applet in $("$BUSYBOX" --list); do
	[[ -e $root/usr/bin/$applet ]] || { ln -s busybox "$root/usr/bin/$applet"; n=$((n + 1)); }
done
log "busybox: $n applets"

# PostgreSQL binaries, modules (without the LLVM JIT, whose libLLVM is huge;
# the server then runs with JIT unavailable) and the share directory.
mkdir -p "$root$PGBIN" "$root$PGLIB" "$(dirname "$root$PGSHARE")"
cp -a "$PGBIN"/. "$root$PGBIN"/
find "$PGLIB" -maxdepth 1 -name '*.so' ! -name 'llvmjit*' -exec cp -a {} "$root$PGLIB"/ \;
cp -a "$PGSHARE" "$root$PGSHARE"
rm -rf "$root$PGSHARE/man"
mkdir -p "$root/usr/share"
cp -a /usr/share/zoneinfo "$root/usr/share/zoneinfo"
if [[ -d /usr/lib/locale/C.utf8 ]]; then
	mkdir -p "$root/usr/lib/locale"
	cp -a /usr/lib/locale/C.utf8 "$root/usr/lib/locale/C.utf8"
fi

# Shared libraries: everything the binaries and modules link against.
mapfile -t objs < <(find "$root$PGBIN" "$root$PGLIB" -type f)
libs="$(for o in "${objs[@]}"; do LC_ALL=C ldd "${o#"$root"}" 2>/dev/null || true; done |
	awk '/not found/ { print "MISSING " $1; next } { for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | sort -u)"
if grep -q '^MISSING' <<<"$libs"; then
	grep '^MISSING' <<<"$libs" >&2
	die "unresolved shared libraries"
fi
nlibs=0
while read -r lib; do
	[[ -n $lib ]] || continue
	real="$(readlink -f "$lib")"
	base="$(basename "$lib")"
	if [[ $base == ld-linux-* ]]; then
		cp "$real" "$root/usr/lib/x86_64-linux-gnu/$base"
		ln -sf "../lib/x86_64-linux-gnu/$base" "$root/usr/lib64/$base"
	else
		cp "$real" "$root/usr/lib/x86_64-linux-gnu/$base"
	fi
	nlibs=$((nlibs + 1))
done <<<"$libs"
log "shared libraries: $nlibs"
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

cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
COPY --chown=999:999 pghome/ /var/lib/postgresql/
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin \
    LANG=C.UTF-8 \
    TZ=Etc/UTC \
    PGDATA=/var/lib/postgresql/data
LABEL org.opencontainers.image.description="PostgreSQL 15 for runclaim tests, built from the host's Debian packages"
ENTRYPOINT ["docker-entrypoint.sh"]
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
DOCKERFILE

old_id="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
log "building $IMAGE (context $(du -sh "$ctx" | cut -f1))"
# The legacy builder is enough for a single COPY and needs no buildx plugin.
if ! DOCKER_BUILDKIT=0 docker build --quiet -t "$IMAGE" "$ctx" >"$ctx/build.log" 2>&1; then
	cat "$ctx/build.log" >&2
	die "docker build of $IMAGE failed"
fi
size="$(docker image inspect -f '{{.Size}}' "$IMAGE")"
if [[ -n $old_id && $old_id != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]]; then
	# The image it replaces, unless a container still uses it.
	docker image rm "$old_id" >/dev/null 2>&1 || true
fi
log "built $IMAGE: $((size / 1000000)) MB in $((SECONDS - start)) s"
