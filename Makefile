# zh_en on TorchServe. `make serve` and `make test` are the two entry points.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= Helsinki-NLP/opus-mt-zh-en
STRICT ?= 0
STORE := model_store
CONFIG := config/config.properties

STRICT_FLAG := $(if $(filter 1,$(STRICT)),--strict,)

.PHONY: help venv java cc kernels nginx archives serve stop test lint bench bench-quick bench-check layout soak fuzz swap fleet fleet-stop image image-test clean config-doc fresh-machine

help:
	@echo "make serve   build the archives (MODEL=hub id|dir|synthetic, STRICT=1) and start TorchServe"
	@echo "make stop    stop TorchServe"
	@echo "make test    lint, type-check, unit and end-to-end tests: the quick loop (make lint: only the first two)"
	@echo "make soak    minutes of load, swaps and faults on real servers; make bench-check: the bench harness's smoke runs"
	@echo "make fresh-machine   the README's make serve in a bare Debian 12 root, as root and as a user (as root; CI runs it)"
	@echo "make fuzz    the text stages' worst inputs (adversarial + Hypothesis): fuzz.json in the run folder, fails over budget"
	@echo "make bench   quality, latency ladder, load and scheduler benchmarks, report with plots, in bench/results/runs/<date>-<commit>/"
	@echo "make libretranslate-peer   LibreTranslate 1.9.6 in its own venv under build/ with the stand-in as an Argos package: make bench's served peer"
	@echo "make config-doc   write docs/CONFIGURATION.md from handlers/handler_config.py (a test fails when they differ)"
	@echo "make layout  measure step partitions x threads x row budget as shipped, print the winning model config"
	@echo "make swap TO=1.0-fp32   zero-downtime switch of the default version"
	@echo "make translate IN=corpus/ OUT=translated/ [ARGS='--beams 2']   batch prediction with the int8 archive, a worker per core (docs/BATCH.md)"
	@echo "make fleet   REPLICAS=2 TorchServe replicas behind nginx on 127.0.0.1:8090 (MODEL=...|tiny); make fleet-stop"
	@echo "             the fleet's front door serves the playground at / and the status page at /status"
	@echo "make image   build the image with podman: MODEL=<dir>, or MODEL=synthetic for a :standin image (the hub is unreachable here); make image-test builds, runs and stops it"
	@echo "make bench-quick   make bench's short plan (minutes), into its own run folder"
	@echo "make screenshots   docs/playground.png and docs/status.png from the browser tests"
	@echo "make archives      only build the two archives into model_store/ (make serve does it first)"
	@echo "make kernels       only compile the C kernels (handlers/model/libzh_en_kernels.so), a path per instruction set"
	@echo "make venv          the virtualenv with the dev tools (make test creates it)"
	@echo "make java | cc | nginx | chromium   install that prerequisite with apt-get where missing (as root)"
	@echo "make clean         remove build/, the archives and logs"

# torch's CPU build. On x86_64 the public index's plain `torch` is the CUDA build (several GB of
# nvidia-* wheels); the `+cpu` local version exists only on PyTorch's CPU index (and in a local
# wheel directory), so pip can never substitute the CUDA one. aarch64 wheels are CPU-only anyway.
TORCH_SPEC ?= torch==2.13.0$(if $(filter x86_64,$(shell uname -m)),+cpu,)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
RUNTIME := $(VENV)/.runtime
# Everything but torch goes in with uv (pip installs it): about a minute where pip takes three, bytecode
# included, which a host with PYTHONDONTWRITEBYTECODE set would otherwise recompile in every process.
# uv reads no pip.conf: where it cannot reach PyPI (a mirror only pip is set up for), pip installs instead.
# uv itself goes under build/, not into .venv: the image copies .venv, and uv (37 MB) has no use there.
UV_SPEC := uv==0.13.9
UV_DIR := build/uv
UV := $(UV_DIR)/bin/uv
install = { test -x $(UV) || $(BIN)/pip install --quiet --target $(UV_DIR) $(UV_SPEC); } \
  && $(UV) pip install --python $(BIN)/python --quiet --compile-bytecode $(1) || $(BIN)/pip install --quiet $(1)
