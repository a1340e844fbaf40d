#!/usr/bin/env bash
# Builds every function for the host's architecture, renders the template for
# LocalStack (localstack/render) into localstack/.artifacts and deploys it
# with the ready hook, starting LocalStack first if it is not running.
# Needs Go and Docker; not the SAM CLI.
#
# LOCALSTACK_LAMBDA_ARCH=arm64|x86_64 overrides the architecture (LocalStack
# runs functions in containers of the host's architecture).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
compose=(docker compose -f "$here/docker-compose.yml")

case "${LOCALSTACK_LAMBDA_ARCH:-$(uname -m)}" in
  x86_64 | amd64) arch=x86_64 ;;
  arm64 | aarch64) arch=arm64 ;;
  *) echo "localstack/deploy.sh: unsupported architecture $(uname -m); set LOCALSTACK_LAMBDA_ARCH" >&2; exit 1 ;;
esac

mkdir -p "$here/.artifacts"
(cd "$repo" && go run ./localstack/render -arch "$arch" -out "$here/.artifacts")

if "${compose[@]}" ps --status running --services 2>/dev/null | grep -qx localstack; then
  "${compose[@]}" exec -T localstack bash /etc/localstack/init/ready.d/10-deploy-once.sh
else
  # The ready hook deploys what was just rendered.
  "$here/up.sh"
  "${compose[@]}" logs --no-log-prefix localstack | grep '^once: ' || true
fi
