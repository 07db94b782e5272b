// The C++ wrapper's typed calls on N ranks (run under chorusrun): every
// collective and point-to-point call, blocking and non-blocking, for bool,
// integers, float, double, chorus::half, chorus::bfloat16 and complex<float>,
// inputs passed as `const T*`, every element checked on every rank against a
// reference computed here in double from the same formula. Inputs are small
// multiples of a power of two, so every partial sum is exact in every type
// and the reference does not depend on the reduction order. Two all_reduces
// of each type also run fused, in a chorus::Group.
#include <chorus/chorus.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace {

/// A contiguous array of T (std::vector<bool> has no data()).
template <class T>
class Array {
 public:
  explicit Array(size_t n = 0) : v_(n) {}
  T* data() { return reinterpret_cast<T*>(v_.data()); }
  const T* data() const { return reinterpret_cast<const T*>(v_.data()); }
  size_t size() const { return v_.size(); }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  void assign(size_t n, T x) {
    v_.assign(n, Slot{});
    for (size_t i = 0; i < n; ++i) data()[i] = x;
  }

 private:
  struct Slot {
    alignas(T) unsigned char bytes[sizeof(T)];
  };
  std::vector<Slot> v_;
};

int g_checks = 0;
int g_failed = 0;
int g_rank = 0;

template <class T>
struct Kind {
  static T from(double x) { return T(x); }
  static bool same(const T& a, const T& b) { return a == b; }
  static double scale() { return 1; }
  static bool is_unsigned() { return std::is_unsigned_v<T>; }
};
template <>
struct Kind<chorus::half> {
  static chorus::half from(double x) { return chorus::half(float(x)); }
  static bool same(chorus::half a, chorus::half b) { return a.bits() == b.bits(); }
  static double scale() { return 0.25; }
  static bool is_unsigned() { return false; }
};
template <>
struct Kind<chorus::bfloat16> {
  static chorus::bfloat16 from(double x) { return chorus::bfloat16(float(x)); }
  static bool same(chorus::bfloat16 a, chorus::bfloat16 b) { return a.bits() == b.bits(); }
  static double scale() { return 0.5; }
  static bool is_unsigned() { return false; }
};
template <>
struct Kind<std::complex<float>> {
  static std::complex<float> from(double x) { return {float(x), float(-2 * x)}; }
  static bool same(std::complex<float> a, std::complex<float> b) { return a == b; }
  static double scale() { return 1; }
  static bool is_unsigned() { return false; }
};
template <>
struct Kind<bool> {
  static bool from(double x) { return x > 0; }
  static bool same(bool a, bool b) { return a == b; }
  static double scale() { return 1; }
  static bool is_unsigned() { return true; }
};

/// Rank r's element i (before conversion to T).
template <class T>
double value(int r, size_t i, int salt) {
  const int v = int((r * 7 + i * 3 + size_t(salt) * 5) % 11);
  return (Kind<T>::is_unsigned() ? v : v - 5) * Kind<T>::scale();
}

template <class T>
void expect_equal(const Array<T>& got, const Array<T>& want, const std::string& what) {
  ++g_checks;
  if (std::getenv("TYPED_VERBOSE")) std::printf("r%d %s\n", g_rank, what.c_str());
  for (size_t i = 0; i < want.size(); ++i) {
    if (!Kind<T>::same(got[i], want[i])) {
      std::printf("r%d FAIL %s: element %zu of %zu differs\n", g_rank, what.c_str(), i,
                  want.size());
      ++g_failed;
      return;
    }
  }
}

