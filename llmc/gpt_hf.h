// gpt_hf.h: host-only. The GPT-2 model in Hugging Face's layout. Export: our parameters (fp32, in
// llmc/gpt_config.h's order) to a directory that transformers loads as it is
// (GPT2LMHeadModel.from_pretrained(DIR), AutoTokenizer.from_pretrained(DIR)). Import: a GPT-2
// safetensors file in that layout (ours, transformers' own, the released GPT-2 weights) into our order.
// Used by data/export_hf.c, train_gpt's -export_hf and -init, and dev/interop/gpt_dump.cu. A checkpoint
// is read through llmc/checkpoint.h's reader (gpt_hf_export_checkpoint).
//
// The directory:
//   model.safetensors        the weights in fp32, with the names below; metadata {"format": "pt"}
//   config.json              GPT2Config: n_embd, n_layer, n_head, n_positions = the model's context,
//                            vocab_size 50257, activation_function gelu_new (GPT-2's tanh GELU, as
//                            llmc/gelu.cuh), layer_norm_epsilon 1e-5 (llmc/layernorm.cuh's LN_EPS), tied
//                            embeddings, dropout 0 (the trainer uses none), torch_dtype float32
//   vocab.json, merges.txt   GPT-2's encoder.json and vocab.bpe (data/gpt2/, fetched by `make data`), copied
//   tokenizer_config.json, special_tokens_map.json   GPT2Tokenizer, <|endoftext|> as bos, eos and unk
// Every file is written atomically (llmc/hf_files.h: temporary file, fsync, rename).
//
// Names and shapes. Ours are (out, in), y = x·Wᵀ; HF's GPT-2 computes its linear layers with Conv1D,
// y = x·W, whose weights are (in, out): the four matrices of each layer are stored transposed.
//   wte.weight (V, C)                      wte rows [0, V): the padded rows are dropped (zeros on import)
//   wpe.weight (maxT, C)                   wpe
//   h.{l}.ln_1.weight, h.{l}.ln_1.bias     ln1w[l], ln1b[l] (C)
//   h.{l}.attn.c_attn.weight (C, 3C)       qkvw[l]ᵀ: q, k, v in that order, heads side by side in each
//   h.{l}.attn.c_attn.bias (3C)            qkvb[l]
//   h.{l}.attn.c_proj.weight (C, C)        attprojw[l]ᵀ, and .bias attprojb[l]
//   h.{l}.ln_2.weight, h.{l}.ln_2.bias     ln2w[l], ln2b[l]
//   h.{l}.mlp.c_fc.weight (C, 4C)          fcw[l]ᵀ, and .bias fcb[l] (4C)
//   h.{l}.mlp.c_proj.weight (4C, C)        fcprojw[l]ᵀ, and .bias fcprojb[l] (C)
//   ln_f.weight, ln_f.bias (C)             lnfw, lnfb
// The LM head is tied to wte, so lm_head.weight is not stored: transformers ties it on load.
//
// Import accepts names with or without the "transformer." prefix (what GPT2LMHeadModel.save_pretrained
// writes), F32, BF16 or F16 (converted exactly to fp32), and ignores the causal-mask buffers
// h.{l}.attn.bias and h.{l}.attn.masked_bias that older files carry; an lm_head.weight must equal
// wte.weight (the head is tied here). Any other difference (a missing tensor, another shape or dtype, an
// unknown name, a config.json beside the file with another n_head, activation or epsilon) is an error
// that names it. Errors: 0, or -1 with the message in `err` / r->err; nothing exits.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "checkpoint.h"
#include "gpt_config.h"
#include "hf_files.h"
#include "safetensors.h"

#define GPT_HF_VOCAB 50257     // GPT-2's vocabulary: the rows of wte.weight
#define GPT_HF_EOT 50256       // <|endoftext|>
#define GPT_HF_LN_EPS 1e-5     // llmc/layernorm.cuh's LN_EPS: train_gpt.cu checks at compile time that they agree
#define GPT_HF_ERR_LEN HF_ERR_LEN  // llmc/hf_files.h's, under the name train_gpt.cu uses

