#!/bin/bash
# make demo: builds the demo on the cluster harness (test/cluster/demo) and
# runs it with the given flags. The first build on a machine compiles
# k8s.io/kubernetes; it says so and shows its progress instead of sitting
# silent.
set -euo pipefail
cd "$(dirname "$0")/../test/cluster"
# The same settings as `make test-integration`, so that both share one
# build cache.
export CGO_ENABLED=1
go="${GO:-go}"
out=../../bin/demo
mkdir -p ../../bin
echo "Checking the build cache..."
if [ "$("$go" list -f '{{.Stale}}' ./demo)" = true ]; then
	total=$("$go" list -deps ./demo | wc -l)
	echo "Building the demo. If this is the first build on this machine it compiles"
	echo "Kubernetes' API server: about 20 minutes and 3 GB of memory on 2 cores."
	echo "Later builds take seconds."
	# On a terminal the count redraws one line; elsewhere (a log, CI) it
	# prints a plain line every 100 packages.
	tty=0
	if [ -t 1 ]; then tty=1; fi
	"$go" build -v -o "$out" ./demo 2>&1 | awk -v total="$total" -v tty="$tty" '
		/^#|:[0-9]+:/ { print; next }   # compiler messages pass through
		{ n++
		  if (tty) { printf "\r  %4d of at most %d packages compiled  %-48.48s", n, total, $0; fflush() }
		  else if (n % 100 == 0) { printf "  %d of at most %d packages compiled\n", n, total; fflush() } }
		END { if (n && tty) print ""; else if (n) printf "  %d packages compiled\n", n }'
else
	"$go" build -o "$out" ./demo
fi
exec "$out" "$@"
