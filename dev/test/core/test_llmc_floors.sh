#!/usr/bin/env bash
# test_llmc_floors.sh: llmc/'s folders are floors, and a file includes only its own folder and the
# floors below it (doc/architecture.md draws them). Checks, on the real tree:
#   - every llmc/ file sits in one of the folders below, none at llmc/'s top;
#   - every #include "..." of an llmc/ file names a file that exists, in its own folder or lower;
# and, on a scratch tree, that an include up a floor, one across a floor, a missing file and a stray
# top-level file are each reported (the checker can fail).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source dev/test/testing.sh
test_begin test_llmc_floors

# floor of each folder: a file may include a folder of a lower number, or its own
declare -A floor=([core]=0 [ptx]=1 [data]=1 [layers]=2 [dist]=2 [attention]=3 [head]=3 [optim]=3
                  [model]=4 [io]=5 [train]=6)

# check_tree ROOT: prints one line per violation under ROOT/llmc; its status is 1 when there was one
check_tree() {
    local root=$1 bad=0 f dir inc target tdir
    for f in "$root"/llmc/*; do
        if [ -f "$f" ]; then echo "llmc/${f##*/}: a file at llmc/'s top (put it in a folder)"; bad=1; fi
    done
    for f in "$root"/llmc/*/*; do
        dir=${f%/*}; dir=${dir##*/}
        if [ -z "${floor[$dir]+x}" ]; then echo "llmc/$dir/: a folder with no floor"; bad=1; continue; fi
        while read -r inc; do
            target=$(realpath -m "${f%/*}/$inc")
            if [ ! -f "$target" ]; then echo "llmc/$dir/${f##*/}: includes $inc, which does not exist"; bad=1; continue; fi
            tdir=${target%/*}; tdir=${tdir##*/}
            if [ "$tdir" != "$dir" ] && { [ -z "${floor[$tdir]+x}" ] || [ "${floor[$tdir]}" -ge "${floor[$dir]}" ]; }; then
                echo "llmc/$dir/${f##*/}: includes $inc, which is not below $dir/"; bad=1
            fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done
    return $bad
}

out=$(check_tree .); rc=$?
expect "the real tree keeps its floors${out:+: $out}" [ $rc = 0 ]

# a scratch tree: core/a.h, model/b.h (includes core: fine), then one fault at a time
mkdir -p "$tmp/t/llmc/core" "$tmp/t/llmc/model" "$tmp/t/llmc/head"
printf '#pragma once\n' > "$tmp/t/llmc/core/a.h"
printf '#include "../core/a.h"\n' > "$tmp/t/llmc/model/b.h"
printf '#include "../core/a.h"\n' > "$tmp/t/llmc/head/c.h"
out=$(check_tree "$tmp/t"); rc=$?
expect "a scratch tree with downward includes passes" [ $rc = 0 ]
printf '#include "../model/b.h"\n' >> "$tmp/t/llmc/core/a.h"
out=$(check_tree "$tmp/t"); rc=$?
expect "an include up a floor is reported" has "$out" "llmc/core/a.h: includes ../model/b.h, which is not below core/"
printf '#pragma once\n' > "$tmp/t/llmc/core/a.h"
printf '#include "../head/c.h"\n' > "$tmp/t/llmc/model/b.h"
out=$(check_tree "$tmp/t"); expect "an include down a floor passes" [ -z "$out" ]
cp -r "$tmp/t/llmc/head" "$tmp/t/llmc/attention"
printf '#include "../attention/c.h"\n' >> "$tmp/t/llmc/head/c.h"
out=$(check_tree "$tmp/t"); rc=$?
expect "an include across one floor is reported" has "$out" "llmc/head/c.h: includes ../attention/c.h, which is not below head/"
printf '#include "../core/gone.h"\n' > "$tmp/t/llmc/head/c.h"
out=$(check_tree "$tmp/t")
expect "a missing file is reported" has "$out" "includes ../core/gone.h, which does not exist"
printf '\n' > "$tmp/t/llmc/head/c.h"; printf '\n' > "$tmp/t/llmc/stray.h"
out=$(check_tree "$tmp/t")
expect "a file at llmc/'s top is reported" has "$out" "llmc/stray.h: a file at llmc/'s top"
test_end
