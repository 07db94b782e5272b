// mpi-bench: chorus-bench's methodology (bench_driver.h) over MPI's
// MPI_Allreduce, MPI_Allgather and MPI_Reduce_scatter_block, for comparing
// Chorus with Open MPI on the same machine. Launch with mpirun; pick the
// byte transfer layer there (--mca btl tcp,self or --mca btl vader,self).
#include <mpi.h>

#include "bench/bench_driver.h"

namespace {

class MpiBackend final : public chorus::bench::PeerBackend {
 public:
  MpiBackend() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void run(chorus::bench::PeerColl coll, const float* in, float* out, std::size_t count) override {
    const int c = static_cast<int>(count);
    switch (coll) {
      case chorus::bench::PeerColl::kAllReduce:
        MPI_Allreduce(in, out, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case chorus::bench::PeerColl::kAllGather:
        MPI_Allgather(in, c, MPI_FLOAT, out, c, MPI_FLOAT, MPI_COMM_WORLD);
        break;
      case chorus::bench::PeerColl::kReduceScatter:
        MPI_Reduce_scatter_block(in, out, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    }
  }
  void max_doubles(double* v, std::size_t n) override {
    MPI_Allreduce(MPI_IN_PLACE, v, static_cast<int>(n), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  std::uint64_t sum_u64(std::uint64_t v) override {
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return v;
  }
  const char* library() const override { return "openmpi"; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  chorus::bench::PeerOptions o;
  o.label = "mpi";
  if (!chorus::bench::parse_peer_options(argc, argv, o)) {
    MPI_Finalize();
    return 2;
  }
  MpiBackend backend;
  const std::uint64_t wrong = chorus::bench::run_peer_bench(backend, o);
  MPI_Finalize();
  if (wrong != 0) {
    std::fprintf(stderr, "mpi-bench: %llu wrong elements\n", static_cast<unsigned long long>(wrong));
    return 1;
  }
  return 0;
}
