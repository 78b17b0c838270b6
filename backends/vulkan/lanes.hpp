// The lane type of dsl/f32_math.hpp for SPIR-V: each operator on these values
// emits one instruction through spv::Builder, so kiln's own f32 math compiles
// to the same sequence of correctly rounded operations on every driver. Float
// arithmetic is NoContraction (no driver may fuse a * b + c), float division is
// OpFDiv (2.5 ulp allowed by Vulkan; the algorithms place it where that does
// not reach the result's bound).
#pragma once

#include <cstdint>

#include "kiln/backends/vulkan/spirv.hpp"
#include "kiln/dsl/f32_math.hpp"

namespace kiln::vk {

// One value of a lane type: the builder it belongs to and its SPIR-V id.
template <spv::Ty T>
struct SpvLane {
  spv::Builder* b;
  spv::Val v;
};

class SpvLanes {
 public:
  explicit SpvLanes(spv::Builder& b) : b_(b), was_exact_(b.set_exact_float(true)) {}
  ~SpvLanes() { b_.set_exact_float(was_exact_); }
  SpvLanes(const SpvLanes&) = delete;
  SpvLanes& operator=(const SpvLanes&) = delete;

  template <spv::Ty T>
  using Lane = SpvLane<T>;
  using F = Lane<spv::Ty::kF32>;
  using I = Lane<spv::Ty::kI32>;
  using U = Lane<spv::Ty::kU32>;
  using M = Lane<spv::Ty::kBool>;

  F wrap(const spv::Val& v) const { return {&b_, v}; }

  F f(double v) const { return {&b_, b_.constant(spv::Ty::kF32, v)}; }
  I i(std::int32_t v) const { return {&b_, b_.constant(spv::Ty::kI32, v)}; }
  U u(std::uint32_t v) const { return {&b_, b_.constant(spv::Ty::kU32, v)}; }

  template <spv::Ty T>
  Lane<T> sel(const M& c, const Lane<T>& a, const Lane<T>& x) const {
    return {&b_, b_.select(c.v, a.v, x.v)};
  }
  M both(const M& a, const M& x) const { return logic("OpLogicalAnd", a, x); }
  M either(const M& a, const M& x) const { return logic("OpLogicalOr", a, x); }
  M negate(const M& a) const { return {&b_, b_.op("OpLogicalNot", spv::Ty::kBool, {a.v})}; }
  M isnan(const F& x) const { return {&b_, b_.op("OpIsNan", spv::Ty::kBool, {x.v})}; }
  F rint(const F& x) const { return {&b_, b_.glsl("RoundEven", spv::Ty::kF32, {x.v})}; }
  F sqrt(const F& x) const { return {&b_, b_.glsl("Sqrt", spv::Ty::kF32, {x.v})}; }
  F to_f(const I& x) const { return {&b_, b_.op("OpConvertSToF", spv::Ty::kF32, {x.v})}; }
  I to_i(const F& x) const { return {&b_, b_.op("OpConvertFToS", spv::Ty::kI32, {x.v})}; }
  U bits(const F& x) const { return {&b_, b_.op("OpBitcast", spv::Ty::kU32, {x.v})}; }
  F from_bits(const U& x) const { return {&b_, b_.op("OpBitcast", spv::Ty::kF32, {x.v})}; }
  U to_u(const I& x) const { return {&b_, b_.op("OpBitcast", spv::Ty::kU32, {x.v})}; }
  I to_i(const U& x) const { return {&b_, b_.op("OpBitcast", spv::Ty::kI32, {x.v})}; }

