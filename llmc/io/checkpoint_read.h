// checkpoint_read.h: host-only. The checking reader of the checkpoint format of llmc/io/checkpoint.h (which
// includes this file after the format and the writer; include checkpoint.h, not this). Errors: 0, or -1
// with a message naming the file and what to do in r->err.
#pragma once
#include "checkpoint.h"

// --- reading -------------------------------------------------------------------------------------

typedef struct {
    FILE* f;
    char path[CHECKPOINT_PATH_LEN];
    CheckpointState state;  // filled by checkpoint_reader_open
    int32_t version;        // 1: no checksum; 2: with one
    uint32_t crc_stored;    // the header's checksum (version 2)
    uint32_t crc_head;      // crc32 of the header (checksum slot as 0) and the settings: where the tensors' starts
    int64_t tensors_at;     // file offset of the first tensor
    const char* advice;     // what to do about a bad file, for messages; NULL: the trainer's (-resume ...)
    char err[CHECKPOINT_ERR_LEN];
} CheckpointReader;

// What a message advises for a bad file: the reader's own advice, or the trainer's text.
static inline const char* checkpoint_advice(const CheckpointReader* r, const char* trainer_text) {
    return r->advice ? r->advice : trainer_text;
}

static inline int checkpoint_reader_fail(CheckpointReader* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int checkpoint_reader_fail(CheckpointReader* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vformat(r->err, sizeof(r->err), "checkpoint", r->path, fmt, ap);
    va_end(ap);
    if (r->f) fclose(r->f);
    r->f = NULL;
    return -1;
}

// What a file with this magic number is, for the error message.
static inline const char* checkpoint_what_magic(int32_t magic) {
    if (magic == SHARD_MAGIC) return "a token shard (data/), not a checkpoint";
    if (magic == 20240326) return "an llm.c model file (weights only), not a train_gpt checkpoint";
    if (magic == 20240527) return "an llm.c optimizer state file, not a train_gpt checkpoint";
    return "not a train_gpt checkpoint";
}

// Opens a checkpoint and checks magic, version, the header's own consistency and the file size; fills
// r->state. The model sizes are checked by checkpoint_check_model, once the caller has its model.
// advice: what the messages tell the user to do about a bad file (NULL: pass another checkpoint to
// -resume, the trainer's); it must outlive r.
static inline int checkpoint_reader_open_advising(CheckpointReader* r, const char* path, const char* advice) {
    memset(r, 0, sizeof(*r));
    snprintf(r->path, sizeof(r->path), "%s", path);
    r->advice = advice;
    const char* fix = checkpoint_advice(r, "pass another checkpoint to -resume (the previous one of its directory, or "
                                        "`latest`), or start without -resume");
    r->f = fopen(path, "rb");
    if (!r->f) return checkpoint_reader_fail(r, "cannot open: %s; %s", strerror(errno), fix);
    int32_t h[CHECKPOINT_HEADER_INTS];
    size_t got = fread(h, sizeof(int32_t), CHECKPOINT_HEADER_INTS, r->f);
    struct stat st;
    if (fstat(fileno(r->f), &st) != 0) return checkpoint_reader_fail(r, "fstat failed: %s", strerror(errno));
    if (got != CHECKPOINT_HEADER_INTS)
        return checkpoint_reader_fail(r, "%lld bytes, shorter than the %d-byte header: truncated or not a checkpoint; %s",
                                      (long long)st.st_size, CHECKPOINT_HEADER_BYTES, fix);
    if (h[CKPT_H_MAGIC] != CHECKPOINT_MAGIC)
        return checkpoint_reader_fail(r, "magic %d, expected %d: %s; %s", h[CKPT_H_MAGIC], CHECKPOINT_MAGIC,
                                      checkpoint_what_magic(h[CKPT_H_MAGIC]), fix);
    if (h[CKPT_H_VERSION] != 1 && h[CKPT_H_VERSION] != CHECKPOINT_VERSION)
        return checkpoint_reader_fail(r, "format version %d, this program reads versions 1 and %d: %s", h[CKPT_H_VERSION],
                                      CHECKPOINT_VERSION, checkpoint_advice(r, "resume it with the train_gpt that wrote "
                                      "it, or start without -resume"));
    r->version = h[CKPT_H_VERSION];
    r->crc_stored = (uint32_t)h[CKPT_H_CRC];
    h[CKPT_H_CRC] = 0;
    r->crc_head = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), (const Bytef*)h, CHECKPOINT_HEADER_BYTES);
    checkpoint_unpack_header(&r->state, h);
    int32_t settings_bytes = h[CKPT_H_SETTINGS_BYTES], tensors = h[CKPT_H_TENSORS];
    if (settings_bytes < 0 || settings_bytes >= CHECKPOINT_SETTINGS_MAX || tensors != CHECKPOINT_TENSORS ||
        r->state.model.num_params <= 0 || r->state.model.num_params > ((int64_t)1 << 40))
        return checkpoint_reader_fail(r, "corrupt header (settings %d bytes, %d tensors, %lld parameters); %s",
                                      settings_bytes, tensors, (long long)r->state.model.num_params, fix);
    if (r->state.step < 0 || r->state.step > CHECKPOINT_MAX_STEP)
        return checkpoint_reader_fail(r, "corrupt header: step %lld, outside [0, %lld] (-steps is an int, so no run "
                                      "gets further); %s", (long long)r->state.step, (long long)CHECKPOINT_MAX_STEP, fix);
    const CheckpointModel* k = &r->state.model;
    if (k->family == CHECKPOINT_FAMILY_GPT2) {
        for (int i = CKPT_H_KV_HEADS; i < CKPT_H_NORM_EPS + 2; i++)
            if (h[i] != 0)
                return checkpoint_reader_fail(r, "corrupt header (a GPT-2 checkpoint with %d in slot %d, which only the "
                                              "Llama-style family uses); %s", h[i], i, fix);
    } else if (k->family == CHECKPOINT_FAMILY_LLAMA) {
        if (k->num_kv_heads <= 0 || k->ffn_hidden <= 0 || !(k->rope_theta > 0.0 && k->rope_theta <= 1e12) ||
            !(k->norm_eps >= 0.0 && k->norm_eps < 1.0))
            return checkpoint_reader_fail(r, "corrupt header (Llama-style, %d key/value heads, FFN %d, RoPE theta %g, "
                                          "RMSNorm eps %g); %s", k->num_kv_heads, k->ffn_hidden, k->rope_theta,
                                          k->norm_eps, fix);
    } else {
        return checkpoint_reader_fail(r, "model family %d, this program knows 0 (GPT-2) and 1 (Llama-style): written by "
                                      "a newer program, or corrupt; %s", k->family, fix);
    }
    int64_t want = checkpoint_file_bytes(r->state.model.num_params, settings_bytes, tensors);
    if ((int64_t)st.st_size != want)
        return checkpoint_reader_fail(r, "the header announces %lld bytes (%lld parameters x %d tensors) but the file "
                                      "has %lld: %s; %s", (long long)want, (long long)r->state.model.num_params, tensors,
                                      (long long)st.st_size, (int64_t)st.st_size < want ? "truncated" : "size mismatch", fix);
    int64_t padded = checkpoint_settings_padded(settings_bytes);
    if (fread(r->state.settings, 1, (size_t)padded, r->f) != (size_t)padded)
        return checkpoint_reader_fail(r, "could not read the settings text; the file changed while reading");
    r->crc_head = (uint32_t)crc32_z(r->crc_head, (const Bytef*)r->state.settings, (size_t)padded);
    r->state.settings[settings_bytes] = '\0';
    r->tensors_at = CHECKPOINT_HEADER_BYTES + padded;
    return 0;
}

