// Catch-side helpers shared by the conformance cases.
#pragma once

#include "harness.h"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace chorus::conformance {

/// This process's open file descriptors (the entries of /proc/self/fd,
/// the iterator's own included).
inline std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

/// Whether the transport can open a context on this machine. A transport
/// that answers CHORUS_ERR_UNAVAILABLE (no NIC, no device) is reported and
/// its cases do not run; with CHORUS_CONFORMANCE_REQUIRE_AVAILABLE (set for
/// tcp and shm always) or CHORUS_TEST_REQUIRE (CI) that is a failure, and
/// with CHORUS_CONFORMANCE_EXPECT_UNAVAILABLE=TEXT the transport must be
/// unavailable with TEXT in the reason (the verbs plugin on a host without
/// RDMA devices).
inline bool transport_available(std::string& why) {
  static int state = -1;  // -1 unknown, 0 unavailable, 1 available
  static std::string reason;
  // Required to be available: nothing to find out, so open nothing. The
  // [process] cases rely on it: they fork their peers before this process
  // opens a context, which the verbs provider of libfabric needs (a child
  // forked after its parent initialised libfabric cannot post).
  if (state < 0 && std::getenv("CHORUS_CONFORMANCE_REQUIRE_AVAILABLE") != nullptr) state = 1;
  if (state < 0) {
    std::vector<chorus_kv_t> kv;
    for (const auto& [k, v] : Plugin::get().env_config())
      kv.push_back({k.c_str(), v.c_str(), "conformance"});
    chorus_tp_context_info_t info{};
    info.struct_size = sizeof info;
    info.rank = 0;
    info.size = 2;
    info.bind_address = Plugin::get().bind_address();
    info.config = kv.data();
    info.config_count = kv.size();
    chorus_tp_context_t* ctx = nullptr;
    const int rc = tp().context_open(&info, &ctx);
    if (rc == CHORUS_OK) tp().context_close(ctx);
    state = rc == CHORUS_ERR_UNAVAILABLE &&
                    std::getenv("CHORUS_CONFORMANCE_REQUIRE_AVAILABLE") == nullptr
                ? 0
                : 1;
    if (state == 0) reason = last_error();
  }
  why = reason;
  return state == 1;
}

/// Whether the transport declares CHORUS_TP_CAP_PROCESS_LOCAL (its endpoints
/// reach only endpoints of the same process). Asked once, of a context that
/// a forked probe opens: the test process itself must not open one before
/// the [process] cases fork their peers (see transport_available).
inline bool transport_is_process_local() {
  static int state = -1;
  if (state < 0) {
    ChildProcess probe([](Control& ctl) {
      Context ctx(0, 2);
      const bool local = (ctx.caps().flags & CHORUS_TP_CAP_PROCESS_LOCAL) != 0;
      ctl.send("flags", Bytes{static_cast<unsigned char>(local ? 1 : 0)});
    });
    const Bytes flags = probe.control().expect("flags");
    if (probe.join() != 0) throw std::runtime_error("the capability probe process failed");
    state = flags.at(0);
  }
  return state == 1;
}

}  // namespace chorus::conformance

/// Second statement (after CONFORMANCE_NEEDS_TRANSPORT) of every case whose
/// peers are other processes. A transport that declares itself process-local
/// cannot take part; the case says so and does not run.
#define CONFORMANCE_NEEDS_OTHER_PROCESSES()                                      \
  do {                                                                           \
    if (::chorus::conformance::transport_is_process_local()) {                   \
      WARN("not run: transport is process-local (CHORUS_TP_CAP_PROCESS_LOCAL)"); \
      return;                                                                    \
    }                                                                            \
  } while (0)

/// First statement of every case that needs a working transport.
#define CONFORMANCE_NEEDS_TRANSPORT()                                                     \
  do {                                                                                    \
    std::string why_unavailable_;                                                         \
    const bool available_ = ::chorus::conformance::transport_available(why_unavailable_); \
    if (const char* expect_ = std::getenv("CHORUS_CONFORMANCE_EXPECT_UNAVAILABLE")) {     \
      INFO("expected the transport to be unavailable with: " << expect_);                 \
      REQUIRE_FALSE(available_);                                                          \
      REQUIRE_THAT(why_unavailable_, Catch::Contains(expect_));                           \
      return;                                                                             \
    }                                                                                     \
    if (!available_) {                                                                    \
      if (std::getenv("CHORUS_TEST_REQUIRE") != nullptr)                                  \
        FAIL("transport '" << ::chorus::conformance::Plugin::get().transport()            \
                           << "' is unavailable on this machine: " << why_unavailable_    \
                           << " (CHORUS_TEST_REQUIRE=1: a missing capability fails)");    \
      WARN("transport '" << ::chorus::conformance::Plugin::get().transport()              \
                         << "' is unavailable on this machine, case not run: "            \
                         << why_unavailable_);                                            \
      return;                                                                             \
    }                                                                                     \
  } while (0)

/// REQUIRE a status, showing the status name and the plugin's last error.
#define REQUIRE_STATUS(expr, expected)                                                   \
  do {                                                                                   \
    const int rc_ = (expr);                                                              \
    INFO(#expr << " -> " << ::chorus::conformance::status_name(rc_) << " ("              \
               << (rc_ != CHORUS_OK ? ::chorus::conformance::last_error() : "") << ")"); \
    REQUIRE(rc_ == (expected));                                                          \
  } while (0)

#define REQUIRE_OK(expr) REQUIRE_STATUS(expr, CHORUS_OK)
