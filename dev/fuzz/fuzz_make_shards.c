// fuzz_make_shards.c: build/make_shards (data/make_shards.c) in this process, on odd documents: its main
// runs as the command line would run it, over files written from the input, into a directory that holds
// the shards of an earlier, larger run.
// The input is parts (fuzz.h): settings, then one document per part. Settings, byte by byte:
//   0 the encoding: even gpt2 (uint16 shards), odd o200k_base (uint32 shards)   1 --shard-tokens 16 + s % 48
//   2 --val-every s % 5   3 flags: 1 one more document that is a directory, 2 one that does not exist,
//   4 --allow-empty-split 1, 8 the documents through --list   4 shards of the earlier run per split (s % 8)
// make_shards' own code is compiled into this file, unchanged: its main becomes make_shards_main, and
// what it would do once per process is done once here instead (the tables are loaded and the encoders
// built at start; an exit() of a failed run comes back here, which then does what its exit handler
// would: the temporary files of open shards are removed). What main allocates is tracked, so that a run
// that ends in exit() leaks nothing.
// Properties: a run ends with exit status 0 or a failure; no temporary file is left; every shard in the
// directory is whole; the directory never holds this run's shards beside the earlier run's (the same files, their tokens
// unchanged); after a
// successful run the shards of each split, in order, hold <|endoftext|> and the ids of each of its
// documents in order, each shard at most --shard-tokens, and no shard of the earlier run is left.
#define FUZZ_WRAP_CJSON
#include "fuzz.h"
#include <signal.h>
#include <time.h>
#include "../../llmc/core/check.h"
#include "../../llmc/data/shard.h"
#include "../../llmc/data/tokenizer.h"
#include "../../llmc/data/tokenizer_encode.h"
#include "../../llmc/data/tokenizer_tiktoken.h"

// --- what main does once per process, done once -------------------------------------------------

static Tokenizer cached_tok[2];  // gpt2, o200k_base
static Encoder cached_enc[2];

static int cached_index(const char* name) { return strcmp(name, "gpt2") == 0 ? 0 : 1; }

static void fuzz_tokenizer_init_encoding(Tokenizer* t, const char* name, const char* path) {
    (void)path;
    *t = cached_tok[cached_index(name)];  // shared tables: main's tokenizer_free is a no-op below
}

static void fuzz_encoder_init(Encoder* e, const Tokenizer* t) {
    memset(e, 0, sizeof(*e));
    e->tok = t;
}

// --- what main allocates, tracked -----------------------------------------------------------------

static void* live[256];
static int n_live;

static void track(void* old, void* now) {
    for (int i = 0; old && i < n_live; i++)
        if (live[i] == old) { live[i] = now; return; }
    if (!now) return;
    if (n_live == 256) FUZZ_FAIL("more than 256 live allocations tracked");
    live[n_live++] = now;
}

static void untrack(void* p) {
    for (int i = 0; p && i < n_live; i++)
        if (live[i] == p) { live[i] = live[--n_live]; return; }
}

static void free_live(void) {
    for (int i = 0; i < n_live; i++) free(live[i]);
    n_live = 0;
}

static void* fuzz_realloc(void* old, size_t n) {
    void* p = realloc_check_(old, n, __FILE__, __LINE__);
    track(old, p);
    return p;
}

static unsigned char* fuzz_read_file(const char* path, size_t* len, char* err, size_t n) {
    unsigned char* p = tokenizer_read_file(path, len, err, n);
    track(NULL, p);
    return p;
}

static void fuzz_free(void* p) {
    untrack(p);
    free(p);
}

static void fuzz_token_buf_push(TokenBuf* b, int32_t id) {
    void* old = b->ids;
    token_buf_push(b, id);
    track(old, b->ids);
}

static void fuzz_token_buf_free(TokenBuf* b) {
    untrack(b->ids);
    token_buf_free(b);
}

