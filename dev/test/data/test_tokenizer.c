// test_tokenizer.c: the tokenizers (llmc/data/tokenizer.h, llmc/data/tokenizer_tiktoken.h, llmc/data/tokenizer_encode.h)
// on the CPU. Run from the repository root: ./build/test_tokenizer (needs data/gpt2/ from `make data`,
// data/tiktoken/ from `make data-tiktoken`, node and the tiktoken oracle from `make test-deps`, and
// data/.cache/starter/docs/ from `make data`). Sections 1-6 are GPT-2's:
//   1. known ids (published GPT-2 encodings) and the pre-tokenizer's pieces;
//   2. decode(encode(x)) == x on text written here, on seeded Unicode fuzz and on long pieces;
//   3. the piece table and cache agree with plain BPE, also after the cache is flushed;
//   4. invalid UTF-8 is rejected with the offset of the first bad byte, appending nothing;
//   5. vocab.bpe / encoder.json loading: the cross-check passes, broken files give clear errors;
//   6. id for id against tiktoken (dev/test/data/tiktoken_ids.js) on the fuzz text, the text written
//      here and every starter-corpus document; a mismatch prints the first differing position.
//   7. cl100k_base and o200k_base: known ids, pieces of their patterns (case-insensitive
//      contractions, 1-3 digits, o200k's case classes, U+180E), sizes and special tokens, broken
//      encoder files, round trips, the piece cache, invalid UTF-8, and id for id against tiktoken on
//      the same fuzz, own text, random words, long runs and the starter corpus.
#define _GNU_SOURCE
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../../../llmc/core/rand.h"
#include "../../../llmc/data/tokenizer.h"
#include "../../../llmc/data/tokenizer_encode.h"
#include "../../../llmc/data/tokenizer_tiktoken.h"
#include "../testing.h"

#define VOCAB "data/gpt2/vocab.bpe"
#define ENCODER_JSON "data/gpt2/encoder.json"
#define STARTER_DOCS "data/.cache/starter/docs/*.txt"

static char tmp_dir[] = "/tmp/test_tokenizer.XXXXXX";

// Text written for this test: prose, code, numbers, contractions in both cases, odd whitespace.
static const char own_text[] =
    "Hello world. The quick brown fox jumps over the lazy dog; it's 4:30 pm and they've left.\n"
    "I'm sure we'll see; you'd think DON'T and I'LL split differently from don't and I'll.\r\n"
    "Prices: $4,500.00, 12.5%, 1e-9, 0x7fff_ffff, 3.14159265358979, 2024-05-20T12:00:00Z.\n\n"
    "    def tokenizer_encode(self, text):  # indented code\n\t\treturn [ord(c) for c in text]\n"
    "Caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xe2\x80\x94 \xe2\x80\x9cquoted\xe2\x80\x9d "
    "\xc2\xabguillemets\xc2\xbb.\n"
    "Tabs\tand   runs   of spaces   \n   \n\n\n<|endoftext|> is ordinary text here.   ";

// --- helpers -------------------------------------------------------------------------------------

static int encode(Encoder* e, const char* s, size_t n, TokenBuf* out) {
    size_t bad;
    out->len = 0;
    return encoder_encode(e, (const unsigned char*)s, n, out, &bad);
}

// decode(encode(s)) == s; returns 1 when it holds.
static int round_trips(const Tokenizer* t, Encoder* e, const char* s, size_t n, size_t* ntok) {
    TokenBuf ids = {0};
    int ok = encode(e, s, n, &ids) == 0;
    unsigned char* back = (unsigned char*)malloc_check(n + 1);
    int64_t m = ok ? tokenizer_decode_ids(t, ids.ids, ids.len, back, n + 1) : -1;
    ok = ok && m == (int64_t)n && memcmp(back, s, n) == 0;
    if (ntok) *ntok = ids.len;
    free(back);
    token_buf_free(&ids);
    return ok;
}

static void write_file(const char* path, const void* s, size_t n) {
    FILE* f = fopen_check(path, "wb");
    fwrite_check(s, 1, n, f);
    fclose_check(f);
}

static char* tmp_path(const char* name) {
    static char buf[8][512];
    static int k = 0;
    char* p = buf[k++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", tmp_dir, name);
    return p;
}

// --- 1. known ids and pieces ---------------------------------------------------------------------

static void test_known_ids(Encoder* e) {
    static const struct { const char* text; int n; int ids[8]; } cases[] = {
        {"Hello world", 2, {15496, 995}},
        {" the", 1, {262}},
        {"hello world", 2, {31373, 995}},
        {"Hello, my dog is cute", 6, {15496, 11, 616, 3290, 318, 13779}},
        {"Hello, I'm a language model,", 8, {15496, 11, 314, 1101, 257, 3303, 2746, 11}},
        {"<|endoftext|>", 7, {27, 91, 437, 1659, 5239, 91, 29}},  // special tokens are ordinary text
        {"!", 1, {0}},
        {" ", 1, {220}},
        {"", 0, {0}},
    };
    TokenBuf ids = {0};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int rc = encode(e, cases[c].text, strlen(cases[c].text), &ids);
        int same = rc == 0 && (int)ids.len == cases[c].n &&
                   memcmp(ids.ids, cases[c].ids, ids.len * sizeof(int32_t)) == 0;
        EXPECT(same, "encode(\"%s\"): %zu ids, first %d; expected %d ids, first %d", cases[c].text, ids.len,
               ids.len ? ids.ids[0] : -1, cases[c].n, cases[c].ids[0]);
    }
    token_buf_free(&ids);
}

