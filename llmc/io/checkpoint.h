// checkpoint.h: host-only. The checkpoint file format, its atomic writer and (llmc/io/checkpoint_read.h,
// included at the end) its checking reader. The
// checkpoint directory (file names, the `latest` marker, keeping the last K) is llmc/io/checkpoint_dir.h;
// the GPU side (copying a model's optimizer state in and out) is llmc/io/optim_checkpoint.cuh, used by
// llmc/io/model_checkpoint.cuh.
//
// The file, ckpt_<step, 8 digits>.bin, all little-endian:
//   int32 header[256]  [0] magic 20251202, [1] version 2,
//                      [2] layers L, [3] channels C, [4] heads NH, [5] vocab V, [6] padded vocab Vp,
//                      [7] max sequence length, [8..9] number of parameters P (int64),
//                      [10..11] optimizer steps completed (int64, at most CHECKPOINT_MAX_STEP), [12..13] the sampler's RNG state (uint64),
//                      [14..25] the train stream's DataLoaderPosition: global batch, total windows, seed,
//                               B, T, shuffle (6 x int64),
//                      [26] bytes of the settings text S, [27] tensors that follow (3),
//                      [28] zlib's crc32 of the whole file read with this slot as 0,
//                      [29] model family: 0 GPT-2, 1 Llama-style,
//                      [30] key/value heads NKV, [31] FFN hidden size F, [32..33] RoPE theta (float64),
//                      [34..35] RMSNorm eps (float64): Llama-style only, 0 for GPT-2, the rest 0
//   char settings[S]   the run's flags as text ("-depth 6 -lr 0.001 ..."), zero-padded to a multiple of 4
//   float master[P], m[P], v[P]   fp32 master weights, AdamW first and second moments, in the model's
//                      parameter order (the family's table, llmc/model/spec.h)
// GPT-2 (family 0) leaves slots 29..35 at 0, as every unused slot, so a GPT-2 checkpoint's bytes do not
// depend on the Llama-style fields, and a version 2 header whose slots 29..35 are 0 reads as GPT-2.
// The bf16 parameters are not stored: they are the master's high halves (llmc/optim/master_split.h: nearest,
// ties away from zero) after every update, so they are rederived exactly. Gradients and activations
// are not state: every step starts by clearing them.
//
// Atomicity: a checkpoint is written to <name>.tmp, flushed, fsync'ed and renamed to <name> (and the
// directory fsync'ed), so a file under a final name is always complete. Only then is <dir>/latest
// (the completed checkpoint's file name, one line, itself written through a temporary file) replaced,
// and older checkpoints beyond the last K deleted. A crash at any point leaves `latest` naming a
// complete checkpoint. Readers check magic, version, every size and the file size; before anything is
// loaded, checkpoint_reader_verify reads the tensors once to check the checksum and that every value is
// finite (and every v >= 0), so a damaged file is refused before the GPU is touched.
// Version 1 (no checksum, slot 28 is 0) is still read, without the checksum check.
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
#include "../core/atomic_file.h"
#include "../core/check.h"
#include "../data/dataloader.h"  // DataLoaderPosition
#include "../model/spec.h"       // ModelConfig, the families

#define CHECKPOINT_MAGIC 20251202
#define CHECKPOINT_VERSION 2          // 2: with the checksum; 1 is still read
#define CHECKPOINT_CHUNK_BYTES ((size_t)64 << 20)  // host buffer of checkpoint_reader_verify
#define CHECKPOINT_HEADER_INTS 256
#define CHECKPOINT_HEADER_BYTES (CHECKPOINT_HEADER_INTS * (int)sizeof(int32_t))
#define CHECKPOINT_TENSORS 3          // master, m, v
#define CHECKPOINT_SETTINGS_MAX 2048  // bytes of the settings text, with its terminating 0
// The most steps a checkpoint can be at: train_gpt's -steps is an int, so no run gets further. The reader
// refuses a step outside [0, CHECKPOINT_MAX_STEP] (and the writer will not write one), so a step always
// fits an int where one is needed (the learning-rate schedule, AdamW's bias correction).
#define CHECKPOINT_MAX_STEP ((int64_t)2147483647)
#define CHECKPOINT_ERR_LEN 4608
#define CHECKPOINT_PATH_LEN 4096

#define CHECKPOINT_FAMILY_GPT2 MODEL_FAMILY_GPT2    // 0
#define CHECKPOINT_FAMILY_LLAMA MODEL_FAMILY_LLAMA  // 1

// The sizes that identify the model: a checkpoint loads only into a model with all of them equal.
// num_kv_heads, ffn_hidden, rope_theta and norm_eps belong to the Llama-style family (0 for GPT-2).
typedef struct {
    int32_t num_layers, channels, num_heads, vocab_size, padded_vocab_size, max_seq_len;
    int64_t num_params;
    int32_t family;                      // CHECKPOINT_FAMILY_*
    int32_t num_kv_heads, ffn_hidden;
    double rope_theta, norm_eps;
} CheckpointModel;

static inline const char* checkpoint_family_name(int32_t family) {
    const ModelSpec* s = model_spec(family);
    return s ? s->name : "unknown";
}

