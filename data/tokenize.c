// tokenize.c: the tokenizers from the command line (llmc/data/tokenizer.h, llmc/data/tokenizer_tiktoken.h,
// llmc/data/tokenizer_encode.h). OPTIONS, before or after the command, are --encoding gpt2|cl100k_base|o200k_base
// and --vocab PATH; e.g. build/tokenize encode --encoding o200k_base FILE.
//   build/tokenize [OPTIONS] encode FILE|-      ids of the file's bytes, one per line
//   build/tokenize [OPTIONS] decode [FILE|-]    ids (whitespace, commas, brackets between) -> bytes
//   build/tokenize [OPTIONS] bench FILE         encoding speed on this thread, and the regex alone
//   build/tokenize check-json [PATH]            cross-check GPT-2's encoder.json against vocab.bpe
// Encoding follows tiktoken's encode_ordinary: "<|endoftext|>" in the text is ordinary text.
// Invalid UTF-8 input is an error that names the file and the byte offset; so is an id that decode
// cannot take (anything but 1 to 10 decimal digits of an id in the vocabulary). An output that cannot
// be written whole (a full disk, /dev/full) is an error: exit status 1, never a cut output with 0.
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../llmc/core/check.h"
#include "../llmc/data/tokenizer.h"
#include "../llmc/data/tokenizer_encode.h"
#include "../llmc/data/tokenizer_tiktoken.h"

static void usage(FILE* f) {
    fprintf(f,
            "usage: build/tokenize COMMAND [ARG] [--encoding NAME] [--vocab PATH]   (options go anywhere)\n"
            "  encode FILE|-        print the token ids of the file's bytes, one per line\n"
            "  decode [FILE|-]      read decimal token ids (separated by whitespace, commas or brackets;\n"
            "                       default stdin) and write their bytes to stdout\n"
            "  bench FILE           encode FILE on one thread, print MB/s and tokens, and the regex-only speed\n"
            "  check-json [PATH]    check that encoder.json (default data/gpt2/encoder.json) matches vocab.bpe\n"
            "                       (gpt2 only)\n"
            "options:\n"
            "  --encoding NAME      gpt2 (default), cl100k_base or o200k_base\n"
            "  --vocab PATH         the encoding's file: default data/gpt2/vocab.bpe (`make data` fetches it),\n"
            "                       data/tiktoken/cl100k_base.json, data/tiktoken/o200k_base.json (`make\n"
            "                       data-tiktoken` fetches them)\n"
            "Special tokens are not parsed: \"<|endoftext|>\" in the text is encoded as ordinary text.\n");
}

// The output (stdout) could not be written: the disk is full, or it is /dev/full.
// An incomplete output must not look like a complete one, so this is an error, exit status 1.
static void output_failed(int err) {
    fprintf(stderr, "error: writing the output to stdout failed: %s\n  hint: the output is incomplete; make room "
            "on the disk or write it elsewhere\n", strerror(err));
    exit(EXIT_FAILURE);
}

