# The two commands of the README — `make demo` and `make test` — start from a fresh machine: both set up
# first, idempotently (Debian packages, the .venv, the Kubernetes binaries); `make test` builds the binaries
# beside lint and the unit tests (scripts/test).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
UV_VERSION := 0.13.8
UV := $(PYTHON) -m uv
VENV := .venv
LIQOCTL := $(VENV)/bin/liqoctl
APT_PACKAGES := ca-certificates procps iproute2 util-linux mount runc containernetworking-plugins nftables iptables mmdebstrap dnsmasq-base
PYTEST_ARGS ?=
# Lanes: pytest-xdist workers, each given whole modules (their clusters start once per lane). The suite
# mostly waits on clusters converging, so lanes overlap the waits on 2 cores (docs/testing.md, "Lanes").
LANES ?= 3
LANE_ARGS := $(if $(filter-out 0 1,$(LANES)),-n $(LANES) --dist loadfile)

.PHONY: help setup apt venv binaries image chart demo demo-tether demo-down test lint unit integration bench-local bench-offload bench-pods bench-services bench-network bench-storage clean

help:
	@echo "make demo         set up, then rome peers with milan and runs a Deployment there"
	@echo "make test         set up, then lint and run the whole test suite (LANES=3 in parallel; LANES=1 serial)"
	@echo "make setup        install what the project needs (idempotent)"
	@echo "make lint         ruff, mypy (strict), import-linter"
	@echo "make unit         unit tests only (no clusters)"
	@echo "make image        liqo's image (OCI archive, localhost/liqo/liqo:VERSION), built offline"
	@echo "make bench-local  baseline benchmark: cluster start, 1000-replica Deployment"
	@echo "make bench-offload PODS=N REPEAT=K [JSON=1] [PREFIX=name] [NO_TOKEN=1] offloaded vs direct, one core per cluster"
	@echo "make bench-services PODS=N endpoint latency across clusters vs a cluster's own controller"
	@echo "make bench-pods PODS=N     liqo as pods: install, memory idle and during an offload, hand-over"
	@echo "make bench-network REPEAT=K [PREFIX=name] pod→pod through the fabric vs bare wireguard-go"
	@echo "make bench-storage [REPEAT=K] [MIB=n]  an offloaded pod's volume vs one on the provider itself"
	@echo "make chart        rewrite charts/liqo's generated files from src/liqo/install"
	@echo "make demo-tether  set up, then a laptop cluster tethers to an enterprise's and back (docs/modes.md)"
	@echo "make demo-down    stop and delete the demo clusters"

setup: apt venv binaries

apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

venv:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11"; exit 1; }
	@$(UV) --version 2>/dev/null | grep -q "$(UV_VERSION)" || $(PYTHON) -m pip install --quiet "uv==$(UV_VERSION)"
	@UV_PYTHON=$(PYTHON) $(UV) sync --frozen --quiet
	@# Bytecode, once: uv writes none, and with PYTHONDONTWRITEBYTECODE (set on CI machines) every process
	@# compiled aiohttp, cryptography and liqo again at each start (1.8 s of CPU per liqo component, 2.5 s per
	@# liqoctl; 0.8 s and 1.1 s compiled). Up-to-date files are skipped, so this costs a second when nothing changed.
	@$(VENV)/bin/python -m compileall -q -j 0 $(VENV)/lib/python3.11/site-packages src >/dev/null

binaries: venv
	@$(LIQOCTL) local build --real-nodes

image: apt venv
	@$(LIQOCTL) local build-image

chart: venv
	$(VENV)/bin/python -m liqo.install.chart charts/liqo

demo: setup
	LIQOCTL=$(LIQOCTL) scripts/demo.sh

demo-tether: setup
	LIQOCTL=$(LIQOCTL) scripts/demo-tether.sh

demo-down: venv
	-$(LIQOCTL) local down rome --purge
	-$(LIQOCTL) local down milan --purge
	-$(LIQOCTL) local down laptop --purge
	-$(LIQOCTL) local down enterprise --purge

lint: venv
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: venv
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

integration: setup
	$(VENV)/bin/pytest tests/integration $(LANE_ARGS) $(PYTEST_ARGS)

test: apt venv
	scripts/test $(LANE_ARGS) $(PYTEST_ARGS)

bench-local: setup
	$(VENV)/bin/python benchmarks/local.py $(if $(PODS),--pods $(PODS))

bench-offload: setup
	$(VENV)/bin/python benchmarks/offload.py $(if $(PODS),--pods $(PODS)) $(if $(REPEAT),--repeat $(REPEAT)) $(if $(PREFIX),--prefix $(PREFIX)) $(if $(JSON),--json) $(if $(NO_TOKEN),--no-token)

bench-pods: setup
	$(VENV)/bin/python benchmarks/pods.py $(if $(PODS),--pods $(PODS))

bench-services: setup
	$(VENV)/bin/python benchmarks/services.py $(if $(PODS),--pods $(PODS))

bench-network: setup
	$(VENV)/bin/python benchmarks/network.py $(if $(REPEAT),--repeat $(REPEAT)) $(if $(PREFIX),--prefix $(PREFIX))

bench-storage: setup
	$(VENV)/bin/python benchmarks/storage.py $(if $(REPEAT),--repeat $(REPEAT)) $(if $(MIB),--mib $(MIB))

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