// encoder_encode with the cached encoder (its piece cache carries over from run to run)
static int fuzz_encoder_encode(Encoder* e, const unsigned char* text, size_t len, TokenBuf* out, size_t* bad) {
    Encoder* c = &cached_enc[cached_index(e->tok->name)];
    void* old = out->ids;
    int rc = encoder_encode(c, text, len, out, bad);
    track(old, out->ids);
    if (rc != 0) memcpy(e->err, c->err, sizeof(e->err));
    return rc;
}

static FILE* quiet;  // make_shards' own messages: printed only with LLMC_FUZZ_VERBOSE set

// --- make_shards.c ----------------------------------------------------------------------------------

#undef realloc_check
#define realloc_check(p, n) fuzz_realloc((p), (n))
#define tokenizer_read_file(path, len, err, n) fuzz_read_file((path), (len), (err), (n))
#define free(p) fuzz_free(p)
#define token_buf_push(b, id) fuzz_token_buf_push((b), (id))
#define token_buf_free(b) fuzz_token_buf_free(b)
#define tokenizer_init_encoding(t, name, path) fuzz_tokenizer_init_encoding((t), (name), (path))
#define tokenizer_free(t) ((void)(t))
#define encoder_init(e, t) fuzz_encoder_init((e), (t))
#define encoder_encode(e, text, len, out, bad) fuzz_encoder_encode((e), (text), (len), (out), (bad))
#define encoder_free(e) ((void)(e))
#define atexit(f) ((void)(f), 0)
#define signal(s, h) ((void)(s), (void)(h), SIG_DFL)
#undef stderr
#define stderr quiet
#define main make_shards_main
#include "../../data/make_shards.c"
#undef main
#undef stderr
#define stderr stderr
#undef realloc_check
#define realloc_check(old, size) realloc_check_((old), (size), __FILE__, __LINE__)
#undef tokenizer_read_file
#undef free
#undef token_buf_push
#undef token_buf_free
#undef tokenizer_init_encoding
#undef tokenizer_free
#undef encoder_init
#undef encoder_encode
#undef encoder_free
#undef atexit
#undef signal

// --- the harness ------------------------------------------------------------------------------------

