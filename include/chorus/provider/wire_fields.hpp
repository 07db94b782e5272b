// chorus::provider::wire: a wire format written down once, as the ordered
// list of its fields, from which encoding, decoding (with bounds checks) and
// the format's size all follow. Part of the provider toolkit
// (docs/transport-abi.md).
//
// A wire struct lists its fields in one static member function, used both
// to write (`s` const) and to read (`s` mutable):
//
//   struct Blob {
//     std::uint16_t port = 0;
//     std::array<std::byte, 16> address{};
//     static constexpr void fields(auto& io, auto& s) {
//       io(wire::Expect{kMagic}, s.port, wire::Zero<2>{}, s.address);
//     }
//     bool valid() const { return port != 0; }   // optional, checked by decode
//   };
//   static_assert(wire::size<Blob>() == 24);
//
// What a field may be: an integer or an enumeration (little-endian, its own
// width: little_endian.hpp), a std::array of a byte type (copied as it is),
// another wire struct (its fields, in place), or one of the markers below.
#pragma once

#include <chorus/provider/little_endian.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

namespace chorus::provider::wire {

/// A constant (magic, version): written as `value`; decoding fails unless
/// the bytes hold exactly `value`.
template <class T>
struct Expect {
  T value;
};
template <class T>
Expect(T) -> Expect<T>;

/// `N` reserved bytes: written as zero; decoding fails unless they are zero.
template <std::size_t N>
struct Zero {};

/// `N` unused bytes: written as zero, not looked at when decoding.
template <std::size_t N>
struct Skip {};

/// A field held in memory as `T` (say, std::size_t) and on the wire as the
/// integer type `Wire`. Made by as<Wire>(s.field).
template <class Wire, class T>
struct As {
  T& value;
};
template <class Wire, class T>
constexpr As<Wire, T> as(T& value) {
  return {value};
}

namespace detail {

template <class T>
concept Integer = std::is_integral_v<T> || std::is_enum_v<T>;

template <class T>
struct Underlying {
  using type = T;
};
template <class T>
requires std::is_enum_v<T>
struct Underlying<T> {
  using type = std::underlying_type_t<T>;
};

template <class T>
struct ByteArray : std::false_type {};
template <class B, std::size_t N>
requires(sizeof(B) == 1 &&
         (std::is_same_v<B, std::byte> || std::is_integral_v<B>)) struct ByteArray<std::array<B, N>>
    : std::true_type {
};

template <class T>
constexpr std::size_t size_of();

/// Adds up the wire sizes of the fields it is shown.
struct Counter {
  std::size_t bytes = 0;
  template <class... F>
  constexpr void operator()(const F&... f) {
    (add(f), ...);
  }
  template <class F>
  constexpr void add(const F&) {
    bytes += size_of<F>();
  }
};

template <class T>
struct Marker {
  static constexpr std::size_t size = 0;
  static constexpr bool is = false;
};
template <class T>
struct Marker<Expect<T>> {
  static constexpr std::size_t size = sizeof(T);
  static constexpr bool is = true;
};
template <std::size_t N>
struct Marker<Zero<N>> {
  static constexpr std::size_t size = N;
  static constexpr bool is = true;
};
template <std::size_t N>
struct Marker<Skip<N>> {
  static constexpr std::size_t size = N;
  static constexpr bool is = true;
};
template <class W, class T>
struct Marker<As<W, T>> {
  static constexpr std::size_t size = sizeof(W);
  static constexpr bool is = true;
};

template <class T>
constexpr std::size_t size_of() {
  if constexpr (Marker<T>::is) {
    return Marker<T>::size;
  } else if constexpr (Integer<T>) {
    return sizeof(T);
  } else if constexpr (ByteArray<T>::value) {
    return std::tuple_size_v<T>;
  } else {
    T s{};
    Counter c;
    T::fields(c, s);
    return c.bytes;
  }
}

}  // namespace detail

/// The number of bytes T's fields take on the wire.
template <class T>
constexpr std::size_t size() {
  return detail::size_of<T>();
}

/// Writes fields one after the other from the start of a buffer. Never writes
/// past its end: a field that does not fit leaves ok() false.
class Writer {
 public:
  Writer(void* out, std::size_t length) : at_(static_cast<std::byte*>(out)), left_(length) {}

  template <class... F>
  void operator()(const F&... f) {
    (put(f), ...);
  }
  bool ok() const { return ok_; }

