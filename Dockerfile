# odf-node: slim Python 3.11, Java 17 runtime for the Spark engine, Node.js 20 for the embedded
# IPFS node (Helia; the compose file uses kubo instead), non-root user, health check on /healthz.
#
#   docker build -t odf-node .                      (podman: podman build --format docker ...)
#   docker run -d --name odf-node -e ODF_NODE_NETWORK_ADVERTISE_HOST=203.0.113.7 \
#       -p 7375:7375 -p 7374:7374 -p 4001:4001 -v odf-home:/home/odf/.local/share/odf-node odf-node
#
# ODF_NODE_NETWORK_ADVERTISE_HOST is the address or DNS name peers reach this host at; the
# daemon refuses to start without it and says so. `make test-image` builds this file and
# checks the container (tests/image/test_image.py; docs/operations.md, "Containers").

# Helia needs Node.js >= 20 (docs/ipfs.md); bookworm's own nodejs is 18 and trixie has no Java 17,
# so the Node.js runtime is copied from the official Node.js 20 image on the same Debian release.
FROM node:20-bookworm-slim AS nodejs

# ---- build stage: compilers, npm and pip live here only -----------------------------------
FROM python:3.11-slim-bookworm AS build
# fastecdsa (pinned by libp2p) has no Linux wheel on PyPI: pip compiles it, which needs gcc,
# the C library's headers and GMP's.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev libgmp-dev \
 && rm -rf /var/lib/apt/lists/*
COPY --from=nodejs /usr/local/bin/node /usr/local/bin/node
COPY --from=nodejs /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm

WORKDIR /opt/odf-node
COPY pyproject.toml constraints.txt README.md ./
COPY coordinator coordinator
COPY p2p p2p
COPY node node
COPY sim sim
COPY engine engine
COPY procutil procutil
COPY schemas schemas
COPY config config
COPY js js
COPY native native
# The same pinned versions as `make setup` (constraints.txt), without the dev extras, in a
# virtual environment the runtime stage copies whole. Installed in place (editable), as
# `make setup` does: the node finds js/ and starts `python -m engine.worker` from this tree.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir -c constraints.txt -e . \
 && (cd js && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) \
 && rm -rf /root/.npm
# The two compiled helpers `make setup` builds (docs/odf-wire-format.md, docs/logical-hash.md):
# the metadata block decoder, a CPython extension named with the venv interpreter's suffix, and
# the logical hash's stream assembly, loaded with ctypes. Built here, where the compiler is; the
# runtime stage gets them with /opt. The node falls back to Python without them, ~10x slower on
# chains, so a failed build fails the image rather than shipping it slower.
RUN mkdir -p build/native \
 && cc -O2 -shared -fPIC -o build/native/libodf_stream.so native/odf_stream.c \
 && inc=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
 && suffix=$(/opt/venv/bin/python -c 'import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])') \
 && cc -O2 -shared -fPIC -I"$inc" -o "build/native/_odf_chain$suffix" native/odf_chain.c
# One environment per pinned DataFusion release (the Makefile's DATAFUSION_VERSIONS;
# docs/engines.md), found through ODF_ENGINES_DIR. The three environments hold the same pyarrow,
# numpy and grpcio (constraints.txt): `hardlink` makes identical files (same content and mode) one
# file with several names, ~0.5 GB less image (pip gives each copy its own time, hence
# --ignore-time). Sources stay apart: each environment's .pyc records its source's time, and
# another copy's time would make Python recompile it at every start.
RUN for v in 51.0.0 41.0.0; do \
      python -m venv /opt/odf-node/engines/datafusion-$v \
   && /opt/odf-node/engines/datafusion-$v/bin/pip install --no-cache-dir -c constraints.txt \
        -r engine/requirements-datafusion.txt "datafusion==$v" || exit 1; \
    done \
 && hardlink --ignore-time --exclude '\.py$' /opt/venv /opt/odf-node/engines

# ---- runtime stage: no compiler, no npm, no pip cache ---------------------------------------
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
 && rm -rf /var/lib/apt/lists/*
COPY --from=nodejs /usr/local/bin/node /usr/local/bin/node
RUN node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'

# The home exists in the image, owned by the image's user: Docker copies a directory's owner
# and mode into a fresh named volume mounted over it (podman chowns the volume itself), so a
# new volume is writable by uid 10001 under both.
RUN useradd --create-home --uid 10001 odf \
 && mkdir -p /home/odf/.local/share/odf-node \
 && chown -R odf:odf /home/odf
# One COPY for both, so the hard links between the environments stay links.
COPY --from=build /opt /opt
WORKDIR /opt/odf-node

USER odf
ENV PATH=/opt/venv/bin:$PATH \
    ODF_NODE_HOME=/home/odf/.local/share/odf-node \
    ODF_ENGINES_DIR=/opt/odf-node/engines \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    # A container is a real deployment: listen on all interfaces of its own network namespace,
    # on fixed ports that EXPOSE names, and advertise ODF_NODE_NETWORK_ADVERTISE_HOST (given at
    # run time) with those same ports.
    ODF_NODE_NETWORK_ISOLATION=open \
    ODF_NODE_P2P_LISTEN_HOST=0.0.0.0 \
    ODF_NODE_P2P_PORT=7375 \
    ODF_NODE_HTTP_HOST=0.0.0.0 \
    ODF_NODE_HTTP_PORT=7374 \
    ODF_NODE_IPFS_SWARM_HOST=0.0.0.0 \
    ODF_NODE_IPFS_SWARM_PORT=4001
VOLUME ["/home/odf/.local/share/odf-node"]
# 7375 gossip (libp2p), 7374 Simple Transfer Protocol + /metrics, 4001 the embedded IPFS node's
# swarm (bitswap). RPC (7373) stays on loopback.
EXPOSE 7375 7374 4001

# Liveness: GET /healthz on the HTTP listener answers while the process serves (a failing check
# is worth a restart). Readiness (GET /readyz: services up, state writer keeping up, engine not
# crash-looping, >= 1 gossip peer, verify backlog bounded) is what deploy/compose.yaml checks;
# docs/operations.md. Plain Python: the slim image has no curl. podman keeps a HEALTHCHECK only
# in the Docker image format: `podman build --format docker`.
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s --retries=3 \
  CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:7374/healthz', timeout=8)"]

ENTRYPOINT ["tini", "--", "odf-node"]
CMD ["run"]
