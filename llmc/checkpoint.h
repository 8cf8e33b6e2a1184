// checkpoint.h: host-only. The checkpoint file format, its atomic writer and its checking reader. The
// checkpoint directory (file names, the `latest` marker, keeping the last K) is llmc/checkpoint_dir.h;
// the GPU side (copying the model's state in and out) is llmc/gpt_checkpoint.cuh.
//
// The file, ckpt_<step, 8 digits>.bin, all little-endian:
//   int32 header[256]  [0] magic 20251202, [1] version 2,
//                      [2] layers L, [3] channels C, [4] heads NH, [5] vocab V, [6] padded vocab Vp,
//                      [7] max sequence length, [8..9] number of parameters P (int64),
//                      [10..11] optimizer steps completed (int64), [12..13] the sampler's RNG state (uint64),
//                      [14..25] the train stream's DataLoaderPosition: global batch, total windows, seed,
//                               B, T, shuffle (6 x int64),
//                      [26] bytes of the settings text S, [27] tensors that follow (3),
//                      [28] zlib's crc32 of the whole file read with this slot as 0, the rest 0
//   char settings[S]   the run's flags as text ("-depth 6 -lr 0.001 ..."), zero-padded to a multiple of 4
//   float master[P], m[P], v[P]   fp32 master weights, AdamW first and second moments, in gpt.cuh's
//                      parameter order
// The bf16 parameters are not stored: they are round-to-nearest(master) after every update, so they are
// rederived exactly. Gradients and activations are not state: every step starts by clearing them.
//
// Atomicity: a checkpoint is written to <name>.tmp, flushed, fsync'ed and renamed to <name> (and the
// directory fsync'ed), so a file under a final name is always complete. Only then is <dir>/latest
// (the completed checkpoint's file name, one line, itself written through a temporary file) replaced,
// and older checkpoints beyond the last K deleted. A crash at any point leaves `latest` naming a
// complete checkpoint. Readers check magic, version, every size and the file size; before anything is
// loaded, checkpoint_reader_verify reads the tensors once to check the checksum and that every value is
// finite (and every v >= 0), so a damaged file is refused before the GPU is touched.
// Version 1 (before 2026-12-04: no checksum, slot 28 is 0) is still read, without the checksum check.
//
// Test hook (never set in normal use): LLMC_TEST_CKPT_FAIL_AFTER=N makes every writer fail with ENOSPC
// once N bytes of the file are written, and N:kill makes the process SIGKILL itself there instead:
// a disk that fills up, or a process killed, in the middle of a checkpoint.
//
// Errors: functions return 0, or -1 with a message naming the file and what to do in `err`; nothing
// exits, so every failure is testable. The trainer wraps them in checkpoint_check.
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>        // crc32_z (Debian: zlib1g-dev; link with -lz)
#include "atomic_file.h"
#include "check.h"
#include "dataloader.h"  // DataLoaderPosition

#define CHECKPOINT_MAGIC 20251202
#define CHECKPOINT_VERSION 2          // 2: with the checksum; 1 is still read
#define CHECKPOINT_CHUNK_BYTES ((size_t)64 << 20)  // host buffer of checkpoint_reader_verify
#define CHECKPOINT_HEADER_INTS 256
#define CHECKPOINT_HEADER_BYTES (CHECKPOINT_HEADER_INTS * (int)sizeof(int32_t))
#define CHECKPOINT_TENSORS 3          // master, m, v
#define CHECKPOINT_SETTINGS_MAX 2048  // bytes of the settings text, with its terminating 0
#define CHECKPOINT_ERR_LEN 4608
#define CHECKPOINT_PATH_LEN 4096

// The sizes that identify the model: a checkpoint loads only into a model with all of them equal.
typedef struct {
    int32_t num_layers, channels, num_heads, vocab_size, padded_vocab_size, max_seq_len;
    int64_t num_params;
} CheckpointModel;

// Everything a checkpoint holds besides the tensors.
typedef struct {
    CheckpointModel model;
    int64_t step;                            // optimizer steps completed; the resumed run starts with step+1
    uint64_t rng;                            // the sampler's RNG state after those steps
    DataLoaderPosition data;                 // the train stream's next batch
    char settings[CHECKPOINT_SETTINGS_MAX];  // 0-terminated text, the trainer's business
} CheckpointState;

static inline int64_t checkpoint_settings_padded(int64_t bytes) { return (bytes + 3) / 4 * 4; }

