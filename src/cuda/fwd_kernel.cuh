// fwd_kernel.cuh — the decode kernel (and the block info, epilogue and row logic the wgmma prefill shares): cp.async tiles, mma.sync QK^T and PV, online softmax.
//
// One CTA computes one tile: BM packed query rows of (sequence b, KV head hk) against the keys of one
// split of the tile's visible key range. Packed row m stands for query row m / group of query head
// hk*group + m % group (pack-GQA: the query heads sharing a KV head share every K/V block).
// Warp w owns packed rows [16 MT w, 16 MT (w + 1)): MT m16 tiles, so each K/V fragment read from shared
// memory feeds MT MMAs; K/V blocks of BN keys stream through STAGES shared-memory
// buffers by cp.async: each thread copies 16-byte chunks into swizzled rows, the row addresses looked up
// once per row (the page-table read) into a small table. Decode gives a tile KW key warps,
// each with all rows and its own pipeline over a part of the keys (fwd_cfg, merge_key_warps).
// Prefill ran here too (4 row warps, MT = 2 up to d 128) until the wgmma kernel took every head dim
// (fwd_launch.cuh); fwd_cfg still takes those shapes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "cuda.cuh"
#include "mask.cuh"
#include "seqlen.cuh"
#include "softmax.cuh"
#include "tile/tile.cuh"
#include "trace.cuh"

// Prefill (NWARPS row warps): the warps split the tile's rows and share every K/V block. Decode
// (NWARPS = 1, KW key warps): each warp takes every row of the tile against its own part of the keys,
// through its own pipeline (stages, row table), and the warps merge their states at the end.
// KV_: the cache's element type, T_ or (decode) an fp8 byte: the stages then hold the rows as stored and the MMAs take
// K's and V's fragments straight from them, each fp8 pair converted to fp16 in registers (qk_block_fp8, pv_block_fp8).
// M, the MMAs' operand type: T, or fp16 for an fp8 cache (bf16 queries are converted to fp16 once per tile with a
// power-of-two scale, q_to_f16).
// LO8_: every tile has at most 8 packed rows (decode with s_q x group <= 8), so a thread's row slot 1 (rows 8-15 of
// the m16 tile) holds no row: its scores get no softmax, its P is zero and its O is neither rescaled, merged nor stored.
template <typename T_, int D_, int DV_, int NWARPS_, int BN_, int STAGES_, int MT_, int KW_ = 1, typename KV_ = T_,
          bool LO8_ = false>
struct fwd_cfg {
    typedef T_ T;
    typedef KV_ KV;
    static constexpr int D = D_, DV = DV_, NWARPS = NWARPS_, BN = BN_, STAGES = STAGES_, MT = MT_, KW = KW_;
    static constexpr int BM = 16 * MT * NWARPS, THREADS = 32 * NWARPS * KW;
    static constexpr int LOADERS = 32 * NWARPS;                               // threads sharing one pipeline
    static constexpr int ROWS = 2 * MT;                                       // accumulator rows per thread
    static constexpr bool LO8 = LO8_;
    static constexpr int HALVES = LO8 ? 1 : 2;                                // accumulator halves that hold rows
    static constexpr bool HEAD_MAJOR = NWARPS == 1;                          // decode: see fwd_tile_of
    static constexpr bool Q_REGS = NWARPS == 1 && MT == 1 && D <= 128;       // decode: Q fragments in registers
    static constexpr int DCH = D / 8, DVCH = DV / 8;                          // 16-byte chunks per row
    static constexpr int DPITCH = (DCH + 7) / 8 * 8, DVPITCH = (DVCH + 7) / 8 * 8; // swizzled pitch (chunks)
    static constexpr int Q_BYTES = BM * DPITCH * 16;
    static constexpr int K_BYTES = BN * DPITCH * 16, V_BYTES = BN * DVPITCH * 16; // the tiles the MMAs read
    static constexpr bool FP8 = sizeof(KV_) == 1;
    static constexpr bool O_FP8_ORDER = FP8;                                  // O in pv_block_fp8's feature order
    typedef typename std::conditional<FP8, __half, T_>::type M;               // the MMAs' operand type
    static constexpr int KB = sizeof(KV_);                                    // bytes per K/V element as stored
    static constexpr int DCH_KV = D * KB / 16, DVCH_KV = DV * KB / 16;       // 16-byte chunks per row as stored
    static constexpr int DPITCH_KV = (DCH_KV + 7) / 8 * 8, DVPITCH_KV = (DVCH_KV + 7) / 8 * 8;
    static constexpr int KS_BYTES = BN * DPITCH_KV * 16, VS_BYTES = BN * DVPITCH_KV * 16; // a block as stored
    static constexpr int STAGE_BYTES = KS_BYTES + VS_BYTES;
    static constexpr int ROWS_BYTES = 2 * BN * 8;                           // the row table (K and V)
    static constexpr int PIPE_BYTES = STAGES * STAGE_BYTES + ROWS_BYTES;     // one pipeline
    static constexpr int SMEM_BYTES = Q_BYTES + KW * PIPE_BYTES;
    static_assert(STAGES >= 2, "at least double buffering");
    static_assert(KW == 1 || NWARPS == 1, "key warps only in the one-row-warp (decode) config");
    static_assert(!LO8 || (MT == 1 && NWARPS == 1), "8-row tiles: decode's one m16 tile");
    static_assert(KB == sizeof(T_) || (KB == 1 && D % 16 == 0 && DV % 16 == 0), "fp8 rows: whole 16-byte chunks");
};