// The pieces of `text` joined by '|'.
static void pieces(Encoder* e, const char* text, char* out, size_t cap) {
    size_t len = strlen(text), bad, o = 0;
    for (size_t off = 0; off < len;) {
        int64_t end = encoder_next_piece(e, (const unsigned char*)text, len, off, off == 0, &bad);
        if (end < 0) break;
        o += (size_t)snprintf(out + o, cap - o, "%s%.*s", off ? "|" : "", (int)(end - (int64_t)off), text + off);
        off = (size_t)end;
    }
}

static void test_pieces(Encoder* e) {
    static const char* const cases[][2] = {
        {"Hello world", "Hello| world"},
        {"I'm here,   they've 123abc 4,500.00...\n\n  end  ",
         "I|'m| here|,|  | they|'ve| 123|abc| 4|,|500|.|00|...|\n\n | end|  "},  // the pre-tokenizer's contractions, digits, punctuation, spaces
        {"don't DON'T I'LL", "don|'t| DON|'|T| I|'|LL"},
        {"x\xc2\xa0y", "x|\xc2\xa0|y"},                     // U+00A0 is whitespace
        {"  \xe1\xa0\x8e" "b", " | \xe1\xa0\x8e|b"},        // U+180E is not (PCRE2's \s would say "  |\xe1\xa0\x8e|b")
        {"a\r\n\r\nb", "a|\r\n\r|\n|b"},     // the last whitespace char goes with what follows
        {"\xd9\xa1\xd9\xa2\xd9\xa3 x", "\xd9\xa1\xd9\xa2\xd9\xa3| x"},  // Arabic-Indic digits are \p{N}
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char got[512] = "";
        pieces(e, cases[c][0], got, sizeof(got));
        EXPECT(strcmp(got, cases[c][1]) == 0, "pieces of \"%s\": \"%s\", expected \"%s\"", cases[c][0], got,
               cases[c][1]);
    }
}

// --- 2. round trips ----------------------------------------------------------------------------------

// Writes code point cp as UTF-8; returns the byte count.
static size_t put_utf8(char* s, uint32_t cp) {
    if (cp < 0x80) { s[0] = (char)cp; return 1; }
    int n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (int k = n - 1; k > 0; k--, cp >>= 6) s[k] = (char)(0x80 | (cp & 0x3f));
    s[0] = (char)((0xf00 >> n) | cp);  // lead byte: n ones then a zero, then the top bits
    return (size_t)n;
}

// Seeded fuzz text: fragments chosen for the regex's corner cases mixed with random code points from
// long-assigned blocks (so PCRE2's Unicode 14 tables and tiktoken's agree on every property).
static char* fuzz_text(uint64_t seed, int picks, size_t* len) {
    static const char* const atoms[] = {
        "a", "Z", "hello", " world", "The", " ", "  ", "    ", "\t", "\n", "\r\n", "\n\n", "\v", "\f", "\x1c",
        "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'", "''",
        "don't", "DON'T", "I'LL", "we'd", "0", "7", "123", "4,500.00", "\xd9\xa1\xd9\xa2\xd9\xa3", "\xc2\xb2",
        "\xe2\x85\xab", "\xc2\xbd", "\xc2\x85", "\xc2\xa0", "\xe1\xa0\x8e", "\xe2\x80\xa8", "\xe2\x80\xa9",
        "\xe3\x80\x80", "\xe2\x80\x89", "\xe2\x80\x8b", "\xef\xbb\xbf", "\xe1\x9a\x80", "\xe2\x80\xaf",
        "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97", "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4", "\xf0\x9f\x98\x80",
        "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
        "\xe2\x9d\xa4\xef\xb8\x8f", "e\xcc\x81", "\xcc\x81", "a\xcc\x88\xcc\x84", "\xf0\x9d\x94\x98nicode",
        "\xf0\x90\x8d\x88", "\xf0\xa0\x9c\x8e", "...", "!!", "?", "\xe2\x80\x94", "\xe2\x80\x9c", "(", ")",
        "<|endoftext|>", "$", "%", "#", "\\", "/*", "\xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd",
        // for cl100k_base and o200k_base: special tokens, case-insensitive contractions (U+017F folds to
        // 's'), case runs, Lt/Lm letters, marks, digit runs, CR/LF runs, slashes
        "<|fim_prefix|>", "<|endofprompt|>", "<|endoftext", "x'\xc5\xbf", "'\xc5\xbf", "HELLO'S", "We'LL",
        "CamelCase", "iPhone", "\xc7\x85ungla", "\xca\xb0", "\xe0\xb8\xaa\xe0\xb8\xa7\xe0\xb8\xb1",
        "\xd9\x85\xd9\x8e", " \xcc\x81", "1234567", "  \r\n  ", "\r\r\n", "/path/to", "-->\n",
        "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d",
    };
    static const uint32_t blocks[][2] = {{0x20, 0x7f}, {0xa0, 0x250}, {0x391, 0x3a1}, {0x400, 0x500},
                                         {0x600, 0x700}, {0x900, 0x980}, {0x2000, 0x2070}, {0x4e00, 0xa000},
                                         {0xac00, 0xd7a4}, {0x1f300, 0x1f600}, {0x1d400, 0x1d49c},
                                         {0x300, 0x370}, {0xe00, 0xe60}, {0x1100, 0x1200}};
    uint64_t rng = seed;
    size_t cap = (size_t)picks * 32 + 1, n = 0;
    char* s = (char*)malloc_check(cap);
    for (int p = 0; p < picks; p++) {
        uint32_t r = rand_below(&rng, 100);
        if (r < 70) {
            const char* a = atoms[rand_below(&rng, sizeof(atoms) / sizeof(atoms[0]))];
            memcpy(s + n, a, strlen(a));
            n += strlen(a);
        } else if (r < 71) {
            s[n++] = 0;  // NUL is text too
        } else {
            const uint32_t* b = blocks[rand_below(&rng, sizeof(blocks) / sizeof(blocks[0]))];
            uint32_t cp = b[0] + rand_below(&rng, b[1] - b[0]);
            n += put_utf8(s + n, cp);
        }
    }
    *len = n;
    return s;
}

