// make_shards.c: text files -> token shards (llmc/data/shard.h, byte-compatible with llm.c's).
// usage: see usage() below, e.g.
//   build/make_shards --vocab data/gpt2/vocab.bpe --out data/starter --name starter data/.cache/starter/docs/*.txt
//   build/make_shards --encoding o200k_base --out data/starter_o200k --name starter data/.cache/starter/docs/*.txt
//
// --encoding gpt2 (the default) writes uint16 ids (magic 20240520, version 1); cl100k_base and
// o200k_base write uint32 ids in llm.c's Llama-3 layout (magic 20240801, version 7).
// Each input file is one document. Its ids are preceded by the encoding's <|endoftext|> (gpt2 50256,
// cl100k_base 100257, o200k_base 199999), as in llm.c, so a shard is EOT doc EOT doc ... and the
// number of EOTs is the number of documents. The text itself is encoded as ordinary text (tiktoken's
// encode_ordinary): a "<|endoftext|>" written in a document is not a boundary. Document i
// (0-based, in command-line order, a --list expanded in place) goes to the val split when
// i % val_every == 0, else to train. Each split is one stream of tokens cut into shards of at most
// --shard-tokens tokens: DIR/NAME_val_000000.bin, ..., DIR/NAME_train_000000.bin, ...; a document may
// span two shards (llm.c does the same; the loader reads windows, not documents).
//
// All or nothing: every shard is written and completed under its temporary name
// (DIR/NAME_SPLIT_NNNNNN.bin.tmp, ShardWriter), and only when every document has been read are the
// higher-numbered shards of the same NAME left by an earlier, larger run removed and this run's
// shards renamed into place, so that a glob over DIR/NAME_train_*.bin sees exactly one run's shards.
// Failure: an unreadable file, invalid UTF-8 or a failed write stops the run with a message naming
// the file (and the byte offset), exit status 1; an exit handler (plus SIGINT/SIGTERM) then removes
// every temporary file of the run, completed or not, so the shards of an earlier run stay as they
// were. The disk holds the earlier run's shards and this run's until the end.
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../llmc/core/check.h"
#include "../llmc/data/shard.h"
#include "../llmc/data/tokenizer.h"
#include "../llmc/data/tokenizer_encode.h"
#include "../llmc/data/tokenizer_tiktoken.h"

typedef struct {
    const char* encoding;   // gpt2, cl100k_base or o200k_base
    const char* vocab;      // the encoding's file; NULL = its default path
    const char* out_dir;    // shards go here (created if missing)
    const char* name;       // shard names start with this
    long long val_every;    // document i goes to val when i % val_every == 0; 0 = no val split
    long long shard_tokens; // at most this many tokens per shard
    long long allow_empty;  // 1: write even when the train split would get no document
    const char** files;     // (n_files,) documents, in order
    size_t n_files, cap_files;
    char* lists[64];        // (n_lists,) the --list files' text, which `files` points into
    int n_lists;
} Config;

// One output stream (train or val) and the shard it is writing.
typedef struct {
    const char* split;      // "train" or "val"
    char base[4096];        // DIR/NAME_SPLIT_: a shard's path is base, its index (6 digits or more), .bin
    ShardWriter w;
    int open;               // w holds an open temporary file
    int n_shards;           // shards completed (under their temporary names); also the index of the next one
    int n_published;        // shards renamed into place at the end of a successful run
    int64_t tokens, docs;   // totals written to this split
} Split;

static Split splits[2];     // train, val: global only so that the exit and signal handlers find them

static void usage(FILE* f) {
    fprintf(f,
            "usage: build/make_shards --out DIR --name NAME [options] FILE...\n"
            "Tokenizes each FILE (one document each, UTF-8) and writes token shards\n"
            "DIR/NAME_val_NNNNNN.bin and DIR/NAME_train_NNNNNN.bin (llm.c's formats). Every document is\n"
            "preceded by <|endoftext|> (gpt2 50256, cl100k_base 100257, o200k_base 199999).\n"
            "  --encoding NAME     gpt2 (default; uint16 shards), cl100k_base or o200k_base (uint32 shards,\n"
            "                      llm.c's Llama-3 layout)\n"
            "  --vocab PATH        the encoding's file: default data/gpt2/vocab.bpe (`make data` fetches it),\n"
            "                      data/tiktoken/cl100k_base.json, data/tiktoken/o200k_base.json (`make\n"
            "                      data-tiktoken` fetches them)\n"
            "  --out DIR           output directory, created if missing (required)\n"
            "  --name NAME         shard name prefix (required)\n"
            "  --val-every N       documents 0, N, 2N, ... go to val, the others to train (default 20;\n"
            "                      0 = no val split)\n"
            "  --shard-tokens N    at most N tokens per shard (default 100000000)\n"
            "  --allow-empty-split 1  write the shards even when the train split gets no document (refused\n"
            "                      otherwise: one file, or --val-every 1, sends every document to val)\n"
            "  --list FILE         also read document paths from FILE, one per line (may repeat; the paths\n"
            "                      take the place of the option in the document order)\n");
}

