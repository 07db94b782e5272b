// Bitwise determinism: all_reduce of values whose floating-point sum depends
// on the order of additions. Every rank hashes its result (SHA-256); the
// hashes must be identical on every rank, and the printed digest must be
// identical between two runs (the ctest wrapper compares them).
//
// Usage: chorusrun -n N determinism_check -a ALGORITHM
#include <chorus/chorus.h>

#include <openssl/evp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<unsigned char> sha256(const void* data, size_t n) {
  std::vector<unsigned char> out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  EVP_Digest(data, n, out.data(), &len, EVP_sha256(), nullptr);
  out.resize(len);
  return out;
}

std::string hex(const std::vector<unsigned char>& d) {
  std::string s;
  char b[3];
  for (unsigned char c : d) {
    std::snprintf(b, sizeof(b), "%02x", c);
    s += b;
  }
  return s;
}

/// Values spread over many magnitudes, so rounding depends on summation order.
float value(int rank, size_t i) {
  uint64_t x = (uint64_t(rank) + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(i) * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  double mant = double(x & 0xFFFFFF) / double(0x1000000) - 0.5;
  int exp = int((x >> 24) % 24) - 12;
  return float(mant * std::ldexp(1.0, exp));
}

}  // namespace

int main(int argc, char** argv) {
  std::string algorithm = "auto";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "-a") == 0) algorithm = argv[i + 1];
  std::string setting = "algorithm.all_reduce=\"" + algorithm + "\"";
  const char* settings[] = {setting.c_str()};
  chorus_options_t opts;
  chorus_options_init(&opts);
  opts.settings = settings;
  opts.settings_count = 1;
  chorus_comm_t* comm = nullptr;
  if (int rc = chorus_comm_init(&opts, &comm); rc != CHORUS_OK) {
    std::fprintf(stderr, "init failed: %s\n", chorus_last_error());
    return 1;
  }
  int rank = 0, size = 1;
  chorus_comm_rank(comm, &rank);
  chorus_comm_size(comm, &size);
  int failures = 0;
  std::vector<unsigned char> all_digests;
  for (size_t count : {size_t(1000), size_t(99991), size_t(1) << 20}) {
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
    if (int rc = chorus_all_reduce(comm, buf.data(), buf.data(), count, CHORUS_FLOAT32, CHORUS_SUM);
        rc != CHORUS_OK) {
      std::fprintf(stderr, "all_reduce failed: %s\n", chorus_last_error());
      return 1;
    }
    auto digest = sha256(buf.data(), count * sizeof(float));
    std::vector<unsigned char> gathered(digest.size() * size_t(size));
    if (chorus_all_gather(comm, digest.data(), gathered.data(), digest.size(), CHORUS_UINT8) !=
        CHORUS_OK) {
      std::fprintf(stderr, "all_gather failed: %s\n", chorus_last_error());
      return 1;
    }
    for (int r = 0; r < size; ++r) {
      if (std::memcmp(gathered.data() + size_t(r) * digest.size(), digest.data(), digest.size()) != 0) {
        std::fprintf(stderr, "rank %d: count %zu: result differs from rank %d's\n", rank, count, r);
        ++failures;
      }
    }
    all_digests.insert(all_digests.end(), digest.begin(), digest.end());
  }
  if (rank == 0)
    std::printf("digest %s %d ranks: %s\n", algorithm.c_str(), size, hex(sha256(all_digests.data(), all_digests.size())).c_str());
  chorus_comm_finalize(comm);
  std::printf("determinism rank %d: %d passed, %d failed\n", rank, 3 * size - failures, failures);
  return failures == 0 ? 0 : 1;
}
