// encoder.cuh: the input embedding of GPT-2, out (B, T, C) = wte[token] + wpe[t], and its backward.
// Without a position table (wpe NULL: the Llama-style model, whose positions enter through RoPE) it is
// the token embedding alone, out = wte[token], copied bit for bit.
//
// Forward: one thread per 8 channels (one 16-byte load of each table, one store), the sum in fp32,
// rounded once to bf16.
// Backward: dwte and dwpe are fp32 gradients (the tied LM head accumulates its fp32 dW into the same
// wte gradient). Bitwise deterministic with no atomics: the positions are grouped by token ON THE HOST
// (the batch is there anyway, coming from the data loader) with a stable counting sort, so every row of
// dwte is one block that sums its positions in ascending order; dwpe sums over b in order. The host
// side (encoder_bucket) fills an EncoderBuckets in pinned memory; the caller copies it to the device.
#pragma once
#include "../core/cuda_common.cuh"

// The positions of a batch grouped by token. Host and device copies have the same layout.
typedef struct {
    int n_unique;     // distinct tokens in the batch
    int* tokens;      // (max_BT,) distinct token ids, ascending; first n_unique used
    int* offsets;     // (max_BT + 1,) positions of tokens[u] are pos[offsets[u] .. offsets[u+1])
    int* pos;         // (max_BT,) flat positions b*T + t, grouped by token, ascending within a group
} EncoderBuckets;

// --- kernels ---------------------------------------------------------------------------------

__global__ void encoder_forward_kernel(bf16* out, const int* inputs, const bf16* wte, const bf16* wpe,
                                       int BT, int T, int C) {
    int C8 = C / 8;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * C8) return;
    int row = (int)(i / C8), c = (int)(i % C8) * 8, t = row % T;
    Bf16x8 we = load128(wte + (size_t)inputs[row] * C + c);
    if (!wpe) {  // no position table: the row itself
        store128(out + (size_t)row * C + c, we);
        return;
    }
    Bf16x8 pe = load128(wpe + (size_t)t * C + c);
    float o[8];
    for (int k = 0; k < 8; k++) o[k] = bf16x8_get(we, k) + bf16x8_get(pe, k);
    store128(out + (size_t)row * C + c, bf16x8_from_floats(o));
}

// One block per distinct token u; threads over channels. dwte[tokens[u]] += Σ dout[pos] in position order.
__global__ void encoder_backward_wte_kernel(float* dwte, const bf16* dout, const int* tokens, const int* offsets,
                                            const int* pos, int C) {
    int u = blockIdx.x;
    int p0 = offsets[u], p1 = offsets[u + 1];
    float* d = dwte + (size_t)tokens[u] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int p = p0; p < p1; p++) acc += __bfloat162float(dout[(size_t)pos[p] * C + c]);
        d[c] += acc;
    }
}

// One thread per (t, c): dwpe[t, c] += Σ_b dout[b, t, c], b ascending.
__global__ void encoder_backward_wpe_kernel(float* dwpe, const bf16* dout, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += __bfloat162float(dout[(size_t)b * T * C + i]);
    dwpe[i] += acc;
}

// --- launchers -------------------------------------------------------------------------------

// out (B, T, C) bf16; inputs (B, T) int32 on the device; wte (Vp, C), wpe (maxT, C) bf16 or NULL (no
// position table). C % 8 == 0.
static inline void encoder_forward(bf16* out, const int* inputs, const bf16* wte, const bf16* wpe,
                                   int B, int T, int C, const GpuContext* ctx) {
    size_t n = (size_t)B * T * (C / 8);
    int threads = 256;
    encoder_forward_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, ctx->stream>>>(out, inputs, wte, wpe,
                                                                                              B * T, T, C);
    cuda_check_launch();
    profile_mark(ctx->prof, "encoder forward", ctx->stream);
}

// Host: groups the positions of inputs (BT,) by token with a stable counting sort. count (V,) is host
// scratch (zero on entry, left zero on return); b receives the buckets (host memory).
static inline void encoder_bucket(EncoderBuckets* b, int* count, const int* inputs, int BT, int V) {
    for (int i = 0; i < BT; i++) count[inputs[i]]++;
    // a pass over the vocabulary (50k ints, tens of microseconds) gives the groups in token order
    int nu = 0, next = 0;
    for (int tok = 0; tok < V; tok++) {
        if (count[tok] == 0) continue;
        b->tokens[nu] = tok;
        b->offsets[nu] = next;
        next += count[tok];
        count[tok] = b->offsets[nu];  // from here on: the next free slot of the token's group
        nu++;
    }
    b->offsets[nu] = BT;
    for (int i = 0; i < BT; i++) b->pos[count[inputs[i]]++] = i;
    for (int u = 0; u < nu; u++) count[b->tokens[u]] = 0;
    b->n_unique = nu;
}

// dwte (Vp, C), dwpe (maxT, C) fp32 accumulated (+=) from dout (B, T, C) bf16; buckets on the device
// (n_unique from the host copy). dwpe NULL: no position table.
static inline void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const EncoderBuckets* dev_buckets,
                                    int n_unique, int B, int T, int C, const GpuContext* ctx) {
    cudaStream_t stream = ctx->stream;
    if (n_unique > 0) {
        encoder_backward_wte_kernel<<<n_unique, C < 1024 ? C : 1024, 0, stream>>>(
            dwte, dout, dev_buckets->tokens, dev_buckets->offsets, dev_buckets->pos, C);
        cuda_check_launch();
    }
    if (dwpe) {
        size_t n = (size_t)T * C;
        encoder_backward_wpe_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
        cuda_check_launch();
    }
    profile_mark(ctx->prof, "encoder backward", stream);
}
