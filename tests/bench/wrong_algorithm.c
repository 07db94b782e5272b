/* An all_reduce that is wrong on purpose, for a job of one rank, to show
 * that chorus-bench -c cannot pass a collective that is wrong only some of
 * the time. One way per build:
 *   WRONG_FIRST_CALL  float32 results are off by one element on the first
 *                     call of each count (a warm-up iteration), right after.
 *   WRONG_HIDES       float32 results are always off by one element, and a
 *                     one-element uint64 sum comes back 0: a checker that
 *                     adds up its wrong counts with this all_reduce hears
 *                     "0 wrong". */
#include <chorus/algorithm.h>

#include <string.h>

#define EXPORT __attribute__((visibility("default")))

#ifndef WRONG_HIDES
static size_t last_count = (size_t)-1;
#endif

static int wrong_init(const chorus_host_v1_t* host) {
  (void)host;
  return CHORUS_OK;
}

static int wrong_all_reduce(const chorus_algo_env_v1_t* env, const void* in, void* out,
                            size_t count, int dtype, int op) {
  (void)op;
  if (env->size != 1)
    return env->fail(env->core, CHORUS_ERR_INVALID_ARGUMENT,
                     "the wrong-on-purpose fixture runs a job of one rank only");
  if (in != out) memcpy(out, in, count * chorus_dtype_size(dtype));
#ifdef WRONG_HIDES
  if (dtype == CHORUS_UINT64 && count == 1) memset(out, 0, sizeof(uint64_t));
  if (dtype == CHORUS_FLOAT32 && count > 0) ((float*)out)[0] += 1.0f;
#else
  if (dtype == CHORUS_FLOAT32 && count > 0 && count != last_count) ((float*)out)[0] += 1.0f;
  if (dtype == CHORUS_FLOAT32) last_count = count;
#endif
  return CHORUS_OK;
}

EXPORT const chorus_algorithm_plugin_v1_t chorus_algorithm_plugin_v1 = {
    sizeof(chorus_algorithm_plugin_v1_t),
    CHORUS_ALGORITHM_ABI_MINOR,
#ifdef WRONG_HIDES
    "wrong_hides",
#else
    "wrong_first_call",
#endif
    CHORUS_ALGO_PEERS_RING,
    0,
    wrong_init,
    NULL,
    NULL,
    wrong_all_reduce,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL, /* reduce .. all_to_allv (minor 1) */
    NULL,
    NULL,
    NULL,
    NULL,
};
