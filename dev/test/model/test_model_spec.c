// test_model_spec.c: the families as data (llmc/model/spec.h), against the layouts written out by hand
// here, tensor by tensor: llm.c's GPT-2, and the Llama-style model in its forward's order (the order in
// which LlamaForCausalLM applies its modules), as the CPU reference (dev/ref/model_ref.h) walks them:
//   - each family's tensors: their order, short names, sizes, offsets and the parameter count, for
//     several configs of each (the named sizes, a small one, GPT-2 with heads that do not divide C, GQA
//     and MHA); GPT-2 d12 at Vp 50304 has
//     llm.c's 124475904 parameters, the Llama-style sizes their documented counts;
//   - weight decay on the matrices only, the roles the model's code asks for;
//   - the init: the same numbers, in the same order, as the families' own init loops (GPT-2:
//     matrices drawn, wte's first V rows only; Llama: norms 1 without a draw, padded rows 0);
//   - the vocabulary padding (a multiple of 128), the named sizes and their lookup by layers;
//   - Hugging Face's names and parts (q|k|v, gate|up) and GPT-2's transposed Conv1D weights;
// and that the comparison fails on a table with two tensors swapped, and on one with a wrong shape.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../../llmc/model/spec.h"
#include "../testing.h"

// --- the layouts by hand ----------------------------------------------------------------------------

static const char* const GPT_NAMES[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                          "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
static const char* const LLAMA_NAMES[9] = {"embed", "attn_norm", "wqkv", "wo", "ffn_norm", "w_gateup", "w_down",
                                           "final_norm", "lm_head"};

static int hand_sizes(const ModelConfig* c, size_t* s) {
    size_t C = c->channels, L = c->num_layers, Vp = c->padded_vocab_size, T = c->max_seq_len;
    if (c->family == MODEL_FAMILY_GPT2) {
        size_t v[16] = {Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
                        L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C};
        memcpy(s, v, sizeof(v));
        return 16;
    }
    size_t F = c->ffn_hidden, hs = C / c->num_heads, QKV = (c->num_heads + 2 * (size_t)c->num_kv_heads) * hs;
    size_t v[9] = {Vp * C, L * C, L * QKV * C, L * C * C, L * C, L * 2 * F * C, L * C * F, C, Vp * C};
    memcpy(s, v, sizeof(v));
    return 9;
}

static int hand_decay(int family, int i) {
    if (family == MODEL_FAMILY_GPT2) return i == 0 || i == 1 || i == 4 || i == 6 || i == 10 || i == 12;
    return !(i == 1 || i == 4 || i == 7);
}

// The families' init loops as they were written for each, one after the other.
static void hand_init(const ModelConfig* c, float* v, uint64_t seed) {
    size_t s[16], off[16], o = 0;
    int n_t = hand_sizes(c, s);
    for (int i = 0; i < n_t; i++) { off[i] = o; o += s[i]; }
    double resid_std = 0.02 / sqrt(2.0 * c->num_layers);
    uint64_t rng = seed;
    for (int i = 0; i < n_t; i++) {
        float* p = v + off[i];
        if (c->family == MODEL_FAMILY_GPT2) {
            size_t n = hand_decay(c->family, i) ? s[i] : 0;
            if (i == 0) n = (size_t)c->vocab_size * c->channels;
            double std = (i == 6 || i == 12) ? resid_std : 0.02;
            int ln_weight = i == 2 || i == 8 || i == 14;
            for (size_t j = 0; j < s[i]; j++) p[j] = j < n ? (float)(std * rand_normal(&rng)) : ln_weight ? 1.0f : 0.0f;
        } else {
            int table = i == 0 || i == 8, norm = i == 1 || i == 4 || i == 7;
            size_t n = table ? (size_t)c->vocab_size * c->channels : s[i];
            double std = (i == 3 || i == 6) ? resid_std : 0.02;
            for (size_t j = 0; j < s[i]; j++) p[j] = norm ? 1.0f : j < n ? (float)(std * rand_normal(&rng)) : 0.0f;
        }
    }
}

// --- the comparison ---------------------------------------------------------------------------------

// Mismatches of spec s's table (for c's family) against the layout by hand; quiet prints no detail.
static int compare(const ModelSpec* s, const ModelConfig* c, int quiet) {
    size_t want[16];
    int n = hand_sizes(c, want), bad = 0;
    const char* const* names = c->family == MODEL_FAMILY_GPT2 ? GPT_NAMES : LLAMA_NAMES;
    if (s->num_tensors != n) {
        if (!quiet) fprintf(stderr, "  %s: %d tensors, expected %d\n", s->name, s->num_tensors, n);
        return 1;
    }
    size_t total = 0, want_total = 0;
    for (int i = 0; i < n; i++) {
        const ModelTensorSpec* t = &s->tensors[i];
        size_t got = (size_t)model_dim(c, t->rows) * (size_t)model_dim(c, t->cols) * (t->per_layer ? c->num_layers : 1);
        if (got != want[i] || strcmp(t->name, names[i]) != 0 || t->decay != hand_decay(c->family, i)) {
            if (!quiet && bad < 4)
                fprintf(stderr, "  %s tensor %d: %s of %zu (decay %d), expected %s of %zu (decay %d)\n", s->name, i,
                        t->name, got, t->decay, names[i], want[i], hand_decay(c->family, i));
            bad++;
        }
        total += got;
        want_total += want[i];
    }
    if (total != want_total) bad++;
    return bad;
}

static ModelConfig small_config(int family, int L, int C, int NH, int NKV, int F, int V, int T) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.family = family; c.num_layers = L; c.channels = C; c.num_heads = NH; c.num_kv_heads = NKV; c.ffn_hidden = F;
    c.vocab_size = V; c.padded_vocab_size = model_padded_vocab(V); c.max_seq_len = T;
    c.rope_theta = family == MODEL_FAMILY_LLAMA ? 10000.0 : 0.0;
    c.norm_eps = 1e-5;
    return c;
}

