#include "grammar_vocab.h"

#include <algorithm>
#include <string>
#include <vector>

namespace picolm {

std::shared_ptr<const grammar::Vocabulary> grammar_vocabulary(const Tokenizer& tok, int32_t n_vocab,
                                                              std::span<const std::string_view> kept_control) {
  if (n_vocab < 0) n_vocab = tok.n_vocab();
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab));
  for (int32_t id = 0; id < n_vocab && id < tok.n_vocab(); ++id) {
    const TokenType type = tok.token_type(id);
    if (type == TokenType::Control) {
      std::string text = tok.token_to_piece(id, /*special=*/true);
      if (!text.empty() && std::find(kept_control.begin(), kept_control.end(), text) != kept_control.end())
        pieces[static_cast<size_t>(id)] = std::move(text);
      continue;
    }
    if (type == TokenType::Unknown || type == TokenType::Unused) continue;
    pieces[static_cast<size_t>(id)] = tok.token_to_piece(id, /*special=*/false);
  }
  return grammar::Vocabulary::create(std::move(pieces), tok.eog_ids());
}

}  // namespace picolm