// One tensor of HF's GPT-2 and where it lives in our parameter array.
typedef struct {
    char name[48];     // HF's name, without the "transformer." prefix
    int tensor;        // GPT_WTE ... of llmc/gpt_config.h
    size_t offset;     // of its first element in our parameter array
    int rows, cols;    // in our layout, (out, in) for a matrix; a vector is (1, n)
    int transpose;     // HF stores it (cols, rows)
    int ndim;          // HF's shape: (shape[0]) or (shape[0], shape[1])
    int64_t shape[2];
} GptHfTensor;

static inline int gpt_hf_num_tensors(const GptConfig* c) { return 4 + 12 * c->num_layers; }

// The gpt_hf_num_tensors(c) tensors in file order: wte, wpe, h.0 ... h.{L-1}, ln_f.
static inline void gpt_hf_tensors(GptHfTensor* t, const GptConfig* c) {
    size_t size[GPT_NUM_TENSORS], off[GPT_NUM_TENSORS], o = 0;
    gpt_tensor_sizes(size, c);
    for (int i = 0; i < GPT_NUM_TENSORS; i++) { off[i] = o; o += size[i]; }
    int C = c->channels, L = c->num_layers;
    // per layer: HF suffix, our tensor, our rows and columns, transposed
    const struct { const char* suffix; int tensor, rows, cols, transpose; } layer[12] = {
        {"ln_1.weight", GPT_LN1W, 1, C, 0}, {"ln_1.bias", GPT_LN1B, 1, C, 0},
        {"attn.c_attn.weight", GPT_QKVW, 3 * C, C, 1}, {"attn.c_attn.bias", GPT_QKVB, 1, 3 * C, 0},
        {"attn.c_proj.weight", GPT_ATTPROJW, C, C, 1}, {"attn.c_proj.bias", GPT_ATTPROJB, 1, C, 0},
        {"ln_2.weight", GPT_LN2W, 1, C, 0}, {"ln_2.bias", GPT_LN2B, 1, C, 0},
        {"mlp.c_fc.weight", GPT_FCW, 4 * C, C, 1}, {"mlp.c_fc.bias", GPT_FCB, 1, 4 * C, 0},
        {"mlp.c_proj.weight", GPT_FCPROJW, C, 4 * C, 1}, {"mlp.c_proj.bias", GPT_FCPROJB, 1, C, 0}};
    int n = 0;
    const struct { const char* name; int tensor, rows, cols; } whole[4] = {
        {"wte.weight", GPT_WTE, c->vocab_size, C}, {"wpe.weight", GPT_WPE, c->max_seq_len, C},
        {"ln_f.weight", GPT_LNFW, 1, C}, {"ln_f.bias", GPT_LNFB, 1, C}};
    for (int k = 0; k < 4; k++) {
        if (k == 2) {  // the layers come between wpe and ln_f
            for (int l = 0; l < L; l++)
                for (int j = 0; j < 12; j++) {
                    GptHfTensor* e = &t[n++];
                    snprintf(e->name, sizeof(e->name), "h.%d.%s", l, layer[j].suffix);
                    e->tensor = layer[j].tensor;
                    e->rows = layer[j].rows;
                    e->cols = layer[j].cols;
                    e->offset = off[e->tensor] + (size_t)l * e->rows * e->cols;
                    e->transpose = layer[j].transpose;
                    e->ndim = e->rows == 1 ? 1 : 2;
                    e->shape[0] = e->transpose ? e->cols : e->rows == 1 ? e->cols : e->rows;
                    e->shape[1] = e->transpose ? e->rows : e->cols;
                }
        }
        GptHfTensor* e = &t[n++];
        snprintf(e->name, sizeof(e->name), "%s", whole[k].name);
        e->tensor = whole[k].tensor;
        e->rows = whole[k].rows;
        e->cols = whole[k].cols;
        e->offset = off[e->tensor];
        e->transpose = 0;
        e->ndim = e->rows == 1 ? 1 : 2;
        e->shape[0] = e->rows == 1 ? e->cols : e->rows;
        e->shape[1] = e->cols;
    }
}