// Total file size of a checkpoint with this header: what the reader demands.
static inline int64_t checkpoint_file_bytes(int64_t num_params, int64_t settings_bytes, int64_t tensors) {
    return CHECKPOINT_HEADER_BYTES + checkpoint_settings_padded(settings_bytes) + tensors * num_params * (int64_t)sizeof(float);
}

// --- the header ----------------------------------------------------------------------------------

enum {
    CKPT_H_MAGIC = 0, CKPT_H_VERSION = 1, CKPT_H_LAYERS = 2, CKPT_H_CHANNELS = 3, CKPT_H_HEADS = 4, CKPT_H_VOCAB = 5,
    CKPT_H_PADDED_VOCAB = 6, CKPT_H_MAX_SEQ_LEN = 7, CKPT_H_PARAMS = 8, CKPT_H_STEP = 10, CKPT_H_RNG = 12,
    CKPT_H_DATA = 14, CKPT_H_SETTINGS_BYTES = 26, CKPT_H_TENSORS = 27, CKPT_H_CRC = 28
};

static inline void checkpoint_put64(int32_t* h, int at, uint64_t v) {
    h[at] = (int32_t)(uint32_t)(v & 0xffffffffu);
    h[at + 1] = (int32_t)(uint32_t)(v >> 32);
}
static inline uint64_t checkpoint_get64(const int32_t* h, int at) {
    return (uint64_t)(uint32_t)h[at] | ((uint64_t)(uint32_t)h[at + 1] << 32);
}

static inline void checkpoint_pack_header(int32_t h[CHECKPOINT_HEADER_INTS], const CheckpointState* s, int32_t settings_bytes) {
    memset(h, 0, CHECKPOINT_HEADER_BYTES);
    h[CKPT_H_MAGIC] = CHECKPOINT_MAGIC;
    h[CKPT_H_VERSION] = CHECKPOINT_VERSION;
    h[CKPT_H_LAYERS] = s->model.num_layers;
    h[CKPT_H_CHANNELS] = s->model.channels;
    h[CKPT_H_HEADS] = s->model.num_heads;
    h[CKPT_H_VOCAB] = s->model.vocab_size;
    h[CKPT_H_PADDED_VOCAB] = s->model.padded_vocab_size;
    h[CKPT_H_MAX_SEQ_LEN] = s->model.max_seq_len;
    checkpoint_put64(h, CKPT_H_PARAMS, (uint64_t)s->model.num_params);
    checkpoint_put64(h, CKPT_H_STEP, (uint64_t)s->step);
    checkpoint_put64(h, CKPT_H_RNG, s->rng);
    const DataLoaderPosition* d = &s->data;
    const uint64_t data[6] = {(uint64_t)d->global_batch, (uint64_t)d->total_windows, d->seed, (uint64_t)d->B,
                              (uint64_t)d->T, (uint64_t)d->shuffle};
    for (int i = 0; i < 6; i++) checkpoint_put64(h, CKPT_H_DATA + 2 * i, data[i]);
    h[CKPT_H_SETTINGS_BYTES] = settings_bytes;
    h[CKPT_H_TENSORS] = CHECKPOINT_TENSORS;
}

static inline void checkpoint_unpack_header(CheckpointState* s, const int32_t h[CHECKPOINT_HEADER_INTS]) {
    s->model.num_layers = h[CKPT_H_LAYERS];
    s->model.channels = h[CKPT_H_CHANNELS];
    s->model.num_heads = h[CKPT_H_HEADS];
    s->model.vocab_size = h[CKPT_H_VOCAB];
    s->model.padded_vocab_size = h[CKPT_H_PADDED_VOCAB];
    s->model.max_seq_len = h[CKPT_H_MAX_SEQ_LEN];
    s->model.num_params = (int64_t)checkpoint_get64(h, CKPT_H_PARAMS);
    s->step = (int64_t)checkpoint_get64(h, CKPT_H_STEP);
    s->rng = checkpoint_get64(h, CKPT_H_RNG);
    s->data.global_batch = (int64_t)checkpoint_get64(h, CKPT_H_DATA + 0);
    s->data.total_windows = (int64_t)checkpoint_get64(h, CKPT_H_DATA + 2);
    s->data.seed = checkpoint_get64(h, CKPT_H_DATA + 4);
    s->data.B = (int64_t)checkpoint_get64(h, CKPT_H_DATA + 6);
    s->data.T = (int64_t)checkpoint_get64(h, CKPT_H_DATA + 8);
    s->data.shuffle = (int64_t)checkpoint_get64(h, CKPT_H_DATA + 10);
}

