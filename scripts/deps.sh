#!/bin/sh
# Installs the Debian packages rankplan needs when they are missing.
# As root it runs apt-get; otherwise it prints the command to run.
set -eu
missing=""
for p in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "deps: installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
  echo "deps: missing Debian packages:$missing" >&2
  echo "deps: run as root: apt-get install$missing" >&2
  exit 2
fi
