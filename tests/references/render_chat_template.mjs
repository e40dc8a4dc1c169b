// The reference side of tests/test_chat_template_parity.cpp: renders chat templates with Hugging Face's
// @huggingface/jinja (from build/test-references, see scripts/install_test_references.sh).
//   node tests/references/render_chat_template.mjs CASES.json
// CASES.json: [{"template", "messages", "add_generation_prompt", "variables"}, ...]. Prints a JSON
// array with, per case, the rendered string or {"error": message} where rendering threw.
// Variables are passed as transformers' apply_chat_template passes them: tools and documents
// are null unless set, then the case's variables, then messages and add_generation_prompt.
import { readFileSync } from "node:fs";

const modules = process.env.SHARDRL_TEST_REFERENCES ??
  new URL("../../build/test-references/node_modules/", import.meta.url).pathname;
const { Template } = await import(`${modules}/@huggingface/jinja/dist/index.js`);

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const parsed = new Map();  // one parse per distinct template, as the C++ side does
const results = cases.map(({ template, messages, add_generation_prompt, variables }) => {
  try {
    if (!parsed.has(template)) parsed.set(template, new Template(template));
    return parsed.get(template).render({
      tools: null,
      documents: null,
      ...variables,
      messages,
      add_generation_prompt,
    });
  } catch (error) {
    return { error: String(error?.message ?? error) };
  }
});
process.stdout.write(JSON.stringify(results));
