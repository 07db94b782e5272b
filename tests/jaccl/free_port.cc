// Prints a TCP port on 127.0.0.1 that was free a moment ago, for tests that
// start ranks by hand and need a coordinator address. Same choice as
// chorusrun's (below the ephemeral range, checked by binding).
#include <cstdio>
#include <exception>

#include "tools/chorusrun/job_environment.h"

int main() {
  try {
    std::printf("%u\n", unsigned{chorus::run::pick_free_port()});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "free_port: %s\n", e.what());
    return 1;
  }
}
