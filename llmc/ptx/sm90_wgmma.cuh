// sm90_wgmma.cuh: the Hopper (sm_90a) pieces a tensor-core GEMM is built from: mbarriers, the bulk tensor
// copy engine (TMA) with its tensor maps, the shared-memory matrix descriptors of wgmma, the m64n256k16
// bf16 warpgroup MMA, and the warp-specialised K loop over a ring of stages that the GEMM kernels share
// (dev/cuda/wgmma_gemm.cu: a plain GEMM, checked against cuBLASLt; llmc/head/fused_lce_sm90.cuh: the LM
// head's forward with the softmax statistics in the epilogue, and its gradient; dev/cuda/wgmma_gemm.cuh: an
// accumulating GEMM, which dev/cuda/fused_lce.cu runs for the head's dx and dW).
//
// Layout contract (what makes TMA, the descriptors and wgmma agree): a tile of R rows x 64 bf16 (128
// bytes per row, K contiguous) is copied with 128-byte swizzling into a 1024-byte-aligned buffer; the
// tensor cores then read it through a descriptor in "128-byte swizzle, K-major" mode whose stride byte
// offset is 1024 (eight 128-byte rows form one swizzle atom) and whose start address moves by 32 bytes
// per 16-column K step.
#pragma once
#include <stdint.h>
#include <cuda.h>            // CUtensorMap and its enums (the encoder is fetched at run time: no -lcuda)
#include <cudaTypedefs.h>
#include "../core/cuda_common.cuh"

// Compiled only for sm_90a (the Makefile builds Hopper with -gencode arch=compute_90a and defines
// LLMC_SM90A for the host code, which picks these kernels only then); other targets get empty bodies.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_DEVICE_CODE 1
#endif

// --- device --------------------------------------------------------------------------------------
#if !defined(__CUDA_ARCH__) || defined(WG_DEVICE_CODE)

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
// makes the initialised barriers visible to the copy engine and the other threads (then a __syncthreads)
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// one arrival, and `bytes` more bytes the phase waits for (the copies' complete_tx count them down)
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
// waits until the phase of parity `parity` has completed
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

// a box of the 2-D tensor `map` at (inner c0, outer c1) into shared memory at dst; completes on `bar`.
// Out-of-range elements arrive as zeros.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// the other direction: a box of shared memory at src (laid out as tma_load_2d would have written it)
// into the 2-D tensor `map` at (c0, c1), clipped to the tensor's bounds; asynchronous, in bulk groups
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int c0, int c1, uint32_t src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(src) : "memory");
}
// the same, added into the tensor (each element once, in L2: one fp32 rounding, as D + acc in a GEMM's
// epilogue with beta = 1)
__device__ __forceinline__ void tma_add_2d(const CUtensorMap* map, int c0, int c1, uint32_t src) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(src) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// waits until this thread's committed bulk stores have read their shared memory (may be reused)
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// the same, but the newest group may still be reading
__device__ __forceinline__ void bulk_wait_read_1() { asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); }
// waits until they are complete
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// orders this thread's shared-memory writes before later bulk copies (the async proxy) read them
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// four 8 x 8 bf16 matrices from registers into shared memory: lane l holds two columns of row l/4 of
// each (r[i] for matrix i, as in an mma accumulator) and gives the address of row l % 8 of matrix l / 8
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// descriptor of a K-major bf16 tile with 128-byte swizzling (see the layout contract above)
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr) {
    uint64_t d = (uint64_t)((smem_addr & 0x3FFFF) >> 4);  // start address, 16-byte units
    d |= (uint64_t)1 << 16;                                // leading byte offset: unused in this mode
    d |= (uint64_t)(1024 >> 4) << 32;                      // stride byte offset: one 8-row swizzle atom
    d |= (uint64_t)1 << 62;                                // 128-byte swizzle
    return d;
}

