/* An algorithm plugin broken on purpose, one way per build (FIXTURE_*). */
#include <chorus/algorithm.h>

#define EXPORT __attribute__((visibility("default")))

static int fx_init(const chorus_host_v1_t* host) {
  (void)host;
#ifdef FIXTURE_INIT_FAILS
  return CHORUS_ERR_INTERNAL;
#else
  return CHORUS_OK;
#endif
}

#if defined(FIXTURE_UNKNOWN_MAJOR)
#define TABLE_NAME chorus_algorithm_plugin_v3
#elif defined(FIXTURE_NO_SYMBOL)
#define TABLE_NAME some_other_symbol
#else
#define TABLE_NAME chorus_algorithm_plugin_v1
#endif

EXPORT const chorus_algorithm_plugin_v1_t TABLE_NAME = {
#ifdef FIXTURE_SHORT_TABLE
    8,
#else
    sizeof(chorus_algorithm_plugin_v1_t),
#endif
    CHORUS_ALGORITHM_ABI_MINOR,
    FIXTURE_NAME,
#ifdef FIXTURE_BAD_PEERS
    77,
#else
    CHORUS_ALGO_PEERS_RING,
#endif
    0,
#ifdef FIXTURE_MISSING_OP
    NULL,
#else
    fx_init,
#endif
    NULL, NULL, NULL, NULL, NULL, NULL, NULL,
};
