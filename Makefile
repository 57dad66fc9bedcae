# odf-node developer entry points. `make run` and `make test` are the README's two commands:
# each one performs the whole set-up it needs on a fresh machine.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Tests that start IPFS or libp2p nodes must run in a loopback-only network namespace;
# the test command always arranges one, and the node launchers refuse to start when any
# interface other than lo is visible (socket.if_nameindex() and /proc/self/net/dev; see p2p/netguard.py).
NETNS := unshare -rn bash -c
# Pinned DataFusion releases (coordinator/transform/engines.py DATAFUSION_VERSIONS): one
# virtual environment each, since two `datafusion` versions cannot share one environment.
DATAFUSION_VERSIONS := 51.0.0 41.0.0
ENGINES := $(VENV)/engines
DF_STAMPS := $(foreach v,$(DATAFUSION_VERSIONS),$(ENGINES)/datafusion-$(v)/.installed)

.PHONY: browser nftables test-deps bench-console bench-idle-rss setup run test lint typecheck unit bench bench-datafusion bench-chain bench-hash bench-ingest bench-ingest-hostile bench-gossip bench-pull bench-verify bench-soak bench-longrun bench-follow bench-follow-urls bench-cold-verify bench-hostile bench-hostile-flood bench-query bench-evidence-flood bench-state bench-sim bench-sim-sweep bench-backup bench-network bench-nat bench-calibration bench-decode fuzz p2p-vectors test-image image-inputs clean

NATIVE_LIB := build/native/libodf_stream.so
NATIVE_CHAIN := build/native/odf_chain.built

setup: $(STAMP) $(DF_STAMPS) $(NATIVE_LIB) $(NATIVE_CHAIN)

# Optional compiled stream assembly for the logical hash (coordinator/data/native_stream.py loads it;
# without it the numpy path produces the same hashes, only slower).
$(NATIVE_LIB): native/odf_stream.c
	@mkdir -p $(@D)
	@if command -v $(CC) >/dev/null 2>&1; then \
		$(CC) -O2 -shared -fPIC -o $@ $< || echo "native/odf_stream.c did not build; the logical hash uses its numpy path"; \
	else echo "no C compiler ($(CC)): the logical hash uses its numpy path"; fi

# Optional compiled decoder of metadata blocks (coordinator/metadata/native_decode.py loads it;
# without it the Python decoder builds the same blocks, only slower): a CPython extension built
# against the venv's interpreter and named with its extension suffix (the stamp marks the build).
$(NATIVE_CHAIN): native/odf_chain.c $(STAMP)
	@mkdir -p $(@D)
	@if command -v $(CC) >/dev/null 2>&1; then \
		inc=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
		suffix=$$($(BIN)/python -c 'import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])'); \
		$(CC) -O2 -shared -fPIC -I"$$inc" -o $(@D)/_odf_chain$$suffix $< && touch $@ || \
		echo "native/odf_chain.c did not build; metadata blocks are decoded in Python"; \
	else echo "no C compiler ($(CC)): metadata blocks are decoded in Python"; fi

$(STAMP): pyproject.toml constraints.txt js/package-lock.json
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	@command -v npm >/dev/null || { echo "npm (Node.js >= 20) is required for the embedded IPFS node"; exit 1; }
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' || { echo "Node.js >= 20 is required for the embedded IPFS node (Helia)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	# The embedded IPFS node (Helia, js/helia-ipfs.mjs), installed exactly as locked.
	cd js && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $(STAMP)

# A DataFusion engine worker's environment: `datafusion==<version>` and what the worker imports.
$(ENGINES)/datafusion-%/.installed: engine/requirements-datafusion.txt constraints.txt | $(STAMP)
	test -x $(@D)/bin/python || $(PYTHON) -m venv $(@D)
	$(@D)/bin/python -m pip install --quiet -c constraints.txt -r engine/requirements-datafusion.txt 'datafusion==$*'
	touch $@

# The node on its embedded defaults, in a loopback-only network namespace (the safe default of
# [network] isolation = "loopback-only"). The CLI reaches it through <home>/rpc.sock from any
# terminal: `.venv/bin/odf-node status`. See the README for joining a real network.
run: setup
	$(NETNS) 'ip link set lo up && exec $(BIN)/odf-node run'

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check coordinator
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy coordinator p2p node sim engine