// descriptor of an MN-major bf16 tile with 128-byte swizzling: TMA boxes of 64 K rows x 64 MN elements
// (128 bytes a row) side by side, 8 KiB apart: the leading byte offset steps from one box (64 MN
// elements) to the next, the stride byte offset from 8 K rows (one swizzle atom) to the next; the start
// address moves by 16 rows (2048 bytes) per 16-deep K step. For A stored (K, M) or B stored (K, N)
// row-major: W_v in the head's dx GEMM G · W_v, Gᵀ and x in its dW GEMM Gᵀ · x (dev/cuda/wgmma_gemm.cu
// checks them against cuBLASLt).
__device__ __forceinline__ uint64_t wgmma_desc_mn(uint32_t smem_addr) {
    uint64_t d = (uint64_t)((smem_addr & 0x3FFFF) >> 4);
    d |= (uint64_t)(8192 >> 4) << 16;  // leading byte offset: the next box of 64 MN elements
    d |= (uint64_t)(1024 >> 4) << 32;  // stride byte offset: the next 8 K rows
    d |= (uint64_t)1 << 62;            // 128-byte swizzle
    return d;
}

// Programmatic dependent launch (kernels launched by launch_pdl below): pdl_launch_dependents lets the
// next kernel in the stream be scheduled once every block of this one has called it (its blocks take SMs
// as this kernel's blocks leave them, and run up to their pdl_wait); pdl_wait waits until the previous
// kernel has completed and its writes are visible (at once for a kernel launched without launch_pdl).
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}

// registers per thread for the warpgroup's role (sm_90a; needs __launch_bounds__(threads, 1))
template <int R> __device__ __forceinline__ void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R)); }
template <int R> __device__ __forceinline__ void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R)); }

// D (64 x 256 per warpgroup, fp32, 128 registers per thread) (+)= A (64 x 16) · B (256 x 16)ᵀ, both bf16
// in shared memory behind descriptors, each K-major (MN_A, MN_B = 0: wgmma_desc) or MN-major (1,
// wgmma_desc_mn); accumulate: 0 overwrites D, 1 adds to it.
template <int MN_A = 0, int MN_B = 0>
__device__ __forceinline__ void wgmma_m64n256k16(float d[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(MN_A), "n"(MN_B));
}

// the same for 192 and 128 columns of B (96 and 64 registers), and the one of the three for a tile of BN
// columns (dev/cuda/wgmma_gemm.cuh picks BN per GEMM shape)
template <int MN_A = 0, int MN_B = 0>
__device__ __forceinline__ void wgmma_m64n192k16(float d[96], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, %99, %100;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(MN_A), "n"(MN_B));
}
template <int MN_A = 0, int MN_B = 0>
__device__ __forceinline__ void wgmma_m64n128k16(float d[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(MN_A), "n"(MN_B));
}
template <int BN, int MN_A = 0, int MN_B = 0>
__device__ __forceinline__ void wgmma_m64k16(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
    static_assert(BN == 256 || BN == 192 || BN == 128, "wgmma_m64k16: BN is 128, 192 or 256");
    if constexpr (BN == 256) wgmma_m64n256k16<MN_A, MN_B>(d, desc_a, desc_b, accumulate);
    else if constexpr (BN == 192) wgmma_m64n192k16<MN_A, MN_B>(d, desc_a, desc_b, accumulate);
    else wgmma_m64n128k16<MN_A, MN_B>(d, desc_a, desc_b, accumulate);
}

#endif  // device code

// --- the ring and the K loop that every GEMM kernel on these pieces shares ----------------------
// A block of 384 threads: warpgroup 0 produces, one thread issuing the TMA copies of each K step's A
// tile (rows x 64) and B tile (256 x 64) into a ring of stages, refilling a stage once its consumers
// have released it; warpgroups 1 and 2 consume, each multiplying 64 rows of A by all of B, four
// m64n256k16 wgmmas per stage, fp32 accumulators in registers (128 per thread). Two shapes of ring:
//   cooperative (WG_COOP_*): 4 stages of 128 rows of A; both consumers work on one 128 x 256 tile,
//     each on its half of the stage's A (a_off = 64·128 bytes for the second).
//   ping-pong (WG_PP_*): 4 stages of 64 rows of A; each consumer owns a whole 64 x 256 tile and the
//     two take turns: one runs its K loop on the tensor cores while the other runs its epilogue
//     (wg_turn_wait / wg_turn_pass order them), so an epilogue costs no tensor-core time when it is
//     shorter than a K loop. Each stage belongs to one consumer.
// A running stage counter `it`, kept alike by producer and consumers (a ping-pong consumer skips the
// other's stages), carries the ring's position and the barriers' phases from tile to tile, so a block
// walks many tiles without draining the pipeline.
#define WG_BM 128
#define WG_BN 256
#define WG_BK 64
#define WG_THREADS 384
#define WG_B_BYTES (WG_BN * WG_BK * 2)
#define WG_COOP_STAGES 4
#define WG_COOP_STAGE_BYTES (WG_BM * WG_BK * 2 + WG_B_BYTES)
#define WG_COOP_SMEM (WG_COOP_STAGES * WG_COOP_STAGE_BYTES + 1024 + 16 * WG_COOP_STAGES)  // + alignment, barriers
#define WG_PP_STAGES 4
#define WG_PP_STAGE_BYTES (64 * WG_BK * 2 + WG_B_BYTES)

