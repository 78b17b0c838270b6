// DType facts and shape rules (broadcasting, axes).
#include <doctest/doctest.h>

#include <sstream>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <kiln/dsl/backend.hpp>
#include <kiln/kiln.hpp>

#include "child_process.hpp"

using namespace kiln;
using kiln::test::run_child;

TEST_CASE("dtype sizes, names and kinds") {
  CHECK(size_of(f32) == 4);
  CHECK(size_of(f64) == 8);
  CHECK(size_of(f16) == 2);
  CHECK(size_of(bool_) == 1);
  CHECK(name(i32) == "i32");
  CHECK(name(bool_) == "bool");
  CHECK(is_inexact(f32));
  CHECK(is_inexact(f16));
  CHECK_FALSE(is_inexact(i32));
  CHECK(is_integer(u32));
  CHECK_FALSE(is_integer(bool_));
}

TEST_CASE("shapes print like numpy tuples") {
  CHECK(to_string(Shape{}) == "()");
  CHECK(to_string(Shape{5}) == "(5,)");
  CHECK(to_string(Shape{2, 3}) == "(2, 3)");
  // std::cout << shape (issue 37: an alias of absl's vector had no operator<<),
  // an array's shape too, and Axes still convert both ways.
  std::ostringstream os;
  os << Shape{2, 3} << " " << Shape{} << " " << zeros({4, 1}).shape();
  CHECK(os.str() == "(2, 3) () (4, 1)");
  std::ostringstream avals;  // as programs and retrace explanations print them
  avals << Aval{f32, {2, 3}} << " " << Aval{i32, {}} << " " << f16;
  CHECK(avals.str() == "f32[2,3] i32[] f16");
  const Axes axes = Shape{1, 2};
  const Shape back = axes;
  CHECK(back == Shape{1, 2});
  CHECK(numel(Shape{}) == 1);
  CHECK(numel(Shape{2, 0, 3}) == 0);
  CHECK(row_major_strides(Shape{2, 3, 4}) == Shape{12, 4, 1});
}

TEST_CASE("numpy broadcasting of shapes") {
  CHECK(broadcast_shapes("add", {2, 3}, {3}) == Shape{2, 3});
  CHECK(broadcast_shapes("add", {2, 1}, {1, 3}) == Shape{2, 3});
  CHECK(broadcast_shapes("add", {}, {4, 5}) == Shape{4, 5});
  CHECK(broadcast_shapes("add", {5, 1, 4}, {3, 1}) == Shape{5, 3, 4});
  CHECK(broadcast_shapes("add", {0, 3}, {1, 3}) == Shape{0, 3});
  CHECK_THROWS_WITH_AS(broadcast_shapes("add", {2, 3}, {4}),
                       doctest::Contains("[add] shapes (2, 3) and (4,) cannot be broadcast"),
                       ShapeError);
}

TEST_CASE("axes are normalised and checked") {
  CHECK(normalize_axis("sum", -1, 3) == 2);
  CHECK(normalize_axes("sum", std::vector<std::int64_t>{-1, 0}, 3) == Axes{0, 2});
  CHECK_THROWS_WITH_AS(normalize_axis("sum", 3, 3),
                       "[sum] axis 3 is out of range for an array of rank 3",
                       ShapeError);
  CHECK_THROWS_WITH_AS(normalize_axes("sum", std::vector<std::int64_t>{1, -2}, 3),
                       doctest::Contains("[sum] repeated axis"), ShapeError);
}

TEST_CASE("devices parse and print") {
  CHECK(parse_device("cpu") == Device::cpu());
  CHECK(parse_device("vulkan") == Device::vulkan(0));
  CHECK(parse_device("vulkan:2") == Device::vulkan(2));
  CHECK(Device::vulkan(1).to_string() == "vulkan:1");
  CHECK_THROWS_WITH_AS(parse_device("gpu"), doctest::Contains("cannot parse device 'gpu'"),
                       DeviceError);
}

