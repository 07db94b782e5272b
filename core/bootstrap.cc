// The public Bootstrap surface (bootstrap.h): parse_host_port, connect
// (validation, then joining as rank 0 or as a peer), and the collective
// entry points, each behind an exception fence that turns anything thrown
// into a Status and a final failure of the side channel. The rest of the
// bootstrap is in the files listed in bootstrap_impl.h.

#include "core/bootstrap_impl.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <new>
#include <utility>

namespace chorus::core {

namespace {

/// Runs `body`, turning any exception into a Status (and, through `impl`, a
/// final failure of the side channel).
template <class Impl, class Body>
Status fenced(Impl* impl, const char* what, Body&& body) {
  std::string reason;
  int code = CHORUS_ERR_INTERNAL;
  try {
    return body();
  } catch (const std::bad_alloc&) {
    code = CHORUS_ERR_SYSTEM;
    reason = "out of memory";
  } catch (const std::exception& e) {
    reason = e.what();
  } catch (...) {
    reason = "unknown exception";
  }
  try {
    Status status(code, cat("rank ", impl != nullptr ? impl->rank() : -1, ": bootstrap ", what,
                            ": ", reason));
    return impl != nullptr ? impl->fail(std::move(status)) : status;
  } catch (...) {
    return {code, "bootstrap: out of memory while reporting an error"};
  }
}

}  // namespace

Result<HostPort> parse_host_port(std::string_view text) {
  const auto bad = [text](std::string_view why) {
    return Status(CHORUS_ERR_INVALID_ARGUMENT,
                  cat("coordinator address '", text, "' ", why,
                      "; expected host:port, e.g. 10.0.0.1:29500, [fe80::1]:29500 or "
                      "node01:29500"));
  };
  std::string_view host;
  std::string_view port;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return bad("has no closing ']'");
    host = text.substr(1, close - 1);
    const auto rest = text.substr(close + 1);
    if (!rest.starts_with(':')) return bad("has no ':port' after the IPv6 address");
    port = rest.substr(1);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("has no port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return bad("looks like an IPv6 address without brackets; write [address]:port");
    }
  }
  if (host.empty()) return bad("has no host");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value < 1 ||
      value > 65535) {
    return bad("has no valid port (1-65535)");
  }
  return HostPort{std::string(host), static_cast<std::uint16_t>(value)};
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::connect(const BootstrapOptions& options,
                                                      Deadline deadline) {
  std::unique_ptr<Impl> impl;
  Status status = fenced(static_cast<Impl*>(nullptr), "connect", [&]() -> Status {
    if (options.size < 1) {
      return {CHORUS_ERR_INVALID_ARGUMENT,
              cat("bootstrap: the job size must be at least 1 (got ", options.size, ")")};
    }
    if (options.rank < 0 || options.rank >= options.size) {
      return {CHORUS_ERR_INVALID_ARGUMENT,
              cat("bootstrap: rank ", options.rank, " is outside 0..", options.size - 1,
                  " for a job of ", options.size, " ranks")};
    }
    HostPort host;
    if (options.size > 1) {
      auto parsed = parse_host_port(options.coordinator);
      if (!parsed.is_ok()) {
        return parsed.status().with_context(cat("rank ", options.rank, ": bootstrap"));
      }
      host = std::move(parsed).value();
    }
    impl = std::make_unique<Impl>(options, std::move(host));
    if (options.size == 1) return Status::ok();
    return fenced(impl.get(), "connect", [&] {
      return options.rank == 0 ? impl->join_as_root(deadline) : impl->join_as_peer(deadline);
    });
  });
  if (!status.is_ok()) return status;
  return std::unique_ptr<Bootstrap>(new Bootstrap(std::move(impl)));
}

Bootstrap::Bootstrap(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Bootstrap::~Bootstrap() = default;

int Bootstrap::rank() const { return impl_->rank(); }

int Bootstrap::size() const { return impl_->size(); }

std::uint64_t Bootstrap::bytes_sent() const { return impl_->bytes_sent(); }

void Bootstrap::close_links() { impl_->close_links(); }

Status Bootstrap::all_gather(std::span<const std::byte> mine,
                             std::vector<std::vector<std::byte>>& all, Deadline deadline) {
  return fenced(impl_.get(), "all_gather", [&] {
    std::vector<Bytes> out;
    Status status = impl_->collective(frame::Op::kAllGather, 0, mine, out, deadline);
    if (status.is_ok()) all = std::move(out);
    return status;
  });
}

Status Bootstrap::all_gather(std::span<const std::byte> mine,
                             std::vector<std::vector<std::byte>>& all, Deadline deadline,
                             const BlobFilter& keep) {
  impl_->set_gather_filter(&keep);
  Status status = all_gather(mine, all, deadline);
  impl_->set_gather_filter(nullptr);
  return status;
}

Status Bootstrap::barrier(Deadline deadline) {
  return fenced(impl_.get(), "barrier", [&] {
    std::vector<Bytes> out;
    return impl_->collective(frame::Op::kBarrier, 0, {}, out, deadline);
  });
}

Status Bootstrap::broadcast(std::vector<std::byte>& data, int root, Deadline deadline) {
  return fenced(impl_.get(), "broadcast", [&] {
    std::vector<Bytes> out;
    const std::span<const std::byte> mine =
        root == impl_->rank() ? std::span<const std::byte>(data) : std::span<const std::byte>();
    Status status = impl_->collective(frame::Op::kBroadcast, root, mine, out, deadline);
    if (status.is_ok() && root != impl_->rank()) data = std::move(out.front());
    return status;
  });
}

}  // namespace chorus::core