// checkpoint_reader_open with the trainer's advice.
static inline int checkpoint_reader_open(CheckpointReader* r, const char* path) {
    return checkpoint_reader_open_advising(r, path, NULL);
}

// Checks the checkpoint's model sizes against the running model's.
static inline int checkpoint_check_model(CheckpointReader* r, const CheckpointModel* now) {
    const CheckpointModel* c = &r->state.model;
    if (c->family != now->family)
        return checkpoint_reader_fail(r, "holds a %s model, this run builds a %s model: another model family; pass a "
                                      "checkpoint of this family to -resume, or start without -resume",
                                      checkpoint_family_name(c->family), checkpoint_family_name(now->family));
    if (c->family == CHECKPOINT_FAMILY_LLAMA &&
        (c->num_kv_heads != now->num_kv_heads || c->ffn_hidden != now->ffn_hidden || c->rope_theta != now->rope_theta ||
         c->norm_eps != now->norm_eps))
        return checkpoint_reader_fail(r, "Llama-style with %d key/value heads, FFN %d, RoPE theta %g, RMSNorm eps %g; "
                                      "this run has %d, %d, %g, %g: another model shape; start without -resume",
                                      c->num_kv_heads, c->ffn_hidden, c->rope_theta, c->norm_eps, now->num_kv_heads,
                                      now->ffn_hidden, now->rope_theta, now->norm_eps);
    if (c->family == CHECKPOINT_FAMILY_LLAMA &&
        (c->num_layers != now->num_layers || c->channels != now->channels || c->num_heads != now->num_heads))
        return checkpoint_reader_fail(r, "written by a Llama-style model of %d layers, %d channels, %d heads, this run "
                                      "has %d layers, %d channels, %d heads: another model size; resume with the size "
                                      "it was written with, or start without -resume", c->num_layers, c->channels,
                                      c->num_heads, now->num_layers, now->channels, now->num_heads);
    if (c->num_layers == now->num_layers && (c->channels != now->channels || c->num_heads != now->num_heads))
        return checkpoint_reader_fail(r, "written by a model with %d channels and %d heads, this run has %d channels "
                                      "and %d heads at the same depth: another model shape; start without -resume",
                                      c->channels, c->num_heads, now->channels, now->num_heads);
    if (c->num_layers != now->num_layers || c->channels != now->channels || c->num_heads != now->num_heads)
        return checkpoint_reader_fail(r, "written by a d%d model (%d layers, %d channels, %d heads), this run is d%d "
                                      "(%d layers, %d channels, %d heads): pass -depth %d, or start without -resume",
                                      c->num_layers, c->num_layers, c->channels, c->num_heads, now->num_layers,
                                      now->num_layers, now->channels, now->num_heads, c->num_layers);
    if (c->vocab_size != now->vocab_size || c->padded_vocab_size != now->padded_vocab_size ||
        c->max_seq_len != now->max_seq_len)
        return checkpoint_reader_fail(r, "vocabulary %d (padded %d), context %d; this build has %d (padded %d), "
                                      "context %d: written by another build of the model; start without -resume",
                                      c->vocab_size, c->padded_vocab_size, c->max_seq_len, now->vocab_size,
                                      now->padded_vocab_size, now->max_seq_len);
    if (c->num_params != now->num_params)
        return checkpoint_reader_fail(r, "%lld parameters, the model of these sizes has %lld: corrupt header; %s",
                                      (long long)c->num_params, (long long)now->num_params,
                                      checkpoint_advice(r, "pass another checkpoint to -resume, or start without -resume"));
    return 0;
}

