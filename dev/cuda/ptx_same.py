#!/usr/bin/env python3
"""ptx_same.py: are the kernels of two PTX files the same code, but for the names of things?

Checks a refactor of a kernel on a machine without a GPU: build the PTX before and after (nvcc -ptx, as
dev/cuda/README.md shows), then compare each kernel. Before comparing, each kernel's text is put in a
canonical form: debug lines (.loc, .file) and parameter declarations dropped, the kernel's own name and
its parameters' names made one, registers (%r12, %rd3, %f7, %p2, ...) and branch labels renamed in order
of first appearance. Two kernels are SAME when what is left is equal: the same instructions in the same
order on the same operands. ptxas then builds the same machine code from them (parameter offsets aside,
see --extra-param), as long as what the kernels call and read outside their own text is the same too:
device functions left as calls (.func, not compared) and module-level data (.global, .const).

usage: ptx_same.py A.ptx B.ptx [--pair A_PART=B_PART ...] [--extra-param N] [--show N]
  Without --pair: every kernel present in both files, by its full (mangled) name. With --pair, the
  one kernel of A whose name contains A_PART against the one of B whose name contains B_PART (each
  must match exactly one; mangled template arguments make good parts, e.g.
  'fa90_dkdv_kernelILi128ELb0ELb0EE=fa90_dkdv_kernelILi128ELb0EE').
  --extra-param N: A's kernels have one parameter more than B's, at index N (0-based): A's parameters
  after it are renumbered down, and a use of parameter N itself stays a difference.
  --show N: print up to N lines of each difference (default 0).
Prints a line per pair, SAME or DIFF (with how many lines differ), then a count; exits 0 when every
pair is the same, 1 when one differs, 2 on bad input (a file without kernels, a part matching no kernel
or several).
"""
import difflib
import re
import sys

ENTRY = re.compile(r'^(?:\.visible |\.weak )?\.entry (\S+)\(', re.M)
# where any function's text begins (kernels and device functions, defined or declared)
FUNCTION = re.compile(r'^(?:\.visible |\.weak |\.extern )?\.(?:entry|func)\b', re.M)


def kernels(path):
    """{mangled name: text} of every .entry in the PTX file."""
    try:
        text = open(path).read()
    except OSError as e:
        sys.exit(usage_error("cannot read %s: %s" % (path, e.strerror)))
    found = {}
    starts = [m.start() for m in FUNCTION.finditer(text)] + [len(text)]
    for m in ENTRY.finditer(text):
        stop = min(s for s in starts if s > m.start())
        body = text[m.start():stop]
        # the kernel ends at the last brace that opens a line before the next function: inline asm
        # blocks inside it ({ .reg .pred p; ... }) have such braces too
        end = body.rfind('\n}\n')
        found[m.group(1)] = body[:end + 3] if end >= 0 else body
    if not found:
        sys.exit(usage_error("%s holds no kernel (.entry): is it PTX from nvcc -ptx?" % path))
    return found


def canonical(text, name, extra_param=None):
    """The kernel's text with what names nothing renamed in order of appearance."""
    text = text.replace(name, 'KERNEL')
    text = re.sub(r'^\s*(\.loc|\.file)\b.*\n', '', text, flags=re.M)
    text = re.sub(r'^\s*\.param .*\n', '', text, flags=re.M)

    def param(m):
        n = int(m.group(1))
        if extra_param is not None and n == extra_param:
            return 'KERNEL_param_EXTRA'
        if extra_param is not None and n > extra_param:
            n -= 1
        return 'KERNEL_param_%d' % n
    text = re.sub(r'KERNEL_param_(\d+)', param, text)
    # the register declarations' counts follow from the renaming
    text = re.sub(r'^\s*\.reg \.\w+\s+%\w+<\d+>;\n', '', text, flags=re.M)
    names, counts = {}, {}

    def rename(m):
        key = m.group(0)
        if key not in names:
            kind = m.group(1)
            counts[kind] = counts.get(kind, 0) + 1
            names[key] = '%%%s_%d' % (kind, counts[kind])
        return names[key]
    text = re.sub(r'%(rd|rs|r|fd|f|hh|h|p|q)(\d+)\b', rename, text)
    labels = {}

    def label(m):
        return labels.setdefault(m.group(0), '$L_%d' % len(labels))
    return re.sub(r'\$L__BB\d+_\d+', label, text)


def usage_error(msg):
    print("ptx_same.py: " + msg, file=sys.stderr)
    return 2


def main(argv):
    files, pairs, extra, show = [], [], None, 0
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ('--pair', '--extra-param', '--show'):
            if i + 1 >= len(argv):
                return usage_error("%s needs a value (see the header of this file)" % a)
            v = argv[i + 1]
            if a == '--pair':
                if v.count('=') != 1:
                    return usage_error("--pair %s: expected A_PART=B_PART" % v)
                pairs.append(tuple(v.split('=')))
            else:
                try:
                    n = int(v)
                except ValueError:
                    return usage_error("%s %s: expected a number" % (a, v))
                if n < 0:
                    return usage_error("%s %s: expected 0 or more" % (a, v))
                if a == '--extra-param':
                    extra = n
                else:
                    show = n
            i += 2
        elif a.startswith('-'):
            return usage_error("unknown option %s (see the header of this file)" % a)
        else:
            files.append(a)
            i += 1
    if len(files) != 2:
        return usage_error("expected two PTX files, got %d (usage: ptx_same.py A.ptx B.ptx [options])" % len(files))
    A, B = kernels(files[0]), kernels(files[1])
    todo = []
    if pairs:
        for pa, pb in pairs:
            na = [k for k in A if pa in k]
            nb = [k for k in B if pb in k]
            if len(na) != 1 or len(nb) != 1:
                return usage_error("--pair %s=%s: %d kernels of %s and %d of %s match; each part must match one"
                                   % (pa, pb, len(na), files[0], len(nb), files[1]))
            todo.append((na[0], nb[0]))
    else:
        todo = [(k, k) for k in A if k in B]
        only = len(A) + len(B) - 2 * len(todo)
        if not todo:
            return usage_error("no kernel is in both files (use --pair for renamed kernels)")
        if only:
            print("%d kernels are in one file only (not compared)" % only)
    differ = 0
    for na, nb in todo:
        x = canonical(A[na], na, extra).split('\n')
        y = canonical(B[nb], nb).split('\n')
        if x == y:
            print("SAME %s" % (na if na == nb else na + " = " + nb))
            continue
        differ += 1
        diff = [l for l in difflib.unified_diff(x, y, lineterm='', n=0) if not l.startswith(('---', '+++'))]
        changed = sum(1 for l in diff if l[:1] in '+-')
        print("DIFF %s: %d lines differ" % (na if na == nb else na + " ~ " + nb, changed))
        for l in diff[:show]:
            print("    " + l)
    print("%d of %d kernels the same" % (len(todo) - differ, len(todo)))
    return 1 if differ else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