// dst (cols, rows) = srcᵀ, src (rows, cols); row-major.
static inline void gpt_hf_transpose(float* dst, const float* src, int rows, int cols) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
}

// --- export --------------------------------------------------------------------------------------

// values (num_params) fp32 in our order -> path, a safetensors file with HF's names and layouts (fp32).
// Also writes gradients: they have the parameters' layout (dev/interop/gpt_dump.cu).
static inline int gpt_hf_write_safetensors(const char* path, const GptConfig* c, const float* values, char* err,
                                           size_t errlen) {
    int n = gpt_hf_num_tensors(c);
    GptHfTensor* hf = (GptHfTensor*)calloc((size_t)n, sizeof(GptHfTensor));
    SafetensorsTensor* st = (SafetensorsTensor*)calloc((size_t)n, sizeof(SafetensorsTensor));
    float* scratch = (float*)malloc((size_t)4 * c->channels * c->channels * sizeof(float));  // the largest transposed
    if (!hf || !st || !scratch) {
        snprintf(err, errlen, "%s: out of host memory", path);
        free(hf); free(st); free(scratch);
        return -1;
    }
    gpt_hf_tensors(hf, c);
    for (int i = 0; i < n; i++) safetensors_tensor(&st[i], hf[i].name, ST_F32, hf[i].ndim, hf[i].shape);
    const char* const meta[] = {"format", "pt", NULL};
    SafetensorsWriter w;
    int rc = safetensors_writer_open(&w, path, st, n, meta);
    for (int i = 0; i < n && rc == 0; i++) {
        const float* src = values + hf[i].offset;
        size_t count = (size_t)hf[i].rows * hf[i].cols;
        if (hf[i].transpose) {
            gpt_hf_transpose(scratch, src, hf[i].rows, hf[i].cols);
            src = scratch;
        }
        rc = safetensors_writer_append(&w, src, count * sizeof(float));
    }
    if (rc == 0) rc = safetensors_writer_close(&w);
    if (rc != 0) snprintf(err, errlen, "%s", w.err);
    free(scratch); free(st); free(hf);
    return rc;
}

// config.json of GPT2LMHeadModel for c.
static inline cJSON* gpt_hf_config_json(const GptConfig* c) {
    cJSON* j = cJSON_CreateObject();
    cJSON* arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", c->max_seq_len);
    cJSON_AddNumberToObject(j, "n_ctx", c->max_seq_len);
    cJSON_AddNumberToObject(j, "n_embd", c->channels);
    cJSON_AddNumberToObject(j, "n_layer", c->num_layers);
    cJSON_AddNumberToObject(j, "n_head", c->num_heads);
    cJSON_AddNumberToObject(j, "n_inner", 4 * c->channels);
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", GPT_HF_LN_EPS);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddNumberToObject(j, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "resid_pdrop", 0.0);
    cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    cJSON_AddNumberToObject(j, "bos_token_id", GPT_HF_EOT);
    cJSON_AddNumberToObject(j, "eos_token_id", GPT_HF_EOT);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    return j;
}