// Reads the next `bytes` of tensor data (master, then m, then v).
static inline int checkpoint_reader_read(CheckpointReader* r, void* dst, size_t bytes) {
    if (bytes > 0 && fread(dst, 1, bytes, r->f) != bytes)
        return checkpoint_reader_fail(r, "could not read %zu bytes of tensors: %s; the file changed while reading",
                                      bytes, feof(r->f) ? "unexpected end of file" : strerror(errno));
    return 0;
}

static inline int checkpoint_is_finite(float x) {  // by its bits: immune to -ffast-math
    uint32_t b;
    memcpy(&b, &x, sizeof(b));
    return (b & 0x7f800000u) != 0x7f800000u;
}

// Reads the tensors of an opened checkpoint once, before anything is loaded: the checksum (version 2)
// must match and every value must be finite (and every v >= 0); then goes back to the first tensor, for
// checkpoint_reader_read. Costs one more read of the file (1.4 GiB at d12, mostly from the page cache
// the second time). Returns 0, or -1 with what is wrong and where in r->err.
static inline int checkpoint_reader_verify(CheckpointReader* r) {
    const char* names[CHECKPOINT_TENSORS] = {"master weight", "AdamW first moment m", "AdamW second moment v"};
    const char* fix = checkpoint_advice(r, "resume from an earlier checkpoint (`ls` its directory; -resume takes a "
                                        "file), or start without -resume");
    int64_t per_tensor = r->state.model.num_params * (int64_t)sizeof(float);
    int64_t all = CHECKPOINT_TENSORS * per_tensor;
    size_t chunk = all < (int64_t)CHECKPOINT_CHUNK_BYTES ? (size_t)all : CHECKPOINT_CHUNK_BYTES;
    float* buf = (float*)malloc_check(chunk);
    uint32_t crc = r->crc_head;
    int64_t bad_at = -1;  // the first bad value: its index over all tensors
    float bad = 0.0f;
    int rc = fseek(r->f, (long)r->tensors_at, SEEK_SET);
    for (int64_t off = 0; rc == 0 && off < all; off += (int64_t)chunk) {
        size_t n = all - off < (int64_t)chunk ? (size_t)(all - off) : chunk;
        if (fread(buf, 1, n, r->f) != n) { rc = -1; break; }
        crc = (uint32_t)crc32_z(crc, (const Bytef*)buf, n);
        for (size_t i = 0; bad_at < 0 && i < n / sizeof(float); i++) {
            int64_t k = off / (int64_t)sizeof(float) + (int64_t)i;
            if (!checkpoint_is_finite(buf[i]) || (k >= 2 * r->state.model.num_params && buf[i] < 0.0f)) {
                bad_at = k;
                bad = buf[i];
            }
        }
    }
    free(buf);
    if (rc != 0) return checkpoint_reader_fail(r, "could not read the tensors: the file changed while reading");
    if (r->version >= 2 && crc != r->crc_stored)
        return checkpoint_reader_fail(r, "checksum mismatch (stored 0x%08x, computed 0x%08x): the file is damaged "
                                      "(a disk error or an incomplete copy); %s", r->crc_stored, crc, fix);
    if (bad_at >= 0) {
        int64_t P = r->state.model.num_params;
        return checkpoint_reader_fail(r, "%s %lld of %lld is %g: %s; the run had gone bad before this checkpoint; %s",
                                      names[bad_at / P], (long long)(bad_at % P), (long long)P, (double)bad,
                                      checkpoint_is_finite(bad) ? "a second moment is never negative" : "not finite",
                                      fix);
    }
    if (fseek(r->f, (long)r->tensors_at, SEEK_SET) != 0)
        return checkpoint_reader_fail(r, "seek failed: %s", strerror(errno));
    return 0;
}

static inline void checkpoint_reader_close(CheckpointReader* r) {
    if (r->f) fclose(r->f);
    r->f = NULL;
}

// The trainer's wrapper: on rc != 0 exits with the message (llmc/core/check.h), which names the file.
static inline void checkpoint_check(const char* err, int rc) {
    if (rc != 0)
        check_fail(err, "-resume another checkpoint (or none), or give -out a directory with room that you can write");
}