typedef struct {
    uint32_t base, full, empty;  // shared addresses: the stages, then the barriers
    int stages, stage_bytes, a_bytes;  // a stage: A's rows x 64, then B's b_rows x 64 (bf16)
} WgRing;

#if !defined(__CUDA_ARCH__) || defined(WG_DEVICE_CODE)

// every thread calls it (it ends in a barrier). a_rows: rows of A per stage (128 cooperative, 64
// ping-pong); releases: consumers that release each stage (2 cooperative, 1 ping-pong); b_rows: rows
// (columns of the tile) of B per stage.
__device__ __forceinline__ WgRing wg_ring_init(unsigned char* smem_raw, int stages, int a_rows, int releases,
                                               int b_rows = WG_BN) {
    WgRing r;
    r.stages = stages;
    r.a_bytes = a_rows * WG_BK * 2;
    r.stage_bytes = r.a_bytes + b_rows * WG_BK * 2;
    r.base = (smem_u32(smem_raw) + 1023) & ~1023u;  // swizzled tiles need 1024-byte alignment
    r.full = r.base + stages * r.stage_bytes;
    r.empty = r.full + 8 * stages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) { mbar_init(r.full + 8 * s, 1); mbar_init(r.empty + 8 * s, releases); }
        mbar_fence_init();
    }
    __syncthreads();
    return r;
}

// producer (one thread): the K steps of the tile at rows m0 of A, rows n0 of B (A's tensor map has
// boxes of the ring's rows of A). MN-major operands are stored (K, M) or (K, N), their maps in boxes of
// 64 K rows x 64 columns: MN_A, the tile's A is columns m0 .. of A's map, rows/64 boxes side by side;
// MN_B, its B is columns n0 .. n0 + BN - 1 of B's, BN/64 boxes (K-major B: one box of BN rows).
template <int MN_A = 0, int MN_B = 0, int BN = WG_BN>
__device__ __forceinline__ void wg_produce(const WgRing& r, const CUtensorMap* ta, const CUtensorMap* tb, int m0,
                                           int n0, int kt_count, int& it) {
    for (int kt = 0; kt < kt_count; kt++, it++) {
        int s = it % r.stages;
        if (it >= r.stages) mbar_wait(r.empty + 8 * s, (it / r.stages - 1) & 1);
        uint32_t a = r.base + s * r.stage_bytes;
        mbar_arrive_expect_tx(r.full + 8 * s, r.a_bytes + BN * WG_BK * 2);  // a stage may hold more B than BN
        if (MN_A)
            for (int j = 0; j < r.a_bytes / 8192; j++)
                tma_load_2d(a + j * 8192, ta, m0 + 64 * j, kt * WG_BK, r.full + 8 * s);
        else
            tma_load_2d(a, ta, kt * WG_BK, m0, r.full + 8 * s);
        if (MN_B)
            for (int j = 0; j < BN / 64; j++)
                tma_load_2d(a + r.a_bytes + j * 8192, tb, n0 + 64 * j, kt * WG_BK, r.full + 8 * s);
        else
            tma_load_2d(a + r.a_bytes, tb, kt * WG_BK, n0, r.full + 8 * s);
    }
}