// The path of shard `index` of split s, with `suffix` (".bin" or ".bin.tmp"), into out (cap bytes):
// without stdio, so that the signal handler can use it. 0, or -1 when it does not fit.
static int split_path(const Split* s, int index, const char* suffix, char* out, size_t cap) {
    char digits[16];
    int nd = 0;
    for (unsigned v = (unsigned)index; v > 0 || nd < 6; v /= 10) digits[nd++] = (char)('0' + v % 10);
    size_t nb = strlen(s->base), ns = strlen(suffix);
    if (nb + (size_t)nd + ns + 1 > cap) return -1;
    memcpy(out, s->base, nb);
    for (int k = 0; k < nd; k++) out[nb + (size_t)k] = digits[nd - 1 - k];
    memcpy(out + nb + nd, suffix, ns + 1);
    return 0;
}

// Removes every temporary file of this run: the open shard's and the completed ones' not yet renamed
// into place. Runs at exit (so also after the exit() of a failed check in check.h, or of a failed
// shard write) and on SIGINT/SIGTERM (unlink is async-signal-safe); a successful run has renamed them
// all.
static void splits_remove_temporaries(void) {
    for (int s = 0; s < 2; s++) {
        Split* sp = &splits[s];
        if (sp->open) {
            unlink(sp->w.tmp_path);
            sp->open = 0;
        }
        char tmp[4200];
        for (int i = sp->n_published; i < sp->n_shards; i++)
            if (split_path(sp, i, ".bin.tmp", tmp, sizeof(tmp)) == 0) unlink(tmp);
        sp->n_shards = sp->n_published;
    }
}

static void on_signal(int sig) {
    splits_remove_temporaries();  // unlink is async-signal-safe
    _exit(128 + sig);
}

static void config_add_file(Config* c, const char* path) {
    if (c->n_files == c->cap_files) {
        c->cap_files = c->cap_files ? 2 * c->cap_files : 64;
        c->files = (const char**)realloc_check(c->files, c->cap_files * sizeof(char*));
    }
    c->files[c->n_files++] = path;
}

// Adds the paths of a --list file (one per line, blank lines skipped).
static void config_add_list(Config* c, const char* list_path) {
    char err[TOKENIZER_ERR_LEN];
    size_t len;
    if (c->n_lists == (int)(sizeof(c->lists) / sizeof(c->lists[0]))) {
        fprintf(stderr, "error: more than %d --list options\n", c->n_lists);
        exit(EXIT_FAILURE);
    }
    char* text = (char*)tokenizer_read_file(list_path, &len, err, sizeof(err));
    if (!text) { fprintf(stderr, "error: --list %s\n", err); exit(EXIT_FAILURE); }
    c->lists[c->n_lists++] = text;
    for (char *line = text, *eol; line < text + len; line = eol + 1) {
        eol = memchr(line, '\n', (size_t)(text + len - line));
        if (!eol) eol = text + len;
        *eol = 0;
        if (eol > line && eol[-1] == '\r') eol[-1] = 0;
        if (*line) config_add_file(c, line);
    }
}

static long long parse_count(const char* flag, const char* s, long long lo, long long hi) {
    char* end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "error: %s %s: expected an integer in [%lld, %lld]\n", flag, s, lo, hi);
        exit(EXIT_FAILURE);
    }
    return v;
}

