// Prints jaccl::is_available() for the configuration and environment it runs
// in, as a JACCL host such as MLX asks it before choosing the backend.
//
// Usage: jaccl_available [--expect 0|1]   (exit 1 when the answer differs)
#include <jaccl/jaccl.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  int expect = -1;
  if (argc == 3 && std::strcmp(argv[1], "--expect") == 0) {
    expect = argv[2][0] == '1' ? 1 : 0;
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: %s [--expect 0|1]\n", argv[0]);
    return 2;
  }
  const int available = jaccl::is_available() ? 1 : 0;
  std::printf("jaccl::is_available() = %s\n", available ? "true" : "false");
  if (expect >= 0 && available != expect) {
    std::fprintf(stderr, "jaccl_available: expected %s\n", expect ? "true" : "false");
    return 1;
  }
  return 0;
}
