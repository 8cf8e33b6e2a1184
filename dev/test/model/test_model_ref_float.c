// test_model_ref_float.c: the float build of dev/ref/model_ref.h (the one test_gpt.cu uses) against the
// double build, for every family, through the golden values of model_ref_fixture.h (which
// test_model_ref checks in double). The fixture's parameters are exactly representable in float, so the
// differences are the float build's own rounding: matmuls accumulate in float; norm statistics, RoPE
// angles and softmax sums run in double. Compared: the loss, the global gradient norm and the gradient
// norm of each tensor (each backward formula shows in at least one of them). Tolerance 1e-5 relative;
// the float build reaches a few 1e-8.
#include <math.h>
#include <stdlib.h>
#include "../../ref/model_ref.h"
#include "../../ref/model_ref_fixture.h"
#include "../testing.h"

_Static_assert(sizeof(ref_real) == sizeof(float), "this test is the float build: do not define REF_DOUBLE");

#define FLOAT_TOL 1e-5

static void check_family(int family) {
    const ModelSpec* s = model_spec(family);
    const ref_fixture_golden* want = &ref_fixture_goldens[family];
    ref_fixture_golden got;
    ref_fixture_run(family, &got);
    double loss_rel = fabs(got.loss - want->loss) / want->loss;
    double norm_rel = fabs(got.grad_norm - want->grad_norm) / want->grad_norm;
    printf("%s float vs double: loss %.9g vs %.9g (rel %.2e, tol %g), grad norm %.9g vs %.9g (rel %.2e, tol %g)\n",
           s->name, got.loss, want->loss, loss_rel, FLOAT_TOL, got.grad_norm, want->grad_norm, norm_rel, FLOAT_TOL);
    EXPECT(loss_rel <= FLOAT_TOL, "%s: float loss %.9g vs double %.9g: relative error %.3e > %g", s->name, got.loss,
           want->loss, loss_rel, FLOAT_TOL);
    EXPECT(norm_rel <= FLOAT_TOL, "%s: float grad norm %.9g vs double %.9g: relative error %.3e > %g", s->name,
           got.grad_norm, want->grad_norm, norm_rel, FLOAT_TOL);
    for (int i = 0; i < s->num_tensors; i++) {
        double w = want->tensor_grad_norms[i], rel = fabs(got.tensor_grad_norms[i] - w) / w;
        printf("  grad norm %-10s %.9g vs %.9g (rel %.2e)\n", s->tensors[i].name, got.tensor_grad_norms[i], w, rel);
        EXPECT(rel <= FLOAT_TOL, "%s: float grad norm of %s %.9g vs double %.9g: relative error %.3e > %g", s->name,
               s->tensors[i].name, got.tensor_grad_norms[i], w, rel, FLOAT_TOL);
    }
}

int main(void) {
    for (int family = 0; family < MODEL_NUM_FAMILIES; family++) check_family(family);
    return test_summary("test_model_ref_float");
}