unit: setup test-deps
	$(BIN)/pytest -q

# Debian packages the tests run for real, from apt when missing (sudo when not root); nothing
# is downloaded when the tests run. Headless Chromium and its chromedriver (the same version)
# for the console's browser tests; mosquitto, the MQTT broker the Mqtt polling source tests
# start on a loopback port (tests/integration/test_ingest_mqtt.py); nftables, the NAT routers'
# masquerade rules of the multi-host test network (sim/netlab.py, in the lab's own namespaces);
# podman, runc and busybox-static, the container runtime and the image (made with `podman
# import`, no registry) of the Container polling source tests (tests/integration/test_fetch_container.py);
# gcc, the C compiler of the logical hash's stream assembly (native/odf_stream.c) and of the
# metadata block decoder (native/odf_chain.c), which also needs the interpreter's headers
# (python3-dev when the venv is Debian's python3).
test-deps:
	@missing=; \
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  missing="$$missing chromium chromium-driver"; \
	command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || missing="$$missing mosquitto"; \
	command -v nft >/dev/null || [ -x /usr/sbin/nft ] || missing="$$missing nftables"; \
	command -v podman >/dev/null || missing="$$missing podman"; \
	command -v runc >/dev/null || [ -x /usr/sbin/runc ] || missing="$$missing runc"; \
	[ -x /bin/busybox ] || missing="$$missing busybox-static"; \
	command -v $(CC) >/dev/null || missing="$$missing gcc libc6-dev"; \
	[ ! -x $(BIN)/python ] || $(BIN)/python -c 'import os, sysconfig; os.stat(sysconfig.get_paths()["include"] + "/Python.h")' 2>/dev/null || \
	  missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    $$SUDO apt-get install -y -qq --no-install-recommends $$missing; fi
	# The logical hash's compiled stream assembly (tests/unit/test_logical_hash_native.py checks
	# it), built here too when `setup` ran before a C compiler was installed above.
	[ -f $(NATIVE_LIB) ] || $(MAKE) --no-print-directory $(NATIVE_LIB)
	[ -f $(NATIVE_CHAIN) ] || $(MAKE) --no-print-directory $(NATIVE_CHAIN)
	# anvil (Foundry's local Ethereum node, the EthereumLogs source tests: tests/integration/
	# test_fetch_evm.py) from npm, exactly as locked in tests/evm (its binary is a platform package).
	[ -x tests/evm/node_modules/.bin/anvil ] || \
	  (cd tests/evm && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)

# Kept for the targets (and habits) that name them.
browser: test-deps

nftables: test-deps

# Two workers (TEST_WORKERS=N to change; 1 runs in one process), each taking whole test files,
# so a file's module fixtures (daemons, Spark sessions) stay in one process; the 30 slowest
# tests are listed at the end.
TEST_WORKERS ?= 2
test: lint typecheck test-deps
	$(NETNS) 'ip link set lo up && exec $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30'

# The fuzz suite (tests/fuzz) with random seeds and 50x the examples `make test` runs.
fuzz: setup
	$(NETNS) 'ip link set lo up && ODF_FUZZ_PROFILE=long exec $(BIN)/pytest -q tests/fuzz'

# Benchmarks are scripts, not timed tests: each prints medians and ratios measured in one run.
bench: bench-chain bench-hash bench-ingest bench-gossip bench-pull bench-verify

bench-chain: setup
	$(BIN)/python tests/bench/bench_chain.py

# Hostile blocks and schemas (shared FlatBuffers offsets) up to the 16 MiB block cap: time to
# reject and extra peak RSS per shape and size, each case in a fresh process.
bench-decode: setup
	$(BIN)/python tests/bench/bench_decode.py

bench-hash: setup
	$(BIN)/python tests/bench/bench_logical_hash.py

bench-ingest: setup
	$(BIN)/python tests/bench/bench_ingest.py

# Hostile ingest inputs at 1 GiB (sparse, one line, one string, many rows), the column curve
# (1,250 ... 20,000 columns) and dataset.ingest in a real daemon (loopback-only namespace).
bench-ingest-hostile: setup
	$(BIN)/python tests/bench/bench_ingest_hostile.py --daemon

# Starts 20 real libp2p node processes; isolates itself in a loopback-only namespace.
bench-gossip: setup
	$(BIN)/python tests/bench/bench_gossip.py

