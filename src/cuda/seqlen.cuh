// seqlen.cuh — sequence lengths and key locations as the kernels read them from device memory: cut to
// what the tensors hold, with every contradiction recorded in the device's error record (fc_check_errors).
//
// The host never reads cu_seqlens_q/k, seqused_k or page_table on CUDA, so whatever they hold, a kernel
// must stay inside its tensors: query rows [q_row0, q_row0 + s_q) inside q/out, a sequence's keys inside
// what its layout holds (minus the s_new rows an append adds), page indices inside [0, num_pages). A
// value outside is cut (or, for a page, replaced by page 0) and flagged where it is read; the computation
// goes on, so a graph replay never faults; at its end the kernel records the sequence's first error
// (report_sequence, cold), and fc_check_errors reports the device's first on the host.
#pragma once
#include "cuda.cuh"

// What the first error was (fc_dev_err.code), with the values a message needs.
enum {
    FC_DERR_NONE = 0,
    FC_DERR_CU_Q,       // cu_seqlens_q: [i] = value out of order or past limit rows (extra: [i - 1])
    FC_DERR_CU_K,       // cu_seqlens_k: likewise over k's rows
    FC_DERR_MAX_Q,      // max_seqlen_q = limit, sequence b has value queries
    FC_DERR_MAX_K,      // max_seqlen_k = limit, sequence b has value keys
    FC_DERR_SEQUSED,    // seqused_k[b] = value is negative
    FC_DERR_CAPACITY,   // sequence b: value cached + extra new keys > limit (layout: kv layout, i: page size)
    FC_DERR_PAGE,       // page_table[b][i] = value outside [0, limit)
    FC_DERR_ROTARY,     // sequence b needs rotary position value, the tables have limit
    FC_DERR_BATCH_IDX,  // kv_batch_idx[b] = value outside [0, limit)
    FC_DERR_LEFTPAD,    // kv_leftpad[b] = value outside [0, limit]
    FC_DERR_SEQUSED_Q,  // seqused_q[b] = value outside [0, limit]
};

// The device's error record (one per device, a __device__ variable of backend.cu; fc_problem.dev_err
// points at it). The first error to claim `code` fills the rest; later ones are dropped.
struct fc_dev_err {
    int code, b, i, layout;
    long long value, limit, extra;
};

static __device__ __noinline__ void fc_record_error(const fc_problem &p, int code, int b, int i, long long value,
                                                    long long limit, long long extra = 0) {
    fc_dev_err *e = (fc_dev_err *)p.dev_err;
    if (!e || atomicCAS(&e->code, FC_DERR_NONE, -1) != FC_DERR_NONE) return;
    e->b = b, e->i = i, e->layout = p.kv_layout;
    e->value = value, e->limit = limit, e->extra = extra;
    __threadfence();
    atomicExch(&e->code, code); // published last: a record with a code is complete
}

// What a kernel found wrong for its sequence: flag bits, set where the values are read (an OR, no call)
// and reported once where the kernel ends (report_sequence). A record call in the prologue, which every
// call runs, cost +0.4 us on b1 x 1k decode (measured); the flags cost nothing measurable.
enum { FC_BAD_LENGTHS = 1, FC_BAD_PAGE = 2 };

// Sequence b's rows [*lo, *lo + *len) of a cu_seqlens array over `total` rows: cu[b] and cu[b + 1] cut to
// [0, total] and in order, cu[0] read as 0 (so cut spans leave no row before the first sequence that no
// sequence writes: the split-KV merge reads every row's partials), the length cut to `max_len` (a kernel's
// grid covers max_len rows). RECORD: a
// bad entry is recorded as cu_code (i: its index, extra: the entry before it), a length past max_len of an
// otherwise good span as max_code; else any of them sets FC_BAD_LENGTHS in *bad.
template <bool RECORD>
__device__ __forceinline__ void checked_span(const fc_problem &p, const int32_t *cu, int b, int64_t total, int max_len,
                                             int cu_code, int max_code, int64_t *lo, int *len, int *bad) {
    int64_t a = cu[b], e = cu[b + 1];
    bool bad_a = b == 0 ? a != 0 : a < 0 || a > total, bad_e = e < a || e > total;
    int64_t ac = b == 0 ? 0 : min(max(a, (int64_t)0), total), ec = min(max(e, ac), total);
    bool too_long = !bad_a && !bad_e && ec - ac > max_len;
    if (!RECORD) *bad |= bad_a | bad_e | too_long ? FC_BAD_LENGTHS : 0;
    else if (bad_a) fc_record_error(p, cu_code, b, b, a, total, a);
    else if (bad_e) fc_record_error(p, cu_code, b, b + 1, e, total, a);
    else if (too_long) fc_record_error(p, max_code, b, 0, ec - ac, max_len);
    *lo = ac;
    *len = (int)min(ec - ac, (int64_t)max_len);
}

