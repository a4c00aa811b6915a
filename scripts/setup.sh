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
# sshfence's tests run a real OpenSSH server on loopback (installed, never started as a service) and fuser.
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v fuser >/dev/null 2>&1 || need_apt+=(psmisc)
# the hosts' clock and disk faults (issue 28): libfaketime moves a daemon's wall clock, libfiu fails its syscalls;
# gcc builds the shim that keeps libfaketime off the monotonic sleeps (scripts/faketime-shim.c)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || [ -n "$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null)" ] \
  || need_apt+=(faketime)
command -v fiu-run >/dev/null 2>&1 || need_apt+=(fiu-utils)
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
# the NameNode web UI's tests run in a real browser: Debian's headless chromium, driven by Playwright
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${need_apt[*]}"
  bash scripts/apt-install.sh "${need_apt[@]}"
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
  .venv/bin/python -m pip install -q -e '.[dev,pipeline]'
  touch "$stamp"
fi
shim=.venv/lib/qjournal-faketime-shim.so
if [ ! -f "$shim" ] || [ scripts/faketime-shim.c -nt "$shim" ]; then
  echo "setup: building the clock-fault shim $shim"
  gcc -shared -fPIC -O2 -Wall -o "$shim" scripts/faketime-shim.c -ldl
fi