static void config_parse(Config* c, int argc, char** argv) {
    *c = (Config){.encoding = "gpt2", .vocab = NULL, .val_every = 20, .shard_tokens = 100000000};
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(stdout); exit(0); }
        if (a[0] != '-' || a[1] == 0) { config_add_file(c, a); continue; }
        if (i + 1 >= argc) { fprintf(stderr, "error: %s needs a value\n", a); usage(stderr); exit(EXIT_FAILURE); }
        const char* v = argv[++i];
        if (strcmp(a, "--vocab") == 0) c->vocab = v;
        else if (strcmp(a, "--encoding") == 0) c->encoding = v;
        else if (strcmp(a, "--out") == 0) c->out_dir = v;
        else if (strcmp(a, "--name") == 0) c->name = v;
        else if (strcmp(a, "--val-every") == 0) c->val_every = parse_count(a, v, 0, 1LL << 40);
        else if (strcmp(a, "--shard-tokens") == 0) c->shard_tokens = parse_count(a, v, 1, SHARD_MAX_TOKENS);
        else if (strcmp(a, "--list") == 0) config_add_list(c, v);
        else if (strcmp(a, "--allow-empty-split") == 0) c->allow_empty = parse_count(a, v, 0, 1);
        else { fprintf(stderr, "error: unknown option %s\n", a); usage(stderr); exit(EXIT_FAILURE); }
    }
    const char* missing = !c->out_dir ? "--out DIR" : !c->name ? "--name NAME" : c->n_files == 0 ? "input FILEs" : NULL;
    if (missing) { fprintf(stderr, "error: missing %s\n", missing); usage(stderr); exit(EXIT_FAILURE); }
    if (!tokenizer_find_encoding(c->encoding)) {
        fprintf(stderr, "error: --encoding %s: unknown; the encodings are %s\n", c->encoding, TOKENIZER_ENCODING_NAMES);
        exit(EXIT_FAILURE);
    }
    if (!*c->name || strchr(c->name, '/')) {
        fprintf(stderr, "error: --name %s: must be a non-empty file name prefix without '/'\n", c->name);
        exit(EXIT_FAILURE);
    }
    // documents 0, N, 2N, ... go to val: ceil(n / N) of them
    long long n = (long long)c->n_files, val_docs = c->val_every > 0 ? (n + c->val_every - 1) / c->val_every : 0;
    if (n - val_docs == 0 && !c->allow_empty) {
        fprintf(stderr, "error: --val-every %lld with %lld document(s) sends every document to val: the train split "
                "would be empty\n  hint: give more files, a larger --val-every (0: no val split), or "
                "--allow-empty-split 1 to write it anyway\n", c->val_every, n);
        exit(EXIT_FAILURE);
    }
}

static void shard_path(char* out, size_t cap, const Split* s, int index, const char* suffix) {
    if (split_path(s, index, suffix, out, cap) != 0) {
        fprintf(stderr, "error: the shard paths %s... are too long\n  hint: choose a shorter --out or --name\n",
                s->base);
        exit(EXIT_FAILURE);
    }
}

// Appends ids to the split's stream, opening and completing shards of at most shard_tokens: uint16
// shards when `u16` is given, else uint32 shards of `u32`.
static void split_append(Split* s, const Config* c, const uint16_t* u16, const uint32_t* u32, size_t n) {
    while (n > 0) {
        if (!s->open) {
            char path[4096];
            shard_path(path, sizeof(path), s, s->n_shards, ".bin");
            if (u16) shard_writer_open(&s->w, path);
            else shard_writer_open_u32(&s->w, path);
            s->open = 1;
        }
        size_t room = (size_t)(c->shard_tokens - s->w.ntok);
        size_t k = n < room ? n : room;
        if (u16) shard_writer_append(&s->w, u16, k), u16 += k;
        else shard_writer_append_u32(&s->w, u32, k), u32 += k;
        s->tokens += (int64_t)k;
        n -= k;
        if (s->w.ntok == c->shard_tokens) {  // full: complete it now, so no shard is ever empty
            shard_writer_finish(&s->w);
            s->open = 0;
            s->n_shards++;
        }
    }
}

// Completes the split's open shard (under its temporary name).
static void split_finish(Split* s) {
    if (s->open) {
        shard_writer_finish(&s->w);
        s->open = 0;
        s->n_shards++;
    }
}

// Removes the shards of an earlier, larger run beyond this run's count, which would join this run's.
static void split_remove_stale(Split* s) {
    for (int i = s->n_shards;; i++) {
        char path[4200];
        shard_path(path, sizeof(path), s, i, ".bin");
        if (unlink(path) != 0) break;
        fprintf(stderr, "make_shards: removed %s, left by an earlier run\n", path);
    }
}

