/* isa.c — which build of the CPU tile kernels runs: the best instruction set this CPU has among those built. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

static fc_cpu_isa chosen;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) && (defined(FC_CPU_HAS_v3) || defined(FC_CPU_HAS_v4))
static int cpu_has_v3(void) {
    /* (F16C, also in x86-64-v3, comes with every AVX2 CPU; clang 14 cannot test it by name) */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
}
static int cpu_has_v4(void) {
    return cpu_has_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
#endif

static void choose(void) {
#if defined(__x86_64__)
    chosen = (fc_cpu_isa){"x86-64", fc_cpu_run_item};
#else
    chosen = (fc_cpu_isa){"generic", fc_cpu_run_item};
#endif
    const char *want = getenv("FLASHC_CPU_ISA"); /* NULL: the best */
    if (want && !strcmp(want, "baseline")) return;
#if defined(__x86_64__) && (defined(FC_CPU_HAS_v3) || defined(FC_CPU_HAS_v4))
    __builtin_cpu_init();
#ifdef FC_CPU_HAS_v4
    if (cpu_has_v4() && (!want || !strcmp(want, "v4"))) {
        chosen = (fc_cpu_isa){"x86-64-v4", fc_cpu_run_item_v4};
        return;
    }
#endif
#ifdef FC_CPU_HAS_v3
    if (cpu_has_v3()) chosen = (fc_cpu_isa){"x86-64-v3", fc_cpu_run_item_v3};
#endif
#endif
}

const fc_cpu_isa *fc_cpu_isa_chosen(void) {
    pthread_once(&chosen_once, choose);
    return &chosen;
}
