#include "vocab_loader.h"

#include <utility>
#include <vector>

namespace picolm::tools {

Result<std::shared_ptr<const grammar::Vocabulary>> load_grammar_vocab(const std::string& gguf_path) {
  auto b = load_vocab_bundle(gguf_path);
  if (!b) return Error{b.error()};
  return std::move(b->vocab);
}

Result<VocabBundle> load_vocab_bundle(const std::string& gguf_path) {
  VocabBundle b;
  auto gguf = GgufFile::open(gguf_path);
  if (!gguf) return Error{gguf.error()};
  b.gguf = std::move(*gguf);
  auto tok = Tokenizer::create(*b.gguf);
  if (!tok) return Error{gguf_path + ": " + tok.error()};
  b.tokenizer = std::move(*tok);
  const Tokenizer& t = *b.tokenizer;
  std::vector<std::string> bytes(static_cast<size_t>(t.n_vocab()));
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    const TokenType type = t.token_type(id);
    // Control/unknown/unused tokens must never be produced inside a JSON instance; "" tells the
    // grammar so (EOG ids are passed separately).
    if (type == TokenType::Control || type == TokenType::Unknown || type == TokenType::Unused) continue;
    bytes[static_cast<size_t>(id)] = t.token_to_piece(id, /*special=*/false);
  }
  b.vocab = grammar::Vocabulary::create(std::move(bytes), t.eog_ids());
  return b;
}

std::shared_ptr<const grammar::Vocabulary> byte_vocabulary() {
  std::vector<std::string> bytes(257);
  for (int b = 0; b < 256; ++b) bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  return grammar::Vocabulary::create(std::move(bytes), {kByteVocabEog});
}

}  // namespace picolm::tools
