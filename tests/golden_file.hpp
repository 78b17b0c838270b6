// Reader for the committed golden-value files in tests/golden/ (written by the
// make_*golden.py scripts from JAX). One record per line:
//   <case> <name> <dtype> <shape a,b,c or - for 0-d> <values...>
// The directory comes from KILN_GOLDEN_DIR (set by meson), else tests/golden.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <kiln/kiln.hpp>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::testing {

struct GoldenRecord {
  std::string dtype;
  Shape shape;
  std::vector<double> values;  // exact for integers; f32 as written
};

// case -> name -> record
using GoldenFile = std::map<std::string, std::map<std::string, GoldenRecord>>;

inline GoldenFile load_golden_file(const std::string& file) {
  const char* dir = std::getenv("KILN_GOLDEN_DIR");
  const std::string path = std::string(dir ? dir : "tests/golden") + "/" + file;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  GoldenFile out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string case_name, name, shape_text;
    GoldenRecord r;
    ls >> case_name >> name >> r.dtype >> shape_text;
    std::istringstream ss(shape_text == "-" ? std::string() : shape_text);
    for (std::string d; std::getline(ss, d, ',');) r.shape.push_back(std::stoll(d));
    for (std::string x; ls >> x;) r.values.push_back(std::stod(x));  // "nan", "inf" too
    out[case_name][name] = std::move(r);
  }
  return out;
}

}  // namespace kiln::testing
