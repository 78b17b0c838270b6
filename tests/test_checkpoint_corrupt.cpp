// Damaged checkpoints: missing, empty, foreign, truncated at every length,
// flipped at every byte, bad .npy headers and sizes, bad manifests. Each
// is a kiln error with a clear message, never a crash (the sanitizer
// build runs these too).
#include <sys/mman.h>

#include "checkpoint/helpers.hpp"

using namespace ckpt_test;

// Loads `file` expecting a CheckpointError whose message contains `text`.
void check_corrupt(const fs::path& file, const Model& like,
                   const std::string& text) {
  INFO("expecting: " << text);
  CHECK_THROWS_WITH_AS(
      load_checkpoint(file, like),
      doctest::Contains(
          ("[load_checkpoint] " + file.string() + ": " + text).c_str()),
      CheckpointError);
}

TEST_CASE("missing, empty, non-zip and foreign zip files give clear errors") {
  TempDir dir;
  const Model like = zeros_like_model(make_model());
  check_corrupt(dir / "nope.npz", like, "cannot open: No such file");
  write_file(dir / "empty.npz", "");
  check_corrupt(dir / "empty.npz", like, "not a zip archive, or truncated");
  write_file(dir / "text.npz", std::string(5000, 'x'));
  check_corrupt(dir / "text.npz", like, "not a zip archive, or truncated");
  write_zip(dir / "numpy.npz",
            {{"w.npy", npy("{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (1,), }\n",
                           std::string(4, '\0'))}});
  check_corrupt(dir / "numpy.npz", like,
                "no kiln manifest (__kiln_manifest__.npy): not a kiln "
                "checkpoint");
}

TEST_CASE("a truncated checkpoint fails to load at every length") {
  TempDir dir;
  const Model model = make_model();
  save_checkpoint(dir / "full.npz", model);
  const std::string bytes = read_file(dir / "full.npz");
  const Model like = zeros_like_model(model);
  int failures = 0;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    write_file(dir / "cut.npz", bytes.substr(0, n));
    try {
      load_checkpoint(dir / "cut.npz", like);
      FAIL_CHECK("a file cut to " << n << " of " << bytes.size()
                                  << " bytes loaded");
    } catch (const CheckpointError& e) {
      ++failures;
      if (n == bytes.size() / 2) {
        CHECK(std::string(e.what()).find("not a zip archive, or truncated") !=
              std::string::npos);
      }
    }
  }
  CHECK(failures == static_cast<int>(bytes.size()));
}

TEST_CASE(
    "flipped bytes give a kiln error or the original values, never a "
    "crash") {
  TempDir dir;
  const Model model = make_model();
  for (bool compress : {false, true}) {
    INFO("compress=" << compress);
    save_checkpoint(dir / "good.npz", model, SaveOptions{.compress = compress});
    const std::string bytes = read_file(dir / "good.npz");
    const Model like = zeros_like_model(model);
    std::size_t errors = 0, total = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      for (unsigned char mask : {0x01, 0x80, 0xff}) {
        std::string bad = bytes;
        bad[i] = static_cast<char>(bad[i] ^ mask);
        write_file(dir / "bad.npz", bad);
        ++total;
        try {
          const Model got = load_checkpoint(dir / "bad.npz", like);
          INFO("byte " << i << " mask " << int(mask));
          check_identical_leaves(got, model);  // an unchecked field was hit
        } catch (const Error&) {
          ++errors;
        }
      }
    }
    MESSAGE(errors << " of " << total << " corruptions detected");
    // Only zip fields nobody checks (dates, "version made by", attributes,
    // about a fifth of the headers) pass, and then with the original values.
    CHECK(errors * 10 > total * 7);
  }
}

TEST_CASE("a corrupt array byte is a CRC error naming the member") {
  TempDir dir;
  const Model model = make_model();
  save_checkpoint(dir / "good.npz", model);
  std::string bytes = read_file(dir / "good.npz");
  // layers[1].weight starts 1.5, -2 (0x3fc00000, 0xc0000000): make it 1.5, 2.
  const std::string needle("\x00\x00\xc0\x3f\x00\x00\x00\xc0", 8);
  const std::size_t at = bytes.find(needle);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(needle, at + 1) == std::string::npos);
  bytes[at + 7] = '\x40';
  write_file(dir / "bad.npz", bytes);
  check_corrupt(dir / "bad.npz", zeros_like_model(model),
                "member \"layers[1].weight.npy\": CRC mismatch (corrupt data)");
}