// a consumer warpgroup: d (BN/2 registers) = (64 rows of the stages' A from byte a_off) · Bᵀ over the
// tile's K steps (MN_A, MN_B, BN as in wg_produce; with MN_A a_off is a multiple of 8192, one box of 64
// rows of A).
// One stage's wgmmas stay in flight while the next stage's are issued (wait<1>), so the tensor cores do
// not idle between stages; a stage is released once its wgmmas are done (one stage later than with
// wait<0>: 5-6% faster head at C >= 1600 on the H200, no change at C = 768).
template <int MN_A = 0, int MN_B = 0, int BN = WG_BN>
__device__ __forceinline__ void wg_consume(const WgRing& r, float* d, int a_off, int kt_count, int& it) {
    for (int kt = 0; kt < kt_count; kt++, it++) {
        int s = it % r.stages;
        mbar_wait(r.full + 8 * s, (it / r.stages) & 1);
        uint32_t a = r.base + s * r.stage_bytes + a_off, b = r.base + s * r.stage_bytes + r.a_bytes;
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++) {
            uint64_t da = MN_A ? wgmma_desc_mn(a + kk * 2048) : wgmma_desc(a + kk * 32);
            uint64_t db = MN_B ? wgmma_desc_mn(b + kk * 2048) : wgmma_desc(b + kk * 32);  // 16 K rows, or columns
            wgmma_m64k16<BN, MN_A, MN_B>(d, da, db, kt > 0 || kk > 0);
        }
        wgmma_commit();
        wgmma_wait<1>();  // the previous stage's group is done
        if (kt > 0 && threadIdx.x % 128 == 0) mbar_arrive(r.empty + 8 * ((it - 1) % r.stages));
    }
    wgmma_wait<0>();
    if (threadIdx.x % 128 == 0) mbar_arrive(r.empty + 8 * ((it - 1) % r.stages));
}

// Ping-pong turns, on named barriers 1 and 2 (consumer c waits on 1 + c): before each K loop but its
// first, consumer c waits for the other to pass the turn; after a K loop it passes the turn when the
// other has a tile left (so every wait has its pass and no barrier is left half-arrived). A consumer
// must not wait on a stage's barrier before the stage's previous use was waited for, which the turns
// also guarantee.
__device__ __forceinline__ void wg_turn_wait(int c) { asm volatile("bar.sync %0, 256;" :: "r"(1 + c) : "memory"); }
__device__ __forceinline__ void wg_turn_pass(int c) { asm volatile("bar.arrive %0, 256;" :: "r"(2 - c) : "memory"); }
#endif  // device code

// --- host ----------------------------------------------------------------------------------------

// kernel<<<grid, threads, smem, stream>>>(args...) as a programmatic dependent launch (see pdl_wait): it
// may start while the previous kernel in the stream is finishing, which hides the launch and the
// kernel's set-up between the head's back-to-back GEMM-sized kernels.
template <typename... Params, typename... Args>
static inline void launch_pdl(void (*kernel)(Params...), int grid, int threads, size_t smem, cudaStream_t stream,
                              const Args&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    cuda_check(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// A tensor map for a row-major matrix (rows, cols) of bf16 or fp32 (elem_bytes 2 or 4), row stride ld
// elements, in boxes of box_rows x (128 bytes of columns) with 128-byte swizzling. The pointer and ld
// must be 16-byte aligned. The driver's encoder is looked up on every call (a lookup in the driver's
// table of entry points, small next to the launch the map is for): no process-wide cache of it.
static inline CUtensorMap tma_map_2d(const void* p, int elem_bytes, int rows, int cols, int ld, int box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    cudaDriverEntryPointQueryResult q;
    cuda_check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&encode, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !encode)
        check_fail("tma_map_2d: the driver has no cuTensorMapEncodeTiled", "a CUDA 12+ driver is needed");
    CUtensorMap map;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * elem_bytes};
    cuuint32_t box[2] = {(cuuint32_t)(128 / elem_bytes), (cuuint32_t)box_rows};
    cuuint32_t estr[2] = {1, 1};
    CUtensorMapDataType type = elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    CUresult r = encode(&map, type, 2, (void*)p, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        check_failf("the pointer and the row stride must be 16-byte aligned", "cuTensorMapEncodeTiled failed (%d) for a "
                    "%d x %d %s matrix, ld %d, box %d x %d", (int)r, rows, cols, elem_bytes == 4 ? "fp32" : "bf16", ld,
                    box_rows, 128 / elem_bytes);
    return map;
}

// bf16 in boxes of box_rows x 64 columns
static inline CUtensorMap tma_map_bf16(const bf16* p, int rows, int cols, int ld, int box_rows) {
    return tma_map_2d(p, sizeof(bf16), rows, cols, ld, box_rows);
}

// fp32 in boxes of box_rows x 32 columns (e.g. a GEMM's accumulating output, added into by tma_add_2d)
static inline CUtensorMap tma_map_f32(const float* p, int rows, int cols, int ld, int box_rows) {
    return tma_map_2d(p, sizeof(float), rows, cols, ld, box_rows);
}