// Keys sequence b's layout holds (varlen: its cu_seqlens_k span, already cut).
__device__ __forceinline__ int kv_capacity_of(const fc_problem &p, int span) {
    return p.kv_layout == FC_KV_VARLEN ? span : p.s_k;
}

// fc_seqlen_of with every device-side length checked: q_row0 + s_q <= total_q, s_q <= max_seqlen_q (varlen),
// k_row0 + span <= total_k, s_cache >= 0 and s_cache + s_new <= the capacity (api.c has checked s_new <= it).
// RECORD: errors go to the record, else to *bad (FC_BAD_LENGTHS).
template <bool RECORD>
__device__ __forceinline__ fc_seqlen seqlen_walk(const fc_problem &p, int b, int *bad) {
    fc_seqlen s;
    s.q_row0 = 0, s.s_q = p.s_q, s.k_row0 = 0;
    if (p.cu_seqlens_q)
        checked_span<RECORD>(p, p.cu_seqlens_q, b, p.total_q, p.s_q, FC_DERR_CU_Q, FC_DERR_MAX_Q, &s.q_row0, &s.s_q, bad);
    if (p.seqused_q) { // the first seqused_q[b] of those rows
        int used = p.seqused_q[b];
        bool out = used < 0 || used > s.s_q;
        if (!RECORD) *bad |= out ? FC_BAD_LENGTHS : 0;
        else if (out) fc_record_error(p, FC_DERR_SEQUSED_Q, b, 0, used, s.s_q);
        s.s_q = min(max(used, 0), s.s_q);
    }
    int span = p.s_k;
    if (p.cu_seqlens_k)
        checked_span<RECORD>(p, p.cu_seqlens_k, b, p.total_k, p.s_k, FC_DERR_CU_K, FC_DERR_MAX_K, &s.k_row0, &span, bad);
    int s_new = p.k_new.data ? p.s_new : 0, room = kv_capacity_of(p, span) - s_new;
    s.s_cache = span;
    if (p.seqused_k) {
        int used = p.seqused_k[b];
        if (!RECORD) *bad |= used < 0 || used > room ? FC_BAD_LENGTHS : 0;
        else if (used < 0) fc_record_error(p, FC_DERR_SEQUSED, b, 0, used, 0);
        else if (used > room) fc_record_error(p, FC_DERR_CAPACITY, b, p.page_size, used, room + s_new, s_new);
        s.s_cache = min(max(used, 0), max(room, 0));
    }
    s.kv_b = b, s.pos0 = 0;
    if (p.kv_batch_idx) { // dense only (api.c): a row of the cache
        int row = p.kv_batch_idx[b];
        bool out = (unsigned)row >= (unsigned)p.k_batch;
        if (!RECORD) *bad |= out ? FC_BAD_LENGTHS : 0;
        else if (out) fc_record_error(p, FC_DERR_BATCH_IDX, b, 0, row, p.k_batch);
        s.kv_b = out ? 0 : row;
    }
    if (p.kv_leftpad) { // dense only: the keys start at row pad, within those counted from row 0
        int pad = p.kv_leftpad[b];
        bool out = pad < 0 || pad > s.s_cache;
        if (!RECORD) *bad |= out ? FC_BAD_LENGTHS : 0;
        else if (out) fc_record_error(p, FC_DERR_LEFTPAD, b, 0, pad, s.s_cache);
        pad = min(max(pad, 0), s.s_cache);
        s.k_row0 = pad, s.pos0 = pad, s.s_cache -= pad;
    }
    s.s_k = s.s_cache + s_new;
    return s;
}

