// fuzz_tokenizer_files.c: the tokenizers' tables: GPT-2's vocab.bpe (tokenizer_load) and encoder.json
// (tokenizer_check_encoder_json), llmc/data/tokenizer.h; tiktoken's encoder files
// (tokenizer_load_tiktoken), llmc/data/tokenizer_tiktoken.h; and an encoder (llmc/data/tokenizer_encode.h)
// built on every table that loads.
// The input is parts (fuzz.h): settings, then the file(s). Settings byte 0, mod 3: 0 vocab.bpe, then
// (optional) the encoder.json checked against it; 1 an encoder.json checked against GPT-2's real
// vocab.bpe (data/gpt2/vocab.bpe, read once); 2 a tiktoken encoder file, loaded as cl100k_base (byte 0
// / 3 even) or o200k_base (odd), as `--encoding` names it.
// Properties: a refusal names the file; in a table that loads every id decodes to its bytes and the
// lookup finds each rank's bytes again; the encoder of a table that loads is built, encodes a sample
// text without error, and decoding gives the text back.
#define FUZZ_WRAP_CJSON
#define FUZZ_MUTATE_NUMBERS
#include "fuzz.h"
#include "../../llmc/data/tokenizer.h"
#include "../../llmc/data/tokenizer_encode.h"
#include "../../llmc/data/tokenizer_tiktoken.h"

static const char sample[] =
    "Hello world! It's 2026, and we'll see: naïve café, Ünïcödé, 東京, Ελληνικά, русский, עברית, 😀👍🏽\n"
    "  tabs\tand   spaces  \r\n\n123456789 3.14159 ++x; y-->0 <|endoftext|> 's 'S 'll";

static Tokenizer gpt2;  // data/gpt2/vocab.bpe, for mode 1
static char vocab_path[1100], encoder_path[1100], tiktoken_path[1100];

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc; (void)argv;
    char err[TOKENIZER_ERR_LEN];
    if (tokenizer_load(&gpt2, "data/gpt2/vocab.bpe", err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_tokenizer_files: %s (run from the repository's root, after `make data`)\n", err);
        exit(1);
    }
    fuzz_path(vocab_path, sizeof(vocab_path), "vocab.bpe");
    fuzz_path(encoder_path, sizeof(encoder_path), "encoder.json");
    fuzz_path(tiktoken_path, sizeof(tiktoken_path), "encoding.json");
    return 0;
}

// The table's own consistency.
static void check_table(const Tokenizer* t) {
    if (t->n_ranks < 256 || t->vocab_size < t->n_ranks || t->eot_id < t->n_ranks || t->eot_id >= t->vocab_size)
        FUZZ_FAIL("%d ranks, %d ids, <|endoftext|> %d", t->n_ranks, t->vocab_size, t->eot_id);
    for (int id = 0; id < t->vocab_size; id++) {
        if (t->offsets[id + 1] < t->offsets[id]) FUZZ_FAIL("id %d: offsets go backwards", id);
        size_t n;
        const unsigned char* s = tokenizer_decode(t, id, &n);
        if (id < t->n_ranks && (!s || tokenizer_lookup(t, s, n) != id))
            FUZZ_FAIL("rank %d: its bytes do not look up to it", id);
    }
}

// An encoder on the table, the sample encoded and decoded.
static void check_encoder(const Tokenizer* t) {
    static Encoder e;  // (static: what the statements in FUZZ_TRY change is read after a jump)
    static TokenBuf ids;
    static size_t bad;
    volatile int exited, rc = 0;
    FUZZ_TRY(exited, encoder_init(&e, t); rc = encoder_encode(&e, (const unsigned char*)sample, sizeof(sample) - 1, &ids, &bad));
    if (exited) {
        FUZZ_FAIL("the encoder of a table that loads exited with status %d", fuzz_exit_status);
    } else if (rc != 0) {
        FUZZ_FAIL("the encoder of a table that loads refuses the sample text: %s", e.err);
    } else {
        size_t cap = 4 * sizeof(sample);
        unsigned char* out = (unsigned char*)malloc(cap);
        int64_t n = tokenizer_decode_ids(t, ids.ids, ids.len, out, cap);
        if (n != (int64_t)sizeof(sample) - 1 || memcmp(out, sample, sizeof(sample) - 1) != 0)
            FUZZ_FAIL("decode(encode(sample)) is not the sample (%lld bytes)", (long long)n);
        free(out);
    }
    token_buf_free(&ids);
    encoder_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzParts p;
    fuzz_parts(&p, data, size);
    if (p.n < 2) return 0;
    int mode = (p.len[0] ? p.at[0][0] : 0) % 3;
    char err[TOKENIZER_ERR_LEN];
    static Tokenizer t;
    if (mode == 0) {
        fuzz_write(vocab_path, p.at[1], p.len[1]);
        if (tokenizer_load(&t, vocab_path, err, sizeof(err)) != 0) { FUZZ_NAMES(err, vocab_path); return 0; }
        check_table(&t);
        if (p.n > 2) {
            fuzz_write(encoder_path, p.at[2], p.len[2]);
            if (tokenizer_check_encoder_json(&t, encoder_path, err, sizeof(err)) != 0) FUZZ_NAMES(err, encoder_path);
        }
        check_encoder(&t);
        tokenizer_free(&t);
    } else if (mode == 1) {
        fuzz_write(encoder_path, p.at[1], p.len[1]);
        if (tokenizer_check_encoder_json(&gpt2, encoder_path, err, sizeof(err)) != 0) FUZZ_NAMES(err, encoder_path);
    } else {
        fuzz_write(tiktoken_path, p.at[1], p.len[1]);
        const char* name = (p.at[0][0] / 3) % 2 ? "o200k_base" : "cl100k_base";
        if (tokenizer_load_tiktoken(&t, name, tiktoken_path, err, sizeof(err)) != 0) {
            FUZZ_NAMES(err, tiktoken_path);
            return 0;
        }
        check_table(&t);
        check_encoder(&t);
        tokenizer_free(&t);
    }
    return 0;
}