static unsigned char* read_or_die(const char* path, size_t* len) {
    char err[TOKENIZER_ERR_LEN];
    unsigned char* s = tokenizer_read_file(path, len, err, sizeof(err));
    if (!s) { fprintf(stderr, "error: %s\n", err); exit(EXIT_FAILURE); }
    return s;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void encode_or_die(Encoder* e, const char* path, const unsigned char* text, size_t len, TokenBuf* ids) {
    size_t bad;
    if (encoder_encode(e, text, len, ids, &bad) != 0) {
        fprintf(stderr, "error: %s: %s\n  hint: the tokenizer reads UTF-8 text; convert the file"
                " (e.g. iconv -t UTF-8)\n", path, e->err);
        exit(EXIT_FAILURE);
    }
}

static int cmd_encode(const Tokenizer* t, const char* path) {
    size_t len;
    unsigned char* text = read_or_die(path, &len);
    Encoder e;
    encoder_init(&e, t);
    TokenBuf ids = {0};
    encode_or_die(&e, path, text, len, &ids);
    for (size_t i = 0; i < ids.len; i++)
        if (printf("%d\n", ids.ids[i]) < 0) output_failed(errno);
    token_buf_free(&ids);
    encoder_free(&e);
    free(text);
    return 0;
}

static int cmd_decode(const Tokenizer* t, const char* path) {
    size_t len;
    unsigned char* text = read_or_die(path, &len);
    for (size_t i = 0; i < len;) {
        if (strchr(" \t\r\n,[]", text[i]) && text[i]) { i++; continue; }
        // an id is 1 to 10 decimal digits, nothing else (no sign, no other base), up to a separator
        size_t word = strcspn((const char*)text + i, " \t\r\n,[]");
        int digits = word >= 1 && word <= 10;
        for (size_t k = 0; digits && k < word; k++) digits = text[i + k] >= '0' && text[i + k] <= '9';
        long id = digits ? strtol((const char*)text + i, NULL, 10) : -1;
        size_t n;
        const unsigned char* s = id < 0 || id >= t->vocab_size ? NULL : tokenizer_decode(t, (int)id, &n);
        if (!s) {
            fprintf(stderr, "error: %s: byte %zu: \"%.*s\" is not a token id of %s (decimal ids below %d, some "
                    "unused)\n", path, i, word < 20 ? (int)word : 20, (const char*)text + i, t->name, t->vocab_size);
            exit(EXIT_FAILURE);
        }
        if (fwrite(s, 1, n, stdout) != n) output_failed(errno);
        i += word;
    }
    free(text);
    return 0;
}

// Best of 3 for each measurement. "cold" starts every pass with an empty piece cache (a fresh encoder,
// whose set-up is not timed), which is what make_shards sees on a new corpus.
static int cmd_bench(const Tokenizer* t, const char* path) {
    size_t len;
    unsigned char* text = read_or_die(path, &len);
    double mb = (double)len / 1e6, best_regex = 1e30, best_cold = 1e30, best_warm = 1e30;
    int64_t pieces = 0;
    Encoder e, cold;
    TokenBuf ids = {0};
    for (int rep = 0; rep < 3; rep++) {
        encoder_init(&e, t);
        double t0 = now_s();
        size_t bad;
        pieces = 0;
        for (size_t off = 0; off < len; pieces++) {
            int64_t end = encoder_next_piece(&e, text, len, off, off == 0, &bad);
            if (end < 0) { fprintf(stderr, "error: %s: %s\n", path, e.err); exit(EXIT_FAILURE); }
            off = (size_t)end;
        }
        double t1 = now_s();
        ids.len = 0;
        encode_or_die(&e, path, text, len, &ids);
        double t2 = now_s();
        cold = e;  // the statistics of the cold pass
        ids.len = 0;
        encode_or_die(&e, path, text, len, &ids);
        double t3 = now_s();
        if (t1 - t0 < best_regex) best_regex = t1 - t0;
        if (t2 - t1 < best_cold) best_cold = t2 - t1;
        if (t3 - t2 < best_warm) best_warm = t3 - t2;
        if (rep < 2) encoder_free(&e);
    }
    double n_pieces = (double)cold.n_pieces;
    printf("%s: %.2f MB, %zu tokens (%.2f bytes/token), %lld pieces\n", path, mb, ids.len,
           ids.len ? (double)len / (double)ids.len : 0.0, (long long)pieces);
    printf("  regex only            %7.1f MB/s\n", mb / best_regex);
    printf("  encode, cold cache    %7.1f MB/s  %.2f Mtok/s\n", mb / best_cold, (double)ids.len / 1e6 / best_cold);
    printf("  encode, warm cache    %7.1f MB/s  %.2f Mtok/s\n", mb / best_warm, (double)ids.len / 1e6 / best_warm);
    printf("  cold pass: %.1f%% of pieces went through BPE, %.1f%% came from the piece cache, the rest are\n"
           "  single bytes or whole tokens; cache flushes %lld\n",
           n_pieces ? 100.0 * (double)cold.n_bpe / n_pieces : 0.0,
           n_pieces ? 100.0 * (double)cold.n_cache_hits / n_pieces : 0.0, (long long)cold.n_flushes);
    encoder_free(&e);
    token_buf_free(&ids);
    free(text);
    return 0;
}

static int cmd_check_json(const Tokenizer* t, const char* path) {
    char err[TOKENIZER_ERR_LEN];
    if (tokenizer_check_encoder_json(t, path, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_FAILURE;
    }
    printf("%s: %d tokens, identical to vocab.bpe\n", path, t->vocab_size);
    return 0;
}

int main(int argc, char** argv) {
    const char* vocab = NULL;  // the encoding's default path
    const char* encoding = "gpt2";
    const char* pos[3] = {"", NULL, NULL};  // the command and its arguments; options may go anywhere
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { usage(stdout); return 0; }
        if (strncmp(argv[i], "--", 2) != 0) {
            if (n_pos < 3) pos[n_pos] = argv[i];
            n_pos++;
            continue;
        }
        int is_vocab = strcmp(argv[i], "--vocab") == 0, is_encoding = strcmp(argv[i], "--encoding") == 0;
        if ((!is_vocab && !is_encoding) || i + 1 >= argc) {
            fprintf(stderr, "error: %s: unknown option or missing value\n", argv[i]);
            usage(stderr);
            return EXIT_FAILURE;
        }
        if (is_vocab) vocab = argv[++i];
        else encoding = argv[++i];
    }
    if (!tokenizer_find_encoding(encoding)) {
        fprintf(stderr, "error: --encoding %s: unknown; the encodings are %s\n", encoding, TOKENIZER_ENCODING_NAMES);
        return EXIT_FAILURE;
    }
    const char* cmd = pos[0];
    const char* arg = pos[1];
    int nargs = n_pos - 1;
    int needs_arg = strcmp(cmd, "encode") == 0 || strcmp(cmd, "bench") == 0;
    int known = needs_arg || strcmp(cmd, "decode") == 0 || strcmp(cmd, "check-json") == 0;
    if (!known || nargs > 1 || (needs_arg && nargs != 1)) {
        if (*cmd) fprintf(stderr, "error: %s%s\n", known ? "wrong arguments for " : "unknown command ", cmd);
        usage(stderr);
        return EXIT_FAILURE;
    }
    if (strcmp(cmd, "check-json") == 0 && strcmp(encoding, "gpt2") != 0) {
        fprintf(stderr, "error: check-json checks GPT-2's encoder.json; --encoding %s has no such file\n", encoding);
        return EXIT_FAILURE;
    }
    Tokenizer t;
    tokenizer_init_encoding(&t, encoding, vocab);
    int rc = strcmp(cmd, "encode") == 0 ? cmd_encode(&t, arg)
           : strcmp(cmd, "decode") == 0 ? cmd_decode(&t, arg ? arg : "-")
           : strcmp(cmd, "bench") == 0  ? cmd_bench(&t, arg)
                                        : cmd_check_json(&t, arg ? arg : "data/gpt2/encoder.json");
    tokenizer_free(&t);
    // what is still buffered goes out now: a failure here (or an earlier one) is the output's
    if (fflush(stdout) != 0) output_failed(errno);
    if (ferror(stdout)) output_failed(EIO);
    if (fclose(stdout) != 0) output_failed(errno);
    return rc;
}
