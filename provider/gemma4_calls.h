// Gemma 4's tool calls read back into OpenAI calls (issue 33), whole or while they are written.
//
// The syntax, as the Gemma 4 template writes calls (its format_argument macro) and the grammar
// constrains them (grammar::ToolCallFormat::Gemma4):
//   <|tool_call>call:NAME{key:VALUE,...}<tool_call|>   (several calls side by side)
//   VALUE: <|"|>raw text<|"|> | {key:VALUE,...} | [VALUE,...] | a JSON number | true | false | null
// Keys are unquoted (or, as the template's escape_keys=True spelling has them, <|"|>-quoted);
// strings are the raw text, without escapes, so one never holds <|"|>. The reader also takes what
// the template can write that the grammar does not: None (Python's spelling of a null that Jinja
// prints) and whitespace after '{', '[', ',' and ':' (as llama.cpp's reader allows).
//
// Every value becomes the JSON it stands for, as it is read: an arguments object's JSON text is
// handed out piece by piece (a string's characters as they come, a number or literal when it
// ends), and the pieces of a call concatenate to its final arguments (compact JSON, members in
// the order written). A key written twice in one object is an error (the grammar never writes
// one; a reader that merged them would hide that).
//
// Thread-safety: a Gemma4CallReader belongs to one generation; parse_gemma4_calls is pure.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "chat_template.h"

namespace picolm {

struct Gemma4Event {
  enum class Kind { Start, Arguments, End };
  Kind kind = Kind::Start;
  size_t index = 0;   // the call's position in the reply
  std::string text;   // Start: the function name; Arguments: the next piece of the arguments JSON
};

class Gemma4CallReader {
 public:
  // text_between: text other than whitespace may stand before, between and after the calls
  // (it is skipped); otherwise it is an error.
  explicit Gemma4CallReader(bool text_between = false) : text_between_(text_between) {}

  // `text` is the reply so far (it only ever grows at its end); reads what is new and appends
  // the events it makes. After an error nothing more is read.
  void update(std::string_view text, std::vector<Gemma4Event>& events);
  // The reply is complete (text_size: its length): an error if a call is still open.
  void finish(size_t text_size);

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }  // what is wrong, with its byte offset
  bool in_call() const { return state_ != State::Outside; }
  size_t calls() const { return n_calls_; }

 private:
  enum class State {
    Outside,      // between calls: looking for <|tool_call>call:
    Name,         // the function name, up to '{'
    KeyOrClose,   // after '{': a key or '}'
    Key,          // after '{' or ',': a key
    UnquotedKey,  // a key's bytes, up to ':'
    QuotedKey,    // a <|"|>-quoted key's bytes, up to <|"|>
    Colon,        // after a quoted key
    Value,        // a value's first byte
    ValueOrClose, // after '[': a value or ']'
    String,       // a string's raw text, up to <|"|>
    Scalar,       // a number or literal, up to ',', '}' or ']'
    After,        // after a value: ',' or the container's close
    CallClose,    // after the arguments object: <tool_call|>
  };
  struct Container {
    bool object = false;
    std::vector<std::string> keys;  // objects: keys written so far
  };
  void fail(size_t at, const std::string& what);
  void emit(std::vector<Gemma4Event>& events, std::string piece);
  bool end_key(size_t at, std::string key, std::vector<Gemma4Event>& events);
  bool end_scalar(size_t at, std::vector<Gemma4Event>& events);
  void close_value();

  bool text_between_;
  State state_ = State::Outside;
  size_t pos_ = 0;         // bytes of the text read so far
  size_t n_calls_ = 0;     // calls started
  std::string token_;      // the name, key or scalar being read
  size_t token_at_ = 0;    // where it started
  std::vector<Container> stack_;
  std::string error_;
};

// The fixed texts of Gemma 4's protocol, for its per-family record (issue 31): the template is
// recognised by the call opener as its Jinja source spells it; the opener is also the trigger
// the constrained calls start with; a turn ends at <turn|> or where the model asks for results
// (<|tool_response>, an end-of-generation token in llama.cpp's vocabulary); thinking is written
// between the channel markers.
namespace gemma4 {
inline constexpr std::string_view kTemplateMarker = "'<|tool_call>call:'";
inline constexpr std::string_view kCallOpen = "<|tool_call>";
inline constexpr std::string_view kCallClose = "<tool_call|>";
inline constexpr std::string_view kQuote = "<|\"|>";  // opens and closes a string
inline constexpr std::string_view kThinkingOpen = "<|channel>thought";
inline constexpr std::string_view kThinkingClose = "<channel|>";
inline constexpr std::string_view kStops[] = {"<turn|>", "<|tool_response>"};
}  // namespace gemma4

// Whether a chat template (Jinja source) writes Gemma 4's calls.
inline bool is_gemma4_template(std::string_view jinja_text) {
  return jinja_text.find(gemma4::kTemplateMarker) != std::string_view::npos;
}

struct Gemma4Calls {
  std::vector<ToolCall> calls;  // id left empty; arguments_json compact JSON
  std::string error;            // "" when every call was read whole
  bool ok() const { return error.empty(); }
};

// Reads the calls of a complete reply (see Gemma4CallReader for text_between). On an error the
// calls read whole before it are kept and `error` says what is wrong.
Gemma4Calls parse_gemma4_calls(std::string_view text, bool text_between = false);

}  // namespace picolm