static void test_round_trips(const Tokenizer* t, Encoder* e, const char* fuzz, size_t fuzz_len) {
    size_t ntok;
    EXPECT(round_trips(t, e, own_text, strlen(own_text), &ntok), "decode(encode(own text)) differs");
    EXPECT(round_trips(t, e, fuzz, fuzz_len, &ntok), "decode(encode(fuzz text, %zu bytes)) differs", fuzz_len);
    // Long pieces: a run of random letters is one piece of BPE; O(n^2) merging would take minutes.
    size_t n = 1 << 18;
    char* s = (char*)malloc_check(n);
    uint64_t rng = 7;
    for (size_t i = 0; i < n; i++) s[i] = (char)('a' + rand_below(&rng, 26));
    clock_t c0 = clock();
    EXPECT(round_trips(t, e, s, n, &ntok), "decode(encode(%zu random letters)) differs", n);
    double sec = (double)(clock() - c0) / CLOCKS_PER_SEC;
    EXPECT(sec < 30.0, "BPE of one %zu-byte piece took %.1f s: is the merge loop quadratic?", n, sec);
    EXPECT(ntok > n / 8 && ntok < n, "%zu random letters gave %zu tokens", n, ntok);
    // long runs of each regex alternative (and the JIT's stack), with their token counts (tiktoken's;
    // 0 = just fewer than n): GPT-2 has no multi-space tokens; before a letter the last space joins
    // it (" x"); "77" is a token but "777" is not
    static const struct { char fill, last; size_t tokens; } runs[] = {
        {' ', ' ', 1 << 18}, {' ', 'x', (1 << 18) - 1}, {'7', '7', 1 << 17}, {'.', '.', 0}, {'\n', '\n', 0}};
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        memset(s, runs[r].fill, n);
        s[n - 1] = runs[r].last;
        int ok = round_trips(t, e, s, n, &ntok);
        EXPECT(ok && (runs[r].tokens ? ntok == runs[r].tokens : ntok < n), "run of %zu '%c' then '%c': round trip %d, "
               "%zu tokens, expected %zu", n, runs[r].fill, runs[r].last, ok, ntok, runs[r].tokens);
    }
    free(s);
}

// --- 3. the piece table and cache ----------------------------------------------------------------

// Random lowercase "words": most are not tokens, so they go through BPE and fill the piece cache
// past its limit, which forces flushes.
static char* random_words(uint64_t seed, int n_words, size_t* len) {
    uint64_t rng = seed;
    char* s = (char*)malloc_check((size_t)n_words * 10 + 1);
    size_t n = 0;
    for (int w = 0; w < n_words; w++) {
        s[n++] = ' ';
        for (uint32_t k = 5 + rand_below(&rng, 5); k > 0; k--) s[n++] = (char)('a' + rand_below(&rng, 26));
    }
    *len = n;
    return s;
}

// The table and cache give what plain BPE gives: every token BPEs to itself (so the whole-token
// shortcut changes nothing), and cached, flushed and refilled pieces match BPE piece by piece.
static void test_cache(const Tokenizer* t, const char* words, size_t len) {
    Encoder e;
    encoder_init(&e, t);
    int32_t out[256];
    int self = 0;
    for (int id = 0; id < t->n_ranks; id++) {
        size_t n = 0;
        const unsigned char* s = tokenizer_decode(t, id, &n);
        self += encoder_bpe(&e, s, n, out) == 1 && out[0] == id;
    }
    EXPECT(self == t->n_ranks, "%s: only %d of %d tokens BPE to themselves", t->name, self, t->n_ranks);
    TokenBuf cold = {0}, warm = {0}, plain = {0};
    encode(&e, words, len, &cold);
    EXPECT(e.n_flushes > 0, "%zu bytes of random words did not fill the piece cache", len);
    encode(&e, words, len, &warm);
    size_t bad;
    for (size_t off = 0; off < len;) {
        int64_t end = encoder_next_piece(&e, (const unsigned char*)words, len, off, off == 0, &bad);
        token_buf_reserve(&plain, (size_t)end - off);
        plain.len += encoder_bpe(&e, (const unsigned char*)words + off, (size_t)end - off, plain.ids + plain.len);
        off = (size_t)end;
    }
    int same_warm = cold.len == warm.len && memcmp(cold.ids, warm.ids, cold.len * sizeof(int32_t)) == 0;
    int same_plain = cold.len == plain.len && memcmp(cold.ids, plain.ids, cold.len * sizeof(int32_t)) == 0;
    EXPECT(same_warm && same_plain, "random words: %zu ids cold, %zu warm (%s), %zu by plain BPE (%s)", cold.len,
           warm.len, same_warm ? "same" : "differ", plain.len, same_plain ? "same" : "differ");
    token_buf_free(&cold);
    token_buf_free(&warm);
    token_buf_free(&plain);
    encoder_free(&e);
}