// The whole directory (see the top of this file): values (num_params) fp32 in our order; vocab_bpe is
// GPT-2's vocab.bpe, with encoder.json beside it (data/gpt2/ after `make data`).
static inline int gpt_hf_export(const char* dir, const GptConfig* c, const float* values, const char* vocab_bpe,
                                char* err, size_t errlen) {
    if (c->vocab_size != GPT_HF_VOCAB) {
        snprintf(err, errlen, "export to %s: vocabulary %d, GPT-2's tokenizer files have %d", dir, c->vocab_size, GPT_HF_VOCAB);
        return -1;
    }
    if (hf_make_dir(dir, err, errlen) != 0) return -1;
    char path[SAFETENSORS_PATH_MAX + 64], encoder[SAFETENSORS_PATH_MAX + 64];
    snprintf(encoder, sizeof(encoder), "%s", vocab_bpe);
    char* slash = strrchr(encoder, '/');
    snprintf(slash ? slash + 1 : encoder, sizeof(encoder) - (size_t)(slash ? slash + 1 - encoder : 0), "encoder.json");
    const char* hint = "GPT-2's BPE files come with `make data` (data/gpt2/); or pass their place with -vocab";
    snprintf(path, sizeof(path), "%s/vocab.json", dir);
    if (hf_copy_file(encoder, path, hint, err, errlen) != 0) return -1;
    snprintf(path, sizeof(path), "%s/merges.txt", dir);
    if (hf_copy_file(vocab_bpe, path, hint, err, errlen) != 0) return -1;
    cJSON* tc = cJSON_CreateObject();
    cJSON_AddStringToObject(tc, "tokenizer_class", "GPT2Tokenizer");
    cJSON_AddNumberToObject(tc, "model_max_length", c->max_seq_len);
    cJSON_AddStringToObject(tc, "bos_token", "<|endoftext|>");
    cJSON_AddStringToObject(tc, "eos_token", "<|endoftext|>");
    cJSON_AddStringToObject(tc, "unk_token", "<|endoftext|>");
    cJSON_AddBoolToObject(tc, "add_prefix_space", 0);
    if (hf_write_json(dir, "tokenizer_config.json", tc, err, errlen) != 0) return -1;
    cJSON* sm = cJSON_CreateObject();
    cJSON_AddStringToObject(sm, "bos_token", "<|endoftext|>");
    cJSON_AddStringToObject(sm, "eos_token", "<|endoftext|>");
    cJSON_AddStringToObject(sm, "unk_token", "<|endoftext|>");
    if (hf_write_json(dir, "special_tokens_map.json", sm, err, errlen) != 0) return -1;
    if (hf_write_json(dir, "config.json", gpt_hf_config_json(c), err, errlen) != 0) return -1;
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    return gpt_hf_write_safetensors(path, c, values, err, errlen);
}

