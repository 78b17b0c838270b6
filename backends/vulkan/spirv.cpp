// SPIR-V assembly builder and the SPIRV-Tools assemble/validate/optimize step.
#include "kiln/backends/vulkan/spirv.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <spirv-tools/libspirv.hpp>
#include <spirv-tools/optimizer.hpp>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk::spv {
namespace {

const char* ty_name(Ty t) {
  switch (t) {
    case Ty::kBool: return "bool";
    case Ty::kI32: return "i32";
    case Ty::kU32: return "u32";
    case Ty::kF32: return "f32";
    case Ty::kF64: return "f64";
  }
  return "?";
}

template <class Bits, class F>
Bits bits_of(F f) {
  Bits b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// Float literal text the assembler reads exactly (hex floats; inf/nan spelled the
// way SPIRV-Tools prints them).
std::string float_literal(double v, bool is64) {
  const int emax = is64 ? 1024 : 128;
  if (std::isnan(v)) return detail::str_cat("0x1.8p+", emax);
  if (std::isinf(v)) return detail::str_cat(v < 0 ? "-" : "", "0x1p+", emax);
  char buf[64];
  if (is64) {
    std::snprintf(buf, sizeof(buf), "%a", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%a", static_cast<double>(static_cast<float>(v)));
  }
  return buf;
}

}  // namespace

Ty compute_type(DType d) {
  switch (d) {
    case DType::kBool: return Ty::kBool;
    case DType::kI32: return Ty::kI32;
    case DType::kU32: return Ty::kU32;
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32: return Ty::kF32;
    case DType::kF64: return Ty::kF64;
  }
  return Ty::kF32;
}
bool is_float(Ty t) { return t == Ty::kF32 || t == Ty::kF64; }
bool is_signed(Ty t) { return t == Ty::kI32; }

Builder::Builder(std::uint32_t local_size, int push_words, std::uint32_t addressed)
    : local_size_(local_size), push_words_(push_words), addressed_(addressed) {
  caps_.push_back("OpCapability Shader");
  type_id(Ty::kU32);
  globals_.push_back("%void = OpTypeVoid");
  globals_.push_back("%fn = OpTypeFunction %void");
  globals_.push_back("%v3u32 = OpTypeVector %u32 3");
  globals_.push_back("%p_in_v3u32 = OpTypePointer Input %v3u32");
  for (auto [var, builtin] : {std::pair{&wg_id_, "WorkgroupId"},
                              std::pair{&num_wg_, "NumWorkgroups"},
                              std::pair{&local_id_, "LocalInvocationId"}}) {
    *var = detail::str_cat("%", builtin);
    globals_.push_back(detail::str_cat(*var, " = OpVariable %p_in_v3u32 Input"));
    decorations_.push_back(detail::str_cat("OpDecorate ", *var, " BuiltIn ", builtin));
    interface_.push_back(*var);
  }
}

std::string Builder::fresh() { return detail::str_cat("%", ++next_); }

std::string Builder::type_id(Ty t) {
  const std::string id = detail::str_cat("%", ty_name(t));
  if (std::find(declared_.begin(), declared_.end(), id) != declared_.end()) return id;
  declared_.push_back(id);
  switch (t) {
    case Ty::kBool: globals_.push_back(id + " = OpTypeBool"); break;
    case Ty::kI32: globals_.push_back(id + " = OpTypeInt 32 1"); break;
    case Ty::kU32: globals_.push_back(id + " = OpTypeInt 32 0"); break;
    case Ty::kF32: globals_.push_back(id + " = OpTypeFloat 32"); break;
    case Ty::kF64:
      if (!f64_) caps_.push_back("OpCapability Float64");
      f64_ = true;
      globals_.push_back(id + " = OpTypeFloat 64");
      break;
  }
  return id;
}

std::string Builder::ptr_type(const char* storage, const std::string& pointee) {
  const std::string id = detail::str_cat("%p_", storage, "_", pointee.substr(1));
  if (std::find(declared_.begin(), declared_.end(), id) == declared_.end()) {
    declared_.push_back(id);
    globals_.push_back(detail::str_cat(id, " = OpTypePointer ", storage, " ", pointee));
  }
  return id;
}

void Builder::need_u8() {
  if (u8_) return;
  u8_ = true;
  caps_.push_back("OpCapability StorageBuffer8BitAccess");
  globals_.push_back("%u8 = OpTypeInt 8 0");
}

void Builder::need_storage16() {
  if (storage16_) return;
  storage16_ = true;
  caps_.push_back("OpCapability StorageBuffer16BitAccess");
}

void Builder::need_f16() {
  if (f16_) return;
  f16_ = true;
  need_storage16();
  globals_.push_back("%f16 = OpTypeFloat 16");
}

void Builder::need_u16() {
  if (u16_) return;
  u16_ = true;
  need_storage16();
  globals_.push_back("%u16 = OpTypeInt 16 0");
}

int Builder::buffer(DType dtype, bool readonly) {
  std::string elem;
  switch (dtype) {
    case DType::kBool: need_u8(); elem = "%u8"; break;
    case DType::kF16: need_f16(); elem = "%f16"; break;
    case DType::kBF16: need_u16(); elem = "%u16"; break;  // bits
    default: elem = type_id(compute_type(dtype)); break;
  }
  return declare_buffer(dtype, readonly, elem, size_of(dtype), false);
}

int Builder::buffer4(DType dtype, bool readonly) {
  const std::string scalar = type_id(compute_type(dtype));
  const std::string elem = detail::str_cat("%v4", scalar.substr(1));
  if (std::find(declared_.begin(), declared_.end(), elem) == declared_.end()) {
    declared_.push_back(elem);
    globals_.push_back(detail::str_cat(elem, " = OpTypeVector ", scalar, " 4"));
  }
  return declare_buffer(dtype, readonly, elem, 16, true);
}

int Builder::buffer8(DType dtype, bool readonly) {
  if (!u64_) {
    u64_ = true;
    caps_.push_back("OpCapability Int64");
    globals_.push_back("%u64 = OpTypeInt 64 0");
    globals_.push_back("%v4u64 = OpTypeVector %u64 4");
  }
  const std::string scalar = type_id(compute_type(dtype));
  const std::string pair = detail::str_cat("%v2", scalar.substr(1));
  if (std::find(declared_.begin(), declared_.end(), pair) == declared_.end()) {
    declared_.push_back(pair);
    globals_.push_back(detail::str_cat(pair, " = OpTypeVector ", scalar, " 2"));
  }
  return declare_buffer(dtype, readonly, "%v4u64", 32, true);
}

int Builder::texel_buffer4(DType dtype) {
  // A texel view is a descriptor too, limited like one: an addressed binding
  // reads its 4-vectors through its address instead (load4 alike).
  if (addressed(static_cast<int>(bindings_.size()))) return buffer4(dtype, true);
  const Ty t = compute_type(dtype);
  const std::string scalar = type_id(t);
  const std::string vec = detail::str_cat("%v4", scalar.substr(1));
  if (std::find(declared_.begin(), declared_.end(), vec) == declared_.end()) {
    declared_.push_back(vec);
    globals_.push_back(detail::str_cat(vec, " = OpTypeVector ", scalar, " 4"));
  }
  const std::string img = detail::str_cat("%img_", scalar.substr(1));
  if (std::find(declared_.begin(), declared_.end(), img) == declared_.end()) {
    if (std::find(caps_.begin(), caps_.end(), "OpCapability SampledBuffer") == caps_.end()) {
      caps_.push_back("OpCapability SampledBuffer");
    }
    declared_.push_back(img);
    globals_.push_back(detail::str_cat(img, " = OpTypeImage ", scalar, " Buffer 0 0 0 1 Unknown"));
  }
  const int index = static_cast<int>(bindings_.size());
  const std::string var = detail::str_cat("%buf", index);
  globals_.push_back(detail::str_cat(var, " = OpVariable ", ptr_type("UniformConstant", img),
                                     " UniformConstant"));
  decorations_.push_back(detail::str_cat("OpDecorate ", var, " DescriptorSet 0"));
  decorations_.push_back(detail::str_cat("OpDecorate ", var, " Binding ", index));
  interface_.push_back(var);
  bindings_.push_back({dtype, var, "", img, true, true});
  return index;
}

// Accesses through a physical pointer name their alignment (the element's or
// vector's size; arrays start 64-byte aligned).
std::string Builder::aligned(const Binding& b) {
  return b.align == 0 ? std::string() : detail::str_cat(" Aligned ", b.align);
}

std::uint32_t Builder::texel_bindings() const {
  std::uint32_t mask = 0;
  for (std::size_t i = 0; i < bindings_.size(); ++i) {
    if (bindings_[i].texel) mask |= 1u << i;
  }
  return mask;
}

std::array<Val, 8> Builder::load8(int binding, const Val& index) {
  const Binding& b = bindings_[static_cast<std::size_t>(binding)];
  const std::string ptr = fresh();
  emit(detail::str_cat(ptr, " = OpAccessChain ", b.elem_ptr, " ", b.var, " ",
                       u32(0).id, " ", index.id));
  const std::string vec = fresh();
  emit(detail::str_cat(vec, " = OpLoad %v4u64 ", ptr, aligned(b)));
  const Ty t = compute_type(b.dtype);
  const std::string scalar = type_id(t);
  const std::string pair_ty = detail::str_cat("%v2", scalar.substr(1));
  std::array<Val, 8> out;
  for (int c = 0; c < 4; ++c) {
    const std::string wide = fresh(), pair = fresh();
    emit(detail::str_cat(wide, " = OpCompositeExtract %u64 ", vec, " ", c));
    emit(detail::str_cat(pair, " = OpBitcast ", pair_ty, " ", wide));  // low word first
    for (int h = 0; h < 2; ++h) {
      Val& v = out[static_cast<std::size_t>(2 * c + h)];
      v = {fresh(), t};
      emit(detail::str_cat(v.id, " = OpCompositeExtract ", scalar, " ", pair, " ", h));
    }
  }
  return out;
}

int Builder::declare_buffer(DType dtype, bool readonly, const std::string& elem,
                            std::size_t stride, bool vec4) {
  const int index = static_cast<int>(bindings_.size());
  const std::string arr = detail::str_cat("%rta_", elem.substr(1));
  const std::string st = detail::str_cat("%Buf_", elem.substr(1));
  if (std::find(declared_.begin(), declared_.end(), arr) == declared_.end()) {
    declared_.push_back(arr);
    globals_.push_back(detail::str_cat(arr, " = OpTypeRuntimeArray ", elem));
    globals_.push_back(detail::str_cat(st, " = OpTypeStruct ", arr));
    decorations_.push_back(detail::str_cat("OpDecorate ", arr, " ArrayStride ", stride));
    decorations_.push_back(detail::str_cat("OpDecorate ", st, " Block"));
    decorations_.push_back(detail::str_cat("OpMemberDecorate ", st, " 0 Offset 0"));
  }
  if (addressed(index)) {
    // Read and written through the pointer whose two words are push constant
    // member address_member(k) (a u32 pair: a pointer there would make the
    // validator ask for 8-bit push constants when it points to bytes), loaded
    // once in the entry block so that it dominates every access.
    if (!psb_) {
      psb_ = true;
      caps_.push_back("OpCapability PhysicalStorageBufferAddresses");
    }
    // A pointer to bytes or 16-bit words made from an address needs the full
    // types (Capabilities::address_int8 / address_float16 / address_int16).
    for (auto [type, cap] : {std::pair{"%u8", "OpCapability Int8"},
                             std::pair{"%f16", "OpCapability Float16"},
                             std::pair{"%u16", "OpCapability Int16"}}) {
      if (elem == type && std::find(caps_.begin(), caps_.end(), cap) == caps_.end()) {
        caps_.push_back(cap);
      }
    }
    const std::string pst = ptr_type("PhysicalStorageBuffer", st);
    const int member = address_member(static_cast<int>(address_types_.size()));
    address_types_.push_back(pst);
    if (std::find(declared_.begin(), declared_.end(), "%v2u32") == declared_.end()) {
      declared_.push_back("%v2u32");
      globals_.push_back("%v2u32 = OpTypeVector %u32 2");
    }
    const std::string at = fresh(), words = fresh(), ptr = detail::str_cat("%addr", index);
    prologue_.push_back(detail::str_cat(at, " = OpAccessChain ", ptr_type("PushConstant", "%v2u32"),
                                        " %push ", constant(Ty::kI32, member).id));
    prologue_.push_back(detail::str_cat(words, " = OpLoad %v2u32 ", at));
    prologue_.push_back(detail::str_cat(ptr, " = OpBitcast ", pst, " ", words));
    bindings_.push_back({dtype, ptr, ptr_type("PhysicalStorageBuffer", elem), elem, vec4,
                         false, static_cast<std::uint32_t>(stride)});
    return index;
  }
  const std::string pst = ptr_type("StorageBuffer", st);
  const std::string pelem = ptr_type("StorageBuffer", elem);
  const std::string var = detail::str_cat("%buf", index);
  globals_.push_back(detail::str_cat(var, " = OpVariable ", pst, " StorageBuffer"));
  decorations_.push_back(detail::str_cat("OpDecorate ", var, " DescriptorSet 0"));
  decorations_.push_back(detail::str_cat("OpDecorate ", var, " Binding ", index));
  if (readonly) decorations_.push_back(detail::str_cat("OpDecorate ", var, " NonWritable"));
  interface_.push_back(var);
  bindings_.push_back({dtype, var, pelem, elem, vec4});
  return index;
}

int Builder::address_member(int k) const {
  return static_cast<int>(address_word(static_cast<std::uint32_t>(push_words_))) + k;
}

std::array<Val, 4> Builder::load4(int binding, const Val& index) {
  const Binding& b = bindings_[static_cast<std::size_t>(binding)];
  const Ty t = compute_type(b.dtype);
  const std::string vec = fresh();
  if (b.texel) {
    const std::string image = fresh();
    emit(detail::str_cat(image, " = OpLoad ", b.storage_type, " ", b.var));
    emit(detail::str_cat(vec, " = OpImageFetch %v4", type_id(t).substr(1), " ", image, " ",
                         index.id));
  } else {
    const std::string ptr = fresh();
    emit(detail::str_cat(ptr, " = OpAccessChain ", b.elem_ptr, " ", b.var, " ",
                         u32(0).id, " ", index.id));
    emit(detail::str_cat(vec, " = OpLoad ", b.storage_type, " ", ptr, aligned(b)));
  }
  std::array<Val, 4> out;
  for (int c = 0; c < 4; ++c) {
    out[static_cast<std::size_t>(c)] = {fresh(), t};
    emit(detail::str_cat(out[static_cast<std::size_t>(c)].id, " = OpCompositeExtract ",
                         type_id(t), " ", vec, " ", c));
  }
  return out;
}

void Builder::store4(int binding, const Val& index, const std::array<Val, 4>& v) {
  const Binding& b = bindings_[static_cast<std::size_t>(binding)];
  const Ty t = compute_type(b.dtype);
  std::array<std::string, 4> ids;
  for (std::size_t c = 0; c < 4; ++c) ids[c] = convert(v[c], t).id;
  const std::string vec = fresh();
  std::string line = detail::str_cat(vec, " = OpCompositeConstruct ", b.storage_type);
  for (const auto& id : ids) line += " " + id;
  emit(std::move(line));
  const std::string ptr = fresh();
  emit(detail::str_cat(ptr, " = OpAccessChain ", b.elem_ptr, " ", b.var, " ",
                       u32(0).id, " ", index.id));
  emit(detail::str_cat("OpStore ", ptr, " ", vec, aligned(b)));
}

Val Builder::load(int binding, const Val& index) {
  const Binding& b = bindings_[static_cast<std::size_t>(binding)];
  const std::string ptr = fresh();
  emit(detail::str_cat(ptr, " = OpAccessChain ", b.elem_ptr, " ", b.var, " ",
                       u32(0).id, " ", index.id));
  const std::string raw = fresh();
  emit(detail::str_cat(raw, " = OpLoad ", b.storage_type, " ", ptr, aligned(b)));
  if (b.dtype == DType::kBool) {
    Val wide = {fresh(), Ty::kU32};
    emit(detail::str_cat(wide.id, " = OpUConvert %u32 ", raw));
    return op("OpINotEqual", Ty::kBool, {wide, u32(0)});
  }
  if (b.dtype == DType::kF16) {
    Val wide = {fresh(), Ty::kF32};
    emit(detail::str_cat(wide.id, " = OpFConvert ", type_id(Ty::kF32), " ", raw));
    return wide;
  }
  if (b.dtype == DType::kBF16) {  // the upper half of an f32: exact
    Val word = {fresh(), Ty::kU32};
    emit(detail::str_cat(word.id, " = OpUConvert %u32 ", raw));
    return bitcast(op("OpShiftLeftLogical", Ty::kU32, {word, u32(16)}), Ty::kF32);
  }
  return {raw, compute_type(b.dtype)};
}

void Builder::store(int binding, const Val& index, const Val& v) {
  const Binding& b = bindings_[static_cast<std::size_t>(binding)];
  std::string value = convert(v, compute_type(b.dtype)).id;
  if (b.dtype == DType::kBool) {
    Val word = select(v.ty == Ty::kBool ? v : convert(v, Ty::kBool), u32(1), u32(0));
    value = fresh();
    emit(detail::str_cat(value, " = OpUConvert %u8 ", word.id));
  } else if (b.dtype == DType::kF16) {
    const std::string narrow = fresh();
    emit(detail::str_cat(narrow, " = OpFConvert %f16 ", value));
    value = narrow;
  } else if (b.dtype == DType::kBF16) {
    const std::string narrow = fresh();
    emit(detail::str_cat(narrow, " = OpUConvert %u16 ", bf16_word({value, Ty::kF32}).id));
    value = narrow;
  }
  const std::string ptr = fresh();
  emit(detail::str_cat(ptr, " = OpAccessChain ", b.elem_ptr, " ", b.var, " ",
                       u32(0).id, " ", index.id));
  emit(detail::str_cat("OpStore ", ptr, " ", value, aligned(b)));
}

Val Builder::push(int word) {
  const std::string ptr = fresh();
  emit(detail::str_cat(ptr, " = OpAccessChain %p_push_u32 %push ",
                       constant(Ty::kI32, word).id));
  Val v{fresh(), Ty::kU32};
  emit(detail::str_cat(v.id, " = OpLoad %u32 ", ptr));
  return v;
}

std::string Builder::builtin_vec(const char* builtin) {
  const std::string v = fresh();
  emit(detail::str_cat(v, " = OpLoad %v3u32 %", builtin));
  return v;
}

Val Builder::invocation() {
  const std::string v = builtin_vec("LocalInvocationId");
  Val x{fresh(), Ty::kU32};
  emit(detail::str_cat(x.id, " = OpCompositeExtract %u32 ", v, " 0"));
  return x;
}

Val Builder::workgroup() {
  const std::string id = builtin_vec("WorkgroupId");
  const std::string count = builtin_vec("NumWorkgroups");
  Val x{fresh(), Ty::kU32}, y{fresh(), Ty::kU32}, nx{fresh(), Ty::kU32};
  emit(detail::str_cat(x.id, " = OpCompositeExtract %u32 ", id, " 0"));
  emit(detail::str_cat(y.id, " = OpCompositeExtract %u32 ", id, " 1"));
  emit(detail::str_cat(nx.id, " = OpCompositeExtract %u32 ", count, " 0"));
  return op("OpIAdd", Ty::kU32, {x, op("OpIMul", Ty::kU32, {y, nx})});
}

Val Builder::workgroup_id(int component) {
  const std::string id = builtin_vec("WorkgroupId");
  Val x{fresh(), Ty::kU32};
  emit(detail::str_cat(x.id, " = OpCompositeExtract %u32 ", id, " ", component));
  return x;
}

Val Builder::global_index() {
  return op("OpIAdd", Ty::kU32,
            {op("OpIMul", Ty::kU32, {workgroup(), u32(local_size_)}), invocation()});
}

Val Builder::constant(Ty t, double v) {
  std::string text;
  std::string key;
  switch (t) {
    case Ty::kBool: {
      const std::string id = v != 0 ? "%true" : "%false";
      if (std::find(declared_.begin(), declared_.end(), id) == declared_.end()) {
        declared_.push_back(id);
        globals_.push_back(detail::str_cat(id, " = OpConstant",
                                           v != 0 ? "True " : "False ", type_id(t)));
      }
      return {id, t};
    }
    case Ty::kI32: {
      const auto x = static_cast<std::int32_t>(v);
      text = detail::str_cat(x);
      key = detail::str_cat(x < 0 ? "m" : "", x < 0 ? -static_cast<std::int64_t>(x) : x);
      break;
    }
    case Ty::kU32: {
      const auto x = static_cast<std::uint32_t>(v);
      text = detail::str_cat(x);
      key = text;
      break;
    }
    case Ty::kF32: {
      const float f = static_cast<float>(v);
      text = float_literal(f, false);
      key = detail::str_cat(bits_of<std::uint32_t>(f));
      break;
    }
    case Ty::kF64:
      text = float_literal(v, true);
      key = detail::str_cat(bits_of<std::uint64_t>(v));
      break;
  }
  const std::string type = type_id(t);
  const std::string id = detail::str_cat("%c_", ty_name(t), "_", key);
  if (std::find(declared_.begin(), declared_.end(), id) == declared_.end()) {
    declared_.push_back(id);
    globals_.push_back(detail::str_cat(id, " = OpConstant ", type, " ", text));
  }
  return {id, t};
}

Val Builder::op(const char* opcode, Ty result, std::initializer_list<Val> args) {
  Val r{fresh(), result};
  std::string line = detail::str_cat(r.id, " = ", opcode, " ", type_id(result));
  for (const auto& a : args) line += " " + a.id;
  emit(std::move(line));
  if (exact_float_ && (std::strcmp(opcode, "OpFAdd") == 0 || std::strcmp(opcode, "OpFSub") == 0 ||
                       std::strcmp(opcode, "OpFMul") == 0)) {
    no_contraction(r);
  }
  return r;
}

Val Builder::glsl(const char* inst, Ty result, std::initializer_list<Val> args) {
  glsl_ = true;  // the module imports GLSL.std.450 only when a kernel uses it
  Val r{fresh(), result};
  std::string line =
      detail::str_cat(r.id, " = OpExtInst ", type_id(result), " %glsl ", inst);
  for (const auto& a : args) line += " " + a.id;
  emit(std::move(line));
  return r;
}

Val Builder::select(const Val& c, const Val& a, const Val& b) {
  return op("OpSelect", a.ty, {c, a, b});
}

Val Builder::round_f16(const Val& v) {
  need_f16();
  const std::string narrow = fresh();
  emit(detail::str_cat(narrow, " = OpFConvert %f16 ", v.id));
  Val wide{fresh(), Ty::kF32};
  emit(detail::str_cat(wide.id, " = OpFConvert ", type_id(Ty::kF32), " ", narrow));
  return wide;
}

// runtime/half.hpp's float_to_bf16 in integer instructions (so no float mode
// of the driver can change it): NaN keeps its upper half, made quiet;
// anything else adds 0x7fff plus the lowest kept bit, which carries into the
// kept half exactly when rounding to nearest-even goes up.
Val Builder::bf16_word(const Val& v) {
  const Val bits = bitcast(v, Ty::kU32);
  const Val upper = op("OpShiftRightLogical", Ty::kU32, {bits, u32(16)});
  const Val magnitude = op("OpBitwiseAnd", Ty::kU32, {bits, u32(0x7fffffffu)});
  const Val is_nan = op("OpUGreaterThan", Ty::kBool, {magnitude, u32(0x7f800000u)});
  const Val lsb = op("OpBitwiseAnd", Ty::kU32, {upper, u32(1)});
  const Val bias = op("OpIAdd", Ty::kU32, {lsb, u32(0x7fffu)});
  const Val rounded =
      op("OpShiftRightLogical", Ty::kU32, {op("OpIAdd", Ty::kU32, {bits, bias}), u32(16)});
  return select(is_nan, op("OpBitwiseOr", Ty::kU32, {upper, u32(0x40u)}), rounded);
}

Val Builder::round_bf16(const Val& v) {
  return bitcast(op("OpShiftLeftLogical", Ty::kU32, {bf16_word(v), u32(16)}), Ty::kF32);
}

Val Builder::round_to(DType d, const Val& v) {
  if (d == DType::kF16) return round_f16(v);
  if (d == DType::kBF16) return round_bf16(v);
  return v;
}

void Builder::decorate_binding(int binding, const char* decoration) {
  decorations_.push_back(
      detail::str_cat("OpDecorate ", bindings_[static_cast<std::size_t>(binding)].var, " ", decoration));
}

void Builder::memory_barrier() {
  // Scope Device = 1; semantics AcquireRelease (0x8) | UniformMemory (0x40).
  emit(detail::str_cat("OpMemoryBarrier ", u32(1).id, " ", u32(0x48).id));
}

void Builder::no_contraction(const Val& v) {
  decorations_.push_back(detail::str_cat("OpDecorate ", v.id, " NoContraction"));
}

Val Builder::frexp(const Val& x, const Var& exponent) {
  glsl_ = true;
  Val r{fresh(), x.ty};
  emit(detail::str_cat(r.id, " = OpExtInst ", type_id(x.ty), " %glsl Frexp ", x.id, " ",
                       exponent.id));
  return r;
}

Val Builder::bitcast(const Val& v, Ty to) {
  if (v.ty == to) return v;
  return op("OpBitcast", to, {v});
}

Val Builder::convert(const Val& v, Ty to) {
  const Ty from = v.ty;
  if (from == to) return v;
  if (to == Ty::kBool) {
    if (is_float(from)) return op("OpFUnordNotEqual", Ty::kBool, {v, constant(from, 0)});
    return op("OpINotEqual", Ty::kBool, {v, constant(from, 0)});
  }
  if (from == Ty::kBool) return select(v, constant(to, 1), constant(to, 0));
  if (is_float(from) && is_float(to)) return op("OpFConvert", to, {v});
  if (!is_float(from) && is_float(to)) {
    return op(is_signed(from) ? "OpConvertSToF" : "OpConvertUToF", to, {v});
  }
  if (is_float(from)) {  // float -> integer: saturate, NaN -> 0 (as the CPU)
    const bool s = is_signed(to);
    const double lo = s ? -2147483648.0 : 0.0;
    const double top = s ? 2147483648.0 : 4294967296.0;  // first value out of range
    const double below = from == Ty::kF64
                             ? top - 1.0
                             : static_cast<double>(std::nextafter(
                                   static_cast<float>(top), 0.0f));
    Val clamped = glsl("FClamp", from, {v, constant(from, lo), constant(from, below)});
    Val conv = op(s ? "OpConvertFToS" : "OpConvertFToU", to, {clamped});
    Val high = op("OpFOrdGreaterThanEqual", Ty::kBool, {v, constant(from, top)});
    Val r = select(high, constant(to, s ? 2147483647.0 : 4294967295.0), conv);
    Val nan = op("OpIsNan", Ty::kBool, {v});
    return select(nan, constant(to, 0), r);
  }
  return op("OpBitcast", to, {v});  // i32 <-> u32: the bit pattern (wraps)
}

void Builder::need_capability(const std::string& cap) {
  const std::string line = "OpCapability " + cap;
  if (std::find(caps_.begin(), caps_.end(), line) == caps_.end()) caps_.push_back(line);
}

std::string Builder::coop_type(DType elem, std::uint32_t rows, std::uint32_t cols) {
  if (std::find(extensions_.begin(), extensions_.end(), "SPV_NV_cooperative_matrix") ==
      extensions_.end()) {
    extensions_.push_back("SPV_NV_cooperative_matrix");
  }
  need_capability("CooperativeMatrixNV");
  std::string scalar;
  if (elem == DType::kF16) {
    need_f16();
    need_capability("Float16");
    scalar = "%f16";
  } else {
    scalar = type_id(compute_type(elem));
  }
  const std::string scope = u32(3).id;  // Subgroup
  const std::string r = u32(rows).id, c = u32(cols).id;
  const std::string id = detail::str_cat("%coop_", scalar.substr(1), "_", rows, "x", cols);
  if (std::find(declared_.begin(), declared_.end(), id) == declared_.end()) {
    declared_.push_back(id);
    globals_.push_back(detail::str_cat(id, " = OpTypeCooperativeMatrixNV ", scalar, " ", scope,
                                       " ", r, " ", c));
  }
  return id;
}

std::string Builder::element_ptr(int binding, const Val& index) {
  const Binding& b = bindings_[static_cast<std::size_t>(binding)];
  const std::string ptr = fresh();
  emit(detail::str_cat(ptr, " = OpAccessChain ", b.elem_ptr, " ", b.var, " ", u32(0).id, " ",
                       index.id));
  return ptr;
}

std::string Builder::coop_load(const std::string& type, int binding, const Val& index,
                               const Val& stride) {
  const std::string ptr = element_ptr(binding, index), r = fresh();
  emit(detail::str_cat(r, " = OpCooperativeMatrixLoadNV ", type, " ", ptr, " ", stride.id, " ",
                       constant(Ty::kBool, 0).id));
  return r;
}

void Builder::coop_store(int binding, const Val& index, const std::string& value,
                         const Val& stride) {
  const std::string ptr = element_ptr(binding, index);
  emit(detail::str_cat("OpCooperativeMatrixStoreNV ", ptr, " ", value, " ", stride.id, " ",
                       constant(Ty::kBool, 0).id));
}

std::string Builder::coop_muladd(const std::string& type, const std::string& a,
                                 const std::string& b, const std::string& c) {
  const std::string r = fresh();
  emit(detail::str_cat(r, " = OpCooperativeMatrixMulAddNV ", type, " ", a, " ", b, " ", c));
  return r;
}

std::string Builder::coop_fill(const std::string& type, Ty elem, double v) {
  const std::string id = detail::str_cat(type, "_fill_", constant(elem, v).id.substr(1));
  if (std::find(declared_.begin(), declared_.end(), id) == declared_.end()) {
    declared_.push_back(id);
    globals_.push_back(detail::str_cat(id, " = OpConstantComposite ", type, " ",
                                       constant(elem, v).id));
  }
  return id;
}

std::string Builder::coop_convert(const std::string& type, const std::string& v) {
  const std::string r = fresh();
  emit(detail::str_cat(r, " = OpFConvert ", type, " ", v));
  return r;
}

std::string Builder::coop_variable(const std::string& type) {
  const std::string v = fresh();
  vars_.push_back(detail::str_cat(v, " = OpVariable ", ptr_type("Function", type), " Function"));
  return v;
}

std::string Builder::coop_get(const std::string& type, const std::string& var) {
  const std::string r = fresh();
  emit(detail::str_cat(r, " = OpLoad ", type, " ", var));
  return r;
}

void Builder::coop_set(const std::string& var, const std::string& v) {
  emit(detail::str_cat("OpStore ", var, " ", v));
}

Val Builder::subgroup_id() {
  if (subgroup_id_.empty()) {
    need_capability("GroupNonUniform");
    subgroup_id_ = "%SubgroupId";
    globals_.push_back(detail::str_cat(subgroup_id_, " = OpVariable ",
                                       ptr_type("Input", type_id(Ty::kU32)), " Input"));
    decorations_.push_back(detail::str_cat("OpDecorate ", subgroup_id_, " BuiltIn SubgroupId"));
    interface_.push_back(subgroup_id_);
  }
  Val r{fresh(), Ty::kU32};
  emit(detail::str_cat(r.id, " = OpLoad %u32 ", subgroup_id_));
  return r;
}

Var Builder::variable(Ty t) {
  Var v{fresh(), t};
  vars_.push_back(detail::str_cat(v.id, " = OpVariable ",
                                  ptr_type("Function", type_id(t)), " Function"));
  return v;
}

Val Builder::get(const Var& v) {
  Val r{fresh(), v.ty};
  emit(detail::str_cat(r.id, " = OpLoad ", type_id(v.ty), " ", v.id));
  return r;
}

void Builder::set(const Var& v, const Val& x) {
  emit(detail::str_cat("OpStore ", v.id, " ", x.id));
}

int Builder::shared(Ty t, std::uint32_t count) {
  const int id = static_cast<int>(shared_.size());
  const std::string elem = type_id(t);
  const std::string arr = detail::str_cat("%sharr", id);
  globals_.push_back(
      detail::str_cat(arr, " = OpTypeArray ", elem, " ", u32(count).id));
  const std::string var = detail::str_cat("%shared", id);
  globals_.push_back(detail::str_cat(var, " = OpVariable ",
                                     ptr_type("Workgroup", arr), " Workgroup"));
  interface_.push_back(var);
  shared_.push_back({t, var, ptr_type("Workgroup", elem)});
  return id;
}

Val Builder::load_shared(int id, const Val& index) {
  const Shared& s = shared_[static_cast<std::size_t>(id)];
  const std::string ptr = fresh();
  emit(detail::str_cat(ptr, " = OpAccessChain ", s.elem_ptr, " ", s.var, " ", index.id));
  Val r{fresh(), s.ty};
  emit(detail::str_cat(r.id, " = OpLoad ", type_id(s.ty), " ", ptr));
  return r;
}

void Builder::store_shared(int id, const Val& index, const Val& v) {
  const Shared& s = shared_[static_cast<std::size_t>(id)];
  const std::string ptr = fresh();
  emit(detail::str_cat(ptr, " = OpAccessChain ", s.elem_ptr, " ", s.var, " ", index.id));
  emit(detail::str_cat("OpStore ", ptr, " ", v.id));
}

void Builder::barrier() {
  // Workgroup scope (2), AcquireRelease | WorkgroupMemory semantics (0x8 | 0x100).
  emit(detail::str_cat("OpControlBarrier ", u32(2).id, " ", u32(2).id, " ",
                       u32(0x108).id));
}

void Builder::if_then(const Val& cond, const std::function<void()>& then) {
  const std::string t = fresh(), merge = fresh();
  emit(detail::str_cat("OpSelectionMerge ", merge, " None"));
  emit(detail::str_cat("OpBranchConditional ", cond.id, " ", t, " ", merge));
  emit(detail::str_cat(t, " = OpLabel"));
  then();
  emit(detail::str_cat("OpBranch ", merge));
  emit(detail::str_cat(merge, " = OpLabel"));
}

void Builder::loop(const Val& start, const Val& end, const Val& step,
                   const std::function<void(const Val&)>& body, std::uint32_t unroll) {
  Var i = variable(Ty::kU32);
  set(i, start);
  const std::string header = fresh(), check = fresh(), blk = fresh(), cont = fresh(),
                    merge = fresh();
  emit(detail::str_cat("OpBranch ", header));
  emit(detail::str_cat(header, " = OpLabel"));
  emit(detail::str_cat("OpLoopMerge ", merge, " ", cont, " None"));
  emit(detail::str_cat("OpBranch ", check));
  emit(detail::str_cat(check, " = OpLabel"));
  Val iv = get(i);
  Val c = op("OpULessThan", Ty::kBool, {iv, end});
  emit(detail::str_cat("OpBranchConditional ", c.id, " ", blk, " ", merge));
  emit(detail::str_cat(blk, " = OpLabel"));
  body(iv);
  Val next = op("OpIAdd", Ty::kU32, {iv, step});
  for (std::uint32_t u = 1; u < unroll; ++u) {
    const Val at = next;
    if_then(op("OpULessThan", Ty::kBool, {at, end}), [&] { body(at); });
    next = op("OpIAdd", Ty::kU32, {at, step});
  }
  emit(detail::str_cat("OpBranch ", cont));
  emit(detail::str_cat(cont, " = OpLabel"));
  set(i, next);
  emit(detail::str_cat("OpBranch ", header));
  emit(detail::str_cat(merge, " = OpLabel"));
}

void Builder::declare_push() {
  const int words = address_types_.empty() ? push_words_ : address_member(0);
  if (words + static_cast<int>(address_types_.size()) == 0) return;
  std::string members;
  for (int i = 0; i < words; ++i) {
    members += " %u32";
    decorations_.push_back(detail::str_cat("OpMemberDecorate %Push ", i, " Offset ", 4 * i));
  }
  for (std::size_t k = 0; k < address_types_.size(); ++k) {
    members += " %v2u32";
    decorations_.push_back(detail::str_cat("OpMemberDecorate %Push ", words + static_cast<int>(k),
                                           " Offset ", 4 * words + 8 * static_cast<int>(k)));
  }
  decorations_.push_back("OpDecorate %Push Block");
  globals_.push_back(detail::str_cat("%Push = OpTypeStruct", members));
  globals_.push_back("%p_push = OpTypePointer PushConstant %Push");
  if (push_words_ > 0) globals_.push_back("%p_push_u32 = OpTypePointer PushConstant %u32");
  globals_.push_back("%push = OpVariable %p_push PushConstant");
  interface_.push_back("%push");
}

std::uint32_t address_word(std::uint32_t push_words) { return (push_words + 1) / 2 * 2; }

std::string Builder::finish() {
  declare_push();
  std::string s;
  for (const auto& c : caps_) s += c + "\n";
  for (const auto& e : extensions_) s += "OpExtension \"" + e + "\"\n";
  if (glsl_) s += "%glsl = OpExtInstImport \"GLSL.std.450\"\n";
  s += psb_ ? "OpMemoryModel PhysicalStorageBuffer64 GLSL450\n"
            : "OpMemoryModel Logical GLSL450\n";
  s += "OpEntryPoint GLCompute %main \"main\"";
  for (const auto& v : interface_) s += " " + v;
  s += "\n";
  s += detail::str_cat("OpExecutionMode %main LocalSize ", local_size_, " 1 1\n");
  for (const auto& d : decorations_) s += d + "\n";
  for (const auto& g : globals_) s += g + "\n";
  s += "%main = OpFunction %void None %fn\n%entry = OpLabel\n";
  for (const auto& v : vars_) s += v + "\n";
  for (const auto& p : prologue_) s += p + "\n";
  for (const auto& b : body_) s += b + "\n";
  s += "OpReturn\nOpFunctionEnd\n";
  return s;
}

std::string preserve_special_floats(const std::string& text, std::uint32_t widths) {
  std::string modes;
  for (const int w : {16, 32, 64}) {
    const bool allowed = ((widths >> (w == 16 ? 0 : w == 32 ? 1 : 2)) & 1u) != 0;
    if (allowed && text.find(detail::str_cat("OpTypeFloat ", w, "\n")) != std::string::npos) {
      modes += detail::str_cat("OpExecutionMode %main SignedZeroInfNanPreserve ", w, "\n");
    }
  }
  const std::size_t local = text.find("OpExecutionMode %main LocalSize");
  if (modes.empty() || local == std::string::npos) return text;
  std::string out = text;
  out.insert(out.find('\n', local) + 1, modes);
  // Capabilities first, then extensions (SPIR-V's layout).
  std::size_t after_caps = 0;
  while (out.compare(after_caps, 12, "OpCapability") == 0) after_caps = out.find('\n', after_caps) + 1;
  out.insert(after_caps, "OpExtension \"SPV_KHR_float_controls\"\n");
  out.insert(0, "OpCapability SignedZeroInfNanPreserve\n");
  return out;
}

std::vector<std::uint32_t> assemble(const std::string& text, bool optimize) {
  std::string messages;
  const auto consumer = [&](spv_message_level_t, const char*,
                            const spv_position_t& pos, const char* msg) {
    messages += detail::str_cat("line ", pos.line + 1, ": ", msg, "\n");
  };
  spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_2);
  tools.SetMessageConsumer(consumer);
  std::vector<std::uint32_t> words;
  const auto numbered = [&] {
    std::string out;
    int n = 1;
    std::size_t start = 0;
    while (start < text.size()) {
      const std::size_t end = text.find('\n', start);
      out += detail::str_cat(n++, ": ",
                             text.substr(start, end == std::string::npos
                                                    ? std::string::npos
                                                    : end - start + 1));
      if (end == std::string::npos) break;
      start = end + 1;
    }
    return out;
  };
  if (!tools.Assemble(text, &words)) {
    throw DeviceError(detail::str_cat("[vulkan] kernel does not assemble: ", messages,
                                      "\n", numbered()));
  }
  spvtools::ValidatorOptions vopts;
  if (!tools.Validate(words.data(), words.size(), vopts)) {
    throw DeviceError(detail::str_cat("[vulkan] kernel fails SPIR-V validation: ",
                                      messages, "\n", numbered()));
  }
  if (optimize) {
    spvtools::Optimizer opt(SPV_ENV_VULKAN_1_2);
    opt.SetMessageConsumer(consumer);
    opt.RegisterPerformancePasses();
    std::vector<std::uint32_t> out;
    if (opt.Run(words.data(), words.size(), &out)) words = std::move(out);
  }
  return words;
}

bool valid(std::span<const std::uint32_t> words) {
  spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_2);
  tools.SetMessageConsumer([](spv_message_level_t, const char*, const spv_position_t&,
                              const char*) {});
  return tools.Validate(words.data(), words.size(), spvtools::ValidatorOptions());
}

}  // namespace kiln::vk::spv