// --- writing -------------------------------------------------------------------------------------

typedef struct {
    AtomicFile af;                           // <path>.tmp, renamed over the final name by checkpoint_writer_close
    int64_t expect_bytes, written;
    uint32_t crc;                            // crc32 of the bytes written, the header's slot CKPT_H_CRC as 0
    int64_t fail_after;                      // test hook LLMC_TEST_CKPT_FAIL_AFTER: fail after this many bytes; -1: never
    int kill_at_fail;                        // ... with ":kill": SIGKILL this process there instead
    char err[CHECKPOINT_ERR_LEN];
} CheckpointWriter;

static inline int checkpoint_writer_fail(CheckpointWriter* w, const char* what) {
    snprintf(w->err, sizeof(w->err), "checkpoint %s: %s failed: %s; is the disk full or the output directory "
             "read-only? (pick another one with -out)", w->af.path, what, strerror(errno));
    atomic_file_abort(&w->af);
    return -1;
}

// Every byte of the file goes through here: counted, added to the checksum, and cut short by the test hook.
static inline int checkpoint_writer_put(CheckpointWriter* w, const void* data, size_t bytes) {
    size_t n = bytes;
    if (w->fail_after >= 0 && w->written + (int64_t)bytes > w->fail_after)
        n = w->fail_after > w->written ? (size_t)(w->fail_after - w->written) : 0;
    if (n > 0 && fwrite(data, 1, n, w->af.f) != n) return checkpoint_writer_fail(w, "fwrite");
    w->crc = (uint32_t)crc32_z(w->crc, (const Bytef*)data, n);
    w->written += (int64_t)n;
    if (n < bytes) {  // the test hook's fault
        if (w->kill_at_fail) { fflush(w->af.f); raise(SIGKILL); }
        errno = ENOSPC;
        return checkpoint_writer_fail(w, "fwrite (fault injected by LLMC_TEST_CKPT_FAIL_AFTER)");
    }
    return 0;
}

// Opens <path>.tmp and writes the header and the settings text; the tensors follow with
// checkpoint_writer_append, in the order master, m, v, each s->model.num_params floats.
static inline int checkpoint_writer_open(CheckpointWriter* w, const char* path, const CheckpointState* s) {
    memset(w, 0, sizeof(*w));
    if (strlen(path) + 1 > sizeof(w->af.path)) {
        snprintf(w->err, sizeof(w->err), "checkpoint path too long (%zu bytes): %s", strlen(path), path);
        return -1;
    }
    size_t settings_bytes = strnlen(s->settings, sizeof(s->settings));
    if (settings_bytes >= sizeof(s->settings)) {
        snprintf(w->err, sizeof(w->err), "checkpoint %s: the settings text is not terminated within %d bytes",
                 path, CHECKPOINT_SETTINGS_MAX);
        return -1;
    }
    const char* hook = getenv("LLMC_TEST_CKPT_FAIL_AFTER");
    w->fail_after = hook && *hook ? strtoll(hook, NULL, 10) : -1;
    w->kill_at_fail = hook && strstr(hook, ":kill") != NULL;
    if (atomic_file_open(&w->af, path) != 0) return checkpoint_writer_fail(w, "fopen of the temporary file");
    int32_t header[CHECKPOINT_HEADER_INTS];
    checkpoint_pack_header(header, s, (int32_t)settings_bytes);
    char pad[4] = {0, 0, 0, 0};
    int64_t padded = checkpoint_settings_padded((int64_t)settings_bytes);
    w->crc = (uint32_t)crc32_z(0L, Z_NULL, 0);
    if (checkpoint_writer_put(w, header, sizeof(header)) != 0 || checkpoint_writer_put(w, s->settings, settings_bytes) != 0 ||
        checkpoint_writer_put(w, pad, (size_t)(padded - (int64_t)settings_bytes)) != 0)
        return -1;
    w->expect_bytes = checkpoint_file_bytes(s->model.num_params, (int64_t)settings_bytes, CHECKPOINT_TENSORS);
    return 0;
}

static inline int checkpoint_writer_append(CheckpointWriter* w, const void* data, size_t bytes) {
    if (w->written + (int64_t)bytes > w->expect_bytes) {
        errno = EINVAL;
        return checkpoint_writer_fail(w, "appending more tensor data than the header announces");
    }
    return checkpoint_writer_put(w, data, bytes);
}

