// dataloader.h: host-only loader of token shards (llmc/data/shard.h) into (B, T) batches of inputs and
// targets. The trainer copies the batch to the GPU itself.
//
// The stream. The shards matched by a glob pattern (sorted by path) are cut into windows of T+1
// tokens at stride T: window w of a shard of n tokens covers tokens [w*T, w*T + T], for
// w < (n - 1) / T; windows never cross shards (so up to T-1 tokens at a shard's end go unused).
// One epoch visits every window once: the shards in an order, and within each shard its windows in
// an order. With shuffling (train) both orders are
// permutations drawn from (seed, epoch) and (seed, epoch, shard); without (val) both are the identity.
// Epochs follow each other in one endless stream of windows. Global batch g is stream windows
// [g*B, g*B + B); row b of a batch gives inputs = window[0..T-1] and targets = window[1..T], as int32.
// Process `rank` of `world_size` takes global batches rank, rank + world_size, ...: together the ranks
// take every batch, so every window exactly once per epoch, and no two ranks the same window.
//
// Invariants: a batch is a pure function of (shards, B, T, shuffle, seed, global batch index), so
// the saved position (a few integers) restores exactly the next batch of the uninterrupted run, for
// any world size; memory is allocated once at init (one shard of tokens, one window order, the batch);
// a shard is read when the stream first needs it, its header checked again then (a shard replaced
// during the run is refused), and each token id is checked against the vocabulary.
//
// Layouts. Shards hold uint16 ids (GPT-2 layout) or uint32 ids (llm.c's Llama-3 layout); see shard.h.
// All shards of one pattern must have the same layout (init refuses a mix, naming a shard of each).
// The loaded shard is kept as uint32 either way, so the host buffer is 4 bytes per token of the
// largest shard: for uint16 shards twice their size on disk (400 MB for a 100M-token shard instead
// of 200 MB), per loader.
//
// Errors: the functions that can fail return 0, or -1 with a message naming the file (or the pattern)
// in dl->err; nothing exits, so bad inputs are testable. The trainer wraps them in dataloader_check,
// which prints the message and exits:
//     DataLoader dl;
//     DataLoaderConfig cfg = {.pattern = "data/starter/starter_train_*.bin", .B = 8, .T = 1024,
//                             .shuffle = 1, .seed = 1337};
//     dataloader_check(&dl, dataloader_init(&dl, &cfg));
//     dataloader_check(&dl, dataloader_next_batch(&dl));   // dl.inputs, dl.targets: (B, T) int32
#pragma once
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../core/check.h"
#include "../core/rand.h"
#include "shard.h"

#define DATALOADER_ERR_LEN 4608  // a 4096-byte path and the words around it
// The stream's length: windows [0, DATALOADER_MAX_WINDOWS), so global batches [0, MAX / B). Every
// window index the loader computes (global batch * B + row) stays below it, so none overflows; a run
// of a million steps of a million sequences is 2^40 windows, far inside it.
#define DATALOADER_MAX_WINDOWS ((int64_t)1 << 62)

typedef struct {
    const char* pattern;  // glob(3) pattern of shard files; copied at init
    int B, T;             // batch size, sequence length: a shard must hold at least B*T+1 tokens
    int rank;             // this process, in [0, world_size)
    int world_size;       // number of processes sharing the stream; 0 means 1
    int shuffle;          // 1: shuffle shards and windows each epoch (train); 0: sequential (val)
    uint64_t seed;        // names the shuffle; the same seed gives the same batches everywhere
    int vocab_size;       // every token id must be below this (at most 2^31 - 1); 0 means GPT2_VOCAB
} DataLoaderConfig;

// Where the stream stands, to keep in a checkpoint. Identical on every rank of a synchronous run
// (so rank 0 can write it), and independent of the world size.
typedef struct {
    int64_t global_batch;   // batches all ranks together have taken: the next step starts at this one
    int64_t total_windows;  // the rest identifies the stream; restore refuses a different one
    uint64_t seed;
    int64_t B, T, shuffle;
} DataLoaderPosition;