// Pipelines of a config: fwd_cfg's have LOADERS threads and there are KW of them; other configs
// (wg_cfg, whose consumers share slot_row and store_rows) number their threads as the CTA does.
template <class C, class = void> struct pipe_of {
    static constexpr int loaders = 1 << 30, kw = 1;
};
template <class C> struct pipe_of<C, decltype(void(C::LOADERS))> {
    static constexpr int loaders = C::LOADERS, kw = C::KW;
};
// This thread's index among the threads of its pipeline, and its row warp.
template <class C> __device__ __forceinline__ int pipe_tid() { return threadIdx.x % pipe_of<C>::loaders; }
template <class C> __device__ __forceinline__ int row_warp() { return threadIdx.x % pipe_of<C>::loaders / 32; }
// A barrier over the threads of one pipeline: the CTA, or (key warps) one warp.
template <class C> __device__ __forceinline__ void pipe_sync() {
    if constexpr (pipe_of<C>::kw > 1) __syncwarp();
    else __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// Block info: which tile this CTA is, which rows and key blocks it covers.

struct fwd_tile {
    int b, hk, split, m0;  // sequence, KV head, split index, first packed row
    int kpart;             // key warp (decode with KW > 1): this warp's part of the split's key blocks
    int group;             // query heads per KV head
    fc_seqlen s;
    int packed_rows;       // s.s_q * group
    int r_lo, r_hi;        // query rows [r_lo, r_hi) touched by the tile
    int n_lo, n_hi;        // key blocks [n_lo, n_hi) of this split (may be empty)
    int bad;               // FC_BAD_LENGTHS: the sequence's device-side lengths were cut (seqlen.cuh)
};

// Launch order. Query-tile major (prefill): grid (m tiles, splits, b * h_k), so CTAs reading the same
// K/V run together and share it in L2. Head major (decode): grid (h_k * splits * m tiles, b) with the KV
// head fastest, so the CTAs of all heads of a sequence read each page's rows (adjacent across heads)
// at about the same time.
// fwd_tile_coords: which tile and split this CTA (and key warp) is: b, hk, split, m0, kpart, group.
template <int BM, bool HEAD_MAJOR, int KW>
__device__ __forceinline__ void fwd_tile_coords(const fc_problem &p, int splits, fwd_tile &t) {
    if (HEAD_MAJOR) {
        int x = blockIdx.x;
        t.hk = x % p.h_k;
        x /= p.h_k;
        t.split = x % splits;
        t.m0 = x / splits * BM;
        t.b = blockIdx.y;
    } else {
        t.m0 = blockIdx.x * BM;
        t.split = blockIdx.y;
        t.hk = blockIdx.z % p.h_k;
        t.b = blockIdx.z / p.h_k;
    }
    t.group = p.h_q / p.h_k;
    t.kpart = KW > 1 ? threadIdx.x / 32 : 0;
}

// The rows and key blocks of tile t given its sequence's lengths t.s; false when the tile has no rows.
// The key range is cut into splits * KW parts: part split * KW + kpart is [n_lo, n_hi).
template <int BM, int BN, int KW>
__device__ __forceinline__ bool fwd_tile_range(const fc_problem &p, int splits, fwd_tile &t) {
    t.packed_rows = t.s.s_q * t.group;
    if (t.m0 >= t.packed_rows) return false;
    t.r_lo = t.m0 / t.group;
    int last = min(t.m0 + BM, t.packed_rows) - 1;
    t.r_hi = last / t.group + 1;
    int j0, j1;
    fc_key_range(&p, t.s.s_q, t.s.s_k, t.r_lo, t.r_hi, &j0, &j1);
    int nb_lo = j0 / BN, nb_hi = j1 > j0 ? (j1 + BN - 1) / BN : nb_lo;
    int per = (nb_hi - nb_lo + splits * KW - 1) / (splits * KW);
    t.n_lo = min(nb_hi, nb_lo + (t.split * KW + t.kpart) * per);
    t.n_hi = min(nb_hi, t.n_lo + per);
    return true;
}

// This CTA's tile (Block info as FlashAttention's): coordinates, its sequence's lengths, its key blocks.
template <int BM, int BN, bool HEAD_MAJOR, int KW = 1>
__device__ __forceinline__ bool fwd_tile_of(const fc_problem &p, int splits, fwd_tile &t) {
    fwd_tile_coords<BM, HEAD_MAJOR, KW>(p, splits, t);
    t.bad = 0;
    t.s = seqlen_checked(p, t.b, &t.bad);
    return fwd_tile_range<BM, BN, KW>(p, splits, t);
}

// fp8 inputs (an fp8 cache, or FP8 attention): the descales of tile t's (sequence, KV head). q's and k's fold
// into the scores' multiplier; v's is returned, store_rows' out_scale (P·V ran on the values as stored).
__device__ __forceinline__ float apply_descales(const fc_problem &p, const fwd_tile &t, score_consts &sc) {
    if (p.q_descale) sc.mul *= p.q_descale[t.b * p.q_descale_sb + t.hk * p.q_descale_sh];
    if (p.k_descale) sc.mul *= p.k_descale[t.b * p.k_descale_sb + t.hk * p.k_descale_sh];
    return p.v_descale ? p.v_descale[t.b * p.v_descale_sb + t.hk * p.v_descale_sh] : 1.0f;
}

// ---------------------------------------------------------------------------------------------
// Loads (global -> shared, cp.async, zero-filled outside the sequence).

// Head dims: a config's D and DV may exceed the problem's d and d_v (a pair d != d_v other than 192/128 runs
// on the d = d_v = max(d, d_v) kernel): chunks past d (Q, K) or d_v (V) are zero-filled without a read,
// so the extra products are zeros, and only d_v output columns are stored.

// Q tile: BM packed rows x D, gathered from (row, head) pairs.
template <class C>
__device__ __forceinline__ void load_q(const fc_problem &p, const fwd_tile &t, char *sq) {
    const typename C::T *q = (const typename C::T *)p.q.data;
    for (int i = threadIdx.x; i < C::BM * C::DCH; i += C::THREADS) {
        int m = i / C::DCH, c = i % C::DCH, pm = t.m0 + m;
        bool valid = pm < t.packed_rows && c < p.d / 8;
        const typename C::T *src = q;
        if (valid) {
            int r = pm / t.group, h = t.hk * t.group + pm % t.group;
            src = q + fc_q_row_offset(&p.q, &t.s, t.b, r) + h * p.q.sh + c * 8;
        }
        cp_async_16(sq + swz_offset(m, c, C::DPITCH), src, valid);
    }
}

// Where the rows of a key block live: thread i holds rows i, i + THREADS, ... (row < 0: past the
// sequence's end). Loaded one block before the table is written, so a page-table read is never waited
// for on the spot.
// A row's location in 32-bit fields (page-table entries, sequence indices and cu_seqlens rows all fit):
// a page-table read kept as int32 is not sign-extended to int64 where it is issued, which made the warp
// wait for it there (ncu: 32% of page size 1's stall samples), two blocks before it is needed.
struct kv_loc32 {
    int outer, row; // row < 0: past the sequence's end (outer: a page-table entry as read, checked when used)
};
template <class C>
struct row_locs {
    static constexpr int R = (C::BN + C::LOADERS - 1) / C::LOADERS;
    kv_loc32 loc[R];
};

template <class C>
__device__ __forceinline__ void locate_rows(const fc_problem &p, const fwd_tile &t, int it, int n_blocks, row_locs<C> &L) {
    int n = t.n_hi - 1 - it;
#pragma unroll
    for (int i = 0; i < row_locs<C>::R; i++) {
        int r = pipe_tid<C>() + i * C::LOADERS, j = n * C::BN + r;
        fc_kv_loc l = it < n_blocks && r < C::BN && j < t.s.s_k ? fc_kv_locate(&p, &t.s, t.b, j) : fc_kv_loc{0, -1};
        L.loc[i] = kv_loc32{(int)l.outer, (int)l.row};
    }
}

// Rows a loader thread copies a chunk column of (load_kv): with CH chunks a row dividing the LOADERS threads, thread i
// walks rows i / CH + STEP k, STEP = LOADERS / CH, and the row table keeps those rows side by side (row_slot), so
// that its reads are wide and come before the copies, not one beside each (ptxas puts three idle LDS between a
// shared load and each cp.async that follows it; PERF.md step 206). Other chunk counts: rows in order.
template <class C, int CH> struct kv_walk {
    static constexpr bool COLUMNS = C::LOADERS % CH == 0 && C::BN % (C::LOADERS / CH) == 0;
    static constexpr int STEP = COLUMNS ? C::LOADERS / CH : 1, N = C::BN / STEP; // N: rows a thread
    static_assert(!COLUMNS || 8 % STEP == 0 || STEP % 8 == 0, "load_kv's stage offsets repeat every 8 rows");
    static_assert(!COLUMNS || N % 8 == 0 || N < 8, "load_kv reads a thread's row addresses eight at a time");
};
template <class C, int CH> __device__ __forceinline__ int row_slot(int r) {
    typedef kv_walk<C, CH> W;
    return W::COLUMNS ? r % W::STEP * W::N + r / W::STEP : r;
}

// The row table of a block: the address of each of its rows in K and in V (the tensor's base past the sequence's
// end: load_kv copies only rows below the block's count), at row_slot; the page-table entries checked here, where
// they are used (bad: FC_BAD_PAGE).
template <class C>
__device__ __forceinline__ void write_row_table(const fc_problem &p, const fwd_tile &t, const row_locs<C> &L, int64_t *rows,
                                                int *bad) {
    const char *kb = (const char *)p.k.data, *vb = (const char *)p.v.data;
#pragma unroll
    for (int i = 0; i < row_locs<C>::R; i++) {
        int r = pipe_tid<C>() + i * C::LOADERS;
        if (r >= C::BN) break;
        fc_kv_loc l = {L.loc[i].outer, L.loc[i].row};
        bool valid = l.row >= 0;
        if (valid) l.outer = page_checked(p, l.outer, bad);
        const char *k = valid ? kb + (fc_kv_offset(&p.k, l) + t.hk * p.k.sh) * C::KB : kb;
        const char *v = valid ? vb + (fc_kv_offset(&p.v, l) + t.hk * p.v.sh) * C::KB : vb;
        rows[row_slot<C, C::DCH_KV>(r)] = (int64_t)(uintptr_t)k;
        rows[C::BN + row_slot<C, C::DVCH_KV>(r)] = (int64_t)(uintptr_t)v;
    }
}

// The fp8 K stage's swizzle (the rows as stored, read straight into K's fragments by qk_block_fp8): the XOR of rows
// 2m and 2m + 1 differs in bit 2, so a quarter warp reading chunk t (0-3) of both rows reads 8 distinct bank groups
// (swz_offset's row & 7 would put rows 2m and 2m + 1 on the same four).
__device__ __forceinline__ uint32_t swz_k8_offset(int row, int chunk, int chunks) {
    return (uint32_t)(row * chunks + (chunk ^ ((row & 1) << 2 | (row >> 1 & 3)))) * 16u;
}

// One block of BN rows x CH 16-byte chunks of K or V (the first `used` of them read) from the row table (row
// addresses, row_slot), the rows from `valid_rows` on zero-filled. kv_walk's COLUMNS: each thread keeps one chunk
// column (c = tid % CH) over its N rows; it reads their addresses eight at a time, then copies; the stage offsets
// repeat every 8 rows but for a row multiple of 8 (both swizzles take row & 7), so the 8 / STEP of a thread's first
// rows are computed once and the rest are constants. A table read, a 64-bit add, a compare and the copy per chunk.
template <class C, int CH, int PITCH, bool K8 = false>
__device__ __forceinline__ void load_kv(const int64_t *rows, char *dst, int used, int valid_rows) {
    typedef kv_walk<C, CH> W;
    auto offset = [](int r, int c) { return K8 ? swz_k8_offset(r, c, PITCH) : swz_offset(r, c, PITCH); };
    if constexpr (W::COLUMNS) {
        constexpr int P = W::STEP < 8 ? 8 / W::STEP : 1, B = W::N < 8 ? W::N : 8; // offsets' period; rows a batch
        int c = pipe_tid<C>() % CH, r0 = pipe_tid<C>() / CH, left = c < used ? valid_rows - r0 : 0;
        const int64_t *mine = rows + r0 * W::N;
        char *first[P];
#pragma unroll
        for (int q = 0; q < P; q++) first[q] = dst + offset(r0 + W::STEP * q, c);
#pragma unroll
        for (int k0 = 0; k0 < W::N; k0 += B) {
            int64_t at[B];
#pragma unroll
            for (int k = 0; k < B; k++) at[k] = mine[k0 + k];
#pragma unroll
            for (int k = 0; k < B; k++) {
                int j = k0 + k; // row r0 + STEP j
                cp_async_16(first[j % P] + (j / P) * 8 * PITCH * 16, (const char *)at[k] + c * 16, W::STEP * j < left);
            }
        }
    } else {
#pragma unroll 4
        for (int i = pipe_tid<C>(); i < C::BN * CH; i += C::LOADERS) {
            int row = i / CH, c = i % CH;
            bool valid = row < valid_rows && c < used;
            cp_async_16(dst + offset(row, c), (const char *)rows[row] + (valid ? c * 16 : 0), valid);
        }
    }
}

// Key block `it` into a stage: the row table (from locations L loaded two blocks earlier: with page size
// 1 every block needs a fresh page-table line from L2, whose latency under a full memory pipe exceeds
// one block's compute), a barrier (every thread reads all rows), the copies, and a commit (also when there is no block: empty groups keep the group count uniform). The caller's next
// barrier protects the table from the following block.
template <class C>
__device__ __forceinline__ void issue_block(const fc_problem &p, const fwd_tile &t, int it, int n_blocks, char *stage,
                                            int64_t *rows, row_locs<C> &L, row_locs<C> &L2, int *bad) {
    if (it < n_blocks) {
        write_row_table<C>(p, t, L, rows, bad);
        L = L2;
        locate_rows<C>(p, t, it + 2, n_blocks, L2); // page-table reads two blocks ahead, in flight meanwhile
        pipe_sync<C>();
        int valid_rows = t.s.s_k - (t.n_hi - 1 - it) * C::BN; // (rows past the sequence's end: zero-filled)
        load_kv<C, C::DCH_KV, C::DPITCH_KV, C::FP8>(rows, stage, p.d * C::KB / 16, valid_rows);
        load_kv<C, C::DVCH_KV, C::DVPITCH_KV>(rows + C::BN, stage + C::KS_BYTES, p.d_v * C::KB / 16, valid_rows);
    }
    cp_async_commit();
}

// L2 warm-up before pdl_wait (decode, launched early). The previous kernel may still be writing
// anything this kernel reads, so what is read here only steers prefetches: the lengths and page-table
// entries go through L2 (ld.global.cg: no stale copy stays in L1 for the real loads) and are clamped
// to the tensors' bounds, and the kernel reads everything again after the wait.
__device__ __forceinline__ fc_seqlen seqlen_peek(const fc_problem &p, int b) {
    fc_seqlen s;
    int q0 = p.cu_seqlens_q ? __ldcg(p.cu_seqlens_q + b) : 0;
    s.q_row0 = q0;
    s.s_q = p.cu_seqlens_q ? min(max(__ldcg(p.cu_seqlens_q + b + 1) - q0, 0), p.s_q) : p.s_q;
    if (p.seqused_q) s.s_q = min(max(__ldcg(p.seqused_q + b), 0), s.s_q);
    int pad = p.kv_leftpad ? min(max(__ldcg(p.kv_leftpad + b), 0), p.s_k) : 0;
    s.k_row0 = pad, s.pos0 = pad;
    s.kv_b = p.kv_batch_idx ? min(max(__ldcg(p.kv_batch_idx + b), 0), p.k_batch - 1) : b;
    s.s_cache = (p.seqused_k ? __ldcg(p.seqused_k + b) : p.s_k) - pad;
    s.s_k = (int)min(max((int64_t)s.s_cache + (p.k_new.data ? p.s_new : 0), (int64_t)0), (int64_t)(p.s_k - pad)); // 64-bit: any seqused_k
    return s;
}

// Prefetch into L2 the K and V rows of this warp's first PF blocks (the blocks its pipeline loads first);
// dense and paged caches (a varlen cache's rows have no bound known here).
template <class C, int PF>
__device__ void warm_first_blocks(const fc_problem &p, int splits) {
    if (p.kv_layout == FC_KV_VARLEN) return;
    fwd_tile t;
    fwd_tile_coords<C::BM, C::HEAD_MAJOR, C::KW>(p, splits, t);
    t.s = seqlen_peek(p, t.b);
    if (!fwd_tile_range<C::BM, C::BN, C::KW>(p, splits, t)) return;
    int kbytes = p.d * C::KB, vbytes = p.d_v * C::KB; // per row
    const char *kb = (const char *)p.k.data, *vb = (const char *)p.v.data;
    for (int it = 0; it < PF && it < t.n_hi - t.n_lo; it++)
        for (int r = pipe_tid<C>(); r < C::BN; r += C::LOADERS) {
            int j = (t.n_hi - 1 - it) * C::BN + r;
            if (j >= t.s.s_k) continue;
            fc_kv_loc l = {t.s.kv_b, t.s.k_row0 + j};
            if (p.kv_layout == FC_KV_PAGED) {
                int page = fc_fast_div(j, p.page_div_mul, p.page_div_shift); // < max_pages: j < s_k
                l.outer = min(max(__ldcg(p.page_table + t.b * p.page_table_sb + page), 0), p.num_pages - 1);
                l.row = j - page * p.page_size;
            }
            const char *k = kb + (fc_kv_offset(&p.k, l) + t.hk * p.k.sh) * C::KB;
            const char *v = vb + (fc_kv_offset(&p.v, l) + t.hk * p.v.sh) * C::KB;
            for (int c = 0; c < kbytes; c += 128) prefetch_l2(k + c);
            if (kbytes % 128) prefetch_l2(k + kbytes - 1);
            for (int c = 0; c < vbytes; c += 128) prefetch_l2(v + c);
            if (vbytes % 128) prefetch_l2(v + vbytes - 1);
        }
}

// ---------------------------------------------------------------------------------------------
// fp8 caches: fp16 fragments (C::M) from a landed block's rows as stored, converted in registers. Every e4m3 and e5m2
// value is exactly an fp16 value, so the MMAs see the cache's values unrounded; the dequantisation scales are applied
// to the scores and the output instead (k_descale in score_consts' mul, v_descale in store_rows).

// 4 fp8 values (bytes 0-3 of x) as two fp16 pairs: bytes 0, 1 into lo, bytes 2, 3 into hi (F2FP reads each half of
// x in place, as fp8x16_to_f16 does).
template <bool E5M2>
__device__ __forceinline__ void fp8x4_to_f16_pairs(uint32_t x, uint32_t &lo, uint32_t &hi) {
    if constexpr (E5M2)
        asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e5m2x2 %0, l;\n\tcvt.rn.f16x2.e5m2x2 %1, h;}"
            : "=r"(lo), "=r"(hi) : "r"(x));
    else
        asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;}"
            : "=r"(lo), "=r"(hi) : "r"(x));
}

