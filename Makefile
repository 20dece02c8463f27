# Arbiter: every command a newcomer or CI needs. `make help` lists them.
# The interpreter `.venv` is made with (`make install PYTHON=...` picks another): the
# operating system's CPython 3.11 where there is one that can make a virtual environment
# and compile extensions, else the first `python3` on the PATH. Debian's is built with
# profile-guided and link-time optimisation and runs a decision in 12 to 18 % less time
# (8 % fewer instructions) than a CPython built with `./configure`'s defaults, as pyenv
# builds one (docs/benchmarks.md, "The interpreter's build"). Expanded where it is used
# (`=`), so only a target that makes `.venv` starts the interpreter to look.
OS_PYTHON := /usr/bin/python3.11
ifeq ($(origin PYTHON),undefined)
PYTHON = $(if $(shell $(OS_PYTHON) -c 'import ensurepip, os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null && echo usable),$(OS_PYTHON),python3)
endif
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install serve test lint typecheck unit bench bench-engine bench-instructions bench-growth bench-memory bench-health bench-throughput bench-sim results results-dl2 results-dl2-gap results-dl2-room results-dl2-order results-dl2-srtf results-oasis results-aryl results-aryl-whole results-peers results-tiresias results-relmas results-dual-agent dl2-model dl2-srtf-model dual-agent-model dual-agent-attitudes relmas-model bench-relmas bench-aryl bench-oasis bench-placement examples openapi golden fuzz chaos soak clean

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt setup.py policies/common/_oasis.pyx policies/_capacity.pyx
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install Arbiter with CPU torch 2.13.0 (pinned by constraints.txt)

serve: $(STAMP) ## Install, then serve on http://127.0.0.1:8000 with SQLite and the in-process cache
	$(BIN)/arbiter serve --host 127.0.0.1 --port 8000

lint: $(STAMP) ## Ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP) ## mypy --strict over the whole project
	$(BIN)/mypy app policies storage simulator training migrations evidence tests

unit: $(STAMP) ## The pytest suite only
	$(BIN)/pytest -q

test: lint typecheck unit ## Install, then lint, type-check and run every test (PostgreSQL and Redis included)

bench: $(STAMP) ## Decisions per profile over HTTP (service on embedded defaults), then in process
	bash scripts/serve_and_bench.sh
	$(MAKE) --no-print-directory bench-engine

bench-engine: $(STAMP) ## In-process decision time per profile on the examples, against the targets
	$(BIN)/python -m evidence.bench_engine --repeat 3

bench-instructions: $(STAMP) ## Instructions per decision of the classic profiles on the large example (needs valgrind; long)
	$(BIN)/python -m evidence.bench_instructions

bench-growth: $(STAMP) ## Decision time from 16 to 4,096 nodes: table, exponents, docs/img/growth.png
	$(BIN)/python -m evidence.bench_growth

bench-memory: $(STAMP) ## Service memory over 10,000 decisions and a simulation's peak memory (long)
	$(BIN)/python -m evidence.bench_memory

bench-health: $(STAMP) ## /healthz latency while oasis decisions on the large example run back to back
	$(BIN)/python -m evidence.bench_health

bench-throughput: $(STAMP) ## Small-example decisions/s under wrk, one and two workers (needs wrk)
	bash scripts/bench_throughput.sh

bench-sim: $(STAMP) ## Simulator speed: the Philly targets (10,000 jobs, the whole fortnight), every profile, a profile
	$(BIN)/python -m evidence.bench_simulator

results: $(STAMP) ## Regenerate docs/results.md (whole shared traces, recorded and loaded, over seeds; 15 to 26 min)
	$(BIN)/python -m evidence.make_results

results-oasis: $(STAMP) ## OASiS (and its slot-end rule) vs accept-all FIFO and DRF on total utility, seeds 0-2 (section oasis, about 2 min)
	$(BIN)/python -m evidence.evidence_oasis --processes 2

results-peers: $(STAMP) ## The Philly fortnight on 80 x 8 GPUs, ideal FIFO and SJF, beside a published simulator (~20 min)
	$(BIN)/python -m evidence.evidence_peers

results-tiresias: $(STAMP) ## Tiresias vs FIFO: Philly fortnight (80 x 8, ideal), ITP cluster04 over 3 seeds, Alibaba x1.6 over 10 with and without gathering, one-node and FIFO-gathering variants, Helios week over 10 with machines varied and alike (4-7 min)
	$(BIN)/python -m evidence.evidence_tiresias

results-aryl: $(STAMP) ## Aryl vs static, the fortnight's first 2,500 jobs at two loads, seeds 0-2 (section aryl, about 1 min)
	$(BIN)/python -m evidence.evidence_aryl --processes 2

results-aryl-whole: $(STAMP) ## Aryl vs static on the whole Philly fortnight, recorded arrivals, seeds 0-2 (section aryl-whole, about 5 min)
	$(BIN)/python -m evidence.evidence_aryl --whole --processes 2

results-dl2: $(STAMP) ## DL2 (warm-up, RL) against DRF and Optimus: section dl2 of docs/results.md (3-5 min)
	$(BIN)/python -m evidence.evidence_dl2

results-dl2-gap: $(STAMP) ## DL2's gap to the paper: budget, the paper's jobs, in place, the whole allocation reallocated (section dl2-gap, about 70 min)
	$(BIN)/python -m evidence.evidence_dl2_gap --processes 2

results-dl2-room: $(STAMP) ## How far any scaling could go below DRF on DL2's held-out windows: floors, hindsight (section dl2-room, seconds)
	$(BIN)/python -m evidence.evidence_dl2_room --processes 2

results-dl2-order: $(STAMP) ## DL2 trained behind FIFO with backfill and behind SRTF: teachers (DRF, Optimus, as requested), rewards, a 10x budget, estimates off, every waiting job its minimum; beside the drf and optimus profiles (section dl2-order, 20 min on the last machine)
	$(BIN)/python -m evidence.evidence_dl2_order --processes 2

results-dl2-srtf: $(STAMP) ## The dl2-srtf profile's shipped model and its warm-up vs the heuristics behind SRTF and the drf and optimus profiles (section dl2-srtf, under a minute here)
	$(BIN)/python -m evidence.evidence_dl2_srtf --processes 2

dl2-model: $(STAMP) ## Retrain the shipped DL2 model from the shared traces (under a minute here)
	$(BIN)/python -m evidence.train_dl2

dl2-srtf-model: $(STAMP) ## Retrain the dl2-srtf profile's shipped model: behind SRTF, imitating Optimus, 400 PPO updates x 4 episodes (about 3.5 min here)
	$(BIN)/python -m evidence.train_dl2 --profile dl2-srtf --updates 400 --episodes-per-update 4 --validate-every 20 --processes 2

relmas-model: $(STAMP) ## Retrain the shipped RELMAS model in the accelerator simulator (about 7 min here)
	$(BIN)/python -m evidence.train_relmas

results-relmas: $(STAMP) ## RELMAS vs the dispatch baselines, 3 seeds per scenario: section relmas of docs/results.md
	$(BIN)/python -m evidence.evidence_relmas

bench-relmas: $(STAMP) ## Dispatch decision time for 64 pending requests on one core, every dispatch profile
	$(BIN)/python -m evidence.bench_relmas

bench-aryl: $(STAMP) ## Aryl's reclaim and scaling decision time on the large example
	$(BIN)/python -m evidence.bench_aryl

bench-oasis: $(STAMP) ## OASiS decision time over three rounds of the large example (state carried over)
	$(BIN)/python -m evidence.bench_oasis

bench-placement: $(STAMP) ## A job with CPU or memory needs placed over nodes from a list or from arrays, by cluster size
	$(BIN)/python -m evidence.bench_placement_paths

examples: $(STAMP) ## Regenerate the example snapshots under examples/ (a test checks they are current)
	$(BIN)/python -m evidence.generate_examples --out examples
	$(BIN)/python -m evidence.generate_dispatch_example

dual-agent-model: $(STAMP) ## Retrain the shipped dual-agent model (MAPPO, GP fit, attitude search; about 32 min; UPDATES=200 for longer)
	$(BIN)/python -m evidence.train_dual_agent $(if $(UPDATES),--updates $(UPDATES))

dual-agent-attitudes: $(STAMP) ## Fee and JCT margins of dual-agent attitudes on training windows (ATTITUDES="0.27,0.3,- ..."; about 30 s each)
	$(BIN)/python -m evidence.dual_agent_attitudes $(foreach a,$(ATTITUDES),--attitude=$(a))

results-dual-agent: $(STAMP) ## Dual agent against Tiresias and the greedy baseline, ablations: section dual-agent of docs/results.md
	$(BIN)/python -m evidence.evidence_dual_agent --write

fuzz: $(STAMP) ## Fuzz every operation of the spec for longer (FUZZ_EXAMPLES per operation, default 5000)
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-5000} FUZZ_COVERAGE=all $(BIN)/pytest -q -p no:cacheprovider --timeout=0 tests/api/test_fuzz.py

chaos: $(STAMP) ## Faults under load (PostgreSQL stopped, Redis killed, a retrain worker killed): what was lost
	$(BIN)/python -m evidence.chaos

soak: $(STAMP) ## Mixed traffic for SOAK_MIN minutes (default 30): answers, losses, memory at start and end
	$(BIN)/python -m evidence.chaos --soak-min $${SOAK_MIN:-30}

golden: $(STAMP) ## Re-record the golden decisions and metrics (only for an intended change of behaviour)
	$(BIN)/python -m tests.golden.record

openapi: $(STAMP) ## Print the OpenAPI spec
	$(BIN)/arbiter openapi --indent

clean: ## Remove the virtual environment, caches and the compiled extension
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build
	rm -f policies/common/_oasis.c policies/_capacity.c policies/common/*.so policies/*.so
