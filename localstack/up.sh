#!/usr/bin/env bash
# Starts LocalStack (docker-compose.yml beside this script) on 127.0.0.1:4566
# and waits until it is ready. Its ready hook redeploys the stack that
# localstack/deploy.sh last rendered, if any.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! docker compose version >/dev/null 2>&1; then
  echo "localstack/up.sh: needs Docker with the compose plugin (docker compose)" >&2
  exit 1
fi
# Mounted into the container; created here so that it belongs to you, not root.
mkdir -p "$here/.artifacts"

docker compose -f "$here/docker-compose.yml" up --detach --wait --wait-timeout 900

status=$(docker compose -f "$here/docker-compose.yml" exec -T localstack \
  curl -fsS http://localhost:4566/_localstack/init/ready)
if grep -q '"state": *"ERROR"' <<<"$status"; then
  echo "localstack/up.sh: the ready hook failed; see: docker compose -f $here/docker-compose.yml logs localstack" >&2
  exit 1
fi
echo "LocalStack is ready on http://localhost:4566"