// Renames the split's completed shards into place.
static void split_publish(Split* s) {
    for (int i = s->n_published; i < s->n_shards; i++) {
        char tmp[4200], path[4200];
        shard_path(tmp, sizeof(tmp), s, i, ".bin.tmp");
        shard_path(path, sizeof(path), s, i, ".bin");
        if (rename(tmp, path) != 0) {
            fprintf(stderr, "error: renaming %s into place as %s failed: %s\n  hint: check that the directory is "
                    "writable; the shards of this NAME may now mix two runs: run again\n", tmp, path, strerror(errno));
            exit(EXIT_FAILURE);
        }
        s->n_published = i + 1;
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress(size_t done, size_t total, double bytes, double t0, int final) {
    double dt = now_s() - t0, tok = (double)(splits[0].tokens + splits[1].tokens);
    fprintf(stderr, "%smake_shards: %zu/%zu files, %.1f MB, %.2fM tokens, %.1f MB/s%s", isatty(2) ? "\r" : "",
            done, total, bytes / 1e6, tok / 1e6, dt > 0 ? bytes / 1e6 / dt : 0.0, final || !isatty(2) ? "\n" : "");
}

int main(int argc, char** argv) {
    Config c;
    config_parse(&c, argc, argv);
    struct stat st;
    if (mkdir(c.out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "error: --out %s: cannot create the directory: %s\n", c.out_dir, strerror(errno));
        return EXIT_FAILURE;
    }
    if (stat(c.out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "error: --out %s: exists and is not a directory\n  hint: give a directory for the shards "
                "(it is created if missing), or move the file away\n", c.out_dir);
        return EXIT_FAILURE;
    }
    splits[0].split = "train";
    splits[1].split = "val";
    for (int k = 0; k < 2; k++)
        if (snprintf(splits[k].base, sizeof(splits[k].base), "%s/%s_%s_", c.out_dir, c.name, splits[k].split) >=
            (int)sizeof(splits[k].base)) {
            fprintf(stderr, "error: --out %s --name %s: the shard paths are too long\n", c.out_dir, c.name);
            return EXIT_FAILURE;
        }
    atexit(splits_remove_temporaries);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    Tokenizer t;
    tokenizer_init_encoding(&t, c.encoding, c.vocab);
    int wide = t.vocab_size > 65536;  // uint32 shards
    Encoder e;
    encoder_init(&e, &t);
    TokenBuf ids = {0};
    uint16_t* u16 = NULL;
    size_t u16_cap = 0;
    double t0 = now_s(), last = t0, bytes = 0;
    for (size_t i = 0; i < c.n_files; i++) {
        char err[TOKENIZER_ERR_LEN];
        size_t len, bad;
        unsigned char* text = tokenizer_read_file(c.files[i], &len, err, sizeof(err));
        if (!text) { fprintf(stderr, "%serror: %s\n", isatty(2) ? "\n" : "", err); exit(EXIT_FAILURE); }
        ids.len = 0;
        token_buf_push(&ids, t.eot_id);
        if (encoder_encode(&e, text, len, &ids, &bad) != 0) {
            fprintf(stderr, "%serror: %s: %s\n  hint: shards are made from UTF-8 text; fix or convert the file"
                    " (e.g. iconv -t UTF-8), or leave it out\n", isatty(2) ? "\n" : "", c.files[i], e.err);
            exit(EXIT_FAILURE);
        }
        free(text);
        Split* s = &splits[c.val_every > 0 && i % (size_t)c.val_every == 0 ? 1 : 0];
        if (wide) {
            split_append(s, &c, NULL, (const uint32_t*)ids.ids, ids.len);  // ids are >= 0: same bits
        } else {
            if (ids.len > u16_cap) u16 = (uint16_t*)realloc_check(u16, (u16_cap = ids.len) * sizeof(uint16_t));
            for (size_t k = 0; k < ids.len; k++) u16[k] = (uint16_t)ids.ids[k];  // ids < 50257 < 65536
            split_append(s, &c, u16, NULL, ids.len);
        }
        s->docs++;
        bytes += (double)len;
        double now = now_s();
        if (now - last >= (isatty(2) ? 0.5 : 10.0)) { progress(i + 1, c.n_files, bytes, t0, 0); last = now; }
    }
    // every document is in: only now do this run's shards replace the earlier run's
    for (int k = 0; k < 2; k++) split_finish(&splits[k]);
    for (int k = 0; k < 2; k++) split_remove_stale(&splits[k]);
    for (int k = 0; k < 2; k++) split_publish(&splits[k]);
    if (atomic_sync_dir_of(splits[0].base) != 0)
        fprintf(stderr, "warning: fsync of the directory %s failed: %s\n", c.out_dir, strerror(errno));
    progress(c.n_files, c.n_files, bytes, t0, 1);
    for (int k = 0; k < 2; k++) {
        Split* s = &splits[k];
        fprintf(stderr, "  %-5s %lld documents, %lld tokens in %d shard(s)", s->split, (long long)s->docs,
                (long long)s->tokens, s->n_shards);
        if (s->n_shards) fprintf(stderr, ": %s/%s_%s_%06d.bin", c.out_dir, c.name, s->split, 0);
        if (s->n_shards > 1) fprintf(stderr, " ... _%06d.bin", s->n_shards - 1);
        fprintf(stderr, "\n");
        if (s->docs == 0 && !(k == 1 && c.val_every == 0))
            fprintf(stderr, "warning: the %s split is empty (%zu documents, --val-every %lld)\n", s->split, c.n_files,
                    c.val_every);
    }
    free(u16);
    token_buf_free(&ids);
    encoder_free(&e);
    tokenizer_free(&t);
    free(c.files);
    for (int k = 0; k < c.n_lists; k++) free(c.lists[k]);
    return 0;
}
