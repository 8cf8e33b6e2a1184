#!/usr/bin/env bash
# make_seeds.sh: the seed corpus of every harness of dev/fuzz/, written from the project's own files and
# tools (nothing of it is committed): build/fuzz/make_seeds (dev/fuzz/make_seeds.c: checkpoints,
# safetensors, Hugging Face directories, a small tiktoken file), build/make_shards (token shards of the
# docs), the fetched tokenizer files (data/gpt2/, data/tiktoken/) and the repository's text.
# Inputs of several parts are joined with fuzz.h's separator; a settings part is written with printf.
# usage: bash dev/fuzz/make_seeds.sh OUT   (the Makefile: OUT = build/fuzz/seeds; run from the repository's root)
set -euo pipefail
out=${1:?usage: make_seeds.sh OUT}
rm -rf "$out" "$out.tmp"
mkdir -p "$out.tmp"
tmp=$out.tmp
build/fuzz/make_seeds "$tmp"
rm -rf "$tmp"/tmp_*
mkdir -p "$tmp"/{shard,encode,make_shards,tokenizer_files}
sep=$'\n--8<--\n'

# seed NAME HARNESS PART...: the parts joined by the separator; a part @FILE is that file's bytes, any
# other part is printf's format (settings bytes: '\x01\x07')
seed() {
    local f=$tmp/$2/$1 first=1 part
    shift 2
    : > "$f"
    for part in "$@"; do
        [ "$first" = 1 ] || printf '%s' "$sep" >> "$f"
        first=0
        case "$part" in
            @*) cat "${part#@}" >> "$f" ;;
            *) printf "$part" >> "$f" ;;
        esac
    done
}

# --- texts: the repository's docs, cut into paragraphs, and text in many scripts ---------------------
texts=$tmp/texts
mkdir -p "$texts"
n=0
for f in README.md doc/*.md; do
    head -c 1500 "$f" > "$texts/doc_$n.txt"
    n=$((n + 1))
done
printf 'Hello world! It'"'"'s 2026; naïve café, Ünïcödé, 東京タワー, Ελληνικά, русский, עברית, العربية, हिन्दी,\n😀👍🏽 🇫🇷 e\xcc\x81 \xef\xbb\xbf 12345678 3.14 ++x --y\t\tend  \r\n\n\n   ' > "$texts/scripts.txt"
printf 'valid, then \xc3\x28 an invalid sequence, \xed\xa0\x80 a surrogate, \xf4\x90\x80\x80 past U+10FFFF, \xc0\xaf overlong' > "$texts/invalid.txt"

# --- shard: token shards by build/make_shards ------------------------------------------------------
for enc in gpt2 o200k_base; do
    build/make_shards --encoding "$enc" --out "$tmp/shards_$enc" --name s --shard-tokens 300 --val-every 0 \
        "$texts"/doc_*.txt "$texts/scripts.txt" 2> /dev/null
done
a16=$tmp/shards_gpt2/s_train_000000.bin b16=$tmp/shards_gpt2/s_train_000001.bin
a32=$tmp/shards_o200k_base/s_train_000000.bin b32=$tmp/shards_o200k_base/s_train_000001.bin
# settings: B-1, T-1, flags (1 shuffle, 2 sparse, 4 replace a.bin, 8 restore to bytes 5..12, 16/32 world),
# rank, batches before the save, global batch (int64), seed (uint64)
seed one_shard shard '\x01\x07\x01\x00\x03' "@$a16"
seed two_shards shard '\x03\x0f\x09\x00\x05\x07\x00\x00\x00\x00\x00\x00\x00\x39\x05' "@$a16" "@$b16"
seed two_ranks_u32 shard '\x01\x03\x11\x01\x02' "@$a32" "@$b32"
seed replaced shard '\x00\x07\x05\x00\x01' "@$a16" "@$b16" "@$a16"
seed sparse_sequential shard '\x02\x05\x02\x00\x02' "@$a16" "@$b16"

# --- encode: byte 0 the encoding, then text ---------------------------------------------------------
seed readme_gpt2 encode '\x00' "@$texts/doc_0.txt"
seed scripts_cl100k encode '\x01' "@$texts/scripts.txt"
seed scripts_o200k encode '\x02' "@$texts/scripts.txt"
seed invalid_gpt2 encode '\x00' "@$texts/invalid.txt"
seed docs_o200k encode '\x02' "@$texts/doc_1.txt"

# --- make_shards: settings (encoding, --shard-tokens - 16, --val-every, flags, earlier shards), documents
seed three_docs make_shards '\x00\x10\x02\x00\x03' "@$texts/doc_0.txt" "@$texts/scripts.txt" "@$texts/doc_2.txt"
seed list_o200k make_shards '\x01\x1f\x00\x08\x02' "@$texts/doc_1.txt" "@$texts/scripts.txt"
seed one_doc_empty_train make_shards '\x00\x04\x01\x04\x01' "@$texts/scripts.txt"
seed empty_docs make_shards '\x00\x00\x03\x00\x05' '' "@$texts/doc_3.txt" ''

# --- tokenizer_files: mode (0 vocab.bpe [+ encoder.json], 1 encoder.json, 2 tiktoken), the file(s) ---
head -n 3000 data/gpt2/vocab.bpe > "$texts/vocab_head.bpe"
seed vocab_bpe tokenizer_files '\x00' "@data/gpt2/vocab.bpe"
seed vocab_bpe_head tokenizer_files '\x00' "@$texts/vocab_head.bpe"
seed encoder_json tokenizer_files '\x01' "@data/gpt2/encoder.json"
# (the real tiktoken files are read by fuzz_encode; here, small ones with their patterns: make_seeds.c)

rm -rf "$texts" "$tmp"/shards_*
mv "$tmp" "$out"
