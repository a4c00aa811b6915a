#!/usr/bin/env bash
# Idempotent set-up of the peers benchmark (`make bench-peers`): etcd from Debian and the Python clients of etcd
# and ZooKeeper, and uvloop (the `fast` extra: the daemons run on it, qjournal.event-loop=auto). Why a script of
# its own: `make test` must not install benchmark-only packages.
# ZooKeeper itself comes from scripts/setup.sh (the project's own set-up, which this runs first).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
if ! command -v etcd >/dev/null 2>&1; then
  echo "bench-peers: installing etcd-server"
  bash scripts/apt-install.sh etcd-server
fi
stamp=.venv/.qjournal-peers-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "bench-peers: installing the etcd and ZooKeeper clients and uvloop into .venv"
  .venv/bin/python -m pip install -q -e '.[dev,peers,fast]'
  touch "$stamp"
fi
