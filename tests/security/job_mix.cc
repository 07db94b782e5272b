// One rank of a job that must not mix with another job on the same port
// (tests/security/two_jobs.sh). argv[1] is the job's mark (a small integer,
// different per job). After init every rank all-gathers (mark, rank): a
// result holding another mark means the jobs merged. Then one checked
// all_reduce. With argv[2] and argv[3], rank 0 then creates the file argv[2]
// and every rank waits (up to 60 s) for the file argv[3] before it leaves.
// Exit 0: joined and saw only its own job; 3: merged; 1: init or
// a call failed (the error is printed).
#include <chorus/chorus.h>

#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const std::int64_t mark = argc > 1 ? std::atoll(argv[1]) : 0;
  chorus_options_t opts;
  chorus_options_init(&opts);
  chorus_comm_t* comm = nullptr;
  if (int rc = chorus_comm_init(&opts, &comm); rc != CHORUS_OK) {
    std::printf("job %lld: init failed: %s: %s\n", static_cast<long long>(mark),
                chorus_status_name(rc), chorus_last_error());
    return 1;
  }
  int rank = 0, size = 0;
  chorus_comm_rank(comm, &rank);
  chorus_comm_size(comm, &size);
  const std::int64_t mine[2] = {mark, rank};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(size), -1);
  int rc = chorus_all_gather(comm, mine, all.data(), 2, CHORUS_INT64);
  if (rc != CHORUS_OK) {
    std::printf("job %lld rank %d: all_gather failed: %s: %s\n", static_cast<long long>(mark), rank,
                chorus_status_name(rc), chorus_last_error());
    return 1;
  }
  for (int r = 0; r < size; ++r) {
    if (all[2 * r] != mark || all[2 * r + 1] != r) {
      std::printf("job %lld rank %d: MIXED: slot %d holds job %lld rank %lld\n",
                  static_cast<long long>(mark), rank, r, static_cast<long long>(all[2 * r]),
                  static_cast<long long>(all[2 * r + 1]));
      return 3;
    }
  }
  std::vector<std::int64_t> x(1000), y(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = mark * 100000 + rank * 1000 + std::int64_t(i);
  rc = chorus_all_reduce(comm, x.data(), y.data(), x.size(), CHORUS_INT64, CHORUS_SUM);
  if (rc != CHORUS_OK) {
    std::printf("job %lld rank %d: all_reduce failed: %s: %s\n", static_cast<long long>(mark), rank,
                chorus_status_name(rc), chorus_last_error());
    return 1;
  }
  const std::int64_t n = size;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const std::int64_t want = n * (mark * 100000 + std::int64_t(i)) + 1000 * n * (n - 1) / 2;
    if (y[i] != want) {
      std::printf("job %lld rank %d: all_reduce element %zu is %lld, expected %lld\n",
                  static_cast<long long>(mark), rank, i, static_cast<long long>(y[i]),
                  static_cast<long long>(want));
      return 3;
    }
  }
  if (argc > 3) {
    // Hold the job open: rank 0 says it formed, every rank waits for the stop file.
    if (rank == 0) std::fclose(std::fopen(argv[2], "w"));
    for (int i = 0; i < 1200 && ::access(argv[3], F_OK) != 0; ++i) ::usleep(50000);
  }
  chorus_comm_finalize(comm);
  std::printf("job %lld rank %d: OK\n", static_cast<long long>(mark), rank);
  return 0;
}
