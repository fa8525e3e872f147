#!/usr/bin/env bash
# Builds kvp2p's container image from this checkout, in one command and
# without a container daemon or a registry: a static binary (CGO_ENABLED=0)
# on an empty base, run as uid 65532, entrypoint /kvp2p, default command
# `serve`, ports 7600 (peers) and 9464 (metrics). Writes to dist/:
#
#   kvp2p-VERSION-ARCH.oci.tar   an OCI archive: docker load -i FILE,
#                                podman load -i FILE, or
#                                skopeo copy oci-archive:FILE docker://REPO:VERSION
#   kvp2p-VERSION-oci/           the same as an OCI image layout directory
#
# VERSION is kvp2p.Version (version.go). Environment: IMAGE_REPO (default
# ghcr.io/kvp2p/kvp2p, the name deploy/kubernetes uses), GOARCH, DIST (the
# output directory), SOURCE_DATE_EPOCH (the image's timestamps; default 0,
# so the same sources give the same digests). tools/ociimage's
# TestBuildImageScript runs this script and checks what it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
dist=${DIST:-dist}
repo=${IMAGE_REPO:-ghcr.io/kvp2p/kvp2p}
arch=${GOARCH:-$(go env GOARCH)}
version=$(awk -F'"' '/^const Version = "/ {print $2}' version.go)
if [ -z "$version" ]; then echo "build-image: no Version in version.go" >&2; exit 1; fi
mkdir -p "$dist"
bin="$dist/kvp2p-linux-$arch"
CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$bin" ./cmd/kvp2p
layout="$dist/kvp2p-$version-oci"
archive="$dist/kvp2p-$version-$arch.oci.tar"
rm -rf "$layout" "$archive"
go run ./tools/ociimage -binary "$bin" -repo "$repo" -version "$version" -arch "$arch" -out "$layout" -archive "$archive"
echo "$repo:$version ($arch): $archive"
