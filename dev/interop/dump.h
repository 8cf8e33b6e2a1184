// dump.h: host-only. The parts of the dump tool of the check against transformers
// (dev/interop/model_dump.cu, which runs one forward and backward of a checkpoint's model of either
// family; dev/interop/hf_check.py runs it) that need no GPU:
//   build/dev/model_dump CKPT TOKENS OUT_DIR
//   dump_open_checkpoint  CKPT as -resume takes it, opened (the reader refuses an unknown family)
//   dump_read_tokens      TOKENS: a safetensors file with "tokens", I32 or I64 (B, T+1), split into the
//                         inputs [:, :T] and the targets [:, 1:]
//   dump_write_outputs    OUT_DIR (created) / outputs.safetensors: "logits" F32 (B, T, V), "loss" F32 (1,)
// The gradients go to OUT_DIR/grads.safetensors through the Hugging Face export (llmc/io/hf_model.h),
// so that their names and layouts are those of the exported weights.
// Every error prints "error: WHAT: why" and exits non-zero.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/io/checkpoint_dir.h"
#include "../../llmc/io/hf_files.h"  // hf_make_dir, HF_ERR_LEN, safetensors

typedef struct {
    int B, T;
    int* inputs;   // (B, T) host, ids in [0, V)
    int* targets;  // (B, T)
} DumpTokens;

static inline void dump_die(const char* what, const char* msg) {
    fprintf(stderr, "error: %s: %s\n", what, msg);
    exit(EXIT_FAILURE);
}

// argc: CKPT TOKENS OUT_DIR are given, else the usage line and exit.
static inline void dump_check_args(int argc, const char* tool) {
    if (argc == 4) return;
    fprintf(stderr, "usage: build/dev/%s CKPT TOKENS.safetensors OUT_DIR (see dev/interop/%s.cu)\n", tool, tool);
    exit(EXIT_FAILURE);
}

// Resolves arg as -resume does (a ckpt_<step>.bin file, a run's -out directory, or latest of out/) into
// path (CHECKPOINT_PATH_LEN) and opens it.
static inline void dump_open_checkpoint(CheckpointReader* ck, char* path, const char* arg) {
    char err[CHECKPOINT_ERR_LEN];
    if (checkpoint_resolve(path, CHECKPOINT_PATH_LEN, arg, "out", err, sizeof(err)) != 0) dump_die("CKPT", err);
    checkpoint_check(ck->err, checkpoint_reader_open(ck, path));
}

// The tokens of path for a model of vocabulary `vocab` and context `max_t`; t->inputs and t->targets
// allocated (dump_free_tokens).
static inline void dump_read_tokens(DumpTokens* t, const char* path, int vocab, int max_t) {
    SafetensorsReader r;
    if (safetensors_open(&r, path) != 0) dump_die("TOKENS", r.err);
    const SafetensorsTensor* s = safetensors_find(&r, "tokens");
    if (!s || s->ndim != 2 || s->shape[1] < 2 || s->shape[1] - 1 > max_t || s->shape[0] < 1 ||
        (s->dtype != ST_I32 && s->dtype != ST_I64))
        dump_die(path, "needs a tensor \"tokens\", I32 or I64, of shape (B, T+1) with 1 <= T <= the model's context");
    int B = (int)s->shape[0], T = (int)s->shape[1] - 1;
    size_t n = (size_t)safetensors_numel(s);
    void* raw = malloc_check(n * safetensors_dtype_size(s->dtype));
    if (safetensors_read(&r, s, raw) != 0) dump_die("TOKENS", r.err);
    t->B = B;
    t->T = T;
    t->inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    t->targets = (int*)malloc_check((size_t)B * T * sizeof(int));
    for (size_t i = 0; i < n; i++) {
        int64_t v = s->dtype == ST_I32 ? ((const int32_t*)raw)[i] : ((const int64_t*)raw)[i];
        if (v < 0 || v >= vocab) {
            char msg[128];
            snprintf(msg, sizeof(msg), "a token id %lld outside the model's vocabulary [0, %d)", (long long)v, vocab);
            dump_die(path, msg);
        }
        int b = (int)(i / (T + 1)), k = (int)(i % (T + 1));
        if (k < T) t->inputs[b * T + k] = (int)v;
        if (k > 0) t->targets[b * T + k - 1] = (int)v;
    }
    free(raw);
    safetensors_close(&r);
}

static inline void dump_free_tokens(DumpTokens* t) {
    free(t->targets);
    free(t->inputs);
}

// dir (created) / outputs.safetensors: logits (B, T, V) fp32, and the loss.
static inline void dump_write_outputs(const char* dir, const float* logits, int B, int T, int V, float loss) {
    char err[HF_ERR_LEN], path[CHECKPOINT_PATH_LEN + 32];
    if (hf_make_dir(dir, err, sizeof(err)) != 0) dump_die("OUT_DIR", err);
    SafetensorsTensor out[2];
    int64_t ls[3] = {B, T, V}, one[1] = {1};
    safetensors_tensor(&out[0], "logits", ST_F32, 3, ls);
    safetensors_tensor(&out[1], "loss", ST_F32, 1, one);
    snprintf(path, sizeof(path), "%s/outputs.safetensors", dir);
    SafetensorsWriter w;
    const char* const meta[] = {"format", "pt", NULL};
    int rc = safetensors_writer_open(&w, path, out, 2, meta);
    if (rc == 0) rc = safetensors_writer_append(&w, logits, (size_t)B * T * V * sizeof(float));
    if (rc == 0) rc = safetensors_writer_append(&w, &loss, sizeof(float));
    if (rc == 0) rc = safetensors_writer_close(&w);
    if (rc != 0) dump_die("OUT_DIR", w.err);
}