// --- 4. invalid UTF-8 --------------------------------------------------------------------------------

static void test_invalid_utf8(Encoder* e) {
    static const struct { const char* s; size_t offset; } cases[] = {
        {"abc\xff", 3}, {"\x80", 0}, {"ab\xc3(", 2},  // bytes that never start a character
        {"ok \xc3", 3},                                // truncated at the end
        {"\xc0\xaf", 0}, {"x\xe0\x80\xaf", 1},          // overlong forms
        {"\xed\xa0\x80", 0},                           // a UTF-16 surrogate
        {"\xf4\x90\x80\x80", 0},                       // above U+10FFFF
        {"good \xf0\x9f\x98\x80 then \xf0\x9f\x98", 15},
    };
    TokenBuf ids = {0};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t bad = (size_t)-1;
        token_buf_push(&ids, 42);  // what is already in the buffer stays
        int rc = encoder_encode(e, (const unsigned char*)cases[c].s, strlen(cases[c].s), &ids, &bad);
        EXPECT(rc == -1 && bad == cases[c].offset && ids.len == 1 && strstr(e->err, "invalid UTF-8"),
               "invalid UTF-8 case %zu: rc %d, offset %zu (expected %zu), %zu ids, err \"%s\"", c, rc, bad,
               cases[c].offset, ids.len, e->err);
        ids.len = 0;
    }
    // the first bad byte far into a long text: the whole text is checked before anything is appended
    size_t n = 1 << 20;
    char* s = (char*)malloc_check(n);
    memset(s, 'a', n);
    s[n - 2] = (char)0xc3;
    size_t bad = 0;
    int rc = encoder_encode(e, (const unsigned char*)s, n, &ids, &bad);
    EXPECT(rc == -1 && bad == n - 2 && ids.len == 0, "bad byte at %zu of %zu: rc %d, offset %zu, %zu ids", n - 2, n,
           rc, bad, ids.len);
    free(s);
    token_buf_free(&ids);
}

// --- 5. vocab files ------------------------------------------------------------------------------------

static int load_fails(const char* path, const char* want) {
    Tokenizer t;
    char err[TOKENIZER_ERR_LEN] = "";
    int rc = tokenizer_load(&t, path, err, sizeof(err));
    if (rc == 0) tokenizer_free(&t);
    int ok = rc == -1 && strstr(err, path) && strstr(err, "make data") && strstr(err, want);
    if (!ok) fprintf(stderr, "  tokenizer_load(%s) said: %s\n", path, err);
    return ok;
}

static int json_fails(const Tokenizer* t, const char* path, const char* want) {
    char err[TOKENIZER_ERR_LEN] = "";
    int ok = tokenizer_check_encoder_json(t, path, err, sizeof(err)) == -1 && strstr(err, want) != NULL;
    if (!ok) fprintf(stderr, "  check_encoder_json(%s) said: %s\n", path, err);
    return ok;
}

