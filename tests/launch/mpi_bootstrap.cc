// Chorus inside an mpirun job, two ways:
//   host-bootstrap: Chorus exchanges its connection data through MPI_Allgather
//                   (the host-owned bootstrap hooks), no coordinator at all;
//   env:            rank and size from Open MPI's variables, the coordinator
//                   passed with mpirun -x CHORUS_COORDINATOR.
// Both then run checked collectives and compare with MPI_Allreduce.
#include <chorus/chorus.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int mpi_allgather(void* ctx, const void* in, void* out, size_t size) {
  auto comm = *static_cast<MPI_Comm*>(ctx);
  return MPI_Allgather(in, int(size), MPI_BYTE, out, int(size), MPI_BYTE, comm) == MPI_SUCCESS ? 0 : 1;
}

int mpi_barrier(void* ctx) {
  return MPI_Barrier(*static_cast<MPI_Comm*>(ctx)) == MPI_SUCCESS ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string mode = argc > 1 ? argv[1] : "host-bootstrap";
  MPI_Comm mpi = MPI_COMM_WORLD;

  chorus_options_t opts;
  chorus_options_init(&opts);
  if (mode == "host-bootstrap") {
    opts.rank = rank;
    opts.size = size;
    opts.allgather = &mpi_allgather;
    opts.barrier = &mpi_barrier;
    opts.bootstrap_ctx = &mpi;
  }
  chorus_comm_t* comm = nullptr;
  if (int rc = chorus_comm_init(&opts, &comm); rc != CHORUS_OK) {
    std::fprintf(stderr, "rank %d: chorus init (%s) failed: %s\n", rank, mode.c_str(), chorus_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int crank = -1, csize = -1;
  chorus_comm_rank(comm, &crank);
  chorus_comm_size(comm, &csize);
  int failed = 0, passed = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (ok) ++passed;
    else {
      ++failed;
      std::fprintf(stderr, "rank %d FAIL: %s\n", rank, what.c_str());
    }
  };
  expect(crank == rank && csize == size, "Chorus rank/size match MPI's");
  for (size_t count : {size_t(1), size_t(1000), size_t(1) << 20}) {
    std::vector<int64_t> in(count), ours(count), theirs(count);
    for (size_t i = 0; i < count; ++i) in[i] = int64_t(i % 977) * (rank + 1) - 300;
    int rc = chorus_all_reduce(comm, in.data(), ours.data(), count, CHORUS_INT64, CHORUS_SUM);
    MPI_Allreduce(in.data(), theirs.data(), int(count), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    expect(rc == CHORUS_OK && ours == theirs, "all_reduce sum of " + std::to_string(count) + " matches MPI");
    rc = chorus_all_reduce(comm, in.data(), ours.data(), count, CHORUS_INT64, CHORUS_MAX);
    MPI_Allreduce(in.data(), theirs.data(), int(count), MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    expect(rc == CHORUS_OK && ours == theirs, "all_reduce max of " + std::to_string(count) + " matches MPI");
    std::vector<int64_t> g_ours(count * size_t(size)), g_theirs(count * size_t(size));
    rc = chorus_all_gather(comm, in.data(), g_ours.data(), count, CHORUS_INT64);
    MPI_Allgather(in.data(), int(count), MPI_INT64_T, g_theirs.data(), int(count), MPI_INT64_T, MPI_COMM_WORLD);
    expect(rc == CHORUS_OK && g_ours == g_theirs, "all_gather of " + std::to_string(count) + " matches MPI");
  }
  expect(chorus_barrier(comm) == CHORUS_OK, "barrier");
  chorus_comm_finalize(comm);
  std::printf("mpi_bootstrap %s rank %d of %d: %d passed, %d failed\n", mode.c_str(), rank, size, passed, failed);
  int any = failed;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
