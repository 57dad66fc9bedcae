#!/usr/bin/env bash
# Builds the Dockerfile with podman for `make test-image` as tests/image/test_image.py checks
# it: Docker's image format (podman's default OCI format drops HEALTHCHECK), base images never
# pulled (tests/image/standins.sh made them), and the build's RUN steps on the host's network,
# which reaches the package registries only. Where the registries are reached through a proxy
# that re-signs TLS, the host's CA bundle is mounted into each RUN step for pip, npm and apt
# (a build-time mount: it is never part of an image layer).
set -euo pipefail
cd "$(dirname "$0")/../.."
TAG=${ODF_IMAGE_TAG:-localhost/odf-node:test}
mounts=()
ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
if [ -f "$ca" ]; then
    mounts+=(-v "$ca:/etc/ssl/certs/ca-certificates.crt:ro"
             -v "$PWD/tests/image/pip.conf:/etc/pip.conf:ro"
             -v "$PWD/tests/image/npmrc:/usr/local/etc/npmrc:ro")
fi
start=$(date +%s)
podman build --format docker --pull=never --network host "${mounts[@]}" -t "$TAG" . >&2
echo "image: $TAG built in $(( $(date +%s) - start )) s, $(podman image inspect --format '{{.Size}}' "$TAG") bytes" >&2
