// What a composite endpoint tells its peer: this process's host identity
// (auto_host_identity) and the address blob that carries it with both
// sub-transports' names and addresses (auto_blob_encode, auto_blob_decode).
#include "core/auto_internal.h"
#include "core/auto_transport.h"

#include <sys/stat.h>
#include <unistd.h>

#include <limits.h>
#include <cstdint>
#include <cstring>
#include <fstream>

namespace chorus::core {

using namespace auto_detail;

namespace {

// Blob layout (all integers little-endian):
//   "CHAU" magic, u8 version, u8 id length, id, u8 local-name length, name,
//   u8 fabric-name length, name, u32 local-blob length, blob,
//   u32 fabric-blob length, blob.
constexpr unsigned char kMagic[4] = {'C', 'H', 'A', 'U'};
constexpr uint8_t kVersion = 1;

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// Inode of a namespace link such as /proc/self/ns/net ("net:[4026531840]").
std::string namespace_inode(const char* link) {
  char buf[128];
  ssize_t n = ::readlink(link, buf, sizeof buf - 1);
  if (n <= 0) return "?";
  buf[n] = '\0';
  std::string s(buf);
  auto open = s.find('[');
  auto close = s.find(']');
  return open != std::string::npos && close != std::string::npos && close > open
             ? s.substr(open + 1, close - open - 1)
             : s;
}

// ---- blob encoding ---------------------------------------------------------------

void put_u8_field(std::vector<std::byte>& out, const std::string& s) {
  out.push_back(std::byte(s.size()));
  for (char c : s) out.push_back(std::byte(c));
}

void put_u32_field(std::vector<std::byte>& out, const std::vector<std::byte>& b) {
  uint32_t n = uint32_t(b.size());
  for (int i = 0; i < 4; ++i) out.push_back(std::byte((n >> (8 * i)) & 0xff));
  out.insert(out.end(), b.begin(), b.end());
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> d) : d_(d) {}
  bool bytes(size_t n, std::span<const std::byte>& out) {
    if (d_.size() - pos_ < n) return false;
    out = d_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool u8_string(std::string& out) {
    std::span<const std::byte> len, s;
    if (!bytes(1, len) || !bytes(size_t(len[0]), s)) return false;
    out.assign(reinterpret_cast<const char*>(s.data()), s.size());
    return true;
  }
  bool u32_blob(std::vector<std::byte>& out) {
    std::span<const std::byte> len, s;
    if (!bytes(4, len)) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t(len[size_t(i)]) << (8 * i);
    if (!bytes(n, s)) return false;
    out.assign(s.begin(), s.end());
    return true;
  }
  bool at_end() const { return pos_ == d_.size(); }

 private:
  std::span<const std::byte> d_;
  size_t pos_ = 0;
};

}  // namespace

std::string auto_host_identity() {
  char host[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  struct stat st {};
  std::string shm_dev = ::stat("/dev/shm", &st) == 0 ? std::to_string(uint64_t(st.st_dev)) : "?";
  return "boot=" + read_first_line("/proc/sys/kernel/random/boot_id") + " host=" + host +
         " netns=" + namespace_inode("/proc/self/ns/net") +
         " pidns=" + namespace_inode("/proc/self/ns/pid") + " shm=" + shm_dev;
}

size_t auto_blob_overhead() {
  return sizeof kMagic + 2 + kAutoMaxHostId + 2 * (1 + kMaxName) + 2 * 4;
}

Result<std::vector<std::byte>> auto_blob_encode(const AutoBlob& blob) {
  if (blob.host_id.size() > kAutoMaxHostId || blob.local_name.size() > kMaxName ||
      blob.fabric_name.size() > kMaxName)
    return Status(CHORUS_ERR_INVALID_ARGUMENT,
                  "host identity or transport name too long for the address");
  if (blob.local.size() > UINT32_MAX || blob.fabric.size() > UINT32_MAX)
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "sub-transport address too long");
  std::vector<std::byte> out;
  for (unsigned char m : kMagic) out.push_back(std::byte(m));
  out.push_back(std::byte(kVersion));
  put_u8_field(out, blob.host_id);
  put_u8_field(out, blob.local_name);
  put_u8_field(out, blob.fabric_name);
  put_u32_field(out, blob.local);
  put_u32_field(out, blob.fabric);
  return out;
}

Result<AutoBlob> auto_blob_decode(std::span<const std::byte> data) {
  Reader r(data);
  std::span<const std::byte> magic, version;
  if (!r.bytes(4, magic) || std::memcmp(magic.data(), kMagic, 4) != 0)
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "bad magic");
  if (!r.bytes(1, version) || uint8_t(version[0]) != kVersion)
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "unsupported version");
  AutoBlob b;
  if (!r.u8_string(b.host_id) || !r.u8_string(b.local_name) || !r.u8_string(b.fabric_name) ||
      !r.u32_blob(b.local) || !r.u32_blob(b.fabric))
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "truncated");
  if (!r.at_end()) return Status(CHORUS_ERR_INVALID_ARGUMENT, "trailing bytes");
  return b;
}

}  // namespace chorus::core
