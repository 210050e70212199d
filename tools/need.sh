#!/bin/sh
# Installs, from Debian's archive, the packages that provide the given
# commands when those commands are missing. Each argument is command:package.
#   tools/need.sh shellcheck:shellcheck rpm:rpm
set -eu
missing=""
for pair in "$@"; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || missing="$missing ${pair#*:}"
done
[ -z "$missing" ] && exit 0
echo "installing from Debian:$missing"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086 # word splitting of the package list is wanted
$sudo apt-get install -y -q --no-install-recommends $missing ||
	{ $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends $missing; }