template <class T>
void run_type(chorus::Communicator& comm, const char* name, bool with_max) {
  const int n_ranks = comm.size(), me = comm.rank();
  for (size_t n : {size_t(3), size_t(1000)}) {
    const std::string tag = std::string(name) + " n=" + std::to_string(n);
    Array<T> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = Kind<T>::from(value<T>(me, i, 0));
    const Array<T>& in = src;  // every input below goes in as const T*

    // all_reduce: sum (bool: logical or) and max.
    Array<T> sum_ref(n), max_ref(n);
    for (size_t i = 0; i < n; ++i) {
      double s = 0, m = value<T>(0, i, 0);
      for (int r = 0; r < n_ranks; ++r) s += value<T>(r, i, 0), m = std::max(m, value<T>(r, i, 0));
      if constexpr (std::is_same_v<T, bool>) {
        bool any = false;
        for (int r = 0; r < n_ranks; ++r) any = any || Kind<T>::from(value<T>(r, i, 0));
        sum_ref[i] = any;
      } else {
        sum_ref[i] = Kind<T>::from(s);
      }
      max_ref[i] = Kind<T>::from(m);
    }
    Array<T> out(n);
    comm.all_reduce(in.data(), out.data(), n);
    expect_equal(out, sum_ref, tag + " all_reduce sum");
    out.assign(n, T{});
    comm.iall_reduce(in.data(), out.data(), n).wait();
    expect_equal(out, sum_ref, tag + " iall_reduce sum");
    {
      // Two all_reduces in one group (chorus::Group), fused into one call.
      Array<T> g1(n), g2(n);
      chorus::Request r1, r2;
      chorus::Group group;
      r1 = comm.iall_reduce(in.data(), g1.data(), n);
      r2 = comm.iall_reduce(in.data(), g2.data(), n);
      group.end();
      r2.wait();
      r1.wait();
      expect_equal(g1, sum_ref, tag + " grouped iall_reduce sum, first");
      expect_equal(g2, sum_ref, tag + " grouped iall_reduce sum, second");
    }
    if (with_max) {
      out.assign(n, T{});
      comm.all_reduce(in.data(), out.data(), n, CHORUS_MAX);
      expect_equal(out, max_ref, tag + " all_reduce max");
      out.assign(n, T{});
      comm.iall_reduce(in.data(), out.data(), n, CHORUS_MAX).wait();
      expect_equal(out, max_ref, tag + " iall_reduce max");
    }

    // all_gather: rank r's block at r * n.
    Array<T> gathered(n * size_t(n_ranks)), gather_ref(n * size_t(n_ranks));
    for (int r = 0; r < n_ranks; ++r)
      for (size_t i = 0; i < n; ++i)
        gather_ref[size_t(r) * n + i] = Kind<T>::from(value<T>(r, i, 0));
    comm.all_gather(in.data(), gathered.data(), n);
    expect_equal(gathered, gather_ref, tag + " all_gather");
    gathered.assign(gathered.size(), T{});
    comm.iall_gather(in.data(), gathered.data(), n).wait();
    expect_equal(gathered, gather_ref, tag + " iall_gather");

    // reduce_scatter: rank r's input block b at b * n; this rank keeps block `me`.
    if constexpr (!std::is_same_v<T, bool>) {
      Array<T> rs_in(n * size_t(n_ranks)), rs_out(n), rs_ref(n);
      for (size_t j = 0; j < rs_in.size(); ++j) rs_in[j] = Kind<T>::from(value<T>(me, j, 1));
      for (size_t i = 0; i < n; ++i) {
        double s = 0;
        for (int r = 0; r < n_ranks; ++r) s += value<T>(r, size_t(me) * n + i, 1);
        rs_ref[i] = Kind<T>::from(s);
      }
      const Array<T>& rs_const = rs_in;
      comm.reduce_scatter(rs_const.data(), rs_out.data(), n);
      expect_equal(rs_out, rs_ref, tag + " reduce_scatter sum");
      rs_out.assign(n, T{});
      comm.ireduce_scatter(rs_const.data(), rs_out.data(), n).wait();
      expect_equal(rs_out, rs_ref, tag + " ireduce_scatter sum");
    }

    // broadcast from the last rank, then (non-blocking) from rank 0.
    for (int root : {n_ranks - 1, 0}) {
      Array<T> buf(n), ref(n);
      for (size_t i = 0; i < n; ++i) ref[i] = Kind<T>::from(value<T>(root, i, 2));
      if (me == root)
        for (size_t i = 0; i < n; ++i) buf[i] = ref[i];
      if (root != 0)
        comm.broadcast(buf.data(), n, root);
      else
        comm.ibroadcast(buf.data(), n, root).wait();
      expect_equal(buf, ref, tag + " broadcast from " + std::to_string(root));
    }

    // send/recv around the ring, blocking then non-blocking; even ranks
    // send first (a receive waits for its message before later operations).
    if (n_ranks > 1) {
      const int next = (me + 1) % n_ranks, prev = (me + n_ranks - 1) % n_ranks;
      Array<T> msg(n), got(n), ref(n);
      for (size_t i = 0; i < n; ++i) {
        msg[i] = Kind<T>::from(value<T>(me, i, 3));
        ref[i] = Kind<T>::from(value<T>(prev, i, 3));
      }
      const Array<T>& msg_const = msg;
      if (me % 2 == 0) {
        comm.send(msg_const.data(), n, next);
        comm.recv(got.data(), n, prev);
      } else {
        comm.recv(got.data(), n, prev);
        comm.send(msg_const.data(), n, next);
      }
      expect_equal(got, ref, tag + " send/recv");
      got.assign(n, T{});
      // Requests run in issue order, so the same even/odd order as above.
      chorus::Request first =
          me % 2 == 0 ? comm.isend(msg_const.data(), n, next) : comm.irecv(got.data(), n, prev);
      chorus::Request second =
          me % 2 == 0 ? comm.irecv(got.data(), n, prev) : comm.isend(msg_const.data(), n, next);
      second.wait();
      first.wait();
      expect_equal(got, ref, tag + " isend/irecv");
    }
  }
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    chorus::Communicator comm;
    g_rank = comm.rank();
    run_type<bool>(comm, "bool", false);
    run_type<uint8_t>(comm, "uint8", true);
    run_type<int32_t>(comm, "int32", true);
    run_type<long long>(comm, "long long", true);
    run_type<float>(comm, "float", true);
    run_type<double>(comm, "double", true);
    run_type<chorus::half>(comm, "half", true);
    run_type<chorus::bfloat16>(comm, "bfloat16", true);
    run_type<std::complex<float>>(comm, "complex<float>", false);
    comm.barrier();
    std::printf("r%d typed_check: %d checks, %d failed\n", g_rank, g_checks, g_failed);
  } catch (const chorus::Error& e) {
    std::printf("r%d FAIL: %s\n", g_rank, e.what());
    return 1;
  }
  return g_failed == 0 ? 0 : 1;
}
