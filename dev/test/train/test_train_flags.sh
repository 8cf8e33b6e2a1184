#!/usr/bin/env bash
# test_train_flags.sh: ./train_gpt's flags and bad input, without a GPU (every check below fails before
# the GPU is touched). Each bad command must exit 1 with an error naming the flag or file (one flag per
# message; a repeated flag is an error); -h must list every flag of the table in train_gpt.cu; a refused
# run creates nothing on disk; a bad launch environment or a rendezvous that does not complete is refused
# naming the variable or the wait; the model family's flags (-model, -size, -encoding) are checked
# against each other, the defaults of the data follow the encoding, and -resume refuses a checkpoint of
# the other family, or of another -size or -encoding, naming the file; -init reads and checks every
# value (a NaN is refused naming the tensor) before the GPU, and refuses a train_gpt checkpoint with
# what to do; -out and -export_hf are checked at start-up (a file, a directory of other files, -out
# itself, GPT-2's tokenizer files missing), creating nothing. Prints `test_train_flags: N passed, M
# failed`.
set -u
cd "$(dirname "$0")/../../.."
source dev/test/testing.sh
test_begin test_train_flags  # $tmp: the scratch directory of the cases that write files
bin=./train_gpt

# refused RC ERR FRAGMENT: exit status 1 and the fragment in the error text
refused() { [ "$1" = 1 ] && has "$2" "$3"; }
# expect_error "what" "message fragment" args...: ./train_gpt args exits 1 with the fragment on stderr
expect_error() {
    local what=$1 frag=$2; shift 2
    local err rc
    err=$("$bin" "$@" 2>&1 >/dev/null); rc=$?
    expect "$what: rc $rc, stderr: $err" refused "$rc" "$err" "$frag"
}
# lists TEXT REGEX: a line of TEXT matches the extended regex; unlisted: none does
lists() { grep -qE -- "$2" <<< "$1"; }
unlisted() { ! lists "$@"; }

help=$("$bin" -h); rc=$?
expect "-h exits $rc" [ "$rc" = 0 ]
# every flag declared in the table appears in the usage text
for flag in $(grep -oE '^\s*\{"-[a-z_]+"' train_gpt.cu | grep -oE '\-[a-z_]+'); do
    expect "-h does not list $flag" lists "$help" "^\s*$flag\s"
done

# the model family's flags show their defaults
for line in "-model .*(default gpt2)" "-size .*llama-1b.*(default llama-30m)" "-encoding .*o200k_base.*(default auto)"; do
    expect "-h has no line matching \"$line\"" lists "$help" "^\s*$line"
done

expect_error "unknown flag" 'unknown flag "-nope"' -nope 1
expect_error "missing value" "flag -b needs a value" -b
expect_error "not an integer" 'flag -b expects an integer, got "x"' -b x
expect_error "not a number" 'flag -lr expects a number' -lr fast
expect_error "beyond a float's range" "flag -lr: 1e39 is beyond a float's range (at most 3.4e38 in magnitude)" -lr 1e39
expect_error "infinite" "flag -lr: inf is infinite: give a finite number" -lr inf
expect_error "beyond an int's range" "flag -b: 99999999999 is beyond an int's range [-2147483647, 2147483647]" -b 99999999999
expect_error "negative device" "-device -1: a CUDA device's index, 0 or more" -device -1
expect_error "bad head" "-head foo: choose fused, staged, blocks, chunks or unfused" -head foo
expect_error "bad recompute" "-recompute 2: choose 0 or 1" -recompute 2
expect_error "bad profile" "-profile 2: choose 0 or 1" -profile 2
expect_error "bad gemm_tune" "-gemm_tune 2: choose 0 or 1" -gemm_tune 2
expect_error "bad head scratch" "-head_scratch -1" -head_scratch -1
expect_error "bad schedule" "-schedule step: choose cosine or linear" -schedule step
expect_error "steps 0 without resume" "-steps 0" -steps 0
expect_error "no train shards" "no shard file matches the pattern nothere/*.bin" -train 'nothere/*.bin'

