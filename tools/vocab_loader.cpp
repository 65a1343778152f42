#include "vocab_loader.h"

#include <utility>
#include <vector>

#include "grammar_vocab.h"

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
  b.vocab = grammar_vocabulary(*b.tokenizer);
  return b;
}

std::shared_ptr<const grammar::Vocabulary> byte_vocabulary() {
  std::vector<std::string> bytes(257);
  for (int b = 0; b < 256; ++b) bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  return grammar::Vocabulary::create(std::move(bytes), {kByteVocabEog});
}

}  // namespace picolm::tools
