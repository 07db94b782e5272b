// gloo-bench: chorus-bench's methodology (bench_driver.h) over Gloo's TCP
// transport: gloo::allreduce and gloo::allgather (the options API frameworks
// call) and ReduceScatterHalvingDoubling (Gloo's reduce-scatter, in place).
//
// Rank and size come from CHORUS_RANK / CHORUS_WORLD_SIZE (chorusrun), else
// RANK / WORLD_SIZE; the ranks meet through a gloo FileStore in
// $GLOO_BENCH_STORE (default /tmp/gloo-bench-<uid>), which must be empty of
// a previous job's keys: compare.sh gives each run a fresh directory.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <unistd.h>

#include <memory>

#include "bench/bench_driver.h"

namespace {

int env_int(const char* a, const char* b, int fallback) {
  if (const char* v = std::getenv(a)) return std::atoi(v);
  if (const char* v = std::getenv(b)) return std::atoi(v);
  return fallback;
}

class GlooBackend final : public chorus::bench::PeerBackend {
 public:
  GlooBackend(int rank, int size, const std::string& store_dir) : rank_(rank), size_(size) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    device_ = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    gloo::rendezvous::PrefixStore prefix("gloo-bench", store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->connectFullMesh(prefix, device_);
    context_ = ctx;
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override {
    gloo::BarrierOptions opts(context_);
    opts.setTag(1);
    gloo::barrier(opts);
  }
  void prepare(chorus::bench::PeerColl coll, const float* in, float* out,
               std::size_t count) override {
    if (coll != chorus::bench::PeerColl::kReduceScatter) return;
    // ReduceScatterHalvingDoubling works in place on the whole buffer and
    // leaves this rank's block at its start: restore the input, untimed.
    const std::size_t total = count * static_cast<std::size_t>(size_);
    if (work_.size() != total || rs_count_ != count) {
      work_.assign(total, 0.0f);
      rs_count_ = count;
      std::vector<int> recv(static_cast<std::size_t>(size_), static_cast<int>(count));
      rs_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
          context_, std::vector<float*>{work_.data()}, static_cast<int>(total), recv);
    }
    // run() can return while its last sends still read from the buffer; a
    // barrier first (the peers' run() has consumed them) makes the restore safe.
    barrier();
    std::copy(in, in + total, work_.begin());
    (void)out;
  }
  void run(chorus::bench::PeerColl coll, const float* in, float* out, std::size_t count) override {
    switch (coll) {
      case chorus::bench::PeerColl::kAllReduce: {
        gloo::AllreduceOptions opts(context_);
        opts.setInput(const_cast<float*>(in), count);
        opts.setOutput(out, count);
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        opts.setTag(2);
        gloo::allreduce(opts);
        break;
      }
      case chorus::bench::PeerColl::kAllGather: {
        if (count == 0) break;  // gloo::allgather divides by the per-rank size
        gloo::AllgatherOptions opts(context_);
        opts.setInput(const_cast<float*>(in), count);
        opts.setOutput(out, count * static_cast<std::size_t>(size_));
        opts.setTag(3);
        gloo::allgather(opts);
        break;
      }
      case chorus::bench::PeerColl::kReduceScatter:
        if (count > 0) rs_->run();
        std::copy(work_.begin(), work_.begin() + static_cast<std::ptrdiff_t>(count), out);
        break;
    }
  }
  void max_doubles(double* v, std::size_t n) override {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(v, n);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
    opts.setTag(4);
    gloo::allreduce(opts);
  }
  std::uint64_t sum_u64(std::uint64_t v) override {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(&v, 1);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<std::uint64_t>));
    opts.setTag(5);
    gloo::allreduce(opts);
    return v;
  }
  const char* library() const override { return "gloo"; }

 private:
  int rank_;
  int size_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::vector<float> work_;
  std::size_t rs_count_ = 0;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs_;
};

}  // namespace

int main(int argc, char** argv) {
  chorus::bench::PeerOptions o;
  o.label = "tcp";
  if (!chorus::bench::parse_peer_options(argc, argv, o)) return 2;
  const int rank = env_int("CHORUS_RANK", "RANK", 0);
  const int size = env_int("CHORUS_WORLD_SIZE", "WORLD_SIZE", 1);
  std::string store = "/tmp/gloo-bench-" + std::to_string(::getuid());
  if (const char* s = std::getenv("GLOO_BENCH_STORE")) store = s;
  try {
    GlooBackend backend(rank, size, store);
    const std::uint64_t wrong = chorus::bench::run_peer_bench(backend, o);
    if (wrong != 0) {
      std::fprintf(stderr, "gloo-bench: %llu wrong elements\n",
                   static_cast<unsigned long long>(wrong));
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-bench (rank %d): %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
