# odf-node: slim Python 3.11, Java 17 runtime for the Spark engine, Node.js 20 for the embedded
# IPFS node (Helia; the compose file uses kubo instead), non-root user, health check on /healthz.
#
#   docker build -t odf-node .
#   docker run -v odf-home:/home/odf/.local/share/odf-node -p 7375:7375 odf-node

# Helia needs Node.js >= 20 (docs/ipfs.md); bookworm's own nodejs is 18 and trixie has no Java 17,
# so the Node.js runtime is copied from the official Node.js 20 image on the same Debian release.
FROM node:20-bookworm-slim AS nodejs

FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
 && rm -rf /var/lib/apt/lists/*
COPY --from=nodejs /usr/local/bin/node /usr/local/bin/node
COPY --from=nodejs /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'

RUN useradd --create-home --uid 10001 odf
WORKDIR /opt/odf-node
COPY pyproject.toml constraints.txt README.md ./
COPY coordinator coordinator
COPY p2p p2p
COPY node node
COPY sim sim
COPY engine engine
COPY schemas schemas
COPY config config
COPY js js
# The same pinned versions as `make setup` (constraints.txt), without the dev extras.
RUN pip install --no-cache-dir -c constraints.txt . \
 && (cd js && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
# One environment per pinned DataFusion release (the Makefile's DATAFUSION_VERSIONS;
# docs/engines.md), found through ODF_ENGINES_DIR.
RUN for v in 51.0.0 41.0.0; do \
      python -m venv /opt/odf-node/engines/datafusion-$v \
   && /opt/odf-node/engines/datafusion-$v/bin/pip install --no-cache-dir -c constraints.txt \
        -r engine/requirements-datafusion.txt "datafusion==$v" || exit 1; \
    done

USER odf
ENV ODF_NODE_HOME=/home/odf/.local/share/odf-node \
    ODF_ENGINES_DIR=/opt/odf-node/engines \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    # A container is a real deployment: listen on all interfaces of its own network namespace.
    ODF_NODE_NETWORK_ISOLATION=open \
    ODF_NODE_P2P_LISTEN_HOST=0.0.0.0 \
    ODF_NODE_HTTP_HOST=0.0.0.0
VOLUME ["/home/odf/.local/share/odf-node"]
# 7375 gossip (libp2p), 7374 Simple Transfer Protocol + /metrics. RPC (7373) stays on loopback.
EXPOSE 7375 7374

# Liveness: GET /healthz on the HTTP listener answers while the process serves (a failing check
# is worth a restart). Readiness (GET /readyz: services up, state writer keeping up, engine not
# crash-looping, >= 1 gossip peer, verify backlog bounded) is what deploy/compose.yaml checks;
# docs/operations.md. Plain Python: the slim image has no curl.
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s --retries=3 \
  CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:7374/healthz', timeout=8)"]

ENTRYPOINT ["tini", "--", "odf-node"]
CMD ["run"]
