// The JACCL environment variables and their MLX aliases, read in one place so
// Config::from_env and init agree on names and precedence.
#ifndef JACCL_SRC_ENVIRONMENT_H_
#define JACCL_SRC_ENVIRONMENT_H_

namespace jaccl::detail {

/// One setting: the value of the first variable of its list that is set
/// (JACCL_* before MLX_*), and that variable's name. Both NULL when unset.
struct EnvValue {
  const char* value = nullptr;
  const char* name = nullptr;
  explicit operator bool() const { return value != nullptr; }
};

struct JacclEnvironment {
  EnvValue rank;         ///< JACCL_RANK, MLX_RANK
  EnvValue coordinator;  ///< JACCL_COORDINATOR, MLX_JACCL_COORDINATOR
  EnvValue devices;      ///< JACCL_IBV_DEVICES, MLX_IBV_DEVICES: device file path
  EnvValue ring;         ///< JACCL_RING, MLX_JACCL_RING: set means prefer a ring

  /// Whether any of the variables that identify a JACCL job (rank,
  /// coordinator, devices) is set. If none is, init uses Chorus's sources.
  bool names_a_job() const { return rank || coordinator || devices; }
};

/// Reads the process environment. Not thread-safe against setenv.
JacclEnvironment read_environment();

}  // namespace jaccl::detail

#endif  // JACCL_SRC_ENVIRONMENT_H_