// 16 fp8 values (one 16-byte chunk, element 0 in the low byte) as 16 fp16 values in two 16-byte chunks:
// one cvt.rn.f16x2 per pair, each word's two pairs split by mov.b32 in PTX, so that F2FP reads the high pair in place
// (its .H1 operand) where a C shift of the word cost a SHF a pair (PERF.md step 133).
template <bool E5M2>
__device__ __forceinline__ void fp8x16_to_f16(uint4 x, uint4 &lo, uint4 &hi) {
    const uint32_t in[4] = {x.x, x.y, x.z, x.w};
    uint32_t out[8];
#pragma unroll
    for (int i = 0; i < 4; i++) fp8x4_to_f16_pairs<E5M2>(in[i], out[2 * i], out[2 * i + 1]);
    lo = make_uint4(out[0], out[1], out[2], out[3]);
    hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// bf16 queries against an fp8 cache: the Q tile (in shared memory, after rotary) converted in place to
// fp16 times 2^a, a chosen so that the tile's largest |q| lands in [2^14, 2^15): exact for every element
// down to 2^-24 of that largest (bf16 has 8 significant bits, fp16 11), and far below the bf16 rounding of
// the scores below it. Returns 2^-a, the factor the scores take back (1 for fp16 queries: nothing to do).
// Every thread of the CTA calls it (two barriers).
template <class C>
__device__ float q_to_f16(char *sq) {
    if constexpr (std::is_same<typename C::T, typename C::M>::value) {
        return 1.0f;
    } else {
        __shared__ float warp_max[32];
        float mx = 0.0f;
        for (int i = threadIdx.x; i < C::BM * C::DCH; i += C::THREADS) {
            const __nv_bfloat162 *x = (const __nv_bfloat162 *)(sq + swz_offset(i / C::DCH, i % C::DCH, C::DPITCH));
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float2 f = __bfloat1622float2(x[e]);
                mx = fmaxf(mx, fmaxf(fabsf(f.x), fabsf(f.y))); // NaN ignored; inf kept
            }
        }
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = mx;
        __syncthreads();
        mx = 0.0f;
        for (int w = 0; w < C::THREADS / 32; w++) mx = fmaxf(mx, warp_max[w]);
        int e = 0;
        if (mx > 0.0f && mx <= 3.4e38f) frexpf(mx, &e); // mx < 2^e
        // 2^a, a = 15 - e in [-113, 64]: normal floats both ways (a tile whose largest |q| is under 2^-49
        // keeps some of it in fp16's subnormals; under 2^-88 it is zeros, as are its scores to fp32's eye)
        float up = ldexpf(1.0f, min(15 - e, 64));
        if (mx == 0.0f || !(mx <= 3.4e38f)) up = 1.0f; // all zero, or an infinity: as they are
        for (int i = threadIdx.x; i < C::BM * C::DCH; i += C::THREADS) {
            uint4 *x = (uint4 *)(sq + swz_offset(i / C::DCH, i % C::DCH, C::DPITCH));
            uint4 v = *x;
            uint32_t *w = &v.x;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 f = __bfloat1622float2(*(__nv_bfloat162 *)&w[k]);
                __half2 h = __floats2half2_rn(f.x * up, f.y * up);
                w[k] = *(uint32_t *)&h;
            }
            *x = v;
        }
        __syncthreads();
        return 1.0f / up;
    }
}