bench-pull: setup
	$(NETNS) 'ip link set lo up && exec $(BIN)/python tests/bench/bench_pull.py'

# Verify of a 100-block derivative history with the warm engine worker vs direct Spark SQL.
bench-verify: setup
	$(NETNS) 'ip link set lo up && exec $(BIN)/python tests/bench/bench_verify.py'

# Replay of a 100-block DataFusion derivative vs direct DataFusion SQL and vs the Spark engine.
bench-datafusion: setup
	$(NETNS) 'ip link set lo up && exec $(BIN)/python tests/bench/bench_datafusion.py'

# The network's figure on real daemons (issue 28): 8 hosts of the private lab (sim/netlab.py),
# 1 owner, 3 verifying attesters, 4 light quorum subscribers, 10 heads every 20 s and one forged
# head; owner commit -> trusted at every light node, forged -> disputed (isolates itself).
bench-network: setup
	$(BIN)/python tests/bench/bench_network.py

# Owners behind the lab's NAT routers (endpoint-independent, symmetric) reached through a relay:
# reservation, subscribe/commit -> verified, data path, relay restart (docs/nat.md).
bench-nat: setup nftables
	$(BIN)/python tests/bench/bench_nat.py

# The simulator against real daemons (issue 43): the internet scenario at lab size (24 daemons,
# 14 behind two NAT routers, a relay) on the lab and in the simulator with the lab's measured
# timings, 5 seeds; discovery and publish -> trusted p50/p99 and |sim - lab| / lab.
bench-calibration: setup nftables
	$(BIN)/python tests/bench/bench_calibration.py --json sim-results/calibration.json

# Simulator scale: 1,000 and 10,000 nodes x 1 h virtual, one process pinned to one core.
bench-sim: setup
	$(BIN)/python tests/bench/bench_sim.py

# The trust-policy sweep as Spark jobs, one simulation per task (sim/spark_sweep.py): 4 policies x
# malicious 10/30 % x 0/2/3 colluders inside the trusted set x 10 seeds = 240 simulations on
# local[*]; table and plot in sim-results/spark-sweep/. A cluster: see README (Simulations).
bench-sim-sweep: setup
	$(NETNS) 'ip link set lo up && exec $(BIN)/odf-node sim spark-sweep --master "local[*]" --out sim-results/spark-sweep'

# Seconds from `subscribe` to `verified` on a fresh follower: Spark cold/warm, DataFusion cold
# (issue 44 targets: 30 s, 10 s, 5 s).
bench-cold-verify: setup
	$(NETNS) 'ip link set lo up && exec $(BIN)/python tests/bench/bench_cold_verify.py'

# Two daemons: an owner appends to 200 datasets 5 times as fast as it can; the subscriber
# follows all of them (time until every subscription is at the owner's head; isolates itself).
bench-follow: setup
	$(BIN)/python tests/bench/bench_follow.py

# One daemon following 1,000 datasets by URL from one odf-node serve-http (poll interval 10 s):
# node.status p50/p99 every 100 ms during the polls, its connections to the source over time,
# requests and bytes per idle poll counted at the server (docs/follow.md; isolates itself).
bench-follow-urls: setup
	$(BIN)/python tests/bench/bench_follow_urls.py

# One daemon, 1,000 subscriptions, 50 announcements/s for 10 minutes (isolates itself):
# node.status latency from a separate process, event-loop lag, outcomes, RSS, CPU.
bench-soak: setup
	$(BIN)/python tests/bench/bench_soak.py

# A compressed month (>= 1 h; isolates itself): two daemons publishing to and following each
# other, subscriptions rotating, peers joining and leaving, a backup and a restart in the middle;
# RSS slope (<= 2 MB/h after warm-up), open fds, state.db size, lost work items. Shorter:
# make bench-longrun LONGRUN_ARGS="--minutes 10".
bench-longrun: setup
	$(BIN)/python tests/bench/bench_longrun.py $(LONGRUN_ARGS)

# One daemon fed every hostile case (RPC, pulls, gossip) while node.status is sampled every
# 100 ms: must answer within 250 ms throughout and never restart (isolates itself); then the
# dispute flood of bench-evidence-flood, the trust driver's cost per dispute (bench_dispute_cost.py) and
# bench-hostile-flood.
# Reading verified data: the query engine, /query and Flight SQL against the raw operation on
# the same parquet files (tests/bench/bench_query.py; ratios, medians and the machine's load).
bench-query: setup
	$(NETNS) 'ip link set lo up && exec $(BIN)/python tests/bench/bench_query.py'

