// `shardrl tokenize`: a model's own tokenizer (text/hf_tokenizer.hpp) and chat template
// (text/chat_template.hpp) on the command line, for users to check their data and prompts:
//   --text T          prints T's ids, space-separated
//   --file F.jsonl    one line of ids per input line: a JSON string, or an object with "text", or
//                     with "messages" (a chat, rendered with the template)
//   --chat            --text is one user message, rendered with the template (generation prompt added)
//   --decode "I ..."  prints the text of the ids
#pragma once

#include <string>
#include <vector>

namespace shardrl {

struct TokenizeArgs {
  std::string tokenizer;   // a directory with tokenizer.json ("": the job's, with config_path)
  // A job's config (and --set overrides): its tokenizer, and with --chat its rl.template_variables
  // and rl.system_prompt, as the text task renders its prompts.
  std::string config_path;
  std::vector<std::string> overrides;
  std::string text, file, decode;
  bool chat = false;
  bool add_special_tokens = false;
  bool skip_special_tokens = false;
};

int run_tokenize(const TokenizeArgs& args);

}  // namespace shardrl
