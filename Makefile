# Two set-up commands: `make demo` and `make test`. Each creates .venv if needed.
# TORCH_SPEC pins torch: the default is the CPU build; a GPU user can run e.g.
#   make install TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo demo-en-de gpu-check gpu-check-data gpu-check-smoke gpu-wheels test test-slow verify-results lint bench speed speed-en-de speed-gpu batch-rates table1 serve-load serve-load-rescored serve-overload mutate mutation mutation-ci clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q $(TORCH_SPEC)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The Multi30k folder the demo scores the released models on (test_2016_flickr.{de,en}[.gz]).
MULTI30K ?= ../shared/data/multi30k

demo: $(STAMP)
	$(BIN)/gmlm reproduce --preset demo --out runs/demo data.corpus=multi30k:$(MULTI30K)

# The same on the released English-German models (checkpoints/multi30k-en-de), no theory stage.
demo-en-de: $(STAMP)
	$(BIN)/gmlm reproduce --preset demo-en-de --out runs/demo-en-de data.corpus=multi30k:$(MULTI30K):en-de

# The default tier in TEST_WORKERS processes of one thread each (pytest-xdist): 2 fill a
# 2-core machine (147 s there, against 262 s in one process of 2 threads); TEST_WORKERS=0
# runs it in this process.
TEST_WORKERS ?= 2
test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS)
	$(BIN)/ruff check src tests
	$(BIN)/mypy

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The released checkpoints' BLEU on the first 100 Multi30k test sentences, exactly as pinned in
# docs/RESULTS-pinned.json (tests/helpers/pinned_results.py says how to regenerate it): under a
# minute on one core. Needs the test set (MULTI30K), as `make demo` does.
verify-results: $(STAMP)
	@test -d "$(MULTI30K)" || { echo "verify-results: no Multi30k folder at $(MULTI30K); pass MULTI30K=DIR"; exit 2; }
	MULTI30K="$(MULTI30K)" $(BIN)/python -m pytest -q -m slow tests/test_released_checkpoints.py

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/gmlm theory bench

# The CPU speed table of the released models, as docs/RESULTS.md's "Speed" (which the multi30k
# run's bench stage measured the same way on their fp32 originals): batch 1 on 200 test
# sentences, the 1-layer-decoder AR and CTranslate2's AR rows beside them. The laptop models'
# tables took 12.5 minutes on 2 idle AMD EPYC cores (docs/history/laptop-run/speed/). Needs the
# test set (MULTI30K) as `make demo` does; run it on an otherwise idle machine. bf16 is off by
# default: without bf16 units (AVX2) it is emulated and its pass had not finished in 17 minutes
# (partly beside other work); on an Intel Xeon with AMX it is PaDIR's fastest precision and AR's
# slowest (docs/RESULTS.md), so time it there with `make speed SPEED_PRECISION=fp32,bf16,int8`.
# SPEED_AR1= (empty) leaves out the 1-layer-decoder AR; SPEED_THREADS sets the thread count of
# every system (2 by default, the machine's cores).
SPEED_PRECISION ?= fp32,int8
SPEED_AR1 ?= checkpoints/multi30k-de-en/ar1
SPEED_THREADS ?= 2
speed: $(STAMP)
	$(BIN)/gmlm reproduce --preset demo --out runs/demo --stages data data.corpus=multi30k:$(MULTI30K)
	$(BIN)/gmlm bench --ar checkpoints/multi30k-de-en/ar --padir checkpoints/multi30k-de-en/padir \
	  $(if $(SPEED_AR1),--ar1 $(SPEED_AR1)) \
	  --data runs/demo/data --sentences 200 --warmup 10 --threads $(SPEED_THREADS) --precision $(SPEED_PRECISION) \
	  --steps 4,10 --length-beams 1,5 --batch-sizes 1,8 --ctranslate2 \
	  --output runs/speed/bench.json --markdown runs/speed/bench.md --plots runs/speed

