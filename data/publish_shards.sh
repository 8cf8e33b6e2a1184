# publish_shards.sh: sourced by the data/fetch_*.sh scripts.
# publish_shards NAME TMP_OUT OUT DESCRIPTION: checks that make_shards wrote NAME's first val and train
# shards into TMP_OUT, writes the manifest (DESCRIPTION lines as comments, then each shard's token
# count from its header), moves TMP_OUT into place as OUT and writes OUT/.complete last: a directory
# counts as complete exactly when that marker exists.
publish_shards() {
    local name=$1 tmp_out=$2 out=$3 description=$4
    if [ ! -f "$tmp_out/${name}_val_000000.bin" ] || [ ! -f "$tmp_out/${name}_train_000000.bin" ]; then
        echo "error: make_shards did not write ${name}_val_000000.bin and ${name}_train_000000.bin" >&2; return 1
    fi
    {
        printf '%s\n' "$description" | sed 's/^/# /'
        echo "# tokens per shard (from the headers):"
        local s
        for s in "$tmp_out"/"$name"_*.bin; do
            echo "$(basename "$s") $(od -An -t d4 -j 8 -N 4 "$s" | tr -d ' ')"
        done
    } > "$tmp_out/.complete.tmp"
    rm -rf "$out"
    mv "$tmp_out" "$out"
    cat "$out/.complete.tmp"
    mv "$out/.complete.tmp" "$out/.complete"  # last: from here on $out counts as complete
    echo "$out: complete in ${SECONDS}s"
}