static void test_vocab_files(const Tokenizer* t) {
    size_t n;
    const unsigned char* s = tokenizer_decode(t, TOKENIZER_GPT2_EOT, &n);
    EXPECT(s && n == 13 && memcmp(s, "<|endoftext|>", 13) == 0, "id 50256 does not decode to <|endoftext|>");
    EXPECT(!tokenizer_decode(t, -1, &n) && !tokenizer_decode(t, 50257, &n), "ids -1 and 50257 should not decode");
    int32_t ids[3] = {15496, 995, 50257};
    unsigned char buf[8];
    EXPECT(tokenizer_decode_ids(t, ids, 2, buf, 8) == 11 && memcmp(buf, "Hello wo", 8) == 0, "decode_ids into 8 bytes");
    EXPECT(tokenizer_decode_ids(t, ids, 3, buf, 8) == -1, "decode_ids of id 50257 should fail");
    char err[TOKENIZER_ERR_LEN] = "";
    int rc = tokenizer_check_encoder_json(t, ENCODER_JSON, err, sizeof(err));
    EXPECT(rc == 0, "encoder.json cross-check: %s", err);
    // broken vocab.bpe files
    size_t len;
    unsigned char* vocab = tokenizer_read_file(VOCAB, &len, err, sizeof(err));
    EXPECT(vocab != NULL, "%s", err);
    if (!vocab) return;
    EXPECT(load_fails(tmp_path("missing.bpe"), "cannot open"), "a missing vocab.bpe");
    write_file(tmp_path("noheader.bpe"), vocab + 14, len - 14);
    EXPECT(load_fails(tmp_path("noheader.bpe"), "#version"), "a vocab.bpe without its header");
    write_file(tmp_path("cut.bpe"), vocab, 100000);  // cut mid-line
    EXPECT(load_fails(tmp_path("cut.bpe"), "line "), "a vocab.bpe cut mid-line");
    size_t cut = 100000;
    while (vocab[cut - 1] != '\n') cut--;
    write_file(tmp_path("short.bpe"), vocab, cut);  // cut after a line
    EXPECT(load_fails(tmp_path("short.bpe"), "expected 50000"), "a truncated vocab.bpe");
    unsigned char* swapped = (unsigned char*)malloc_check(len);
    memcpy(swapped, vocab, len);
    memcpy(swapped + 14, "t \xc4\xa0", 4);  // line 2 "Ġ t" -> "t Ġ": later merges that use "Ġt" fail
    write_file(tmp_path("swapped.bpe"), swapped, len);
    EXPECT(load_fails(tmp_path("swapped.bpe"), "line "), "a vocab.bpe with a changed merge");
    free(swapped);
    free(vocab);
    // broken encoder.json files
    unsigned char* json = tokenizer_read_file(ENCODER_JSON, &len, err, sizeof(err));
    EXPECT(json != NULL, "%s", err);
    if (!json) return;
    cut = len / 2;
    while (json[cut - 1] != ',') cut--;
    write_file(tmp_path("short.json"), json, cut);  // cut after an entry
    EXPECT(json_fails(t, tmp_path("short.json"), "truncated"), "a truncated encoder.json");
    write_file(tmp_path("cut.json"), json, len / 2);  // cut mid-entry
    EXPECT(json_fails(t, tmp_path("cut.json"), "byte "), "an encoder.json cut mid-entry");
    char* hello = strstr((char*)json, "\"Hello\": 15496");
    if (hello) memcpy(hello, "\"Hellp\": 15496", 14);  // same length, same id, other bytes
    write_file(tmp_path("wrong_key.json"), json, len);
    EXPECT(hello && json_fails(t, tmp_path("wrong_key.json"), "15496"), "an encoder.json with a wrong token");
    if (hello) memcpy(hello, "\"Hello\": 15497", 14);  // 15497 twice
    write_file(tmp_path("wrong_id.json"), json, len);
    EXPECT(hello && json_fails(t, tmp_path("wrong_id.json"), "15497"), "an encoder.json with a wrong id");
    free(json);
}

// --- 6. against tiktoken ---------------------------------------------------------------------------

// Parses one line of space-separated ids.
static void parse_ids(const char* line, TokenBuf* out) {
    out->len = 0;
    for (char* end; *line && *line != '\n'; line = end) {
        long v = strtol(line, &end, 10);
        if (end == line) break;
        token_buf_push(out, (int32_t)v);
    }
}

// Compares the C encoder with tiktoken on files[0..n), up to 1000 files per node process (node takes
// about a second to start). One check per call: all files identical, id for id. Each differing file
// prints its first differing position. Returns the number of tokens compared.
static int64_t diff_tiktoken(Encoder* e, char** files, size_t n, const char* what) {
    const char* encoding = e->tok->name;
    int64_t tokens = 0;
    size_t differ = 0, done = 0;
    TokenBuf want = {0}, got = {0};
    char* line = NULL;
    size_t line_cap = 0;
    int status = 0;
    for (size_t b = 0; b < n && status == 0; b += 1000) {
        size_t nb = n - b < 1000 ? n - b : 1000, cmd_len = 96;
        for (size_t i = 0; i < nb; i++) cmd_len += strlen(files[b + i]) + 3;
        char* cmd = (char*)malloc_check(cmd_len);
        size_t o = (size_t)sprintf(cmd, "node dev/test/data/tiktoken_ids.js --encoding %s", encoding);
        for (size_t i = 0; i < nb; i++) o += (size_t)sprintf(cmd + o, " '%s'", files[b + i]);
        FILE* p = popen(cmd, "r");
        for (size_t k = 0; p && k < nb && getline(&line, &line_cap, p) >= 0; k++, done++) {
            const char* path = files[b + k];
            char err[TOKENIZER_ERR_LEN];
            size_t len, bad;
            unsigned char* text = tokenizer_read_file(path, &len, err, sizeof(err));
            parse_ids(line, &want);
            got.len = 0;
            int rc = text ? encoder_encode(e, text, len, &got, &bad) : -1;
            size_t i = 0;
            while (i < got.len && i < want.len && got.ids[i] == want.ids[i]) i++;
            if (rc != 0 || i != got.len || i != want.len) {
                differ++;
                fprintf(stderr, "  %s: C and tiktoken differ at token %zu of %zu/%zu: C %d, tiktoken %d%s%s\n", path, i,
                        got.len, want.len, i < got.len ? got.ids[i] : -1, i < want.len ? want.ids[i] : -1,
                        rc ? "; " : "", rc ? (text ? e->err : err) : "");
            }
            tokens += (int64_t)want.len;
            free(text);
        }
        status = p ? pclose(p) : -1;
        free(cmd);
    }
    EXPECT(status == 0 && done == n, "node dev/test/data/tiktoken_ids.js: exit status %d after %zu of %zu files"
           " (hint: run `make test-deps`; it needs node and npm)", status, done, n);
    EXPECT(differ == 0, "%s, %s: %zu of %zu files differ from tiktoken (first positions above)", encoding, what, differ, n);
    printf("tiktoken %s: %s: %zu files, %lld tokens, %zu differ\n", encoding, what, done, (long long)tokens, differ);
    free(line);
    token_buf_free(&want);
    token_buf_free(&got);
    return tokens;
}