// The header's model of config c: the family's sizes; NKV, F, RoPE theta and eps only where the family's
// header carries them (ModelSpec.header_sizes), else 0, so that a GPT-2 checkpoint's bytes do not
// depend on them.
static inline CheckpointModel checkpoint_model_of(const ModelConfig* c) {
    CheckpointModel k;
    memset(&k, 0, sizeof(k));
    k.family = c->family;
    k.num_layers = c->num_layers;
    k.channels = c->channels;
    k.num_heads = c->num_heads;
    k.vocab_size = c->vocab_size;
    k.padded_vocab_size = c->padded_vocab_size;
    k.max_seq_len = c->max_seq_len;
    k.num_params = (int64_t)model_num_params(c);
    const ModelSpec* s = model_spec(c->family);
    if (s && s->header_sizes) {
        k.num_kv_heads = c->num_kv_heads;
        k.ffn_hidden = c->ffn_hidden;
        k.rope_theta = c->rope_theta;
        k.norm_eps = c->norm_eps;
    }
    return k;
}

// The config of a header's model (its family known: model_spec(k->family) not NULL). A header without
// NKV and F is GPT-2's: NKV = NH, F = 4C, LayerNorm's eps 1e-5.
static inline ModelConfig checkpoint_config_of(const CheckpointModel* k) {
    const ModelSpec* s = model_spec(k->family);
    if (s && s->header_sizes)
        return model_config_sizes(k->family, k->vocab_size, k->padded_vocab_size, k->max_seq_len, k->num_layers,
                                  k->channels, k->num_heads, k->num_kv_heads, k->ffn_hidden, k->rope_theta, k->norm_eps);
    return model_config_sizes(k->family, k->vocab_size, k->padded_vocab_size, k->max_seq_len, k->num_layers,
                              k->channels, k->num_heads, k->num_heads, 4 * k->channels, 0.0, 1e-5);
}

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
    CKPT_H_DATA = 14, CKPT_H_SETTINGS_BYTES = 26, CKPT_H_TENSORS = 27, CKPT_H_CRC = 28, CKPT_H_FAMILY = 29,
    CKPT_H_KV_HEADS = 30, CKPT_H_FFN_HIDDEN = 31, CKPT_H_ROPE_THETA = 32, CKPT_H_NORM_EPS = 34
};

static inline void checkpoint_put64(int32_t* h, int at, uint64_t v) {
    h[at] = (int32_t)(uint32_t)(v & 0xffffffffu);
    h[at + 1] = (int32_t)(uint32_t)(v >> 32);
}
static inline uint64_t checkpoint_get64(const int32_t* h, int at) {
    return (uint64_t)(uint32_t)h[at] | ((uint64_t)(uint32_t)h[at + 1] << 32);
}
static inline void checkpoint_put_double(int32_t* h, int at, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    checkpoint_put64(h, at, bits);
}
static inline double checkpoint_get_double(const int32_t* h, int at) {
    uint64_t bits = checkpoint_get64(h, at);
    double v;
    memcpy(&v, &bits, sizeof(v));
    return v;
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
    if (s->model.family != CHECKPOINT_FAMILY_GPT2) {  // GPT-2 leaves slots 29.. at 0
        h[CKPT_H_FAMILY] = s->model.family;
        h[CKPT_H_KV_HEADS] = s->model.num_kv_heads;
        h[CKPT_H_FFN_HIDDEN] = s->model.ffn_hidden;
        checkpoint_put_double(h, CKPT_H_ROPE_THETA, s->model.rope_theta);
        checkpoint_put_double(h, CKPT_H_NORM_EPS, s->model.norm_eps);
    }
}

static inline void checkpoint_unpack_header(CheckpointState* s, const int32_t h[CHECKPOINT_HEADER_INTS]) {
    s->model.num_layers = h[CKPT_H_LAYERS];
    s->model.channels = h[CKPT_H_CHANNELS];
    s->model.num_heads = h[CKPT_H_HEADS];
    s->model.vocab_size = h[CKPT_H_VOCAB];
    s->model.padded_vocab_size = h[CKPT_H_PADDED_VOCAB];
    s->model.max_seq_len = h[CKPT_H_MAX_SEQ_LEN];
    s->model.num_params = (int64_t)checkpoint_get64(h, CKPT_H_PARAMS);
    s->model.family = h[CKPT_H_FAMILY];
    s->model.num_kv_heads = h[CKPT_H_KV_HEADS];
    s->model.ffn_hidden = h[CKPT_H_FFN_HIDDEN];
    s->model.rope_theta = checkpoint_get_double(h, CKPT_H_ROPE_THETA);
    s->model.norm_eps = checkpoint_get_double(h, CKPT_H_NORM_EPS);
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
    if (s->step < 0 || s->step > CHECKPOINT_MAX_STEP) {
        snprintf(w->err, sizeof(w->err), "checkpoint %s: step %lld is outside [0, %lld], the steps a run can take",
                 path, (long long)s->step, (long long)CHECKPOINT_MAX_STEP);
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

// The reader (checkpoint_reader_open, checkpoint_check_model, checkpoint_reader_verify, ...) is in its own
// file, which needs everything above.
#include "checkpoint_read.h"