static void check_config(const ModelConfig* c, const char* what) {
    EXPECT(compare(model_spec(c->family), c, 0) == 0, "%s: the table reproduces today's layout", what);
    size_t size[MODEL_MAX_TENSORS], off[MODEL_MAX_TENSORS], want[16], o = 0;
    size_t n = model_tensor_layout(c, size, off);
    int nt = hand_sizes(c, want), bad = 0;
    for (int i = 0; i < nt; i++) {
        if (size[i] != want[i] || off[i] != o) bad++;
        o += want[i];
    }
    EXPECT(bad == 0 && n == o && model_num_params(c) == o, "%s: sizes and offsets (%d wrong), count %zu, expected %zu",
           what, bad, n, o);
}

static void check_init(const ModelConfig* c, const char* what) {
    size_t n = model_num_params(c);
    float* a = (float*)malloc(n * sizeof(float));
    float* b = (float*)malloc(n * sizeof(float));
    model_init_values(c, a, 1337);
    hand_init(c, b, 1337);
    EXPECT(memcmp(a, b, n * sizeof(float)) == 0, "%s: the init is the family's own, bit for bit", what);
    // the padded rows of the token table are zero, the last drawn row not
    size_t C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    int zero = 1, drawn = 0;
    for (size_t j = V * C; j < Vp * C; j++) zero &= a[j] == 0.0f;
    for (size_t j = (V - 1) * C; j < V * C; j++) drawn |= a[j] != 0.0f;
    EXPECT(zero && drawn, "%s: the token table's rows past V are 0, row V-1 drawn", what);
    free(a);
    free(b);
}