# English-German's batch-1 row of docs/RESULTS.md (docs/RESULTS-cpu-en-de/): PaDIR T=4 B=5
# with its decoding.json against AR greedy and beam 5, fp32 and bf16.
speed-en-de: $(STAMP)
	$(BIN)/gmlm reproduce --preset demo-en-de --out runs/demo-en-de --stages data \
	  data.corpus=multi30k:$(MULTI30K):en-de
	$(BIN)/gmlm bench --ar checkpoints/multi30k-en-de/ar --padir checkpoints/multi30k-en-de/padir \
	  --data runs/demo-en-de/data --sentences 200 --warmup 10 --threads $(SPEED_THREADS) \
	  --precision fp32,bf16 --steps 4 --length-beams 5 --batch-sizes 1 \
	  --output runs/speed-en-de/bench.json --markdown runs/speed-en-de/bench.md

# The GPU speed tables of docs/RESULTS.md (docs/RESULTS-gpu/): batch 1, fp32 and bf16, eager
# and with CUDA graphs, on a machine with a CUDA torch (see TORCH_SPEC above).
SPEED_GPU_SETTINGS = --ar checkpoints/multi30k-de-en/ar --padir checkpoints/multi30k-de-en/padir \
	  --ar1 checkpoints/multi30k-de-en/ar1 --data runs/demo/data --sentences 100 --threads 2 \
	  --device cuda --precision fp32,bf16 --steps 4,10 --length-beams 5 --batch-sizes 1
speed-gpu: $(STAMP)
	$(BIN)/gmlm reproduce --preset demo --out runs/demo --stages data data.corpus=multi30k:$(MULTI30K)
	$(BIN)/gmlm bench $(SPEED_GPU_SETTINGS) --output runs/speed-gpu/bench-eager.json \
	  --markdown runs/speed-gpu/bench-eager.md --plots runs/speed-gpu/eager
	$(BIN)/gmlm bench $(SPEED_GPU_SETTINGS) --cuda-graphs --output runs/speed-gpu/bench-graphs.json \
	  --markdown runs/speed-gpu/bench-graphs.md --plots runs/speed-gpu/graphs

# `make gpu-check` (tools/gpu_check.py; docs/GPU.md): on a machine with one GPU and a CUDA torch,
# the eager and CUDA-graph decoding rows, the service under open-loop load in fp32 and bf16 and
# training throughput of the small and base configs, as one Markdown table in runs/gpu-check/
# (under 8 minutes). Its data is the Multi30k corpus prepared with the shipped de-en tokenizer
# (gpu-check-data, a second on the CPU). gpu-wheels saves, in .whl/, the service's packages that
# the lent GPU machines' image lacks (for Python 3.12; docs/GPU.md says how to carry them).
# The data is small on purpose (4,000 training pairs, the 1,000 test sentences, 200 validation
# pairs: about 1 MB), so that it travels to a lent GPU with the code (docs/GPU.md).
GPU_CHECK_DATA ?= runs/gpu-check/data
GPU_CHECK_RAW = runs/gpu-check/raw
gpu-check-data: $(STAMP)
	mkdir -p $(GPU_CHECK_RAW)
	for l in de en; do \
	  zcat -f $(MULTI30K)/train.$$l* | head -n 4000 > $(GPU_CHECK_RAW)/train.$$l; \
	  zcat -f $(MULTI30K)/val.$$l* | head -n 200 > $(GPU_CHECK_RAW)/val.$$l; \
	  zcat -f $(MULTI30K)/test_2016_flickr.$$l* > $(GPU_CHECK_RAW)/test.$$l; done
	$(BIN)/gmlm data prepare --corpus files:$(GPU_CHECK_RAW)/train.de,$(GPU_CHECK_RAW)/train.en \
	  --valid files:$(GPU_CHECK_RAW)/val.de,$(GPU_CHECK_RAW)/val.en \
	  --test files:$(GPU_CHECK_RAW)/test.de,$(GPU_CHECK_RAW)/test.en \
	  --tokenizer checkpoints/multi30k-de-en/padir/tokenizer --out $(GPU_CHECK_DATA) --no-progress
