// einsum: numpy's subscripts (parsed by einsum_subscripts.cpp) lowered to the
// existing ops. Each operand first takes the diagonal of a repeated letter and
// sums away letters no one else needs; operands are then contracted left to
// right, a pair at a time, as one (batched) matmul: shared letters still needed
// later are the batch, shared letters needed nowhere else are contracted. A
// final transpose puts the letters in output order. Integer operands (no matmul
// for them) multiply with broadcasting and sum instead.
#include <algorithm>
#include <string>
#include <vector>

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/einsum_subscripts.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

// An operand and the letter of each of its axes.
struct Term {
  Array value;
  std::string letters;
};

// The axes of `t` in the order of `letters` (a permutation of t.letters).
Term transposed(const Term& t, const std::string& letters) {
  if (t.letters == letters) return t;
  Axes perm;
  for (char c : letters) perm.push_back(static_cast<std::int64_t>(t.letters.find(c)));
  return {transpose(t.value, perm), letters};
}

std::int64_t size_of(const Term& t, char c) { return t.value.shape()[t.letters.find(c)]; }

// Replaces each repeated letter by one axis: the diagonal of its two axes.
Term take_diagonals(Term t) {
  for (std::size_t i = 0; i < t.letters.size(); ++i) {
    const std::size_t j = t.letters.find(t.letters[i], i + 1);
    if (j == std::string::npos) continue;
    const char c = t.letters[i];
    t.value = diagonal(t.value, 0, static_cast<std::int64_t>(i), static_cast<std::int64_t>(j));
    std::string rest;
    for (std::size_t k = 0; k < t.letters.size(); ++k) {
      if (k != i && k != j) rest += t.letters[k];
    }
    t.letters = rest + c;
    i = static_cast<std::size_t>(-1);  // start over: the positions moved
  }
  return t;
}

// Sums away the letters of `t` that `keep` does not contain.
Term sum_unneeded(const Term& t, const std::string& keep) {
  Axes axes;
  std::string left;
  for (std::size_t i = 0; i < t.letters.size(); ++i) {
    if (keep.find(t.letters[i]) == std::string::npos) {
      axes.push_back(static_cast<std::int64_t>(i));
    } else {
      left += t.letters[i];
    }
  }
  if (axes.empty()) return t;
  return {sum(t.value, axes), left};
}

// a x b with the letters of `keep` kept (the others shared by both summed).
Term contract(const Term& a, const Term& b, const std::string& keep) {
  std::string batch, contracted, a_only, b_only;
  for (char c : a.letters) {
    const bool in_b = b.letters.find(c) != std::string::npos;
    if (!in_b) {
      a_only += c;
    } else if (keep.find(c) != std::string::npos) {
      batch += c;
    } else {
      contracted += c;
    }
  }
  for (char c : b.letters) {
    if (a.letters.find(c) == std::string::npos) b_only += c;
  }
  const std::string out_letters = batch + a_only + b_only;
  const DType dt = a.value.dtype();
  if (!is_inexact(dt)) {
    // Both on the union of letters (size 1 where absent), multiplied, summed.
    const std::string all_letters = out_letters + contracted;
    auto expand = [&](const Term& t) {
      Shape shape;
      std::string present;
      for (char c : all_letters) {
        if (t.letters.find(c) != std::string::npos) present += c;
      }
      const Array v = transposed(t, present).value;
      for (char c : all_letters) {
        shape.push_back(t.letters.find(c) != std::string::npos ? size_of(t, c) : 1);
      }
      return reshape(v, shape);
    };
    Array product = expand(a) * expand(b);
    if (!contracted.empty()) {
      Axes axes;
      for (std::size_t i = out_letters.size(); i < all_letters.size(); ++i) {
        axes.push_back(static_cast<std::int64_t>(i));
      }
      product = sum(product, axes);
    }
    return {product, out_letters};
  }
  std::int64_t nb = 1, m = 1, k = 1, n = 1;
  Shape out_shape;
  for (char c : batch) {
    nb *= size_of(a, c);
    out_shape.push_back(size_of(a, c));
  }
  for (char c : a_only) {
    m *= size_of(a, c);
    out_shape.push_back(size_of(a, c));
  }
  for (char c : contracted) k *= size_of(a, c);
  for (char c : b_only) {
    n *= size_of(b, c);
    out_shape.push_back(size_of(b, c));
  }
  const Array lhs = transposed(a, batch + a_only + contracted).value;
  const Array rhs = transposed(b, batch + contracted + b_only).value;
  const Shape lhs_shape = batch.empty() ? Shape{m, k} : Shape{nb, m, k};
  const Shape rhs_shape = batch.empty() ? Shape{k, n} : Shape{nb, k, n};
  return {reshape(matmul(reshape(lhs, lhs_shape), reshape(rhs, rhs_shape)), out_shape),
          out_letters};
}

}  // namespace