TEST_CASE("bad .npy headers, sizes and manifests give clear errors") {
  TempDir dir;
  const Model model = make_model();
  const Model like = zeros_like_model(model);
  save_checkpoint(dir / "good.npz", model);
  Members good = read_zip(dir / "good.npz");
  const std::string w = "layers[0].weight.npy";
  const std::string data(24, '\0');  // 2x3 f32
  auto dict = [](const std::string& descr, const std::string& order,
                 const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + order +
           ", 'shape': " + shape + ", }\n";
  };
  auto tampered = [&](const std::string& name, std::string contents) {
    Members m = good;
    member(m, name) = std::move(contents);
    write_zip(dir / "bad.npz", m);
    return dir / "bad.npz";
  };
  const std::string prefix = "member \"" + w + "\": ";

  // The unmodified member, rewritten by the helper, still loads.
  check_identical_leaves(load_checkpoint(tampered(w, member(good, w)), like),
                         model);
  check_corrupt(tampered(w, "\x93NUMPX\x01" + std::string(100, ' ')), like,
                prefix + "not npy data (bad magic)");
  check_corrupt(tampered(w, "\x93NUMPY\x07" + std::string(100, ' ')), like,
                prefix + "unsupported npy version 7.32");
  check_corrupt(tampered(w, std::string("\x93NUMPY\x01\x00\xff\x7f", 10) +
                                std::string(100, ' ')),
                like, prefix + "data ends early (truncated)");
  check_corrupt(
      tampered(w, std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12)), like,
      prefix + "npy header of 2147483659 bytes is too long");
  check_corrupt(tampered(w, "\x93NUMPY"), like,
                prefix + "data ends early (truncated)");
  check_corrupt(tampered(w, npy(dict("<c8", "False", "(2, 3)"), data)), like,
                prefix +
                    "unsupported dtype '<c8' (kiln reads |b1, <i4, <u4, "
                    "<f2, <f4, <f8, and <u2 as bf16)");
  check_corrupt(tampered(w, npy(dict(">f4", "False", "(2, 3)"), data)), like,
                prefix + "big-endian data ('>f4') is not supported");
  check_corrupt(tampered(w, npy(dict("<f4", "True", "(2, 3)"), data)), like,
                prefix + "Fortran-order arrays are not supported");
  check_corrupt(tampered(w, npy(dict("<f4", "False", "(2, x)"), data)), like,
                prefix + "bad npy header: expected a dimension at offset");
  check_corrupt(
      tampered(w,
               npy(dict("<f4", "False", "(99999999999, 99999999999)"), data)),
      like, prefix + "bad npy header: shape (99999999999, 99999999999) is too large");
  check_corrupt(tampered(w, npy("{'descr': '<f4', 'shape': (2, 3)}\n", data)),
                like,
                prefix +
                    "bad npy header: missing 'descr', 'fortran_order' "
                    "or 'shape'");
  check_corrupt(tampered(w, npy(dict("<f4", "False", "(3, 2)"), data)), like,
                prefix + "npy header says f32 (3, 2), the manifest f32 (2, 3)");
  // Wrong element count: the data is short or long for the header's shape.
  const std::string original = member(good, w);
  check_corrupt(tampered(w, original.substr(0, original.size() - 4)), like,
                prefix +
                    "holds 148 bytes, but a (2, 3) f32 array takes 152 "
                    "(wrong element count)");
  check_corrupt(tampered(w, original + "xxxx"), like,
                prefix +
                    "holds 156 bytes, but a (2, 3) f32 array takes 152 "
                    "(wrong element count)");

  // A member the manifest names but the archive lacks.
  Members without = good;
  std::erase_if(without, [&](const auto& m) { return m.first == w; });
  write_zip(dir / "bad.npz", without);
  check_corrupt(dir / "bad.npz", like,
                "member \"layers[0].weight.npy\" for layers[0].weight is "
                "missing");

  // Manifests: another version, damaged records, a broken tree.
  const std::string text = manifest_text(member(good, kManifest));
  auto with_text = [&](const std::string& t) {
    return tampered(kManifest, manifest_member(t));
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const std::size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    return t.replace(at, from.size(), to);
  };
  check_corrupt(with_text(replaced("kiln-checkpoint\t1", "kiln-checkpoint\t2")),
                like,
                "manifest version 2 is not supported (this kiln reads "
                "version 1)");
  check_corrupt(with_text("PK garbage"), like,
                "corrupt manifest (line 1): unterminated line");
  check_corrupt(with_text(replaced("\tf32\t2,3\t", "\tf32\t2,-3\t")), like,
                "corrupt manifest (line 6): bad dimension '-3'");
  check_corrupt(with_text(replaced("\tf32\t2,3\t", "\tc64\t2,3\t")), like,
                "corrupt manifest (line 6): unknown dtype 'c64'");
  check_corrupt(with_text(replaced("list\t2\t", "list\t9\t")), like,
                "corrupt manifest (line ");
  check_corrupt(with_text(replaced("list\t2\t", "list\t1\t")), like,
                "corrupt manifest (line ");
  check_corrupt(with_text(replaced("\nnone\t0\t", "\nnone\t1\t")), like,
                "corrupt manifest (line 7): a leaf with children");
  check_corrupt(with_text(text.substr(0, text.size() - 1)), like,
                "corrupt manifest (line 20): unterminated line");
  check_corrupt(with_text(replaced("treedef\t", "treedef\t\\q")), like,
                "corrupt manifest (line 2): bad escape");

  // The manifest member's own .npy header: another dtype or rank, a size
  // that disagrees with the data.
  const std::string m = "member \"" + kManifest + "\": ";
  const std::string n = std::to_string(text.size());
  check_corrupt(
      tampered(kManifest, npy(dict("<f4", "False", "(" + n + ",)"), text)),
      like,
      m +
          "bad npy header: expected a 1-d |u1 array, got '<f4' of "
          "shape (" +
          n + ",)");
  check_corrupt(
      tampered(kManifest, npy(dict("|u1", "False", "(1, " + n + ")"), text)),
      like,
      m + "bad npy header: expected a 1-d |u1 array, got '|u1' of shape (1, " +
          n + ")");
  const std::string encoded = manifest_member(text);
  check_corrupt(tampered(kManifest, encoded + "x"), like,
                m + "holds " + std::to_string(encoded.size() + 1) +
                    " bytes, but a manifest of " + n + " bytes takes " +
                    std::to_string(encoded.size()) + " (wrong element count)");
  check_corrupt(tampered(kManifest, "\x93NUMPY"), like,
                m + "data ends early (truncated)");

  // An older file's text manifest is checked the same way.
  Members legacy = good;
  std::erase_if(legacy, [&](const auto& e) { return e.first == kManifest; });
  legacy.insert(legacy.begin(), {"__kiln_manifest__.txt", "PK garbage"});
  write_zip(dir / "bad.npz", legacy);
  check_corrupt(dir / "bad.npz", like,
                "corrupt manifest (line 1): unterminated line");
}