typedef struct {
    DataLoaderConfig cfg;       // resolved: world_size and vocab_size filled in
    char pattern[4096];         // cfg.pattern points here
    glob_t glob;                // glob.gl_pathv: (n_shards,) shard paths, sorted with strcmp
    int globbed;                // glob must be freed
    int n_shards;
    int token_bytes;            // the shards' id width: 2 (uint16 layout) or 4 (uint32 layout)
    int64_t* shard_tokens;      // (n_shards,) token count of each shard
    int64_t* shard_windows;     // (n_shards,) (tokens - 1) / T
    int64_t total_windows;      // windows in one epoch: the sum of shard_windows
    int64_t order_epoch;        // the epoch that shard_order and order_start describe; -1: none yet
    int32_t* shard_order;       // (n_shards,) the shard visited at each position of order_epoch
    int64_t* order_start;       // (n_shards + 1,) epoch offset of each position's first window
    int loaded_shard;           // the shard in `tokens`; -1: none
    int64_t window_epoch;       // the epoch that window_order describes for loaded_shard; -1: none
    uint32_t* tokens;           // (max shard tokens,) the loaded shard, widened to uint32
    int32_t* window_order;      // (max shard windows,) window visited at each position of the shard
    int64_t next_global;        // the global batch index this rank returns next
    int64_t epoch;              // epoch of the first row of the last batch (for logs)
    int32_t* inputs;            // (B, T) token ids of the last batch
    int32_t* targets;           // (B, T) inputs shifted by one: targets[b, t] = window_b[t + 1]
    char err[DATALOADER_ERR_LEN];  // why the last call returned -1
} DataLoader;

// --- free ----------------------------------------------------------------------------------------

static inline void dataloader_free(DataLoader* dl) {
    free(dl->shard_tokens); free(dl->shard_windows);
    free(dl->shard_order); free(dl->order_start);
    free(dl->tokens); free(dl->window_order);
    free(dl->inputs); free(dl->targets);
    if (dl->globbed) globfree(&dl->glob);
    char err[DATALOADER_ERR_LEN];  // kept: a failed init frees everything but the reason
    memcpy(err, dl->err, sizeof(err));
    memset(dl, 0, sizeof(*dl));
    memcpy(dl->err, err, sizeof(err));
}

// --- init ----------------------------------------------------------------------------------------

static inline int dataloader_fail(DataLoader* dl, const char* what) {
    snprintf(dl->err, sizeof(dl->err), "%s", what);
    return -1;
}

static inline int dataloader_compare_paths(const void* a, const void* b) {
    return strcmp(*(char* const*)a, *(char* const*)b);
}

static inline int dataloader_check_config(DataLoader* dl) {
    DataLoaderConfig* c = &dl->cfg;
    if (c->world_size == 0) c->world_size = 1;
    if (c->vocab_size == 0) c->vocab_size = GPT2_VOCAB;
    char msg[256];
    if (c->B <= 0 || c->T <= 0 || (int64_t)c->B * c->T >= SHARD_MAX_TOKENS)
        snprintf(msg, sizeof(msg), "batch size B=%d and sequence length T=%d must be positive, B*T below 2^31",
                 c->B, c->T);
    else if (c->world_size < 0 || c->rank < 0 || c->rank >= c->world_size)
        snprintf(msg, sizeof(msg), "rank %d is not in [0, world size %d)", c->rank, c->world_size);
    else if (c->vocab_size < 0)
        snprintf(msg, sizeof(msg), "vocab size %d is negative", c->vocab_size);
    else return 0;
    snprintf(dl->err, sizeof(dl->err), "dataloader: %s", msg);
    return -1;
}