static void test_tiktoken(Encoder* e, const char* fuzz, size_t fuzz_len, const char* words, size_t words_len) {
    write_file(tmp_path("fuzz.txt"), fuzz, fuzz_len);
    write_file(tmp_path("own.txt"), own_text, strlen(own_text));
    write_file(tmp_path("words.txt"), words, words_len);
    char* mine[3] = {tmp_path("fuzz.txt"), tmp_path("own.txt"), tmp_path("words.txt")};
    diff_tiktoken(e, mine, 3, "fuzz, own text, random words");
    glob_t g;
    int rc = glob(STARTER_DOCS, 0, NULL, &g);
    EXPECT(rc == 0 && g.gl_pathc > 0, "no starter documents %s: run `make data` first", STARTER_DOCS);
    if (rc == 0) diff_tiktoken(e, g.gl_pathv, g.gl_pathc, "starter corpus");
    globfree(&g);
}

// --- 7. cl100k_base and o200k_base --------------------------------------------------------------

// Known ids (tiktoken's, checked with the oracle) and pieces (as tiktoken's pattern splits them).
static void test_tiktoken_known(Encoder* e) {
    int o200k = strcmp(e->tok->name, "o200k_base") == 0;
    static const struct { const char* text; int n; int ids[2][8]; } cases[] = {
        {"hello world", 2, {{15339, 1917}, {24912, 2375}}},
        {"Hello world", 2, {{9906, 1917}, {13225, 2375}}},
        {" the", 1, {{279}, {290}}},
        {"HelloWorld", 2, {{9906, 10343}, {13225, 13046}}},
        {"12345678", 3, {{4513, 10961, 2495}, {7633, 19354, 4388}}},
        {"<|endoftext|>", 7, {{27, 91, 8862, 728, 428, 91, 29}, {27, 91, 419, 1440, 919, 91, 29}}},  // ordinary text
        {"\xe1\xb1\x8d", 3, {{157, 109, 235}, {157, 109, 235}}},  // U+1C4D: three byte tokens
        {"", 0, {{0}, {0}}},
    };
    TokenBuf ids = {0};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const int* want = cases[c].ids[o200k];
        int rc = encode(e, cases[c].text, strlen(cases[c].text), &ids);
        int same = rc == 0 && (int)ids.len == cases[c].n && memcmp(ids.ids, want, ids.len * sizeof(int32_t)) == 0;
        EXPECT(same, "%s: encode(\"%s\"): %zu ids, first %d; expected %d ids, first %d", e->tok->name, cases[c].text,
               ids.len, ids.len ? ids.ids[0] : -1, cases[c].n, want[0]);
    }
    // longer ones: the lengths differ between the encodings
    static const struct { const char* text; int n[2]; int ids[2][8]; } more[] = {
        {"Hello, I'm a language model,", {8, 7}, {{9906, 11, 358, 2846, 264, 4221, 1646, 11},
                                                   {13225, 11, 5477, 261, 6439, 2359, 11}}},
        {"I'LL DON'T we'd", {7, 5}, {{40, 6, 4178, 45373, 17773, 584, 4265}, {40, 6, 7454, 153384, 68530}}},
    };
    for (size_t c = 0; c < sizeof(more) / sizeof(more[0]); c++) {
        const int* want = more[c].ids[o200k];
        int n = more[c].n[o200k];
        int rc = encode(e, more[c].text, strlen(more[c].text), &ids);
        int same = rc == 0 && (int)ids.len == n && memcmp(ids.ids, want, ids.len * sizeof(int32_t)) == 0;
        EXPECT(same, "%s: encode(\"%s\"): %zu ids, first %d; expected %d ids, first %d", e->tok->name, more[c].text,
               ids.len, ids.len ? ids.ids[0] : -1, n, want[0]);
    }
    token_buf_free(&ids);
    static const char* const pieces_cases[][3] = {  // text, cl100k_base's pieces, o200k_base's
        {"I'LL DON'T we'd HELLO'S", "I|'LL| DON|'T| we|'d| HELLO|'S", "I'LL| DON'T| we'd| HELLO'S"},
        {"12345678 x", "123|456|78| x", "123|456|78| x"},
        {"a  \xe1\xa0\x8e" "b", "a| | \xe1\xa0\x8e|b", "a| | \xe1\xa0\x8e|b"},  // U+180E is not whitespace
        {"a\r\n\r\nb", "a|\r\n\r\n|b", "a|\r\n\r\n|b"},
        {"x \n\n  y  ", "x| \n\n| | y|  ", "x| \n\n| | y|  "},
        {"HelloWorld CamelCase \xc7\x85ungla", "HelloWorld| CamelCase| \xc7\x85ungla",
         "Hello|World| Camel|Case| \xc7\x85ungla"},  // U+01C5 is Lt
        {"can't-stop /path/to\n", "can|'t|-stop| /|path|/to|\n", "can't|-stop| /|path|/to|\n"},
        {"x\xc2\xa0y", "x|\xc2\xa0y", "x|\xc2\xa0y"},  // U+00A0 is whitespace, and joins a letter as its one non-letter
    };
    for (size_t c = 0; c < sizeof(pieces_cases) / sizeof(pieces_cases[0]); c++) {
        char got[512] = "";
        pieces(e, pieces_cases[c][0], got, sizeof(got));
        const char* want = pieces_cases[c][1 + o200k];
        EXPECT(strcmp(got, want) == 0, "%s: pieces of \"%s\": \"%s\", expected \"%s\"", e->tok->name,
               pieces_cases[c][0], got, want);
    }
}