// The model of a train_gpt checkpoint (its fp32 master weights, read through llmc/checkpoint.h) exported
// to dir; *config and *step tell what it was. Host memory: the master weights, 4 bytes per parameter.
static inline int gpt_hf_export_checkpoint(const char* ckpt, const char* dir, const char* vocab_bpe, GptConfig* config,
                                           int64_t* step, char* err, size_t errlen) {
    CheckpointReader r;
    if (checkpoint_reader_open(&r, ckpt) != 0) { snprintf(err, errlen, "%s", r.err); return -1; }
    CheckpointModel m = r.state.model;
    GptConfig c;
    c.num_layers = m.num_layers; c.channels = m.channels; c.num_heads = m.num_heads;
    c.vocab_size = m.vocab_size; c.padded_vocab_size = m.padded_vocab_size; c.max_seq_len = m.max_seq_len;
    size_t size[GPT_NUM_TENSORS], total = 0;
    gpt_tensor_sizes(size, &c);
    for (int i = 0; i < GPT_NUM_TENSORS; i++) total += size[i];
    CheckpointModel want = m;
    want.num_params = (int64_t)total;  // the header's count must be what its sizes give
    want.family = CHECKPOINT_FAMILY_GPT2;  // a Llama-style checkpoint is refused, naming its family
    if (m.num_layers < 1 || m.channels < 1 || m.num_heads < 1 || m.vocab_size > m.padded_vocab_size ||
        checkpoint_check_model(&r, &want) != 0) {
        snprintf(err, errlen, "%s", r.err[0] ? r.err : "corrupt model sizes in the header");
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
    if (rc == 0) rc = gpt_hf_export(dir, &c, values, vocab_bpe, err, errlen);
    free(values);
    if (config) *config = c;
    if (step) *step = r.state.step;
    return rc;
}

// --- import --------------------------------------------------------------------------------------

typedef struct {
    SafetensorsReader st;
    char path[SAFETENSORS_PATH_MAX + 32];  // the safetensors file
    const char* prefix;                     // "" or "transformer."
    int num_layers, channels;               // from the tensors: h.{l}.ln_1.weight present for l < num_layers; wte's
    int vocab_rows, positions;              // rows of wte.weight and wpe.weight
    int num_heads;                          // n_head of a config.json beside the file; 0 without one
    char err[HF_ERR_LEN];
} GptHfReader;

static inline int gpt_hf_fail(GptHfReader* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int gpt_hf_fail(GptHfReader* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(r->err, sizeof(r->err), "%s: ", r->path);
    if (n < 0 || n >= (int)sizeof(r->err)) n = 0;
    vsnprintf(r->err + n, sizeof(r->err) - (size_t)n, fmt, ap);
    va_end(ap);
    safetensors_close(&r->st);
    return -1;
}

static inline const SafetensorsTensor* gpt_hf_find(const GptHfReader* r, const char* name) {
    char full[SAFETENSORS_NAME_MAX];
    snprintf(full, sizeof(full), "%s%s", r->prefix, name);
    return safetensors_find(&r->st, full);
}

// The config.json beside the weights, when there is one: the settings that change the math but not the
// shapes must be GPT-2's as this program computes it.
static inline int gpt_hf_check_config(GptHfReader* r, const char* config_path) {
    FILE* f = fopen(config_path, "rb");
    if (!f) return 0;
    char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    cJSON* j = cJSON_Parse(buf);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return gpt_hf_fail(r, "%s beside it is not a JSON object (or longer than 64 KiB)", config_path);
    }
    const cJSON* nh = cJSON_GetObjectItemCaseSensitive(j, "n_head");
    const cJSON* act = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    const cJSON* eps = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    const cJSON* type = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    char msg[256] = "";
    if (cJSON_IsString(type) && strcmp(type->valuestring, "gpt2") != 0)
        snprintf(msg, sizeof(msg), "model_type \"%s\", this program trains gpt2", type->valuestring);
    else if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu_new") != 0 &&
             strcmp(act->valuestring, "gelu_pytorch_tanh") != 0)
        snprintf(msg, sizeof(msg), "activation_function \"%s\", this program computes GPT-2's tanh GELU (gelu_new)",
                 act->valuestring);
    else if (cJSON_IsNumber(eps) && fabs(eps->valuedouble - GPT_HF_LN_EPS) > 1e-9)
        snprintf(msg, sizeof(msg), "layer_norm_epsilon %g, this program uses %g", eps->valuedouble, GPT_HF_LN_EPS);
    else if (nh && (!cJSON_IsNumber(nh) || nh->valuedouble < 1 || nh->valuedouble != floor(nh->valuedouble)))
        snprintf(msg, sizeof(msg), "n_head is not a positive integer");
    if (cJSON_IsNumber(nh)) r->num_heads = (int)nh->valuedouble;
    cJSON_Delete(j);
    if (msg[0]) return gpt_hf_fail(r, "%s beside it has %s", config_path, msg);
    return 0;
}