// A build without a Vulkan backend (the fuzz targets', or one that registers
// none): what the registries answer when a kind has nothing registered.
TEST_CASE("a device kind no backend registered: the CPU alone, and errors naming the device") {
#if KILN_HAVE_VULKAN
  // Vulkan's registrations swapped out for the test, and back after it.
  const detail::DevicePlatform* registered = detail::platform(Device::Kind::kVulkan);
  REQUIRE(registered != nullptr);
  const detail::DevicePlatform saved = *registered;
  detail::DevicePlatform empty;
  empty.kind = Device::Kind::kVulkan;
  detail::register_platform(empty);
  const BackendGetter getter = register_backend(Device::Kind::kVulkan, nullptr);
  struct Restore {
    detail::DevicePlatform platform;
    BackendGetter getter;
    ~Restore() {
      detail::register_platform(platform);
      register_backend(Device::Kind::kVulkan, getter);
    }
  } restore{saved, getter};
  const bool had_backend = getter != nullptr;
  REQUIRE(had_backend);
#else
  // A CPU-only build (-Dvulkan=disabled): nothing registered for Vulkan at all.
  REQUIRE(detail::platform(Device::Kind::kVulkan) == nullptr);
#endif

  const std::vector<DeviceInfo> all = devices();
  REQUIRE(all.size() == 1);
  CHECK(all[0].device == Device::cpu());
  CHECK(all[0].name == "cpu");
  CHECK(all[0].driver.find("kiln SIMD") == 0);  // the CPU backend's part
  CHECK(detail::best_device() == Device::cpu());
  synchronize(Device::vulkan(0));  // nothing registered, nothing queued
  const std::vector<float> values = {1.0f, 2.0f};
  const Array a = Array::from_data<float>(values, {2});
  CHECK_THROWS_WITH_AS(to_device(a, Device::vulkan(0)),
                       "[to_device] this build of kiln has no backend for vulkan:0",
                       DeviceError);
  CHECK_THROWS_WITH_AS(backend_for(Device::vulkan(1)),
                       "[device] this build of kiln has no backend for vulkan:1", DeviceError);
  CHECK(to_device(a, Device::cpu()).to_vector<float>() == std::vector<float>{1.0f, 2.0f});
}

// Run by the test below in a child process: the default device from KILN_DEVICE.
TEST_CASE("child: default device") {
  if (std::getenv("KILN_TEST_CHILD") == nullptr) return;
  try {
    std::printf("device=%s\n", default_device().to_string().c_str());
  } catch (const Error& e) {
    std::printf("error=%s\n", e.what());
  }
}

TEST_CASE("a KILN_DEVICE that does not parse is an error naming the variable") {
  const std::string out = run_child("KILN_DEVICE=gpu0", "child: default device");
  CHECK(out.find("error=[device] KILN_DEVICE=\"gpu0\" is not a device: expected cpu, vulkan or "
                 "vulkan:N") != std::string::npos);
}

// Run by the test below in a child process: one CPU op under KILN_CPU_ISA.
TEST_CASE("child: cpu simd level") {
  if (std::getenv("KILN_TEST_CHILD") == nullptr) return;
  try {
    const Array y = exp(zeros({4}, f32, Device::cpu()));
    const Array z = matmul(ones({2, 3}, f32, Device::cpu()), ones({3, 2}, f32, Device::cpu()));
    std::printf("value=%g\n", static_cast<double>(y.to_vector<float>()[3]));
    std::printf("product=%g threads=%d\n", static_cast<double>(z.to_vector<float>()[0]),
                num_threads());
  } catch (const Error& e) {
    std::printf("error=%s\n", e.what());
  }
}

TEST_CASE("KILN_CPU_ISA, KILN_GEMM and KILN_NUM_THREADS pick the CPU code; a bad value is an error naming it") {
  const auto child = [](const std::string& isa) {
    return run_child("KILN_CPU_ISA=" + isa, "child: cpu simd level");
  };
  CHECK(child("generic").find("value=1\n") != std::string::npos);
  CHECK(child("avx9").find("error=[environment] KILN_CPU_ISA=\"avx9\" is not one of generic, "
                           "x86-64-v2, x86-64-v3 or x86-64-v4") != std::string::npos);
  // The other CPU switches read once per process, and their errors.
  CHECK(run_child("KILN_GEMM=openblas KILN_NUM_THREADS=3", "child: cpu simd level")
            .find("product=3 threads=3\n") != std::string::npos);
  CHECK(run_child("KILN_GEMM=blis", "child: cpu simd level")
            .find("error=[environment] KILN_GEMM=\"blis\" is not one of kiln, openblas or "
                  "onednn") != std::string::npos);
  CHECK(run_child("KILN_GEMM=kiln KILN_CPU_ISA=x86-64-v2", "child: cpu simd level")
            .find("error=KILN_GEMM=kiln: kiln's GEMM kernels need x86-64-v3 (AVX2 and FMA) or "
                  "x86-64-v4; the SIMD level in use is x86-64-v2") != std::string::npos);
  CHECK(run_child("KILN_GEMM=kiln KILN_NUM_THREADS=2", "child: cpu simd level")
            .find("product=3 threads=2\n") != std::string::npos);
  CHECK(run_child("KILN_NUM_THREADS=zero", "child: cpu simd level")
            .find("error=[environment] KILN_NUM_THREADS=\"zero\" is not a whole number from 1 "
                  "to 4096") !=
        std::string::npos);
  // The level in use is reported with the CPU device.
  CHECK(devices().front().driver.find("kiln SIMD ") == 0);
}