static char out_dir[1100], docs_dir[1100];

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc; (void)argv;
    const char* names[2] = {"gpt2", "o200k_base"};
    for (int i = 0; i < 2; i++) {
        char err[TOKENIZER_ERR_LEN];
        if (tokenizer_load_encoding(&cached_tok[i], names[i], NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_make_shards: %s (run from the repository's root, after `make data data-tiktoken`)\n", err);
            exit(1);
        }
        encoder_init(&cached_enc[i], &cached_tok[i]);
    }
    quiet = getenv("LLMC_FUZZ_VERBOSE") ? stderr : fopen("/dev/null", "w");
    fuzz_path(out_dir, sizeof(out_dir), "out");
    fuzz_path(docs_dir, sizeof(docs_dir), "docs");
    return 0;
}

typedef struct {
    ino_t ino[2][8];  // the earlier run's shards: train, val
    int n[2];
} Stale;

static const char* split_name[2] = {"train", "val"};
static const uint32_t stale_ids[5] = {GPT2_EOT, 1, GPT2_EOT, 2, GPT2_EOT};  // a sequence no run writes

// The earlier, larger run: n shards of each split.
static void write_stale(Stale* s, int n, int wide) {
    for (int k = 0; k < 2; k++) {
        s->n[k] = n;
        for (int i = 0; i < n; i++) {
            char path[1300];
            snprintf(path, sizeof(path), "%s/fz_%s_%06d.bin", out_dir, split_name[k], i);
            uint16_t t16[5];
            for (int j = 0; j < 5; j++) t16[j] = (uint16_t)stale_ids[j];
            ShardWriter w;
            if (wide) { shard_writer_open_u32(&w, path); shard_writer_append_u32(&w, stale_ids, 5); }
            else { shard_writer_open(&w, path); shard_writer_append(&w, t16, 5); }
            shard_writer_close(&w);
            struct stat st;
            stat(path, &st);
            s->ino[k][i] = st.st_ino;
        }
    }
}

// Whether the shard at path (of split k) is one of the earlier run's: the same file, and its tokens.
static int is_stale(const Stale* s, int k, const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    int same = 0;
    for (int i = 0; i < s->n[k]; i++) same |= s->ino[k][i] == st.st_ino;
    char err[1600];
    int width;
    uint32_t t[5];
    return same && shard_check_header(path, &width, err, sizeof(err)) == 5 &&
           shard_read_tokens(path, 5, width, 1 << 30, t, err, sizeof(err)) == 0 && memcmp(t, stale_ids, sizeof(t)) == 0;
}

// The directory after a run: no temporary file, every shard whole, no mix of runs; *shards[k]: this
// run's shards of split k, contiguous from 0 (-1 when they are not), *stale_left: the earlier run's left.
static void check_dir(const Stale* s, int shards[2], int* stale_left) {
    DIR* d = opendir(out_dir);
    if (!d) FUZZ_FAIL("%s: %s", out_dir, strerror(errno));
    int fresh[2] = {0, 0}, old[2] = {0, 0}, top[2] = {-1, -1};
    *stale_left = 0;
    for (struct dirent* e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[1300], err[1600];
        snprintf(path, sizeof(path), "%s/%s", out_dir, e->d_name);
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0) FUZZ_FAIL("a temporary file is left: %s", path);
        int k = strncmp(e->d_name, "fz_train_", 9) == 0 ? 0 : strncmp(e->d_name, "fz_val_", 7) == 0 ? 1 : -1;
        if (k < 0) FUZZ_FAIL("an unexpected file: %s", path);
        int width;
        if (shard_check_header(path, &width, err, sizeof(err)) < 0) FUZZ_FAIL("a shard that is not whole: %s", err);
        int index = atoi(e->d_name + (k == 0 ? 9 : 7));
        if (is_stale(s, k, path)) { old[k]++; (*stale_left)++; }
        else { fresh[k]++; if (index > top[k]) top[k] = index; }
    }
    closedir(d);
    for (int k = 0; k < 2; k++) {
        if (fresh[k] && old[k])
            FUZZ_FAIL("the %s shards mix this run's (%d) and the earlier run's (%d)", split_name[k], fresh[k], old[k]);
        shards[k] = top[k] + 1 == fresh[k] ? fresh[k] : -1;
    }
}

