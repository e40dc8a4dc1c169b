#include "text/tokenizer_json.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/error.hpp"

namespace shardrl::text {
namespace {

using nlohmann::json;

// What an open container is, and where its values go.
enum class Frame {
  dom,          // a container of the DOM: values go into `node`
  vocab,        // model.vocab: each key and value become a VocabEntry
  merges,       // model.merges: each value becomes a BpeMerge
  merge_pair,   // one merge written as an array
  skipped,      // a container inside a merge: its contents only make the merge `other`
};

struct Open {
  explicit Open(Frame f, json* n = nullptr, bool m = false) : frame(f), node(n), model(m) {}
  Frame frame;
  json* node;         // dom: the container
  bool model;         // dom: the object that is the root's "model"
  std::string key;    // dom objects and vocab: the key of the value that comes next
};

// A SAX handler building the DOM of everything but model.vocab and model.merges, which it
// streams into `tables` as they come: no map node or array per entry. A key given twice in an
// object keeps its last value, as json::parse does.
class Reader final : public nlohmann::json_sax<json> {
 public:
  explicit Reader(TokenizerJson& out) : out_(out) {}

  bool null() override { return scalar(json(nullptr)); }
  bool boolean(bool v) override { return scalar(json(v)); }
  bool number_integer(number_integer_t v) override { return scalar(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(json(v)); }
  bool binary(binary_t&) override { return scalar(json()); }   // not in JSON text

  bool string(string_t& s) override {
    if (!stack_.empty()) {
      Open& top = stack_.back();
      if (top.frame == Frame::merges) {   // "a b": kept as text, no JSON value made
        out_.tables.merges->push_back({BpeMerge::Form::text, std::move(s), {}});
        return true;
      }
      if (top.frame == Frame::merge_pair) {
        BpeMerge& m = out_.tables.merges->back();
        if (pair_items_ == 0) m.first = std::move(s);
        else if (pair_items_ == 1) m.second = std::move(s);
        ++pair_items_;
        return true;
      }
    }
    return scalar(json(std::move(s)));
  }

  bool key(string_t& k) override {
    stack_.back().key = std::move(k);
    return true;
  }

  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }

  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  // Syntax errors and numbers past a double (the lexer's out_of_range) alike.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = e.what();
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  // A value's place: the DOM's root, a DOM container, a vocabulary entry or a merge.
  bool scalar(json v) {
    if (stack_.empty()) {
      out_.rest = std::move(v);
      return true;
    }
    Open& top = stack_.back();
    switch (top.frame) {
      case Frame::dom:
        forget_streamed(top);
        insert(top, std::move(v));
        break;
      case Frame::vocab: out_.tables.vocab->push_back({std::move(top.key), std::move(v)}); break;
      case Frame::merges: out_.tables.merges->push_back({}); break;   // neither a pair nor text
      case Frame::merge_pair: out_.tables.merges->back().form = BpeMerge::Form::other; break;
      case Frame::skipped: break;
    }
    return true;
  }

  // A DOM value about to take the place of model.vocab or model.merges, or of the root's
  // "model" itself (a key given twice): the streamed one it replaces goes, as json::parse keeps
  // the last.
  void forget_streamed(const Open& top) {
    if (top.model && top.key == "vocab") out_.tables.vocab.reset();
    if (top.model && top.key == "merges") out_.tables.merges.reset();
    if (stack_.size() == 1 && top.key == "model") out_.tables = BpeTables{};
  }

  static json& insert(Open& into, json v) {
    if (into.node->is_object()) return (*into.node)[into.key] = std::move(v);
    into.node->push_back(std::move(v));
    return into.node->back();
  }

  bool open(json empty) {
    const bool object = empty.is_object();
    if (stack_.empty()) {
      out_.rest = std::move(empty);
      stack_.emplace_back(Frame::dom, &out_.rest);
      return true;
    }
    Open& top = stack_.back();
    switch (top.frame) {
      case Frame::dom: {
        // model.vocab (an object) and model.merges (an array) are streamed; any other type
        // stays in the DOM, where the model names it.
        // (A value the DOM took for the key before, given twice, goes: the last is kept.)
        if (top.model && object && top.key == "vocab") {
          top.node->erase(top.key);
          out_.tables.vocab.emplace();
          stack_.emplace_back(Frame::vocab);
          return true;
        }
        if (top.model && !object && top.key == "merges") {
          top.node->erase(top.key);
          out_.tables.merges.emplace();
          stack_.emplace_back(Frame::merges);
          return true;
        }
        const bool model = stack_.size() == 1 && object && top.key == "model";
        forget_streamed(top);
        json& node = insert(top, std::move(empty));
        stack_.emplace_back(Frame::dom, &node, model);
        return true;
      }
      case Frame::vocab: {
        // A vocabulary id that is a container: built whole, for the model's error to show it.
        VocabEntry& entry = out_.tables.vocab->emplace_back(VocabEntry{std::move(top.key), std::move(empty)});
        stack_.emplace_back(Frame::dom, &entry.id);
        return true;
      }
      case Frame::merges:
        out_.tables.merges->push_back({});
        if (object) {
          stack_.emplace_back(Frame::skipped);
        } else {
          out_.tables.merges->back().form = BpeMerge::Form::pair;
          pair_items_ = 0;
          stack_.emplace_back(Frame::merge_pair);
        }
        return true;
      case Frame::merge_pair:   // a container inside the pair
        out_.tables.merges->back().form = BpeMerge::Form::other;
        stack_.emplace_back(Frame::skipped);
        return true;
      case Frame::skipped: stack_.emplace_back(Frame::skipped); return true;
    }
    return true;
  }

  bool close() {
    const Frame frame = stack_.back().frame;
    stack_.pop_back();
    if (frame == Frame::merge_pair && pair_items_ != 2) out_.tables.merges->back().form = BpeMerge::Form::other;
    return true;
  }

  TokenizerJson& out_;
  std::vector<Open> stack_;
  int pair_items_ = 0;   // strings in the open merge pair (anything else made it `other` already)
  std::string error_;
};

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& text, const std::string& origin) {
  TokenizerJson out;
  Reader reader(out);
  if (!json::sax_parse(text, &reader)) throw InputError(fmt::format("{}: not valid JSON: {}", origin, reader.error()));
  return out;
}

}  // namespace shardrl::text
