// The reference for bench_tokenizer: Hugging Face's Rust tokenizers (the @anush008/tokenizers
// Node binding, from scripts/install_test_references.sh) encoding the same file line by line,
// first pass and best of the next passes, MB/s. Run with RAYON_NUM_THREADS=1 for one core.
//   node bench/hf_tokenizer_speed.js build/test-references/node_modules DIR/tokenizer.json TEXT [passes]
const path = require("path");
const fs = require("fs");
const [modules, tokenizerJson, file, passesArg] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(modules, "@anush008/tokenizers"));
(async () => {
  const tokenizer = Tokenizer.fromFile(tokenizerJson);
  const lines = fs.readFileSync(file, "utf8").split("\n").map((l) => l + "\n");
  const bytes = lines.reduce((n, l) => n + Buffer.byteLength(l), 0) - 1;
  const pass = async () => {
    const t0 = process.hrtime.bigint();
    let ids = 0;
    for (const l of lines) ids += (await tokenizer.encode(l, null, { addSpecialTokens: false })).getIds().length;
    return [Number(process.hrtime.bigint() - t0) / 1e9, ids];
  };
  const [first, ids] = await pass();
  let best = 1e30;
  for (let p = 0; p < Number(passesArg || 5); ++p) best = Math.min(best, (await pass())[0]);
  console.log(`${lines.length} lines, ${(bytes / 1e6).toFixed(2)} MB, ${ids} ids`);
  console.log(`line by line: first pass ${(bytes / 1e6 / first).toFixed(2)} MB/s, best ${(bytes / 1e6 / best).toFixed(2)} MB/s`);
  // One batch call per pass: the binding's per-call cost paid once (RAYON_NUM_THREADS=1 keeps it on one core).
  let batch = 1e30;
  for (let p = 0; p < Number(passesArg || 5); ++p) {
    const t0 = process.hrtime.bigint();
    await tokenizer.encodeBatch(lines, { addSpecialTokens: false });
    batch = Math.min(batch, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(`one batch: best ${(bytes / 1e6 / batch).toFixed(2)} MB/s`);
})();
