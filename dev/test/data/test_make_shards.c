// test_make_shards.c: build/make_shards end to end, on small documents written here.
// Run from the repository root after `make build/make_shards` (`make test` builds it through `make data`):
//   - the shards read back (shard_check_header, shard_read_tokens) are exactly EOT + the encoder's ids
//     of each document, in order, split into val (i % val_every == 0) and train;
//   - every shard has at most --shard-tokens tokens and only the last of a split fewer;
//   - --list expands in place; --val-every 0 writes no val split; a rerun removes stale shards;
//   - bad input (invalid UTF-8, a missing file, bad flags) fails naming the file (and byte offset),
//     and leaves no temporary file behind;
//   - a split that would leave train empty (one file; --val-every 1) is refused, writing nothing,
//     unless --allow-empty-split 1.
//   - --encoding cl100k_base and o200k_base write uint32 shards in llm.c's Llama-3 layout (header
//     magic 20240801, version 7, count; file size 1024 + 4 * count), read back here directly, holding
//     the encoding's EOT + the encoder's ids of each document; gpt2 still writes the uint16 layout;
//   - build/tokenize encode --encoding NAME FILE prints the ids one a line.
#define _GNU_SOURCE
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../../llmc/data/shard.h"
#include "../../../llmc/data/tokenizer.h"
#include "../../../llmc/data/tokenizer_encode.h"
#include "../../../llmc/data/tokenizer_tiktoken.h"
#include "../testing.h"

#define MAKE_SHARDS "build/make_shards"
#define VOCAB "data/gpt2/vocab.bpe"

static char dir[] = "/tmp/test_make_shards.XXXXXX";

static const char* const docs[] = {
    "Hello world",
    "The quick brown fox jumps over the lazy dog.\n",
    "",  // an empty document still gets its EOT
    "Caf\xc3\xa9 <|endoftext|> is text, not a special token.",
    "A longer document, so that it spans several tiny shards: one two three four five six seven eight nine ten.",
    "x",
    "Hello, I'm a language model,",
};
#define N_DOCS ((int)(sizeof(docs) / sizeof(docs[0])))

static char* path_in_dir(const char* name) {
    static char buf[16][512];
    static int k = 0;
    char* p = buf[k++ % 16];
    snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
    return p;
}

static void write_text(const char* path, const char* s, size_t n) {
    FILE* f = fopen_check(path, "wb");
    fwrite_check(s, 1, n, f);
    fclose_check(f);
}