// Rotary on rows [m_lo, m_hi) of a Q tile in shared memory, by `threads` threads (this one is tid):
// packed row m sits at absolute position s_k - s_q + r; offset(m, chunk) is the tile's layout.
template <typename T, class Offset>
__device__ void rotate_q_rows(const fc_problem &p, const fwd_tile &t, char *sq, int m_lo, int m_hi, int tid,
                              int threads, Offset offset) {
    int half = p.rotary_dim / 2;
    for (int i = tid; i < (m_hi - m_lo) * half; i += threads) {
        int m = m_lo + i / half, k = i % half, pm = t.m0 + m;
        if (pm >= t.packed_rows) continue;
        int pos = rotary_pos_checked(p, t.b, t.s.pos0 + t.s.s_k - t.s.s_q + pm / t.group);
        int c0 = p.rotary_interleaved ? 2 * k : k, c1 = p.rotary_interleaved ? 2 * k + 1 : k + half;
        T *x0 = (T *)(sq + offset(m, c0 / 8)) + c0 % 8;
        T *x1 = (T *)(sq + offset(m, c1 / 8)) + c1 % 8;
        float cs = fc_load(p.rotary_cos, p.rotary_dtype, (int64_t)pos * p.rotary_sr + k);
        float sn = fc_load(p.rotary_sin, p.rotary_dtype, (int64_t)pos * p.rotary_sr + k);
        float a = (float)*x0, b = (float)*x1;
        *x0 = (T)(a * cs - b * sn);
        *x1 = (T)(a * sn + b * cs);
    }
}