 private:
  std::byte* take(std::size_t n) {
    if (!ok_ || n > left_) {
      ok_ = false;
      return nullptr;
    }
    std::byte* p = at_;
    at_ += n;
    left_ -= n;
    return p;
  }
  template <class T>
  requires(!detail::Marker<T>::is) void put(const T& v) {
    if constexpr (detail::Integer<T>) {
      using U = typename detail::Underlying<T>::type;
      if (std::byte* p = take(sizeof(T))) little_endian::store<U>(p, static_cast<U>(v));
    } else if constexpr (detail::ByteArray<T>::value) {
      if (std::byte* p = take(v.size())) std::memcpy(p, v.data(), v.size());
    } else {
      T::fields(*this, v);
    }
  }
  template <class T>
  void put(const Expect<T>& e) {
    put(e.value);
  }
  template <std::size_t N>
  void put(const Zero<N>&) {
    if (std::byte* p = take(N)) std::memset(p, 0, N);
  }
  template <std::size_t N>
  void put(const Skip<N>&) {
    put(Zero<N>{});
  }
  template <class W, class T>
  void put(const As<W, T>& a) {
    put(static_cast<W>(a.value));
  }

  std::byte* at_;
  std::size_t left_;
  bool ok_ = true;
};

/// Reads fields one after the other from the start of a buffer, checking
/// every constant, reserved field and nested struct's valid(). Never reads
/// past its end: after the first failure ok() is false and nothing more is
/// read.
class Reader {
 public:
  Reader(const void* in, std::size_t length)
      : at_(static_cast<const std::byte*>(in)), left_(in == nullptr ? 0 : length) {}

  template <class... F>
  void operator()(F&&... f) {
    (get(f), ...);
  }
  bool ok() const { return ok_; }

 private:
  const std::byte* take(std::size_t n) {
    if (!ok_ || n > left_) {
      ok_ = false;
      return nullptr;
    }
    const std::byte* p = at_;
    at_ += n;
    left_ -= n;
    return p;
  }
  template <class T>
  requires(!detail::Marker<std::remove_const_t<T>>::is) void get(T& v) {
    if constexpr (detail::Integer<T>) {
      using U = typename detail::Underlying<T>::type;
      if (const std::byte* p = take(sizeof(T))) v = static_cast<T>(little_endian::load<U>(p));
    } else if constexpr (detail::ByteArray<T>::value) {
      if (const std::byte* p = take(v.size())) std::memcpy(v.data(), p, v.size());
    } else {
      T::fields(*this, v);
      if constexpr (requires { v.valid(); }) {
        if (ok_ && !v.valid()) ok_ = false;
      }
    }
  }
  template <class T>
  void get(const Expect<T>& e) {
    T v{};
    get(v);
    if (ok_ && v != e.value) ok_ = false;
  }
  template <std::size_t N>
  void get(const Zero<N>&) {
    if (const std::byte* p = take(N)) {
      for (std::size_t i = 0; i < N; ++i) {
        if (p[i] != std::byte{0}) ok_ = false;
      }
    }
  }
  template <std::size_t N>
  void get(const Skip<N>&) {
    take(N);
  }
  template <class W, class T>
  void get(const As<W, T>& a) {
    W v{};
    get(v);
    if (ok_) a.value = static_cast<T>(v);
  }

  const std::byte* at_;
  std::size_t left_;
  bool ok_ = true;
};

/// Writes `v` at `out`, which has room for size<T>() bytes; returns that size.
template <class T>
std::size_t encode(const T& v, void* out) {
  Writer w(out, size<T>());
  T::fields(w, v);
  return size<T>();
}

/// Reads a T from the first size<T>() of `length` bytes at `in` (NULL reads
/// as empty). Empty when they are too few, a constant or reserved field is
/// wrong, or a valid() says no.
template <class T>
std::optional<T> decode(const void* in, std::size_t length) {
  T v{};
  Reader r(in, length);
  r(v);
  if (!r.ok()) return std::nullopt;
  return v;
}

/// decode() into `out`, which is left as it was when decoding fails.
template <class T>
bool decode_into(const void* in, std::size_t length, T& out) {
  std::optional<T> v = decode<T>(in, length);
  if (v) out = *v;
  return v.has_value();
}

/// The identity at the head of every built-in transport's address blob and
/// handshake: the owner's rank, the rank it is for and the channel, as three
/// little-endian i32. A wire struct that derives from it lists
/// EndpointId::fields(io, s) among its own.
struct EndpointId {
  std::int32_t rank = 0;
  std::int32_t peer_rank = 0;
  std::int32_t channel = 0;

  static constexpr void fields(auto& io, auto& s) { io(s.rank, s.peer_rank, s.channel); }
  /// True when it names rank `rank`'s endpoint to `peer_rank` on `channel`.
  bool is(int owner, int peer, int ch) const {
    return rank == owner && peer_rank == peer && channel == ch;
  }
  bool operator==(const EndpointId&) const = default;
};

}  // namespace chorus::provider::wire