gpu-check: gpu-check-data
	$(BIN)/python tools/gpu_check.py --data $(GPU_CHECK_DATA) --out runs/gpu-check
# The same script on the CPU with tiny counts (about 10 minutes on 2 cores): run it after
# changing what gpu-check calls, so that a GPU session spends no minutes on a broken section.
gpu-check-smoke: gpu-check-data
	$(BIN)/python tools/gpu_check.py --smoke --data $(GPU_CHECK_DATA) --out runs/gpu-check-smoke
GPU_WHEELS = fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5 \
	uvicorn==0.54.0 annotated-types==0.8.0 annotated-doc==0.0.7 typing-inspection==0.4.5 \
	opentelemetry-api==1.45.2 httptools==0.9.0
gpu-wheels: $(STAMP)
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)
# File translation by batch setting (docs/history/multi30k-de-en-notes.md, "Batches by tokens"): the shipped PaDIR
# (T=4 B=5) and AR (beam 5) in one process, BATCH_LINES lines of test_2016_flickr, BATCH_THREADS
# threads, every configuration interleaved for 3 rounds, outputs checked equal.
BATCH_LINES ?= 1000
BATCH_THREADS ?= 2
BATCH_CONFIGS ?= batch_size=8,batch_size=64,max_tokens=4000
batch-rates: $(STAMP)
	$(BIN)/python tools/batch_rates.py --padir checkpoints/multi30k-de-en/padir \
	  --ar checkpoints/multi30k-de-en/ar --input $(MULTI30K)/test_2016_flickr.de.gz \
	  --lines $(BATCH_LINES) --threads $(BATCH_THREADS) --configs $(BATCH_CONFIGS) \
	  --output runs/batch-rates/rates.json

# The paper's Table 1 in our setting (`gmlm analyze table1`): the released models on the whole
# Multi30k test set, AR beam 5 and PaDIR T=4 and T=10 (B=5), BLEU and chrF of each direction
# beside the paper's WMT BLEU: German-English, and English-German where checkpoints/multi30k-en-de
# is there (it is shipped; a clone without it still gets the first column). Needs the test set
# (MULTI30K), as `make demo` does. TABLE1_FLAGS adds flags, e.g. TABLE1_FLAGS="--sentences 100".
TABLE1_DIRECTIONS = de-en=checkpoints/multi30k-de-en \
	$(if $(wildcard checkpoints/multi30k-en-de),en-de=checkpoints/multi30k-en-de)
TABLE1_FLAGS ?=
table1: $(STAMP)
	$(BIN)/gmlm analyze table1 $(addprefix --direction ,$(TABLE1_DIRECTIONS)) --multi30k $(MULTI30K) \
	  --output runs/table1/table1.json --markdown runs/table1/table1.md $(TABLE1_FLAGS)

# The service under load (docs/history/multi30k-de-en-notes.md, "Under load: the service"): `gmlm serve` with the shipped PaDIR
# and AR and CTranslate2's export of the AR, 2 threads, one test sentence a request, open-loop
# Poisson arrivals at each rate (the last rate again after the highest: the recovery). Each
# request decodes as the bench's headline rows do: PaDIR T=4 B=5, AR and CTranslate2 beam 5.
# Run it on an otherwise idle machine.
LOAD_RATES ?= 1,2,4,8,16,32,1
LOAD_DURATION ?= 20
serve-load: $(STAMP)
	$(BIN)/gmlm export --format ctranslate2 --checkpoint checkpoints/multi30k-de-en/ar \
	  --out runs/serve-load/ar-ct2 --force
	$(BIN)/gmlm loadtest --serve="--threads 2 --model padir=checkpoints/multi30k-de-en/padir \
	  --model ar=checkpoints/multi30k-de-en/ar --model ct2=runs/serve-load/ar-ct2" \
	  --input $(MULTI30K)/test_2016_flickr.de.gz --rates $(LOAD_RATES) --duration $(LOAD_DURATION) \
	  --options 'ar={"beam": 5}' --options 'ct2={"beam": 5}' \
	  --output runs/serve-load/load.json --markdown runs/serve-load/load.md \
	  --plot runs/serve-load/load.png

