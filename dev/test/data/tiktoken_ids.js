// tiktoken_ids.js: the test oracle. Prints the ids that tiktoken (npm tiktoken@1.0.22, the WASM build
// of OpenAI's Rust tokenizer) gives for each FILE in the encoding NAME (gpt2, cl100k_base, o200k_base;
// default gpt2), with encode_ordinary (special tokens are ordinary text): one line per file, ids
// separated by spaces.
// usage: node dev/test/data/tiktoken_ids.js [--encoding NAME] FILE...
// The module comes from $TIKTOKEN_DIR/tiktoken.cjs if set, else build/node/node_modules/tiktoken/tiktoken.cjs
// (`make test-deps` installs it there).
'use strict';
const fs = require('fs');
const path = require('path');

let files = process.argv.slice(2);
let encoding = 'gpt2';
if (files[0] === '--encoding') {
    encoding = files[1];
    files = files.slice(2);
}
if (!encoding || files.length === 0) {
    process.stderr.write('usage: node dev/test/data/tiktoken_ids.js [--encoding NAME] FILE...\n');
    process.exit(2);
}
const dir = process.env.TIKTOKEN_DIR || 'build/node/node_modules/tiktoken';
let tiktoken;
try {
    tiktoken = require(path.resolve(dir, 'tiktoken.cjs'));
} catch (err) {
    process.stderr.write(`error: cannot load ${dir}/tiktoken.cjs (${err.message})\n  hint: run \`make test-deps\`\n`);
    process.exit(1);
}
let enc;
try {
    enc = tiktoken.get_encoding(encoding);
} catch (err) {
    process.stderr.write(`error: --encoding ${encoding}: ${err.message || err}\n`);
    process.exit(2);
}
// fatal: invalid UTF-8 is an error, not U+FFFD; ignoreBOM: a leading U+FEFF is text, as in the C encoder
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
for (const file of files) {
    const ids = enc.encode_ordinary(decoder.decode(fs.readFileSync(file)));
    process.stdout.write(ids.join(' ') + '\n');  // flushed before node exits
}
enc.free();
