// test_llama_ref_float.c: the float build of dev/ref/llama_ref.h (the one CUDA tests will use) against the
// double build, through the golden values of llama_ref_fixture.h (which test_llama_ref checks in double).
// The fixture's parameters are exactly representable in float, so the differences are the float build's
// own rounding: matmuls accumulate in float, norms' statistics, RoPE angles and softmax sums in double.
// Compared: the loss, and the gradient norm of each of the nine tensors (each backward formula shows in
// at least one of them). Tolerance 1e-5 relative, as for GPT-2's float build; this one reaches ~1e-7.
#include <math.h>
#include <stdlib.h>
#include "../ref/llama_ref.h"
#include "../ref/llama_ref_fixture.h"
#include "testing.h"

_Static_assert(sizeof(gpt_real) == sizeof(float), "this test is the float build: do not define GPT_REF_DOUBLE");

#define FLOAT_TOL 1e-5

int main(void) {
    double loss, norms[LLAMA_REF_NUM_TENSORS];
    llama_fixture_run(&loss, norms);
    double loss_rel = fabs(loss - LLAMA_FIXTURE_LOSS) / LLAMA_FIXTURE_LOSS;
    printf("float vs double: loss %.9g vs %.9g (rel %.2e, tol %g)\n", loss, LLAMA_FIXTURE_LOSS, loss_rel, FLOAT_TOL);
    EXPECT(loss_rel <= FLOAT_TOL, "float loss %.9g vs double %.9g: relative error %.3e > %g",
           loss, LLAMA_FIXTURE_LOSS, loss_rel, FLOAT_TOL);
    for (int i = 0; i < LLAMA_REF_NUM_TENSORS; i++) {
        double want = llama_fixture_grad_norms[i], rel = fabs(norms[i] - want) / want;
        printf("  grad norm %-10s %.9g vs %.9g (rel %.2e)\n", llama_ref_tensor_name(i), norms[i], want, rel);
        EXPECT(rel <= FLOAT_TOL, "float grad norm of %s %.9g vs double %.9g: relative error %.3e > %g",
               llama_ref_tensor_name(i), norms[i], want, rel, FLOAT_TOL);
    }
    return test_summary("test_llama_ref_float");
}