DEV := $(VENV)/.dev

# Runtime only: what `make serve`, the image and `make fleet` need.
$(RUNTIME): pyproject.toml
	@$(PYTHON) scripts/check_python.py
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python scripts/install_torch.py --spec '$(TORCH_SPEC)' --index $(TORCH_INDEX)
	$(call install,-e .)
	touch $@

# Everything `make test`, `make bench` and `make layout` need on top.
$(DEV): $(RUNTIME)
	$(call install,-e '.[dev]')
	touch $@

venv: $(DEV)

# Batch prediction's engine (Ray Data), apart from the runtime: the serving image never installs it.
BATCH := $(VENV)/.batch
$(BATCH): $(RUNTIME)
	$(call install,-e '.[batch]')
	touch $@

# A missing system package is installed only by root; anyone else is told, before any long step (make
# serve and make test check these first), what to install: $(call as_root,what,packages).
as_root = test "$$(id -u)" = 0 || { echo "make: $(1) is missing: install it as root (apt-get install -y $(2)), or run make as root"; exit 1; }

# TorchServe's frontend needs Java 17; install it where missing (Debian/Ubuntu, as root).
java:
	@command -v java >/dev/null 2>&1 && java -version 2>&1 | grep -q 'version "17' || { \
	  command -v apt-get >/dev/null || { echo "make: install Java 17 (Amazon Linux: dnf install java-17-amazon-corretto-headless)"; exit 1; }; \
	  $(call as_root,Java 17,openjdk-17-jre-headless); \
	  echo "installing openjdk-17-jre-headless"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }

# The C kernels are compiled ahead of time (make kernels), so a C compiler is needed once, here; install
# gcc where missing (Debian/Ubuntu, as root). Workers and the image's runtime stage never compile.
cc:
	@command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null || { echo "make: install a C compiler (gcc) for make kernels"; exit 1; }; \
	  $(call as_root,a C compiler,gcc libc6-dev); \
	  echo "installing gcc"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; }

# One library, a path per instruction set chosen from CPUID at run time (handlers/model/native.py):
# built once per kernels.c, packed into both archives; prints the paths this host runs.
kernels: cc $(RUNTIME)
	$(BIN)/python -m handlers.model.native

# The fleet's front door: nginx, with njs to hash client keys; installed where missing (Debian/Ubuntu, as root).
NGINX_JS := /usr/lib/nginx/modules/ngx_http_js_module.so
nginx:
	@{ command -v nginx || test -x /usr/sbin/nginx; } >/dev/null 2>&1 && test -e $(NGINX_JS) || { \
	  command -v apt-get >/dev/null || { echo "make: install nginx with its njs module ($(NGINX_JS))"; exit 1; }; \
	  $(call as_root,nginx with njs,nginx libnginx-mod-http-js); \
	  echo "installing nginx and libnginx-mod-http-js"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx libnginx-mod-http-js >/dev/null; }

# The playground's browser tests (tests/e2e/test_playground.py): Debian's headless Chromium, driven by
# Playwright's Python package (never `playwright install`), and a CJK font so screenshots show Chinese.
.PHONY: chromium screenshots
chromium:
	@test -x /usr/bin/chromium && fc-list :lang=zh 2>/dev/null | grep -q . || { \
	  command -v apt-get >/dev/null || { echo "make: install chromium (at /usr/bin/chromium) and a CJK font"; exit 1; }; \
	  $(call as_root,Chromium and a CJK font,chromium fonts-wqy-microhei); \
	  echo "installing chromium and fonts-wqy-microhei"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-microhei >/dev/null; }

# docs/playground.png and docs/status.png, from the browser tests on a real front door.
screenshots: $(DEV) java nginx chromium
	PLAYGROUND_SCREENSHOTS=docs $(BIN)/python -m pytest -q tests/e2e/test_playground.py

