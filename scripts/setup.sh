#!/usr/bin/env bash
# Idempotent machine set-up for `make test` / `make demo`: system packages, a venv, the project.
# Why a script: CI runs on a fresh clone of a machine where nothing was installed by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
[ -d /usr/share/zookeeper ] || need_apt+=(zookeeper)
# promtool (`promtool check metrics` lints every daemon's /metrics in make test) ships in Debian's prometheus.
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  # The prometheus package would start a Prometheus server on :9090 (and enable it at boot); we only want
  # its promtool. A policy-rc.d answering 101 ("action forbidden") stops invoke-rc.d and deb-systemd-invoke
  # from starting any service during this install; a policy-rc.d already present (containers ship one) is kept.
  policy=/usr/sbin/policy-rc.d
  own_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# written by qjournal scripts/setup.sh for one apt-get install\nexit 101\n' \
      | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    own_policy=1
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  if [ -n "$own_policy" ]; then $SUDO rm -f "$policy"; trap - EXIT; fi
  # and in case a kept policy allowed it: stop the server and keep it from starting at the next boot
  if [[ " ${need_apt[*]} " == *" prometheus "* ]]; then
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
      $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    elif [ -x /etc/init.d/prometheus ]; then
      { $SUDO /etc/init.d/prometheus stop; $SUDO update-rc.d prometheus disable; } >/dev/null 2>&1 || true
    fi
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.qjournal-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing qjournal and its dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi
