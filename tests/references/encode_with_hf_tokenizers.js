// The reference for tests/test_hf_tokenizer.cpp: Hugging Face's own (Rust) tokenizers, through
// the @anush008/tokenizers Node binding. Reads a corpus of length-prefixed records (4-byte
// little-endian length, then the bytes; any bytes, ill-formed UTF-8 included, which Node decodes
// with U+FFFD replacement as Rust's from_utf8_lossy does) and prints, as JSON, each record's ids
// (no special tokens added) and the decoding of those ids.
//   node encode_with_hf_tokenizers.js NODE_MODULES TOKENIZER_JSON CORPUS > out.json
const path = require("path");
const fs = require("fs");
const [modules, tokenizerJson, corpusFile] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(modules, "@anush008/tokenizers"));

(async () => {
  const tokenizer = Tokenizer.fromFile(tokenizerJson);
  const corpus = fs.readFileSync(corpusFile);
  const ids = [], decoded = [];
  for (let at = 0; at < corpus.length;) {
    const n = corpus.readUInt32LE(at);
    const text = corpus.subarray(at + 4, at + 4 + n).toString("utf8");
    at += 4 + n;
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    const line = Array.from(encoding.getIds());
    ids.push(line);
    decoded.push(await tokenizer.decode(line, false));
  }
  process.stdout.write(JSON.stringify({ ids, decoded }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
