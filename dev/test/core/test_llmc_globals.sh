#!/usr/bin/env bash
# test_llmc_globals.sh: llmc/ keeps no mutable state outside its structs (llmc/core/cuda_common.cuh
# says why: two GPU contexts must never share any). Compiles every llmc/ header into one object, the
# host-only .h files with cc and the .cuh files through nvcc's host side (nvcc -cuda, then c++), with
# every static and inline function kept so that their local statics are emitted too (a template's only
# where it is instantiated), and lists the writable data symbols (nm: b, d and the like; a const table
# is in r). The one allowed is dist_crash_link (llmc/dist/dist_report.h: a signal handler reaches
# nothing but a global). Checks, on the real tree, that it is the only one, and on a scratch tree that
# a function-local static in a .h, a file-scope variable in a .h and a function-local static in a .cuh
# are each reported while const tables are not (the checker can fail). Without nvcc only the .h files
# are checked (a line says so).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source dev/test/testing.sh
test_begin test_llmc_globals
NVCC=${NVCC:-nvcc}
CXX=${CXX:-c++}
ALLOWED="dist_crash_link"
KEEP="-fno-pic -fno-pie -fkeep-static-functions -fkeep-inline-functions"
PCRE2_CFLAGS=$(pcre2-config --cflags 2>/dev/null)
NCCL_DEF=$(echo '#include <nccl.h>' | "$NVCC" -E -x cu - > /dev/null 2>&1 && echo -DLLMC_NCCL)
have_nvcc=0; command -v "$NVCC" > /dev/null && have_nvcc=1

# the writable data symbols of an object, one name a line, the compilers' own left out (nvcc's stubs
# and registration handles, libstdc++'s template statics)
data_symbols() {
    nm -C "$1" | awk '$2 ~ /^[bBdDCGgSsVvu]$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }' |
        grep -vE '__device_stub__|__nv_|__cuda|std::__detail::'
}

# check_tree ROOT: one line per writable global under ROOT/llmc, other than the allowed one; its status
# is 1 when there was one, 2 when a file did not compile (its errors printed)
check_tree() {
    local root bad=0 f sym
    root=$(cd "$1" && pwd)
    local hsrc="$tmp/all_h.c" cusrc="$tmp/all_cuh.cu"
    { echo '#define _GNU_SOURCE'; for f in "$root"/llmc/*/*.h; do [ -f "$f" ] && echo "#include \"$f\""; done; } > "$hsrc"
    if ! cc -std=gnu11 -g0 -O0 -w $KEEP -I/usr/local/cuda/include $PCRE2_CFLAGS -c -o "$tmp/all_h.o" "$hsrc" \
            2> "$tmp/cc.err"; then
        echo "the .h files do not compile:"; head -20 "$tmp/cc.err"; return 2
    fi
    { data_symbols "$tmp/all_h.o" | sed 's/$/ (a .h file)/'; } > "$tmp/syms"
    if [ $have_nvcc = 1 ] && ls "$root"/llmc/*/*.cuh > /dev/null 2>&1; then
        { echo '#define _GNU_SOURCE'; for f in "$root"/llmc/*/*.h "$root"/llmc/*/*.cuh; do
              [ -f "$f" ] && echo "#include \"$f\""; done; } > "$cusrc"
        if ! "$NVCC" -std=c++17 -w -gencode arch=compute_90a,code=sm_90a -DLLMC_SM90A $NCCL_DEF $PCRE2_CFLAGS -cuda \
                -o "$tmp/all_cuh.ii" "$cusrc" 2> "$tmp/nvcc.err" ||
           ! "$CXX" -std=c++17 -g0 -O0 -w $KEEP -c -x c++ -o "$tmp/all_cuh.o" "$tmp/all_cuh.ii" 2> "$tmp/cxx.err"; then
            echo "the .cuh files do not compile:"; head -20 "$tmp/nvcc.err" "$tmp/cxx.err" 2>/dev/null; return 2
        fi
        data_symbols "$tmp/all_cuh.o" | sed 's/$/ (a .cuh file)/' >> "$tmp/syms"
    fi
    while read -r sym; do
        case "${sym%% (a .*}" in $ALLOWED) continue ;; esac
        echo "a mutable global: $sym"; bad=1
    done < <(sort -u "$tmp/syms")
    return $bad
}

if [ $have_nvcc = 0 ]; then echo "no $NVCC on this machine: the .h files are checked, the .cuh files are not"; fi
out=$(check_tree .); rc=$?
expect "the real tree has no mutable global but $ALLOWED${out:+: $out}" [ $rc = 0 ]

# a scratch tree: const tables pass; then one fault at a time
mkdir -p "$tmp/t/llmc/core"
cat > "$tmp/t/llmc/core/a.h" << 'EOF'
#pragma once
static const int a_table[] = {1, 2, 3};
static const char* const a_names[] = {"x", "y"};
static inline int a_pick(int i) { static const int local[] = {4, 5}; return a_table[i] + local[i & 1] + a_names[0][0]; }
EOF
out=$(check_tree "$tmp/t"); rc=$?
expect "a scratch tree with const tables only passes${out:+: $out}" [ $rc = 0 ]
cp "$tmp/t/llmc/core/a.h" "$tmp/a.h"
printf 'static inline int a_cached(void) { static int cache = -1; if (cache < 0) cache = 1; return cache; }\n' \
    >> "$tmp/t/llmc/core/a.h"
out=$(check_tree "$tmp/t")
expect "a function-local static in a .h is reported ($out)" has "$out" "a mutable global: cache"
expect "... in the .h files' object ($out)" has "$out" "(a .h file)"
cp "$tmp/a.h" "$tmp/t/llmc/core/a.h"
printf 'int a_counter = 0;\n' >> "$tmp/t/llmc/core/a.h"
out=$(check_tree "$tmp/t")
expect "a file-scope variable in a .h is reported ($out)" has "$out" "a mutable global: a_counter"
cp "$tmp/a.h" "$tmp/t/llmc/core/a.h"
if [ $have_nvcc = 1 ]; then
    cat > "$tmp/t/llmc/core/b.cuh" << 'EOF'
#pragma once
static inline int b_available(void) { static int available = -1; if (available < 0) available = 1; return available; }
EOF
    out=$(check_tree "$tmp/t")
    expect "a function-local static in a .cuh is reported ($out)" has "$out" "b_available()::available (a .cuh file)"
    printf '#pragma once\nstatic DistLinkLike* x;\n' > "$tmp/t/llmc/core/b.cuh"
    out=$(check_tree "$tmp/t"); rc=$?
    expect "a .cuh that does not compile is an error, not a pass (rc $rc)" [ $rc = 2 ]
fi
test_end