# each bad value gets a message for its own flag only
expect_error "beta1 out of range" "-beta1 1.5: must be in [0, 1)" -beta1 1.5
err=$("$bin" -beta1 1.5 2>&1 >/dev/null)
expect "-beta1 1.5 names other flags: $err" unlisted "$err" '-beta2|-wd|-clip|-eps'
expect_error "beta2 out of range" "-beta2 -0.5: must be in [0, 1)" -beta2 -0.5
expect_error "negative clip" "-clip -1: the clipping norm" -clip -1
expect_error "negative warmup" "-warmup -3: warm-up steps" -warmup -3
expect_error "val_batches 0" "-val_batches 0: must be 1 or more" -val_batches 0
expect_error "max_bad_steps 0" "-max_bad_steps 0: must be 1 or more" -max_bad_steps 0
# a repeated flag is refused, naming both values
expect_error "repeated flag" "flag -b given twice (4, then 8)" -b 4 -b 8
# a directory matched as a shard is reported as one
expect_error "directory as a shard" "data/starter: a directory, not a shard file" -train data/starter

# the model family: each flag of the other family is refused, naming it and what to do
expect_error "bad model" "-model bert: choose gpt2 or llama" -model bert
expect_error "-size with gpt2" "-size llama-125m: a Llama-style size; GPT-2's size is -depth" -size llama-125m
expect_error "-depth with llama" "-depth 12: a GPT-2 size; the Llama-style model's is -size (llama-30m," -model llama -depth 12
expect_error "unknown size" "-size llama-2b: the Llama-style sizes are llama-30m, llama-125m, llama-350m, llama-1b" \
    -model llama -size llama-2b
expect_error "gpt2 with another encoding" "-encoding o200k_base: GPT-2's vocabulary is gpt2's" -encoding o200k_base
expect_error "unknown encoding" "-encoding p50k: choose gpt2, cl100k_base, o200k_base" -model llama -encoding p50k
expect_error "-recompute with llama" "-recompute 1: recomputes GPT-2's GELU" -model llama -recompute 1
expect_error "llama's context" "-t 4097: the sequence length must be in [1, 4096]" -model llama -t 4097
expect_error "GPT-2's context" "-t 1025: the sequence length must be in [1, 1024]" -t 1025
expect_error "top-k of o200k_base" "-top_k 200020: must be in [0, 200019]" -model llama -top_k 200020
expect_error "top-k of gpt2" "-top_k 50258: must be in [0, 50257]" -top_k 50258

# nothing is created on disk before validation passes
for args in "-train nothere/*.bin" "-val_batches 100000" "-beta1 2" "-b 4 -b 8" "-resume $tmp/none.bin" \
            "-model llama -depth 12" "-model llama -size llama-2b"; do
    rm -rf "$tmp/out"
    # shellcheck disable=SC2086  # the words of $args are separate flags
    "$bin" $args -out "$tmp/out" >/dev/null 2>&1
    expect "$args: $tmp/out was created by a refused run" [ ! -e "$tmp/out" ]
done
rm -rf "$tmp/out"

# the run's outputs are checked at start-up, before the data (-train nothere/ is not reached) and the GPU,
# and before any training they would lose: -out a directory it can write in, -export_hf one an export
# can replace (absent, empty or an earlier export), GPT-2's tokenizer files readable; nothing is created
: > "$tmp/afile"
mkdir -p "$tmp/notes"; echo mine > "$tmp/notes/notes.txt"
nodata=(-train 'nothere/*.bin')
expect_error "-out a file" "-out $tmp/afile: $tmp/afile exists and is not a directory" -out "$tmp/afile" "${nodata[@]}"
expect_error "-out under a file" "-out $tmp/afile/run: $tmp/afile exists and is not a directory" \
    -out "$tmp/afile/run" "${nodata[@]}"
