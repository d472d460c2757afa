/* plan_run.c — fc_plan: an attention call validated and planned once, then run with new data pointers. */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

struct fc_plan {
    fc_attn_args args; /* as planned (its data pointers are only compared for presence) */
    int splits;        /* resolved by the backend at plan time */
    size_t workspace_bytes;
};

fc_status fc_plan_create(const fc_attn_args *args, fc_plan **plan) {
    if (!plan) return fc_fail(FC_ERR_INVALID_ARGUMENT, "plan", "is NULL");
    *plan = NULL;
    fc_problem p;
    fc_status st = fc_attn_problem(args, &p);
    if (st != FC_OK) return st;
    p.num_splits = p.device == FC_DEVICE_CUDA ? fc_cuda_splits(&p) : fc_cpu_splits(&p);
    size_t bytes = 0, least = 0; /* the workspace of the resolved splits, as fc_attn_workspace_size reports it */
    if (p.device == FC_DEVICE_CUDA && (st = fc_cuda_attn_workspace_size(&p, &bytes, &least)) != FC_OK) return st;
    fc_plan *n = malloc(sizeof *n);
    if (!n) return fc_fail(FC_ERR_OUT_OF_MEMORY, "plan", "cannot allocate %zu bytes", sizeof *n);
    n->args = *args;
    n->splits = p.num_splits;
    n->workspace_bytes = bytes;
    *plan = n;
    fc_clear_error();
    return FC_OK;
}

fc_status fc_plan_workspace_size(const fc_plan *plan, size_t *bytes) {
    if (!plan) return fc_fail(FC_ERR_INVALID_ARGUMENT, "plan", "is NULL");
    if (!bytes) return fc_fail(FC_ERR_INVALID_ARGUMENT, "bytes", "is NULL");
    *bytes = plan->workspace_bytes;
    fc_clear_error();
    return FC_OK;
}

/* Tensor t against the planned one: presence, dtype, shape and strides. */
static fc_status same_tensor(const fc_tensor *want, const fc_tensor *t, const char *name) {
    if (!want->data != !t->data)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "is %s, but the plan was made %s it", t->data ? "given" : "absent",
                       want->data ? "with" : "without");
    if (!t->data) return FC_OK;
    if (t->dtype != want->dtype)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "dtype %d differs from the plan's %d", (int)t->dtype, (int)want->dtype);
    if (t->ndim != want->ndim)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "ndim %d differs from the plan's %d", t->ndim, want->ndim);
    for (int i = 0; i < t->ndim && i < FC_MAX_DIMS; i++) {
        if (t->shape[i] != want->shape[i])
            return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "shape[%d] = %lld differs from the plan's %lld", i,
                           (long long)t->shape[i], (long long)want->shape[i]);
        if (t->stride[i] != want->stride[i])
            return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "stride[%d] = %lld differs from the plan's %lld", i,
                           (long long)t->stride[i], (long long)want->stride[i]);
    }
    return FC_OK;
}

#define SAME_INT(f)                                                                                                  \
    if (a->f != w->f) return fc_fail(FC_ERR_INVALID_ARGUMENT, #f, "= %d differs from the plan's %d", (int)a->f, (int)w->f)
#define SAME_FLOAT(f)                                                                                                \
    if (memcmp(&a->f, &w->f, sizeof a->f))                                                                           \
    return fc_fail(FC_ERR_INVALID_ARGUMENT, #f, "= %g differs from the plan's %g", (double)a->f, (double)w->f)

/* args against the planned ones: everything but the tensors' data pointers. */
static fc_status same_call(const fc_attn_args *w, const fc_attn_args *a) {
    SAME_INT(device);
    for (int i = 0; i < FC_ATTN_TENSORS; i++) {
        fc_status st = same_tensor(fc_attn_tensor(w, i), fc_attn_tensor(a, i), fc_attn_tensor_names[i]);
        if (st != FC_OK) return st;
    }
    SAME_INT(max_seqlen_q);
    SAME_INT(max_seqlen_k);
    SAME_INT(rotary_interleaved);
    SAME_FLOAT(softmax_scale);
    SAME_FLOAT(softcap);
    SAME_INT(causal);
    SAME_INT(window_left);
    SAME_INT(window_right);
    SAME_INT(num_splits);
    return FC_OK;
}

fc_status fc_plan_run(const fc_plan *plan, const fc_attn_args *args, void *workspace, size_t workspace_bytes,
                      void *stream) {
    if (!plan) return fc_fail(FC_ERR_INVALID_ARGUMENT, "plan", "is NULL");
    if (!args) return fc_fail(FC_ERR_INVALID_ARGUMENT, "args", "is NULL");
    fc_status st = same_call(&plan->args, args);
    if (st != FC_OK) return st;
    fc_problem p;
    if ((st = fc_attn_problem(args, &p)) != FC_OK) return st;
    p.num_splits = plan->splits;
    return fc_attn_run_problem(&p, workspace, workspace_bytes, stream);
}

void fc_plan_destroy(fc_plan *plan) { free(plan); }