// Runs build/make_shards with `args`; returns its exit status, its stderr in err (cap bytes).
static int run(const char* args, char* err, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "%s %s 2> %s", MAKE_SHARDS, args, path_in_dir("stderr.txt"));
    int status = system(cmd);
    FILE* f = fopen(path_in_dir("stderr.txt"), "rb");
    size_t n = f ? fread(err, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    err[n] = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int count_files(const char* pattern) {
    glob_t g;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n;
}

// Reads DIR/NAME_SPLIT_*.bin in order into out; checks headers, ids and shard sizes. Returns the
// number of shards.
static int read_split(const char* name, const char* split, int64_t shard_tokens, TokenBuf* out) {
    char pattern[600], err[1024];
    snprintf(pattern, sizeof(pattern), "%s/%s_%s_*.bin", dir, name, split);
    glob_t g;
    out->len = 0;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    for (int s = 0; s < n; s++) {
        int width = 0;
        int64_t ntok = shard_check_header(g.gl_pathv[s], &width, err, sizeof(err));
        EXPECT(ntok < 0 || width == 2, "%s: %d-byte ids, expected the uint16 layout", g.gl_pathv[s], width);
        EXPECT(ntok >= 0, "%s", err);
        if (ntok < 0) break;
        int full = s == n - 1 ? ntok >= 1 && ntok <= shard_tokens : ntok == shard_tokens;
        EXPECT(full, "%s: %lld tokens; shards hold %lld, only the last fewer", g.gl_pathv[s], (long long)ntok,
               (long long)shard_tokens);
        uint32_t* tok = (uint32_t*)malloc_check((size_t)ntok * sizeof(uint32_t) + 1);
        int rc = shard_read_tokens(g.gl_pathv[s], ntok, width, GPT2_VOCAB, tok, err, sizeof(err));
        EXPECT(rc == 0, "%s", err);
        for (int64_t i = 0; rc == 0 && i < ntok; i++) token_buf_push(out, tok[i]);
        free(tok);
    }
    globfree(&g);
    return n;
}

// The expected stream of a split: EOT + ids of each document i with in_split(i), in order.
static void expected_split(Encoder* e, const int* order, int n, int val_every, int want_val, TokenBuf* out) {
    out->len = 0;
    for (int i = 0; i < n; i++) {
        int is_val = val_every > 0 && i % val_every == 0;
        if (is_val != want_val) continue;
        size_t bad;
        token_buf_push(out, GPT2_EOT);
        EXPECT(encoder_encode(e, (const unsigned char*)docs[order[i]], strlen(docs[order[i]]), out, &bad) == 0,
               "doc %d", order[i]);
    }
}

static void expect_same(const TokenBuf* got, const TokenBuf* want, const char* what) {
    size_t i = 0;
    while (i < got->len && i < want->len && got->ids[i] == want->ids[i]) i++;
    EXPECT(i == got->len && i == want->len, "%s: shards hold %zu tokens, expected %zu; first difference at %zu", what,
           got->len, want->len, i);
}

static int count_eot(const TokenBuf* b) {
    int n = 0;
    for (size_t i = 0; i < b->len; i++) n += b->ids[i] == GPT2_EOT;
    return n;
}

// Docs 0..6 with --val-every 3 and 7-token shards: val = docs 0, 3, 6 and train = 1, 2, 4, 5,
// each split over several shards, documents crossing shard boundaries.
static void test_split_and_shards(Encoder* e) {
    char args[4096], err[8192];
    int o = snprintf(args, sizeof(args), "--vocab %s --out %s --name t --val-every 3 --shard-tokens 7", VOCAB, dir);
    for (int i = 0; i < N_DOCS; i++) o += snprintf(args + o, sizeof(args) - (size_t)o, " %s/doc%d.txt", dir, i);
    int rc = run(args, err, sizeof(err));
    EXPECT(rc == 0, "make_shards exit %d: %s", rc, err);
    EXPECT(strstr(err, "train") && strstr(err, "val"), "no summary on stderr: %s", err);
    int order[N_DOCS];
    for (int i = 0; i < N_DOCS; i++) order[i] = i;
    TokenBuf got = {0}, want = {0};
    for (int v = 0; v < 2; v++) {
        int n_shards = read_split("t", v ? "val" : "train", 7, &got);
        expected_split(e, order, N_DOCS, 3, v, &want);
        expect_same(&got, &want, v ? "val" : "train");
        EXPECT(n_shards == (int)((want.len + 6) / 7), "%s: %d shards for %zu tokens", v ? "val" : "train", n_shards,
               want.len);
        EXPECT(count_eot(&got) == (v ? 3 : 4) && got.len && got.ids[0] == GPT2_EOT,
               "%s: %d EOTs, first token %d", v ? "val" : "train", count_eot(&got), got.len ? got.ids[0] : -1);
    }
    EXPECT(count_files(path_in_dir("*.tmp")) == 0, "temporary files left in %s", dir);
    // a rerun with --list (in place, before doc0), no val split and one big shard removes the stale shards
    char list_text[1200];  // a blank line and a CRLF line end, both allowed
    snprintf(list_text, sizeof(list_text), "%s/doc2.txt\n\n%s/doc1.txt\r\n", dir, dir);
    write_text(path_in_dir("list.txt"), list_text, strlen(list_text));
    snprintf(args, sizeof(args), "--vocab %s --out %s --name t --val-every 0 --list %s %s/doc0.txt", VOCAB, dir,
             path_in_dir("list.txt"), dir);
    rc = run(args, err, sizeof(err));
    EXPECT(rc == 0, "make_shards --list: exit %d: %s", rc, err);
    int order2[3] = {2, 1, 0};
    read_split("t", "train", 100000000, &got);
    expected_split(e, order2, 3, 0, 0, &want);
    expect_same(&got, &want, "--list, --val-every 0");
    EXPECT(count_files(path_in_dir("t_train_*.bin")) == 1 && count_files(path_in_dir("t_val_*.bin")) == 0,
           "stale shards: %d train, %d val files after the rerun", count_files(path_in_dir("t_train_*.bin")),
           count_files(path_in_dir("t_val_*.bin")));
    // the default --val-every 20: doc 0 is val, the others train
    snprintf(args, sizeof(args), "--vocab %s --out %s --name d %s/doc0.txt %s/doc1.txt %s/doc6.txt", VOCAB, dir, dir,
             dir, dir);
    rc = run(args, err, sizeof(err));
    int order3[3] = {0, 1, 6};
    read_split("d", "val", 100000000, &got);
    expected_split(e, order3, 3, 20, 1, &want);
    expect_same(&got, &want, "default --val-every: val");
    read_split("d", "train", 100000000, &got);
    expected_split(e, order3, 3, 20, 0, &want);
    expect_same(&got, &want, "default --val-every: train");
    token_buf_free(&got);
    token_buf_free(&want);
}

// --- uint32 shards (--encoding cl100k_base, o200k_base) -------------------------------------------

// Reads the uint32 shards DIR/NAME_SPLIT_*.bin in order into out, checking each header and size.
// Returns the number of shards.
static int read_split_u32(const char* name, const char* split, int64_t shard_tokens, TokenBuf* out) {
    char pattern[600];
    snprintf(pattern, sizeof(pattern), "%s/%s_%s_*.bin", dir, name, split);
    glob_t g;
    out->len = 0;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    for (int s = 0; s < n; s++) {
        const char* path = g.gl_pathv[s];
        FILE* f = fopen_check(path, "rb");
        int32_t header[SHARD_HEADER_INTS] = {0};
        size_t got = fread(header, sizeof(int32_t), SHARD_HEADER_INTS, f);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        int64_t ntok = header[2];
        int ok = got == SHARD_HEADER_INTS && header[0] == SHARD_U32_MAGIC && header[1] == SHARD_U32_VERSION &&
                 size == SHARD_HEADER_BYTES + 4 * ntok;
        for (int k = 3; k < SHARD_HEADER_INTS; k++) ok = ok && header[k] == 0;
        EXPECT(ok, "%s: header {%d, %d, %d}, %ld bytes; expected {%d, %d, count}, the rest zero, 1024 + 4 * count bytes",
               path, header[0], header[1], header[2], size, SHARD_U32_MAGIC, SHARD_U32_VERSION);
        int full = s == n - 1 ? ntok >= 1 && ntok <= shard_tokens : ntok == shard_tokens;
        EXPECT(full, "%s: %lld tokens; shards hold %lld, only the last fewer", path, (long long)ntok,
               (long long)shard_tokens);
        if (!ok) { fclose(f); break; }
        uint32_t* tok = (uint32_t*)malloc_check((size_t)ntok * sizeof(uint32_t) + 1);
        fseek(f, SHARD_HEADER_BYTES, SEEK_SET);
        fread_check(tok, sizeof(uint32_t), (size_t)ntok, f);
        fclose(f);
        for (int64_t i = 0; i < ntok; i++) token_buf_push(out, (int32_t)tok[i]);
        free(tok);
    }
    globfree(&g);
    return n;
}

// Docs 0..6 with --val-every 3 and 7-token shards, as test_split_and_shards, in a tiktoken encoding.
static void test_u32_shards(const char* encoding) {
    Tokenizer t;
    tokenizer_init_encoding(&t, encoding, NULL);
    Encoder e;
    encoder_init(&e, &t);
    char args[4096], err[8192], name[64];
    snprintf(name, sizeof(name), "u_%s", encoding);
    int o = snprintf(args, sizeof(args), "--encoding %s --out %s --name %s --val-every 3 --shard-tokens 7", encoding,
                     dir, name);
    for (int i = 0; i < N_DOCS; i++) o += snprintf(args + o, sizeof(args) - (size_t)o, " %s/doc%d.txt", dir, i);
    int rc = run(args, err, sizeof(err));
    EXPECT(rc == 0, "make_shards --encoding %s: exit %d: %s", encoding, rc, err);
    TokenBuf got = {0}, want = {0};
    for (int v = 0; v < 2; v++) {
        int n_shards = read_split_u32(name, v ? "val" : "train", 7, &got);
        want.len = 0;
        for (int i = 0; i < N_DOCS; i++) {
            if ((i % 3 == 0) != v) continue;
            size_t bad;
            token_buf_push(&want, t.eot_id);
            EXPECT(encoder_encode(&e, (const unsigned char*)docs[i], strlen(docs[i]), &want, &bad) == 0, "doc %d", i);
        }
        char what[128];
        snprintf(what, sizeof(what), "%s %s", encoding, v ? "val" : "train");
        expect_same(&got, &want, what);
        EXPECT(n_shards == (int)((want.len + 6) / 7) && n_shards > 1, "%s: %d shards for %zu tokens", what, n_shards,
               want.len);
        int eots = 0, big = 0;
        for (size_t i = 0; i < got.len; i++) eots += got.ids[i] == t.eot_id, big += got.ids[i] >= 65536;
        EXPECT(eots == (v ? 3 : 4) && got.len && got.ids[0] == t.eot_id && big > 0,
               "%s: %d EOTs (id %d), first token %d, %d ids above 65535", what, eots, t.eot_id,
               got.len ? got.ids[0] : -1, big);
    }
    EXPECT(count_files(path_in_dir("*.tmp")) == 0, "temporary files left in %s", dir);
    token_buf_free(&got);
    token_buf_free(&want);
    encoder_free(&e);
    tokenizer_free(&t);
}

// build/tokenize encode --encoding NAME FILE prints one id a line (tiktoken's ids for "hello world").
static void test_tokenize_cli(void) {
    static const char* const cases[][2] = {
        {"", "31373\n995\n"}, {"--encoding cl100k_base", "15339\n1917\n"}, {"--encoding o200k_base", "24912\n2375\n"}};
    write_text(path_in_dir("hw.txt"), "hello world", 11);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char cmd[1200], out[256] = "";
        snprintf(cmd, sizeof(cmd), "build/tokenize encode %s %s", cases[c][0], path_in_dir("hw.txt"));
        FILE* p = popen(cmd, "r");
        size_t n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
        int status = p ? pclose(p) : -1;
        out[n] = 0;
        EXPECT(status == 0 && strcmp(out, cases[c][1]) == 0, "%s: exit %d, printed \"%s\"", cmd, status, out);
    }
}

