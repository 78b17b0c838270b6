// The message of the kiln::Error that `f` throws ("(no error)" when it throws
// none): for tests that compare whole messages.
#pragma once

#include <string>

#include <kiln/kiln.hpp>

namespace kiln::testing {

template <class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace kiln::testing