// Globs the pattern, sorts the paths and checks every shard's header and size.
static inline int dataloader_find_shards(DataLoader* dl) {
    int rc = glob(dl->pattern, GLOB_NOSORT, NULL, &dl->glob);
    dl->globbed = 1;
    if (rc == GLOB_NOMATCH || (rc == 0 && dl->glob.gl_pathc == 0)) {
        snprintf(dl->err, sizeof(dl->err), "no shard file matches the pattern %s; `make data` makes the starter "
                 "shards in data/starter/, `make data-starter-o200k` and `make data-starter-cl100k` those of the "
                 "tiktoken encodings in data/starter_o200k/ and data/starter_cl100k/ (or point the pattern at your "
                 "own .bin shards)", dl->pattern);
        return -1;
    }
    if (rc != 0) {
        snprintf(dl->err, sizeof(dl->err), "glob of the pattern %s failed (%s)", dl->pattern,
                 rc == GLOB_NOSPACE ? "out of memory" : "read error");
        return -1;
    }
    qsort(dl->glob.gl_pathv, dl->glob.gl_pathc, sizeof(char*), dataloader_compare_paths);
    dl->n_shards = (int)dl->glob.gl_pathc;
    dl->shard_tokens = (int64_t*)calloc_check(dl->n_shards, sizeof(int64_t));
    dl->shard_windows = (int64_t*)calloc_check(dl->n_shards, sizeof(int64_t));
    int64_t need = (int64_t)dl->cfg.B * dl->cfg.T + 1;
    for (int i = 0; i < dl->n_shards; i++) {
        const char* path = dl->glob.gl_pathv[i];
        int width = 0;
        int64_t n = shard_check_header(path, &width, dl->err, sizeof(dl->err));
        if (n < 0) return -1;
        if (i == 0) dl->token_bytes = width;
        if (width != dl->token_bytes) {
            snprintf(dl->err, sizeof(dl->err), "the pattern %s mixes shard layouts: %s holds %s, %s holds %s; "
                     "one pattern must name shards of one layout (made with one --encoding)", dl->pattern,
                     dl->glob.gl_pathv[0], shard_layout_name(dl->token_bytes), path, shard_layout_name(width));
            return -1;
        }
        if (n < need) {
            snprintf(dl->err, sizeof(dl->err), "%s: %lld tokens, fewer than one batch of B*T+1 = %d*%d+1 = %lld; "
                     "use a smaller batch size or sequence length, or bigger shards", path, (long long)n,
                     dl->cfg.B, dl->cfg.T, (long long)need);
            return -1;
        }
        dl->shard_tokens[i] = n;
        dl->shard_windows[i] = (n - 1) / dl->cfg.T;
        dl->total_windows += dl->shard_windows[i];
    }
    return 0;
}

// --- the stream ----------------------------------------------------------------------------------

// Makes shard_order and order_start describe `epoch`.
static inline void dataloader_order_shards(DataLoader* dl, int64_t epoch) {
    for (int i = 0; i < dl->n_shards; i++) dl->shard_order[i] = i;
    if (dl->cfg.shuffle) {
        uint64_t rng = rand_mix(dl->cfg.seed, (uint64_t)epoch, 0);
        rand_shuffle_int32(&rng, dl->shard_order, dl->n_shards);
    }
    dl->order_start[0] = 0;
    for (int p = 0; p < dl->n_shards; p++)
        dl->order_start[p + 1] = dl->order_start[p] + dl->shard_windows[dl->shard_order[p]];
    dl->order_epoch = epoch;
}

// Makes `shard` the loaded one, with its window order for `epoch`.
static inline int dataloader_load_shard(DataLoader* dl, int shard, int64_t epoch) {
    if (dl->loaded_shard != shard) {
        dl->loaded_shard = -1;  // the buffer is overwritten: if the read fails, nothing is loaded
        dl->window_epoch = -1;
        if (shard_read_tokens(dl->glob.gl_pathv[shard], dl->shard_tokens[shard], dl->token_bytes, dl->cfg.vocab_size,
                              dl->tokens, dl->err, sizeof(dl->err)) != 0)
            return -1;
        dl->loaded_shard = shard;
    }
    if (dl->window_epoch != epoch) {
        int32_t n = (int32_t)dl->shard_windows[shard];
        for (int32_t w = 0; w < n; w++) dl->window_order[w] = w;
        if (dl->cfg.shuffle) {
            uint64_t rng = rand_mix(dl->cfg.seed, (uint64_t)epoch, 1 + (uint64_t)shard);
            rand_shuffle_int32(&rng, dl->window_order, n);
        }
        dl->window_epoch = epoch;
    }
    return 0;
}

// Points *window at the T+1 tokens of stream window s (loading its shard), sets *epoch.
static inline int dataloader_window(DataLoader* dl, int64_t s, const uint32_t** window, int64_t* epoch) {
    *epoch = s / dl->total_windows;
    int64_t off = s % dl->total_windows;
    if (dl->order_epoch != *epoch) dataloader_order_shards(dl, *epoch);
    int lo = 0, hi = dl->n_shards - 1;  // the position p with order_start[p] <= off < order_start[p+1]
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->order_start[mid] <= off) lo = mid; else hi = mid - 1;
    }
    int shard = dl->shard_order[lo];
    if (dataloader_load_shard(dl, shard, *epoch) != 0) return -1;
    int64_t w = dl->window_order[off - dl->order_start[lo]];
    *window = dl->tokens + w * dl->cfg.T;
    return 0;
}

