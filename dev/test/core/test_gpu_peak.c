// test_gpu_peak.c: the MFU's denominator (llmc/core/gpu_peak.h), on the CPU, for the names the CUDA driver
// gives these GPUs: each variant of the H100 gets its own datasheet figure (the PCIe and NVL cards are
// not the SXM one, so their entries must win over the plain "H100"), the H200 and GH200 the SXM
// figure, the A100 its own; a GPU not in the table gets 0 from the names, and the clock-based
// estimate for Ampere and Hopper (132 SMs at 1.98 GHz: 1070 TFLOP/s), 0 for other architectures.
#include <math.h>
#include "../../../llmc/core/gpu_peak.h"
#include "../testing.h"

int main(void) {
    struct { const char* name; double tflops; } cases[] = {
        {"NVIDIA H100 80GB HBM3", 989.4}, {"NVIDIA H100 PCIe", 756.0}, {"NVIDIA H100 NVL", 835.0},
        {"NVIDIA H200", 989.4}, {"NVIDIA GH200 480GB", 989.4}, {"NVIDIA A100-SXM4-80GB", 312.0},
        {"NVIDIA A100-PCIE-40GB", 312.0}, {"NVIDIA GeForce RTX 4090", 0.0}, {"NVIDIA L40S", 0.0}, {"", 0.0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double got = gpu_peak_tflops_by_name(cases[i].name);
        EXPECT(got == cases[i].tflops, "\"%s\": %g TFLOP/s, expected %g", cases[i].name, got, cases[i].tflops);
    }
    double h200 = gpu_peak_flops_by_clock(9, 0, 132, 1980000);
    EXPECT(fabs(h200 - 132.0 * 4096 * 1.98e9) < 1e3, "Hopper by the clock: %g FLOP/s", h200);
    EXPECT(h200 > 989.4e12 && h200 < 1.1e15, "Hopper by the clock at its boost clock, above the datasheet: %g", h200);
    double a100 = gpu_peak_flops_by_clock(8, 0, 108, 1410000);
    EXPECT(fabs(a100 / 1e12 - 311.9) < 0.1, "A100 by the clock at 1.41 GHz: %g TFLOP/s, the datasheet says 312",
           a100 / 1e12);
    EXPECT(gpu_peak_flops_by_clock(8, 9, 128, 2520000) == 0.0, "Ada (8.9): unknown, 0");
    EXPECT(gpu_peak_flops_by_clock(7, 0, 80, 1530000) == 0.0, "Volta (7.0): unknown, 0");
    return test_summary("test_gpu_peak");
}
