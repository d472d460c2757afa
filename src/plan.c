/* plan.c — host heuristics shared by the backends: how many KV splits a problem gets. */
#include "internal.h"

/* Split the key range only when the independent work items cannot fill the machine: aim for one full
 * wave of items over n_workers (every split pays a prologue and a partial, so fewer, longer ones),
 * rounding down so no wave is left nearly empty, never more splits than key blocks (each split needs
 * at least one block to be worth its merge), and never more than FC_MAX_SPLITS. */
int fc_plan_num_splits(int asked, int64_t work_items, int n_kv_blocks, int n_workers) {
    int max_useful = n_kv_blocks > 1 ? n_kv_blocks : 1;
    if (max_useful > FC_MAX_SPLITS) max_useful = FC_MAX_SPLITS;
    if (asked > 0) return asked < max_useful ? asked : max_useful;
    if (work_items <= 0 || n_workers <= 0) return 1;
    int64_t target = n_workers;
    if (work_items >= target) return 1;
    int64_t splits = target / work_items;
    return splits < max_useful ? (int)splits : max_useful;
}