// Loads the shard that global batch g starts in, without filling the batch: init and restore use it
// so that an unreadable shard fails there, not one step later.
static inline int dataloader_prefetch(DataLoader* dl, int64_t global_batch) {
    const uint32_t* window;
    int64_t epoch;
    return dataloader_window(dl, global_batch * dl->cfg.B, &window, &epoch);
}

// --- init and batches ---------------------------------------------------------------------------

// Returns 0, or -1 with the reason in dl->err (then everything is freed; dataloader_free is harmless).
static inline int dataloader_init(DataLoader* dl, const DataLoaderConfig* cfg) {
    memset(dl, 0, sizeof(*dl));
    dl->cfg = *cfg;
    if (!cfg->pattern || snprintf(dl->pattern, sizeof(dl->pattern), "%s", cfg->pattern) >= (int)sizeof(dl->pattern))
        return dataloader_fail(dl, "dataloader: the shard pattern is missing or longer than 4095 bytes");
    dl->cfg.pattern = dl->pattern;
    if (dataloader_check_config(dl) != 0 || dataloader_find_shards(dl) != 0) { dataloader_free(dl); return -1; }
    int64_t max_tokens = 0, max_windows = 0;
    int largest = 0;
    for (int i = 0; i < dl->n_shards; i++) {
        if (dl->shard_tokens[i] > max_tokens) { max_tokens = dl->shard_tokens[i]; largest = i; }
        if (dl->shard_windows[i] > max_windows) max_windows = dl->shard_windows[i];
    }
    size_t bt = (size_t)dl->cfg.B * dl->cfg.T;
    // sized by the largest shard's count (< 2^31, backed by data: shard_check_header): when it does not
    // fit, the shard's size is the cause, not the batch or the model
    size_t shard_bytes = (size_t)max_tokens * sizeof(uint32_t) + (size_t)max_windows * sizeof(int32_t);
    dl->tokens = (uint32_t*)malloc((size_t)max_tokens * sizeof(uint32_t));
    dl->window_order = (int32_t*)malloc((size_t)max_windows * sizeof(int32_t) + 1);
    if (!dl->tokens || !dl->window_order) {
        snprintf(dl->err, sizeof(dl->err), "%s holds %lld tokens: the loader keeps one shard in memory as 4-byte "
                 "ids, %.1f MiB for the largest shard of %s, and that much host memory could not be allocated; free "
                 "host memory, or cut the data into smaller shards (build/make_shards --shard-tokens N)",
                 dl->glob.gl_pathv[largest], (long long)max_tokens, (double)shard_bytes / (1 << 20), dl->cfg.pattern);
        dataloader_free(dl);
        return -1;
    }
    dl->shard_order = (int32_t*)malloc_check((size_t)dl->n_shards * sizeof(int32_t));
    dl->order_start = (int64_t*)malloc_check((size_t)(dl->n_shards + 1) * sizeof(int64_t));
    dl->inputs = (int32_t*)malloc_check(bt * sizeof(int32_t));
    dl->targets = (int32_t*)malloc_check(bt * sizeof(int32_t));
    dl->order_epoch = -1;
    dl->loaded_shard = -1;
    dl->window_epoch = -1;
    dl->next_global = dl->cfg.rank;
    if (dataloader_prefetch(dl, dl->next_global) != 0) { dataloader_free(dl); return -1; }
    return 0;
}

// The last global batch of the stream: (last + 1) * B <= DATALOADER_MAX_WINDOWS.
static inline int64_t dataloader_last_batch(const DataLoader* dl) {
    return DATALOADER_MAX_WINDOWS / dl->cfg.B - 1;
}

// Fills dl->inputs and dl->targets with this rank's next batch. Returns 0, or -1 when a shard the
// stream reached is unreadable or holds a token id >= vocab_size (the message names it), or when the
// stream has no batch left (after DATALOADER_MAX_WINDOWS windows).
static inline int dataloader_next_batch(DataLoader* dl) {
    int B = dl->cfg.B, T = dl->cfg.T;
    if (dl->next_global > dataloader_last_batch(dl)) {
        snprintf(dl->err, sizeof(dl->err), "the data stream of %s ends at global batch %lld (2^62 windows of B=%d); "
                 "global batch %lld is past it", dl->cfg.pattern, (long long)dataloader_last_batch(dl), B,
                 (long long)dl->next_global);
        return -1;
    }
    int64_t s0 = dl->next_global * B;
    for (int b = 0; b < B; b++) {
        const uint32_t* window;
        int64_t epoch;
        if (dataloader_window(dl, s0 + b, &window, &epoch) != 0) return -1;
        if (b == 0) dl->epoch = epoch;
        for (int t = 0; t < T; t++) {
            dl->inputs[(size_t)b * T + t] = (int32_t)window[t];  // ids < vocab_size <= 2^31 - 1
            dl->targets[(size_t)b * T + t] = (int32_t)window[t + 1];
        }
    }
    dl->next_global += dl->cfg.world_size;
    return 0;
}

