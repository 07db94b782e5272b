/* An algorithm plugin built against algorithm ABI 1.0, the table as it was
 * before minor 1 appended reduce, gather, scatter, all_to_all and
 * all_to_allv (tests/plugin_abi/abi_evolution_test.cc). It declares its own
 * copy of the 1.0 table (everything up to and including `barrier`), sets
 * struct_size to that size and minor to 0, and implements all_reduce for a
 * job of one rank (a copy).
 *
 * Right after the table it exports "poison" entries in the slots minor 1
 * gives to the new ops. A core that read an op beyond struct_size would find
 * them non-NULL and call them (or offer the plugin for those collectives);
 * each call bumps chorus_fixture_poison_calls, which the test reads. */
#include <chorus/algorithm.h>

#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* Calls of ops that lie beyond struct_size: must stay 0. */
EXPORT int chorus_fixture_poison_calls = 0;

typedef struct chorus_algorithm_plugin_v1_0 {
  size_t struct_size;
  uint32_t minor;
  const char* name;
  uint32_t peers;
  uint32_t flags;
  int (*init)(const chorus_host_v1_t* host);
  void (*fini)(void);
  int (*preference)(int collective, int size, uint64_t bytes);
  int (*all_reduce)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype, int op);
  int (*all_gather)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                    int dtype);
  int (*reduce_scatter)(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                        int dtype, int op);
  int (*broadcast)(const chorus_algo_env_v1_t* env, void* buf, size_t count, int dtype, int root);
  int (*barrier)(const chorus_algo_env_v1_t* env);
} chorus_algorithm_plugin_v1_0_t;

_Static_assert(sizeof(chorus_algorithm_plugin_v1_0_t) ==
                   offsetof(chorus_algorithm_plugin_v1_t, reduce),
               "the 1.0 table must be a prefix of today's, ending where minor 1 begins");

static int minor0_init(const chorus_host_v1_t* host) {
  (void)host;
  return CHORUS_OK;
}

/* Wants everything it has, strongly: if the core offered it a collective it
 * lacks, `auto` would pick it. */
static int minor0_preference(int collective, int size, uint64_t bytes) {
  (void)size;
  (void)bytes;
  if (collective >= CHORUS_COLL_REDUCE) ++chorus_fixture_poison_calls;
  return 1000;
}

static int minor0_all_reduce(const chorus_algo_env_v1_t* env, const void* in, void* out,
                             size_t count, int dtype, int op) {
  (void)op;
  if (env->size != 1) return CHORUS_ERR_NOT_SUPPORTED;
  if (in != out) memmove(out, in, count * chorus_dtype_size(dtype));
  return CHORUS_OK;
}

static int poison_rooted(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                         int dtype, int root) {
  (void)env, (void)in, (void)out, (void)count, (void)dtype, (void)root;
  ++chorus_fixture_poison_calls;
  return CHORUS_ERR_INTERNAL;
}
static int poison_reduce(const chorus_algo_env_v1_t* env, const void* in, void* out, size_t count,
                         int dtype, int op, int root) {
  (void)op;
  return poison_rooted(env, in, out, count, dtype, root);
}
static int poison_all_to_all(const chorus_algo_env_v1_t* env, const void* in, void* out,
                             size_t count, int dtype) {
  return poison_rooted(env, in, out, count, dtype, 0);
}
static int poison_all_to_allv(const chorus_algo_env_v1_t* env, const void* in, const size_t* sc,
                              const size_t* so, void* out, const size_t* rc, const size_t* ro,
                              int dtype) {
  (void)sc, (void)so, (void)rc, (void)ro;
  return poison_rooted(env, in, out, 0, dtype, 0);
}

struct fixture_export {
  chorus_algorithm_plugin_v1_0_t table;
  int (*beyond_reduce)(const chorus_algo_env_v1_t*, const void*, void*, size_t, int, int, int);
  int (*beyond_gather)(const chorus_algo_env_v1_t*, const void*, void*, size_t, int, int);
  int (*beyond_scatter)(const chorus_algo_env_v1_t*, const void*, void*, size_t, int, int);
  int (*beyond_all_to_all)(const chorus_algo_env_v1_t*, const void*, void*, size_t, int);
  int (*beyond_all_to_allv)(const chorus_algo_env_v1_t*, const void*, const size_t*, const size_t*,
                            void*, const size_t*, const size_t*, int);
};

EXPORT const struct fixture_export chorus_algorithm_plugin_v1 = {
    {sizeof(chorus_algorithm_plugin_v1_0_t), 0, "minor-zero", CHORUS_ALGO_PEERS_RING,
     CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS, minor0_init,
     NULL, minor0_preference, minor0_all_reduce, NULL, NULL, NULL, NULL},
    poison_reduce,
    poison_rooted,
    poison_rooted,
    poison_all_to_all,
    poison_all_to_allv,
};
