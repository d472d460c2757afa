/* test_validation.c — every error path of the public API: status, message naming the argument, nothing written. */
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* Status sets a case accepts. */
#define S(st) (1u << (st))
#define INV S(FC_ERR_INVALID_ARGUMENT)
#define INV_OR_UNSUP (S(FC_ERR_INVALID_ARGUMENT) | S(FC_ERR_UNSUPPORTED))
#define NODEV (S(FC_ERR_NO_DEVICE) | S(FC_ERR_UNSUPPORTED))

enum { FX_DENSE, FX_VARLEN, FX_PAGED_APPEND, FX_DENSE_APPEND, FX_MERGE };
enum { ARENA_BYTES = 4 << 20, SLAB = 1 << 17 };

/* A valid call's arguments; every buffer lives in one arena, so "nothing written" is one memcmp. */
typedef struct fixture {
    fc_attn_args a;
    fc_merge_args m;
    unsigned char *arena, *snap;
    size_t used;
    void *cos, *sin, *spare; /* rotary tables (attached by the append fixtures), spare slab */
    uint64_t rng;
} fixture;

static void *fx_alloc(fixture *f) {
    void *p = f->arena + f->used;
    f->used += SLAB;
    if (f->used > ARENA_BYTES) abort();
    return p;
}

static fc_tensor fx_tensor(fixture *f, fc_dtype dt, int nd, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    void *p = fx_alloc(f);
    fc_tensor t = nd == 1 ? fc_tensor_1d(p, dt, n0)
                : nd == 2 ? fc_tensor_2d(p, dt, n0, n1)
                : nd == 3 ? fc_tensor_3d(p, dt, n0, n1, n2)
                          : fc_tensor_4d(p, dt, n0, n1, n2, n3);
    if (dt == FC_INT32) return t;
    size_t n = SLAB / tu_esize(dt);
    for (size_t i = 0; i < n; i++) tu_store(p, dt, (int64_t)i, tu_normal(&f->rng));
    return t;
}

static fc_tensor fx_ints(fixture *f, int n, const int *vals) {
    fc_tensor t = fx_tensor(f, FC_INT32, 1, n, 0, 0, 0);
    for (int i = 0; i < n; i++) ((int32_t *)t.data)[i] = vals[i];
    return t;
}

static void fx_poison(fc_tensor *t) { tu_poison(t->data, t->dtype, SLAB / tu_esize(t->dtype)); }

static void fx_rotary(fixture *f, fc_dtype dt, int max_pos, int half) {
    fc_tensor c = fc_tensor_2d(f->cos, dt, max_pos, half), s = fc_tensor_2d(f->sin, dt, max_pos, half);
    for (int p = 0; p < max_pos; p++)
        for (int m = 0; m < half; m++) {
            tu_store(f->cos, dt, p * half + m, cos(p * pow(1e4, -(double)m / half)));
            tu_store(f->sin, dt, p * half + m, sin(p * pow(1e4, -(double)m / half)));
        }
    f->a.rotary_cos = c;
    f->a.rotary_sin = s;
}

/* b = 2, h_q = 4, h_k = 2, d = d_v = 64; see each kind for the rest. */
static void fx_init(fixture *f, int kind, fc_dtype dt) {
    memset(f, 0, sizeof *f);
    f->arena = aligned_alloc(256, ARENA_BYTES);
    f->snap = malloc(ARENA_BYTES);
    if (!f->arena || !f->snap) abort();
    memset(f->arena, 0, ARENA_BYTES);
    f->rng = 99;
    f->cos = fx_alloc(f);
    f->sin = fx_alloc(f);
    f->spare = fx_alloc(f);
    fc_attn_args *a = &f->a;
    fc_attn_args_init(a);
    if (kind == FX_MERGE) {
        f->m.out_partial = fx_tensor(f, FC_FP32, 4, 3, 5, 2, 64);
        f->m.lse_partial = fx_tensor(f, FC_FP32, 3, 3, 5, 2, 0);
        f->m.out = fx_tensor(f, dt, 3, 5, 2, 64, 0);
        f->m.lse = fx_tensor(f, FC_FP32, 2, 5, 2, 0, 0);
        fx_poison(&f->m.out);
        fx_poison(&f->m.lse);
        return;
    }
    if (kind == FX_VARLEN) {
        static const int cu_q[3] = {0, 3, 7}, cu_k[3] = {0, 10, 16}, used[2] = {8, 6};
        a->q = fx_tensor(f, dt, 3, 7, 4, 64, 0);
        a->out = fx_tensor(f, dt, 3, 7, 4, 64, 0);
        a->lse = fx_tensor(f, FC_FP32, 2, 4, 7, 0, 0);
        a->k = fx_tensor(f, dt, 3, 16, 2, 64, 0);
        a->v = fx_tensor(f, dt, 3, 16, 2, 64, 0);
        a->cu_seqlens_q = fx_ints(f, 3, cu_q);
        a->cu_seqlens_k = fx_ints(f, 3, cu_k);
        a->seqused_k = fx_ints(f, 2, used);
    } else {
        int s_q = kind == FX_DENSE ? 4 : 2;
        a->q = fx_tensor(f, dt, 4, 2, s_q, 4, 64);
        a->out = fx_tensor(f, dt, 4, 2, s_q, 4, 64);
        a->lse = fx_tensor(f, FC_FP32, 3, 2, 4, s_q, 0);
        if (kind == FX_PAGED_APPEND) {
            static const int pt[6] = {4, 1, 3, 0, 5, 2}, used[2] = {5, 10};
            a->k = fx_tensor(f, dt, 4, 6, 8, 2, 64);
            a->v = fx_tensor(f, dt, 4, 6, 8, 2, 64);
            a->page_table = fx_ints(f, 6, pt);
            a->page_table = fc_tensor_2d(a->page_table.data, FC_INT32, 2, 3);
            a->seqused_k = fx_ints(f, 2, used);
        } else {
            static const int used[2] = {3, 9};
            a->k = fx_tensor(f, dt, 4, 2, 16, 2, 64);
            a->v = fx_tensor(f, dt, 4, 2, 16, 2, 64);
            if (kind == FX_DENSE_APPEND) a->seqused_k = fx_ints(f, 2, used);
        }
        if (kind != FX_DENSE) {
            a->k_new = fx_tensor(f, dt, 4, 2, 2, 2, 64);
            a->v_new = fx_tensor(f, dt, 4, 2, 2, 2, 64);
            if (kind == FX_PAGED_APPEND) fx_rotary(f, FC_FP32, 32, 16), a->rotary_interleaved = 1;
            else fx_rotary(f, dt, 16, 32);
        } else {
            a->alibi_slopes = fx_tensor(f, FC_FP32, 1, 4, 0, 0, 0);
            a->sinks = fx_tensor(f, FC_FP32, 1, 4, 0, 0, 0);
            a->causal = 1;
        }
    }
    fx_poison(&a->out);
    fx_poison(&a->lse);
}

static void fx_free(fixture *f) {
    free(f->arena);
    free(f->snap);
}

/* Resets shape and contiguous strides, keeping data and dtype. */
static void reshape(fc_tensor *t, int nd, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    fc_tensor r = nd == 1 ? fc_tensor_1d(t->data, t->dtype, n0)
                : nd == 2 ? fc_tensor_2d(t->data, t->dtype, n0, n1)
                : nd == 3 ? fc_tensor_3d(t->data, t->dtype, n0, n1, n2)
                          : fc_tensor_4d(t->data, t->dtype, n0, n1, n2, n3);
    *t = r;
}

static void *offset_bytes(void *p, int n) { return (char *)p + n; }

static void set_i32(fc_tensor *t, int i, int v) { ((int32_t *)t->data)[i] = v; }

/* Dim 1 of a 4D (or 3D) tensor made n long, every stride but the last zero: a broadcast view of any
 * size over a few bytes. */
