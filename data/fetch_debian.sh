#!/usr/bin/env bash
# fetch_debian.sh: the optional larger corpus (about 30M GPT-2 tokens of technical English and a
# dictionary), from four Debian packages, tokenized into data/debian/ with build/make_shards.
# Packages are fetched with `apt-get download` and unpacked with `dpkg-deb -x`: nothing is installed.
#   python3.11-doc  usr/share/doc/python3.11/html/_sources/**/*.rst.txt   one document per file
#   linux-doc-6.1   usr/share/doc/linux-doc-6.1/Documentation/**/*.rst.gz one per file (unpacked), no translations/
#   perl-doc        usr/share/perl/**/*.pod                              one per file
#   dict-gcide      usr/share/dictd/gcide.dict.dz (gzip)                  one per 1000 dictionary entries
# Documents keep their path under data/.cache/debian/docs/{python,linux,perl,gcide}/.
# The mirror serves only the current version of each package (security updates move them), so the
# names are pinned, not the versions: the versions and sha256 of the .debs used are printed and
# written into data/debian/.complete. Downloaded .debs are cached in data/.cache/debian/deb/ and
# reused; delete them to pick up newer versions.
# Invariants as in fetch_starter.sh: data/debian/ is complete exactly when data/debian/.complete
# exists (written last, with the document and token totals, once the shards hold every document);
# the whole run holds the data lock (data/lock.sh); failures leave only temporary directories, removed
# on exit or by the next run.
# usage: bash data/fetch_debian.sh [--force]; then point the trainer at data/debian/debian_{train,val}_*.bin
# (needs `apt-get update` to have run once; as root this script runs it when a download fails)
set -euo pipefail
cd "$(dirname "$0")/.."
source data/lock.sh
source data/publish_shards.sh
export LC_ALL=C  # sort order, hence document order, independent of the user's locale

OUT=data/debian
CACHE=data/.cache/debian
DOCS=$CACHE/docs
MAKE_SHARDS=${MAKE_SHARDS:-build/make_shards}
VOCAB=data/gpt2/vocab.bpe
PACKAGES=(python3.11-doc linux-doc-6.1 perl-doc dict-gcide)
GCIDE_ENTRIES_PER_DOC=1000

data_lock
if [ -f "$OUT/.complete" ] && [ "${1:-}" != --force ]; then
    check_complete debian "$OUT"
    exit 0
fi
[ -x "$MAKE_SHARDS" ] || { echo "error: $MAKE_SHARDS not found; run \`make build/make_shards\`" >&2; exit 1; }
[ -f "$VOCAB" ] || { echo "error: $VOCAB not found; run \`make data\` (or bash data/fetch_gpt2_bpe.sh)" >&2; exit 1; }
for tool in apt-get dpkg-deb; do
    command -v $tool >/dev/null || { echo "error: $tool not found: this script needs Debian or Ubuntu" >&2; exit 1; }
done

mkdir -p "$CACHE/deb"
# left by a killed run (never by a running one: that one would hold the lock)
rm -rf "$CACHE"/root.tmp.* "$CACHE"/docs.tmp.* data/debian.tmp.*
tmp_root=$CACHE/root.tmp.$$
tmp_docs=$CACHE/docs.tmp.$$
tmp_out=data/debian.tmp.$$
debian_cleanup() {
    local rc=$?
    rm -rf "$tmp_root" "$tmp_docs" "$tmp_out"
    [ "$rc" = 0 ] || echo "error: data/fetch_debian.sh failed (exit $rc); nothing was moved into $OUT/" >&2
}
trap debian_cleanup EXIT

# --- fetch: one .deb per package, cached --------------------------------------------------------
deb_of() { ls "$CACHE/deb/$1"_*.deb 2>/dev/null | head -n 1; }
download() {  # download PKG: apt-get download into the cache; on failure refresh the lists once (root)
    (cd "$CACHE/deb" && apt-get download -q "$1") && return 0
    if [ "$(id -u)" = 0 ] && [ -z "${apt_updated:-}" ]; then
        echo "apt-get download $1 failed; running apt-get update once and retrying"
        apt-get update -q && apt_updated=1 && (cd "$CACHE/deb" && apt-get download -q "$1") && return 0
    fi
    echo "error: apt-get download $1 failed; run \`sudo apt-get update\` and check that the package exists" >&2
    return 1
}
for pkg in "${PACKAGES[@]}"; do
    [ -n "$(deb_of "$pkg")" ] || download "$pkg"
    deb=$(deb_of "$pkg")
    echo "$pkg $(dpkg-deb -f "$deb" Version)  $(basename "$deb")  sha256 $(sha256sum "$deb" | cut -d' ' -f1)"