 private:
  M logic(const char* opcode, const M& a, const M& x) const {
    return {&b_, b_.op(opcode, spv::Ty::kBool, {a.v, x.v})};
  }
  spv::Builder& b_;
  bool was_exact_;
};

template <spv::Ty R, spv::Ty T>
SpvLane<R> lane_op(const char* opcode, const SpvLane<T>& a, const SpvLane<T>& x) {
  return {a.b, a.b->op(opcode, R, {a.v, x.v})};
}

// The operators (found by argument-dependent lookup from dsl/f32_math.hpp).

// Arithmetic: F (float opcodes), I and U (integer opcodes; wrapping).
template <spv::Ty T>
SpvLane<T> operator+(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<T>(T == spv::Ty::kF32 ? "OpFAdd" : "OpIAdd", a, x);
}
template <spv::Ty T>
SpvLane<T> operator-(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<T>(T == spv::Ty::kF32 ? "OpFSub" : "OpISub", a, x);
}
template <spv::Ty T>
SpvLane<T> operator*(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<T>(T == spv::Ty::kF32 ? "OpFMul" : "OpIMul", a, x);
}
inline SpvLane<spv::Ty::kF32> operator/(const SpvLane<spv::Ty::kF32>& a, const SpvLane<spv::Ty::kF32>& x) {
  return lane_op<spv::Ty::kF32>("OpFDiv", a, x);
}
inline SpvLane<spv::Ty::kF32> operator-(const SpvLane<spv::Ty::kF32>& a) {
  return {a.b, a.b->op("OpFNegate", spv::Ty::kF32, {a.v})};
}
// Bits (I and U).
template <spv::Ty T>
SpvLane<T> operator&(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<T>("OpBitwiseAnd", a, x);
}
template <spv::Ty T>
SpvLane<T> operator|(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<T>("OpBitwiseOr", a, x);
}
template <spv::Ty T>
SpvLane<T> operator^(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<T>("OpBitwiseXor", a, x);
}
template <spv::Ty T>
SpvLane<T> operator<<(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<T>("OpShiftLeftLogical", a, x);
}
template <spv::Ty T>
SpvLane<T> operator>>(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<T>(T == spv::Ty::kI32 ? "OpShiftRightArithmetic" : "OpShiftRightLogical", a, x);
}
// Comparisons: ordered for floats (false with NaN), as C++'s.
template <spv::Ty T>
SpvLane<spv::Ty::kBool> operator<(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<spv::Ty::kBool>(T == spv::Ty::kF32 ? "OpFOrdLessThan" : T == spv::Ty::kI32 ? "OpSLessThan" : "OpULessThan", a, x);
}
template <spv::Ty T>
SpvLane<spv::Ty::kBool> operator>(const SpvLane<T>& a, const SpvLane<T>& x) {
  return x < a;
}
template <spv::Ty T>
SpvLane<spv::Ty::kBool> operator<=(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<spv::Ty::kBool>(T == spv::Ty::kF32   ? "OpFOrdLessThanEqual"
                         : T == spv::Ty::kI32 ? "OpSLessThanEqual"
                                         : "OpULessThanEqual",
                         a, x);
}
template <spv::Ty T>
SpvLane<spv::Ty::kBool> operator>=(const SpvLane<T>& a, const SpvLane<T>& x) {
  return x <= a;
}
template <spv::Ty T>
SpvLane<spv::Ty::kBool> operator==(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<spv::Ty::kBool>(T == spv::Ty::kF32    ? "OpFOrdEqual"
                                 : T == spv::Ty::kBool ? "OpLogicalEqual"
                                                       : "OpIEqual",
                                 a, x);
}
template <spv::Ty T>
SpvLane<spv::Ty::kBool> operator!=(const SpvLane<T>& a, const SpvLane<T>& x) {
  return lane_op<spv::Ty::kBool>(T == spv::Ty::kF32    ? "OpFUnordNotEqual"
                                 : T == spv::Ty::kBool ? "OpLogicalNotEqual"
                                                       : "OpINotEqual",
                                 a, x);
}

namespace spv {
// Runs one f32m function on SPIR-V values of compute type f32 (found by
// argument-dependent lookup from dsl/unary_math.hpp's lowering templates).
template <class Fn>
Val f32_lanes(Builder& b, const Val& x, Fn&& fn) {
  SpvLanes k(b);
  return fn(k, k.wrap(x)).v;
}
template <class Fn>
Val f32_lanes(Builder& b, const Val& x, const Val& y, Fn&& fn) {
  SpvLanes k(b);
  return fn(k, k.wrap(x), k.wrap(y)).v;
}
}  // namespace spv

}  // namespace kiln::vk
