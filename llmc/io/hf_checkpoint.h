// hf_checkpoint.h: host-only. A train_gpt checkpoint of either family exported to a directory that
// Hugging Face transformers loads (llmc/io/hf_model.h: GPT2LMHeadModel with GPT-2's tokenizer files, or
// LlamaForCausalLM): its fp32 master weights, read through llmc/io/checkpoint.h's reader
// once the header's sizes, the checksum and every value are checked, so that nothing is written from a
// damaged file. build/export_hf's code (data/export_hf.c); no GPU. Host memory: the master weights, 4
// bytes per parameter. Errors: 0, or -1 with the message in err; nothing exits.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint.h"
#include "hf_model.h"
#include "../data/tokenizer_tiktoken.h"  // a Llama export's end-of-text id, by its vocabulary

// What an export wrote.
typedef struct {
    CheckpointModel model;  // the checkpoint's family and sizes
    int64_t step;
    int eos;                // a Llama export's <|endoftext|> id in config.json; -1 when its vocabulary is no
                            // encoding's (none written), and for GPT-2 (its tokenizer files say it)
} HfExported;

// What the export advises for a checkpoint it cannot read (the checkpoint reader's messages end with it).
#define HF_CHECKPOINT_ADVICE "export another checkpoint (an earlier ckpt_<step>.bin of its directory)"

// The model sizes of a checkpoint's header as its family's config (checkpoint_config_of); 0 when they
// make no model (a corrupt header), with why (n bytes) saying which sizes and what is wrong.
// *num_params: what those sizes hold.
static inline int hf_checkpoint_config(const CheckpointModel* m, ModelConfig* c, size_t* num_params, char* why,
                                       size_t n) {
    const int32_t most = 1 << 20;  // bounds every size, so that no product below overflows
    int len = snprintf(why, n, "%s, %d layers, %d channels, %d heads, vocabulary %d (padded %d), context %d",
                       checkpoint_family_name(m->family), m->num_layers, m->channels, m->num_heads, m->vocab_size,
                       m->padded_vocab_size, m->max_seq_len);
    if (m->family == CHECKPOINT_FAMILY_LLAMA && len > 0 && (size_t)len < n)
        snprintf(why + len, n - (size_t)len, ", %d key/value heads, FFN %d", m->num_kv_heads, m->ffn_hidden);
    len = (int)strlen(why);
    const char* bad = NULL;
    if (m->num_layers < 1 || m->channels < 1 || m->num_heads < 1 || m->vocab_size < 1 || m->max_seq_len < 1)
        bad = "a size below 1";
    else if (m->vocab_size > m->padded_vocab_size)
        bad = "a vocabulary above its padded size";
    else if (m->num_layers > 4096 || m->channels > most || m->padded_vocab_size > most || m->max_seq_len > most)
        bad = "a size beyond any model's (at most 4096 layers, 2^20 channels, vocabulary and context)";
    else if (m->num_heads > m->channels)
        bad = "more heads than channels";
    else if (m->family == CHECKPOINT_FAMILY_LLAMA &&
             (m->num_kv_heads < 1 || m->ffn_hidden < 1 || m->ffn_hidden > most || m->channels % m->num_heads != 0 ||
              m->num_heads % m->num_kv_heads != 0))
        bad = "key/value heads that do not divide the heads, heads that do not divide the channels, or an FFN size "
              "out of range";
    if (bad) {
        snprintf(why + len, n - (size_t)len, ": %s", bad);
        return 0;
    }
    *c = checkpoint_config_of(m);
    *num_params = model_num_params(c);
    return 1;
}

// The model of the checkpoint ckpt exported to dir; vocab_bpe: GPT-2's vocab.bpe, with encoder.json
// beside it (a GPT-2 export copies them; a Llama export has no tokenizer files). *out says what it was.
static inline int hf_export_checkpoint(const char* ckpt, const char* dir, const char* vocab_bpe, HfExported* out,
                                       char* err, size_t errlen) {
    CheckpointReader r;
    if (checkpoint_reader_open_advising(&r, ckpt, HF_CHECKPOINT_ADVICE) != 0) {
        snprintf(err, errlen, "%s", r.err);
        return -1;
    }
    CheckpointModel want = r.state.model;
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    size_t total = 0;
    char why[512];
    if (!hf_checkpoint_config(&want, &c, &total, why, sizeof(why))) {
        snprintf(err, errlen, "checkpoint %s: corrupt header: model sizes that make no model (%s); %s", ckpt, why,
                 HF_CHECKPOINT_ADVICE);
        checkpoint_reader_close(&r);
        return -1;
    }
    want.num_params = (int64_t)total;  // the header's count must be what its sizes give
    if (checkpoint_check_model(&r, &want) != 0) {
        snprintf(err, errlen, "%s", r.err);
        checkpoint_reader_close(&r);
        return -1;
    }
    if (checkpoint_reader_verify(&r) != 0) {  // the checksum, and every value finite, before anything is written
        snprintf(err, errlen, "%s", r.err);
        checkpoint_reader_close(&r);
        return -1;
    }
    float* values = (float*)malloc(total * sizeof(float));
    if (!values) {
        snprintf(err, errlen, "%s: cannot allocate %.1f MiB for the weights", ckpt, total * 4.0 / 1048576.0);
        checkpoint_reader_close(&r);
        return -1;
    }
    int rc = checkpoint_reader_read(&r, values, total * sizeof(float));  // the master weights come first
    if (rc != 0) snprintf(err, errlen, "%s", r.err);
    checkpoint_reader_close(&r);
    memset(out, 0, sizeof(*out));
    out->model = want;
    out->step = r.state.step;
    const TokenizerEncoding* enc = tokenizer_encoding_of_vocab(c.vocab_size);
    out->eos = want.family == CHECKPOINT_FAMILY_LLAMA && enc ? enc->eot_id : -1;
    if (rc == 0) rc = hf_model_export(dir, &c, values, vocab_bpe, out->eos, err, errlen);
    free(values);
    return rc;
}
