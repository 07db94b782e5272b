// A JACCL program, written against the jaccl headers only, that bootstraps
// through its own side channel (Config::set_all_gather and friends) instead
// of a coordinator address. The side channel here is a shared directory:
// each rank publishes its bytes as a file and reads everyone else's.
//
// Usage: jaccl_sidechannel --dir DIR --mode config --rank R --size N
//        jaccl_sidechannel --dir DIR --mode factory --rank R --size N
//        jaccl_sidechannel --dir DIR --mode env
//   config:  Config{rank, N-rank mesh}.set_all_gather(fn)
//   factory: Config{rank, N-rank mesh}.set_all_gather_factory(make_fn)
//   env:     JACCL_RANK + JACCL_IBV_DEVICES from the environment, no
//            coordinator, jaccl::init(true, make_fn)
#include <jaccl/jaccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

/// An all-gather over files in `dir`: call k of rank r writes `ag<k>.<r>`
/// (atomically, by rename) and then waits for the other ranks' files.
jaccl::AllGatherFn file_all_gather(const std::string& dir, int rank, int size) {
  auto calls = std::make_shared<int>(0);
  return [=](const char* src, char* dst, size_t n_bytes) {
    const std::string prefix = dir + "/ag" + std::to_string((*calls)++) + ".";
    const std::string mine = prefix + std::to_string(rank);
    {
      std::ofstream out(mine + ".tmp", std::ios::binary);
      out.write(src, std::streamsize(n_bytes));
      if (!out) throw std::runtime_error("cannot write " + mine + ".tmp");
    }
    if (std::rename((mine + ".tmp").c_str(), mine.c_str()) != 0)
      throw std::runtime_error("cannot rename to " + mine);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int r = 0; r < size; ++r) {
      const std::string theirs = prefix + std::to_string(r);
      for (;;) {
        std::ifstream in(theirs, std::ios::binary);
        if (in) {
          std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
          if (bytes.size() != n_bytes)
            throw std::runtime_error(theirs + " holds " + std::to_string(bytes.size()) +
                                     " bytes, expected " + std::to_string(n_bytes));
          std::memcpy(dst + size_t(r) * n_bytes, bytes.data(), n_bytes);
          break;
        }
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error("timed out waiting for " + theirs);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  };
}

std::vector<std::vector<std::vector<std::string>>> mesh(int size) {
  const auto n = static_cast<size_t>(size);
  std::vector<std::vector<std::vector<std::string>>> devices(
      n, std::vector<std::vector<std::string>>(n));
  for (int i = 0; i < size; ++i)
    for (int j = 0; j < size; ++j)
      if (i != j) devices[i][j] = {"rdma_en" + std::to_string(i + j)};
  return devices;
}

int run(const std::string& dir, const std::string& mode, int rank, int size) {
  auto factory = [dir](int r, int n) { return file_all_gather(dir, r, n); };
  std::shared_ptr<jaccl::Group> group;
  if (mode == "config") {
    group = jaccl::init(jaccl::Config()
                            .set_rank(rank)
                            .set_devices(mesh(size))
                            .set_all_gather(file_all_gather(dir, rank, size)),
                        true);
  } else if (mode == "factory") {
    group = jaccl::init(
        jaccl::Config().set_rank(rank).set_devices(mesh(size)).set_all_gather_factory(factory),
        true);
  } else if (mode == "env") {
    group = jaccl::init(true, factory);
  } else {
    throw std::runtime_error("unknown mode '" + mode + "'");
  }
  rank = group->rank();
  size = group->size();

  int failures = 0;
  int32_t in = rank + 1;
  int32_t sum = 0;
  group->all_sum(&in, &sum, sizeof(in), jaccl::Int32);
  if (sum != size * (size + 1) / 2) {
    std::fprintf(stderr, "rank %d: FAIL all_sum gave %d, expected %d\n", rank, int(sum),
                 size * (size + 1) / 2);
    ++failures;
  }
  std::vector<int32_t> ranks(size_t(size), -1);
  group->all_gather(&rank, ranks.data(), sizeof(int32_t));
  for (int r = 0; r < size; ++r)
    if (ranks[r] != r) {
      std::fprintf(stderr, "rank %d: FAIL all_gather slot %d holds %d\n", rank, r, int(ranks[r]));
      ++failures;
    }
  group->barrier();
  std::printf("rank %d of %d (%s side channel): %s\n", rank, size, mode.c_str(),
              failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, mode;
  int rank = -1, size = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") {
      dir = argv[i + 1];
    } else if (a == "--mode") {
      mode = argv[i + 1];
    } else if (a == "--rank") {
      rank = std::atoi(argv[i + 1]);
    } else if (a == "--size") {
      size = std::atoi(argv[i + 1]);
    }
  }
  if (dir.empty() || mode.empty() || (mode != "env" && (rank < 0 || size < 2))) {
    std::fprintf(stderr, "usage: %s --dir DIR --mode config|factory|env [--rank R --size N]\n",
                 argv[0]);
    return 2;
  }
  try {
    return run(dir, mode, rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jaccl_sidechannel: %s\n", e.what());
    return 1;
  }
}