// Full rounds of world_size batches in one epoch: how many batches a val pass takes per rank
// without wrapping into the next epoch.
static inline int64_t dataloader_batches_per_epoch(const DataLoader* dl) {
    return dl->total_windows / ((int64_t)dl->cfg.B * dl->cfg.world_size);
}

// Back to the first batch of epoch 0 (a val pass starts here each time).
static inline void dataloader_reset(DataLoader* dl) {
    dl->next_global = dl->cfg.rank;
}

// --- resume --------------------------------------------------------------------------------------

static inline DataLoaderPosition dataloader_save(const DataLoader* dl) {
    DataLoaderPosition p;  // fields assigned one by one: the header is also compiled as C++ (nvcc)
    memset(&p, 0, sizeof(p));
    p.global_batch = dl->next_global - dl->cfg.rank;
    p.total_windows = dl->total_windows;
    p.seed = dl->cfg.seed;
    p.B = dl->cfg.B;
    p.T = dl->cfg.T;
    p.shuffle = dl->cfg.shuffle;
    return p;
}

// Continues the stream of `pos` (saved by any rank, with any world size). Refuses a position saved
// for another stream, since its batches would not be the ones the interrupted run would have seen,
// and a global batch outside the stream (negative, or one where some rank would have no batch left):
// the checkpoint's position is data, checked before it indexes anything.
static inline int dataloader_restore(DataLoader* dl, const DataLoaderPosition* pos) {
    const char* what = NULL;
    long long saved = 0, now = 0;
    if (pos->B != dl->cfg.B) { what = "batch size B"; saved = pos->B; now = dl->cfg.B; }
    else if (pos->T != dl->cfg.T) { what = "sequence length T"; saved = pos->T; now = dl->cfg.T; }
    else if (pos->shuffle != dl->cfg.shuffle) { what = "shuffle"; saved = pos->shuffle; now = dl->cfg.shuffle; }
    else if (pos->seed != dl->cfg.seed) { what = "seed"; saved = (long long)pos->seed; now = (long long)dl->cfg.seed; }
    else if (pos->total_windows != dl->total_windows) {
        what = "number of windows (the shards differ)"; saved = pos->total_windows; now = dl->total_windows;
    }
    if (what) {
        snprintf(dl->err, sizeof(dl->err), "cannot resume the data stream of %s: its %s was %lld, now %lld; "
                 "resume with the same shards, batch size, sequence length and seed", dl->pattern, what, saved, now);
        return -1;
    }
    // every rank must have a batch left: global_batch + world_size - 1 <= last, without overflow
    int64_t max_batch = dataloader_last_batch(dl) - (dl->cfg.world_size - 1);
    if (pos->global_batch < 0 || pos->global_batch > max_batch) {
        snprintf(dl->err, sizeof(dl->err), "cannot resume the data stream of %s: the checkpoint's data position, "
                 "global batch %lld, is outside [0, %lld] (the stream's 2^62 windows at B=%d over %d rank(s)): the "
                 "checkpoint is corrupt or was not written by this program; resume from another checkpoint",
                 dl->pattern, (long long)pos->global_batch, (long long)max_batch, dl->cfg.B, dl->cfg.world_size);
        return -1;
    }
    if (dataloader_prefetch(dl, pos->global_batch + dl->cfg.rank) != 0) return -1;
    dl->next_global = pos->global_batch + dl->cfg.rank;
    return 0;
}

// The trainer's wrapper: on rc != 0 exits with the message (llmc/core/check.h).
static inline void dataloader_check(const DataLoader* dl, int rc) {
    if (rc != 0)
        check_failf("the message names the file or setting; the shards' format and how to make them are in "
                    "doc/data.md", "%s", dl->err);
}
