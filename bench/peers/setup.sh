#!/usr/bin/env bash
# Idempotent set-up of the peers benchmark (`make bench-peers`): etcd from Debian and the Python clients of etcd
# and ZooKeeper. Why a script of its own: `make test` must not install benchmark-only packages.
# ZooKeeper itself comes from scripts/setup.sh (the project's own set-up, which this runs first).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
if ! command -v etcd >/dev/null 2>&1; then
  echo "bench-peers: installing etcd-server"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  # keep the package's init script from starting an etcd that would hold port 2379 (policy-rc.d: 101 = forbidden);
  # a policy-rc.d already there (Docker images ship one) is the machine's own and stays
  made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  rc=0
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    etcd-server >/dev/null || rc=$?
  [ -n "$made_policy" ] && $SUDO rm -f /usr/sbin/policy-rc.d
  [ "$rc" -eq 0 ] || exit "$rc"
fi
stamp=.venv/.qjournal-peers-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "bench-peers: installing the etcd and ZooKeeper clients into .venv"
  .venv/bin/python -m pip install -q -e '.[dev,peers]'
  touch "$stamp"
fi
