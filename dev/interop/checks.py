"""What the transformers checks in this folder (hf_check.py, llama_check.py) share: one line per check
('ok   ...' or 'FAIL ...'), then 'NAME: N passed, M failed' and an exit status that is non-zero on any
failure."""
import sys

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    return ok


def finish(name):
    """Prints the summary and exits: 1 when a check failed, else 0."""
    print(f"{name}: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
