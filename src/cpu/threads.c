/* threads.c — the CPU backend's worker threads: how many (fc_set/get_num_threads), and a parallel for. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu/cpu.h"

#define FC_CPU_MAX_THREADS 1024

static atomic_int chosen_threads; /* 0: the default */

fc_status fc_set_num_threads(int n) {
    if (n < 0) return fc_fail(FC_ERR_INVALID_ARGUMENT, "n", "= %d; the thread count must be >= 1, or 0 for the default", n);
    atomic_store(&chosen_threads, n);
    fc_clear_error();
    return FC_OK;
}

/* FLASHC_NUM_THREADS when set to a positive number, else the online cores. */
static int read_default_num_threads(void) {
    const char *env = getenv("FLASHC_NUM_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end == '\0' && n > 0) return n < FC_CPU_MAX_THREADS ? (int)n : FC_CPU_MAX_THREADS;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    return n < FC_CPU_MAX_THREADS ? (int)n : FC_CPU_MAX_THREADS;
}

/* The default, read once (getenv and sysconf cost ~10 us, an openat each, on every call otherwise). */
static int default_threads;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static void read_default_once(void) { default_threads = read_default_num_threads(); }

int fc_get_num_threads(void) {
    int n = atomic_load(&chosen_threads);
    if (n > 0) return n < FC_CPU_MAX_THREADS ? n : FC_CPU_MAX_THREADS;
    pthread_once(&default_once, read_default_once);
    return default_threads;
}

/* ---------------------------------------------------------------------------------------------- */
/* Parallel for: workers take items from a shared atomic counter until none are left.              */

typedef struct pool {
    atomic_llong next;
    int64_t n_items;
    fc_cpu_task fn;
    void *ctx;
} pool;

typedef struct worker {
    pool *pool;
    int id;
} worker;

static void drain(pool *pl, int id) {
    for (;;) {
        int64_t i = atomic_fetch_add(&pl->next, 1);
        if (i >= pl->n_items) return;
        pl->fn(pl->ctx, i, id);
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    drain(w->pool, w->id);
    return NULL;
}

/* Threads that fail to start are simply not there: the others (at least the caller) take their items. */
void fc_cpu_parallel_for(int64_t n_items, int n_workers, fc_cpu_task fn, void *ctx) {
    if (n_items <= 0) return;
    if (n_workers > n_items) n_workers = (int)n_items;
    if (n_workers > FC_CPU_MAX_THREADS) n_workers = FC_CPU_MAX_THREADS;
    if (n_workers <= 1) {
        for (int64_t i = 0; i < n_items; i++) fn(ctx, i, 0);
        return;
    }
    pool pl = {.n_items = n_items, .fn = fn, .ctx = ctx};
    atomic_init(&pl.next, 0);
    pthread_t tid[FC_CPU_MAX_THREADS];
    worker ws[FC_CPU_MAX_THREADS];
    int started[FC_CPU_MAX_THREADS];
    for (int i = 1; i < n_workers; i++) {
        ws[i] = (worker){&pl, i};
        started[i] = pthread_create(&tid[i], NULL, worker_main, &ws[i]) == 0;
    }
    drain(&pl, 0);
    for (int i = 1; i < n_workers; i++)
        if (started[i]) pthread_join(tid[i], NULL);
}
