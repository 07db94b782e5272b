// A one-rank job through the installed headers and library: typed all_reduce
// over the C++ wrapper, result checked element by element. Prints the
// transport and algorithm that ran so the caller can see which library
// answered.
#include <chorus/chorus.hpp>

#include <cstdio>
#include <vector>

int main() {
  try {
    chorus::Communicator comm;
    std::vector<int32_t> in(1000), out(1000, -1);
    for (size_t i = 0; i < in.size(); ++i) in[i] = int32_t(i * 3 + 1);
    comm.all_reduce(in.data(), out.data(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (out[i] != in[i]) {
        std::fprintf(stderr, "element %zu: got %d, expected %d\n", i, out[i], in[i]);
        return 1;
      }
    }
    std::printf("consumer: all_reduce of %zu int32 exact on %d rank(s), transport %s\n", in.size(),
                comm.size(), chorus_comm_transport(comm.handle()));
    return 0;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
