/**
 * @file jaccl/jaccl.h
 * @brief JACCL's entry points (`Config`, `init`, `is_available`) on top of
 *        Chorus. Source compatible with MLX's JACCL; see docs/jaccl.md for
 *        how the configuration maps onto Chorus and what differs.
 */
#ifndef JACCL_JACCL_H_
#define JACCL_JACCL_H_

#include <jaccl/group.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace jaccl {

/**
 * An all-gather over some side channel the host already has: `src` holds
 * this rank's `n_bytes`; afterwards `dst[r * n_bytes, (r + 1) * n_bytes)`
 * holds rank r's. Must be collective over the same ranks as the group.
 */
using AllGatherFn = std::function<void(const char* src, char* dst, size_t n_bytes)>;

/**
 * How to build a group: this process's rank, the coordinator rank 0 listens
 * at, and JACCL's device matrix, whose row count is the group size.
 *
 * `devices[i][j]` lists the device names linking rank i to rank j (empty for
 * i == j or for ranks that are not linked). Over transports without devices
 * (TCP) the names only shape the topology: a full matrix is a mesh, a matrix
 * linking only ring neighbours is a ring.
 *
 * Setters return `*this` so calls chain. Not thread-safe; copyable.
 */
class JACCL_EXPORT Config {
 public:
  Config();

  /** @param[in] rank this process's rank. */
  Config& set_rank(int rank);
  /**
   * Rank given as text (as read from an environment variable).
   * @throws std::invalid_argument if `rank_str` is not a whole non-negative number.
   */
  Config& set_rank(const char* rank_str);
  /** "host:port" where rank 0 listens; the same on every rank. */
  Config& set_coordinator(std::string coordinator);
  /** As above; NULL clears it. */
  Config& set_coordinator(const char* coordinator);
  /**
   * Set the device matrix; the group size becomes its number of rows.
   * @throws std::invalid_argument if the matrix is not square.
   */
  Config& set_devices(std::vector<std::vector<std::vector<std::string>>> devices);
  /**
   * Read the device matrix from a JSON file: an array with one array per
   * rank, whose entry j is null, a device name, or an array of names.
   * @throws std::runtime_error naming the file if it cannot be read or parsed.
   */
  Config& set_devices_from_file(const char* dev_file);
  /** Prefer a ring over a mesh when the matrix allows both. */
  Config& prefer_ring(bool prefer = true);
  /**
   * Bootstrap through the host's own side channel instead of a coordinator:
   * used only when no coordinator is set (rank 0 then chooses one and the
   * others learn it through `agf`).
   */
  Config& set_all_gather(AllGatherFn agf);
  /** As set_all_gather, with the function made at init by `factory(rank, size)`. */
  Config& set_all_gather_factory(std::function<AllGatherFn(int, int)> factory);

  /** At least two ranks, every pair of distinct ranks linked, nothing on the diagonal. */
  bool is_valid_mesh() const;
  /** At least two ranks and each rank linked to both ring neighbours by the same number of devices.
   */
  bool is_valid_ring() const;
  /** A valid mesh or ring, and 0 <= rank < size. */
  bool is_valid() const;

  int get_rank() const { return rank_; }
  int get_size() const { return size_; }
  std::string get_coordinator() const { return coordinator_; }
  bool get_prefer_ring() const { return prefer_ring_; }

  /**
   * A Config from the environment: JACCL_RANK / MLX_RANK,
   * JACCL_COORDINATOR / MLX_JACCL_COORDINATOR, JACCL_IBV_DEVICES /
   * MLX_IBV_DEVICES (path of the device file) and JACCL_RING /
   * MLX_JACCL_RING (set: prefer a ring). What is unset stays unset, so the
   * result may not be valid: check is_valid().
   * @throws std::invalid_argument / std::runtime_error for a malformed rank or device file.
   */
  static Config from_env();

  friend std::shared_ptr<Group> init(const Config& cfg, bool strict);

 private:
  int rank_;
  int size_;
  std::string coordinator_;
  std::vector<std::vector<std::vector<std::string>>> devices_;
  bool prefer_ring_;
  AllGatherFn all_gather_fn_;
  std::function<AllGatherFn(int, int)> all_gather_factory_;
};

/**
 * Whether the backend can be used here: the transport Chorus's configuration
 * names (config file, CHORUS_TRANSPORT, ...; TCP by default) is found, loads
 * and finds something to use on this machine (for "auto", both of its
 * sub-transports). Needs no job: rank, size and coordinator are not read.
 * Never throws. When it is false, init returns nullptr (or throws with the
 * reason when strict).
 */
JACCL_EXPORT bool is_available();

/**
 * Make the group from the environment. With JACCL_RANK, JACCL_COORDINATOR
 * and JACCL_IBV_DEVICES (or their MLX_* aliases) set, as JACCL does; with
 * none of them set, from Chorus's own sources (config file, CHORUS_RANK,
 * CHORUS_WORLD_SIZE, CHORUS_COORDINATOR as set by chorusrun; a process on
 * its own is a group of one). JACCL_RING / MLX_JACCL_RING pins ring
 * algorithms either way.
 *
 * Blocks until every rank has joined or Chorus's `timeout.init` passes.
 * @param[in] strict throw when no group can be made; otherwise return nullptr
 *                   for a missing or invalid configuration or an unavailable
 *                   transport.
 * @returns the group, or nullptr (only when `strict` is false).
 * @throws std::runtime_error with Chorus's message for any other failure
 *         (timeout, peer lost, inconsistent settings across ranks, ...).
 */
JACCL_EXPORT std::shared_ptr<Group> init(bool strict = false);

/**
 * As init(bool), with the side channel made by `factory(rank, size)` for a
 * configuration from the environment that names no coordinator.
 */
JACCL_EXPORT std::shared_ptr<Group> init(bool strict, std::function<AllGatherFn(int, int)> factory);

/**
 * Make the group described by `cfg` (see Config). Blocks like init(bool).
 * A ring topology (or prefer_ring with a valid ring) pins Chorus's ring
 * algorithm for every collective; a mesh leaves the choice to Chorus.
 */
JACCL_EXPORT std::shared_ptr<Group> init(const Config& cfg, bool strict = false);

}  // namespace jaccl

#endif  // JACCL_JACCL_H_