// Opens path (a safetensors file, or a directory holding model.safetensors), checks the file and reads
// the model's sizes from its tensors' shapes (and n_head from a config.json beside it). The caller
// builds its model from these, then calls gpt_hf_load.
static inline int gpt_hf_open(GptHfReader* r, const char* path) {
    memset(r, 0, sizeof(*r));
    r->prefix = "";
    struct stat sb;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    snprintf(r->path, sizeof(r->path), is_dir ? "%s/model.safetensors" : "%s", path);
    if (is_dir && stat(r->path, &sb) != 0)
        return gpt_hf_fail(r, "no such file in the directory %s (a model split into model-0000N-of-M.safetensors "
                           "files is not read: merge it into one file first)", path);
    if (safetensors_open(&r->st, r->path) != 0) {
        snprintf(r->err, sizeof(r->err), "%s", r->st.err);
        return -1;
    }
    if (!safetensors_find(&r->st, "wte.weight") && safetensors_find(&r->st, "transformer.wte.weight"))
        r->prefix = "transformer.";
    const SafetensorsTensor* wte = gpt_hf_find(r, "wte.weight");
    const SafetensorsTensor* wpe = gpt_hf_find(r, "wpe.weight");
    if (!wte || !wpe)
        return gpt_hf_fail(r, "no tensor \"%s\" (nor \"transformer.%s\"): not a GPT-2 model in Hugging Face's layout",
                           wte ? "wpe.weight" : "wte.weight", wte ? "wpe.weight" : "wte.weight");
    if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1] || wte->shape[1] < 1 ||
        wte->shape[1] > 1 << 20 || wte->shape[0] > 1 << 24 || wpe->shape[0] > 1 << 24)
        return gpt_hf_fail(r, "tensor \"%swte.weight\" and \"%swpe.weight\" must be (rows, C) with the same C",
                           r->prefix, r->prefix);
    r->channels = (int)wte->shape[1];
    r->vocab_rows = (int)wte->shape[0];
    r->positions = (int)wpe->shape[0];
    char name[64];
    for (r->num_layers = 0;; r->num_layers++) {
        snprintf(name, sizeof(name), "h.%d.ln_1.weight", r->num_layers);
        if (!gpt_hf_find(r, name)) break;
    }
    char config_path[SAFETENSORS_PATH_MAX + 64];
    snprintf(config_path, sizeof(config_path), "%s", r->path);
    char* slash = strrchr(config_path, '/');
    snprintf(slash ? slash + 1 : config_path, sizeof(config_path) - (size_t)(slash ? slash + 1 - config_path : 0),
             "config.json");
    return gpt_hf_check_config(r, config_path);
}

// Is `name` (without the prefix) a buffer that older GPT-2 files carry and this program has no use for?
static inline int gpt_hf_ignored(const char* name) {
    int l, end = 0;
    if (sscanf(name, "h.%d.attn.bias%n", &l, &end) == 1 && end > 0 && name[end] == '\0') return 1;
    end = 0;
    if (sscanf(name, "h.%d.attn.masked_bias%n", &l, &end) == 1 && end > 0 && name[end] == '\0') return 1;
    return 0;
}