done | tee "$CACHE/versions.txt"

# --- extract: one document per source file -------------------------------------------------------
mkdir -p "$tmp_root" "$tmp_docs"/{python,linux,perl,gcide}
for pkg in "${PACKAGES[@]}"; do dpkg-deb -x "$(deb_of "$pkg")" "$tmp_root"; done

# copy_tree SRC_DIR SUFFIX DEST_DIR: each SRC_DIR/**/*SUFFIX to DEST_DIR/<same path>, .gz files unpacked
copy_tree() {
    local src=$1 suffix=$2 dest=$PWD/$3
    [ -d "$src" ] || { echo "error: $src missing from the package; its layout changed?" >&2; return 1; }
    (cd "$src" && find . -type f -name "*$suffix" ! -path './translations/*' -print0 | xargs -0 cp --parents -t "$dest")
    find "$dest" -type f -name '*.gz' -exec gzip -d {} +
}
copy_tree "$tmp_root/usr/share/doc/python3.11/html/_sources" .rst.txt "$tmp_docs/python"
copy_tree "$tmp_root/usr/share/doc/linux-doc-6.1/Documentation" .rst.gz "$tmp_docs/linux"
copy_tree "$tmp_root/usr/share/perl" .pod "$tmp_docs/perl"

# GCIDE: an entry starts at a line `Headword \Pron\ ...` in column 0; the licence and database
# notes before the first entry are left out.
gzip -dc "$tmp_root/usr/share/dictd/gcide.dict.dz" | awk -v per="$GCIDE_ENTRIES_PER_DOC" -v dir="$tmp_docs/gcide" '
    /^[^ \t][^\\]* \\/ { if (n % per == 0) { if (out) close(out); out = sprintf("%s/gcide_%04d.txt", dir, n / per) } n++ }
    out { print > out }
    END { if (!n) { print "error: no dictionary entries found in gcide.dict.dz" > "/dev/stderr"; exit 1 } }'
rm -rf "$tmp_root"
# The tokenizer takes UTF-8 only. A few files are not (GCIDE 0.48 has three stray Windows-1252
# bytes, e.g. 0x92 for a right quote); those are converted from Windows-1252, the rest left as is.
# (grep in a UTF-8 locale: '.' matches no invalid byte, so -xv finds the lines that are not UTF-8)
{ LC_ALL=C.UTF-8 grep -rlaxv '.*' "$tmp_docs" || true; } | sort | while read -r f; do
    iconv -f WINDOWS-1252 -t UTF-8 "$f" > "$f.utf8" && mv "$f.utf8" "$f"
    echo "converted from Windows-1252 to UTF-8: ${f#"$tmp_docs"/}"
done
for part in python linux perl gcide; do
    n=$(find "$tmp_docs/$part" -type f | wc -l)
    [ "$n" -gt 0 ] || { echo "error: no $part documents extracted" >&2; exit 1; }
    echo "$part: $n documents, $(find "$tmp_docs/$part" -type f -exec cat {} + | wc -c) bytes"
done
rm -rf "$DOCS"
mv "$tmp_docs" "$DOCS"

# --- tokenize into a temporary directory, then move it into place -------------------------------
find "$DOCS" -type f | sort > "$CACHE/docs.list"
echo "tokenizing $(wc -l < "$CACHE/docs.list") documents with $MAKE_SHARDS into $OUT/"
"$MAKE_SHARDS" --vocab "$VOCAB" --out "$tmp_out" --name debian --val-every 20 --list "$CACHE/docs.list"
publish_shards debian gpt2 "$tmp_out" "$OUT" "debian shards from these packages (name, version, file, sha256):
$(cat "$CACHE/versions.txt")
$(wc -l < "$CACHE/docs.list") documents, every 20th in val" "$(wc -l < "$CACHE/docs.list")"