static int tiktoken_load_fails(const char* name, const char* path, const char* want) {
    Tokenizer t;
    char err[TOKENIZER_ERR_LEN] = "";
    int rc = tokenizer_load_encoding(&t, name, path, err, sizeof(err));
    if (rc == 0) tokenizer_free(&t);
    int ok = rc == -1 && strstr(err, path) && strstr(err, "make data-tiktoken") && strstr(err, want);
    if (!ok) fprintf(stderr, "  tokenizer_load_encoding(%s, %s) said: %s\n", name, path, err);
    return ok;
}

// Sizes, special tokens, unused ids, and files that must not load.
static void test_tiktoken_vocab(const Tokenizer* t, const char* path) {
    int o200k = strcmp(t->name, "o200k_base") == 0;
    const TokenizerEncoding* enc = tokenizer_find_encoding(t->name);
    EXPECT(t->vocab_size == (o200k ? 200019 : 100277) && t->n_ranks == (o200k ? 199998 : 100256) &&
           t->eot_id == (o200k ? 199999 : 100257) && t->n_special == (o200k ? 2 : 5) && t->pattern,
           "%s: vocab_size %d, n_ranks %d, eot %d, %d special tokens", t->name, t->vocab_size, t->n_ranks, t->eot_id,
           t->n_special);
    static const struct { int o200k; int id; const char* text; } specials[] = {
        {0, 100257, "<|endoftext|>"}, {0, 100258, "<|fim_prefix|>"}, {0, 100259, "<|fim_middle|>"},
        {0, 100260, "<|fim_suffix|>"}, {0, 100276, "<|endofprompt|>"}, {1, 199999, "<|endoftext|>"},
        {1, 200018, "<|endofprompt|>"}, {0, 100256, NULL}, {0, 100261, NULL}, {0, 100275, NULL}, {1, 199998, NULL},
        {1, 200000, NULL}, {1, 200017, NULL}, {0, 100277, NULL}, {1, 200019, NULL}, {0, -1, NULL}, {1, -1, NULL}};
    for (size_t c = 0; c < sizeof(specials) / sizeof(specials[0]); c++) {
        if (specials[c].o200k != o200k) continue;
        size_t n;
        const unsigned char* s = tokenizer_decode(t, specials[c].id, &n);
        int ok = specials[c].text ? s && n == strlen(specials[c].text) && memcmp(s, specials[c].text, n) == 0 : !s;
        EXPECT(ok, "%s: id %d decodes to \"%.*s\", expected %s", t->name, specials[c].id, (int)n, s ? (const char*)s : "",
               specials[c].text ? specials[c].text : "nothing (unused or out of range)");
    }
    EXPECT(enc && strcmp(enc->path, path) == 0, "%s: default path %s", t->name, enc ? enc->path : "none");
    // files that must not load: each error names the file, the fix, and what is wrong
    char err[TOKENIZER_ERR_LEN];
    size_t len;
    unsigned char* json = tokenizer_read_file(path, &len, err, sizeof(err));
    EXPECT(json != NULL, "%s", err);
    if (!json) return;
    EXPECT(tiktoken_load_fails(t->name, tmp_path("missing.json"), "cannot open"), "%s: a missing file", t->name);
    EXPECT(tiktoken_load_fails(t->name, VOCAB, "not a tiktoken encoder file"), "%s: vocab.bpe instead", t->name);
    const char* other = o200k ? "data/tiktoken/cl100k_base.json" : "data/tiktoken/o200k_base.json";
    EXPECT(tiktoken_load_fails(t->name, other, "another encoding"), "%s: the other encoding's file", t->name);
    write_file(tmp_path("cut.json"), json, len / 2);
    EXPECT(tiktoken_load_fails(t->name, tmp_path("cut.json"), "truncated"), "%s: a truncated file", t->name);
    char* first = strstr((char*)json, " IQ== Ig== ");  // the tokens "!" and "\"", ranks 0 and 1
    EXPECT(first != NULL, "%s: no \" IQ== Ig== \" in %s", t->name, path);
    if (!first) { free(json); return; }
    memcpy(first, " IQ== IQ== ", 11);
    write_file(tmp_path("dup.json"), json, len);
    EXPECT(tiktoken_load_fails(t->name, tmp_path("dup.json"), "duplicate token"), "%s: a duplicate token", t->name);
    memcpy(first, " I!== Ig== ", 11);
    write_file(tmp_path("b64.json"), json, len);
    EXPECT(tiktoken_load_fails(t->name, tmp_path("b64.json"), "base64"), "%s: a token that is not base64", t->name);
    memcpy(first, " IQ== Ig== ", 11);
    // the real ranks with another pre-tokenizer pattern: one that compiles but splits numbers into
    // runs of 4 digits, and one that does not compile (an unknown Unicode property)
    char* digits = strstr((char*)json, "\\p{N}{1,3}");
    EXPECT(digits != NULL, "%s: no \\p{N}{1,3} in the pattern of %s", t->name, path);
    if (digits) {
        memcpy(digits, "\\p{N}{1,4}", 11);
        write_file(tmp_path("pat4.json"), json, len);
        EXPECT(tiktoken_load_fails(t->name, tmp_path("pat4.json"), "\"pat_str\""),
               "%s: a pattern that splits digits differently", t->name);
        memcpy(digits, "\\p{Q}{1,3}", 11);
        write_file(tmp_path("patq.json"), json, len);
        EXPECT(tiktoken_load_fails(t->name, tmp_path("patq.json"), "\"pat_str\""),
               "%s: a pattern that does not compile", t->name);
    }
    free(json);
}