Array einsum(std::string_view subscripts, std::span<const Array> operands) {
  if (operands.empty() || operands.size() > 3) {
    throw ValueError(detail::str_cat("[einsum] takes 1 to 3 operands, got ", operands.size()));
  }
  const detail::EinsumSubscripts parsed = detail::parse_einsum_subscripts(subscripts, operands.size());
  const std::vector<std::string>& inputs = parsed.inputs;
  const std::string& output = parsed.output;
  // Shapes and dtypes: each letter has one size.
  std::vector<Term> terms;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    const Array& x = operands[i];
    detail::check_not_none("einsum", x, detail::str_cat("operand ", i));
    if (static_cast<std::size_t>(x.ndim()) != inputs[i].size()) {
      throw ShapeError(detail::str_cat("[einsum] operand ", i, " has shape ", to_string(x.shape()),
                                       " (rank ", x.ndim(), ") but its subscripts \"", inputs[i],
                                       "\" name ", inputs[i].size(), " axes"));
    }
    if (x.dtype() != operands[0].dtype()) {
      throw DTypeError(detail::str_cat("[einsum] operand ", i, " has dtype ", name(x.dtype()),
                                       " but operand 0 has dtype ", name(operands[0].dtype()),
                                       " (kiln does not promote; use astype)"));
    }
    if (x.dtype() == DType::kBool) {
      throw DTypeError("[einsum] requires numeric operands, got bool");
    }
    terms.push_back({x, inputs[i]});
  }
  for (std::size_t i = 0; i < terms.size(); ++i) {
    for (std::size_t p = 0; p < inputs[i].size(); ++p) {
      const char c = inputs[i][p];
      for (std::size_t j = 0; j <= i; ++j) {
        const std::size_t q = inputs[j].find(c);
        if (q == std::string::npos) continue;
        const std::int64_t here = operands[i].shape()[p];
        const std::int64_t there = operands[j].shape()[q];
        if (here != there) {
          throw ShapeError(
              detail::str_cat("[einsum] letter '", c, "' has size ", there, " in operand ", j,
                              " (shape ", to_string(operands[j].shape()), ") but size ", here,
                              " in operand ", i, " (shape ", to_string(operands[i].shape()), ")"));
        }
      }
    }
  }
  // The letters needed after operand i: the output and the operands after i.
  auto needed_after = [&](std::size_t i) {
    std::string keep = output;
    for (std::size_t j = i + 1; j < inputs.size(); ++j) keep += inputs[j];
    return keep;
  };
  auto needed_except = [&](std::size_t i) {
    std::string keep = output;
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      if (j != i) keep += inputs[j];
    }
    return keep;
  };
  for (std::size_t i = 0; i < terms.size(); ++i) {
    terms[i] = sum_unneeded(take_diagonals(terms[i]), needed_except(i));
  }
  Term acc = terms[0];
  for (std::size_t i = 1; i < terms.size(); ++i) {
    acc = contract(acc, terms[i], needed_after(i));
  }
  return transposed(sum_unneeded(acc, output), output).value;
}

Array einsum(std::string_view subscripts, std::initializer_list<Array> operands) {
  return einsum(subscripts, std::span<const Array>(operands.begin(), operands.size()));
}

}  // namespace kiln
