// mpi-pingpong: the isend/irecv ping-pong of chorus-engine-bench (pingpong
// mode) over Open MPI, step for step: barrier, rank 0 isends and waits, then
// irecvs the echo and waits; rank 1 the reverse; half the median round trip
// is printed as the one-way latency. -c checks every byte.
//   mpirun -np 2 mpi-pingpong MIN_BYTES MAX_BYTES ITERS WARMUP [-c]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 5 || size < 2) {
    if (rank == 0)
      std::fprintf(stderr, "usage: mpirun -np 2 mpi-pingpong MIN MAX ITERS WARMUP [-c]\n");
    MPI_Finalize();
    return 2;
  }
  const std::uint64_t min_bytes = std::max<std::uint64_t>(1, std::strtoull(argv[1], nullptr, 10));
  const std::uint64_t max_bytes = std::strtoull(argv[2], nullptr, 10);
  const int iters = std::atoi(argv[3]), warmup = std::atoi(argv[4]);
  const bool check = argc > 5 && std::strcmp(argv[5], "-c") == 0;
  std::uint64_t wrong = 0;
  for (std::uint64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    std::vector<std::uint8_t> send(bytes), recv(bytes);
    std::vector<double> rtt;
    for (int it = 0; it < warmup + iters; ++it) {
      for (std::size_t i = 0; i < bytes; ++i)
        send[i] = std::uint8_t((i * 31 + std::size_t(it)) ^ std::size_t(rank));
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank > 1) continue;
      const int peer = 1 - rank;
      const auto t0 = std::chrono::steady_clock::now();
      for (int leg = 0; leg < 2; ++leg) {
        MPI_Request req;
        if ((leg == 0) == (rank == 0))
          MPI_Isend(send.data(), int(bytes), MPI_BYTE, peer, 0, MPI_COMM_WORLD, &req);
        else
          MPI_Irecv(recv.data(), int(bytes), MPI_BYTE, peer, 0, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
      }
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (it >= warmup) rtt.push_back(t);
      if (check)
        for (std::size_t i = 0; i < bytes; ++i)
          if (recv[i] != std::uint8_t((i * 31 + std::size_t(it)) ^ std::size_t(peer))) ++wrong;
    }
    if (rank == 0) {
      std::sort(rtt.begin(), rtt.end());
      const std::size_t n = rtt.size();
      const double med = n == 0 ? 0 : n % 2 ? rtt[n / 2] : (rtt[n / 2 - 1] + rtt[n / 2]) / 2;
      std::printf(
          "{\"bench\": \"pingpong\", \"ranks\": %d, \"transport\": \"mpi\", \"bytes\": %llu, "
          "\"iters\": %d, \"latency_us\": %.2f, \"checked\": %s}\n",
          size, static_cast<unsigned long long>(bytes), iters, med / 2 * 1e6,
          check ? "true" : "false");
      std::fflush(stdout);
    }
  }
  if (check)
    std::printf("# rank %d: %llu wrong bytes\n", rank, static_cast<unsigned long long>(wrong));
  MPI_Finalize();
  return wrong == 0 ? 0 : 3;
}
