# One command each for the demo and the tests; each makes its own virtual environment.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The base install alone, as a machine that only prepares has it: prepare is benchmarked in it.
BASE_VENV ?= .venv-base
DEMO_DIR ?= out/demo
DEMO_RUN ?= runs/demo
DEMO_STORIES ?= 30000
DEMO_STEPS ?= 150

.PHONY: venv demo lint format test test-fast bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

demo: venv
	$(PY) -m pipeline corpus --output $(DEMO_DIR)/stories.txt --stories $(DEMO_STORIES)
	$(PY) -m pipeline prepare --input $(DEMO_DIR)/stories.txt --output $(DEMO_DIR)/data \
		--validation-fraction 0.02
	$(PY) -m pipeline verify $(DEMO_DIR)/data
	$(PY) -m train --data $(DEMO_DIR)/data --workdir $(DEMO_RUN) --preset tiny --steps $(DEMO_STEPS) \
		--batch-size 16 --seq-len 128 --learning-rate 3e-3 --warmup-steps 15 --eval-every 50 --checkpoint-every 50
	$(PY) -m train sample --workdir $(DEMO_RUN) --prompt "Once upon a time" --max-tokens 120

# The linter and the formatter's check (ruff.toml); `make format` rewrites the tree to pass them.
lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: venv
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# The linter, then every tier: the unit tests, those marked `integration` (a command, a process or
# training, seconds each) and those marked `slow` (minutes); what CI runs.
test: lint
	$(PY) -m pytest -m "slow or not slow" -n 0

# The unit tier alone (under a minute on 2 cores).
test-fast: venv
	$(PY) -m pytest

$(BASE_VENV)/.installed: setup.py constraints.txt
	$(PYTHON) -m venv $(BASE_VENV)
	$(BASE_VENV)/bin/python -m pip install -q --upgrade pip
	$(BASE_VENV)/bin/python -m pip install -q -c constraints.txt .
	touch $@

# Each script measures against a reference in the same run and, with --check, fails below its goal;
# all of them run, and the target fails if any check did.
bench: venv $(BASE_VENV)/.installed
	@status=0; \
	$(PY) benchmarks/prepare_throughput.py --python $(BASE_VENV)/bin/python --check || status=1; \
	$(PY) benchmarks/prepare_throughput.py --python $(BASE_VENV)/bin/python --megabytes 1024 --rounds 3 \
		--skip-nanogpt --workdir /tmp/prepare_bench_1g || status=1; \
	$(PY) benchmarks/planning.py --check || status=1; \
	$(PY) benchmarks/dedup.py --check || status=1; \
	$(PY) benchmarks/filters.py || status=1; \
	$(PY) benchmarks/loader_throughput.py --check || status=1; \
	$(PY) benchmarks/train_step.py || status=1; \
	$(PY) benchmarks/train_step.py --real-batches --rounds 3 --steps-per-round 10 --check || status=1; \
	$(PY) benchmarks/train_loop.py --check || status=1; \
	$(PY) benchmarks/checkpoint_cost.py --check || status=1; \
	$(PY) benchmarks/step_memory.py || status=1; \
	$(PY) benchmarks/sentencepiece_speed.py --check || status=1; \
	$(PY) benchmarks/export_speed.py --check || status=1; \
	$(PY) benchmarks/padding_share.py --check || status=1; \
	$(PY) benchmarks/index_scale.py || status=1; \
	$(PY) benchmarks/index_scale.py --rows 256 --steps 300 || status=1; \
	exit $$status

clean:
	rm -rf $(VENV) $(BASE_VENV) out runs *.egg-info
