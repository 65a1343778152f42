// Result<T>: a value or an error message naming what is wrong (tier 1 errors, see STYLE.md).
// Header-only; no shared state.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace picolm {

struct Error {
  std::string message;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error e) : v_(std::move(e)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const std::string& error() const { return std::get<1>(v_).message; }

 private:
  std::variant<T, Error> v_;
};

// For functions that return nothing but may fail.
struct Ok {};
using Status = Result<Ok>;

}  // namespace picolm