int main(void) {
    // the vocabulary padding: one rule for both families
    EXPECT(model_padded_vocab(50257) == 50304, "GPT-2's 50257 pads to 50304: %d", model_padded_vocab(50257));
    EXPECT(model_padded_vocab(200019) == 200064, "o200k's 200019 pads to 200064: %d", model_padded_vocab(200019));
    EXPECT(model_padded_vocab(100277) == 100352, "cl100k's 100277 pads to 100352: %d", model_padded_vocab(100277));
    EXPECT(model_padded_vocab(128) == 128 && model_padded_vocab(129) == 256, "a multiple of 128 stays, 129 -> 256");

    // GPT-2: the named depths, and a small model of another vocabulary
    const char* depths[5] = {"d6", "d12", "d24", "d36", "d48"};
    const int C_of[5] = {384, 768, 1024, 1280, 1600}, NH_of[5] = {6, 12, 16, 20, 25};
    for (int i = 0; i < 5; i++) {
        ModelConfig c;
        memset(&c, 0, sizeof(c));
        EXPECT(model_config_named(&c, MODEL_FAMILY_GPT2, depths[i], 50257, 1024) == 0, "%s is a GPT-2 size", depths[i]);
        EXPECT(c.channels == C_of[i] && c.num_heads == NH_of[i] && c.num_kv_heads == c.num_heads &&
               c.ffn_hidden == 4 * c.channels && c.padded_vocab_size == 50304 && c.rope_theta == 0.0,
               "%s: C %d NH %d NKV %d F %d Vp %d", depths[i], c.channels, c.num_heads, c.num_kv_heads, c.ffn_hidden,
               c.padded_vocab_size);
        check_config(&c, depths[i]);
        const char* name = model_size_name(&c);
        EXPECT(name && !strcmp(name, depths[i]), "%s found by its layers: %s", depths[i], name ? name : "NULL");
    }
    ModelConfig d12;
    memset(&d12, 0, sizeof(d12));
    model_config_gpt2(&d12, 12, 50257, 1024);
    EXPECT(model_num_params(&d12) == 124475904, "GPT-2 d12: llm.c's 124475904 parameters, got %zu",
           model_num_params(&d12));
    EXPECT(model_config_gpt2(&d12, 7, 50257, 1024) != 0, "depth 7 is not a GPT-2 size");
    ModelConfig g = small_config(MODEL_FAMILY_GPT2, 2, 64, 4, 4, 256, 100, 32);
    check_config(&g, "GPT-2 L2 C64 V100");
    check_init(&g, "GPT-2 L2 C64 V100");
    // GPT-2's shapes do not depend on its heads: 3 heads of 16 channels (as a config.json's n_head may say)
    ModelConfig odd = small_config(MODEL_FAMILY_GPT2, 1, 16, 3, 3, 64, 10, 4);
    check_config(&odd, "GPT-2 C16 NH3");

    // the Llama-style sizes, their documented counts at V = 200019, and small GQA and MHA models
    const char* sizes[4] = {"llama-30m", "llama-125m", "llama-350m", "llama-1b"};
    const double layers_m[4] = {30.2, 123.9, 357.2, 992.0}, all_m[4] = {235.0, 431.2, 869.4, 1811.5};
    for (int i = 0; i < 4; i++) {
        ModelConfig c;
        memset(&c, 0, sizeof(c));
        EXPECT(model_config_named(&c, MODEL_FAMILY_LLAMA, sizes[i], 200019, 4096) == 0, "%s is a size", sizes[i]);
        check_config(&c, sizes[i]);
        size_t n = model_num_params(&c), tables = 2 * (size_t)c.padded_vocab_size * c.channels;
        EXPECT(fabs((n - tables) / 1e6 - layers_m[i]) < 0.05 && fabs(n / 1e6 - all_m[i]) < 0.05,
               "%s: %.1fM in the layers, %.1fM in all (documented %.1fM, %.1fM)", sizes[i], (n - tables) / 1e6,
               n / 1e6, layers_m[i], all_m[i]);
        EXPECT(c.rope_theta == 500000.0 && c.norm_eps == 1e-5, "%s: Llama 3's theta and eps", sizes[i]);
        const char* name = model_size_name(&c);
        EXPECT(name && !strcmp(name, sizes[i]), "%s found by its layers: %s", sizes[i], name ? name : "NULL");
        c.ffn_hidden += 8;
        EXPECT(model_size_name(&c) == NULL, "%s with another FFN width has no name", sizes[i]);
    }
    EXPECT(model_config_named(&g, MODEL_FAMILY_LLAMA, "d6", 200019, 4096) != 0, "d6 is not a Llama-style size");
    ModelConfig q = small_config(MODEL_FAMILY_LLAMA, 3, 128, 4, 2, 352, 1000, 64);
    check_config(&q, "Llama L3 C128 NH4 NKV2");
    check_init(&q, "Llama L3 C128 NH4 NKV2");
    ModelConfig mha = small_config(MODEL_FAMILY_LLAMA, 1, 64, 2, 2, 176, 300, 16);
    check_config(&mha, "Llama L1 C64 MHA");
    check_init(&mha, "Llama L1 C64 MHA");
    EXPECT(model_qkv_dim(&q) == 256, "qkv rows of NH 4, NKV 2, hs 32: %lld", (long long)model_qkv_dim(&q));
    ModelConfig big = q;
    big.channels = 1 << 30; big.num_heads = 1 << 29; big.num_kv_heads = 1 << 29;
    EXPECT(model_qkv_dim(&big) == (int64_t)3 << 30, "qkv rows near 2^30 are exact: %lld", (long long)model_qkv_dim(&big));

    // the block's choices and the roles the model's code asks for
    const ModelSpec* gs = model_spec(MODEL_FAMILY_GPT2);
    const ModelSpec* ls = model_spec(MODEL_FAMILY_LLAMA);
    EXPECT(gs->norm == MODEL_NORM_LAYERNORM && gs->positions == MODEL_POS_LEARNED && gs->mlp == MODEL_MLP_GELU &&
           gs->attn_bias && gs->mlp_bias && gs->tied_head && !gs->header_sizes && gs->max_seq_len == 1024,
           "GPT-2's block: LayerNorm, learned positions, GELU, biases, tied head, context 1024");
    EXPECT(ls->norm == MODEL_NORM_RMSNORM && ls->positions == MODEL_POS_ROPE && ls->mlp == MODEL_MLP_SWIGLU &&
           !ls->attn_bias && !ls->mlp_bias && !ls->tied_head && ls->header_sizes && ls->max_seq_len == 4096,
           "Llama's block: RMSNorm, RoPE, SwiGLU, no biases, untied head, context 4096");
    EXPECT(model_tensor_index(gs, MODEL_ROLE_LM_HEAD) == -1 && model_tensor_index(gs, MODEL_ROLE_POS_EMBED) == 1 &&
           model_tensor_index(gs, MODEL_ROLE_FCPROJ_B) == 13, "GPT-2's roles: no lm_head, wpe 1, fcprojb 13");
    EXPECT(model_tensor_index(ls, MODEL_ROLE_LM_HEAD) == 8 && model_tensor_index(ls, MODEL_ROLE_POS_EMBED) == -1 &&
           model_tensor_index(ls, MODEL_ROLE_QKV_B) == -1 && model_tensor_index(ls, MODEL_ROLE_FC_W) == 5,
           "Llama's roles: lm_head 8, no wpe, no biases, w_gateup 5");
    EXPECT(model_spec(2) == NULL && model_spec(-1) == NULL, "no third family");
    for (int f = 0; f < MODEL_NUM_FAMILIES; f++) {  // each role at most once
        const ModelSpec* s = model_spec(f);
        int seen[MODEL_NUM_ROLES] = {0}, twice = 0;
        for (int i = 0; i < s->num_tensors; i++) twice |= seen[s->tensors[i].role]++;
        EXPECT(!twice && s->num_tensors <= MODEL_MAX_TENSORS, "%s: each role once, at most %d tensors", s->name,
               MODEL_MAX_TENSORS);
    }

    // Hugging Face's names: GPT-2's Conv1D weights transposed, Llama's stacked projections in parts
    const ModelTensorSpec* qkvw = &gs->tensors[4];
    EXPECT(!strcmp(qkvw->hf_parts[0].name, "h.%d.attn.c_attn.weight") && qkvw->hf_transpose && qkvw->hf_num_parts == 1,
           "GPT-2's qkvw is h.{l}.attn.c_attn.weight, transposed");
    int transposed = 0;
    for (int i = 0; i < gs->num_tensors; i++) transposed += gs->tensors[i].hf_transpose;
    EXPECT(transposed == 4, "GPT-2: the four matrices of a layer are stored transposed (%d)", transposed);
    const ModelTensorSpec* wqkv = &ls->tensors[2];
    EXPECT(wqkv->hf_num_parts == 3 && !strcmp(wqkv->hf_parts[1].name, "model.layers.%d.self_attn.k_proj.weight") &&
           wqkv->hf_parts[0].rows == MODEL_DIM_Q && wqkv->hf_parts[2].rows == MODEL_DIM_KV,
           "Llama's wqkv is q_proj (NH hs) | k_proj | v_proj (NKV hs)");
    EXPECT(model_dim(&q, MODEL_DIM_Q) + 2 * model_dim(&q, MODEL_DIM_KV) == model_dim(&q, MODEL_DIM_QKV) &&
           2 * model_dim(&q, MODEL_DIM_F) == model_dim(&q, MODEL_DIM_UP), "the parts add up to their tensors' rows");
    EXPECT(!strcmp(ls->tensors[5].hf_parts[0].name, "model.layers.%d.mlp.gate_proj.weight") &&
           !strcmp(ls->tensors[5].hf_parts[1].name, "model.layers.%d.mlp.up_proj.weight"),
           "Llama's w_gateup is gate_proj | up_proj");

    // the comparison can fail: two tensors swapped, a wrong shape
    ModelTensorSpec broken[MODEL_MAX_TENSORS];
    memcpy(broken, gs->tensors, gs->num_tensors * sizeof(ModelTensorSpec));
    ModelSpec bs = *gs;
    bs.tensors = broken;
    ModelTensorSpec tmp = broken[2]; broken[2] = broken[3]; broken[3] = tmp;
    EXPECT(compare(&bs, &g, 1) > 0, "a GPT-2 table with ln1w and ln1b swapped is caught");
    memcpy(broken, ls->tensors, ls->num_tensors * sizeof(ModelTensorSpec));
    bs = *ls;
    bs.tensors = broken;
    EXPECT(compare(&bs, &q, 1) == 0, "a faithful copy of the Llama table passes");
    broken[6].cols = MODEL_DIM_UP;
    EXPECT(compare(&bs, &q, 1) > 0, "a Llama table with w_down (C, 2F) is caught");
    return test_summary("test_model_spec");
}