// The lengths of sequence b of a call that has none of the per-sequence tensors (cu_seqlens, seqused, kv_batch_idx,
// kv_leftpad) and no append: s_q queries against the first s_k keys of cache row b, nothing to check (seqlen_walk
// gives the same). The wgmma walk's tiles take it where the host says so (wg_tma's solo): ~70 instructions a warp a
// tile fewer on the path from one tile to the next.
__device__ __forceinline__ fc_seqlen seqlen_dense(const fc_problem &p, int b) {
    fc_seqlen s;
    s.q_row0 = 0, s.s_q = p.s_q, s.k_row0 = 0, s.kv_b = b, s.pos0 = 0, s.s_cache = p.s_k, s.s_k = p.s_k;
    return s;
}

// The lengths of sequence b as the kernels use them: cut to the tensors, errors flagged in *bad.
__device__ __forceinline__ fc_seqlen seqlen_checked(const fc_problem &p, int b, int *bad) {
    return seqlen_walk<false>(p, b, bad);
}

// The outer index fc_kv_locate gave a key, checked: a page-table entry outside [0, num_pages) sets
// FC_BAD_PAGE and reads as page 0. The forward kernels look rows up blocks ahead and check them only where
// they are used: a check where the load is issued would wait for it (+0.7 us on short decodes, measured).
__device__ __forceinline__ int64_t page_checked(const fc_problem &p, int64_t outer, int *bad) {
    bool out = p.kv_layout == FC_KV_PAGED && (uint64_t)outer >= (uint64_t)p.num_pages;
    *bad |= out ? FC_BAD_PAGE : 0;
    return out ? 0 : outer;
}

// The first error of sequence b in the record, for a kernel that flagged `bad` (cold: errors only): its
// lengths again, recorded this time, then the first entry of its page table outside [0, num_pages).
static __device__ __noinline__ void report_sequence(const fc_problem &p, int b, int bad) {
    int none = 0;
    fc_seqlen s = seqlen_walk<true>(p, b, &none);
    if (!(bad & FC_BAD_PAGE)) return;
    int pages = (s.s_k + p.page_size - 1) / p.page_size; // <= max_pages: s_k is cut to the capacity
    for (int i = 0; i < pages; i++) {
        int e = p.page_table[b * p.page_table_sb + i];
        if ((unsigned)e >= (unsigned)p.num_pages) {
            fc_record_error(p, FC_DERR_PAGE, b, i, e, p.num_pages);
            return;
        }
    }
}

// Rotary table row of absolute position pos, cut to the table (positions outside are recorded).
__device__ __forceinline__ int rotary_pos_checked(const fc_problem &p, int b, int pos) {
    if ((unsigned)pos >= (unsigned)p.rotary_max_pos) {
        fc_record_error(p, FC_DERR_ROTARY, b, 0, pos, p.rotary_max_pos);
        pos = min(max(pos, 0), p.rotary_max_pos - 1);
    }
    return pos;
}

// Split-KV with varlen queries: the rows of sequence b past max_seqlen_q, which no tile covers once its
// length is cut, get empty partials (lse -inf, out 0), so the merge reads only values a kernel wrote (and
// gives them out = 0, lse = -inf). Called when b's lengths were flagged, by threads tid = 0 .. n - 1 of the
// one CTA that holds b's first tile of split 0 and KV head 0 (cold: errors only).
static __device__ __noinline__ void clear_cut_rows(const fc_problem &p, fc_split_ws ws, int b, int tid, int n) {
    if (!p.cu_seqlens_q || ws.splits <= 1) return;
    int64_t a = b == 0 ? 0 : min(max((int64_t)p.cu_seqlens_q[b], (int64_t)0), p.total_q);
    int64_t e = min(max((int64_t)p.cu_seqlens_q[b + 1], a), p.total_q), first = a + p.s_q;
    int64_t states = (e - first) * p.h_q * ws.splits; // (split, row, head) states of rows first .. e - 1
    for (int64_t i = tid; i < states; i += n) {
        int64_t split = i % ws.splits, gh = i / ws.splits;  // gh = (row - first) * h_q + head
        int64_t st = (split * p.total_q + first) * p.h_q + gh; // fc_split_ws's index of (split, row, head)
        ws.part_lse[st] = -INFINITY;
        for (int c = 0; c < p.d_v; c++) ws.part_out[st * p.d_v + c] = 0.0f;
    }
}
