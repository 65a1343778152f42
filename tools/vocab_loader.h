// Builds grammar::Vocabulary objects for the grammar tools and tests.
//
// The grammar library knows nothing about GGUF or tokenizers (see STYLE.md layers), so the byte
// strings are produced here, on the tools side, with the engine's tokenizer.
// Thread-safety: free functions without shared state.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "grammar/grammar.h"
#include "gguf.h"
#include "result.h"
#include "tokenizer.h"

namespace picolm::tools {

// The vocabulary of a GGUF file, as the server builds it (provider/grammar_vocab.h: token i decodes
// to token_to_piece(i, special=false); control, unknown and unused tokens get "" so the grammar
// never allows them inside constrained output; end-of-generation ids are the tokenizer's eog_ids()).
Result<std::shared_ptr<const grammar::Vocabulary>> load_grammar_vocab(const std::string& gguf_path);

// The same, with the tokenizer it was built from (tests re-tokenize instances with it).
struct VocabBundle {
  std::unique_ptr<GgufFile> gguf;  // outlives the tokenizer, which was created from it
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::Vocabulary> vocab;
};
Result<VocabBundle> load_vocab_bundle(const std::string& gguf_path);

// A synthetic vocabulary of the 256 single bytes (token id == byte value) plus one
// end-of-generation token (id 256, empty bytes): lets byte-level checks use the token API.
std::shared_ptr<const grammar::Vocabulary> byte_vocabulary();
constexpr int32_t kByteVocabEog = 256;

}  // namespace picolm::tools
