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

/* The GPU's decode kernels (CTAs in waves over n_slots CTA slots): where the items alone fill less than 85% of
 * one wave, the fewest splits whose CTAs fill their waves to 85% or more (a wave's fill: CTAs / (waves x slots)),
 * so that e.g. 256 items on 396 slots run as 3 x 256 CTAs in two waves of 97% rather than one of 65% (its warps
 * then hide the latency of the MMA chains; PERF.md step 138), each split keeping 8 key blocks or more; else
 * fc_plan_num_splits' one wave. */
int fc_plan_splits_by_waves(int asked, int64_t work_items, int n_kv_blocks, int n_slots) {
    int one_wave = fc_plan_num_splits(asked, work_items, n_kv_blocks, n_slots);
    if (asked > 0 || work_items <= 0 || n_slots <= 0) return one_wave;
    if (work_items * one_wave * 100 >= (int64_t)n_slots * 85) return one_wave;
    int max_useful = n_kv_blocks / 8; /* at least 8 blocks a split: b32 x 1k on 3 splits of 2-3 blocks lost 18% */
    if (max_useful > FC_MAX_SPLITS) max_useful = FC_MAX_SPLITS;
    for (int s = one_wave + 1; s <= max_useful; s++) {
        int64_t ctas = work_items * s, waves = (ctas + n_slots - 1) / n_slots;
        if (ctas * 100 >= waves * n_slots * 85) return s;
    }
    return one_wave;
}
