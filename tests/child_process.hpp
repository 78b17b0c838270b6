// Runs one test case of this test binary in a child process, for what only a
// fresh process shows (environment read once, reports at exit).
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace kiln::test {

// The output (stdout and stderr) of this binary's test case `test` run with
// KILN_TEST_CHILD=1 and the environment assignments `env` ("A=1 B='x y'");
// checks that the child exited 0.
inline std::string run_child(const std::string& env, const std::string& test) {
  const std::string cmd = "KILN_TEST_CHILD=1 " + env + " /proc/" + std::to_string(::getpid()) +
                          "/exe -tc='" + test + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  CHECK(::pclose(p) == 0);
  return out;
}

}  // namespace kiln::test
