// Tokenizers read from GGUF metadata: SentencePiece-style ("llama": scores, byte fallback) and
// GPT-2 byte-level BPE ("gpt2": merges, pre-tokenizer regex chosen by tokenizer.ggml.pre).
// Thread-safety: a Tokenizer is immutable after create() and may be shared; a StreamDecoder is
// used by one thread at a time.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "result.h"

namespace picolm {

class GgufFile;

enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(const GgufFile& gguf);
  virtual ~Tokenizer() = default;

  // add_special: prepend BOS (and append EOS) as the vocabulary's add_bos/add_eos say.
  // parse_special: text such as "<|im_start|>" or "</s>" becomes the special token.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const = 0;
  // A rendered prompt whose byte ranges `plain` ([begin, end), sorted, disjoint) came from request
  // content: as encode(text, add_special, true), except that a control or unknown token is not
  // matched where its text overlaps a plain range. There it stays text for the pre-tokenizer and
  // BPE / SentencePiece, as with parse_special=false (user-defined tokens still split out, as
  // they do in content tokenized by Hugging Face). Empty `plain`: the same ids as parse_special=true.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      std::span<const std::pair<size_t, size_t>> plain) const = 0;
  // Every occurrence in `text` of a control or unknown token's text, i.e. what parse_special=true
  // could turn into such a token, as [begin, end) byte ranges (unordered; they may overlap).
  virtual std::vector<std::pair<size_t, size_t>> find_control_text(std::string_view text) const = 0;
  // The exact bytes of one token (byte-fallback tokens give their byte, SPM "▁" gives a space).
  // Control (and unknown) tokens give their text only when `special` is true; user-defined tokens
  // such as "<tool_call>" always do.
  virtual std::string token_to_piece(int32_t id, bool special) const = 0;
  // The concatenated pieces, byte for byte (may end inside a UTF-8 sequence). Unlike
  // llama_detokenize it strips no leading space and does no clean-up of spaces before punctuation.
  std::string decode(const std::vector<int32_t>& ids, bool special) const;

  virtual int32_t n_vocab() const = 0;
  virtual int32_t bos_id() const = 0;   // -1 if none
  virtual int32_t eos_id() const = 0;   // -1 if none
  virtual bool add_bos() const = 0;
  virtual bool add_eos() const = 0;
  virtual TokenType token_type(int32_t id) const = 0;
  virtual const std::string& token_text(int32_t id) const = 0;  // the raw vocabulary string
  // End-of-generation ids: eos, eot, <|im_end|>, <|eot_id|>, <|endoftext|>, ... present in the vocab.
  virtual const std::vector<int32_t>& eog_ids() const = 0;
  bool is_eog(int32_t id) const;
  // Id of the token whose vocabulary text is exactly `text` (special, added or ordinary; for an
  // ordinary SentencePiece token that text spells spaces as "▁"), or -1.
  virtual int32_t find_token(std::string_view text) const = 0;
  // A fingerprint of the vocabulary (for cache files).
  virtual uint64_t fingerprint() const = 0;
};

// Streaming detokenizer: holds back incomplete UTF-8 sequences across tokens.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool special = false) : tok_(tok), special_(special) {}
  // Returns the newly completed text (valid UTF-8 only; partial sequences are held back).
  std::string push(int32_t id);
  // Returns whatever is held back (invalid bytes as U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool special_;
  std::string pending_;
};

}  // namespace picolm