expect_error "-export_hf a file" "-export_hf $tmp/afile: $tmp/afile exists and is not a directory" \
    -export_hf "$tmp/afile" -out "$tmp/out" "${nodata[@]}"
expect_error "-export_hf under a file (llama)" "-export_hf $tmp/afile/hf: cannot create $tmp/afile/hf: $tmp/afile is not a directory" \
    -model llama -export_hf "$tmp/afile/hf" -out "$tmp/out" "${nodata[@]}"
expect_error "-export_hf a directory of other files" \
    "-export_hf $tmp/notes: $tmp/notes holds notes.txt, which no export writes" -export_hf "$tmp/notes" -out "$tmp/out" "${nodata[@]}"
expect_error "-export_hf the directory of -out" "-export_hf $tmp/out/: the directory of -out" \
    -export_hf "$tmp/out/" -out "$tmp/out" "${nodata[@]}"
expect_error "-export_hf without GPT-2's tokenizer files" "-export_hf $tmp/hf: cannot read $tmp/none.bpe" \
    -export_hf "$tmp/hf" -vocab "$tmp/none.bpe" -sample_tokens 0 -out "$tmp/out" "${nodata[@]}"
expect "the refused outputs created $tmp/out, $tmp/hf or files in $tmp/notes" \
    [ ! -e "$tmp/out" -a ! -e "$tmp/hf" -a "$(ls -A "$tmp/notes")" = notes.txt ]
expect "the refused outputs left a temporary directory: $(ls -A "$tmp")" hasnt "$(ls -A "$tmp")" ".tmp."
# checked: the run goes on to the data
expect_error "-export_hf an earlier export's directory" "no shard file matches the pattern nothere/*.bin" \
    -export_hf "$tmp/hf" -out "$tmp/out" "${nodata[@]}"
rm -rf "$tmp/notes" "$tmp/afile"

# uint32 shards (make_shards --encoding cl100k_base/o200k_base; llm.c's Llama-3 layout): ids below
# GPT-2's 50257 load (both loaders pass, then -val_batches is refused); an id >= 50257 is refused at
# start-up, naming the file and --encoding gpt2.
le32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
u32_shard() {  # u32_shard FILE N LAST_ID: N ids, all 0 but the last
    { printf %b "$(le32 20240801)$(le32 7)$(le32 "$2")"; head -c $((253 * 4 + 4 * ($2 - 1))) /dev/zero
      printf %b "$(le32 "$3")"; } > "$1"
}
u32_shard "$tmp/small.bin" 1000 50256
u32_shard "$tmp/big.bin" 1000 50257
size=$(stat -c %s "$tmp/small.bin")
expect "the test's uint32 shard has $size bytes" [ "$size" = $((1024 + 4 * 1000)) ]
expect_error "uint32 shard, ids < 50257" "the val split $tmp/small.bin holds 3 batches" \
    -train "$tmp/small.bin" -val "$tmp/small.bin" -b 4 -t 64 -val_batches 100000
expect_error "uint32 shard, id 50257 (file)" "$tmp/big.bin: token 999 (byte offset 5020) has id 50257" \
    -train "$tmp/big.bin" -val "$tmp/small.bin" -b 4 -t 64
expect_error "uint32 shard, id 50257 (encoding)" "encoding does not match the model" \
    -train "$tmp/small.bin" -val "$tmp/big.bin" -b 4 -t 64
expect_error "uint32 shard, id 50257 (hint)" "--encoding gpt2" -train "$tmp/big.bin" -b 4 -t 64
# -model llama reads them against o200k_base's 200019 ids: 50257 loads, 200019 is refused; uint16 shards
# (GPT-2's layout) are refused for a tiktoken encoding, naming the flag
u32_shard "$tmp/o200k_big.bin" 1000 200019
{ printf %b "$(le32 20240520)$(le32 1)$(le32 1000)"; head -c $((253 * 4 + 2 * 1000)) /dev/zero; } > "$tmp/u16.bin"
expect_error "llama on uint32 shards, ids < 200019" "the val split $tmp/big.bin holds 3 batches" \
    -model llama -train "$tmp/big.bin" -val "$tmp/big.bin" -b 4 -t 64 -val_batches 100000
