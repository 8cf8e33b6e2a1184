#!/usr/bin/env bash
# Fetches tiktoken's encoder files for cl100k_base and o200k_base (encoders/*.json: the BPE ranks, the
# special tokens and the pre-tokenizer pattern; llmc/data/tokenizer_tiktoken.h reads them) from the npm
# package tiktoken@1.0.22 into data/tiktoken/, each checked against the sha256 pinned here. The same
# package is the tests' oracle (`make test-deps`). Idempotent, and safe when two run at once: the data
# lock (data/lock.sh) is taken before anything is looked at, and each file is copied under a
# temporary name and renamed into place.
set -euo pipefail
cd "$(dirname "$0")/.."
source data/lock.sh
source data/npm_fetch.sh
CL100K_SHA=49a4e05dea02c8fafbd50cc4725c4aab8f39386c0afedef118e0dfebc2fe523a
O200K_SHA=df53e1a5f146e33a1b144d12ad9d685ee1b54dbc8b0950791ed45c933b119dc1
data_lock
if [ -f data/tiktoken/cl100k_base.json ] && sha256_check data/tiktoken/cl100k_base.json $CL100K_SHA 2>/dev/null &&
   [ -f data/tiktoken/o200k_base.json ] && sha256_check data/tiktoken/o200k_base.json $O200K_SHA 2>/dev/null; then
    echo "data/tiktoken: cl100k_base.json and o200k_base.json present and verified"; exit 0
fi
npm_fetch tiktoken@1.0.22 \
    sha512-PKvy1rVF1RibfF3JlXBSP0Jrcw2uq3yXdgcEXtKTYn3QJ/cBRBHDnrJ5jHky+MENZ6DIPwNUGWpkVx+7joCpNA== \
    data/.cache/tiktoken
sha256_check data/.cache/tiktoken/encoders/cl100k_base.json $CL100K_SHA
sha256_check data/.cache/tiktoken/encoders/o200k_base.json $O200K_SHA
mkdir -p data/tiktoken
# copy under temporary names first: a reader never sees half a file
for name in cl100k_base o200k_base; do
    cp data/.cache/tiktoken/encoders/$name.json data/tiktoken/$name.json.tmp
    mv data/tiktoken/$name.json.tmp data/tiktoken/$name.json
done
rm -rf data/.cache/tiktoken  # 23 MB unpacked; the tarball stays in data/.cache/npm
echo "data/tiktoken: cl100k_base.json and o200k_base.json fetched and verified"
