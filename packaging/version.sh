#!/bin/sh
# Prints the version of this build, from git: the tag (v1.2.3) if HEAD is
# tagged; later commits sort after it (1.2.3+4.gabcdef0); with no tag at
# all, a development version that sorts before 0.1.0 and rises with each
# commit (0.1.0-dev.42+gabcdef0). Both are SemVer, which nfpm turns into
# valid deb and rpm versions.
set -eu
if desc=$(git describe --tags --match 'v[0-9]*' 2>/dev/null); then
	echo "$desc" | sed -E 's/^v//; s/-([0-9]+)-g([0-9a-f]+)$/+\1.g\2/'
elif count=$(git rev-list --count HEAD 2>/dev/null); then
	echo "0.1.0-dev.${count}+g$(git rev-parse --short=7 HEAD)"
else
	echo "0.1.0-dev.0+unknown"
fi