static void broadcast(fc_tensor *t, int64_t n) {
    t->shape[1] = n;
    for (int i = 0; i < t->ndim - 1; i++) t->stride[i] = 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Checks                                                                                          */

static int is_ident(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* msg names one of names ("a|b|c") as a whole word (e.g. "k: ..." names k, "k_new: ..." does not). */
static int names_match(const char *msg, const char *names) {
    if (!msg || !*msg) return 0;
    const char *n = names;
    while (*n) {
        size_t len = strcspn(n, "|");
        for (const char *p = msg; *p; p++)
            if (!strncmp(p, n, len) && (p == msg || !is_ident(p[-1])) && !is_ident(p[len])) return 1;
        n += len + (n[len] == '|');
    }
    return 0;
}

static void mask_names(unsigned mask, char *s, size_t n) {
    s[0] = 0;
    for (int st = 0; st < 8; st++)
        if (mask & S(st)) {
            size_t k = strlen(s);
            snprintf(s + k, n - k, "%s%s", k ? " or " : "", fc_status_string((fc_status)st));
        }
}

/* Status in mask, message names the argument, and not one byte of the arena changed. */
static void expect_failure(const fixture *f, const char *what, const char *label, fc_status st, unsigned mask,
                           const char *names, int check_written) {
    char want[128];
    mask_names(mask, want, sizeof want);
    const char *msg = fc_last_error();
    tu_check((mask & S(st)) != 0, "[%s] %s: status \"%s\", expected \"%s\" (message \"%s\")", label, what,
             fc_status_string(st), want, msg);
    tu_check(names_match(msg, names), "[%s] %s: message \"%s\" does not name %s", label, what, msg, names);
    if (!check_written) return;
    size_t diff = 0;
    for (size_t i = 0; i < f->used; i++) diff += f->arena[i] != f->snap[i];
    tu_check(diff == 0, "[%s] %s failed but wrote %zu bytes", label, what, diff);
}

/* fc_attn_fwd fails as expected; so does fc_attn_workspace_size unless the error is in tensor
 * contents, which it does not read (then it must succeed). */
static void check_fwd(fixture *f, const char *label, unsigned mask, const char *names, int content) {
    memcpy(f->snap, f->arena, f->used);
    fc_status st = fc_attn_fwd(&f->a, NULL, 0, NULL);
    expect_failure(f, "fc_attn_fwd", label, st, mask, names, 1);
    size_t bytes = 777;
    st = fc_attn_workspace_size(&f->a, &bytes);
    if (content)
        tu_check(st == FC_OK, "[%s] fc_attn_workspace_size reads contents: status \"%s\": %s", label,
                 fc_status_string(st), fc_last_error());
    else
        expect_failure(f, "fc_attn_workspace_size", label, st, mask, names, 1);
    char text[64] = "x"; /* fc_attn_describe validates as fc_attn_fwd does (contents too, on the CPU) */
    st = fc_attn_describe(&f->a, text, sizeof text);
    expect_failure(f, "fc_attn_describe", label, st, mask, names, 1);
    tu_check(text[0] == '\0', "[%s] fc_attn_describe failed but left \"%s\" in the buffer", label, text);
    fc_plan *plan = (fc_plan *)&bytes; /* fc_plan_create validates as fc_attn_fwd does and leaves NULL */
    st = fc_plan_create(&f->a, &plan);
    expect_failure(f, "fc_plan_create", label, st, mask, names, 1);
    tu_check(plan == NULL, "[%s] fc_plan_create failed but returned a plan", label);
    fc_plan_destroy(st == FC_OK ? plan : NULL);
}

static void check_merge(fixture *f, const char *label, unsigned mask, const char *names) {
    memcpy(f->snap, f->arena, f->used);
    fc_status st = fc_merge_states(&f->m, NULL);
    expect_failure(f, "fc_merge_states", label, st, mask, names, 1);
}

/* ---------------------------------------------------------------------------------------------- */
/* Each case runs in a child process: a crash or hang is one failed check, not the end of the file. */

static int child_pipe[2];

static int case_begin(const char *label) {
    fflush(stdout);
    if (pipe(child_pipe)) abort();
    pid_t pid = fork();
    if (pid == 0) {
        close(child_pipe[0]);
        tu_passed = tu_failed = 0;
        alarm(30);
        return 1;
    }
    close(child_pipe[1]);
    int counts[2] = {0, 0}, status = 0;
    ssize_t got = read(child_pipe[0], counts, sizeof counts);
    close(child_pipe[0]);
    waitpid(pid, &status, 0);
    if (got == (ssize_t)sizeof counts && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        tu_passed += counts[0];
        tu_failed += counts[1];
    } else {
        tu_check(0, "[%s] crashed or hung (%s %d)", label, WIFSIGNALED(status) ? "signal" : "exit",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    return 0;
}

static void case_end(void) {
    int counts[2] = {tu_passed, tu_failed};
    fflush(stdout);
    if (write(child_pipe[1], counts, sizeof counts) != (ssize_t)sizeof counts) _exit(3);
    _exit(0);
}

/* A failing fc_attn_fwd case: fixture `kind` of dtype `dt`, then the statements (which see f, a). */
#define FWD_DT(kind, dt, mask, names, content, ...)                                                     \
    do {                                                                                                \
        if (case_begin(#__VA_ARGS__)) {                                                                 \
            fixture fx_;                                                                                \
            fx_init(&fx_, kind, dt);                                                                    \
            fixture *f = &fx_;                                                                          \
            fc_attn_args *a = &f->a;                                                                    \
            (void)f, (void)a;                                                                           \
            __VA_ARGS__;                                                                                \
            check_fwd(f, #__VA_ARGS__, mask, names, content);                                           \
            fx_free(f);                                                                                 \
            case_end();                                                                                 \
        }                                                                                               \
    } while (0)
#define FWD(kind, mask, names, ...) FWD_DT(kind, FC_BF16, mask, names, 0, __VA_ARGS__)
#define FWD_CONTENT(kind, mask, names, ...) FWD_DT(kind, FC_BF16, mask, names, 1, __VA_ARGS__)

#define MERGE(mask, names, ...)                                                                         \
    do {                                                                                                \
        if (case_begin(#__VA_ARGS__)) {                                                                 \
            fixture fx_;                                                                                \
            fx_init(&fx_, FX_MERGE, FC_BF16);                                                           \
            fixture *f = &fx_;                                                                          \
            fc_merge_args *m = &f->m;                                                                   \
            (void)f, (void)m;                                                                           \
            __VA_ARGS__;                                                                                \
            check_merge(f, #__VA_ARGS__, mask, names);                                                  \
            fx_free(f);                                                                                 \
            case_end();                                                                                 \
        }                                                                                               \
    } while (0)

/* ---------------------------------------------------------------------------------------------- */
/* Valid calls                                                                                     */

static void valid_call(int kind, fc_dtype dt, const char *label) {
    if (!case_begin(label)) return;
    fixture f;
    fx_init(&f, kind, dt);
    fc_attn_args bad = f.a;
    bad.q.data = NULL;
    fc_attn_fwd(&bad, NULL, 0, NULL); /* leaves a message behind */
    size_t bytes = 777;
    fc_status st = kind == FX_MERGE ? FC_OK : fc_attn_workspace_size(&f.a, &bytes);
    if (kind != FX_MERGE)
        tu_check(st == FC_OK && bytes == 0, "[%s] fc_attn_workspace_size: %s, %zu bytes (want 0 on the CPU): %s",
                 label, fc_status_string(st), bytes, fc_last_error());
    fc_attn_fwd(&bad, NULL, 0, NULL);
    st = kind == FX_MERGE ? fc_merge_states(&f.m, NULL) : fc_attn_fwd(&f.a, NULL, 0, NULL);
    tu_check(st == FC_OK, "[%s] valid call: status %s: %s", label, fc_status_string(st), fc_last_error());
    tu_check(strcmp(fc_last_error(), "") == 0, "[%s] fc_last_error after success is \"%s\"", label, fc_last_error());
    const fc_tensor *out = kind == FX_MERGE ? &f.m.out : &f.a.out;
    int64_t n = out->shape[0] * out->stride[0], nans = 0;
    for (int64_t i = 0; i < n; i++) nans += isnan(tu_load(out->data, out->dtype, i));
    tu_check(nans == 0, "[%s] valid call left %lld output elements NaN", label, (long long)nans);
    fx_free(&f);
    case_end();
}

/* fc_attn_describe: the CPU's plan in words; NUL-terminated when cut; a NULL or empty buffer is an error. */
static void describe_calls(void) {
    if (!case_begin("fc_attn_describe")) return;
    fixture f;
    fx_init(&f, FX_DENSE, FC_BF16);
    char text[200], small[8];
    fc_status st = fc_attn_describe(&f.a, text, sizeof text);
    tu_check(st == FC_OK && strncmp(text, "cpu: ", 5) == 0 && strstr(text, "split") && strstr(text, "thread"),
             "describe: %s, \"%s\": %s", fc_status_string(st), text, fc_last_error());
    memset(small, 'x', sizeof small);
    st = fc_attn_describe(&f.a, small, sizeof small);
    tu_check(st == FC_OK && memchr(small, '\0', sizeof small) == small + 7 && strncmp(small, text, 7) == 0,
             "describe into 8 bytes: %s, \"%.8s\"", fc_status_string(st), small);
    st = fc_attn_describe(&f.a, NULL, 10);
    tu_check(st == FC_ERR_INVALID_ARGUMENT && strstr(fc_last_error(), "buf"), "describe(NULL buf): %s: %s",
             fc_status_string(st), fc_last_error());
    st = fc_attn_describe(&f.a, text, 0);
    tu_check(st == FC_ERR_INVALID_ARGUMENT && strstr(fc_last_error(), "buf"), "describe(size 0): %s: %s",
             fc_status_string(st), fc_last_error());
    fx_free(&f);
    case_end();
}

static void valid_calls(void) {
    valid_call(FX_DENSE, FC_BF16, "valid dense bf16");
    valid_call(FX_DENSE, FC_FP16, "valid dense fp16");
    valid_call(FX_DENSE, FC_FP32, "valid dense fp32");
    valid_call(FX_VARLEN, FC_BF16, "valid varlen");
    valid_call(FX_PAGED_APPEND, FC_BF16, "valid paged append");
    valid_call(FX_DENSE_APPEND, FC_FP16, "valid dense append");
    valid_call(FX_MERGE, FC_BF16, "valid merge");
    valid_call(FX_MERGE, FC_FP32, "valid merge fp32");
}

/* fc_plan: a run equals fc_attn_fwd bit for bit, with the planned pointers or new ones; a run whose
 * arguments differ from the plan's in anything but data pointers fails naming the field, writing nothing. */
static void plan_equals_fwd(int kind, fc_dtype dt, const char *label) {
    if (!case_begin(label)) return;
    fixture f;
    fx_init(&f, kind, dt);
    size_t n_out = (size_t)(f.a.out.shape[0] * f.a.out.stride[0]) * tu_esize(dt);
    fc_status st = fc_attn_fwd(&f.a, NULL, 0, NULL);
    unsigned char *want = malloc(n_out);
    memcpy(want, f.a.out.data, n_out);
    fc_plan *plan = NULL;
    size_t bytes = 777;
    st = st == FC_OK ? fc_plan_create(&f.a, &plan) : st;
    if (st == FC_OK) st = fc_plan_workspace_size(plan, &bytes);
    tu_check(st == FC_OK && bytes == 0, "[%s] plan: %s, %zu workspace bytes: %s", label, fc_status_string(st), bytes,
             fc_last_error());
    fx_poison(&f.a.out);
    st = fc_plan_run(plan, &f.a, NULL, 0, NULL);
    tu_check(st == FC_OK && memcmp(want, f.a.out.data, n_out) == 0, "[%s] run with the planned pointers: %s (%s), "
             "out %s fc_attn_fwd's", label, fc_status_string(st), fc_last_error(), st == FC_OK ? "differs from" : "vs");
    fc_attn_args moved = f.a; /* q and out somewhere else */
    moved.q.data = f.spare;
    memcpy(f.spare, f.a.q.data, (size_t)(f.a.q.shape[0] * f.a.q.stride[0]) * tu_esize(dt));
    moved.out.data = fx_alloc(&f);
    st = fc_plan_run(plan, &moved, NULL, 0, NULL);
    tu_check(st == FC_OK && memcmp(want, moved.out.data, n_out) == 0, "[%s] run with new q, out: %s (%s)", label,
             fc_status_string(st), fc_last_error());
    fc_plan_destroy(plan);
    fx_free(&f);
    case_end();
}

/* A plan of fixture kind, then a run with args edited by the statements: fails naming names, writes nothing. */
#define PLAN_MISMATCH(kind, names, ...)                                                                 \
    do {                                                                                                \
        if (case_begin("plan run: " #__VA_ARGS__)) {                                                    \
            fixture fx_;                                                                                \
            fx_init(&fx_, kind, FC_BF16);                                                               \
            fixture *f = &fx_;                                                                          \
            fc_plan *plan = NULL;                                                                       \
            fc_status st_ = fc_plan_create(&f->a, &plan);                                               \
            tu_check(st_ == FC_OK, "plan: %s", fc_last_error());                                        \
            fc_attn_args *a = &f->a;                                                                    \
            __VA_ARGS__;                                                                                \
            memcpy(f->snap, f->arena, f->used);                                                         \
            st_ = fc_plan_run(plan, a, NULL, 0, NULL);                                                  \
            expect_failure(f, "fc_plan_run", #__VA_ARGS__, st_, INV, names, 1);                         \
            fc_plan_destroy(plan);                                                                      \
            fx_free(f);                                                                                 \
            case_end();                                                                                 \
        }                                                                                               \
    } while (0)

/* kv_batch_idx / kv_leftpad: dense caches only, rows of the cache, distinct rows when appending, pads
 * within each sequence's keys; valid uses run (a cache of 1 row shared by both sequences, no append). */
static void kv_index(void) {
    static const int rows_out[2] = {0, 2}, rows_neg[2] = {-1, 0}, rows_dup[2] = {1, 1}, pad_big[2] = {0, 10};
    static const int pad_neg[2] = {-1, 0}, rows_ok[2] = {0, 0};
    FWD_CONTENT(FX_DENSE, INV, "kv_batch_idx", a->kv_batch_idx = fx_ints(f, 2, rows_out));
    FWD_CONTENT(FX_DENSE, INV, "kv_batch_idx", a->kv_batch_idx = fx_ints(f, 2, rows_neg));
    FWD_CONTENT(FX_DENSE_APPEND, INV, "kv_batch_idx", a->kv_batch_idx = fx_ints(f, 2, rows_dup));
    FWD_CONTENT(FX_DENSE_APPEND, INV, "kv_leftpad", a->kv_leftpad = fx_ints(f, 2, pad_big)); /* seqused_k[1] = 9 */
    FWD_CONTENT(FX_DENSE, INV, "kv_leftpad", a->kv_leftpad = fx_ints(f, 2, pad_neg));
    FWD(FX_PAGED_APPEND, INV, "kv_batch_idx", a->kv_batch_idx = fx_ints(f, 2, rows_ok));
    FWD(FX_VARLEN, INV, "kv_leftpad", a->kv_leftpad = fx_ints(f, 2, rows_ok));
    FWD(FX_DENSE, INV, "kv_batch_idx", a->kv_batch_idx = fx_ints(f, 2, rows_ok); a->kv_batch_idx.shape[0] = 3);
    FWD(FX_DENSE, INV, "kv_leftpad", a->kv_leftpad = fx_ints(f, 2, rows_ok); a->kv_leftpad.dtype = FC_FP32);
    static const int q_over[2] = {3, 5}, q_neg[2] = {0, -1}; /* FX_VARLEN: sequences of 3 and 4 rows */
    FWD_CONTENT(FX_VARLEN, INV, "seqused_q", a->seqused_q = fx_ints(f, 2, q_over));
    FWD_CONTENT(FX_DENSE, INV, "seqused_q", a->seqused_q = fx_ints(f, 2, q_neg));
    FWD(FX_DENSE, INV, "seqused_q", a->seqused_q = fx_ints(f, 2, q_neg); a->seqused_q.shape[0] = 1);
    if (case_begin("kv_batch_idx: one cache row for both sequences")) {
        fixture f;
        fx_init(&f, FX_DENSE, FC_BF16);
        f.a.kv_batch_idx = fx_ints(&f, 2, rows_ok);
        f.a.k.shape[0] = f.a.v.shape[0] = 1; /* fewer rows than the batch: fine with kv_batch_idx */
        fc_status st = fc_attn_fwd(&f.a, NULL, 0, NULL);
        tu_check(st == FC_OK, "kv_batch_idx {0, 0} over a 1-row cache: %s (%s)", fc_status_string(st), fc_last_error());
        fx_free(&f);
        case_end();
    }
}

/* A dense cache with more sequences than the batch (FlashAttention's batch_size_cache >= batch): sequence
 * i uses cache row i, so a cache of 3 whose first 2 rows are the fixture's gives the same result bit for
 * bit; a cache with fewer rows than the batch is rejected naming k. */
static void bigger_cache(void) {
    if (case_begin("dense cache batch 3 > b 2")) {
        fixture f;
        fx_init(&f, FX_DENSE, FC_BF16);
        fc_status st = fc_attn_fwd(&f.a, NULL, 0, NULL);
        size_t n_out = (size_t)(f.a.out.shape[0] * f.a.out.stride[0]) * 2, n_kv = (size_t)f.a.k.stride[0] * 2 * 2;
        unsigned char *want = malloc(n_out);
        memcpy(want, f.a.out.data, n_out);
        fc_tensor k3 = fx_tensor(&f, FC_BF16, 4, 3, 16, 2, 64), v3 = fx_tensor(&f, FC_BF16, 4, 3, 16, 2, 64);
        memcpy(k3.data, f.a.k.data, n_kv);
        memcpy(v3.data, f.a.v.data, n_kv);
        f.a.k = k3, f.a.v = v3;
        fx_poison(&f.a.out);
        fc_status st3 = fc_attn_fwd(&f.a, NULL, 0, NULL);
        tu_check(st == FC_OK && st3 == FC_OK && memcmp(want, f.a.out.data, n_out) == 0,
                 "cache of 3 rows for 2 sequences: %s (%s), out %s", fc_status_string(st3), fc_last_error(),
                 st3 == FC_OK && memcmp(want, f.a.out.data, n_out) ? "differs" : "as with 2 rows");
        free(want);
        fx_free(&f);
        case_end();
    }
    FWD(FX_DENSE, INV, "k", a->k.shape[0] = 1; a->v.shape[0] = 1);
}

static void plans(void) {
    plan_equals_fwd(FX_DENSE, FC_BF16, "plan dense bf16");
    plan_equals_fwd(FX_DENSE, FC_FP32, "plan dense fp32");
    plan_equals_fwd(FX_VARLEN, FC_FP16, "plan varlen");
    plan_equals_fwd(FX_PAGED_APPEND, FC_BF16, "plan paged append");
    plan_equals_fwd(FX_DENSE_APPEND, FC_BF16, "plan dense append");
    PLAN_MISMATCH(FX_DENSE, "q", a->q.shape[1] = 3);
    PLAN_MISMATCH(FX_DENSE, "k", a->k.stride[0] += 64);
    PLAN_MISMATCH(FX_DENSE, "lse", a->lse.data = NULL);
    PLAN_MISMATCH(FX_DENSE, "out", a->out.dtype = FC_FP16);
    PLAN_MISMATCH(FX_DENSE, "causal", a->causal = 0);
    PLAN_MISMATCH(FX_DENSE, "softmax_scale", a->softmax_scale = 0.5f);
    PLAN_MISMATCH(FX_DENSE, "num_splits", a->num_splits = 2);
    PLAN_MISMATCH(FX_VARLEN, "max_seqlen_q", a->max_seqlen_q = 4);
    PLAN_MISMATCH(FX_DENSE, "out", a->out.data = a->q.data);                   /* same shape, but overlaps q */
    PLAN_MISMATCH(FX_DENSE, "q", a->q.data = offset_bytes(a->q.data, 1));       /* misaligned */
    PLAN_MISMATCH(FX_VARLEN, "cu_seqlens_q", set_i32(&a->cu_seqlens_q, 2, 9)); /* contents re-checked */
    PLAN_MISMATCH(FX_PAGED_APPEND, "page_table", set_i32(&a->page_table, 0, 6));
    if (case_begin("plan: NULL arguments")) {
        fixture f;
        fx_init(&f, FX_DENSE, FC_BF16);
        fc_plan *plan = NULL;
        size_t bytes;
        tu_check(fc_plan_create(&f.a, NULL) == FC_ERR_INVALID_ARGUMENT && names_match(fc_last_error(), "plan"),
                 "fc_plan_create(plan NULL): %s", fc_last_error());
        tu_check(fc_plan_create(NULL, &plan) == FC_ERR_INVALID_ARGUMENT && !plan && names_match(fc_last_error(), "args"),
                 "fc_plan_create(args NULL): %s", fc_last_error());
        tu_check(fc_plan_run(NULL, &f.a, NULL, 0, NULL) == FC_ERR_INVALID_ARGUMENT && names_match(fc_last_error(), "plan"),
                 "fc_plan_run(NULL plan): %s", fc_last_error());
        tu_check(fc_plan_workspace_size(NULL, &bytes) == FC_ERR_INVALID_ARGUMENT, "fc_plan_workspace_size(NULL)");
        tu_check(fc_plan_create(&f.a, &plan) == FC_OK, "plan: %s", fc_last_error());
        tu_check(fc_plan_run(plan, NULL, NULL, 0, NULL) == FC_ERR_INVALID_ARGUMENT && names_match(fc_last_error(), "args"),
                 "fc_plan_run(NULL args): %s", fc_last_error());
        tu_check(fc_plan_workspace_size(plan, NULL) == FC_ERR_INVALID_ARGUMENT, "fc_plan_workspace_size(bytes NULL)");
        fc_plan_destroy(plan);
        fc_plan_destroy(NULL);
        fx_free(&f);
        case_end();
    }
}

/* Boundary values that are valid: num_splits 128, window 0, causal with window_left, append to exactly full. */
static void valid_edges(void) {
    static const char *labels[] = {"num_splits 128", "window (0,0)", "seqused_k = capacity", "append fills capacity",
                                   "paged append fills capacity", "rotary table exactly long enough",
                                   "causal with window_left 2", "unused page-table entry -1"};
    for (int k = 0; k < 8; k++) {
        if (!case_begin(labels[k])) continue;
        fixture f;
        fx_init(&f, k < 3 || k == 6 ? FX_DENSE : k == 3 || k == 5 ? FX_DENSE_APPEND : FX_PAGED_APPEND, FC_BF16);
        fc_attn_args *a = &f.a;
        switch (k) {
        case 0: a->num_splits = 128; break;
        case 1: a->causal = 0, a->window_left = 0, a->window_right = 0; break;
        case 2: a->seqused_k = fc_tensor_1d(f.spare, FC_INT32, 2), set_i32(&a->seqused_k, 0, 16), set_i32(&a->seqused_k, 1, 0); break;
        case 3: set_i32(&a->seqused_k, 0, 14); break;
        case 4: set_i32(&a->seqused_k, 1, 22); break;
        case 5: a->rotary_cos.shape[0] = a->rotary_sin.shape[0] = 11; break; /* positions up to 9 + 2 - 1 = 10 */
        case 6: a->window_left = 2; break;
        default: set_i32(&a->page_table, 2, -1); break; /* sequence 0 uses 1 page of 8 (5 + 2 keys) */
        }
        fc_status st = fc_attn_fwd(a, NULL, 0, NULL);
        tu_check(st == FC_OK, "[valid: %s] status %s: %s", labels[k], fc_status_string(st), fc_last_error());
        fx_free(&f);
        case_end();
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* fc_attn_fwd and fc_attn_workspace_size                                                          */

static void null_args(void) {
    if (!case_begin("NULL args")) return;
    size_t bytes = 1;
    fc_status st = fc_attn_fwd(NULL, NULL, 0, NULL);
    tu_check(st == FC_ERR_INVALID_ARGUMENT && names_match(fc_last_error(), "args"),
             "fc_attn_fwd(NULL): %s \"%s\" (want invalid argument naming args)", fc_status_string(st), fc_last_error());
    st = fc_attn_workspace_size(NULL, &bytes);
    tu_check(st == FC_ERR_INVALID_ARGUMENT && names_match(fc_last_error(), "args"),
             "fc_attn_workspace_size(NULL, &bytes): %s \"%s\"", fc_status_string(st), fc_last_error());
    fixture f;
    fx_init(&f, FX_DENSE, FC_BF16);
    st = fc_attn_workspace_size(&f.a, NULL);
    tu_check(st == FC_ERR_INVALID_ARGUMENT && names_match(fc_last_error(), "bytes"),
             "fc_attn_workspace_size(&a, NULL): %s \"%s\" (want invalid argument naming bytes)", fc_status_string(st),
             fc_last_error());
    st = fc_merge_states(NULL, NULL);
    tu_check(st == FC_ERR_INVALID_ARGUMENT && names_match(fc_last_error(), "args"),
             "fc_merge_states(NULL): %s \"%s\"", fc_status_string(st), fc_last_error());
    fx_free(&f);
    case_end();
}

static void missing_and_misaligned(void) {
    FWD(FX_DENSE, INV, "q", a->q.data = NULL);
    FWD(FX_DENSE, INV, "k", a->k.data = NULL);
    FWD(FX_DENSE, INV, "v", a->v.data = NULL);
    FWD(FX_DENSE, INV, "out", a->out.data = NULL);
    FWD(FX_DENSE, INV, "q", a->q.data = offset_bytes(a->q.data, 1));
    FWD(FX_DENSE, INV, "k", a->k.data = offset_bytes(a->k.data, 1));
    FWD(FX_DENSE, INV, "v", a->v.data = offset_bytes(a->v.data, 1));
    FWD(FX_DENSE, INV, "out", a->out.data = offset_bytes(a->out.data, 1));
    FWD(FX_DENSE, INV, "lse", a->lse.data = offset_bytes(a->lse.data, 2));
    FWD(FX_DENSE, INV, "alibi_slopes", a->alibi_slopes.data = offset_bytes(a->alibi_slopes.data, 2));
    FWD(FX_VARLEN, INV, "cu_seqlens_q", a->cu_seqlens_q.data = offset_bytes(a->cu_seqlens_q.data, 2));
    FWD(FX_PAGED_APPEND, INV, "k_new", a->k_new.data = offset_bytes(a->k_new.data, 1));
    FWD(FX_PAGED_APPEND, INV, "page_table", a->page_table.data = offset_bytes(a->page_table.data, 1));
    FWD_DT(FX_DENSE, FC_FP32, INV, "q", 0, a->q.data = offset_bytes(a->q.data, 2));
}

static void ndim_and_shapes(void) {
    FWD(FX_DENSE, INV, "q", a->q.ndim = 3);
    FWD(FX_DENSE, INV, "q", a->q.ndim = 5);
    FWD(FX_DENSE, INV, "q", a->q.ndim = 0);
    FWD(FX_DENSE, INV, "k", reshape(&a->k, 3, 32, 2, 64, 0));
    FWD(FX_DENSE, INV, "v", reshape(&a->v, 3, 32, 2, 64, 0));
    FWD(FX_DENSE, INV, "out", reshape(&a->out, 3, 8, 4, 64, 0));
    FWD(FX_DENSE, INV, "lse", reshape(&a->lse, 2, 8, 4, 0, 0));
    FWD(FX_DENSE, INV, "q", a->q.shape[1] = -1);
    FWD(FX_DENSE, INV, "k", reshape(&a->k, 4, 1, 16, 2, 64));        /* b */
    FWD(FX_DENSE, INV, "v", reshape(&a->v, 4, 1, 16, 2, 64));
    FWD(FX_DENSE, INV, "out", reshape(&a->out, 4, 1, 4, 4, 64));
    FWD(FX_DENSE, INV, "v", reshape(&a->v, 4, 2, 15, 2, 64));        /* s_k */
    FWD(FX_DENSE, INV, "out", reshape(&a->out, 4, 2, 3, 4, 64));     /* s_q */
    FWD(FX_DENSE, INV, "out", reshape(&a->out, 4, 2, 4, 2, 64));     /* h_q */
    FWD(FX_DENSE, INV, "v", reshape(&a->v, 4, 2, 16, 1, 64));        /* h_k */
    FWD(FX_DENSE, INV, "k|q", reshape(&a->k, 4, 2, 16, 2, 128));     /* d */
    FWD(FX_DENSE, INV, "out|v", reshape(&a->out, 4, 2, 4, 4, 128));  /* d_v */
    FWD(FX_DENSE, INV, "k|v|q", reshape(&a->k, 4, 2, 16, 3, 64); reshape(&a->v, 4, 2, 16, 3, 64)); /* 4 % 3 */
    FWD(FX_DENSE, INV, "k|v|q", reshape(&a->k, 4, 2, 16, 0, 64); reshape(&a->v, 4, 2, 16, 0, 64));
    FWD(FX_DENSE, INV, "lse", reshape(&a->lse, 3, 2, 4, 3, 0));
    FWD(FX_DENSE, INV, "lse", reshape(&a->lse, 3, 2, 3, 4, 0));
    FWD(FX_DENSE, INV, "lse", a->lse.dtype = FC_BF16);
    FWD(FX_VARLEN, INV, "lse", reshape(&a->lse, 2, 7, 4, 0, 0));     /* varlen lse is (h_q, total_q) */
    FWD(FX_VARLEN, INV, "lse", reshape(&a->lse, 3, 1, 4, 7, 0));
}

static void strides(void) {
    FWD(FX_DENSE, INV, "q", a->q.stride[3] = 2);
    FWD(FX_DENSE, INV, "k", a->k.stride[3] = 2);
    FWD(FX_DENSE, INV, "v", a->v.stride[3] = 0);
    FWD(FX_DENSE, INV, "out", a->out.stride[3] = 2);
    FWD(FX_PAGED_APPEND, INV, "k_new", a->k_new.stride[3] = 2);
    FWD(FX_PAGED_APPEND, INV, "v_new", a->v_new.stride[3] = 3);
    FWD(FX_VARLEN, INV, "q", a->q.stride[2] = 2);
    FWD(FX_DENSE, INV, "q", a->q.stride[1] = -256);
    FWD(FX_DENSE, INV, "k", a->k.stride[0] = -2048);
    FWD(FX_DENSE, INV, "out", a->out.stride[2] = -64);
    FWD(FX_DENSE, INV, "lse", a->lse.stride[2] = -1);
    FWD(FX_VARLEN, INV, "cu_seqlens_q", a->cu_seqlens_q.stride[0] = -1);
    FWD(FX_DENSE, INV, "k", a->k.stride[0] = (int64_t)1 << 62);      /* int64 offset overflow */
    FWD(FX_DENSE, INV, "q", a->q.stride[1] = (int64_t)1 << 62);
    FWD(FX_DENSE, INV, "out", a->out.stride[0] = INT64_MAX / 2);
    FWD(FX_DENSE, INV, "v", a->v.stride[2] = (int64_t)1 << 62);
    FWD(FX_PAGED_APPEND, INV, "k", a->k.stride[0] = (int64_t)1 << 62);
}

static void head_dims_and_dtypes(void) {
    static const int bad_d[3] = {84, 4, 264};
    for (int i = 0; i < 3; i++) {
        int d = bad_d[i];
        FWD(FX_DENSE, INV_OR_UNSUP, "q|k|d", reshape(&a->q, 4, 2, 4, 4, d); reshape(&a->k, 4, 2, 16, 2, d));
        FWD(FX_DENSE, INV_OR_UNSUP, "v|out|d_v", reshape(&a->v, 4, 2, 16, 2, d); reshape(&a->out, 4, 2, 4, 4, d));
    }
    FWD(FX_DENSE, INV, "k", a->k.dtype = FC_FP16);
    FWD(FX_DENSE, INV, "v", a->v.dtype = FC_FP16);
    FWD(FX_DENSE, INV, "out", a->out.dtype = FC_FP16);
    FWD(FX_DENSE, INV, "k", a->k.dtype = FC_FP32);
    FWD_DT(FX_DENSE, FC_FP32, INV, "out", 0, a->out.dtype = FC_BF16);
    FWD(FX_DENSE, INV_OR_UNSUP, "q", a->q.dtype = a->k.dtype = a->v.dtype = a->out.dtype = FC_INT32);
    FWD(FX_DENSE, INV, "q", a->q.dtype = (fc_dtype)17);
    FWD(FX_DENSE, INV, "out", a->q.dtype = a->k.dtype = a->v.dtype = a->out.dtype = FC_E4M3); /* fp8 q: out bf16/fp16 */
    FWD(FX_DENSE, INV, "k", a->q.dtype = FC_E4M3);                        /* fp8 q: k and v of its format */
    FWD(FX_DENSE, INV, "k", a->q.dtype = FC_E4M3; a->k.dtype = a->v.dtype = FC_E5M2);
    FWD(FX_DENSE_APPEND, INV_OR_UNSUP, "k_new", a->q.dtype = a->k.dtype = a->v.dtype = FC_E4M3);
    FWD(FX_DENSE, INV, "q_descale", a->k.dtype = a->v.dtype = FC_E4M3;
        a->q_descale = fx_tensor(f, FC_FP32, 2, 2, 2, 0, 0));              /* bf16 q */
    FWD(FX_DENSE, INV, "v", a->k.dtype = FC_E4M3);                       /* an fp8 k needs an fp8 v */
    FWD(FX_DENSE, INV, "v", a->k.dtype = FC_E4M3; a->v.dtype = FC_E5M2); /* of the same format */
    FWD(FX_DENSE, INV, "k_descale", a->k_descale = fx_tensor(f, FC_FP32, 2, 2, 2, 0, 0)); /* bf16 k */
    FWD(FX_DENSE, INV, "k_descale", a->k.dtype = a->v.dtype = FC_E4M3;
        a->k_descale = fx_tensor(f, FC_FP32, 2, 2, 4, 0, 0));              /* (b, h_q), not (b, h_k) */
    FWD(FX_DENSE, INV, "v_descale", a->k.dtype = a->v.dtype = FC_E4M3;
        a->v_descale = fx_tensor(f, FC_BF16, 2, 2, 2, 0, 0));
    FWD(FX_PAGED_APPEND, INV, "k_new", a->k_new.dtype = FC_FP16);
    FWD(FX_PAGED_APPEND, INV, "v_new", a->v_new.dtype = FC_FP16);
}

/* fc_cuda_available(), asked in a child: the parent forks every case and must not initialise CUDA. */
static int cuda_present(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(fc_cuda_available() == 1 ? 1 : fc_cuda_available() == 0 ? 0 : 2);
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 3;
    tu_check(code <= 1, "fc_cuda_available() is neither 0 nor 1, or crashed (child status %d)", code);
    return code == 1;
}

static void devices(int cuda) {
    if (cuda) {
        printf("device cases skipped: a CUDA device is present (they pass host pointers)\n");
        return;
    }
    /* Accepted: "no CUDA device" or "unsupported" (this build or machine has no GPU). */
    FWD(FX_DENSE, NODEV, "device", a->device = FC_DEVICE_CUDA);
    FWD_DT(FX_DENSE, FC_FP32, NODEV, "device|q|dtype", 0, a->device = FC_DEVICE_CUDA);
    FWD(FX_PAGED_APPEND, NODEV, "device", a->device = FC_DEVICE_CUDA);
    FWD(FX_DENSE, INV, "device", a->device = (fc_device)7);
    MERGE(NODEV, "device", m->device = FC_DEVICE_CUDA);
    MERGE(INV, "device", m->device = (fc_device)7);
}

static void varlen(void) {
    FWD(FX_VARLEN, INV, "cu_seqlens_q", a->cu_seqlens_q.dtype = FC_FP32);
    FWD(FX_VARLEN, INV, "cu_seqlens_k", a->cu_seqlens_k.dtype = FC_BF16);
    FWD(FX_VARLEN, INV, "cu_seqlens_q", reshape(&a->cu_seqlens_q, 2, 1, 3, 0, 0));
    FWD(FX_VARLEN, INV, "cu_seqlens_q", a->cu_seqlens_q.shape[0] = 0);
    FWD(FX_VARLEN, INV, "cu_seqlens_q|cu_seqlens_k|seqused_k", a->cu_seqlens_q.shape[0] = 2);
    FWD(FX_VARLEN, INV, "cu_seqlens_k|cu_seqlens_q", a->cu_seqlens_k.shape[0] = 4);
    FWD(FX_VARLEN, INV, "q|cu_seqlens_q", reshape(&a->q, 4, 1, 7, 4, 64));
    FWD(FX_VARLEN, INV, "k|cu_seqlens_k", reshape(&a->k, 4, 1, 16, 2, 64); reshape(&a->v, 4, 1, 16, 2, 64));
    FWD(FX_VARLEN, INV, "out", reshape(&a->out, 3, 6, 4, 64, 0));
    FWD(FX_VARLEN, INV, "v", reshape(&a->v, 3, 15, 2, 64, 0));
    FWD_CONTENT(FX_VARLEN, INV, "cu_seqlens_q", set_i32(&a->cu_seqlens_q, 0, 1));
    FWD_CONTENT(FX_VARLEN, INV, "cu_seqlens_q", set_i32(&a->cu_seqlens_q, 1, 8));   /* 0, 8, 7 */
    FWD_CONTENT(FX_VARLEN, INV, "cu_seqlens_q", set_i32(&a->cu_seqlens_q, 2, 8));   /* last > 7 rows */
    FWD_CONTENT(FX_VARLEN, INV, "cu_seqlens_q", set_i32(&a->cu_seqlens_q, 1, -2));
    FWD_CONTENT(FX_VARLEN, INV, "cu_seqlens_k", set_i32(&a->cu_seqlens_k, 0, -1));
    FWD_CONTENT(FX_VARLEN, INV, "cu_seqlens_k", set_i32(&a->cu_seqlens_k, 1, 17));
    FWD_CONTENT(FX_VARLEN, INV, "cu_seqlens_k", set_i32(&a->cu_seqlens_k, 2, 17));  /* last > 16 rows */
    FWD_CONTENT(FX_VARLEN, INV, "seqused_k", set_i32(&a->seqused_k, 0, -1));
    FWD_CONTENT(FX_VARLEN, INV, "seqused_k", set_i32(&a->seqused_k, 0, 11));        /* sequence 0 has 10 keys */
    FWD(FX_VARLEN, INV, "seqused_k", a->seqused_k.dtype = FC_FP32);
    FWD(FX_VARLEN, INV, "seqused_k", a->seqused_k.shape[0] = 3);
    FWD(FX_VARLEN, INV, "seqused_k", reshape(&a->seqused_k, 2, 1, 2, 0, 0));
    FWD(FX_VARLEN, INV, "max_seqlen_q", a->max_seqlen_q = -1);
    FWD(FX_VARLEN, INV, "max_seqlen_k", a->max_seqlen_k = -1);
    FWD_CONTENT(FX_DENSE, INV, "seqused_k", a->seqused_k = fc_tensor_1d(f->spare, FC_INT32, 2);
                set_i32(&a->seqused_k, 0, 17); set_i32(&a->seqused_k, 1, 2));      /* capacity 16 */
    FWD_CONTENT(FX_DENSE, INV, "seqused_k", a->seqused_k = fc_tensor_1d(f->spare, FC_INT32, 2);
                set_i32(&a->seqused_k, 0, 3); set_i32(&a->seqused_k, 1, -3));
}

static void paged(void) {
    FWD(FX_PAGED_APPEND, INV, "page_table", a->page_table.dtype = FC_FP32);
    FWD(FX_PAGED_APPEND, INV, "page_table", reshape(&a->page_table, 2, 3, 2, 0, 0));
    FWD(FX_PAGED_APPEND, INV, "page_table", reshape(&a->page_table, 1, 6, 0, 0, 0));
    FWD(FX_PAGED_APPEND, INV, "page_table", a->page_table.stride[1] = 2);
    FWD(FX_PAGED_APPEND, INV, "seqused_k|page_table|k_new", a->seqused_k.data = NULL);
    FWD(FX_PAGED_APPEND, INV, "seqused_k|page_table", a->seqused_k.data = NULL; a->k_new.data = a->v_new.data = NULL;
        a->rotary_cos.data = a->rotary_sin.data = NULL);
    FWD(FX_PAGED_APPEND, INV, "k|page_table", reshape(&a->k, 3, 48, 2, 64, 0); reshape(&a->v, 3, 48, 2, 64, 0));
    FWD(FX_PAGED_APPEND, INV, "v", reshape(&a->v, 4, 6, 4, 2, 64));         /* page size differs from k's */
    FWD(FX_PAGED_APPEND, INV, "v", reshape(&a->v, 4, 5, 8, 2, 64));         /* number of pages differs */
    FWD(FX_PAGED_APPEND, INV, "cu_seqlens_k|page_table|k", a->cu_seqlens_k = fc_tensor_1d(f->spare, FC_INT32, 3));
    FWD_CONTENT(FX_PAGED_APPEND, INV, "page_table", set_i32(&a->page_table, 0, -1));
    FWD_CONTENT(FX_PAGED_APPEND, INV, "page_table", set_i32(&a->page_table, 4, 6)); /* 6 pages: 0..5 */
    FWD_CONTENT(FX_PAGED_APPEND, INV, "page_table", set_i32(&a->page_table, 3, 1000));
    FWD_CONTENT(FX_PAGED_APPEND, INV, "page_table", set_i32(&a->seqused_k, 0, 7); set_i32(&a->page_table, 0, 6)); /* page 1 of seq 0 only receives appended keys */
    FWD_CONTENT(FX_PAGED_APPEND, INV, "seqused_k", set_i32(&a->seqused_k, 0, -1));
    FWD_CONTENT(FX_PAGED_APPEND, INV, "seqused_k|k_new", set_i32(&a->seqused_k, 0, 25));  /* capacity 3 * 8 */
}

static void append(void) {
    FWD(FX_DENSE_APPEND, INV, "seqused_k|k_new", a->seqused_k.data = NULL);
    FWD(FX_DENSE_APPEND, INV, "v_new|k_new", a->v_new.data = NULL);
    FWD(FX_DENSE_APPEND, INV, "k_new|v_new", a->k_new.data = NULL; a->rotary_cos.data = a->rotary_sin.data = NULL);
    FWD(FX_DENSE_APPEND, INV, "v_new", reshape(&a->v_new, 4, 2, 1, 2, 64));  /* s_new */
    FWD(FX_DENSE_APPEND, INV, "k_new", reshape(&a->k_new, 4, 1, 2, 2, 64));  /* b */
    FWD(FX_DENSE_APPEND, INV, "k_new", reshape(&a->k_new, 4, 2, 2, 1, 64));  /* h_k */
    FWD(FX_DENSE_APPEND, INV, "k_new", reshape(&a->k_new, 4, 2, 2, 2, 128)); /* d */
    FWD(FX_DENSE_APPEND, INV, "v_new", reshape(&a->v_new, 4, 2, 2, 2, 128)); /* d_v */
    FWD(FX_DENSE_APPEND, INV, "k_new", reshape(&a->k_new, 3, 4, 2, 64, 0));
    FWD(FX_VARLEN, INV_OR_UNSUP, "k_new|cu_seqlens_k", a->k_new = fc_tensor_4d(f->spare, FC_BF16, 2, 1, 2, 64);
        a->v_new = fc_tensor_4d(f->spare, FC_BF16, 2, 1, 2, 64));
    FWD_CONTENT(FX_DENSE_APPEND, INV, "seqused_k|k_new", set_i32(&a->seqused_k, 0, 15));   /* 15 + 2 > 16 */
    FWD_CONTENT(FX_PAGED_APPEND, INV, "seqused_k|k_new", set_i32(&a->seqused_k, 1, 23));   /* 23 + 2 > 24 */
}

static void rotary(void) {
    FWD(FX_DENSE, INV, "rotary_cos", fx_rotary(f, FC_FP32, 32, 16));                /* without k_new */
    FWD(FX_DENSE_APPEND, INV, "rotary_sin", a->rotary_sin.data = NULL);
    FWD(FX_DENSE_APPEND, INV, "rotary_cos|rotary_sin", a->rotary_cos.data = NULL);
    FWD(FX_DENSE_APPEND, INV, "rotary_sin", a->rotary_sin.shape[1] = 16);
    FWD(FX_DENSE_APPEND, INV, "rotary_sin", a->rotary_sin.shape[0] = 15);
    FWD(FX_PAGED_APPEND, INV, "rotary_sin", a->rotary_sin.dtype = FC_BF16);
    FWD(FX_PAGED_APPEND, INV, "rotary_cos", a->rotary_cos.dtype = a->rotary_sin.dtype = FC_INT32);
    FWD(FX_DENSE_APPEND, INV, "rotary_cos", a->rotary_cos.dtype = a->rotary_sin.dtype = FC_FP16); /* q is bf16 */
    FWD(FX_DENSE_APPEND, INV, "rotary_cos", reshape(&a->rotary_cos, 2, 8, 40, 0, 0);
        reshape(&a->rotary_sin, 2, 8, 40, 0, 0));                                    /* rotary_dim 80 > d */
    FWD(FX_DENSE_APPEND, INV, "rotary_cos", reshape(&a->rotary_cos, 1, 512, 0, 0, 0);
        reshape(&a->rotary_sin, 1, 512, 0, 0, 0));
    FWD(FX_DENSE_APPEND, INV, "rotary_cos", a->rotary_cos.data = offset_bytes(a->rotary_cos.data, 1));
    FWD_CONTENT(FX_DENSE_APPEND, INV, "rotary_cos|rotary_sin",
                a->rotary_cos.shape[0] = a->rotary_sin.shape[0] = 10);              /* position 10 needed */
    FWD_CONTENT(FX_PAGED_APPEND, INV, "rotary_cos|rotary_sin",
                a->rotary_cos.shape[0] = a->rotary_sin.shape[0] = 11);              /* 10 + 2 - 1 = 11 */
}

static void scores_and_options(void) {
    FWD(FX_DENSE, INV, "window_left", a->window_left = -2);
    FWD(FX_DENSE, INV, "window_right", a->causal = 0; a->window_right = -5);
    FWD(FX_DENSE, INV, "softcap", a->softcap = -1.0f);
    FWD(FX_DENSE, INV, "softcap", a->softcap = NAN);
    FWD(FX_DENSE, INV, "softmax_scale", a->softmax_scale = NAN);
    FWD(FX_DENSE, INV, "softmax_scale", a->softmax_scale = INFINITY);
    FWD(FX_DENSE, INV, "softmax_scale", a->softmax_scale = -INFINITY);
    FWD(FX_DENSE, INV, "alibi_slopes", a->alibi_slopes.dtype = FC_BF16);
    FWD(FX_DENSE, INV, "alibi_slopes", a->alibi_slopes.shape[0] = 5);
    FWD(FX_DENSE, INV, "alibi_slopes", reshape(&a->alibi_slopes, 2, 3, 4, 0, 0));
    FWD(FX_DENSE, INV, "alibi_slopes", reshape(&a->alibi_slopes, 2, 2, 5, 0, 0));
    FWD(FX_DENSE, INV, "alibi_slopes", reshape(&a->alibi_slopes, 3, 1, 2, 4, 0));
    FWD(FX_DENSE, INV, "sinks", a->sinks.shape[0] = 5);
    FWD(FX_DENSE, INV, "sinks", a->sinks.dtype = FC_BF16);
    FWD(FX_DENSE, INV, "sinks", reshape(&a->sinks, 2, 1, 4, 0, 0));
    FWD(FX_DENSE, INV, "softcap", a->softcap = 1e-40f);                     /* scale / softcap overflows */
    FWD(FX_DENSE, INV, "softcap", a->softmax_scale = 100; a->softcap = 1e-37f);
    FWD(FX_DENSE, INV, "softcap", a->softcap = 1e38f);                      /* scale / softcap not normal */
    FWD(FX_DENSE, INV, "softcap", a->softcap = 3e38f);
    FWD(FX_DENSE, INV, "softmax_scale", a->softmax_scale = -3e38f);
    FWD(FX_DENSE, INV, "num_splits", a->num_splits = -1);
    FWD(FX_DENSE, INV, "num_splits", a->num_splits = 129);
}

/* ---------------------------------------------------------------------------------------------- */
/* fc_merge_states, threads, statuses                                                              */

/* Views that pass every check: overlaps of read-only views, k and v interleaved in one cache, a page
 * shared read-only by two sequences, a tiny softcap, the widest windows. */
static void valid_views(void) {
    static const char *labels[] = {"k and v interleaved in one cache (append)", "k == v (read only)",
                                   "broadcast q (zero strides)", "page shared read-only by two sequences (append)",
                                   "softcap 1e-30", "window (2^31-1, 2^31-1)", "max_seqlen_q 2^29 (h_q/h_k = 2)",
                                   "q and out interleaved in one tensor"};
    for (int k = 0; k < 8; k++) {
        if (!case_begin(labels[k])) continue;
        fixture f;
        fx_init(&f, k == 0 ? FX_DENSE_APPEND : k == 3 ? FX_PAGED_APPEND : k == 6 ? FX_VARLEN : FX_DENSE, FC_BF16);
        fc_attn_args *a = &f.a;
        switch (k) {
        case 0: /* (b, s, 2, h_k, d): k = [:, :, 0], v = [:, :, 1] */
            a->k.stride[0] = a->v.stride[0] = 16 * 256;
            a->k.stride[1] = a->v.stride[1] = 256;
            a->v.data = (uint16_t *)a->k.data + 128;
            break;
        case 1: a->v = a->k; break;
        case 2: a->q.stride[0] = a->q.stride[1] = a->q.stride[2] = 0; break;
        case 3: set_i32(&a->seqused_k, 0, 10), set_i32(&a->page_table, 3, 4); break; /* both read page 4, neither appends to it */
        case 4: a->softcap = 1e-30f; break;
        case 5: a->causal = 0, a->window_left = a->window_right = INT32_MAX; break;
        case 6: a->max_seqlen_q = 1 << 29; break;
        default: /* (b, s_q, 2, h_q, d): q = [:, :, 0], out = [:, :, 1] */
            a->q.stride[0] = a->out.stride[0] = 4 * 512;
            a->q.stride[1] = a->out.stride[1] = 512;
            a->out.data = (uint16_t *)a->q.data + 256;
            break;
        }
        fc_status st = fc_attn_fwd(a, NULL, 0, NULL);
        tu_check(st == FC_OK, "[valid: %s] status %s: %s", labels[k], fc_status_string(st), fc_last_error());
        fx_free(&f);
        case_end();
    }
}

/* Sizes past 2^30 packed query rows or keys per sequence; offsets and lengths that overflow int. */
static void sizes(void) {
    FWD(FX_DENSE, INV, "q", a->lse.data = NULL; broadcast(&a->q, (1 << 29) + 1); broadcast(&a->out, (1 << 29) + 1));
    FWD(FX_VARLEN, INV, "max_seqlen_q", a->max_seqlen_q = (1 << 29) + 1);              /* x 2 query heads per KV head */
    FWD(FX_DENSE, INV, "k", broadcast(&a->k, (1 << 30) + 1); broadcast(&a->v, (1 << 30) + 1));
    FWD(FX_DENSE, INV, "k", broadcast(&a->k, INT32_MAX); broadcast(&a->v, INT32_MAX));
    FWD(FX_VARLEN, INV, "max_seqlen_k", a->max_seqlen_k = (1 << 30) + 1);
    FWD(FX_PAGED_APPEND, INV, "page_table", a->page_table.shape[1] = (1 << 27) + 1; a->page_table.stride[0] = 0);
    FWD(FX_DENSE_APPEND, INV, "k_new", reshape(&a->k_new, 4, 2, 17, 2, 64); reshape(&a->v_new, 4, 2, 17, 2, 64));
    FWD(FX_DENSE, INV, "q", a->q.stride[0] = INT64_MAX - 1023);                         /* last offset INT64_MAX */
    FWD_CONTENT(FX_VARLEN, INV, "cu_seqlens_q", set_i32(&a->cu_seqlens_q, 2, INT32_MIN)); /* INT32_MIN - 3 */
    FWD_CONTENT(FX_VARLEN, INV, "cu_seqlens_k", set_i32(&a->cu_seqlens_k, 2, INT32_MIN)); /* INT32_MIN - 10 */
}

/* Views flashc writes that overlap themselves or another argument. */
static void overlaps(void) {
    FWD(FX_DENSE, INV, "out", a->out.stride[1] = 0);
    FWD(FX_DENSE, INV, "out", a->out.stride[2] = 0);
    FWD(FX_DENSE, INV, "out", a->out.stride[1] = 64);                  /* rows and heads meet */
    FWD(FX_DENSE, INV, "out", a->out.stride[0] = 100);                 /* batch 1 inside batch 0 */
    FWD(FX_DENSE, INV, "lse", a->lse.stride[2] = 0);
    FWD(FX_VARLEN, INV, "lse", a->lse.stride[0] = 0);
    FWD(FX_DENSE, INV, "out|lse", a->lse.data = a->out.data);
    FWD(FX_DENSE, INV, "out|lse", a->lse.data = offset_bytes(a->out.data, 1024));
    FWD(FX_DENSE, INV, "out|q", a->out.data = a->q.data);              /* in place */
    FWD(FX_DENSE, INV, "out|q", a->out.data = offset_bytes(a->q.data, 128));
    FWD(FX_DENSE, INV, "out|k", a->out.data = a->k.data);
    FWD(FX_DENSE, INV, "out|sinks", a->sinks.data = a->out.data);
    FWD(FX_DENSE, INV, "lse|alibi_slopes", a->alibi_slopes.data = offset_bytes(a->lse.data, 8));
    FWD(FX_VARLEN, INV, "lse|cu_seqlens_q", a->cu_seqlens_q.data = a->lse.data);
    FWD(FX_DENSE_APPEND, INV, "k", a->k.stride[1] = 0);                /* the cache overlaps itself */
    FWD(FX_DENSE_APPEND, INV, "v", a->v.stride[0] = 64);
    FWD(FX_DENSE_APPEND, INV, "k|v", a->v.data = a->k.data);
    FWD(FX_DENSE_APPEND, INV, "k|k_new", a->k_new.data = a->k.data);
    FWD(FX_DENSE_APPEND, INV, "k|seqused_k", a->seqused_k.data = offset_bytes(a->k.data, 64));
    FWD(FX_PAGED_APPEND, INV, "v|v_new", a->v_new.data = offset_bytes(a->v.data, 2 * 64 * 2 * 8));
    FWD(FX_PAGED_APPEND, INV, "k|rotary_cos", a->rotary_cos.data = a->k.data);
    FWD(FX_PAGED_APPEND, INV, "k", a->k.stride[0] = 0);
    FWD(FX_PAGED_APPEND, INV, "k|v", a->v.data = offset_bytes(a->k.data, 128)); /* v's head 0 is k's head 1 */
    FWD(FX_PAGED_APPEND, INV, "out|k_new", a->out.data = a->k_new.data);
    /* Page slots (page table: sequence 0 {4, 1, 3}, sequence 1 {0, 5, 2}; 5 and 10 keys, 2 new each). */
    FWD_CONTENT(FX_PAGED_APPEND, INV, "page_table", set_i32(&a->page_table, 4, 4));  /* both append into page 4 */
    FWD_CONTENT(FX_PAGED_APPEND, INV, "page_table", set_i32(&a->page_table, 3, 4));  /* 1 reads where 0 appends */
    FWD_CONTENT(FX_PAGED_APPEND, INV, "page_table", set_i32(&a->page_table, 3, 5));  /* 1 appends over its own keys */
    FWD_CONTENT(FX_PAGED_APPEND, INV, "page_table", set_i32(&a->seqused_k, 0, 14); set_i32(&a->page_table, 1, 4));
    MERGE(INV, "out", m->out.stride[0] = 0);
    MERGE(INV, "lse", m->lse.stride[1] = 0);
    MERGE(INV, "out|out_partial", m->out.data = m->out_partial.data);
    MERGE(INV, "lse|lse_partial", m->lse.data = offset_bytes(m->lse_partial.data, 40));
    MERGE(INV, "out|lse", m->lse.data = m->out.data);
}

static void merge(void) {
    MERGE(INV, "out_partial", m->out_partial.data = NULL);
    MERGE(INV, "lse_partial", m->lse_partial.data = NULL);
    MERGE(INV, "out", m->out.data = NULL);
    MERGE(INV, "lse_partial", m->lse_partial.dtype = FC_BF16);
    MERGE(INV, "lse_partial", reshape(&m->lse_partial, 3, 2, 5, 2, 0));     /* n */
    MERGE(INV, "lse_partial", reshape(&m->lse_partial, 3, 3, 4, 2, 0));     /* rows */
    MERGE(INV, "lse_partial", reshape(&m->lse_partial, 3, 3, 5, 3, 0));     /* h */
    MERGE(INV, "lse_partial", reshape(&m->lse_partial, 2, 15, 2, 0, 0));
    MERGE(INV, "out", reshape(&m->out, 3, 4, 2, 64, 0));
    MERGE(INV, "out|out_partial", reshape(&m->out, 3, 5, 2, 128, 0));
    MERGE(INV, "out", reshape(&m->out, 4, 1, 5, 2, 64));
    MERGE(INV, "out", m->out.dtype = FC_INT32);
    MERGE(INV, "out_partial", m->out_partial.dtype = FC_INT32);
    MERGE(INV, "out_partial", reshape(&m->out_partial, 3, 15, 2, 64, 0));
    MERGE(INV, "lse", reshape(&m->lse, 2, 5, 3, 0, 0));
    MERGE(INV, "lse", m->lse.dtype = FC_FP16);
    MERGE(INV, "out_partial", m->out_partial.stride[3] = 2);
    MERGE(INV, "out", m->out.stride[2] = 2);
    MERGE(INV, "out_partial", m->out_partial.stride[0] = -640);
    MERGE(INV, "out", m->out.data = offset_bytes(m->out.data, 1));
    MERGE(INV, "out_partial", m->out_partial.stride[0] = (int64_t)1 << 62);
    MERGE(INV, "lse_partial", m->lse_partial.stride[1] = -2);
}

static void threads(void) {
    if (!case_begin("fc_set_num_threads")) return;
    int before = fc_get_num_threads();
    tu_check(before >= 1, "fc_get_num_threads() = %d", before);
    fc_status st = fc_set_num_threads(-1);
    tu_check(st == FC_ERR_INVALID_ARGUMENT, "fc_set_num_threads(-1): %s", fc_status_string(st));
    tu_check(names_match(fc_last_error(), "n|num_threads|threads"), "fc_set_num_threads(-1): message \"%s\"",
             fc_last_error());
    tu_check(fc_get_num_threads() == before, "fc_set_num_threads(-1) changed the count to %d", fc_get_num_threads());
    st = fc_set_num_threads(3);
    tu_check(st == FC_OK && fc_get_num_threads() == 3, "fc_set_num_threads(3): %s, now %d", fc_status_string(st),
             fc_get_num_threads());
    tu_check(strcmp(fc_last_error(), "") == 0, "after fc_set_num_threads(3): message \"%s\"", fc_last_error());
    st = fc_set_num_threads(0);
    tu_check(st == FC_OK && fc_get_num_threads() == before, "fc_set_num_threads(0): %s, now %d (default %d)",
             fc_status_string(st), fc_get_num_threads(), before);
    case_end();
}

static void *other_thread(void *arg) {
    int *ok = arg;
    ok[0] = strcmp(fc_last_error(), "") == 0;
    fc_set_num_threads(-7);
    ok[1] = names_match(fc_last_error(), "n|num_threads|threads");
    return NULL;
}

/* Messages are per thread. */
static void thread_messages(void) {
    if (!case_begin("per-thread messages")) return;
    fc_attn_args a;
    fc_attn_args_init(&a);
    fc_attn_fwd(&a, NULL, 0, NULL);
    char mine[512];
    snprintf(mine, sizeof mine, "%s", fc_last_error());
    int ok[2] = {0, 0};
    pthread_t t;
    pthread_create(&t, NULL, other_thread, ok);
    pthread_join(t, NULL);
    tu_check(ok[0], "a new thread's fc_last_error() is not empty");
    tu_check(ok[1], "the other thread's message does not name its argument");
    tu_check(mine[0] && strcmp(mine, fc_last_error()) == 0, "this thread's message changed: \"%s\" -> \"%s\"", mine,
             fc_last_error());
    case_end();
}

static void statuses_and_basics(void) {
    const char *seen[7];
    for (int st = 0; st <= FC_ERR_INTERNAL; st++) {
        const char *s = fc_status_string((fc_status)st);
        seen[st] = s;
        int distinct = s != NULL;
        for (int j = 0; j < st && distinct; j++) distinct = strcmp(seen[j], s) != 0;
        tu_check(s && *s && distinct, "fc_status_string(%d) = \"%s\" (empty or repeated)", st, s ? s : "(null)");
    }
    const char *u = fc_status_string((fc_status)42);
    tu_check(u && *u, "fc_status_string(42) is NULL or empty");
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FLASHC_VERSION_MAJOR, FLASHC_VERSION_MINOR, FLASHC_VERSION_PATCH);
    tu_check(strcmp(fc_version(), want) == 0, "fc_version() = \"%s\", header says %s", fc_version(), want);
    tu_check(fc_dtype_size(FC_BF16) == 2 && fc_dtype_size(FC_FP16) == 2 && fc_dtype_size(FC_FP32) == 4 &&
                 fc_dtype_size(FC_INT32) == 4 && fc_dtype_size((fc_dtype)9) == 0,
             "fc_dtype_size");
    fc_attn_args a;
    memset(&a, 0x5a, sizeof a);
    fc_attn_args_init(&a);
    tu_check(a.device == FC_DEVICE_CPU && a.window_left == -1 && a.window_right == -1 && a.num_splits == 0 &&
                 a.softmax_scale == 0 && a.softcap == 0 && !a.causal && !a.q.data && !a.k_new.data &&
                 !a.rotary_cos.data && !a.alibi_slopes.data && !a.sinks.data && !a.page_table.data &&
                 a.rotary_interleaved == 0,
             "fc_attn_args_init defaults");
}

int main(void) {
    int cuda = cuda_present();
    printf("test_validation: flashc %s%s\n", fc_version(), cuda ? " (CUDA device present)" : "");
    statuses_and_basics();
    valid_calls();
    describe_calls();
    plans();
    bigger_cache();
    kv_index();
    valid_edges();
    valid_views();
    null_args();
    missing_and_misaligned();
    ndim_and_shapes();
    strides();
    head_dims_and_dtypes();
    devices(cuda);
    varlen();
    paged();
    append();
    rotary();
    scores_and_options();
    sizes();
    overlaps();
    merge();
    threads();
    thread_messages();
    return tu_finish();
}