// Long runs of one character: each regex alternative at length, and the JIT's stack.
static char* runs_text(size_t* len) {
    static const char* const runs[] = {" ", "7", ".", "\n", "\r\n", " \n", "a", "\xc2\xa0", "'"};
    size_t each = 1 << 15, n = 0;
    char* s = (char*)malloc_check(sizeof(runs) / sizeof(runs[0]) * (each + 4));
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        for (size_t k = strlen(runs[r]); n + k <= (r + 1) * each; n += k) memcpy(s + n, runs[r], k);
        s[n++] = 'x';
    }
    *len = n;
    return s;
}

static void test_tiktoken_encoding(const char* name, const char* fuzz, size_t fuzz_len, const char* words,
                                   size_t words_len) {
    Tokenizer t;
    char err[TOKENIZER_ERR_LEN];
    const TokenizerEncoding* enc = tokenizer_find_encoding(name);
    int rc = tokenizer_load_encoding(&t, name, NULL, err, sizeof(err));
    EXPECT(rc == 0, "%s (hint: run `make data-tiktoken`)", err);
    if (rc != 0) return;
    Encoder e;
    encoder_init(&e, &t);
    EXPECT(e.jit, "%s: PCRE2 did not JIT-compile the pattern", name);
    test_tiktoken_known(&e);
    test_tiktoken_vocab(&t, enc->path);
    size_t ntok, runs_len;
    EXPECT(round_trips(&t, &e, own_text, strlen(own_text), &ntok), "%s: decode(encode(own text)) differs", name);
    EXPECT(round_trips(&t, &e, fuzz, fuzz_len, &ntok), "%s: decode(encode(fuzz text)) differs", name);
    char* runs = runs_text(&runs_len);
    EXPECT(round_trips(&t, &e, runs, runs_len, &ntok), "%s: decode(encode(long runs)) differs", name);
    // a bigger table than GPT-2's (tokenizer_encode.h): more words to fill its cache
    size_t many_len;
    char* many = random_words(43, strcmp(name, "o200k_base") == 0 ? 600000 : 300000, &many_len);
    test_cache(&t, many, many_len);
    free(many);
    test_invalid_utf8(&e);
    write_file(tmp_path("fuzz.txt"), fuzz, fuzz_len);
    write_file(tmp_path("own.txt"), own_text, strlen(own_text));
    write_file(tmp_path("words.txt"), words, words_len);
    write_file(tmp_path("runs.txt"), runs, runs_len);
    char* mine[4] = {tmp_path("fuzz.txt"), tmp_path("own.txt"), tmp_path("words.txt"), tmp_path("runs.txt")};
    diff_tiktoken(&e, mine, 4, "fuzz, own text, random words, long runs");
    glob_t g;
    rc = glob(STARTER_DOCS, 0, NULL, &g);
    EXPECT(rc == 0 && g.gl_pathc > 0, "no starter documents %s: run `make data` first", STARTER_DOCS);
    clock_t c0 = clock();
    if (rc == 0) diff_tiktoken(&e, g.gl_pathv, g.gl_pathc, "starter corpus");
    printf("%s: the C side of the starter comparison (read, encode, compare) took %.1f s of CPU\n", name,
           (double)(clock() - c0) / CLOCKS_PER_SEC);
    globfree(&g);
    free(runs);
    encoder_free(&e);
    tokenizer_free(&t);
}

int main(void) {
    if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); return 1; }
    Tokenizer t;
    tokenizer_init(&t, VOCAB);
    Encoder e;
    encoder_init(&e, &t);
    size_t fuzz_len;
    char* fuzz = fuzz_text(1337, 300000, &fuzz_len);
    size_t words_len;
    char* words = random_words(42, 150000, &words_len);
    test_known_ids(&e);
    test_pieces(&e);
    test_round_trips(&t, &e, fuzz, fuzz_len);
    test_cache(&t, words, words_len);
    test_invalid_utf8(&e);
    test_vocab_files(&t);
    test_tiktoken(&e, fuzz, fuzz_len, words, words_len);
    test_tiktoken_encoding("cl100k_base", fuzz, fuzz_len, words, words_len);
    test_tiktoken_encoding("o200k_base", fuzz, fuzz_len, words, words_len);
    free(fuzz);
    free(words);
    encoder_free(&e);
    tokenizer_free(&t);
    test_remove_dir(tmp_dir);
    return test_summary("test_tokenizer");
}
