#!/usr/bin/env bash
# test_ptx_same.sh: dev/cuda/ptx_same.py, on the PTX nvcc writes for small kernels (no GPU needed):
#   - the same kernel written with other local names and a helper function: SAME, exit 0;
#   - the PTX with every register's number moved by 1000 and every label's by 7: SAME;
#   - a constant changed (2 -> 3): DIFF, exit 1, and --show prints the changed instruction; also where
#     the change comes after an inline asm block (whose closing brace opens a line, as the kernel's does);
#   - an unused parameter added at index 1: DIFF without --extra-param, SAME with --extra-param 1;
#     a kernel that reads the added parameter stays DIFF with it;
#   - --pair across renamed kernels; a part matching no kernel, a file without kernels, a missing
#     value: exit 2 with a message naming what was wrong.
# Prints `test_ptx_same: N passed, M failed`, or a SKIPPED line where python3 or nvcc is missing (the
# tool is for developers; nothing else in make test needs Python).
set -uo pipefail
cd "$(dirname "$0")/../../.."
tool=$PWD/dev/cuda/ptx_same.py
NVCC=${NVCC:-nvcc}
for cmd in python3 "$NVCC"; do
    if ! command -v "$cmd" > /dev/null; then echo "SKIPPED test_ptx_same: no $cmd on this machine"; exit 0; fi
done
source dev/test/testing.sh
test_begin test_ptx_same
ptx() {  # ptx NAME SOURCE: $tmp/NAME.ptx from the source text
    printf '%s\n' "$2" > "$tmp/$1.cu"
    "$NVCC" -O3 -lineinfo -arch=sm_80 -ptx -o "$tmp/$1.ptx" "$tmp/$1.cu" || { echo "FAIL nvcc on $1.cu"; exit 1; }
}
run() { out=$(python3 "$tool" "$@" 2>&1); rc=$?; }

ptx a '__global__ void axpb(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}'
ptx b '__device__ __forceinline__ float twice_plus_one(float v) { return 2.0f * v + 1.0f; }
__global__ void axpb(float* out, const float* in, int count) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= count) return;
    out[idx] = twice_plus_one(in[idx]);
}'
ptx c '__global__ void axpb(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 3.0f * x[i] + 1.0f;
}'
ptx d '__global__ void axpb(float* y, const float* unused, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}'
ptx e '__global__ void axpb(float* y, const float* z, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + z[0];
}'
ptx f '__global__ void axpb_renamed(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}'

asm_kernel() {  # a kernel with an inline asm block (a predicate in braces), then arithmetic scaled by $1
    printf '__global__ void scaled(float* y, unsigned r) {\n    unsigned p;\n'
    printf '    asm volatile("{\\n.reg .pred q;\\nsetp.ne.u32 q, %%1, 0;\\nselp.u32 %%0, 1, 0, q;\\n}\\n" : "=r"(p) : "r"(r));\n'
    printf '    y[threadIdx.x] = %s * (float)p + (float)r;\n}\n' "$1"
}
ptx g "$(asm_kernel 2.0f)"
ptx h "$(asm_kernel 3.0f)"
expect "the asm block's closing brace opens a line of the PTX" grep -q '^}$' "$tmp/g.ptx"
run "$tmp/g.ptx" "$tmp/h.ptx"
expect "a constant changed after an inline asm block: DIFF (rc $rc: $out)" [ "$rc" = 1 ]
run "$tmp/g.ptx" "$tmp/g.ptx"
expect "a kernel with an inline asm block against itself: SAME (rc $rc: $out)" [ "$rc" = 0 ]

run "$tmp/a.ptx" "$tmp/b.ptx"
expect "other local names and a helper: SAME, exit 0 (rc $rc: $out)" [ "$rc" = 0 ]
expect "other local names and a helper: one SAME line ($out)" has "$out" "SAME _Z4axpbPfPKfi"

# every register number + 1000 and every label + 7: only the names differ
python3 -c '
import re, sys
t = open(sys.argv[1]).read()
t = re.sub(r"%(rd|r|f|p)(\d+)\b", lambda m: "%" + m.group(1) + str(int(m.group(2)) + 1000), t)
t = re.sub(r"(\$L__BB\d+_)(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 7), t)
open(sys.argv[2], "w").write(t)' "$tmp/a.ptx" "$tmp/a2.ptx"
expect "the renumbering changed the text" bash -c '! cmp -s "$1" "$2"' _ "$tmp/a.ptx" "$tmp/a2.ptx"
run "$tmp/a.ptx" "$tmp/a2.ptx"
expect "registers and labels renumbered: SAME (rc $rc: $out)" [ "$rc" = 0 ]

run "$tmp/a.ptx" "$tmp/c.ptx" --show 20
expect "a constant changed: exit 1 (rc $rc: $out)" [ "$rc" = 1 ]
expect "a constant changed: DIFF line ($out)" has "$out" "DIFF _Z4axpbPfPKfi"
expect "a constant changed: --show prints 2.0's and 3.0's bits ($out)" \
    bash -c 'printf "%s" "$1" | grep -q "0f40000000" && printf "%s" "$1" | grep -q "0f40400000"' _ "$out"

run "$tmp/d.ptx" "$tmp/a.ptx" --pair _Z4axpbPfPKfS1_i=_Z4axpbPfPKfi
expect "an added parameter, not declared: DIFF (rc $rc: $out)" [ "$rc" = 1 ]
run "$tmp/d.ptx" "$tmp/a.ptx" --pair _Z4axpbPfPKfS1_i=_Z4axpbPfPKfi --extra-param 1
expect "an added unused parameter with --extra-param 1: SAME (rc $rc: $out)" [ "$rc" = 0 ]
run "$tmp/e.ptx" "$tmp/a.ptx" --pair _Z4axpbPfPKfS1_i=_Z4axpbPfPKfi --extra-param 1
expect "an added parameter that is read, with --extra-param 1: DIFF (rc $rc: $out)" [ "$rc" = 1 ]

run "$tmp/f.ptx" "$tmp/a.ptx"
expect "no kernel in both files: exit 2 (rc $rc: $out)" [ "$rc" = 2 ]
expect "no kernel in both files: says to use --pair ($out)" has "$out" "--pair"
run "$tmp/f.ptx" "$tmp/a.ptx" --pair axpb_renamed=_Z4axpbPfPKfi
expect "--pair across a renamed kernel: SAME (rc $rc: $out)" [ "$rc" = 0 ]
run "$tmp/f.ptx" "$tmp/a.ptx" --pair nothing=_Z4axpbPfPKfi
expect "--pair matching no kernel: exit 2 naming the part (rc $rc: $out)" \
    bash -c '[ "$1" = 2 ] && printf "%s" "$2" | grep -qF "nothing=_Z4axpbPfPKfi"' _ "$rc" "$out"
printf 'not PTX\n' > "$tmp/x.ptx"
run "$tmp/x.ptx" "$tmp/a.ptx"
expect "a file without kernels: exit 2 naming it (rc $rc: $out)" \
    bash -c '[ "$1" = 2 ] && printf "%s" "$2" | grep -qF "x.ptx holds no kernel"' _ "$rc" "$out"
run "$tmp/a.ptx" "$tmp/b.ptx" --show
expect "--show without a value: exit 2 (rc $rc: $out)" [ "$rc" = 2 ]

test_end
