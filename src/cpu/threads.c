/* threads.c — the CPU backend's worker threads: how many (fc_set/get_num_threads), and a parallel for on a persistent pool. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
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
/* Parallel for: workers take items from a shared atomic counter until none are left. The workers are
 * a persistent pool, started on first use and kept (blocked on a condition variable between calls), so a
 * call pays a wake-up, not a thread start (~20-50 us each). One call uses the pool at a time; a call that
 * finds it busy (another thread's call), or runs in a child forked from the process that started it, starts
 * threads of its own for the call, as before the pool. */

typedef struct job {
    atomic_llong next;
    int64_t n_items;
    fc_cpu_task fn;
    void *ctx;
    int n_workers; /* workers 0 .. n_workers - 1 take items (0: the caller) */
} job;

static void drain(job *j, int id) {
    for (;;) {
        int64_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_items) return;
        j->fn(j->ctx, i, id);
    }
}

static struct {
    pthread_mutex_t owner;   /* held by the call using the pool */
    pthread_mutex_t m;       /* guards what follows */
    pthread_cond_t go, done;
    unsigned long gen;       /* jobs posted so far */
    int n_threads;           /* pool workers started: ids 1 .. n_threads */
    int pending;             /* workers not yet done with job gen */
    job *cur;
    pid_t pid;               /* the process that started the workers (0: none yet) */
} P = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, NULL, 0};

/* The job count when worker id was started (before its first job was posted): what it has seen. */
static unsigned long start_gen[FC_CPU_MAX_THREADS];

static void *pool_worker(void *arg) {
    int id = (int)(intptr_t)arg;
    unsigned long seen = start_gen[id]; /* not P.gen: the first job may be posted before this thread runs */
    pthread_mutex_lock(&P.m);
    for (;;) {
        while (P.gen == seen) pthread_cond_wait(&P.go, &P.m);
        seen = P.gen;
        job *j = P.cur;
        pthread_mutex_unlock(&P.m);
        if (id < j->n_workers) drain(j, id);
        pthread_mutex_lock(&P.m);
        if (--P.pending == 0) pthread_cond_signal(&P.done);
    }
    return NULL;
}

/* Grow the pool to n - 1 workers (the caller is worker 0); threads that fail to start are simply not there. */
static void pool_grow(int n) {
    while (P.n_threads < n - 1) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        start_gen[P.n_threads + 1] = P.gen; /* no job is posted while the pool is owned and growing */
        int ok = pthread_create(&t, &at, pool_worker, (void *)(intptr_t)(P.n_threads + 1)) == 0;
        pthread_attr_destroy(&at);
        if (!ok) return;
        pthread_mutex_lock(&P.m);
        P.n_threads++;
        pthread_mutex_unlock(&P.m);
    }
}

/* The job on the pool: post it, take items as worker 0, wait for every pool worker to be done with it.
 * Items of workers that could not be started are taken by the others. Returns 0 when the pool was not
 * free (the caller runs the job another way). */
static int pool_run(job *j) {
    pid_t pid = getpid();
    if (pthread_mutex_trylock(&P.owner) != 0) return 0; /* busy (or held when this process was forked) */
    if (P.pid != 0 && P.pid != pid) { /* a forked child: the workers are in the parent */
        pthread_mutex_unlock(&P.owner);
        return 0;
    }
    P.pid = pid;
    pool_grow(j->n_workers);
    if (j->n_workers > P.n_threads + 1) j->n_workers = P.n_threads + 1;
    pthread_mutex_lock(&P.m);
    P.cur = j;
    P.pending = P.n_threads;
    P.gen++;
    pthread_cond_broadcast(&P.go);
    pthread_mutex_unlock(&P.m);
    drain(j, 0);
    pthread_mutex_lock(&P.m);
    while (P.pending > 0) pthread_cond_wait(&P.done, &P.m);
    pthread_mutex_unlock(&P.m);
    pthread_mutex_unlock(&P.owner);
    return 1;
}

typedef struct worker {
    job *job;
    int id;
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    drain(w->job, w->id);
    return NULL;
}

/* Threads of this call only (the pool is busy or belongs to the parent of a fork). */
static void run_with_own_threads(job *j) {
    pthread_t tid[FC_CPU_MAX_THREADS];
    worker ws[FC_CPU_MAX_THREADS];
    int started[FC_CPU_MAX_THREADS];
    for (int i = 1; i < j->n_workers; i++) {
        ws[i] = (worker){j, i};
        started[i] = pthread_create(&tid[i], NULL, worker_main, &ws[i]) == 0;
    }
    drain(j, 0);
    for (int i = 1; i < j->n_workers; i++)
        if (started[i]) pthread_join(tid[i], NULL);
}

void fc_cpu_parallel_for(int64_t n_items, int n_workers, fc_cpu_task fn, void *ctx) {
    if (n_items <= 0) return;
    if (n_workers > n_items) n_workers = (int)n_items;
    if (n_workers > FC_CPU_MAX_THREADS) n_workers = FC_CPU_MAX_THREADS;
    if (n_workers <= 1) {
        for (int64_t i = 0; i < n_items; i++) fn(ctx, i, 0);
        return;
    }
    job j = {.n_items = n_items, .fn = fn, .ctx = ctx, .n_workers = n_workers};
    atomic_init(&j.next, 0);
    if (!pool_run(&j)) run_with_own_threads(&j);
}
