// Internal to the provider's wire-format parsers (openai.cpp, responses.cpp): the simdjson helpers
// that read and validate request fields, so every endpoint reports a wrong field the same way.
// Not a public header: it exposes simdjson types.
// Thread-safety: pure functions.
#pragma once
#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>

#include "openai.h"

namespace picolm::wire {

// Sets a 400 naming `param`; returns false.
bool fail(ApiError& err, std::string param, std::string message);
bool wrong_type(ApiError& err, const std::string& param, const char* expected, simdjson::dom::element e);
bool get_string(simdjson::dom::element e, const std::string& param, std::string& out, ApiError& err);
bool get_number(simdjson::dom::element e, const std::string& param, double lo, double hi, std::optional<double>& out,
                ApiError& err);
bool get_int(simdjson::dom::element e, const std::string& param, int64_t lo, int64_t hi, std::optional<int64_t>& out,
             ApiError& err);
// A content part of another type than text: the 400 for it. Image, audio and file parts say
// "this model does not support image|audio|file input" (code image_input_not_supported, ...);
// `supported` names the accepted types for any other type.
bool unsupported_content_part(ApiError& err, const std::string& param, const std::string& type,
                              const char* supported);
// The body as a JSON object: valid UTF-8 and JSON, an object, no key repeated in any object.
bool parse_json_body(std::string_view body, simdjson::dom::parser& parser, simdjson::dom::element& root,
                     ApiError& err);

}  // namespace picolm::wire
