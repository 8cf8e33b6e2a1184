// attention_kernels.cuh: the flash kernels behind attention_check.cuh's AttFwdFn / AttBwdFn, without
// RoPE: the mma.sync ones (llmc/flash_attention{,_backward}.cuh) and the sm_90a ones
// (llmc/flash_attention_sm90{,_backward}.cuh; call only where flash_sm90_available()). Shared by
// dev/test/attention/test_attention{,_gqa}.cu and dev/cuda/attention.cu.
#pragma once
#include "../../llmc/attention/flash_attention_sm90_backward.cuh"  // and the forward
#include "attention_check.cuh"

static void att_flash_forward(void*, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                              cudaStream_t st) {
    flash_attention_forward(out, lse, qkv, NULL, B, T, C, NH, NKV, st);
}
static void att_flash_backward(void*, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                               const float* lse, int B, int T, int C, int NH, int NKV, cudaStream_t st) {
    flash_attention_backward(dqkv, D, dout, out, qkv, NULL, lse, B, T, C, NH, NKV, st);
}
static void att_sm90_forward(void*, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                             cudaStream_t st) {
    flash_sm90_forward(out, lse, qkv, B, T, C, NH, NKV, st);
}
static void att_sm90_backward(void*, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                              const float* lse, int B, int T, int C, int NH, int NKV, cudaStream_t st) {
    flash_sm90_backward(dqkv, D, dout, out, qkv, NULL, lse, NULL, B, T, C, NH, NKV, st);
}