// Rotary on the whole Q tile (swizzled rows of DPITCH chunks), by all threads.
template <class C>
__device__ void rotate_q(const fc_problem &p, const fwd_tile &t, char *sq) {
    auto offset = [](int m, int c) { return swz_offset(m, c, C::DPITCH); };
    rotate_q_rows<typename C::T>(p, t, sq, 0, C::BM, threadIdx.x, C::THREADS, offset);
}

// ---------------------------------------------------------------------------------------------
// Tensor-core steps of one warp. Accumulators: s[MT][BN/8][4] (scores), o[MT][DV/8][4] (output);
// thread row slot k (0 .. 2 MT) is m16 tile k / 2, accumulator half k % 2.

// The halves of an m16 accumulator tile that hold rows (row slot k is live when k % 2 < n): fwd_cfg's HALVES (1 under
// LO8), else (wg_cfg) both.
template <class C, class = void> struct live_halves {
    static constexpr int n = 2;
};
template <class C> struct live_halves<C, decltype(void(C::HALVES))> {
    static constexpr int n = C::HALVES;
};
// Whether this thread's row slot k holds a row: every slot, but slot 1 of each m16 tile under LO8.
template <class C> __device__ __forceinline__ constexpr bool slot_live(int k) { return k % 2 < live_halves<C>::n; }

// Tile row (0 .. BM) of this thread's row slot k.
template <class C>
__device__ __forceinline__ int slot_row(int k) {
    int lane = threadIdx.x % 32;
    return row_warp<C>() * 16 * C::MT + (k / 2) * 16 + lane / 4 + 8 * (k % 2);
}

// This warp's Q fragments (one m16 tile, all of d), loaded once when C::Q_REGS.
template <class C>
__device__ __forceinline__ void load_q_frags(const char *sq, uint32_t (*qf)[4]) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < C::D / 16; kk++)
        ldmatrix_x4(qf[kk], sq + swz_offset(row_warp<C>() * 16 + lane % 16, kk * 2 + lane / 16, C::DPITCH));
}

// The score accumulators of a block, zeroed before its Q K^T.
template <class C>
__device__ __forceinline__ void zero_scores(float (*s)[C::BN / 8][4]) {
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int f = 0; f < C::BN / 8; f++) s[mt][f][0] = s[mt][f][1] = s[mt][f][2] = s[mt][f][3] = 0.0f;
}

// s = Q(this warp's 16 MT rows) · K(block)^T; Q from registers (qf) when C::Q_REGS, else shared memory.
template <class C>
__device__ __forceinline__ void qk_block(const char *sq, const uint32_t (*qf)[4], const char *sk,
                                         float (*s)[C::BN / 8][4]) {
    int lane = threadIdx.x % 32, warp = row_warp<C>();
    zero_scores<C>(s);
#pragma unroll
    for (int kk = 0; kk < C::D / 16; kk++) {
        uint32_t a[C::MT][4];
#pragma unroll
        for (int mt = 0; mt < C::MT; mt++) {
            if constexpr (C::Q_REGS)
                for (int i = 0; i < 4; i++) a[mt][i] = qf[kk][i];
            else
                ldmatrix_x4(a[mt], sq + swz_offset((warp * C::MT + mt) * 16 + lane % 16, kk * 2 + lane / 16, C::DPITCH));
        }
#pragma unroll
        for (int f2 = 0; f2 < C::BN / 16; f2++) {
            uint32_t b[4];
            ldmatrix_x4(b, sk + swz_offset(f2 * 16 + lane % 8 + 8 * (lane / 16), kk * 2 + (lane / 8) % 2, C::DPITCH));
#pragma unroll
            for (int mt = 0; mt < C::MT; mt++) {
                mma_16x8x16<typename C::M>(s[mt][2 * f2], a[mt], b);
                mma_16x8x16<typename C::M>(s[mt][2 * f2 + 1], a[mt], b + 2);
            }
        }
    }
}

// fp8 caches: K's fragments straight from the stage (rows as stored), no fp16 copy of K. The product runs over the
// features in another order, the same for Q and K: k-step kk = 4 h + j of a thread (lane % 4 = t) holds features
// 64 h + 16 t + 4 j + {0, 1} (the MMA's k slots 2t, 2t + 1) and + {2, 3} (slots 2t + 8, 2t + 9). So a thread's K
// fragments of a key row and 4 k-steps are one 16-byte chunk (4 h + t) of the row, 8 cvt.f16x2 (fp8x16_to_f16), and
// its Q fragments of 4 k-steps are two 16-byte chunks of each of its two rows.
// A fragments of k-steps 4 h .. 4 h + 3 of m16 tile mt (Q in fp16, swizzled rows of DPITCH chunks) in that order.
template <class C>
__device__ __forceinline__ void q_frags_fp8(const char *sq, int mt, int h, uint32_t (*a)[4]) {
    int lane = threadIdx.x % 32, r = (row_warp<C>() * C::MT + mt) * 16 + lane / 4, t = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; half++) { // rows r, r + 8: a[.][0 / 2] and a[.][1 / 3]
        uint4 x = *(const uint4 *)(sq + swz_offset(r + 8 * half, 8 * h + 2 * t, C::DPITCH));     // k-steps 0, 1
        uint4 y = *(const uint4 *)(sq + swz_offset(r + 8 * half, 8 * h + 2 * t + 1, C::DPITCH)); // k-steps 2, 3
        a[0][half] = x.x, a[0][2 + half] = x.y, a[1][half] = x.z, a[1][2 + half] = x.w;
        a[2][half] = y.x, a[2][2 + half] = y.y, a[3][half] = y.z, a[3][2 + half] = y.w;
    }
}

