// chorus::provider::little_endian: reading and writing fixed-width integers
// in the little-endian order every Chorus wire format uses, at any (possibly
// unaligned) address. Part of the provider toolkit (docs/transport-abi.md).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace chorus::provider::little_endian {

/// `v` in little-endian order: unchanged on a little-endian host.
template <class T>
constexpr T to_or_from(T v) {
  static_assert(std::is_integral_v<T>);
  if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return static_cast<T>(__builtin_bswap16(static_cast<std::uint16_t>(v)));
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(__builtin_bswap32(static_cast<std::uint32_t>(v)));
  } else {
    return static_cast<T>(__builtin_bswap64(static_cast<std::uint64_t>(v)));
  }
}

/// Writes the sizeof(T) bytes of `v` at `p`, least significant first.
template <class T>
inline void store(std::byte* p, T v) {
  v = to_or_from(v);
  std::memcpy(p, &v, sizeof v);
}

/// Reads what store<T> wrote at `p`.
template <class T>
inline T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return to_or_from(v);
}

}  // namespace chorus::provider::little_endian
