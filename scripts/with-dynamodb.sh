#!/usr/bin/env bash
# with-dynamodb.sh CMD...: run CMD against a DynamoDB Local started for it.
#
# Fetches DynamoDB Local if needed, starts it on a free port (8765 or the next
# free one; DDB_PORT forces a port), exports
#   ONCE_TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:PORT
#   ONCE_REQUIRE_DYNAMODB=1
# runs CMD, always stops DynamoDB Local, and exits with CMD's exit code.
set -euo pipefail

if [[ $# -eq 0 ]]; then
	printf 'usage: %s CMD [ARG...]\n' "$0" >&2
	exit 2
fi

DDB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/dynamodb-local.sh
readonly DDB
readonly EX_PORT_BUSY=75
readonly FIRST_PORT=8765 PORT_TRIES=20

log() { printf 'with-dynamodb: %s\n' "$*" >&2; }

# listening PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
listening() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

bash "$DDB" fetch

port=
# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $port ]]; then
		bash "$DDB" stop "$port" || log "warning: could not stop DynamoDB Local on port $port"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_on PORT: start DynamoDB Local on PORT; 0 on success, 75 if PORT is
# taken (then it is not ours to stop), else the failure's code.
start_on() {
	port=$1
	local rc=0
	bash "$DDB" start "$port" || rc=$?
	[[ $rc -eq $EX_PORT_BUSY ]] && port=
	return "$rc"
}

if [[ -n ${DDB_PORT:-} ]]; then
	rc=0
	start_on "$DDB_PORT" || rc=$?
	if [[ $rc -ne 0 ]]; then
		[[ $rc -eq $EX_PORT_BUSY ]] && log "DDB_PORT=$DDB_PORT is in use; unset DDB_PORT to pick a free port"
		exit "$rc"
	fi
else
	candidate=$FIRST_PORT
	for ((try = 0; try < PORT_TRIES; try++, candidate++)); do
		listening "$candidate" && continue
		rc=0
		start_on "$candidate" || rc=$?
		[[ $rc -eq 0 ]] && break
		[[ $rc -eq $EX_PORT_BUSY ]] || exit "$rc"
	done
	if [[ -z $port ]]; then
		log "no free port in $FIRST_PORT-$((FIRST_PORT + PORT_TRIES - 1)); set DDB_PORT"
		exit 1
	fi
fi

export ONCE_TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:$port
export ONCE_REQUIRE_DYNAMODB=1
log "ONCE_TEST_DYNAMODB_ENDPOINT=$ONCE_TEST_DYNAMODB_ENDPOINT ONCE_REQUIRE_DYNAMODB=1"
log "running: $*"

rc=0
"$@" || rc=$?
exit "$rc"
