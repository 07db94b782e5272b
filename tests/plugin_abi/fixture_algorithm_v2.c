/* An algorithm ABI v2 table, whole or broken on purpose, one way per build
 * (FIXTURE_V2_*). It never runs a task: the loader's checks are under test. */
#include <chorus/algorithm.h>

#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

static int fx_init(const chorus_host_v1_t* host) {
  (void)host;
  return CHORUS_OK;
}
static int fx_comm_init(const chorus_algo_comm_v2_t* comm, void** state) {
  (void)comm;
  *state = NULL;
  return CHORUS_OK;
}
static int fx_post(void* state, const chorus_algo_env_v2_t* env, const chorus_algo_call_v2_t* call,
                   chorus_algo_task_v2_t** task) {
  (void)state, (void)env, (void)call;
  *task = NULL;
  return CHORUS_ALGO_TASK_DONE;
}
static int fx_progress(chorus_algo_task_v2_t* task, const chorus_tp_completion_t* c, size_t n) {
  (void)task, (void)c, (void)n;
  return CHORUS_ALGO_TASK_DONE;
}
static void fx_task_free(chorus_algo_task_v2_t* task) { (void)task; }

EXPORT const chorus_algorithm_plugin_v2_t chorus_algorithm_plugin_v2 = {
    sizeof(chorus_algorithm_plugin_v2_t),
    CHORUS_ALGORITHM_ABI_V2_MINOR,
    FIXTURE_NAME,
    0,
#ifdef FIXTURE_V2_NO_COLLECTIVES
    0,
#else
    (1u << CHORUS_COLL_ALL_REDUCE) | (1u << CHORUS_COLL_BROADCAST),
#endif
    fx_init,
    NULL,
    fx_comm_init,
    NULL,
    NULL,
    NULL,
    fx_post,
#ifdef FIXTURE_V2_MISSING_OP
    NULL,
    NULL,
#else
    fx_progress,
    fx_task_free,
#endif
};
