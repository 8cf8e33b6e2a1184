// test_gpt_ref_float.c: the float build of dev/ref/gpt_ref.h (the one test_gpt.cu uses) against the
// double build, through the golden values of gpt_ref_fixture.h (which test_gpt_ref checks in double).
// The fixture's parameters are exactly representable in float, so the differences are the float
// build's own rounding: matmuls accumulate in float, statistics and softmax sums in double.
// Tolerance 1e-5 relative on the loss and on the global gradient norm (which sums the squares of every
// gradient, so each backward formula contributes); the float build reaches a few 1e-8.
#include <math.h>
#include <stdlib.h>
#include "../ref/gpt_ref.h"
#include "../ref/gpt_ref_fixture.h"
#include "testing.h"

_Static_assert(sizeof(gpt_real) == sizeof(float), "this test is the float build: do not define GPT_REF_DOUBLE");

int main(void) {
    double loss, norm;
    fixture_run(&loss, &norm);
    double loss_rel = fabs(loss - FIXTURE_LOSS) / FIXTURE_LOSS;
    double norm_rel = fabs(norm - FIXTURE_GRAD_NORM) / FIXTURE_GRAD_NORM;
    printf("float vs double: loss %.9g vs %.9g (rel %.2e, tol 1e-5), grad norm %.9g vs %.9g (rel %.2e, tol 1e-5)\n",
           loss, FIXTURE_LOSS, loss_rel, norm, FIXTURE_GRAD_NORM, norm_rel);
    EXPECT(loss_rel <= 1e-5, "float loss %.9g vs double %.9g: relative error %.3e > 1e-5", loss, FIXTURE_LOSS, loss_rel);
    EXPECT(norm_rel <= 1e-5, "float grad norm %.9g vs double %.9g: relative error %.3e > 1e-5",
           norm, FIXTURE_GRAD_NORM, norm_rel);
    return test_summary("test_gpt_ref_float");
}
