#include "core/elf_check.h"

#include <elf.h>
#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace chorus::core {
namespace {

#if defined(__LP64__)
using Ehdr = Elf64_Ehdr;
using Phdr = Elf64_Phdr;
using Shdr = Elf64_Shdr;
constexpr unsigned char kClass = ELFCLASS64;
#else
using Ehdr = Elf32_Ehdr;
using Phdr = Elf32_Phdr;
using Shdr = Elf32_Shdr;
constexpr unsigned char kClass = ELFCLASS32;
#endif

#if __BYTE_ORDER == __LITTLE_ENDIAN
constexpr unsigned char kData = ELFDATA2LSB;
#else
constexpr unsigned char kData = ELFDATA2MSB;
#endif

// EM_NONE: a machine this file does not know; the machine is then left to dlopen.
#if defined(__x86_64__)
constexpr int kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr int kMachine = EM_AARCH64;
#elif defined(__i386__)
constexpr int kMachine = EM_386;
#elif defined(__arm__)
constexpr int kMachine = EM_ARM;
#elif defined(__powerpc64__)
constexpr int kMachine = EM_PPC64;
#elif defined(__s390x__)
constexpr int kMachine = EM_S390;
#elif defined(__riscv)
constexpr int kMachine = EM_RISCV;
#else
constexpr int kMachine = EM_NONE;
#endif

std::string machine_name(int m) {
  switch (m) {
    case EM_X86_64:
      return "x86-64";
    case EM_AARCH64:
      return "AArch64";
    case EM_386:
      return "i386";
    case EM_ARM:
      return "32-bit Arm";
    case EM_PPC64:
      return "PowerPC64";
    case EM_PPC:
      return "PowerPC";
    case EM_S390:
      return "s390x";
    case EM_RISCV:
      return "RISC-V";
    case EM_MIPS:
      return "MIPS";
    case EM_SPARCV9:
      return "SPARC V9";
    default:
      return "machine " + std::to_string(m);
  }
}

const char* class_name(unsigned char c) {
  return c == ELFCLASS64 ? "64-bit" : c == ELFCLASS32 ? "32-bit" : "of unknown class";
}

const char* type_name(unsigned t) {
  switch (t) {
    case ET_REL:
      return "a relocatable object (.o), not a shared library";
    case ET_EXEC:
      return "an executable, not a shared library";
    case ET_CORE:
      return "a core dump, not a shared library";
    default:
      return "not a shared library";
  }
}

Status defect(std::string what) { return {CHORUS_ERR_UNAVAILABLE, std::move(what)}; }

/// Closes the descriptor on every return path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

/// Reads exactly `len` bytes at `off`; false on a short read or an error.
bool read_at(int fd, void* out, size_t len, uint64_t off) {
  auto* p = static_cast<unsigned char*>(out);
  while (len > 0) {
    ssize_t n = ::pread(fd, p, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    off += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return true;
}

/// Where a table of `count` entries of `entsize` bytes at `off` ends, or
/// UINT64_MAX when that does not fit in 64 bits.
uint64_t table_end(uint64_t off, uint64_t count, uint64_t entsize) {
  if (entsize != 0 && count > (UINT64_MAX - off) / entsize) return UINT64_MAX;
  return off + count * entsize;
}

std::string ends_past(const std::string& what, uint64_t end, uint64_t size) {
  return "truncated: " + what + " end" + (what.back() == 's' ? "" : "s") + " at byte " +
         (end == UINT64_MAX ? std::string("(beyond 2^64)") : std::to_string(end)) +
         " but the file has " + std::to_string(size) + " bytes";
}

std::string printable_start(const unsigned char* b, size_t n) {
  std::string s;
  bool text = true;
  for (size_t i = 0; i < n && i < 8; ++i) text = text && b[i] >= 0x20 && b[i] < 0x7f;
  char hex[4];
  for (size_t i = 0; i < n && i < 8; ++i) {
    if (text) {
      s += static_cast<char>(b[i]);
    } else {
      std::snprintf(hex, sizeof hex, "%02x", b[i]);
      s += (i ? " " : "") + std::string(hex);
    }
  }
  return text ? "'" + s + "'" : s;
}

}  // namespace

Status check_elf_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return defect(std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return defect("not a regular file: it is a directory");
  if (!S_ISREG(st.st_mode)) return defect("not a regular file (a device, pipe or socket)");
  // O_NONBLOCK: should the file be swapped for a FIFO after the stat, the
  // open must not wait for a writer.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) return defect(std::string("cannot be opened for reading: ") + std::strerror(errno));
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    return defect("not a regular file (it changed while being checked)");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return defect("empty file (0 bytes): not a shared library");

  unsigned char ident[EI_NIDENT] = {};
  const size_t have = size < EI_NIDENT ? static_cast<size_t>(size) : EI_NIDENT;
  if (!read_at(f.fd, ident, have, 0))
    return defect(std::string("read failed: ") + std::strerror(errno));
  if (have < SELFMAG || std::memcmp(ident, ELFMAG, SELFMAG) != 0)
    return defect("not an ELF file (it starts with " + printable_start(ident, have) +
                  "); a plugin is a shared library built for this machine");
  if (size < sizeof(Ehdr)) return defect(ends_past("the ELF header", sizeof(Ehdr), size));
  if (ident[EI_CLASS] != kClass)
    return defect(std::string("foreign ELF: a ") + class_name(ident[EI_CLASS]) +
                  " object, but this process is " + class_name(kClass));
  if (ident[EI_DATA] != kData)
    return defect(std::string("foreign ELF: ") +
                  (ident[EI_DATA] == ELFDATA2MSB ? "big-endian" : "of unknown byte order") +
                  ", but this machine is " + (kData == ELFDATA2LSB ? "little" : "big") + "-endian");
  Ehdr eh{};
  if (!read_at(f.fd, &eh, sizeof eh, 0))
    return defect(std::string("read failed: ") + std::strerror(errno));
  if (kMachine != EM_NONE && eh.e_machine != kMachine)
    return defect("foreign ELF: built for " + machine_name(eh.e_machine) +
                  ", but this machine is " + machine_name(kMachine));
  if (eh.e_type != ET_DYN) return defect(std::string("ELF file is ") + type_name(eh.e_type));
  if (eh.e_version != EV_CURRENT || ident[EI_VERSION] != EV_CURRENT)
    return defect("corrupt ELF header: version " + std::to_string(eh.e_version));

  if (eh.e_phnum == 0 || eh.e_phoff == 0) return defect("corrupt ELF header: no program headers");
  if (eh.e_phentsize != sizeof(Phdr))
    return defect("corrupt ELF header: program header entries of " +
                  std::to_string(eh.e_phentsize) + " bytes, expected " +
                  std::to_string(sizeof(Phdr)));
  const uint64_t ph_end = table_end(eh.e_phoff, eh.e_phnum, sizeof(Phdr));
  if (ph_end > size) return defect(ends_past("the program headers", ph_end, size));
  std::vector<Phdr> ph(eh.e_phnum);
  if (!read_at(f.fd, ph.data(), ph.size() * sizeof(Phdr), eh.e_phoff))
    return defect(std::string("read failed: ") + std::strerror(errno));
  int loads = 0;
  for (size_t i = 0; i < ph.size(); ++i) {
    const Phdr& p = ph[i];
    if (p.p_type != PT_LOAD && p.p_type != PT_DYNAMIC) continue;
    const char* kind = p.p_type == PT_LOAD ? "PT_LOAD" : "PT_DYNAMIC";
    loads += p.p_type == PT_LOAD;
    const uint64_t end = table_end(p.p_offset, 1, p.p_filesz);
    if (end > size)
      return defect(ends_past("segment " + std::to_string(i) + " (" + kind + ")", end, size));
    if (p.p_type == PT_LOAD && p.p_filesz > p.p_memsz)
      return defect("corrupt program header: segment " + std::to_string(i) +
                    " (PT_LOAD) has more bytes in the file than in memory");
  }
  if (loads == 0) return defect("corrupt ELF file: no loadable (PT_LOAD) segment");

  if (eh.e_shoff != 0) {
    if (eh.e_shentsize != sizeof(Shdr))
      return defect("corrupt ELF header: section header entries of " +
                    std::to_string(eh.e_shentsize) + " bytes, expected " +
                    std::to_string(sizeof(Shdr)));
    uint64_t shnum = eh.e_shnum;
    if (eh.e_shoff + sizeof(Shdr) > size)
      return defect(ends_past("the section headers",
                              table_end(eh.e_shoff, shnum ? shnum : 1, sizeof(Shdr)), size));
    Shdr first{};
    if (!read_at(f.fd, &first, sizeof first, eh.e_shoff))
      return defect(std::string("read failed: ") + std::strerror(errno));
    if (shnum == 0) shnum = first.sh_size;  // more than SHN_LORESERVE sections
    const uint64_t sh_end = table_end(eh.e_shoff, shnum, sizeof(Shdr));
    if (sh_end > size) return defect(ends_past("the section headers", sh_end, size));
    std::vector<Shdr> sh(shnum);
    if (!read_at(f.fd, sh.data(), sh.size() * sizeof(Shdr), eh.e_shoff))
      return defect(std::string("read failed: ") + std::strerror(errno));
    for (size_t i = 1; i < sh.size(); ++i) {
      if (sh[i].sh_type == SHT_NOBITS || sh[i].sh_type == SHT_NULL) continue;
      const uint64_t end = table_end(sh[i].sh_offset, 1, sh[i].sh_size);
      if (end > size) return defect(ends_past("section " + std::to_string(i), end, size));
    }
  }
  return Status::ok();
}

}  // namespace chorus::core