// Runs a shell command line; returns its exit status (128 when it did not exit), its stderr in err.
static int shell(const char* cmdline, char* err, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "%s 2> %s", cmdline, path_in_dir("stderr.txt"));
    int status = system(cmd);
    FILE* f = fopen(path_in_dir("stderr.txt"), "rb");
    size_t n = f ? fread(err, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    err[n] = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// build/tokenize's output that cannot be written (/dev/full: every write fails with ENOSPC) is an
// error, exit status 1, for each command and for outputs smaller and larger than stdio's buffer;
// decode takes only plain decimal ids (no sign).
static void test_tokenize_output(void) {
    char cmd[4200], err[8192];
    char big[100000];  // 100 KB of text: its ids are far more than one stdio buffer
    for (size_t i = 0; i < sizeof(big); i++) big[i] = "the cat sat on a mat "[i % 21];
    write_text(path_in_dir("big.txt"), big, sizeof(big));
    write_text(path_in_dir("ids.txt"), "31373 995\n", 10);
    static const char* const cases[][3] = {  // the command, its file in the scratch directory, what it is
        {"encode", "hw.txt", "encode, small"}, {"encode", "big.txt", "encode, large"}, {"decode", "ids.txt", "decode"},
        {"--encoding o200k_base encode", "big.txt", "encode o200k_base"}, {"bench", "hw.txt", "bench"},
        {"check-json", "", "check-json"}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char args[1200];
        snprintf(args, sizeof(args), "%s %s", cases[c][0], cases[c][1][0] ? path_in_dir(cases[c][1]) : "");
        snprintf(cmd, sizeof(cmd), "build/tokenize %s > /dev/full", args);
        int rc = shell(cmd, err, sizeof(err));
        EXPECT(rc == 1 && strstr(err, "No space left on device") && strstr(err, "output"),
               "%s: tokenize %s > /dev/full: exit %d, expected 1 and a message about the output: %s", cases[c][2], args,
               rc, err);
        if (c == 1) printf("tokenize encode > /dev/full: %s", err);
    }
    static const char* const bad_ids[] = {"-0", "+5", "31373 -0 995", "0x10", "5abc", "99999999999999999999"};
    for (size_t c = 0; c < sizeof(bad_ids) / sizeof(bad_ids[0]); c++) {
        snprintf(cmd, sizeof(cmd), "echo '%s' | build/tokenize decode > /dev/null", bad_ids[c]);
        int rc = shell(cmd, err, sizeof(err));
        EXPECT(rc == 1 && strstr(err, "is not a token id"), "decode \"%s\": exit %d, expected a refusal: %s", bad_ids[c],
               rc, err);
    }
    snprintf(cmd, sizeof(cmd), "echo '[31373, 995]' | build/tokenize decode > %s", path_in_dir("hw_out.txt"));
    int rc = shell(cmd, err, sizeof(err));
    FILE* f = fopen_check(path_in_dir("hw_out.txt"), "rb");
    char out[64] = "";
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    fclose(f);
    out[n] = 0;
    EXPECT(rc == 0 && strcmp(out, "hello world") == 0, "decode [31373, 995]: exit %d, \"%s\": %s", rc, out, err);
}

static void test_errors(void) {
    char args[4096], err[8192];
    write_text(path_in_dir("bad.txt"), "ok so \xff far", 11);
    snprintf(args, sizeof(args), "--vocab %s --out %s/e --name e --shard-tokens 5 %s/doc4.txt %s/doc1.txt %s/bad.txt",
             VOCAB, dir, dir, dir, dir);
    int rc = run(args, err, sizeof(err));
    EXPECT(rc != 0 && strstr(err, path_in_dir("bad.txt")) && strstr(err, "byte offset 6"),
           "invalid UTF-8: exit %d, stderr: %s", rc, err);
    EXPECT(count_files(path_in_dir("e/*.tmp")) == 0, "temporary shard files left after an error");
    glob_t g;
    char e_err[1024];
    int e_width;
    if (glob(path_in_dir("e/*.bin"), 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            EXPECT(shard_check_header(g.gl_pathv[i], &e_width, e_err, sizeof(e_err)) > 0, "%s", e_err);
        globfree(&g);
    }
    snprintf(args, sizeof(args), "--out %s --name m %s/doc0.txt %s/no_such_file.txt", dir, dir, dir);
    rc = run(args, err, sizeof(err));
    EXPECT(rc != 0 && strstr(err, "no_such_file.txt"), "a missing file: exit %d, stderr: %s", rc, err);
    static const char* const bad_flags[] = {"--shard-tokens 0", "--shard-tokens 3000000000", "--val-every -1",
                                            "--val-every x", "--bogus 1", "--name", "--vocab /nonexistent",
                                            "--encoding gpt3", "--encoding o200k_base --vocab data/gpt2/vocab.bpe",
                                            "--encoding cl100k_base --vocab data/tiktoken/o200k_base.json"};
    for (size_t i = 0; i < sizeof(bad_flags) / sizeof(bad_flags[0]); i++) {
        snprintf(args, sizeof(args), "--out %s --name f %s %s/doc0.txt %s/doc1.txt", dir, bad_flags[i], dir, dir);
        rc = run(args, err, sizeof(err));
        EXPECT(rc != 0 && strstr(err, "error"), "flags \"%s\": exit %d, stderr: %s", bad_flags[i], rc, err);
    }
    snprintf(args, sizeof(args), "--name f %s/doc0.txt", dir);
    rc = run(args, err, sizeof(err));
    EXPECT(rc != 0 && strstr(err, "--out"), "no --out: exit %d, stderr: %s", rc, err);
    // an empty train split: refused before anything is written, unless asked for
    const char* empty_cases[][2] = {{"--val-every 20", "one document"}, {"--val-every 1 ", "--val-every 1"}};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof(args), "--vocab %s --out %s/empty%d --name z %s %s/doc0.txt%s", VOCAB, dir, k,
                 empty_cases[k][0], dir, k ? " " : "");
        if (k) snprintf(args + strlen(args), sizeof(args) - strlen(args), "%s/doc1.txt", dir);
        rc = run(args, err, sizeof(err));
        char out_dir[600];
        snprintf(out_dir, sizeof(out_dir), "%s/empty%d", dir, k);
        EXPECT(rc == 1 && strstr(err, "the train split would be empty") && strstr(err, "--allow-empty-split"),
               "%s: exit %d, stderr: %s", empty_cases[k][1], rc, err);
        EXPECT(access(out_dir, F_OK) != 0, "%s: refused, but %s was created", empty_cases[k][1], out_dir);
        if (k == 0) printf("empty train split refused: %s", err);
    }
    snprintf(args, sizeof(args), "--vocab %s --out %s/empty2 --name z --allow-empty-split 1 %s/doc0.txt", VOCAB, dir, dir);
    rc = run(args, err, sizeof(err));
    EXPECT(rc == 0 && count_files(path_in_dir("empty2/z_val_*.bin")) == 1 && count_files(path_in_dir("empty2/z_train_*.bin")) == 0,
           "--allow-empty-split 1: exit %d, stderr: %s", rc, err);
}

