# publish_shards.sh: sourced by the data/fetch_*.sh scripts, which hold the data lock (data/lock.sh)
# while they call these functions.
#
# publish_shards NAME ENCODING TMP_OUT OUT DESCRIPTION DOCS [TRAIN_TOKENS VAL_TOKENS]: checks what
# make_shards --encoding ENCODING (gpt2, cl100k_base or o200k_base) wrote into TMP_OUT: NAME's first
# val and train shards exist, every shard has the encoding's layout (the header's magic and version:
# uint16 for gpt2, uint32 for the others) and a size that matches its header, the shards hold DOCS
# documents in all (counted as the encoding's <|endoftext|> tokens: make_shards puts one before every
# document) and, when given, exactly TRAIN_TOKENS and VAL_TOKENS tokens. Then it writes the manifest
# (DESCRIPTION lines as comments, each shard's token count, then the encoding and the checked totals as
# `encoding NAME`, `documents N`, `train_tokens N`, `val_tokens N`), moves TMP_OUT into place as OUT and
# writes OUT/.complete last: a directory counts as complete exactly when that marker exists, and the
# marker is only ever written after the counts were checked.
#
# check_complete NAME OUT [DOCS TRAIN_TOKENS VAL_TOKENS]: for an OUT that has its marker: checks that
# the marker records the totals (the given ones, when given) and that the shard headers still add up
# to them. A mismatch stops the calling script and says how to rebuild.

# shard_tokens FILE: the token count in a shard's header (int32 at byte 8, llmc/data/shard.h)
shard_tokens() { od -An -t d4 -j 8 -N 4 "$1" | tr -d ' '; }

# split_tokens DIR NAME SPLIT: the tokens of DIR/NAME_SPLIT_*.bin, from their headers
split_tokens() {
    local total=0 s
    for s in "$1/$2_$3_"*.bin; do
        [ -f "$s" ] && total=$((total + $(shard_tokens "$s")))
    done
    echo "$total"
}

# shard_width FILE: bytes per token, from the header's magic and version (llmc/data/shard.h): 2 for
# 20240520/1 (uint16 ids), 4 for 20240801/7 (llm.c's uint32 layout); nothing for any other header
shard_width() {
    case "$(od -An -t d4 -N 8 "$1" | tr -s ' ')" in
        " 20240520 1") echo 2 ;;
        " 20240801 7") echo 4 ;;
    esac
}

# encoding_eot ENCODING: the encoding's <|endoftext|> id (llmc/data/tokenizer_tiktoken.h's table; the
# special tokens of data/gpt2/encoder.json and data/tiktoken/*.json); fails for an unknown encoding
encoding_eot() {
    case "$1" in
        gpt2) echo 50256 ;;
        cl100k_base) echo 100257 ;;
        o200k_base) echo 199999 ;;
        *) echo "error: unknown encoding $1 (gpt2, cl100k_base or o200k_base)" >&2; return 1 ;;
    esac
}

# eot_count DIR NAME EOT WIDTH: the number of EOT tokens in DIR/NAME_*.bin, read as WIDTH-byte ids
# after the 1024-byte headers
eot_count() {
    local s
    for s in "$1/$2_"*.bin; do od -An -v -t "u$4" -w"$4" -j 1024 "$s"; done | { grep -c "^ *$3\$" || true; }
}

publish_shards() {
    local name=$1 encoding=$2 tmp_out=$3 out=$4 description=$5 want_docs=$6 want_train=${7:-} want_val=${8:-}
    local eot want_width=4 want_header="20240801 7"
    eot=$(encoding_eot "$encoding") || return 1
    [ "$encoding" != gpt2 ] || { want_width=2; want_header="20240520 1"; }
    if [ ! -f "$tmp_out/${name}_val_000000.bin" ] || [ ! -f "$tmp_out/${name}_train_000000.bin" ]; then
        echo "error: make_shards did not write ${name}_val_000000.bin and ${name}_train_000000.bin" >&2; return 1
    fi
    local s tokens size width
    for s in "$tmp_out/${name}"_*.bin; do
        tokens=$(shard_tokens "$s"); size=$(stat -c %s "$s"); width=$(shard_width "$s")
        if [ "$width" != "$want_width" ]; then
            echo "error: $s: not a $encoding shard (its header's magic and version are not $want_header)" >&2; return 1
        fi
        if [ "$size" != $((1024 + width * tokens)) ]; then
            echo "error: $s: $size bytes, but its header says $tokens tokens ($((1024 + width * tokens)) bytes)" >&2; return 1
        fi
    done
    local docs train val
    docs=$(eot_count "$tmp_out" "$name" "$eot" "$want_width")
    train=$(split_tokens "$tmp_out" "$name" train)
    val=$(split_tokens "$tmp_out" "$name" val)
    if [ "$docs" != "$want_docs" ]; then
        echo "error: the $name shards hold $docs documents (<|endoftext|> tokens, id $eot), expected $want_docs" >&2; return 1
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
        echo "# totals, checked before this marker was written (documents: <|endoftext|> tokens, id $eot, in the shards):"
        echo "encoding $encoding"
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