TEST_CASE("creating an array on a device the machine does not have is a DeviceError") {
#if KILN_HAVE_VULKAN
  CHECK_THROWS_WITH_AS(zeros({2}, f32, Device::vulkan(99)),
                       doctest::Contains("there is no device vulkan:99 (this machine has"),
                       DeviceError);
#else  // a CPU-only build
  CHECK_THROWS_WITH_AS(zeros({2}, f32, Device::vulkan(99)),
                       doctest::Contains("this build of kiln has no backend for vulkan:99"),
                       DeviceError);
#endif
}

TEST_CASE("shape_size counts elements and bytes and refuses overflowing shapes") {
  const ShapeSize ok = shape_size({2, 3}, 4);
  CHECK(ok.ok());
  CHECK(ok.elements == 6);
  CHECK(ok.bytes == 24);
  CHECK(shape_size({}, 8).elements == 1);
  CHECK(shape_size({}, 8).bytes == 8);
  CHECK(shape_size({4, 0, 5}, 2).elements == 0);
  CHECK(shape_size({4, 0, 5}, 2).bytes == 0);
  const std::int64_t big = std::int64_t{1} << 62;
  // 2^62 elements fit; 2^62 four-byte elements do not fit in a byte count.
  CHECK(shape_size({big}, 1).ok());
  CHECK(shape_size({big, 4}, 1).error ==
        "shape (4611686018427387904, 4) is too large (1-byte elements): its "
        "size in bytes overflows a signed 64-bit count");
  CHECK_FALSE(shape_size({big}, 4).ok());
  CHECK(shape_size({big / 2, 3}, 1).bytes == 3 * (big / 2));
  CHECK_FALSE(shape_size({big, 2}, 1).ok());  // 2^63 > 2^63 - 1
  // numpy's rule: a zero dimension does not excuse the others' overflow.
  CHECK_FALSE(shape_size({0, big, big}, 1).ok());
  CHECK(shape_size({2, -1}, 4).error == "negative dimension in shape (2, -1)");
  CHECK_THROWS_WITH_AS(check_shape("reshape", {big, 8}, 4),
                       doctest::Contains("[reshape] shape (4611686018427387904, 8) is "
                                         "too large (4-byte elements)"),
                       ShapeError);
}

TEST_CASE("ops refuse result shapes whose size overflows, naming the op and the shape") {
  const std::int64_t big = std::int64_t{1} << 62;
  // Before: numel wrapped to 0, zeros succeeded with size 0, and a take on it
  // read out of bounds (CPU) or returned zeros (Vulkan).
  CHECK_THROWS_WITH_AS(zeros({big, 4}),
                       "[full] shape (4611686018427387904, 4) is too large (4-byte "
                       "elements): its size in bytes overflows a signed 64-bit count",
                       ShapeError);
  CHECK_THROWS_WITH_AS(zeros({big, 4}, f32, Device::cpu()),
                       doctest::Contains("[full] shape (4611686018427387904, 4)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(zeros({2, -3}), "[full] negative dimension in shape (2, -3)",
                       ShapeError);
  // A size-0 array reshaped or broadcast to an overflowing shape.
  const Array empty = zeros({0});
  CHECK_THROWS_WITH_AS(reshape(empty, {0, big, big}),
                       doctest::Contains("shape (0, 4611686018427387904, "
                                         "4611686018427387904) is too large"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(broadcast_to(zeros({1}), {big, 4}),
                       doctest::Contains("[broadcast_to] shape (4611686018427387904, 4) "
                                         "is too large"),
                       ShapeError);
  // Arrays made from host data or buffers go through the same check.
  CHECK_THROWS_WITH_AS(Array(f32, Shape{big, 4}, HostBuffer::allocate(0)),
                       doctest::Contains("[array] shape (4611686018427387904, 4) is too large"),
                       ShapeError);
}
