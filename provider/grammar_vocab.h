// The vocabulary the grammar masks, built from the model's tokenizer: one builder for the server
// (Engine::create), the tools (picolm-grammar, the benches) and the tests (tools/vocab_loader.h),
// so they all check the vocabulary the server constrains.
//
// Token i is the bytes it adds to generated text, token_to_piece(i, special=false). Tokens that
// generated text never spells get "", which the grammar never allows: control tokens (they end
// turns or frame the template; the end-of-generation ids are passed apart), unknown tokens (<unk>
// stands for bytes the vocabulary lacks, not for its own spelling) and unused ones. The exception
// is a control token whose text is one of `kept_control`: a family whose calls are written with
// control tokens (LFM2's <|tool_call_start|>) gets them with that text, so its call grammar can
// match them.
//
// Thread-safety: a pure function of its arguments.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "grammar/grammar.h"
#include "tokenizer.h"

namespace picolm {

// n_vocab: the number of ids the model produces logits for (may exceed the tokenizer's; the ids
// beyond it get ""); < 0 = the tokenizer's n_vocab().
std::shared_ptr<const grammar::Vocabulary> grammar_vocabulary(const Tokenizer& tok, int32_t n_vocab = -1,
                                                              std::span<const std::string_view> kept_control = {});

}  // namespace picolm