// This warp's Q fragments in the fp8 order (one m16 tile, all of d), loaded once when C::Q_REGS.
template <class C>
__device__ __forceinline__ void load_q_frags_fp8(const char *sq, uint32_t (*qf)[4]) {
#pragma unroll
    for (int h = 0; h < C::D / 64; h++) q_frags_fp8<C>(sq, 0, h, qf + 4 * h);
}

// s = Q · K(block)^T, K from the fp8 stage (swz_k8_offset), Q from qf (C::Q_REGS) or shared memory, in the fp8 order.
template <class C, bool E5M2>
__device__ __forceinline__ void qk_block_fp8(const char *sq, const uint32_t (*qf)[4], const char *sk8,
                                             float (*s)[C::BN / 8][4]) {
    static_assert(C::D % 64 == 0, "fp8 K fragments: whole 64-feature groups");
    int lane = threadIdx.x % 32;
    zero_scores<C>(s);
#pragma unroll
    for (int h = 0; h < C::D / 64; h++) {
        uint32_t a[C::MT][4][4];
#pragma unroll
        for (int mt = 0; mt < C::MT; mt++) {
            if constexpr (C::Q_REGS)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++) a[mt][j][i] = qf[4 * h + j][i];
            else
                q_frags_fp8<C>(sq, mt, h, a[mt]);
        }
#pragma unroll
        for (int f = 0; f < C::BN / 8; f++) {
            uint4 lo, hi;
            fp8x16_to_f16<E5M2>(*(const uint4 *)(sk8 + swz_k8_offset(f * 8 + lane / 4, 4 * h + lane % 4, C::DPITCH_KV)),
                                lo, hi);
            const uint32_t b[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int mt = 0; mt < C::MT; mt++) mma_16x8x16<typename C::M>(s[mt][f], a[mt][j], b + 2 * j);
        }
    }
}

// P's A fragments of k-step kk (keys 16 kk .. 16 kk + 15) from the scores, rounded to T.
template <class C, typename T>
__device__ __forceinline__ void p_frags(float (*s)[C::BN / 8][4], int kk, uint32_t (*a)[4]) {
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++) {
        float(*x)[4] = s[mt] + 2 * kk;
        a[mt][0] = pack2<T>(x[0][0], x[0][1]);
        a[mt][1] = live_halves<C>::n > 1 ? pack2<T>(x[0][2], x[0][3]) : 0u; // rows 8-15: none under LO8
        a[mt][2] = pack2<T>(x[1][0], x[1][1]);
        a[mt][3] = live_halves<C>::n > 1 ? pack2<T>(x[1][2], x[1][3]) : 0u;
    }
}

// o += P(16 MT x BN, from s, rounded to M) · V(block).
template <class C>
__device__ __forceinline__ void pv_block(const char *sv, float (*s)[C::BN / 8][4], float (*o)[C::DV / 8][4]) {
    typedef typename C::M T; // the MMAs' type
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < C::BN / 16; kk++) {
        uint32_t a[C::MT][4];
        p_frags<C, T>(s, kk, a);
#pragma unroll
        for (int f2 = 0; f2 < C::DV / 16; f2++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, sv + swz_offset(kk * 16 + lane % 8 + 8 * ((lane / 8) % 2), f2 * 2 + lane / 16, C::DVPITCH));
#pragma unroll
            for (int mt = 0; mt < C::MT; mt++) {
                mma_16x8x16<T>(o[mt][2 * f2], a[mt], b);
                mma_16x8x16<T>(o[mt][2 * f2 + 1], a[mt], b + 2);
            }
        }
    }
}

// fp8 caches: o += P · V(block), V's fragments straight from the fp8 stage (rows as stored, swz_offset). ldmatrix.trans
// of b16 pairs gives a thread, per 8 keys and 16 features, keys 2t and 2t + 1 of features 2g and 2g + 1 (g = lane / 4,
// t = lane % 4); one byte permute pairs the keys of each feature, and one cvt.f16x2 each makes the B fragment of
// feature 2g (an n8 tile of the chunk's even features) and of 2g + 1 (its odd ones). So O's n8 tile 2q + e holds
// features 16 q + 2 n + e (n its column), which store_rows puts back in order (out_pairs).
template <class C, bool E5M2>
__device__ __forceinline__ void pv_block_fp8(const char *sv8, float (*s)[C::BN / 8][4], float (*o)[C::DV / 8][4]) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < C::BN / 16; kk++) {
        uint32_t a[C::MT][4];
        p_frags<C, __half>(s, kk, a);
#pragma unroll
        for (int c2 = 0; c2 < C::DV / 32; c2++) { // chunks 2 c2, 2 c2 + 1 (16 fp8 features each)
            uint32_t v[4]; // keys 0-7 / 8-15 of chunk 2 c2, then of chunk 2 c2 + 1
            ldmatrix_x4_trans(v, sv8 + swz_offset(kk * 16 + lane % 8 + 8 * ((lane / 8) % 2), 2 * c2 + lane / 16, C::DVPITCH_KV));
#pragma unroll
            for (int m = 0; m < 2; m++) {
                uint32_t k0 = __byte_perm(v[2 * m], 0, 0x3120), k8 = __byte_perm(v[2 * m + 1], 0, 0x3120);
                uint32_t even[2], odd[2]; // (keys 2t, 2t + 1; 2t + 8, 2t + 9) of features 2g, then 2g + 1
                fp8x4_to_f16_pairs<E5M2>(k0, even[0], odd[0]);
                fp8x4_to_f16_pairs<E5M2>(k8, even[1], odd[1]);
                int q = 2 * c2 + m;
#pragma unroll
                for (int mt = 0; mt < C::MT; mt++) {
                    mma_16x8x16<__half>(o[mt][2 * q], a[mt], even);
                    mma_16x8x16<__half>(o[mt][2 * q + 1], a[mt], odd);
                }
            }
        }
    }
}

// o *= rescale, per row slot of this thread.
template <class C>
__device__ __forceinline__ void rescale_rows(float (*o)[C::DV / 8][4], const float *rescale) {
#pragma unroll
    for (int k = 0; k < C::ROWS; k++) {
        if (!slot_live<C>(k)) continue;
#pragma unroll
        for (int f = 0; f < C::DV / 8; f++) {
            o[k / 2][f][2 * (k % 2)] *= rescale[k];
            o[k / 2][f][2 * (k % 2) + 1] *= rescale[k];
        }
    }
}