// Found by the checkpoint fuzzer (tests/fuzz/corpus/checkpoint_load/): zips
// whose manifests are well-formed line by line but describe another tree than
// their records spell out. Each must be a CheckpointError, never a read past
// a buffer or a std::out_of_range.
TEST_CASE("manifests whose records disagree with each other are corrupt") {
  TempDir dir;
  const Model model = make_model();
  const Model like = zeros_like_model(model);
  save_checkpoint(dir / "good.npz", model);
  const Members good = read_zip(dir / "good.npz");
  auto with_manifest = [&](const std::string& from, const std::string& to) {
    Members m = good;
    std::string text = manifest_text(member(m, kManifest));
    const std::size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    member(m, kManifest) = manifest_member(text);
    write_zip(dir / "bad.npz", m);
    return dir / "bad.npz";
  };

  // A struct with fewer children than its type names (the template's count
  // used to index the file's children: a heap read past the end).
  check_corrupt(
      with_manifest(
          "struct\t2\tlayers[1]\tLinear(weight, bias)\narray\t0\tlayers[1].weight\tf32\t3,1\t"
          "layers[1].weight.npy\narray\t0\tlayers[1].bias\tf32\t1\tlayers[1].bias.npy\n",
          "struct\t1\tlayers[1]\tLinear(weight, bias)\narray\t0\tlayers[1].weight\tf32\t3,1\t"
          "layers[1].weight.npy\n"),
      like,
      "corrupt manifest (line 8): struct Linear(weight, bias) has 1 children, "
      "its type names 2 fields");
  // A record whose path is not where the tree puts it (load looked the
  // template's path up with unordered_map::at: std::out_of_range).
  check_corrupt(with_manifest("array\t0\tlayers[0].weight\t",
                              "array\t0\tlayers[0].wieght\t"),
                like,
                "corrupt manifest (line 6): path 'layers[0].wieght', the tree "
                "puts this record at 'layers[0].weight'");
  // A struct type that is not Name(fields) (substr(npos): std::out_of_range).
  check_corrupt(with_manifest("\tLinear(weight, bias)\n", "\tLinear\n"), like,
                "corrupt manifest (line 5): struct type 'Linear' is not "
                "Name(field, ...)");
  // Two dict entries with one key.
  check_corrupt(with_manifest("[\"key\"]\t", "[\"count\"]\t"), like,
                "corrupt manifest (line ");
  // Dimensions whose byte size overflows (the template cannot match, but the
  // manifest is refused before any comparison multiplies them).
  check_corrupt(with_manifest("\tf32\t2,3\t", "\tf32\t4611686018427387904,3\t"),
                like,
                "corrupt manifest (line 6): shape (4611686018427387904, 3) is too "
                "large (4-byte elements)");
}

