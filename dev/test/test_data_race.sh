#!/usr/bin/env bash
# test_data_race.sh: the starter data is fetched and published once, and completely, at any -j and
# with two makes at once. (`make -j8 test` once ran the fetch twice at once, through a `make data`
# inside train_gpt's recipe, and published a 350-document corpus marked complete.) In a scratch copy
# of the sources with no data, so that the data/ of this checkout is never touched:
#   1. `make -n -j8 GOALS` for the goal sets that make the data (data, test, train_gpt, ...) must list
#      the data scripts once each: a second owner of a fetch (a recipe that runs `make data` again)
#      lists them twice;
#   2. two `make -j8 data` run at once. Both must succeed, they must have overlapped (one waited for
#      the other's lock), exactly one may publish, no temporary file or directory may be left, and
#      the result must be what a clean serial `make data` gives (its make_shards summary reads
#      "train 827 documents, 3476006 tokens", "val 44 documents, 179352 tokens"): 871 documents
#      (counted as <|endoftext|> tokens in the shards: 827 in train, 44 in val), 3,476,006 train and
#      179,352 val tokens in the headers, shard sizes to match, 871 extracted documents, and a marker
#      that records the same totals.
# The npm tarballs in data/.cache/npm (there after `make data`) are copied into the scratch copy, so
# nothing is downloaded; extraction, tokenization and the publish step run in full (about 10 s).
# Prints `test_data_race: N passed, M failed`.
set -euo pipefail
cd "$(dirname "$0")/../.."
DOCS=871; TRAIN_DOCS=827; VAL_DOCS=44; TRAIN_TOKENS=3476006; VAL_TOKENS=179352
passed=0; failed=0
expect() {  # expect "what" CONDITION...: one check
    local what=$1; shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $what"; fi
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/test_data_race.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/data/.cache"
cp -r Makefile ./*.cu llmc dev "$scratch/"
cp data/*.sh data/*.c "$scratch/data/"
if [ -d data/.cache/npm ]; then cp -r data/.cache/npm "$scratch/data/.cache/"; fi
# makes of their own, not jobs of the make that runs this test
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES

# --- 1. one owner per fetch ----------------------------------------------------------------------
for goals in "data" "test" "train_gpt" "data train_gpt" "train_gpt test"; do
    # shellcheck disable=SC2086  # $goals is a list of goals
    plan=$(make -C "$scratch" --no-print-directory -n -j8 $goals 2>&1) || {
        expect "make -n -j8 $goals failed: $plan" false; continue; }
    scripts="data/install_deps.sh data/fetch_gpt2_bpe.sh data/fetch_starter.sh"
    case " $goals " in *" test "*) scripts="$scripts data/fetch_tiktoken.sh" ;; esac
    for script in $scripts; do
        n=$(printf '%s\n' "$plan" | grep -cx "bash $script" || true)
        expect "make -n -j8 $goals: bash $script listed $n times, expected once" [ "$n" = 1 ]
    done
done

# --- 2. two makes at once ------------------------------------------------------------------------
for i in 1 2; do
    make -C "$scratch" --no-print-directory -j8 data > "$scratch/make$i.log" 2>&1 &
    pid[i]=$!
done
for i in 1 2; do
    rc=0; wait "${pid[$i]}" || rc=$?
    expect "make -j8 data #$i: exit $rc; its output:
$(sed 's/^/    /' "$scratch/make$i.log")" [ "$rc" = 0 ]
done
logs=$(cat "$scratch/make1.log" "$scratch/make2.log")
count() { printf '%s\n' "$logs" | grep -c -- "$1" || true; }
n=$(count "fetch.lock; waiting")
expect "the two makes did not overlap on a fetch (no lock wait in their output): the race was not exercised" [ "$n" -ge 1 ]
n=$(count "^data/starter: complete in")
expect "the starter corpus was published $n times, expected once" [ "$n" = 1 ]
n=$(count "^data/gpt2: vocab.bpe and encoder.json fetched")
expect "the GPT-2 BPE files were fetched $n times, expected once" [ "$n" = 1 ]
left=$(cd "$scratch" && find data build -name '*.tmp*' | sort | tr '\n' ' ')
expect "temporary files left behind: $left" [ -z "$left" ]

out=$scratch/data/starter
shards=$(cd "$out" 2>/dev/null && ls | tr '\n' ' ')
expect "data/starter holds $shards, expected the two shards" \
    [ "$shards" = "starter_train_000000.bin starter_val_000000.bin " ]
for split in train val; do
    s=$out/starter_${split}_000000.bin
    [ -f "$s" ] || { expect "$s missing" false; continue; }
    [ "$split" = train ] && want_docs=$TRAIN_DOCS want_tokens=$TRAIN_TOKENS || want_docs=$VAL_DOCS want_tokens=$VAL_TOKENS
    tokens=$(od -An -t d4 -j 8 -N 4 "$s" | tr -d ' ')
    docs=$(od -An -v -t u2 -w2 -j 1024 "$s" | grep -c '^ *50256$' || true)
    size=$(stat -c %s "$s")
    expect "$split: $tokens tokens in the header, expected $want_tokens" [ "$tokens" = "$want_tokens" ]
    expect "$split: $docs documents, expected $want_docs" [ "$docs" = "$want_docs" ]
    expect "$split: $size bytes, expected $((1024 + 2 * want_tokens))" [ "$size" = $((1024 + 2 * want_tokens)) ]
done
n=$(find "$scratch/data/.cache/starter/docs" -name '*.txt' 2>/dev/null | wc -l)
expect "$n extracted documents, expected $DOCS" [ "$n" = "$DOCS" ]
marker=$(cat "$out/.complete" 2>/dev/null || true)
for kv in "documents $DOCS" "train_tokens $TRAIN_TOKENS" "val_tokens $VAL_TOKENS"; do
    expect "data/starter/.complete lacks the line \"$kv\"; it reads:
$marker" grep -qx "$kv" <<< "$marker"
done

echo "test_data_race: $passed passed, $failed failed"
[ "$failed" = 0 ]
