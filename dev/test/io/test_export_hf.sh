#!/usr/bin/env bash
# test_export_hf.sh: build/export_hf's arguments and its messages for bad checkpoints, on the CPU. Each
# bad command exits 1 naming the argument or the file, and what to do with this tool (never -resume, the
# trainer's flag): -vocab without its value, an unknown option, a third argument, no OUT_DIR; a file too
# short for a header, a header whose sizes make no model (naming them), a header whose parameter count is
# not its sizes'. A refused export creates nothing. Prints `test_export_hf: N passed, M failed`.
set -u
cd "$(dirname "$0")/../../.."
source dev/test/testing.sh
test_begin test_export_hf
bin=${EXPORT_HF:-build/export_hf}
if [ ! -x "$bin" ]; then
    echo "FAIL $bin is not built (make build/export_hf)"
    failed=1; test_end; exit
fi

# expect_error "what" "fragment" args...: $bin args exits 1 with the fragment on stderr, and never
# advises -resume
expect_error() {
    local what=$1 frag=$2; shift 2
    local err rc
    err=$("$bin" "$@" 2>&1 >/dev/null); rc=$?
    expect "$what: rc $rc, stderr: $err" [ "$rc" = 1 ]
    expect "$what: no \"$frag\" in: $err" has "$err" "$frag"
    expect "$what: advises -resume: $err" hasnt "$err" "-resume"
}

expect_error "-vocab without a value" "error: -vocab needs a value: the path of GPT-2's vocab.bpe" -vocab
expect_error "-vocab last, without a value" "error: -vocab needs a value" "$tmp/c.bin" "$tmp/hf" -vocab
expect_error "an unknown option" "error: unknown option \"-x\" (the only option is -vocab PATH)" -x "$tmp/c.bin" "$tmp/hf"
expect_error "a third argument" "error: a third argument \"more\": export_hf takes CKPT and OUT_DIR" "$tmp/c.bin" "$tmp/hf" more
expect_error "no OUT_DIR" "error: no OUT_DIR: export_hf takes CKPT and OUT_DIR" "$tmp/c.bin"

# checkpoints: ckpt FILE LAYERS PARAMS: a header of d6's other sizes (GPT-2) with these layers and
# parameters, and PARAMS x 3 floats, so that the file's size is what the header says
le32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
ckpt() {
    {
        printf %b "$(le32 20251202)$(le32 2)"
        for v in "$2" 384 6 50257 50304 1024 "$3"; do printf %b "$(le32 "$v")"; done
        head -c $((17 * 4)) /dev/zero                   # the parameters' high half, step, rng, data position
        printf %b "$(le32 0)$(le32 3)$(le32 0)"          # settings bytes, tensors, checksum
        head -c $((227 * 4 + 12 * $3)) /dev/zero
    } > "$1"
}
head -c 100 /dev/zero > "$tmp/short.bin"
expect_error "a file shorter than a header" \
    "checkpoint $tmp/short.bin: 100 bytes, shorter than the 1024-byte header: truncated or not a checkpoint; export another checkpoint" \
    "$tmp/short.bin" "$tmp/hf"
ckpt "$tmp/layers0.bin" 0 1
expect_error "sizes that make no model" \
    "checkpoint $tmp/layers0.bin: corrupt header: model sizes that make no model (GPT-2, 0 layers, 384 channels, 6 heads, vocabulary 50257 (padded 50304), context 1024: a size below 1); export another checkpoint" \
    "$tmp/layers0.bin" "$tmp/hf"
ckpt "$tmp/params.bin" 6 1
expect_error "a parameter count not the sizes'" \
    "checkpoint $tmp/params.bin: 1 parameters, the model of these sizes has 30357504: corrupt header; export another checkpoint" \
    "$tmp/params.bin" "$tmp/hf"
expect "a refused export created $tmp/hf" [ ! -e "$tmp/hf" ]

test_end
