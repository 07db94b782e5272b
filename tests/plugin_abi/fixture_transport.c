/* A transport plugin broken on purpose, one way per build (FIXTURE_*).
 * Each variant must be refused by the loader with a message naming the fault. */
#include <chorus/transport.h>

#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static const char* fx_last_error(void) { return "fixture: no device present"; }
static int fx_init(const chorus_host_v1_t* host) {
  (void)host;
#ifdef FIXTURE_INIT_FAILS
  return CHORUS_ERR_UNAVAILABLE;
#else
  return CHORUS_OK;
#endif
}
static int fx_context_open(const chorus_tp_context_info_t* i, chorus_tp_context_t** c) {
  (void)i; (void)c; return CHORUS_ERR_NOT_SUPPORTED;
}
static int fx_context_close(chorus_tp_context_t* c) { (void)c; return CHORUS_OK; }
static int fx_get_caps(chorus_tp_context_t* c, chorus_tp_caps_t* caps) {
  (void)c; memset(caps, 0, sizeof(*caps)); return CHORUS_OK;
}
static int fx_endpoint_open(chorus_tp_context_t* c, int p, int ch, void* a, size_t* l,
                            chorus_tp_endpoint_t** e) {
  (void)c; (void)p; (void)ch; (void)a; (void)l; (void)e; return CHORUS_ERR_NOT_SUPPORTED;
}
static int fx_endpoint_connect(chorus_tp_endpoint_t* e, const void* a, size_t l, int t) {
  (void)e; (void)a; (void)l; (void)t; return CHORUS_ERR_NOT_SUPPORTED;
}
static int fx_endpoint_close(chorus_tp_endpoint_t* e) { (void)e; return CHORUS_OK; }
static int fx_mem_register(chorus_tp_context_t* c, void* a, size_t l, int k, chorus_tp_mr_t** m) {
  (void)c; (void)a; (void)l; (void)k; *m = NULL; return CHORUS_OK;
}
static int fx_mem_deregister(chorus_tp_context_t* c, chorus_tp_mr_t* m) { (void)c; (void)m; return CHORUS_OK; }
static int fx_post(chorus_tp_endpoint_t* e, const void* b, size_t l, chorus_tp_mr_t* m, uint64_t w) {
  (void)e; (void)b; (void)l; (void)m; (void)w; return CHORUS_ERR_NOT_SUPPORTED;
}
static int fx_post_recv(chorus_tp_endpoint_t* e, void* b, size_t l, chorus_tp_mr_t* m, uint64_t w) {
  (void)e; (void)b; (void)l; (void)m; (void)w; return CHORUS_ERR_NOT_SUPPORTED;
}
static int fx_poll(chorus_tp_context_t* c, chorus_tp_completion_t* o, size_t m) {
  (void)c; (void)o; (void)m; return 0;
}
static int fx_read_error(chorus_tp_context_t* c, chorus_tp_error_t* e) {
  (void)c; (void)e; return CHORUS_ERR_INVALID_ARGUMENT;
}
static int fx_wait(chorus_tp_context_t* c, int t) { (void)c; (void)t; return CHORUS_ERR_TIMEOUT; }

#if defined(FIXTURE_UNKNOWN_MAJOR)
#define TABLE_NAME chorus_transport_plugin_v2
#elif defined(FIXTURE_NO_SYMBOL)
#define TABLE_NAME chorus_transport_plugin_version_one
#else
#define TABLE_NAME chorus_transport_plugin_v1
#endif

EXPORT const chorus_transport_plugin_v1_t TABLE_NAME = {
#ifdef FIXTURE_SHORT_TABLE
    offsetof(chorus_transport_plugin_v1_t, context_open),
#else
    sizeof(chorus_transport_plugin_v1_t),
#endif
    CHORUS_TRANSPORT_ABI_MINOR,
    FIXTURE_NAME,
    fx_init,
    NULL,
    fx_last_error,
    fx_context_open,
    fx_context_close,
    fx_get_caps,
    fx_endpoint_open,
    fx_endpoint_connect,
    fx_endpoint_close,
    fx_mem_register,
    fx_mem_deregister,
    fx_post,
    fx_post_recv,
#ifdef FIXTURE_MISSING_OP
    NULL,
#else
    fx_poll,
#endif
    fx_read_error,
    fx_wait,
    NULL,
};
