// A small typed builder of SPIR-V compute shaders, written as SPIR-V assembly
// text (so every kernel prints exactly as compiled) and turned into words by
// SPIRV-Tools, which also validates it for the Vulkan 1.2 environment. Values
// are typed by their compute type: bool arrays are stored as bytes, f16 arrays
// as halves and bf16 arrays as u16 words (their bits), but arithmetic on them
// runs in bool and f32.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/runtime/dtype.hpp"

namespace kiln::vk::spv {

enum class Ty : std::uint8_t { kBool, kI32, kU32, kF32, kF64 };

Ty compute_type(DType d);  // f16 and bf16 compute in f32
bool is_float(Ty t);
bool is_signed(Ty t);

struct Val {
  std::string id;
  Ty ty = Ty::kU32;
};

struct Var {
  std::string id;
  Ty ty = Ty::kU32;
};

class Builder {
 public:
  // A compute shader with `local_size` invocations per workgroup (x only) and
  // `push_words` u32 push constants. Bit i of `addressed`: binding i is read and
  // written through its device address (bufferDeviceAddress), for arrays larger
  // than one descriptor can address; the addresses follow the push words
  // (8-byte aligned, in binding order), and the binding's descriptor, still
  // bound, goes unused.
  Builder(std::uint32_t local_size, int push_words, std::uint32_t addressed = 0);

  // Storage buffer binding `index` (0, 1, ... in declaration order) of `dtype`.
  int buffer(DType dtype, bool readonly);
  // A binding of 32-bit elements seen as 4-vectors (16-byte loads and stores);
  // `index` then counts vectors. Values come and go as 4 scalars.
  int buffer4(DType dtype, bool readonly);
  std::array<Val, 4> load4(int binding, const Val& index);
  // A binding of 32-bit elements seen as 4-vectors of u64 (32-byte loads: 8
  // elements at a time; needs shaderInt64); `index` counts 8-element groups.
  int buffer8(DType dtype, bool readonly);
  std::array<Val, 8> load8(int binding, const Val& index);
  // A read-only binding of 32-bit elements seen as a uniform texel buffer of
  // 4-component texels (the caller binds an R32G32B32A32 view of the array:
  // KernelSource::texel); load4 fetches texel `index`.
  int texel_buffer4(DType dtype);
  std::uint32_t texel_bindings() const;  // bit i: binding i is a texel buffer
  bool addressed(int binding) const { return ((addressed_ >> binding) & 1u) != 0; }
  void store4(int binding, const Val& index, const std::array<Val, 4>& v);
  Val load(int binding, const Val& index);                 // compute type
  void store(int binding, const Val& index, const Val& v);  // converts

  Val push(int word);          // u32 push constant
  Val invocation();            // LocalInvocationId.x
  Val workgroup();             // linear workgroup index (x + y * countX + ...)
  Val workgroup_id(int component);  // WorkgroupId.x/y/z
  Val global_index();          // workgroup() * local_size + invocation()
  std::uint32_t local_size() const { return local_size_; }

  Val constant(Ty t, double v);
  Val u32(std::uint32_t v) { return constant(Ty::kU32, v); }
  // Emits `%r = <opcode> %type args...` and returns %r.
  Val op(const char* opcode, Ty result, std::initializer_list<Val> args);
  Val glsl(const char* inst, Ty result, std::initializer_list<Val> args);
  Val convert(const Val& v, Ty to);  // value conversion (float->int saturates)
  Val bitcast(const Val& v, Ty to);
  Val select(const Val& c, const Val& a, const Val& b);
  // An f32 value rounded to f16 and back: what storing it in an f16 array and
  // loading it again gives (fused kernels keep f16 intermediates exact).
  Val round_f16(const Val& v);
  // The same for bf16 (integer rounding of the f32 bits: no bf16 arithmetic
  // is needed), and either one by dtype (others: `v` itself).
  Val round_bf16(const Val& v);
  Val round_to(DType d, const Val& v);
  // The bf16 bits (in the low half of a u32) of f32 `v`, rounded to nearest
  // even, NaN kept NaN: what a bf16 store writes.
  Val bf16_word(const Val& v);
  // Forbids the driver to contract the instruction that made `v` (an OpFMul,
  // OpFAdd, ...) with another one (a * b + c into an fma).
  void no_contraction(const Val& v);
  // While set, every float add, subtract and multiply `op` emits is
  // NoContraction: elementwise math rounds each instruction as written, so a
  // driver that fuses a * b + c into an fma (NVIDIA does; lavapipe does not)
  // cannot make a fused kernel differ from the unfused ops, or one device from
  // another. emit_elementwise sets it for its instructions; matmul's own
  // multiply-adds stay free to contract.
  bool set_exact_float(bool on) { return std::exchange(exact_float_, on); }
  // Decorates binding `binding`'s variable (e.g. "Coherent").
  void decorate_binding(int binding, const char* decoration);
  // OpMemoryBarrier, device scope, acquire-release on storage-buffer memory.
  void memory_barrier();
  // GLSL Frexp: the mantissa in [0.5, 1); the exponent goes to `exponent` (i32).
  Val frexp(const Val& x, const Var& exponent);

