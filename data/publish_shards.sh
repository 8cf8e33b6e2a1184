# publish_shards.sh: sourced by the data/fetch_*.sh scripts, which hold the data lock (data/lock.sh)
# while they call these functions.
#
# publish_shards NAME TMP_OUT OUT DESCRIPTION DOCS [TRAIN_TOKENS VAL_TOKENS]: checks what make_shards
# wrote into TMP_OUT: NAME's first val and train shards exist, every shard's size matches its header,
# the shards hold DOCS documents in all (counted as <|endoftext|> tokens: make_shards puts one before
# every document) and, when given, exactly TRAIN_TOKENS and VAL_TOKENS tokens. Then it writes the
# manifest (DESCRIPTION lines as comments, each shard's token count, then the checked totals as
# `documents N`, `train_tokens N`, `val_tokens N`), moves TMP_OUT into place as OUT and writes
# OUT/.complete last: a directory counts as complete exactly when that marker exists, and the marker
# is only ever written after the counts were checked.
#
# check_complete NAME OUT [DOCS TRAIN_TOKENS VAL_TOKENS]: for an OUT that has its marker: checks that
# the marker records the totals (the given ones, when given) and that the shard headers still add up
# to them. A mismatch stops the calling script and says how to rebuild.

# shard_tokens FILE: the token count in a shard's header (int32 at byte 8, llmc/shard.h)
shard_tokens() { od -An -t d4 -j 8 -N 4 "$1" | tr -d ' '; }

# split_tokens DIR NAME SPLIT: the tokens of DIR/NAME_SPLIT_*.bin, from their headers
split_tokens() {
    local total=0 s
    for s in "$1/$2_$3_"*.bin; do
        [ -f "$s" ] && total=$((total + $(shard_tokens "$s")))
    done
    echo "$total"
}

# eot_count DIR NAME: the number of <|endoftext|> (50256) tokens in DIR/NAME_*.bin, after the
# 1024-byte headers
eot_count() {
    local s
    for s in "$1/$2_"*.bin; do od -An -v -t u2 -w2 -j 1024 "$s"; done | { grep -c '^ *50256$' || true; }
}

publish_shards() {
    local name=$1 tmp_out=$2 out=$3 description=$4 want_docs=$5 want_train=${6:-} want_val=${7:-}
    if [ ! -f "$tmp_out/${name}_val_000000.bin" ] || [ ! -f "$tmp_out/${name}_train_000000.bin" ]; then
        echo "error: make_shards did not write ${name}_val_000000.bin and ${name}_train_000000.bin" >&2; return 1
    fi
    local s tokens size
    for s in "$tmp_out/${name}"_*.bin; do
        tokens=$(shard_tokens "$s"); size=$(stat -c %s "$s")
        if [ "$size" != $((1024 + 2 * tokens)) ]; then
            echo "error: $s: $size bytes, but its header says $tokens tokens ($((1024 + 2 * tokens)) bytes)" >&2; return 1
        fi
    done
    local docs train val
    docs=$(eot_count "$tmp_out" "$name")
    train=$(split_tokens "$tmp_out" "$name" train)
    val=$(split_tokens "$tmp_out" "$name" val)
    if [ "$docs" != "$want_docs" ]; then
        echo "error: the $name shards hold $docs documents (<|endoftext|> tokens), expected $want_docs" >&2; return 1
    fi
    if [ -n "$want_train" ] && [ "$train/$val" != "$want_train/$want_val" ]; then
        echo "error: the $name shards hold $train train and $val val tokens, expected $want_train and $want_val" \
             "(the pinned packages give these exactly: did the tokenizer change?)" >&2; return 1
    fi
    {
        printf '%s\n' "$description" | sed 's/^/# /'
        echo "# tokens per shard (from the headers):"
        for s in "$tmp_out/${name}"_*.bin; do
            echo "$(basename "$s") $(shard_tokens "$s")"
        done
        echo "# totals, checked before this marker was written (documents: <|endoftext|> tokens in the shards):"
        echo "documents $docs"
        echo "train_tokens $train"
        echo "val_tokens $val"
    } > "$tmp_out/.complete.tmp"
    rm -rf "$out"
    mv "$tmp_out" "$out"
    cat "$out/.complete.tmp"
    mv "$out/.complete.tmp" "$out/.complete"  # last: from here on $out counts as complete
    echo "$out: complete in ${SECONDS}s"
}

# marker_value OUT KEY: the number after KEY in OUT/.complete, or nothing
marker_value() { sed -n "s/^$2 \([0-9][0-9]*\)\$/\1/p" "$1/.complete" | tail -n 1; }

check_complete() {
    local name=$1 out=$2 want_docs=${3:-} want_train=${4:-} want_val=${5:-}
    local fix="remove $out/ or rebuild it with \`bash $0 --force\`"
    local docs train val
    docs=$(marker_value "$out" documents)
    train=$(marker_value "$out" train_tokens)
    val=$(marker_value "$out" val_tokens)
    if [ -z "$docs" ] || [ -z "$train" ] || [ -z "$val" ]; then
        echo "error: $out/.complete records no document and token totals (an older format?); $fix" >&2; return 1
    fi
    if [ -n "$want_docs" ] && [ "$docs/$train/$val" != "$want_docs/$want_train/$want_val" ]; then
        echo "error: $out/.complete records $docs documents, $train train and $val val tokens; expected" \
             "$want_docs, $want_train and $want_val; $fix" >&2; return 1
    fi
    if [ "$(split_tokens "$out" "$name" train)/$(split_tokens "$out" "$name" val)" != "$train/$val" ]; then
        echo "error: the shard headers in $out/ do not add up to the tokens $out/.complete records; $fix" >&2; return 1
    fi
    echo "$out: complete ($docs documents, $train train and $val val tokens); remove it or pass --force to rebuild"
}