// Checks that everything announced was written, then flush, fsync, rename into place, fsync the directory.
static inline int checkpoint_writer_close(CheckpointWriter* w) {
    if (w->written != w->expect_bytes) {
        errno = EINVAL;
        return checkpoint_writer_fail(w, "closing before all tensors were written");
    }
    uint32_t crc = w->crc;  // into its slot of the header, which the checksum read as 0
    if (fseek(w->af.f, CKPT_H_CRC * (long)sizeof(int32_t), SEEK_SET) != 0 || fwrite(&crc, sizeof(crc), 1, w->af.f) != 1)
        return checkpoint_writer_fail(w, "writing the checksum");
    const char* step = NULL;
    if (atomic_file_commit(&w->af, &step) != 0) return checkpoint_writer_fail(w, step);
    return 0;
}

// Gives up a write: the temporary file is removed, nothing appears under the final name.
static inline void checkpoint_writer_abort(CheckpointWriter* w) {
    atomic_file_abort(&w->af);
}

// --- reading -------------------------------------------------------------------------------------

typedef struct {
    FILE* f;
    char path[CHECKPOINT_PATH_LEN];
    CheckpointState state;  // filled by checkpoint_reader_open
    int32_t version;        // 1: no checksum; 2: with one
    uint32_t crc_stored;    // the header's checksum (version 2)
    uint32_t crc_head;      // crc32 of the header (checksum slot as 0) and the settings: where the tensors' starts
    int64_t tensors_at;     // file offset of the first tensor
    char err[CHECKPOINT_ERR_LEN];
} CheckpointReader;

static inline int checkpoint_reader_fail(CheckpointReader* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int checkpoint_reader_fail(CheckpointReader* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(r->err, sizeof(r->err), "checkpoint %s: ", r->path);
    if (n < 0 || n >= (int)sizeof(r->err)) n = 0;
    vsnprintf(r->err + n, sizeof(r->err) - (size_t)n, fmt, ap);
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
static inline int checkpoint_reader_open(CheckpointReader* r, const char* path) {
    memset(r, 0, sizeof(*r));
    snprintf(r->path, sizeof(r->path), "%s", path);
    const char* fix = "pass another checkpoint to -resume (the previous one of its directory, or `latest`), "
                      "or start without -resume";
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
        return checkpoint_reader_fail(r, "format version %d, this program reads versions 1 and %d: resume it with the "
                                      "train_gpt that wrote it, or start without -resume", h[CKPT_H_VERSION], CHECKPOINT_VERSION);
    r->version = h[CKPT_H_VERSION];
    r->crc_stored = (uint32_t)h[CKPT_H_CRC];
    h[CKPT_H_CRC] = 0;
    r->crc_head = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), (const Bytef*)h, CHECKPOINT_HEADER_BYTES);
    checkpoint_unpack_header(&r->state, h);
    int32_t settings_bytes = h[CKPT_H_SETTINGS_BYTES], tensors = h[CKPT_H_TENSORS];
    if (settings_bytes < 0 || settings_bytes >= CHECKPOINT_SETTINGS_MAX || tensors != CHECKPOINT_TENSORS ||
        r->state.model.num_params <= 0 || r->state.model.num_params > ((int64_t)1 << 40) || r->state.step < 0)
        return checkpoint_reader_fail(r, "corrupt header (settings %d bytes, %d tensors, %lld parameters, step %lld); %s",
                                      settings_bytes, tensors, (long long)r->state.model.num_params,
                                      (long long)r->state.step, fix);
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

// Checks the checkpoint's model sizes against the running model's.
static inline int checkpoint_check_model(CheckpointReader* r, const CheckpointModel* now) {
    const CheckpointModel* c = &r->state.model;
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
        return checkpoint_reader_fail(r, "%lld parameters, the model of these sizes has %lld: corrupt header; pass "
                                      "another checkpoint to -resume, or start without -resume",
                                      (long long)c->num_params, (long long)now->num_params);
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
    const char* fix = "resume from an earlier checkpoint (`ls` its directory; -resume takes a file), or start without -resume";
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

// The trainer's wrapper: on rc != 0 prints the message and exits.
static inline void checkpoint_check(const char* err, int rc) {
    if (rc != 0) {
        fprintf(stderr, "error: %s\n", err);
        exit(EXIT_FAILURE);
    }
}