// Every shard of split k, in order, against the documents that go to it.
static void check_split(int k, int n_shards, int wide, int shard_tokens, int val_every, FuzzParts* p) {
    const Encoder* enc = &cached_enc[wide];
    static TokenBuf want;
    want.len = 0;
    for (int d = 1; d < p->n; d++) {
        int doc = d - 1, to_val = val_every > 0 && doc % val_every == 0;
        if (to_val != k) continue;
        size_t bad;
        token_buf_push(&want, cached_tok[wide].eot_id);
        if (encoder_encode((Encoder*)enc, p->at[d], p->len[d], &want, &bad) != 0)
            FUZZ_FAIL("document %d was written, and its text is not valid UTF-8", doc);
    }
    size_t at = 0;
    for (int i = 0; i < n_shards; i++) {
        char path[1300], err[1600];
        snprintf(path, sizeof(path), "%s/fz_%s_%06d.bin", out_dir, split_name[k], i);
        int width;
        int64_t n = shard_check_header(path, &width, err, sizeof(err));
        if (n <= 0 || n > shard_tokens || width != (wide ? 4 : 2))
            FUZZ_FAIL("%s: %lld tokens of %d bytes, expected 1 to %d of %d", path, (long long)n, width, shard_tokens,
                      wide ? 4 : 2);
        uint32_t* t = (uint32_t*)malloc((size_t)n * sizeof(uint32_t));
        if (shard_read_tokens(path, n, width, cached_tok[wide].vocab_size, t, err, sizeof(err)) != 0) FUZZ_FAIL("%s", err);
        for (int64_t j = 0; j < n; j++, at++)
            if (at >= want.len || t[j] != (uint32_t)want.ids[at])
                FUZZ_FAIL("%s: token %lld is %u, the documents give %d", path, (long long)j, t[j],
                          at < want.len ? want.ids[at] : -1);
        free(t);
    }
    if (at != want.len) FUZZ_FAIL("the %s shards hold %zu tokens, the documents give %zu", split_name[k], at, want.len);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzParts p;
    fuzz_parts(&p, data, size);
    if (p.n < 2) return 0;
    uint8_t st[5] = {0};
    memcpy(st, p.at[0], p.len[0] < sizeof(st) ? p.len[0] : sizeof(st));
    int wide = st[0] & 1, shard_tokens = 16 + st[1] % 48, val_every = st[2] % 5, flags = st[3], n_stale = st[4] % 8;

    fuzz_rm_rf(out_dir);
    fuzz_rm_rf(docs_dir);
    if (mkdir(out_dir, 0700) != 0 || mkdir(docs_dir, 0700) != 0) { perror(out_dir); abort(); }
    Stale stale;
    write_stale(&stale, n_stale, wide);

    // the command line
    static char args[FUZZ_MAX_PARTS + 16][1300];
    char* argv[FUZZ_MAX_PARTS + 24];
    int argc = 0;
    const char* fixed[] = {"make_shards", "--encoding", wide ? "o200k_base" : "gpt2", "--out", out_dir, "--name", "fz"};
    for (int i = 0; i < 7; i++) argv[argc++] = (char*)fixed[i];
    snprintf(args[0], sizeof(args[0]), "%d", shard_tokens);
    snprintf(args[1], sizeof(args[1]), "%d", val_every);
    argv[argc++] = (char*)"--shard-tokens"; argv[argc++] = args[0];
    argv[argc++] = (char*)"--val-every"; argv[argc++] = args[1];
    if (flags & 4) { argv[argc++] = (char*)"--allow-empty-split"; argv[argc++] = (char*)"1"; }
    int n_docs = 0, odd = 0;
    static char list[(FUZZ_MAX_PARTS + 2) * 1300];
    size_t list_len = 0;
    for (int d = 1; d <= p.n + 1; d++) {
        char* path = args[2 + n_docs];
        snprintf(path, sizeof(args[0]), "%s/doc_%02d.txt", docs_dir, d);
        if (d < p.n) fuzz_write(path, p.at[d], p.len[d]);
        else if (d == p.n && flags & 1) { mkdir(path, 0700); odd = 1; }  // a directory given as a document
        else if (d == p.n + 1 && flags & 2) odd = 1;                      // a document that does not exist
        else continue;
        n_docs++;
        if (flags & 8) list_len += (size_t)snprintf(list + list_len, sizeof(list) - list_len, "%s\n", path);
        else argv[argc++] = path;
    }
    char list_path[1300];
    if (flags & 8) {
        snprintf(list_path, sizeof(list_path), "%s/list.txt", docs_dir);
        fuzz_write(list_path, list, list_len);
        argv[argc++] = (char*)"--list";
        argv[argc++] = list_path;
    }
    argv[argc] = NULL;

    memset(splits, 0, sizeof(splits));
    volatile int exited, rc = 0;
    FUZZ_TRY(exited, rc = make_shards_main(argc, argv));
    if (exited) {  // what its exit handler does, and what the end of the process would
        for (int k = 0; k < 2; k++)
            if (splits[k].open && splits[k].w.f) { fclose(splits[k].w.f); splits[k].w.f = NULL; }
        splits_remove_temporaries();
        if (fuzz_exit_status == 0) FUZZ_FAIL("make_shards exited with status 0 before its end");
    }
    free_live();
    int shards[2], stale_left;
    check_dir(&stale, shards, &stale_left);
    if (exited || rc != 0) {
        if (!exited && rc != 1) FUZZ_FAIL("make_shards returned %d", rc);
        return 0;
    }
    if (odd) FUZZ_FAIL("make_shards succeeded with a directory or a missing file among its documents");
    if (stale_left) FUZZ_FAIL("a successful run left %d shards of the earlier run", stale_left);
    for (int k = 0; k < 2; k++) {
        if (shards[k] < 0) FUZZ_FAIL("the %s shards are not numbered from 0 without gaps", split_name[k]);
        check_split(k, shards[k], wide, shard_tokens, val_every, &p);
    }
    return 0;
}
