/* An algorithm ABI v2 table, whole or broken on purpose, one way per build
 * (FIXTURE_V2_*). Most variants never run a task: the loader's checks are
 * under test. FIXTURE_V2_RING_STRAY declares CHORUS_ALGO_PEERS_RING and
 * posts to rank+2 anyway, which the core must refuse cleanly;
 * FIXTURE_V2_RING_STRAY_CHECKED notices the NULL endpoint and fails itself. */
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
#if defined(FIXTURE_V2_RING_STRAY) || defined(FIXTURE_V2_RING_STRAY_CHECKED)
  {
    /* rank+2 and rank-2 are neighbours of nobody at 4 ranks or more. */
    const int to = (env->rank + 2) % env->size, from = (env->rank - 2 + env->size) % env->size;
    chorus_tp_endpoint_t* out = env->endpoint(env->core, to, 0);
    chorus_tp_endpoint_t* in = env->endpoint(env->core, from, 0);
#ifdef FIXTURE_V2_RING_STRAY_CHECKED
    /* As a careful plugin would: report the NULL itself. */
    if (!out) return env->fail(env->core, CHORUS_ERR_INTERNAL, "fixture: no endpoint to rank+2");
#endif
    int rc = env->tp->post_send(out, env->staging[0], 8, env->staging_mr[0], 1);
    if (rc == CHORUS_OK) rc = env->tp->post_recv(in, env->staging[1], 8, env->staging_mr[1], 2);
    if (rc != CHORUS_OK) return rc; /* the core has recorded why */
    return env->fail(env->core, CHORUS_ERR_INTERNAL,
                     "fixture v2-ring-stray: a post to a non-neighbour was accepted");
  }
#endif
  return CHORUS_ALGO_TASK_DONE;
}
static int fx_progress(chorus_algo_task_v2_t* task, const chorus_tp_completion_t* c, size_t n) {
  (void)task, (void)c, (void)n;
  return CHORUS_ALGO_TASK_DONE;
}
static void fx_task_free(chorus_algo_task_v2_t* task) { (void)task; }

EXPORT const chorus_algorithm_plugin_v2_t chorus_algorithm_plugin_v2 = {
#ifdef FIXTURE_V2_MINOR0
    /* Built against minor 0: the table ends before `peers`. */
    offsetof(chorus_algorithm_plugin_v2_t, peers),
    0,
#else
    sizeof(chorus_algorithm_plugin_v2_t),
    CHORUS_ALGORITHM_ABI_V2_MINOR,
#endif
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
#if defined(FIXTURE_V2_BAD_PEERS)
    7,
#elif defined(FIXTURE_V2_RING_STRAY) || defined(FIXTURE_V2_RING_STRAY_CHECKED)
    CHORUS_ALGO_PEERS_RING,
#elif defined(FIXTURE_V2_MINOR0)
    /* Beyond struct_size: the core must not read it. */
    CHORUS_ALGO_PEERS_RING,
#endif
};
