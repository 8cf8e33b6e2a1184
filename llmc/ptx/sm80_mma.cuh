// sm80_mma.cuh: the PTX building blocks of the tensor-core kernels (sm_80+), one copy for all of them:
// 16-byte cp.async copies into shared memory, ldmatrix fragment loads, and the bf16 mma.sync
// m16n8k16 with fp32 accumulators. Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"):
//   A (16x16, row-major) a[0..3]: rows lane/4 and lane/4+8, columns 2·(lane%4)+{0,1} and +8;
//   B (16x8, column-major) b0, b1: rows (k) 2·(lane%4)+{0,1} and +8, column lane/4;
//   C/D (16x8) d[0..3]: row lane/4 (d0, d1) and lane/4+8 (d2, d3), columns 2·(lane%4)+{0,1}.
#pragma once
#include "../core/cuda_common.cuh"

// --- device helpers --------------------------------------------------------------------------

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 16 : 0;  // 0 source bytes: the 16 smem bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int n> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(n)); }

// ldmatrix x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i; r[i] is that matrix's fragment
// (row lane/4, columns 2·(lane%4) +0/1); with .trans, (rows 2·(lane%4) +0/1, column lane/4).
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const bf16* p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const bf16* p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// d (16x8 fp32) += a (16x16 bf16) · b (16x8 bf16, as b0 = k 0..7, b1 = k 8..15)
__device__ __forceinline__ void mma_bf16_16816(float* d, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