  Var variable(Ty t);
  Val get(const Var& v);
  void set(const Var& v, const Val& x);

  // Workgroup-shared array of `count` elements.
  int shared(Ty t, std::uint32_t count);
  Val load_shared(int id, const Val& index);
  void store_shared(int id, const Val& index, const Val& v);
  void barrier();  // workgroup execution + memory barrier

  // Cooperative matrices (SPV_NV_cooperative_matrix, Capabilities::coopmat):
  // subgroup-scope rows x cols matrices of f16 (DType::kF16) or f32 elements,
  // held as ids of `coop_type`. Loads and stores take the element index of
  // the matrix's first element in a storage-buffer binding of the same element
  // type and the row stride in elements (row-major); the whole subgroup must
  // execute them (subgroup-uniform control flow).
  std::string coop_type(DType elem, std::uint32_t rows, std::uint32_t cols);
  std::string coop_load(const std::string& type, int binding, const Val& index,
                        const Val& stride);
  void coop_store(int binding, const Val& index, const std::string& value, const Val& stride);
  // a * b + c, the result of c's type.
  std::string coop_muladd(const std::string& type, const std::string& a, const std::string& b,
                          const std::string& c);
  std::string coop_fill(const std::string& type, Ty elem, double v);  // every element v
  std::string coop_convert(const std::string& type, const std::string& v);  // OpFConvert
  std::string coop_variable(const std::string& type);                 // Function storage
  std::string coop_get(const std::string& type, const std::string& var);
  void coop_set(const std::string& var, const std::string& v);
  Val subgroup_id();  // SubgroupId (GroupNonUniform)

  void if_then(const Val& cond, const std::function<void()>& then);
  // for (i = start; i < end; i += step) body(i); with `unroll` > 1 each
  // iteration runs the body for `unroll` consecutive i (the later ones only
  // while i < end), so the loop itself iterates `unroll` times fewer
  // (Quirks::max_loop_iterations).
  void loop(const Val& start, const Val& end, const Val& step,
            const std::function<void(const Val&)>& body, std::uint32_t unroll = 1);

  std::string finish();  // the module's assembly text

 private:
  std::string fresh();
  std::string type_id(Ty t);
  std::string ptr_type(const char* storage, const std::string& pointee);
  void need_u8();
  void need_storage16();
  void need_f16();
  void need_u16();
  void emit(std::string line) { body_.push_back(std::move(line)); }
  std::string builtin_vec(const char* builtin);
  void declare_push();
  int address_member(int k) const;  // push member of the k-th address

  std::uint32_t local_size_;
  int push_words_;
  int next_ = 0;
  std::uint32_t addressed_;
  void need_capability(const std::string& cap);
  // %ptr to element `index` of storage-buffer binding `binding` (OpAccessChain).
  std::string element_ptr(int binding, const Val& index);
  std::vector<std::string> extensions_;
  std::string subgroup_id_;
  std::vector<std::string> caps_, decorations_, globals_, vars_, prologue_, body_, interface_;
  std::vector<std::string> address_types_;  // pointer types of the addressed bindings
  std::vector<std::string> declared_;  // ids of declared types/constants
  struct Binding {
    DType dtype;
    std::string var, elem_ptr, storage_type;  // storage_type: the image type of a texel buffer
    bool vec4 = false;
    bool texel = false;
    std::uint32_t align = 0;  // addressed: the Aligned operand of its accesses
  };
  static std::string aligned(const Binding& b);
  int declare_buffer(DType dtype, bool readonly, const std::string& elem, std::size_t stride,
                     bool vec4);
  std::vector<Binding> bindings_;
  struct Shared { Ty ty; std::string var, elem_ptr; };
  std::vector<Shared> shared_;
  std::string push_var_, wg_id_, num_wg_, local_id_;
  bool u8_ = false, f16_ = false, f64_ = false, glsl_ = false, u64_ = false, psb_ = false;
  bool storage16_ = false, u16_ = false;
  bool exact_float_ = false;
};

// The push-constant word where a kernel with `push_words` words of its own finds
// the device addresses of its addressed bindings (two words each, in binding
// order; see Builder's constructor).
std::uint32_t address_word(std::uint32_t push_words);

// The module `text` with the SignedZeroInfNanPreserve execution mode for each
// float width it declares (OpTypeFloat 16/32/64) that `widths` allows (bit 0:
// 16, 1: 32, 2: 64; Capabilities::preserve_float_widths); `text` itself where
// none applies.
std::string preserve_special_floats(const std::string& text, std::uint32_t widths);

// SPIR-V words for `text`, validated for Vulkan 1.2. Throws DeviceError with the
// assembler's or validator's message and the numbered text on failure.
std::vector<std::uint32_t> assemble(const std::string& text, bool optimize);
// Whether `words` pass the same Vulkan 1.2 validation (silently): SPIR-V read
// back from the disk cache is checked before a driver sees it.
bool valid(std::span<const std::uint32_t> words);

}  // namespace kiln::vk::spv