// A run that fails partway (a bad document after several shards were completed) leaves the previous
// run's shards of that name exactly as they were: never its first shards replaced by new ones beside
// its stale later ones, which a glob would take together. Also on SIGTERM.
static void test_failed_rerun(Encoder* e) {
    char args[4096], err[8192];
    int o = snprintf(args, sizeof(args), "--vocab %s --out %s/rerun --name r --val-every 3 --shard-tokens 5", VOCAB, dir);
    for (int i = 0; i < N_DOCS; i++) o += snprintf(args + o, sizeof(args) - (size_t)o, " %s/doc%d.txt", dir, i);
    int rc = run(args, err, sizeof(err));
    EXPECT(rc == 0, "make_shards exit %d: %s", rc, err);
    int order[N_DOCS];
    for (int i = 0; i < N_DOCS; i++) order[i] = i;
    TokenBuf got = {0}, want_train = {0}, want_val = {0};
    char name[64];
    snprintf(name, sizeof(name), "rerun/r");
    int n_train = read_split(name, "train", 5, &got), n_val = read_split(name, "val", 5, &got);
    expected_split(e, order, N_DOCS, 3, 0, &want_train);
    expected_split(e, order, N_DOCS, 3, 1, &want_val);
    EXPECT(n_train >= 4 && n_val >= 3, "the first run wrote %d train and %d val shards, expected several", n_train, n_val);
    // the same name again: docs 4 and 1 fill more than two 5-token train shards, then bad.txt fails
    write_text(path_in_dir("bad.txt"), "ok so \xff far", 11);
    snprintf(args, sizeof(args), "--vocab %s --out %s/rerun --name r --val-every 0 --shard-tokens 5 %s/doc4.txt "
             "%s/doc1.txt %s/bad.txt", VOCAB, dir, dir, dir, dir);
    rc = run(args, err, sizeof(err));
    EXPECT(rc == 1 && strstr(err, "bad.txt"), "the failing rerun: exit %d: %s", rc, err);
    int again_train = read_split(name, "train", 5, &got);
    expect_same(&got, &want_train, "train after a failed rerun");
    int again_val = read_split(name, "val", 5, &got);
    expect_same(&got, &want_val, "val after a failed rerun");
    EXPECT(again_train == n_train && again_val == n_val, "after a failed rerun: %d train, %d val shards, expected the "
           "first run's %d and %d", again_train, again_val, n_train, n_val);
    EXPECT(count_files(path_in_dir("rerun/*.tmp")) == 0, "the failed rerun left %d temporary files",
           count_files(path_in_dir("rerun/*.tmp")));
    // killed by SIGTERM partway (reading a FIFO that never ends): the same
    if (mkfifo(path_in_dir("fifo"), 0600) != 0) { perror("mkfifo"); exit(EXIT_FAILURE); }
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "(sleep 1; kill -TERM $(cat %s)) & exec 3<>%s; %s --vocab %s --out %s/rerun --name r "
             "--val-every 0 --shard-tokens 5 %s/doc4.txt %s/doc1.txt %s & echo $! > %s; wait $!",
             path_in_dir("pid"), path_in_dir("fifo"), MAKE_SHARDS, VOCAB, dir, dir, dir, path_in_dir("fifo"),
             path_in_dir("pid"));
    int status = system(cmd);
    EXPECT(status != 0, "make_shards reading a FIFO was not stopped by SIGTERM: status %d", status);
    again_train = read_split(name, "train", 5, &got);
    expect_same(&got, &want_train, "train after a rerun killed by SIGTERM");
    EXPECT(again_train == n_train && count_files(path_in_dir("rerun/*.tmp")) == 0,
           "after a rerun killed by SIGTERM: %d train shards (expected %d), %d temporary files", again_train, n_train,
           count_files(path_in_dir("rerun/*.tmp")));
    token_buf_free(&got);
    token_buf_free(&want_train);
    token_buf_free(&want_val);
}

