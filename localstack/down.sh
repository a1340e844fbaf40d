#!/usr/bin/env bash
# Stops LocalStack and removes its container and network. LocalStack keeps no
# state, so this forgets the stack too; localstack/.artifacts stays, and the
# next localstack/up.sh redeploys it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
docker compose -f "$here/docker-compose.yml" down --remove-orphans
