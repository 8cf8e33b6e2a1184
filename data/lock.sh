# lock.sh: sourced by the data/fetch_*.sh scripts.
# data_lock: takes the data lock, data/.cache/fetch.lock (flock(1), from util-linux), for the rest of
# the calling script; the kernel releases it when the script exits, however it exits. The fetch
# scripts share data/.cache/ (npm tarballs, unpacked packages, leftover temporary directories that a
# run removes) and their output directories, and two make processes, or a make and a script run by
# hand, may start them at once. So each script takes the lock before it looks at anything: a second
# caller waits, then finds the output complete and leaves it alone.
data_lock() {
    command -v flock >/dev/null || {
        echo "error: $0: flock not found; it comes with util-linux (apt-get install -y util-linux)" >&2; return 1; }
    mkdir -p data/.cache
    exec 9>data/.cache/fetch.lock
    if ! flock -n 9; then
        echo "$0: another data fetch holds data/.cache/fetch.lock; waiting for it to finish"
        flock 9
    fi
}