bench-hostile: setup
	$(BIN)/python tests/bench/bench_hostile.py
	$(BIN)/python tests/bench/bench_hostile_inputs.py
	$(BIN)/python tests/bench/bench_evidence_flood.py
	$(BIN)/python tests/bench/bench_dispute_cost.py 2000
	$(BIN)/python tests/bench/bench_hostile_flood.py

# Issue 39's acceptance shape on real daemons: 2,000 disputes from fresh keys, strangers' key
# rotations and a trusted attester's dispute of a forged head, sent by eight libp2p hosts to a
# light node (disputes/s accepted, node.status p50/p99, state.db bytes before/after).
bench-hostile-flood: setup
	$(BIN)/python tests/bench/bench_hostile_flood.py

# state.db growth and forwarding under 20,000 disputes from one key and 2,000 from fresh keys,
# without caps and with the default [storage] caps and [p2p] signer budget (docs/operations.md).
bench-evidence-flood: setup
	$(BIN)/python tests/bench/bench_evidence_flood.py

# The console's datasets page with 1,000 followed datasets in headless chromium (median load
# time) and the daemon's idle RSS (isolates itself).
bench-console: setup browser
	$(BIN)/python tests/bench/bench_console.py

# Idle RSS of a real daemon and of its libp2p process (median of 3 fresh starts, IPFS off).
bench-idle-rss: setup
	unshare -rn bash -c 'ip link set lo up && exec $(BIN)/python tests/bench/bench_idle_rss.py'

# Backup (odf-node backup, with and without --datasets) of a home following 1,000 datasets beside
# its running daemon, and the restore of the full archive (docs/backup.md; bound: < 10 s).
bench-backup: setup
	$(NETNS) 'ip link set lo up && exec $(BIN)/python tests/bench/bench_backup.py'

# Latency of the daemon's SQLite state operations (durable commits).
bench-state: setup
	$(BIN)/python -m node.state.bench

# Regenerates the frozen p2p wire-format vectors (only when the format version changes).
p2p-vectors: setup
	$(BIN)/python -m p2p.vectors > schemas/p2p_vectors.json

# The container image (Dockerfile), built and run by a real container runtime: podman, runc and
# debootstrap from Debian's packages; stand-ins for the base images made from the package
# registries (tests/image/standins.sh, no image registry needed); the image built in Docker's
# format (tests/image/build.sh); then tests/image/check_image.py runs its containers in a
# private network namespace with only `lo`. podman reads tests/image/containers.conf (runc,
# cgroupfs, no default ulimits), never the machine's own. On success the digest of the image's
# inputs is recorded in tests/image/tested-inputs.sha256; .ci/run runs this target when the newest
# commit changed those inputs or they differ from the recorded digest.
IMAGE_ENV := CONTAINERS_CONF=$(CURDIR)/tests/image/containers.conf
IMAGE_INPUTS := Dockerfile .dockerignore constraints.txt pyproject.toml js/package.json \
	js/package-lock.json engine/requirements-datafusion.txt tests/image/standins.sh \
	tests/image/build.sh tests/image/check_image.py tests/image/containers.conf \
	tests/image/pip.conf tests/image/npmrc native/odf_stream.c native/odf_chain.c

test-image: setup
	@missing=; for c in podman runc debootstrap; do command -v $$c >/dev/null || \
	  [ -x /usr/sbin/$$c ] || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    $$SUDO apt-get install -y -qq --no-install-recommends podman runc debootstrap; fi
	$(IMAGE_ENV) bash tests/image/standins.sh
	$(IMAGE_ENV) bash tests/image/build.sh
	$(IMAGE_ENV) unshare -n bash -c 'ip link set lo up && exec $(BIN)/pytest -q -p no:cacheprovider tests/image/check_image.py'
	$(MAKE) -s image-inputs > tests/image/tested-inputs.sha256

# The digest of the image's inputs (what test-image records and .ci/run compares).
image-inputs:
	@cat $(IMAGE_INPUTS) | sha256sum | cut -d' ' -f1

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache js/node_modules
