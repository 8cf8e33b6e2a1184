#!/usr/bin/env bash
# test_docs.sh: llmc/'s text explains the program as it is, and the front-page docs stay short. Git holds
# the history, so a file in a checked folder of llmc/ may not carry:
#   - a commit hash (7 to 40 hex digits, at least one a digit and one a letter), "Since <hash>" included;
#   - a variant number ("variant 3", "variants 6 and 7": the playground's numbering, which changes);
#   - a date (YYYY-MM-DD);
#   - "as measured", "as when they were measured" (say what the code does and why instead).
# README.md has at most 150 lines, doc/results.md at most 250. Checks the real tree, then a scratch
# tree with one fault at a time, so that each rule is seen to fail.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source dev/test/testing.sh
test_begin test_docs

# The folders of llmc/ whose text is checked, and those left out; every folder is in one list, so a new
# one is never skipped unseen.
checked=(core ptx data layers dist attention head optim model io train)
unchecked=()
README_MAX=150
RESULTS_MAX=250

hash_re='(?<!\.)\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b'
variant_re='\b[Vv]ariants? [0-9]'
date_re='\b[0-9]{4}-[0-9]{2}-[0-9]{2}\b'
measured_re='\bas (when )?(it was |they were )?measured\b'

# check_tree ROOT: one line per fault under ROOT; its status is 1 when there was one
check_tree() {
    local root=$1 bad=0 d dir f found what re n
    for d in "$root"/llmc/*/; do
        dir=${d%/}; dir=${dir##*/}
        if [[ " ${checked[*]} ${unchecked[*]} " != *" $dir "* ]]; then
            echo "llmc/$dir/: a folder in neither list of test_docs.sh (add it to checked)"; bad=1
        fi
    done
    for dir in "${checked[@]}"; do
        [ -d "$root/llmc/$dir" ] || continue
        for f in "$root/llmc/$dir"/*; do
            [ -f "$f" ] || continue
            for what in "a commit hash:$hash_re" "a variant number:$variant_re" "a date:$date_re" \
                        "\"as measured\":$measured_re"; do
                re=${what#*:}
                while IFS= read -r found; do
                    [ -n "$found" ] || continue
                    echo "llmc/$dir/${f##*/}:${found%%:*}: ${what%%:*}: ${found#*:}"; bad=1
                done < <(grep -nP -- "$re" "$f")
            done
        done
    done
    for what in "README.md:$README_MAX" "doc/results.md:$RESULTS_MAX"; do
        f=${what%:*}
        [ -f "$root/$f" ] || continue
        n=$(wc -l < "$root/$f")
        if [ "$n" -gt "${what##*:}" ]; then echo "$f: $n lines, more than ${what##*:}"; bad=1; fi
    done
    return $bad
}

out=$(check_tree .); rc=$?
expect "the real tree passes${out:+: $out}" [ $rc = 0 ]

# a scratch tree that passes, then one fault at a time
t=$tmp/t
mkdir -p "$t/llmc/core" "$t/llmc/head" "$t/doc"
printf '// a.h: why the loop runs backward: the last row is the longest\n' > "$t/llmc/core/a.h"
seq 150 > "$t/README.md"; seq 250 > "$t/doc/results.md"
out=$(check_tree "$t"); rc=$?
expect "a clean scratch tree passes${out:+: $out}" [ $rc = 0 ]

reported() { [ "$rc" = 1 ] && has "$out" "$1"; }  # the last check_tree failed, saying $1

fault() {  # fault WHAT LINE EXPECTED: LINE appended to core/a.h is reported, saying EXPECTED
    printf '%s\n' "$2" >> "$t/llmc/core/a.h"
    out=$(check_tree "$t"); rc=$?
    expect "$1 is reported ($out)" reported "llmc/core/a.h:2: $3"
    printf '// a.h: why the loop runs backward: the last row is the longest\n' > "$t/llmc/core/a.h"
}
fault '"Since <hash>"' '// Since 3205a5d the grid is (tiles, heads).' 'a commit hash'
fault "a bare commit hash" '// built as at 40c26ae' 'a commit hash'
fault "a full commit hash" '// see e86ab82f0c9d1b2a3e4f5a6b7c8d9e0f1a2b3c4d' 'a commit hash'
fault '"variant N"' "// variant 3's order of sums" 'a variant number'
fault '"variants N and M"' '// as variants 6 and 7 do' 'a variant number'
fault "a date" '// Version 1 (before 2026-12-04) is still read.' 'a date'
fault '"as measured"' '// the kernels are built as when they were measured' '"as measured"'

printf '// 0x5f3759df, 1.4426950408889634f, deadbeef, 20251202\n' >> "$t/llmc/core/a.h"
out=$(check_tree "$t")
expect "hex literals, float constants, words of letters and magic numbers pass${out:+: $out}" [ -z "$out" ]
printf '// a.h: why the loop runs backward: the last row is the longest\n' > "$t/llmc/core/a.h"

printf '// Since 3205a5d, variant 6, 2026-12-04\n' > "$t/llmc/head/h.h"
out=$(check_tree "$t"); rc=$?
expect "head/ is read like every folder ($out)" reported "llmc/head/h.h:1: a variant number"
rm "$t/llmc/head/h.h"
mkdir -p "$t/llmc/newfolder"
out=$(check_tree "$t"); rc=$?
expect "a folder in neither list is reported ($out)" reported "llmc/newfolder/: a folder in neither list"
rmdir "$t/llmc/newfolder"

seq 151 > "$t/README.md"
out=$(check_tree "$t"); rc=$?
expect "a README of 151 lines is reported ($out)" reported "README.md: 151 lines, more than 150"
seq 150 > "$t/README.md"; seq 251 > "$t/doc/results.md"
out=$(check_tree "$t"); rc=$?
expect "a doc/results.md of 251 lines is reported ($out)" reported "doc/results.md: 251 lines, more than 250"
test_end