// Checks every tensor's name, shape and dtype against the model c, and fills values (num_params) fp32
// in our order: the tensors converted to fp32, the matrices transposed back, wte's padded rows zero.
// Closes the file in every case.
static inline int gpt_hf_load(GptHfReader* r, const GptConfig* c, float* values) {
    if (r->num_layers != c->num_layers || r->channels != c->channels)
        return gpt_hf_fail(r, "a model of %d layers and %d channels, this run's has %d layers and %d channels",
                           r->num_layers, r->channels, c->num_layers, c->channels);
    if (r->vocab_rows != c->vocab_size)
        return gpt_hf_fail(r, "tensor \"%swte.weight\" has %d rows, GPT-2's vocabulary has %d tokens", r->prefix,
                           r->vocab_rows, c->vocab_size);
    if (r->positions != c->max_seq_len)
        return gpt_hf_fail(r, "tensor \"%swpe.weight\" has %d positions, this program's models have %d", r->prefix,
                           r->positions, c->max_seq_len);
    if (r->num_heads != 0 && r->num_heads != c->num_heads)
        return gpt_hf_fail(r, "config.json beside it has n_head %d, this program's model of %d channels has %d heads",
                           r->num_heads, c->channels, c->num_heads);
    int n = gpt_hf_num_tensors(c);
    GptHfTensor* hf = (GptHfTensor*)calloc((size_t)n, sizeof(GptHfTensor));
    float* scratch = (float*)malloc((size_t)c->vocab_size * c->channels * sizeof(float));  // the largest tensor
    if (!hf || !scratch) {
        free(hf); free(scratch);
        return gpt_hf_fail(r, "out of host memory");
    }
    gpt_hf_tensors(hf, c);
    int rc = 0;
    char s1[160], s2[160];
    // every tensor of the file is expected, or ignored
    size_t plen = strlen(r->prefix);
    for (int i = 0; i < r->st.num_tensors && rc == 0; i++) {
        const char* name = r->st.tensors[i].name;
        if (strcmp(name, "lm_head.weight") == 0) continue;
        int known = strncmp(name, r->prefix, plen) == 0 && gpt_hf_ignored(name + plen);
        for (int k = 0; k < n && !known; k++) known = strncmp(name, r->prefix, plen) == 0 && strcmp(name + plen, hf[k].name) == 0;
        if (!known)
            rc = gpt_hf_fail(r, "tensor \"%s\": not part of GPT-2 in Hugging Face's layout with %d layers (expected "
                             "%swte.weight, %swpe.weight, %sh.0 ... h.%d.*, %sln_f.*)", name, c->num_layers, r->prefix,
                             r->prefix, r->prefix, c->num_layers - 1, r->prefix);
    }
    for (int k = 0; k < n && rc == 0; k++) {
        const SafetensorsTensor* t = gpt_hf_find(r, hf[k].name);
        if (!t) {
            rc = gpt_hf_fail(r, "no tensor \"%s%s\" (a GPT-2 of %d layers has it)", r->prefix, hf[k].name, c->num_layers);
            break;
        }
        int same = t->ndim == hf[k].ndim;
        for (int d = 0; d < t->ndim && same; d++) same = t->shape[d] == hf[k].shape[d];
        if (!same) {
            rc = gpt_hf_fail(r, "tensor \"%s\": shape %s, expected %s (n_embd %d%s)", t->name,
                             safetensors_shape_text(s1, sizeof(s1), t->ndim, t->shape),
                             safetensors_shape_text(s2, sizeof(s2), hf[k].ndim, hf[k].shape), c->channels,
                             hf[k].transpose ? ", Conv1D weights are (in, out)" : "");
            break;
        }
        if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16) {
            rc = gpt_hf_fail(r, "tensor \"%s\": dtype %s, expected F32, BF16 or F16", t->name,
                             safetensors_dtype_name(t->dtype));
            break;
        }
        float* dst = values + hf[k].offset;
        if (safetensors_read_f32(&r->st, t, hf[k].transpose ? scratch : dst) != 0) {
            snprintf(r->err, sizeof(r->err), "%s", r->st.err);
            rc = -1;
            break;
        }
        if (hf[k].transpose) gpt_hf_transpose(dst, scratch, hf[k].cols, hf[k].rows);  // (in, out) -> (out, in)
    }
    if (rc == 0) {  // the padded vocabulary: rows V .. Vp-1 of wte are zero
        memset(values + (size_t)c->vocab_size * c->channels, 0,
               (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels * sizeof(float));
    }
    const SafetensorsTensor* lm = rc == 0 ? safetensors_find(&r->st, "lm_head.weight") : NULL;
    if (lm) {  // an explicit head must be the tied one
        int64_t want[2] = {c->vocab_size, c->channels};
        if (lm->ndim != 2 || lm->shape[0] != want[0] || lm->shape[1] != want[1] ||
            (lm->dtype != ST_F32 && lm->dtype != ST_BF16 && lm->dtype != ST_F16)) {
            rc = gpt_hf_fail(r, "tensor \"lm_head.weight\": shape %s %s, expected %s F32, BF16 or F16 (equal to wte.weight)",
                             safetensors_shape_text(s1, sizeof(s1), lm->ndim, lm->shape), safetensors_dtype_name(lm->dtype),
                             safetensors_shape_text(s2, sizeof(s2), 2, want));
        } else if (safetensors_read_f32(&r->st, lm, scratch) != 0) {
            snprintf(r->err, sizeof(r->err), "%s", r->st.err);
            rc = -1;
        } else if (memcmp(scratch, values, (size_t)c->vocab_size * c->channels * sizeof(float)) != 0) {
            rc = gpt_hf_fail(r, "tensor \"lm_head.weight\" differs from wte.weight: an untied LM head, and this "
                             "program's GPT-2 ties it to the token embedding");
        }
    }
    free(scratch);
    free(hf);
    safetensors_close(&r->st);
    return rc;
}

static inline void gpt_hf_close(GptHfReader* r) { safetensors_close(&r->st); }
