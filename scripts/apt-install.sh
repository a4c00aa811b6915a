#!/usr/bin/env bash
# Install Debian packages without starting their services: `scripts/apt-install.sh PACKAGE...`.
# Why one script: the project's set-up (promtool from `prometheus`) and the peers benchmark (`etcd-server`) both
# install packages whose maintainer scripts would start a server holding a port the tests or benchmarks use.
# A policy-rc.d answering 101 ("action forbidden") stops invoke-rc.d and deb-systemd-invoke from starting any
# service during the install; a policy-rc.d already present (containers ship one) is the machine's own and stays.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 PACKAGE..." >&2; exit 2; }
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
policy=/usr/sbin/policy-rc.d
own_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# written by qjournal scripts/apt-install.sh for one apt-get install\nexit 101\n' \
    | $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  own_policy=1
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
if [ -n "$own_policy" ]; then $SUDO rm -f "$policy"; trap - EXIT; fi
# in case a kept policy allowed a start: stop the servers and keep them from starting at the next boot
for pkg_svc in prometheus:prometheus etcd-server:etcd openssh-server:ssh; do
  pkg=${pkg_svc%%:*}; svc=${pkg_svc#*:}
  if [[ " $* " == *" $pkg "* ]]; then
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
      $SUDO systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
    elif [ -x "/etc/init.d/$svc" ]; then
      { $SUDO "/etc/init.d/$svc" stop; $SUDO update-rc.d "$svc" disable; } >/dev/null 2>&1 || true
    fi
  fi
done