// Messages that name the thing at fault: --out naming a file, a directory given as a document (to
// make_shards and to tokenize), and a shard write that fails (a file size limit stands in for a full
// disk: `ulimit -f`, with SIGXFSZ ignored so that the write returns EFBIG).
static void test_messages(void) {
    char args[4096], err[8192];
    write_text(path_in_dir("a_file"), "not a directory", 15);
    snprintf(args, sizeof(args), "--vocab %s --out %s --name o %s/doc0.txt %s/doc1.txt", VOCAB, path_in_dir("a_file"),
             dir, dir);
    int rc = run(args, err, sizeof(err));
    EXPECT(rc == 1 && strstr(err, "--out") && strstr(err, path_in_dir("a_file")) && strstr(err, "not a directory") &&
           !strstr(err, ".tmp") && !strstr(err, "make data"),
           "--out naming a file: exit %d, expected a message about --out, not the .tmp file or `make data`: %s", rc, err);
    printf("--out naming a file: %s", err);
    if (mkdir(path_in_dir("a_dir"), 0700) != 0) { perror("mkdir"); exit(EXIT_FAILURE); }
    snprintf(args, sizeof(args), "--vocab %s --out %s/d --name d %s/doc1.txt %s", VOCAB, dir, dir, path_in_dir("a_dir"));
    rc = run(args, err, sizeof(err));
    EXPECT(rc == 1 && strstr(err, path_in_dir("a_dir")) && strstr(err, "a directory") && !strstr(err, "read error"),
           "a directory as a document: exit %d, expected a message naming it as a directory: %s", rc, err);
    printf("a directory as a document: %s", err);
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "build/tokenize encode %s > /dev/null 2> %s", path_in_dir("a_dir"), path_in_dir("tk.txt"));
    int status = system(cmd);
    FILE* f = fopen_check(path_in_dir("tk.txt"), "rb");
    size_t n = fread(err, 1, sizeof(err) - 1, f);
    fclose(f);
    err[n] = 0;
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(err, path_in_dir("a_dir")) &&
           strstr(err, "a directory") && !strstr(err, "read error"),
           "tokenize encode DIR: status %d, expected a message naming it as a directory: %s", status, err);
    // a write that fails: 30 KB of text is ~15 KB of shard, past an 8 KB file size limit
    char big[30000];
    for (size_t i = 0; i < sizeof(big); i++) big[i] = "the cat sat on a mat "[i % 21];
    write_text(path_in_dir("big.txt"), big, sizeof(big));
    snprintf(cmd, sizeof(cmd), "bash -c \"trap '' XFSZ; ulimit -f 8; exec %s --vocab %s --out %s/full --name f "
             "--val-every 0 %s/big.txt\" 2> %s", MAKE_SHARDS, VOCAB, dir, dir, path_in_dir("full.txt"));
    status = system(cmd);
    f = fopen_check(path_in_dir("full.txt"), "rb");
    n = fread(err, 1, sizeof(err) - 1, f);
    fclose(f);
    err[n] = 0;
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(err, path_in_dir("full/f_train_000000.bin")) &&
           strstr(err, "File too large") && strstr(err, "disk"),
           "a shard write that fails: status %d, expected a message naming the shard and the error: %s", status, err);
    printf("a shard write that fails: %s", err);
    EXPECT(count_files(path_in_dir("full/*")) == 0, "a failed write left %d files in %s/full",
           count_files(path_in_dir("full/*")), dir);
}

int main(void) {
    if (access(MAKE_SHARDS, X_OK) != 0) {
        EXPECT(0, "%s is missing: run `make %s` (make test builds it)", MAKE_SHARDS, MAKE_SHARDS);
        return test_summary("test_make_shards");
    }
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    for (int i = 0; i < N_DOCS; i++) {
        char name[32];
        snprintf(name, sizeof(name), "doc%d.txt", i);
        write_text(path_in_dir(name), docs[i], strlen(docs[i]));
    }
    Tokenizer t;
    tokenizer_init(&t, VOCAB);
    Encoder e;
    encoder_init(&e, &t);
    test_split_and_shards(&e);
    test_u32_shards("cl100k_base");
    test_u32_shards("o200k_base");
    test_tokenize_cli();
    test_tokenize_output();
    test_errors();
    test_failed_rerun(&e);
    test_messages();
    encoder_free(&e);
    tokenizer_free(&t);
    test_remove_dir(dir);
    return test_summary("test_make_shards");
}