// Raw dot products -> log2-domain scores for this thread's rows, masked when MASK.
template <class C, bool MASK>
__device__ __forceinline__ void scores_block(const score_consts &c, const row_scores *rs, int n, float (*s)[C::BN / 8][4]) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int f = 0; f < C::BN / 8; f++)
#pragma unroll
            for (int e = 0; e < 2 * live_halves<C>::n; e++) {
                int j = n * C::BN + f * 8 + 2 * (lane % 4) + e % 2;
                s[mt][f][e] = score_of<MASK>(c, rs[2 * mt + e / 2], s[mt][f][e], j);
            }
}

// ---------------------------------------------------------------------------------------------
// Epilogue: normalised output (and lse) to out, or fp32 partials to the split workspace.

// The lse of query row r, head h of tile t's sequence, where p.lse asks for it (rows are global for varlen).
__device__ __forceinline__ void store_lse(const fc_problem &p, const fwd_tile &t, int r, int h, float lse) {
    p.lse[(int64_t)t.b * p.lse_sb + (int64_t)h * p.lse_sh + (t.s.q_row0 + r) * p.lse_sr] = lse;
}

// Configs whose O tiles hold pv_block_fp8's feature order: fwd_cfg's of an fp8 cache (O_FP8_ORDER), not wg_cfg's
// (FP8 attention's wgmma P·V keeps the natural order).
template <class C, class = void> struct o_fp8_order {
    static constexpr bool value = false;
};
template <class C> struct o_fp8_order<C, decltype(void(C::O_FP8_ORDER))> {
    static constexpr bool value = C::O_FP8_ORDER;
};

// put(c, x, y) for each pair of output features c, c + 1 that this thread holds in row slot k, up to d_v (fp8 caches:
// pv_block_fp8's tiles 2q, 2q + 1 hold features 16 q + 4 t + {0, 2} and {1, 3}, put back in order here).
template <class C, class Put>
__device__ __forceinline__ void out_pairs(float (*o)[C::DV / 8][4], int k, int d_v, Put put) {
    int t = threadIdx.x % 4, mt = k / 2, half = k % 2;
    if constexpr (o_fp8_order<C>::value) {
#pragma unroll
        for (int q = 0; q < C::DV / 16; q++)
            if (q * 16 < d_v) {
                const float *e = o[mt][2 * q] + 2 * half, *d = o[mt][2 * q + 1] + 2 * half;
                put(q * 16 + 4 * t, e[0], d[0]);
                put(q * 16 + 4 * t + 2, e[1], d[1]);
            }
    } else {
#pragma unroll
        for (int f = 0; f < C::DV / 8; f++)
            if (f * 8 < d_v) put(f * 8 + 2 * t, o[mt][f][2 * half], o[mt][f][2 * half + 1]);
    }
}

// out_scale: v_descale of an fp8 cache (P·V ran on the values as stored), else 1.
template <class C>
__device__ void store_rows(const fc_problem &p, const fwd_tile &t, fc_split_ws ws, float (*o)[C::DV / 8][4],
                           const row_softmax *st, float out_scale = 1.0f) {
    typedef typename C::T T;
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < C::ROWS; k++) {
        if (!slot_live<C>(k)) continue;
        float sum;
        float lse = softmax_finish(st[k], &sum);
        int pm = t.m0 + slot_row<C>(k);
        if (pm >= t.packed_rows) continue;
        int r = pm / t.group, h = t.hk * t.group + pm % t.group;
        float inv = sum > 0.0f ? out_scale / sum : 0.0f;
        int64_t g = fc_global_row(&p, &t.s, t.b, r);
        if (ws.splits > 1) {
            float *dst = ws.part_out + (((int64_t)t.split * p.total_q + g) * p.h_q + h) * p.d_v;
            out_pairs<C>(o, k, p.d_v, [&](int c, float x, float y) { *(float2 *)(dst + c) = make_float2(x * inv, y * inv); });
            if (lane % 4 == 0) ws.part_lse[((int64_t)t.split * p.total_q + g) * p.h_q + h] = lse;
        } else {
            T *dst = (T *)p.out.data + fc_q_row_offset(&p.out, &t.s, t.b, r) + h * p.out.sh;
            out_pairs<C>(o, k, p.d_v, [&](int c, float x, float y) { *(uint32_t *)(dst + c) = pack2<T>(x * inv, y * inv); });
            if (p.lse && lane % 4 == 0) store_lse(p, t, r, h, lse);
        }
    }
}

// Key warps (KW > 1) fold their states into warp 0 through shared memory (each warp's scratch is its
// own pipeline's area, idle now; lane-strided, so conflict-free): per row, m = max(m_0, m_w) and
// o = o_0 2^(m_0 - m) + o_w 2^(m_w - m), l likewise (l stays this thread's share of the quad's sum).
template <class C>
__device__ void merge_key_warps(float (*o)[C::DV / 8][4], row_softmax *st, char *pipes) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    constexpr int NO = C::MT * (C::DV / 8) * 4;
    __syncwarp(); // every lane's reads of the stages are done before any lane writes over them
    if (w > 0) {
        float *x = (float *)(pipes + w * C::PIPE_BYTES) + lane;
#pragma unroll
        for (int k = 0; k < C::ROWS; k++)
            if (slot_live<C>(k)) x[32 * (2 * k)] = st[k].m, x[32 * (2 * k + 1)] = st[k].l;
#pragma unroll
        for (int i = 0; i < NO; i++)
            if (i % 4 / 2 < live_halves<C>::n) x[32 * (2 * C::ROWS + i)] = (&o[0][0][0])[i]; // (element i: half i % 4 / 2)
    }
    __syncthreads();
    if (w > 0) return;
    for (int v = 1; v < C::KW; v++) {
        const float *x = (const float *)(pipes + v * C::PIPE_BYTES) + lane;
        float fa[C::ROWS], fb[C::ROWS];
#pragma unroll
        for (int k = 0; k < C::ROWS; k++) {
            if (!slot_live<C>(k)) continue;
            float mw = x[32 * (2 * k)], m = fmaxf(st[k].m, mw);
            bool none = m == -INFINITY; // neither warp saw a key of this row
            fa[k] = none ? 1.0f : fast_exp2(st[k].m - m);
            fb[k] = none ? 0.0f : fast_exp2(mw - m);
            st[k].l = st[k].l * fa[k] + x[32 * (2 * k + 1)] * fb[k];
            st[k].m = m;
        }
#pragma unroll
        for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
            for (int f = 0; f < C::DV / 8; f++)
#pragma unroll
                for (int e = 0; e < 2 * live_halves<C>::n; e++) {
                    int k = 2 * mt + e / 2, i = (mt * (C::DV / 8) + f) * 4 + e;
                    o[mt][f][e] = o[mt][f][e] * fa[k] + x[32 * (2 * C::ROWS + i)] * fb[k];
                }
    }
}

// ---------------------------------------------------------------------------------------------
// The kernel. Grid: (packed-row tiles, splits, batch * h_k); decode (HEAD_MAJOR): (h_k * splits * tiles,
// batch). Block: 32 * NWARPS * KW threads.