expect_error "llama, id 200019" "$tmp/o200k_big.bin: token 999 (byte offset 5020) has id 200019" \
    -model llama -train "$tmp/o200k_big.bin" -val "$tmp/big.bin" -b 4 -t 64
expect_error "llama on uint16 shards (train)" "-train $tmp/u16.bin: uint16 shards, GPT-2's layout (gpt2 ids), but -encoding is o200k_base" \
    -model llama -train "$tmp/u16.bin" -val "$tmp/big.bin" -b 4 -t 64
expect_error "llama on uint16 shards (val)" "-val $tmp/u16.bin: uint16 shards" -model llama -train "$tmp/big.bin" -val "$tmp/u16.bin" -b 4 -t 64
expect_error "llama on uint16 shards (hint)" "make data-starter-o200k" -model llama -train "$tmp/u16.bin" -b 4 -t 64
expect_error "llama with -encoding gpt2 reads uint16 shards" "the val split $tmp/u16.bin holds 3 batches" \
    -model llama -encoding gpt2 -train "$tmp/u16.bin" -val "$tmp/u16.bin" -b 4 -t 64 -val_batches 100000
# the default shards follow the encoding (seen from a directory without data/)
abs_bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
for case in "data/starter/starter_train_*.bin|" "data/starter_o200k/starter_train_*.bin|-model llama" \
            "data/starter_cl100k/starter_train_*.bin|-model llama -encoding cl100k_base"; do
    want=${case%%|*}
    # shellcheck disable=SC2086  # the words are separate flags
    err=$(cd "$tmp" && "$abs_bin" ${case#*|} 2>&1 >/dev/null); rc=$?
    expect "default shards of \"${case#*|}\": rc $rc, stderr: $err" refused "$rc" "$err" \
        "no shard file matches the pattern $want"
done

# -resume of a checkpoint of either family: its header is read before anything else. fake_ckpt FILE
# FAMILY SETTINGS: a checkpoint of 1 parameter (header, settings, three floats), which passes the reader's
# checks of the header and the file size; family 0 GPT-2 (d6's sizes), 1 Llama-style (llama-30m's).
# The checksum slot is 0: it is checked later, after the family and the settings.
fake_ckpt() {
    local n=${#3} sizes
    if [ "$2" = 0 ]; then sizes="6 384 6 50257 50304 1024"; else sizes="10 512 8 200019 200064 4096"; fi
    {
        printf %b "$(le32 20251202)$(le32 2)"
        for v in $sizes; do printf %b "$(le32 "$v")"; done
        printf %b "$(le32 1)$(le32 0)"; head -c $((16 * 4)) /dev/zero  # parameters 1; step, rng, data position 0
        printf %b "$(le32 "$n")$(le32 3)$(le32 0)"                       # settings bytes, tensors, checksum
        if [ "$2" = 0 ]; then head -c $((227 * 4)) /dev/zero
        else  # family 1, NKV 2, F 1536, RoPE theta 500000.0 and eps 1e-5 as float64
            printf %b "$(le32 1)$(le32 2)$(le32 1536)$(le32 0)$(le32 0x411E8480)$(le32 0x88E368F1)$(le32 0x3EE4F8B5)"
            head -c $((220 * 4)) /dev/zero
        fi
        printf '%s' "$3"; head -c $(((n + 3) / 4 * 4 - n + 12)) /dev/zero
    } > "$1"
}
fake_ckpt "$tmp/gpt2.bin" 0 "-depth 6 -b 4 -t 64 -seed 42"
fake_ckpt "$tmp/llama.bin" 1 "-model llama -size llama-30m -encoding o200k_base -b 4 -t 64 -seed 42"
fake_ckpt "$tmp/gpt2_size.bin" 0 "-depth 6 -size llama-30m -b 4 -t 64 -seed 42"
size=$(stat -c %s "$tmp/llama.bin")
expect "the test's fake checkpoint has $size bytes" [ "$size" = $((1024 + 72 + 12)) ]
expect_error "GPT-2 checkpoint resumed as llama" \
    "-model llama: the checkpoint $tmp/gpt2.bin holds a GPT-2 model (-model gpt2), another model family" \
    -resume "$tmp/gpt2.bin" -model llama -out "$tmp/out"
expect_error "Llama-style checkpoint resumed as gpt2" \
    "-model gpt2: the checkpoint $tmp/llama.bin holds a Llama-style model (-model llama)" -resume "$tmp/llama.bin" -model gpt2
expect_error "Llama-style checkpoint, another -encoding" \
    "-encoding cl100k_base: the checkpoint $tmp/llama.bin was written with -encoding o200k_base, which must match" \
    -resume "$tmp/llama.bin" -encoding cl100k_base
expect_error "Llama-style checkpoint, another -size" "-size llama-125m: the checkpoint $tmp/llama.bin was written with -size llama-30m" \
    -resume "$tmp/llama.bin" -size llama-125m
expect_error "Llama-style checkpoint, -depth" "-depth 6: a GPT-2 size" -resume "$tmp/llama.bin" -depth 6
expect_error "GPT-2 checkpoint, -size" "-size llama-30m: a Llama-style size" -resume "$tmp/gpt2.bin" -size llama-30m
expect_error "GPT-2 checkpoint whose settings hold -size" \
    "checkpoint $tmp/gpt2_size.bin records the setting \"-size\", which a GPT-2 model does not have" -resume "$tmp/gpt2_size.bin"
expect "a refused -resume created $tmp/out" [ ! -e "$tmp/out" ]

# -init: its file is read before the GPU is touched. Safetensors files of F32 tensors whose data is a
# hole in a sparse file (the values are read on the GPU's side of the checks): st_tensor NAME ROWS [COLS]
# adds an entry at the next offset, st_write FILE writes them (the 8-byte little-endian header length,
# the header) and starts the next file.
st_json=""; st_off=0
st_tensor() {
    local n=$(($2 * ${3:-1} * 4)) shape="[$2${3:+,$3}]"
    st_json="$st_json${st_json:+,}\"$1\":{\"dtype\":\"F32\",\"shape\":$shape,\"data_offsets\":[$st_off,$((st_off + n))]}"
    st_off=$((st_off + n))
}
st_write() {
    local json="{$st_json}"
    mkdir -p "$(dirname "$1")"
    { printf %b "$(le32 ${#json})$(le32 0)"; printf '%s' "$json"; } > "$1"
    truncate -s $((8 + ${#json} + st_off)) "$1"
    st_json=""; st_off=0
}
# a GPT-2 of 1 layer and 16 channels: not a GPT-2 size
st_tensor wte.weight 2 16; st_tensor wpe.weight 2 16
for t in ln_1.weight:16 ln_1.bias:16 attn.c_attn.weight:16:48 attn.c_attn.bias:48 attn.c_proj.weight:16:16 \
         attn.c_proj.bias:16 ln_2.weight:16 ln_2.bias:16 mlp.c_fc.weight:16:64 mlp.c_fc.bias:64 \
         mlp.c_proj.weight:64:16 mlp.c_proj.bias:16; do
    IFS=: read -r name rows cols <<< "$t"
    st_tensor "h.0.$name" "$rows" $cols
done
st_tensor ln_f.weight 16; st_tensor ln_f.bias 16
st_write "$tmp/m.safetensors"
expect_error "-init, no such file" "-init $tmp/none: safetensors $tmp/none: cannot open" -init "$tmp/none"
expect_error "-init of a train_gpt checkpoint" \
    "-init $tmp/gpt2.bin: a train_gpt checkpoint, not a model in Hugging Face's layout (safetensors)" -init "$tmp/gpt2.bin"
expect_error "-init of a train_gpt checkpoint (hint)" "continue its run with -resume $tmp/gpt2.bin, or export it with build/export_hf" \
    -init "$tmp/gpt2.bin"
expect_error "-init of a directory without model.safetensors" \
    "-init $tmp: $tmp: a directory with neither model.safetensors nor model.safetensors.index.json" -init "$tmp"
expect_error "-init, not a GPT-2 size" "a model of 1 layers and 16 channels, not one of GPT-2's sizes" -init "$tmp/m.safetensors"
expect_error "-init with -depth" "which is not what -depth gives" -init "$tmp/m.safetensors" -depth 6
expect_error "-init and -resume" "-resume continues a run, -init starts one from weights" -init "$tmp/m.safetensors" -resume latest

# -init of a Llama model: its config.json and the header of its safetensors file are read first, and
# give the family (without -model), -size, -encoding and -rope_theta. llama_file DIR L C NH NKV F V THETA:
# config.json of those sizes and RoPE base, and a model.safetensors of all the model's tensors (st_write)
llama_file() {
    local dir=$1 L=$2 C=$3 NH=$4 NKV=$5 F=$6 V=$7 l
    local kv=$((NKV * C / NH))
    st_tensor model.embed_tokens.weight "$V" "$C"
    for ((l = 0; l < L; l++)); do
        st_tensor "model.layers.$l.input_layernorm.weight" "$C"
        st_tensor "model.layers.$l.self_attn.q_proj.weight" "$C" "$C"
        st_tensor "model.layers.$l.self_attn.k_proj.weight" "$kv" "$C"
        st_tensor "model.layers.$l.self_attn.v_proj.weight" "$kv" "$C"
        st_tensor "model.layers.$l.self_attn.o_proj.weight" "$C" "$C"
        st_tensor "model.layers.$l.post_attention_layernorm.weight" "$C"
        st_tensor "model.layers.$l.mlp.gate_proj.weight" "$F" "$C"
        st_tensor "model.layers.$l.mlp.up_proj.weight" "$F" "$C"
        st_tensor "model.layers.$l.mlp.down_proj.weight" "$C" "$F"
    done
    st_tensor model.norm.weight "$C"
    st_tensor lm_head.weight "$V" "$C"
    st_write "$dir/model.safetensors"
    {
        printf '{"model_type": "llama", "num_hidden_layers": %d, "hidden_size": %d, ' "$L" "$C"
        printf '"num_attention_heads": %d, "num_key_value_heads": %d, ' "$NH" "$NKV"
        printf '"intermediate_size": %d, "vocab_size": %d, "rope_theta": %s, ' "$F" "$V" "$8"
        printf '"rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": false}\n'
    } > "$dir/config.json"
}
llama_file "$tmp/tiny" 1 16 4 2 24 50 500000.0
llama_file "$tmp/l30" 10 512 8 2 1536 50257 500000.0    # llama-30m's layers, gpt2's vocabulary
llama_file "$tmp/l30v" 10 512 8 2 1536 50 500000.0
llama_file "$tmp/l125" 20 768 12 3 2048 100277 10000.0  # llama-125m's layers, cl100k_base's vocabulary
expect_error "-init of a Llama model, its family found" \
    "-init $tmp/tiny: a model of 1 layers, 16 channels, 4 heads (2 key/value) and FFN 24, not one of this program's sizes" \
    -init "$tmp/tiny"
expect_error "-model llama -init, not a size" "not one of this program's sizes" -model llama -init "$tmp/tiny"
expect_error "-init of a Llama model, another -size" "a llama-30m model, which is not -size llama-125m" \
    -init "$tmp/l30" -size llama-125m
expect_error "-init of a Llama model, another -encoding" \
    "a vocabulary of 50257, gpt2's, which is not -encoding o200k_base" \
    -init "$tmp/l30" -encoding o200k_base
expect_error "-init of a Llama model, another -rope_theta" "rope_theta 500000, which is not -rope_theta 10000" \
    -init "$tmp/l30" -rope_theta 10000
expect_error "-init of a Llama model, no encoding's vocabulary" \
    "vocab_size 50, the vocabulary of none of this program's encodings" \
    -init "$tmp/l30v"
expect_error "-init of a Llama model, with -depth" "-depth 12: a GPT-2 size" -init "$tmp/l30" -depth 12
rm "$tmp/tiny/config.json"
expect_error "-init of a Llama model without config.json" "config.json beside it: the model's sizes and head counts" \
    -init "$tmp/tiny"
# every check of the file passed: the run goes on with llama-30m on gpt2's shards (data/starter, uint16),
# where -val_batches stops it before the GPU
expect_error "-init of a Llama model sets the encoding" "the val split data/starter/starter_val_" \
    -init "$tmp/l30" -val_batches 100000
# a NaN among the values (the first of model.embed_tokens.weight, the data section's first 4 bytes):
# refused before the GPU is touched, naming the tensor and the element, as -resume refuses a checkpoint's
mkdir -p "$tmp/l30nan"; cp "$tmp/l30/config.json" "$tmp/l30/model.safetensors" "$tmp/l30nan/"
hlen=$(od -An -tu8 -N8 "$tmp/l30nan/model.safetensors" | tr -d ' ')
printf '\x00\x00\xc0\x7f' | dd of="$tmp/l30nan/model.safetensors" bs=1 seek=$((8 + hlen)) conv=notrunc status=none
expect_error "-init of a Llama model with a NaN" \
    "-init $tmp/l30nan: $tmp/l30nan/model.safetensors: tensor \"model.embed_tokens.weight\": element 0 (row 0, column 0) of 25731584 is nan: not finite" \
    -init "$tmp/l30nan" -b 4 -t 64
rm -rf "$tmp/l30nan"
# the same model split as transformers splits a large one: its file renamed model-00001-of-00001.safetensors,
# and model.safetensors.index.json mapping every tensor of its header to it
mkdir -p "$tmp/l30s"; cp "$tmp/l30/config.json" "$tmp/l30s/"
cp "$tmp/l30/model.safetensors" "$tmp/l30s/model-00001-of-00001.safetensors"
names=$(head -c 65536 "$tmp/l30s/model-00001-of-00001.safetensors" | grep -ao '"[a-z_.0-9]*":{"dtype"' | sed 's/:{"dtype"//')
{ printf '{"metadata": {}, "weight_map": {'; printf '%s\n' $names | sed 's/$/: "model-00001-of-00001.safetensors"/' | paste -sd,
  printf '}}\n'; } > "$tmp/l30s/model.safetensors.index.json"
expect_error "-init of a split Llama model: read through its index" "the val split data/starter/starter_val_" \
    -init "$tmp/l30s" -val_batches 100000
sed -i 's/"model.norm.weight": "model-00001-of-00001.safetensors"/"model.norm.weight": "model-00002-of-00002.safetensors"/' \
    "$tmp/l30s/model.safetensors.index.json"
expect_error "-init of a split Llama model, a file missing" \
    "-init $tmp/l30s: safetensors $tmp/l30s/model-00002-of-00002.safetensors: cannot open: No such file or directory (one of the files that $tmp/l30s/model.safetensors.index.json names)" \
    -init "$tmp/l30s"
# the size, encoding and RoPE base it took, as it says (cl100k_base's shards are not made by make test:
# the run stops at the data, before the GPU)
out=$("$bin" -init "$tmp/l125" 2>&1)
expect "-init of a Llama model: the size, encoding and RoPE base taken from the file: $out" \
    has "$out" "-init $tmp/l125: a Llama-style model, so -model llama -size llama-125m -encoding cl100k_base -rope_theta 10000"
# a file whose tensors disagree with its config.json: refused naming the tensor
llama_file "$tmp/l30k" 10 512 8 4 1536 50257 500000.0
sed -i 's/"num_key_value_heads": 4/"num_key_value_heads": 2/' "$tmp/l30k/config.json"
expect_error "-init of a Llama model whose k_proj disagrees with config.json" \
    "tensor \"model.layers.0.self_attn.k_proj.weight\": shape (256, 512), config.json's sizes give (128, 512)" -init "$tmp/l30k"

# multi-GPU flags and launch environments: refused before the GPU is touched. The ranks meet before
# the data is read, so a rank whose partner never comes fails within -nccl_timeout, naming the wait.
expect_error "-gpus 0" "-gpus 0: GPUs of this machine" -gpus 0
expect_error "-nccl_init bad" "-nccl_init udp: choose tcp or file:PATH" -nccl_init udp
expect_error "-nccl_init file: without a path" "-nccl_init file:: choose tcp or file:PATH" -nccl_init file:
expect_error "-nccl_timeout 0" "-nccl_timeout 0: seconds, 1 or more" -nccl_timeout 0
expect_error "-zero 2" "-zero 2: choose 1 (ZeRO-1, the default) or 0 (unsharded)" -zero 2
# expect_env_error "what" "fragment" VAR=VALUE... -- args...: the same, with these variables set
expect_env_error() {
    local what=$1 frag=$2; shift 2
    local vars=()
    while [ "$1" != "--" ]; do vars+=("$1"); shift; done
    shift
    local err rc
    err=$(env "${vars[@]}" "$bin" "$@" 2>&1 >/dev/null); rc=$?
    expect "$what: rc $rc, stderr: $err" refused "$rc" "$err" "$frag"
}
port=$((20000 + RANDOM % 20000))
expect_env_error "RANK without WORLD_SIZE" "RANK is set but WORLD_SIZE is not" RANK=0 --
expect_env_error "RANK out of range" "RANK" RANK=2 WORLD_SIZE=2 --
expect_env_error "-gpus under a launcher" "-gpus 4: this process was started by a launcher" RANK=0 WORLD_SIZE=2 -- -gpus 4
expect_env_error "-device under a launcher" "-device 1: each rank of a multi-GPU run takes the GPU of its local rank" \
    RANK=0 WORLD_SIZE=2 -- -device 1
expect_env_error "-total_batch over GPUs" "-total_batch 256 is not a multiple of B*T*GPUs = 4*64*2" RANK=0 WORLD_SIZE=2 -- \
    -b 4 -t 64 -total_batch 256
expect_env_error "ranks on several machines without MASTER_ADDR" "set MASTER_ADDR to rank 0's host" \
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 --
t0=$SECONDS
expect_env_error "rank 0 alone (tcp)" "rank 0 waited 2 s for 1 of 2 ranks to connect to 127.0.0.1:$port" \
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port -- -nccl_timeout 2
expect_env_error "rank 1 alone (tcp)" "rank 1 waited 2 s for rank 0 at 127.0.0.1:$port" \
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port -- -nccl_timeout 2
expect_env_error "rank 1 alone (file)" "rank 1 waited 2 s" OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 -- \
    -nccl_init "file:$tmp/rdzv" -nccl_timeout 2
expect "the three 2 s rendezvous timeouts took $((SECONDS - t0)) s" [ $((SECONDS - t0)) -le 30 ]

expect_error "-rope_theta with GPT-2" "-rope_theta 10000: the Llama-style model's rotary base" -rope_theta 10000
expect_error "-rope_theta 0" "-rope_theta 0: RoPE's base must be 1 or more" -model llama -rope_theta 0

test_end
