#!/usr/bin/env bash
# test_data_race.sh: the starter data is fetched and published once, and completely, at any -j and
# with two makes at once. (`make -j8 test` once ran the fetch twice at once, through a `make data`
# inside train_gpt's recipe, and published a 350-document corpus marked complete.) In a scratch copy
# of the sources with no data, so that the data/ of this checkout is never touched:
#   1. `make -n -j8 GOALS` for the goal sets that make the data (data, test, train_gpt,
#      data-starter-o200k, ...) must list the data scripts once each (data/fetch_starter.sh once per
#      encoding): a second owner of a fetch (a recipe that runs `make data` again) lists them twice;
#   2. two `make -j8 data` run at once. Both must succeed, they must have overlapped (one waited for
#      the other's lock), exactly one may publish, no temporary file or directory may be left, and
#      the result must be what a clean serial `make data` gives (its make_shards summary reads
#      "train 827 documents, 3476006 tokens", "val 44 documents, 179352 tokens"): 871 documents
#      (counted as <|endoftext|> tokens in the shards: 827 in train, 44 in val), 3,476,006 train and
#      179,352 val tokens in the headers, shard sizes to match, 871 extracted documents, and a marker
#      that records the same totals;
#   3. publish_shards (data/publish_shards.sh) on hand-made uint32 shards (llm.c's layout, magic
#      20240801, version 7) of 3 documents in o200k_base: it counts 3 (the <|endoftext|> id 199999
#      read as uint32, not GPT-2's 50256 read as uint16) and publishes them with a marker, and it
#      refuses them, publishing nothing, when told 4 documents, when told cl100k_base (whose
#      <|endoftext|> is 100257), when told gpt2 (a uint16 layout), and when a shard is cut short.
# The npm tarballs in data/.cache/npm (there after `make data`) are copied into the scratch copy, so
# nothing is downloaded; extraction, tokenization and the publish step run in full (about 10 s).
# Prints `test_data_race: N passed, M failed`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DOCS=871; TRAIN_DOCS=827; VAL_DOCS=44; TRAIN_TOKENS=3476006; VAL_TOKENS=179352
source dev/test/testing.sh
test_begin test_data_race
scratch=$tmp  # the copy of the tree the makes run in
mkdir -p "$scratch/data/.cache"
cp -r Makefile ./*.cu llmc dev "$scratch/"
cp data/*.sh data/*.c "$scratch/data/"
if [ -d data/.cache/npm ]; then cp -r data/.cache/npm "$scratch/data/.cache/"; fi
# makes of their own, not jobs of the make that runs this test
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES

# --- 1. one owner per fetch ----------------------------------------------------------------------
for goals in "data" "test" "train_gpt" "data train_gpt" "train_gpt test" \
             "data-starter-o200k data-starter-cl100k" "train_gpt test data-starter-o200k"; do
    # shellcheck disable=SC2086  # $goals is a list of goals
    plan=$(make -C "$scratch" --no-print-directory -n -j8 $goals 2>&1) || {
        expect "make -n -j8 $goals failed: $plan" false; continue; }
    scripts=(data/install_deps.sh data/fetch_gpt2_bpe.sh data/fetch_starter.sh)
    case " $goals " in *" test "*|*" data-starter-"*) scripts+=(data/fetch_tiktoken.sh) ;; esac
    # make test makes the o200k_base starter shards (dev/test/train/test_train_llama_gpu.sh trains on them)
    case " $goals " in *" data-starter-o200k "*|*" test "*) scripts+=("data/fetch_starter.sh --encoding o200k_base") ;; esac
    case " $goals " in *" data-starter-cl100k "*) scripts+=("data/fetch_starter.sh --encoding cl100k_base") ;; esac
    for script in "${scripts[@]}"; do
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

# --- 3. publish_shards on uint32 shards -----------------------------------------------------------
# u32le N...: each N as 4 little-endian bytes
u32le() {
    local v
    for v; do printf '%b' "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((v & 255)) $((v >> 8 & 255)) $((v >> 16 & 255)) $((v >> 24 & 255)))"; done
}
# u32_shard FILE ID...: a shard in llm.c's uint32 layout holding the ids
u32_shard() {
    local f=$1; shift
    { u32le 20240801 7 "$#"; head -c $((1024 - 12)) /dev/zero; u32le "$@"; } > "$f"
}
# 3 documents, each after o200k_base's <|endoftext|> (199999). 50256 (GPT-2's <|endoftext|>, an
# ordinary token here) and 115792 (0x1C450, whose low 16 bits are 50256) are not documents.
pub=$scratch/publish
new_shards() {
    rm -rf "$pub"; mkdir -p "$pub/in"
    u32_shard "$pub/in/t_val_000000.bin" 199999 10 50256
    u32_shard "$pub/in/t_train_000000.bin" 199999 115792 7 199999 8
}
# publish ENCODING DOCS [cut]: publish_shards on fresh shards (with `cut`, the val shard 4 bytes short)
# into $pub/out; its exit status, its output in $pub.log
publish() {
    new_shards
    [ "${3:-}" != cut ] || truncate -s -4 "$pub/in/t_val_000000.bin"
    (source data/publish_shards.sh && publish_shards t "$1" "$pub/in" "$pub/out" "test shards" "$2" 5 3) > "$pub.log" 2>&1
}
rc=0; publish o200k_base 3 || rc=$?
expect "publish_shards o200k_base with 3 documents: exit $rc, expected 0; its output:
$(cat "$pub.log")" [ "$rc" = 0 ]
marker=$(cat "$pub/out/.complete" 2>/dev/null || true)
for kv in "encoding o200k_base" "documents 3" "train_tokens 5" "val_tokens 3"; do
    expect "the published marker lacks the line \"$kv\"; it reads:
$marker" grep -qx "$kv" <<< "$marker"
done
# refused: encoding|documents|spoilt|what the error must say
for case in "o200k_base|4||hold 3 documents" "cl100k_base|3||hold 0 documents" \
            "gpt2|3||not a gpt2 shard" "o200k_base|3|cut|but its header says 3 tokens"; do
    IFS="|" read -r enc ndocs spoil says <<< "$case"
    rc=0; publish "$enc" "$ndocs" "$spoil" || rc=$?
    expect "publish_shards $enc, $ndocs documents${spoil:+, a shard cut short}: exit $rc, expected a refusal" [ "$rc" != 0 ]
    expect "publish_shards $enc, $ndocs documents${spoil:+, a shard cut short}: published $pub/out anyway" [ ! -e "$pub/out" ]
    expect "publish_shards $enc, $ndocs documents${spoil:+, a shard cut short}: its error lacks \"$says\"; it reads:
$(cat "$pub.log")" grep -qF -- "$says" "$pub.log"
done

test_end