template <class C>
__global__ void __launch_bounds__(C::THREADS) fwd_kernel(const __grid_constant__ fc_problem p, fc_split_ws ws) {
    extern __shared__ __align__(128) char smem[];
    char *sq = smem, *stages = smem + C::Q_BYTES + (C::KW > 1 ? threadIdx.x / 32 : 0) * C::PIPE_BYTES;
    int64_t *rows = (int64_t *)(stages + C::STAGES * C::STAGE_BYTES);
    FC_STAMP(0);
    if constexpr (C::HEAD_MAJOR) warm_first_blocks<C, C::STAGES - 1>(p, ws.splits);
    pdl_wait();              // launched early (PDL): the previous kernel's writes are visible past here
    pdl_launch_dependents(); // the merge of the partials may start launching
    fwd_tile t;
    if (!fwd_tile_of<C::BM, C::BN, C::HEAD_MAJOR, C::KW>(p, ws.splits, t)) { // the same for every warp
        if (t.bad && threadIdx.x == 0) report_sequence(p, t.b, t.bad); // (cut lengths may leave no rows)
        return;
    }
    score_consts sc = score_consts_of(p, t.s.s_q, t.s.s_k);
    float out_scale = 1.0f;
    if constexpr (C::FP8) out_scale = apply_descales(p, t, sc); // an fp8 cache (q_descale: none)

    // This thread's rows: query row, ALiBi slope, sink.
    row_scores rs[C::ROWS];
    row_softmax st[C::ROWS];
#pragma unroll
    for (int k = 0; k < C::ROWS; k++) {
        int pm = min(t.m0 + slot_row<C>(k), t.packed_rows - 1);
        int h = t.hk * t.group + pm % t.group;
        rs[k].r = pm / t.group;
        rs[k].slope = p.alibi ? p.alibi[t.b * p.alibi_sb + h * p.alibi_sh] * FC_LOG2E : 0.0f;
        bool sink = p.sinks && t.split == 0 && t.kpart == 0;
        st[k] = softmax_init(sink, sink ? p.sinks[h * p.sinks_sh] * FC_LOG2E : 0.0f);
    }

    float o[C::MT][C::DV / 8][4];
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int f = 0; f < C::DV / 8; f++) o[mt][f][0] = o[mt][f][1] = o[mt][f][2] = o[mt][f][3] = 0.0f;

    // Prologue: Q, then the first STAGES - 1 blocks. Blocks go from the last to the first: the
    // partially masked ones (causal diagonal) come first.
    int n_blocks = t.n_hi - t.n_lo;
    load_q<C>(p, t, sq); // in the first block's commit group
    row_locs<C> locs, locs2; // the row locations of the next two blocks to issue
    int bad = 0;             // FC_BAD_PAGE: a page-table entry of this thread's rows was outside the cache
    locate_rows<C>(p, t, 0, n_blocks, locs);
    locate_rows<C>(p, t, 1, n_blocks, locs2);
#pragma unroll
    for (int i = 0; i < C::STAGES - 1; i++) {
        issue_block<C>(p, t, i, n_blocks, stages + i * C::STAGE_BYTES, rows, locs, locs2, &bad);
        pipe_sync<C>(); // the row table is rewritten by the next block
    }
    if (p.rotary_cos) {
        cp_async_wait<0>();
        __syncthreads();
        rotate_q<C>(p, t, sq);
    }
    cp_async_wait<C::STAGES - 2>(); // Q landed with the first block's group (every thread's part of it) ...
    __syncthreads();                 // ... and is read by every warp: the one CTA-wide barrier of the loop
    if constexpr (C::FP8) sc.mul *= q_to_f16<C>(sq); // bf16 queries: fp16 Q, its scale back in the scores

    // Scores need score_of only on masked blocks or with softcap / ALiBi; otherwise the raw dot products
    // go to the softmax, the scale folded into its exp2 FFMA.
    bool plain = plain_scores<C::FP8>(p, sc);
    uint32_t qf[C::Q_REGS ? C::D / 16 : 1][4];
    if constexpr (C::Q_REGS) {
        if constexpr (C::FP8)
            load_q_frags_fp8<C>(sq, qf);
        else
            load_q_frags<C>(sq, qf);
    }

    for (int it = 0; it < n_blocks; it++) {
        int n = t.n_hi - 1 - it;
        cp_async_wait<C::STAGES - 2>(); // block it has landed (this thread's copies) ...
        pipe_sync<C>();                  // ... and every thread's; the stage read at it - 1 is free
        if (it == 0) FC_STAMP(1);
        if (it == n_blocks - 1) FC_STAMP(2);
        int ahead = it + C::STAGES - 1;
        issue_block<C>(p, t, ahead, n_blocks, stages + (ahead % C::STAGES) * C::STAGE_BYTES, rows, locs, locs2, &bad);
        const char *stage = stages + (it % C::STAGES) * C::STAGE_BYTES, *sk = stage, *sv = stage + C::KS_BYTES;
        float s[C::MT][C::BN / 8][4];
        if constexpr (C::FP8) { // K's fragments from the stage as stored
            if (p.kv_dtype == FC_E5M2)
                qk_block_fp8<C, true>(sq, qf, sk, s);
            else
                qk_block_fp8<C, false>(sq, qf, sk, s);
        } else {
            qk_block<C>(sq, qf, sk, s);
        }
        float mul = 1.0f;
        if (block_needs_mask(sc, t.r_lo, t.r_hi, n * C::BN, C::BN))
            scores_block<C, true>(sc, rs, n, s);
        else if (!plain)
            scores_block<C, false>(sc, rs, n, s);
        else
            mul = sc.mul;
        float rescale[C::ROWS];
        bool moved = false;
#pragma unroll
        for (int k = 0; k < C::ROWS; k++) {
            if (!slot_live<C>(k)) continue;
            rescale[k] = softmax_update<C::BN / 8>(st[k], s[k / 2], k % 2, mul);
            moved |= rescale[k] != 1.0f;
        }
        if (__any_sync(0xffffffffu, moved)) // no row max of the warp moved: the output keeps its scale (FA4)
            rescale_rows<C>(o, rescale);
        if constexpr (C::FP8) { // V's fragments from the stage as stored
            if (p.kv_dtype == FC_E5M2)
                pv_block_fp8<C, true>(sv, s, o);
            else
                pv_block_fp8<C, false>(sv, s, o);
        } else {
            pv_block<C>(sv, s, o);
        }
    }
    cp_async_wait<0>(); // an empty split still issued the Q load
    if ((t.bad && threadIdx.x == 0) || bad) report_sequence(p, t.b, t.bad | bad);
    if (t.bad && t.m0 == 0 && t.split == 0 && t.hk == 0) clear_cut_rows(p, ws, t.b, threadIdx.x, C::THREADS);
    if constexpr (C::KW > 1) {
        merge_key_warps<C>(o, st, smem + C::Q_BYTES);
        if (t.kpart > 0) return;
    }
    store_rows<C>(p, t, ws, o, st, out_scale);
    FC_STAMP(3);
}