# English-German PaDIR served alone, rescored by the AR baseline (its checkpoint's pruning, and
# without pruning from 2 random starts as well) and AR beam 5 beside them, on `val` sentences (the
# rescoring settings were chosen on it; the test set stays for the final scoring).
serve-load-rescored: $(STAMP)
	$(BIN)/gmlm loadtest --serve="--threads 2 --model padir=checkpoints/multi30k-en-de/padir \
	  --model rescored=checkpoints/multi30k-en-de/padir \
	  --model rescored-wide=checkpoints/multi30k-en-de/padir --model ar=checkpoints/multi30k-en-de/ar \
	  --rescore rescored=checkpoints/multi30k-en-de/ar --rescore rescored-wide=checkpoints/multi30k-en-de/ar" \
	  --input $(MULTI30K)/val.en.gz --rates 1,2,4,8,16 --duration 15 \
	  --options 'rescored-wide={"prune_after": 0, "random_starts": 2}' --options 'ar={"beam": 5}' \
	  --output runs/serve-rescore/load.json --markdown runs/serve-rescore/load.md

# Overload: PaDIR alone with a small queue (16 sentences, batches of at most 16) and a 2 s
# deadline, offered up to
# 8x its capacity, then light load again: 503s at once, deadlines kept, memory, recovery.
serve-overload: $(STAMP)
	$(BIN)/gmlm loadtest --serve="--threads 2 --model padir=checkpoints/multi30k-de-en/padir \
	  --max-queue-sentences 16 --max-batch-sentences 16 --timeout-s 2" \
	  --input $(MULTI30K)/test_2016_flickr.de.gz --rates 1,8,16,32,1 --duration $(LOAD_DURATION) \
	  --p99-limit-ms 500 --output runs/serve-load/overload.json \
	  --markdown runs/serve-load/overload.md --plot runs/serve-load/overload.png
# Mutation testing (tools/mutate.py; docs/MUTATION.md): each small change to MODULE is run
# against TESTS (pytest ids), one process on one thread; the survivors are listed, e.g.
#   make mutate MODULE=src/gmlm/decoding/scores.py TESTS=tests/decoding/test_refinement.py
# MUTATE_FLAGS="--sample 20" runs 20 of them (drawn with --seed 0), --json FILE records them.
# `make mutation` runs every line of tools/mutation-plan.txt into runs/mutation/ and prints
# its table (docs/MUTATION.md, "Survival per module"; about an hour on a shared 2-core
# machine).
MODULE ?=
TESTS ?=
MUTATE_FLAGS ?=
mutate: $(STAMP)
	@test -n "$(MODULE)" -a -n "$(TESTS)" || { echo "mutate: give MODULE=src/gmlm/... TESTS=tests/..."; exit 2; }
	$(BIN)/python tools/mutate.py $(MODULE) $(TESTS) $(MUTATE_FLAGS)

mutation: $(STAMP)
	$(BIN)/python tools/mutate.py --plan tools/mutation-plan.txt --out runs/mutation $(MUTATE_FLAGS)

# A fixed draw of 10 mutants from each line of the plan, in 2 processes of one thread each;
# fails when the surviving share passes tools/mutation-baseline.json's (docs/MUTATION.md).
mutation-ci: $(STAMP)
	$(BIN)/python tools/mutation_ci.py $(MUTATE_FLAGS)

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