TEST_CASE("checkpoints of 65,534 and 65,536 arrays load back: the 16-bit count at its limit, zip64") {
  // 65,534 arrays and the manifest make 65,535 members: the end record's count
  // is 0xFFFF, and Debian's minizip writes no zip64 record then (issue 41: such
  // files saved but did not load). 65,536 arrays: a zip64 end record.
  TempDir dir;
  for (const std::size_t n : {std::size_t{65534}, std::size_t{65536}}) {
    CAPTURE(n);
    std::vector<Array> many;
    many.reserve(n);
    for (std::size_t i = 0; i < n; ++i) many.push_back(scalar<float>(static_cast<float>(i)));
    save_checkpoint(dir / "many.npz", many);
    const std::vector<Array> back = load_checkpoint(dir / "many.npz", many);
    REQUIRE(back.size() == n);
    CHECK(back.front().item<float>() == 0.0f);
    CHECK(back[n / 2].item<float>() == static_cast<float>(n / 2));
    CHECK(back.back().item<float>() == static_cast<float>(n - 1));
  }
}

namespace {

// Zero-filled host memory that costs no RAM until written: an anonymous mapping
// (its pages read as the shared zero page), for an array past 4 GiB.
class MappedZeros final : public Buffer {
 public:
  explicit MappedZeros(std::size_t nbytes)
      : data_(::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                     MAP_NORESERVE, -1, 0)),
        nbytes_(nbytes) {
    REQUIRE(data_ != MAP_FAILED);
  }
  ~MappedZeros() override { ::munmap(data_, nbytes_); }
  Device device() const override { return Device::cpu(); }
  std::size_t nbytes() const override { return nbytes_; }
  void* host_data() override { return data_; }
  void read(void* dst) const override { std::memcpy(dst, data_, nbytes_); }

 private:
  void* data_;
  std::size_t nbytes_;
};

}  // namespace

