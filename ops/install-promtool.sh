#!/usr/bin/env bash
# Put Prometheus's own rule/config checker, promtool, into a directory (default: the active venv's
# bin/) for the tests in tests/deploy. It comes from Debian's `prometheus` package, unpacked rather
# than installed, so no Prometheus server or service is set up on the machine.
#   bash ops/install-promtool.sh [DEST_DIR]
set -euo pipefail
dest="${1:-${VIRTUAL_ENV:?give DEST_DIR or activate a virtualenv}/bin}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
if [ -x "$dest/promtool" ] && "$dest/promtool" --version >/dev/null 2>&1; then
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get download prometheus >/dev/null 2>&1; then
  apt-get update -qq >/dev/null
  apt-get download prometheus >/dev/null
fi
dpkg-deb -x prometheus_*.deb root
install -m 0755 root/usr/bin/promtool "$dest/promtool"
"$dest/promtool" --version 2>&1 | head -n 1