# UNPACK=1 (the image): each archive becomes a directory of the same name, their shared weights one
# file (archive/unpack.py); TorchServe serves it in place, `--models zh_en_int8.mar` unchanged.
UNPACK ?= 0
archives: $(RUNTIME) kernels
	$(BIN)/python -m archive.build --model $(MODEL) $(STRICT_FLAG) --out $(STORE)
	$(if $(filter 1,$(UNPACK)),$(BIN)/python -m archive.unpack $(STORE))

# Batch prediction (docs/BATCH.md): the int8 archive, the shipped defaults, a worker process per core.
.PHONY: translate
translate: archives $(BATCH)
	@test -n '$(IN)' -a -n '$(OUT)' || { echo "make translate IN=<file, directory or glob> OUT=<directory>"; exit 2; }
	$(BIN)/python -m batch translate '$(IN)' '$(OUT)' --archive $(STORE)/zh_en_int8.mar $(ARGS)

# The launcher returns once the JVM is forked (--start) or signalled (--stop); a hung one is killed.
LAUNCHER_TIMEOUT := timeout --kill-after=10
# TEMP: TorchServe unpacks archives into $TEMP/models (/tmp/models by default), and a /tmp/models that
# another user's TorchServe made cannot be written (pytorch/serve#1532): each checkout gets its own.
# The launcher keeps its pid file there too, so make stop passes the same TEMP.
TS_TEMP := TEMP=$(CURDIR)/build/torchserve-tmp
serve: java archives
	mkdir -p build/torchserve-tmp
	$(TS_TEMP) $(LAUNCHER_TIMEOUT) 120 $(BIN)/torchserve --start --ncs --model-store $(STORE) --ts-config $(CONFIG) --models zh_en_int8.mar
	$(BIN)/python -m serving.wait --key-file key_file.json

stop: $(RUNTIME)
	$(TS_TEMP) $(LAUNCHER_TIMEOUT) 60 $(BIN)/torchserve --stop

