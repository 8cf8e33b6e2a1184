// fuzz_encode.c: the encoders of GPT-2, cl100k_base and o200k_base (llmc/data/tokenizer_encode.h) on any
// bytes, with the real tables (data/gpt2/vocab.bpe, data/tiktoken/*.json, read once).
// The input: byte 0 picks the encoding (mod 3), the rest is the text.
// Properties: the text is accepted exactly when it is valid UTF-8 (checked here independently: no
// overlong forms, no surrogates, nothing above U+10FFFF); then decode(encode(text)) == text, every id is
// a rank (special tokens are never produced), and encoding again (now from the encoder's cache) gives
// the same ids; when it is refused, the offset given is that of the first invalid byte.
#define FUZZ_WRAP_CJSON
#include "fuzz.h"
#include "../../llmc/data/tokenizer.h"
#include "../../llmc/data/tokenizer_encode.h"
#include "../../llmc/data/tokenizer_tiktoken.h"

static Tokenizer tok[3];
static Encoder enc[3];

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc; (void)argv;
    const char* names[3] = {"gpt2", "cl100k_base", "o200k_base"};
    for (int i = 0; i < 3; i++) {
        char err[TOKENIZER_ERR_LEN];
        if (tokenizer_load_encoding(&tok[i], names[i], NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_encode: %s (run from the repository's root, after `make data data-tiktoken`)\n", err);
            exit(1);
        }
        encoder_init(&enc[i], &tok[i]);
    }
    return 0;
}

// The offset of the first byte that is not part of a valid UTF-8 character, or n.
static size_t utf8_valid_prefix(const uint8_t* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return i;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += k + 1;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % 3;
    const uint8_t* text = data + 1;
    size_t len = size - 1;
    Encoder* e = &enc[which];
    const Tokenizer* t = &tok[which];
    TokenBuf ids = {0}, again = {0};
    size_t bad = (size_t)-1, valid = utf8_valid_prefix(text, len);
    int rc = encoder_encode(e, text, len, &ids, &bad);
    if (rc != 0) {
        if (valid == len) FUZZ_FAIL("%s: valid UTF-8 of %zu bytes refused: %s", t->name, len, e->err);
        if (bad != valid) FUZZ_FAIL("%s: invalid UTF-8 at byte %zu, the encoder says %zu", t->name, valid, bad);
        if (ids.len != 0) FUZZ_FAIL("%s: refused, and still %zu ids appended", t->name, ids.len);
    } else {
        if (valid != len) FUZZ_FAIL("%s: accepted, with invalid UTF-8 at byte %zu of %zu", t->name, valid, len);
        for (size_t i = 0; i < ids.len; i++)
            if (ids.ids[i] < 0 || ids.ids[i] >= t->n_ranks) FUZZ_FAIL("%s: id %d is not a rank", t->name, ids.ids[i]);
        unsigned char* out = (unsigned char*)malloc(len + 1);
        int64_t n = tokenizer_decode_ids(t, ids.ids, ids.len, out, len + 1);
        if (n != (int64_t)len || memcmp(out, text, len) != 0)
            FUZZ_FAIL("%s: decode(encode(x)) differs from x (%lld bytes for %zu)", t->name, (long long)n, len);
        free(out);
        if (encoder_encode(e, text, len, &again, &bad) != 0 || again.len != ids.len ||
            (ids.len && memcmp(again.ids, ids.ids, ids.len * sizeof(int32_t)) != 0))
            FUZZ_FAIL("%s: the second encoding of the same text differs", t->name);
    }
    token_buf_free(&ids);
    token_buf_free(&again);
    return 0;
}
