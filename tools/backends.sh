#!/bin/sh
# Puts the Prometheus and VictoriaMetrics servers that the alert blocker's
# tests start (daemon/block) in DIR/bin, taken from Debian's packages
# without installing them: installed, their services would start and
# listen on every interface of the machine.
#   tools/backends.sh DIR
set -eu
dir=$1
[ -x "$dir/bin/prometheus" ] && [ -x "$dir/bin/victoria-metrics" ] && exit 0
command -v apt-get >/dev/null 2>&1 || { echo "tools/backends.sh: needs apt-get (Debian)" >&2; exit 1; }
echo "fetching prometheus and victoria-metrics from Debian (unpacked in $dir, not installed)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
# apt-get download as root writes as the _apt user: the directory is theirs.
chmod 0777 "$tmp"
(cd "$tmp" && apt-get download -q prometheus victoria-metrics) ||
	{ $sudo apt-get update -q && (cd "$tmp" && apt-get download -q prometheus victoria-metrics); }
for deb in "$tmp"/*.deb; do
	dpkg-deb -x "$deb" "$tmp/root"
done
mkdir -p "$dir/bin"
cp "$tmp/root/usr/bin/prometheus" "$tmp/root/usr/bin/victoria-metrics" "$dir/bin/"