LINT_STEPS = $(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy && $(BIN)/hadolint Dockerfile
lint: $(DEV)
	$(LINT_STEPS)

# Two processes (pytest-xdist; tests/conftest.py keeps each module in one), then the tests that assert
# wall-clock bounds (marked `timed`) alone, so the other process cannot slow them. make test, make soak
# and make bench-check run their marks this way: $(call two_at_a_time,<marks>,<slowest shown>) and
# $(call timed_alone,<marks>).
TEST_PROCESSES ?= 2
two_at_a_time = $(BIN)/python -m pytest -q -n $(TEST_PROCESSES) --dist loadgroup --no-loadscope-reorder -m '$(1)' --durations=$(2)
timed_alone = $(BIN)/python -m pytest -q --timed-modules -m '$(1) and timed' --durations=5
QUICK_LOOP := not soak and not bench_check and not image
# make lint's steps run beside the first step (mypy alone took 38 s of a cold start) and end before the
# second; their output follows the first step's, and either failing fails make test. (Not $(MAKE) lint:
# make -n runs a line that names $(MAKE), and tests/unit/test_install.py reads make -n test.)
test: java nginx chromium cc kernels $(DEV)
	mkdir -p build; { $(LINT_STEPS); } > build/lint.log 2>&1 & lint=$$!; \
	  $(call two_at_a_time,$(QUICK_LOOP) and not timed,15); \
	  tests=$$?; wait $$lint; linted=$$?; cat build/lint.log; \
	  test $$linted -eq 0 || echo "make test: make lint failed (above)"; test $$tests -eq 0 -a $$linted -eq 0
	$(call timed_alone,$(QUICK_LOOP))

bench: archives java $(DEV)
	$(BIN)/python -m bench.run_all

bench-quick: archives java $(DEV)
	$(BIN)/python -m bench.run_all --quick

# LibreTranslate 1.9.6 in its own venv under build/libretranslate and the stand-in as an Argos package,
# cached: the served peer of `python -m bench.run_all --loads int8:4:100 libretranslate:4:100
# libretranslate-tuned:4:100` (bench/libretranslate_peer.py). Not part of make test.
.PHONY: libretranslate-peer
libretranslate-peer: $(DEV)
	$(BIN)/python -m bench.libretranslate_peer --prepare

# One fresh TorchServe per point (its own archive from MODEL); about 5 minutes on 2 cores. A finished
# study kept as a tool (bench/studies/README.md); writes layout.{json,md,png} into its run folder.
layout: $(DEV) java
	$(BIN)/python -m bench.studies.layout --model $(MODEL) $(STRICT_FLAG)

# A bounded cost campaign over every text entry point, in process (no server): about 20 s on
# 2 cores. make test runs a short one (tests/unit/test_text_cost.py).
fuzz: $(DEV)
	$(BIN)/python -m tests.fuzz_text

# As make test: two processes, then the fault drills with wall-clock bounds alone. Two at a time, each
# drill has a neighbour's load beside it (a killed worker's test took 25 s alone, 65 s beside
# another): slower, and still no request lost, which is what they assert (docs/TESTING.md).
soak: $(DEV) java nginx
	$(call two_at_a_time,soak and not timed,10)
	$(call timed_alone,soak)

# The README's first command in a bare Debian 12 root (debootstrap), as root and as a second user, one
# translation each (tests/fresh_machine/run.sh; as root, about 5 minutes). FRESH_ARGS=--make-test adds
# make test inside the root (about 13 minutes more). Bounded: TERM after 40 minutes (once its current
# step returns, the script undoes its mounts and removes the root), KILL 2 minutes later (the next run
# undoes what is left first).
fresh-machine:
	timeout --kill-after=120 2400 bash tests/fresh_machine/run.sh $(FRESH_ARGS)

bench-check: $(DEV) java
	$(call two_at_a_time,bench_check,10)

swap: $(RUNTIME)
	@test -n "$(TO)" || { echo "usage: make swap TO=1.0-fp32 (a version) or TO=zh_en_fp32.mar (an archive)"; exit 2; }
	$(BIN)/python -m serving.swap --to $(TO)

# REPLICAS TorchServe replicas (token auth off, loopback only) behind nginx on 127.0.0.1:8090
# (deploy/FLEET.md). MODEL=tiny serves the tests' tiny stand-in from its own store; FLEET_ARGS go to
# `python -m serving.fleet start` (--listen, --rate, --burst, --archive).
FLEET_DIR ?= build/fleet
REPLICAS ?= 2
FLEET_ARGS ?=
FLEET_STORE := $(if $(filter tiny,$(MODEL)),build/fleet-store-tiny,$(STORE))
FLEET_MODEL := $(if $(filter tiny,$(MODEL)),--model synthetic --standin-size tiny,--model $(MODEL) $(STRICT_FLAG))
fleet: $(RUNTIME) java nginx
	$(BIN)/python -m archive.build $(FLEET_MODEL) --out $(FLEET_STORE)
	$(BIN)/python -m serving.fleet start --replicas $(REPLICAS) --model-store $(FLEET_STORE) --dir $(FLEET_DIR) $(FLEET_ARGS)

fleet-stop: $(RUNTIME)
	$(BIN)/python -m serving.fleet stop --dir $(FLEET_DIR)

# The container image, with podman where no Docker engine runs (deploy/image/: installs podman and
# bootstraps the python:3.11-slim base where missing; as root). About 5 minutes; not part of `make test`.
# MODEL: the hub id (default; its pinned commit, archive/hub.py), a local model directory, or
# synthetic (a stand-in image tagged :standin). Never a silent stand-in: with the hub unreachable the
# build stops and names the two other choices (archive/image_plan.py). STRICT does not apply.
image:
	MODEL=$(MODEL) deploy/image/build.sh

image-test: $(DEV)
	ZH_EN_IMAGE_TEST=1 $(BIN)/python -m pytest -q -s -m image tests/image

clean:
	rm -rf build $(STORE)/*.mar $(STORE)/.*.inputs logs

# docs/CONFIGURATION.md is generated: every handler key, its default, bounds and what it changes.
config-doc: $(RUNTIME)
	$(BIN)/python -m handlers.handler_config > docs/CONFIGURATION.md
