/*
 * A third-party algorithm plugin for the `auto` selection test
 * (auto_selection.sh): the built-in ring's operations under the name
 * "preferred", answering a preference of 1000 for all_reduce and "never"
 * (-1) for every other collective. `auto` must find it on the plugin path
 * and choose it for all_reduce over ring and mesh; results stay exact
 * because the ring does the work.
 *
 * The table is filled in when the file is loaded, from the ring plugin at
 * CHORUS_RING_PLUGIN (set by CMake). If that fails the table stays zeroed
 * and the loader refuses it, which the test reports as "not chosen".
 */
#include <chorus/algorithm.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* The ring is an algorithm ABI v2 plugin: so is this copy of it. */
__attribute__((visibility("default"))) chorus_algorithm_plugin_v2_t chorus_algorithm_plugin_v2;

static int preferred_preference(void* state, const chorus_algo_call_v2_t* call) {
  (void)state;
  return call->collective == CHORUS_COLL_ALL_REDUCE ? 1000 : -1;
}

__attribute__((constructor)) static void preferred_fill_table(void) {
  void* ring = dlopen(CHORUS_RING_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (!ring) {
    fprintf(stderr, "fixture 'preferred': cannot open %s: %s\n", CHORUS_RING_PLUGIN, dlerror());
    return;
  }
  const chorus_algorithm_plugin_v2_t* table =
      (const chorus_algorithm_plugin_v2_t*)dlsym(ring, "chorus_algorithm_plugin_v2");
  if (!table || table->struct_size > sizeof(chorus_algorithm_plugin_v2)) {
    fprintf(stderr, "fixture 'preferred': %s has no usable algorithm v2 table\n",
            CHORUS_RING_PLUGIN);
    return;
  }
  memcpy(&chorus_algorithm_plugin_v2, table, table->struct_size);
  chorus_algorithm_plugin_v2.name = "preferred";
  chorus_algorithm_plugin_v2.preference = preferred_preference;
}
