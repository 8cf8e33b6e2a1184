# A menu of recipes. `make help` lists them. Build outputs go to build/ (and ./train_gpt, ./test_gpt).
#   make data        fetch the GPT-2 BPE files and the starter corpus, write data/starter/*.bin
#   make data-debian a larger optional set from Debian packages into data/debian/*.bin
#   make train_gpt   the trainer (fetches the starter data first if needed); ./train_gpt -h lists its flags
#   make test        install what is missing, fetch the data, build everything, run every CPU test,
#                    and the GPU tests when a GPU is present
#   make deps        the packages for the data tools and tests (libpcre2-dev, npm), run first by the
#                    targets above: as root with apt-get it installs the missing ones, otherwise (or
#                    with DEPS_NO_INSTALL=1) it prints the command to run and stops (data/install_deps.sh)
#   make dev         build every kernel playground in dev/cuda/ into build/dev/
#   make clean       remove build outputs (keeps fetched data; `make clean-data` removes that)

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

.PHONY: help deps data data-debian test dev clean clean-data test-deps
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
DATA_TOOLS := build/tokenize build/make_shards build/brown_detok
build/tokenize: data/tokenize.c llmc/tokenizer.h llmc/tokenizer_encode.h llmc/check.h | build deps
	$(CC) $(CFLAGS) -o $@ $< $(PCRE2)
build/make_shards: data/make_shards.c llmc/tokenizer.h llmc/tokenizer_encode.h llmc/shard.h llmc/check.h | build deps
	$(CC) $(CFLAGS) -o $@ $< $(PCRE2)
build/brown_detok: data/brown_detok.c llmc/check.h | build
	$(CC) $(CFLAGS) -o $@ $<

# the GPT-2 BPE files and the starter shards (idempotent; see data/fetch_starter.sh)
data: data/starter/.complete
data/gpt2/vocab.bpe: | deps
	bash data/fetch_gpt2_bpe.sh
data/starter/.complete: | data/gpt2/vocab.bpe $(DATA_TOOLS)
	bash data/fetch_starter.sh
# optional, larger (~30M tokens): Debian documentation packages, downloaded without installing
data-debian: | data/gpt2/vocab.bpe $(DATA_TOOLS)
	bash data/fetch_debian.sh

# --- the trainer and its GPU test ---------------------------------------------------------------
# train_gpt needs the starter shards: when data/starter/ is not complete it runs `make data` first
# (which needs PCRE2 and npm: data/install_deps.sh installs them as root, else says how).
train_gpt: train_gpt.cu $(wildcard llmc/*.cuh llmc/*.h)
	@test -f data/starter/.complete || $(MAKE) --no-print-directory data
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)
test_gpt: test_gpt.cu $(wildcard llmc/*.cuh llmc/*.h dev/test/*.h)
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)

# --- dev playgrounds: dev/cuda/<name>.cu -> build/dev/<name> -------------------------------------
DEV_KERNELS := $(patsubst dev/cuda/%.cu,build/dev/%,$(wildcard dev/cuda/*.cu))
dev: $(DEV_KERNELS)
build/dev/%: dev/cuda/%.cu $(wildcard llmc/*.cuh llmc/*.h dev/cuda/*.h dev/cuda/*.cuh dev/test/*.h) | build/dev
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)

# --- tests -------------------------------------------------------------------------------------
# CPU tests: dev/test/test_<name>.c, and the scripts dev/test/test_<name>.sh: ./train_gpt's flags and
# bad input, data/install_deps.sh's choices;
# GPU tests: dev/test/test_<name>.cu (run only where a GPU exists)
CPU_TESTS := $(patsubst dev/test/%.c,build/%,$(wildcard dev/test/test_*.c))
GPU_TESTS := $(patsubst dev/test/%.cu,build/%,$(wildcard dev/test/test_*.cu))
CPU_TEST_SCRIPTS := $(wildcard dev/test/test_*.sh)
build/test_%: dev/test/test_%.c $(wildcard llmc/*.h dev/test/*.h dev/cuda/*.h) | build deps
	$(CC) $(CFLAGS) -o $@ $< $(PCRE2) -lm
build/test_%: dev/test/test_%.cu $(wildcard llmc/*.cuh llmc/*.h dev/test/*.h dev/cuda/*.h dev/cuda/*.cuh) | build
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)

# the npm oracle for the tokenizer tests (tiktoken, WASM build of the reference implementation)
TIKTOKEN := build/node/node_modules/tiktoken/package.json
test-deps: $(TIKTOKEN)
$(TIKTOKEN): | deps
	mkdir -p build/node && npm install --silent --no-audit --no-fund --prefix build/node tiktoken@1.0.22

# builds every CUDA target too, so that a compile error in any .cu fails the test run
test: data test-deps $(CPU_TESTS) $(GPU_TESTS) $(DEV_KERNELS) train_gpt test_gpt
	bash dev/test/run_tests.sh --cpu $(CPU_TESTS) $(CPU_TEST_SCRIPTS) --gpu $(GPU_TESTS) ./test_gpt

clean:
	rm -rf build train_gpt test_gpt
clean-data:
	rm -rf data/gpt2 data/starter data/debian data/.cache