TEST_CASE("a checkpoint past 4 GiB loads back: zip64 sizes and offsets") {
  // A stored member of 4 GiB + 64 bytes (zip64 sizes) and one after it (a zip64
  // local-header offset), in a file on disk (not /dev/shm: it would hold the
  // 4 GiB in memory). Left out under the sanitizers (tests/meson.build), where
  // reading 4 GiB through instrumented code takes minutes.
  const fs::path dir = fs::temp_directory_path() / ("kiln_ckpt_4g_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  const std::size_t n = (std::size_t{1} << 32) + 64;
  auto zeros = std::make_shared<MappedZeros>(n);
  auto* bytes = static_cast<unsigned char*>(zeros->host_data());
  for (std::size_t at : {std::size_t{0}, (std::size_t{1} << 32) - 1, std::size_t{1} << 32, n - 1}) {
    bytes[at] = 1;  // bool elements: one byte each, 0 or 1
  }
  const std::pair<Array, Array> model{Array(DType::kBool, {static_cast<std::int64_t>(n)}, zeros),
                                      scalar<float>(3.5f)};
  save_checkpoint(dir / "big.npz", model);
  CHECK(fs::file_size(dir / "big.npz") > n);
  const std::pair<Array, Array> back = load_checkpoint(dir / "big.npz", model);
  CHECK(back.second.item<float>() == 3.5f);
  REQUIRE(back.first.shape() == model.first.shape());
  CHECK(std::memcmp(back.first.buffer()->host_data(), bytes, n) == 0);
}

TEST_CASE("a member whose local header disagrees with its directory entry is refused, naming it") {
  // The reader checks each member's local header against its directory entry
  // (signature, method, name, CRC and sizes), as minizip did before kiln read
  // the members itself.
  TempDir dir;
  const Model model = make_model();
  save_checkpoint(dir / "m.npz", model);
  const std::string good = read_file(dir / "m.npz");
  const std::string name = "layers[1].weight.npy";
  // The local header whose name (at +30) is this member's.
  std::size_t at = good.find(std::string("PK\x03\x04", 4));
  while (at != std::string::npos && good.compare(at + 30, name.size(), name) != 0) {
    at = good.find(std::string("PK\x03\x04", 4), at + 1);
  }
  REQUIRE(at != std::string::npos);
  for (std::size_t field : {std::size_t{0}, std::size_t{8}, std::size_t{14}, std::size_t{30}}) {
    CAPTURE(field);  // signature, method, CRC, name
    std::string bad = good;
    bad[at + field] = static_cast<char>(bad[at + field] ^ 0x01);
    write_file(dir / "bad.npz", bad);
    check_corrupt(dir / "bad.npz", zeros_like_model(model),
                  "member \"" + name + "\": corrupt local header");
  }
}

TEST_CASE("a member whose directory entry claims more than the file holds is refused before reading") {
  TempDir dir;
  const Model model = make_model();
  save_checkpoint(dir / "m.npz", model);
  std::string bytes = read_file(dir / "m.npz");
  // The manifest's central directory entry: say it holds 1 GiB (stored).
  const std::size_t entry = bytes.find(std::string("PK\x01\x02", 4));
  REQUIRE(entry != std::string::npos);
  REQUIRE(bytes.compare(entry + 46, kManifest.size(), kManifest) == 0);
  const std::uint32_t claim = 1u << 30;
  for (std::size_t field : {std::size_t{20}, std::size_t{24}}) {  // compressed, uncompressed
    for (int b = 0; b < 4; ++b) bytes[entry + field + b] = static_cast<char>(claim >> (8 * b));
  }
  write_file(dir / "claims.npz", bytes);
  check_corrupt(dir / "claims.npz", zeros_like_model(model),
                "member \"__kiln_manifest__.npy\": its directory entry says 1073741824 bytes "
                "(1073741824 stored) in a file of " +
                    std::to_string(bytes.size()) + " bytes");
}

TEST_CASE("a save cleans up the temporary files of saves that were killed") {
  TempDir dir;
  const fs::path path = dir / "m.npz";
  // A dead process's leftover (4194305 is above Linux's largest pid_max, 2^22:
  // no process has it), one of this live process, and another file's.
  const fs::path dead = dir / "m.npz.tmp.4194305.00000000deadbeef";
  const fs::path live = dir / ("m.npz.tmp." + std::to_string(::getpid()) + ".00000000cafef00d");
  const fs::path other = dir / "n.npz.tmp.4194305.00000000deadbeef";
  for (const fs::path& p : {dead, live, other}) write_file(p, "partial");
  save_checkpoint(path, make_model());
  CHECK(!fs::exists(dead));
  CHECK(fs::exists(live));   // a save in progress elsewhere in a live process
  CHECK(fs::exists(other));  // another checkpoint's
  CHECK(fs::exists(path));
}
