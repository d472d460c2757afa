// fwd_wgmma.cuh — the Hopper prefill kernel: wgmma QK^T and PV, a TMA / cp.async producer warpgroup, mbarrier ring.
//
// Same tiles, splits, row tables, masks and epilogue as fwd_kernel (fwd_kernel.cuh): one CTA computes BM =
// 64 CONSUMERS packed query rows of (sequence b, KV head hk) against the key blocks of one split.
// Warpgroups 0 .. CONSUMERS - 1 compute; warpgroup g owns tile rows [64 g, 64 g + 64), its warp w rows
// [16 w, 16 w + 16) (fwd_kernel's MT = 1 layout, so its softmax and epilogue apply):
//   S(64 x BN) = Q K^T       wgmma, B = K from shared memory (K-major), A = Q from there too, or from registers
//                            (the plain kernels of Q_REGS shapes: wg_load_qa)
//   online softmax on S      registers; P rounded to T is wgmma's A-register fragment
//   O(64 x DV) += P V        wgmma, A = P from registers, B = V from shared memory (MN-major)
// with block i's S issued before block i - 1's PV, so one GEMM runs while the softmax waits on the other.
// The last warpgroup produces: a dense cache's whole key blocks come by TMA (one thread, 64 features per
// copy, wg_tma); other blocks (paged, varlen, a sequence's partial last block) it looks up row by row
// (page tables) into a row table and copies by cp.async. Either way into rings of STAGES buffers,
// signalled on mbarriers (k_full, v_full); consumers
// hand K back as soon as S is computed and V after PV (k_empty, v_empty), so block i + 1's K is loading
// while block i's softmax runs. Q tiles come by TMA too where the GQA group divides the tile (wg_tma_q),
// else by cp.async (wg_load_q). The epilogue normalises O and, for dense queries in one split, stores it by TMA
// through the tile's Q buffer, or where Q has one buffer through the tile's last K/V stage, so the next tile's Q
// loads meanwhile (O_STAGE; wg_store_tma); otherwise from registers (fwd_kernel's store_rows).
// Shared tiles use wgmma's 128-byte swizzle (tile/wgmma.cuh).
// FP8 attention (wg_cfg's E = e4m3): the same kernel on 8-bit tiles; the 8-bit wgmma takes V K-major only, so V
// lands in a buffer of its own and the producer transposes it into the stage (wg_finish_v, tile/fp8.cuh).
#pragma once
#include "fwd_kernel.cuh"
#include "tile/pdl.cuh"

// The tile shape per head dims: key block BN and Q buffers (a ring over the CTA's tiles; two let the next
// tile's Q load while the previous tile runs, where shared memory has room). d 96: d 128's tiles, of which
// it computes 96 features (DS, DVS: what is stored; PERF.md step 63). d 256: O alone is 128 registers a
// thread and a 128-key block of K and V 128 KB, so 80-key blocks (PERF.md step 77), and a second config
// (V = 1: the host's wg_second_config) of 64-key blocks for paged K/V, whose pages TMA can read only in blocks
// that a page divides or is a multiple of, and for short sequences (512 keys: 8 whole blocks, not 6.4);
// d 192 / d_v 128 and d 256 have room for one Q buffer only. d 64 has a second config too (V = 1): two
// consumer warpgroups, for masked calls of up to 1k keys; and d 192: 64-key blocks (from 112) for paged K/V of
// 64-key multiples, which 112-key blocks read by cp.async, and for masked calls of up to 512 keys; and d 128:
// FlashAttention-3's 176-key blocks for long non-causal dense calls with ALiBi, sinks, softcap or rotary (PERF.md
// steps 181, 201).
// LAZY: FlashAttention-4's lazy rescale (softmax_update): measured +4-5% at d 128 and 256 (2k-16k), -2% at
// d 64, where the block's few FMULs of O cost less than the vote that skips them (docs/PERF.md step 49).
// O_TMA: the epilogue by TMA store through Q's buffer where the host allows it (wg_store_tma): +5-9% at 512
// tokens for d 64, 128, 256, d 192 +1.5-11% from 512 to 8k (PERF.md steps 58, 82); d 192 / 128 too since its
// one Q buffer no longer waits for the store (O_STAGE: non-causal 512-2k +3-7%, step 104; before, causal 1k -11%
// in step 58, -3.6..+5.6% in step 82; for masked calls only in steps 87 and 91); the kernel is the same either
// way (the host's map decides, wg_tma_of).
// FP8 (Q, K and V in e4m3; issue 13): d <= 128 runs on the d 128 kernel (BN 128), d 256 on BN 64 (O is 128
// registers, S 32); Q in half the bytes, so two buffers at d 256 too; the lazy rescale (P up to 2^8 before it
// is rounded to e4m3, whose relative precision is the same there: flashc.h); no O by TMA store (O in T is
// twice Q's buffer).
// CONSUMERS: consumer warpgroups (64 rows each), with the registers of the producer warpgroup and of
// each consumer thread (128 PRODUCER_REGS + 128 CONSUMERS CONSUMER_REGS <= 64 K). d 64: three, as
// FlashAttention-3 runs it (192-row tiles): its block loop is short, and two warps a scheduler left the
// issue slots half idle (ncu, PERF.md step 66); 160 registers hold its S (64), O (32) and P (32).
// SERIAL (d 64's two-warpgroup shape): each block's S, softmax and PV one after another in a warpgroup, the warpgroups
// taking turns at the exponentials instead of at the GEMMs (cuDNN's order: wg_serial_block; d 64 causal 512 / 1k
// +4 / +7%, PERF.md step 152, and +4.3 / +2.9% more in one block loop, step 157; at d 128, whose GEMMs are as long as
// its softmax, -4..-11%: step 153). d 64's third shape (V = 2, masked calls of 1k-2k keys) runs three warpgroups
// serially: at 2k the third warpgroup's turn keeps the SFU busier than the overlapped three (+1.8%, step 173).
// STAGES: the K/V ring's depth, 2 unless a shape says; d 64's three warpgroups take 3 (their 32 KB stages leave
// the room: +5% non-causal 512-4k, their block is short against a K/V load's latency; PERF.md step 102).
template <int D, int DV, bool FP8 = false, int V = 0> struct wg_shape {
    static constexpr int BN = 128, QBUF = 2;      // d 128: 32 + 2 x 64 KB
    static constexpr bool LAZY = D >= 128, O_TMA = true, Q_REGS = true; // (Q_REGS: PERF.md step 196)
    static constexpr bool O_LATE = true;          // (causal 512 / 1k +1.0 / +2.0%, step 203)
    static constexpr int PLAIN_KEYS = 1 << 30;    // d 128: every length (2k-16k +1..+10%: steps 198, 201)
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216; // the producer spills at 56
};
// d 128's long non-causal dense calls that the plain kernel does not take (ALiBi, sinks, softcap, rotary; on plain ones
// the 128-key plain kernel leads, 8k / 16k +9.7 / +2.6%, PERF.md step 201): FlashAttention-3's 128 x 176 (a third
// fewer softmax rounds a key than 128), one Q buffer (two do not fit beside 88 KB stages), and FlashAttention-3's
// register split: the consumers hold S (88), P (44) and O (64) at 240, the producer at 24 runs only the one-thread TMA
// walk (wg_produce_solo) at speed
template <> struct wg_shape<128, 128, false, 1> {
    static constexpr int BN = 176, QBUF = 1;      // 32 KB Q + 2 x (44 + 44) KB K/V
    static constexpr bool LAZY = true, O_TMA = true;
    static constexpr int PLAIN_KEYS = 0;          // (it runs no plain calls)
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 24, CONSUMER_REGS = 240;
};
template <> struct wg_shape<64, 64> {
    static constexpr int BN = 128, QBUF = 2, STAGES = 3; // 2 x 24 KB Q + 3 x (16 + 16) KB K/V (3 stages: +5%, step 102)
    static constexpr bool LAZY = true, O_TMA = true, LATE_FINISH = true; // (LAZY: +1.4%, step 94)
    static constexpr int PLAIN_KEYS = 0;          // (past 2k keys only: wg_plain)
    static constexpr int CONSUMERS = 3, PRODUCER_REGS = 32, CONSUMER_REGS = 160;
};
template <> struct wg_shape<64, 64, false, 1> { // masked, up to 1k keys: partial 192-row tiles lose (step 78)
    static constexpr int BN = 128, QBUF = 2;      // 2 x 16 KB Q + 2 x (16 + 16) KB K/V (3 stages: no gain, step 102)
    static constexpr bool LAZY = false, O_TMA = true, LATE_FINISH = true; // (LAZY: causal 1k -2.9%, step 94)
    static constexpr bool SERIAL = true;          // (wg_serial_block; PERF.md step 152)
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};
// masked, 1k-2k keys: the three warpgroups' shape in the serial order (causal 2k +1.8%, 4k -0.1%, 512 / 1k -10 / -12%:
// PERF.md steps 172, 173)
template <> struct wg_shape<64, 64, false, 2> : wg_shape<64, 64> {
    static constexpr bool LAZY = false, SERIAL = true;
    static constexpr int PLAIN_KEYS = 1024;
};
template <> struct wg_shape<128, 128, true> {  // 192-key blocks: a third fewer softmax rounds a key than 128
    static constexpr int BN = 192, QBUF = 2;      // 2 x 16 KB Q + 2 x (24 + 32) KB K/Vt + 2 x 24 KB V landing
    static constexpr bool LAZY = true, O_TMA = false;
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};
template <> struct wg_shape<128, 128, true, 1> { // 128-key blocks: short calls, paged (wg_fp8_second_config)
    static constexpr int BN = 128, QBUF = 2;      // 2 x 16 KB Q + 2 x (16 + 16) KB K/Vt + 2 x 16 KB V landing
    static constexpr bool LAZY = true, O_TMA = false;
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};
template <> struct wg_shape<64, 64, true> {    // d 128's FP8 tiles (128-byte rows, features 64-127 zero, never read)
    static constexpr int BN = 128, QBUF = 2;      // 2 x 24 KB Q + 2 x (16 + 16) KB K/Vt + 2 x 16 KB V landing
    static constexpr bool LAZY = true, O_TMA = false;
    static constexpr int CONSUMERS = 3, PRODUCER_REGS = 56, CONSUMER_REGS = 152; // three: +14% over two (step 129)
};
template <> struct wg_shape<64, 64, true, 1> { // two consumers: masked, up to 1k keys (wg_fp8_second_config)
    static constexpr int BN = 128, QBUF = 2;      // 2 x 16 KB Q + 2 x (16 + 16) KB K/Vt + 2 x 16 KB V landing
    static constexpr bool LAZY = true, O_TMA = false;
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};
template <> struct wg_shape<256, 256, true> {  // 128-key blocks (FlashAttention-3's FP8 d 256 tile)
    static constexpr int BN = 128, QBUF = 1;      // 32 KB Q + 2 x (32 + 32) KB K/Vt + 2 x 32 KB V landing: 224 KB
    static constexpr bool LAZY = true, O_TMA = false;
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 24, CONSUMER_REGS = 240; // O alone is 128 registers
};
template <> struct wg_shape<96, 96> {
    static constexpr int BN = 128, QBUF = 2;      // d 128's tiles (its 128-byte rows, features 96-127 never read)
    static constexpr bool LAZY = true, O_TMA = true, Q_REGS = true; // (Q_REGS: PERF.md step 196)
    static constexpr bool O_LATE = true;          // (512 / 1k +1.1..+3.2%, step 203)
    static constexpr int PLAIN_KEYS = 1 << 30;    // every length: 2k-16k +0.6..+4.0% (PERF.md step 194)
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};
template <> struct wg_shape<192, 128> {
    static constexpr int BN = 128, QBUF = 1;      // 48 KB Q + 2 x (48 + 32) KB K/V
    static constexpr bool LAZY = true, O_TMA = true;
    static constexpr int PLAIN_KEYS = 0;          // (512 / 1k -0.9 / -2.0% on it: wg_plain)
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};
template <> struct wg_shape<192, 192> {
    static constexpr int BN = 112, QBUF = 1;      // 48 KB Q + 2 x (42 + 42) KB K/V (FlashAttention-3's 128 x 112)
    static constexpr bool LAZY = true, O_TMA = true, LATE_FINISH = true;
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};
template <> struct wg_shape<192, 192, false, 1> { // paged K/V of 64-key multiples (TMA pages) and short masked calls
    static constexpr int BN = 64, QBUF = 2;       // 2 x 48 KB Q + 2 x (24 + 24) KB K/V
    static constexpr bool LAZY = true, O_TMA = true, LATE_FINISH = true, O_LATE = true; // (causal 512 +1.0%, step 203)
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};
template <> struct wg_shape<256, 256> {
    static constexpr int BN = 80, QBUF = 1;       // 64 KB Q + 2 x (40 + 40) KB K/V (FlashAttention-3's 128 x 80)
    static constexpr bool LAZY = true, O_TMA = true;
    static constexpr int PLAIN_KEYS = 8192;       // 2k-8k +0.8..+1.3% on average, 16k -0.4% (PERF.md step 194)
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};
template <> struct wg_shape<256, 256, false, 1> { // paged K/V (TMA pages: 64-key blocks) and short sequences
    static constexpr int BN = 64, QBUF = 1;       // 64 KB Q + 2 x (32 + 32) KB K/V
    static constexpr bool LAZY = true, O_TMA = true;
    static constexpr int CONSUMERS = 2, PRODUCER_REGS = 72, CONSUMER_REGS = 216;
};

// A shape's LATE_FINISH (wg_finish_rows in the epilogue, not under the last PV), false where it has none; its K/V
// ring's STAGES, 2 where it does not say; SERIAL (wg_serial_block), false where it has none.
template <class S> constexpr auto wg_late_finish(int) -> decltype(S::LATE_FINISH) { return S::LATE_FINISH; }
template <class S> constexpr bool wg_late_finish(long) { return false; }
template <class S> constexpr auto wg_stages(int) -> decltype(S::STAGES) { return S::STAGES; }
template <class S> constexpr int wg_stages(long) { return 2; }
template <class S> constexpr auto wg_q_regs_of(int) -> decltype(S::Q_REGS) { return S::Q_REGS; }
template <class S> constexpr bool wg_q_regs_of(long) { return false; }
template <class S> constexpr auto wg_serial_of(int) -> decltype(S::SERIAL) { return S::SERIAL; }
template <class S> constexpr bool wg_serial_of(long) { return false; }
template <class S> constexpr auto wg_o_late_of(int) -> decltype(S::O_LATE) { return S::O_LATE; }
template <class S> constexpr bool wg_o_late_of(long) { return false; }
// PLAIN_KEYS: the most keys of a call that the shape's kernel for plain calls runs (wg_plain; 0: it has none), 1k
// where it does not say
template <class S> constexpr auto wg_plain_keys_of(int) -> decltype(S::PLAIN_KEYS) { return S::PLAIN_KEYS; }
template <class S> constexpr int wg_plain_keys_of(long) { return 1024; }

// Whether a CTA of one producer and `consumers` consumer warpgroups has the registers their setmaxnreg split asks.
constexpr bool wg_regs_fit(int consumers, int producer_regs, int consumer_regs) {
    return 128 * producer_regs + 128 * consumers * consumer_regs <= 65536 / (128 * (consumers + 1)) / 8 * 8 * (128 * (consumers + 1));
}

// T: the output's type (and the inputs' unless E says otherwise); E: the type of Q, K and V as they sit in
// shared memory (T, or e4m3 for the FP8 prefill: FP8). Sizes below count E's bytes: a 16-byte chunk holds
// 16 / EB elements, a 128-byte swizzle atom FA, a wgmma k-step 32 bytes of k (PK keys of P·V).
// FP8: the 8-bit wgmma takes B K-major only, so V lands in a ring of two buffers as it comes ([key][feature])
// and the producer transposes it into the stage (Vt, [feature][key]: wg_finish_v).
template <typename T_, int D_, int DV_, typename E_ = T_, int V_ = 0>
struct wg_cfg {
    typedef T_ T;
    typedef E_ E;
    static constexpr int EB = sizeof(E), FA = 128 / EB;             // bytes per element, elements per atom row
    static constexpr bool FP8 = EB == 1;
    typedef wg_shape<D_, DV_, FP8, V_> shape;
    static constexpr int D = D_, DV = DV_, BN = shape::BN, STAGES = wg_stages<shape>(0), CONSUMERS = shape::CONSUMERS;
    static constexpr int DS = (D + FA - 1) / FA * FA, DVS = (DV + FA - 1) / FA * FA; // stored: whole 128-byte atoms
    static constexpr int PK = 32 / EB, PA = BN / PK * 4;             // keys per P·V k-step; P's fragment registers
    static constexpr int QBUF = shape::QBUF;                         // Q buffers, a ring over the tiles
    static constexpr bool LAZY = shape::LAZY;                        // lazy rescale (softmax_update)
    static constexpr bool O_TMA = shape::O_TMA;                      // the epilogue may store by TMA (wg_store_tma)
    static constexpr bool LATE_FINISH = wg_late_finish<shape>(0);    // the rows' sums in the epilogue (wg_finish_rows)
    static constexpr bool SERIAL = wg_serial_of<shape>(0);           // each block's S, softmax, PV in turn (wg_serial_block)
    // S's A operand (Q) from registers, loaded once a tile (wg_load_qa), not from shared memory every block (K's
    // descriptor alone a k-step; a fifth fewer shared-memory reads a block): in the plain kernel only (wg_plain), whose
    // one-thread producer leaves the consumers the registers; where a shape says Q_REGS (d 96, d 128's 128-key blocks:
    // 512-4k +0.3..+2.9%, PERF.md step 196; at d 192 / 256 Q takes 48 / 64 registers)
    static constexpr bool Q_REGS = false, Q_REGS_PLAIN = !FP8 && !SERIAL && wg_q_regs_of<shape>(0);
    static constexpr int QK_STEPS = D * EB / 32;                     // S's k-steps (of 32 bytes)
    // O by TMA store through the tile's last K/V stage, not its Q buffer (wg_store_tma): with one Q buffer, the next
    // tile's Q then loads under the last PV and the epilogue instead of after the store has read O (PERF.md step 103).
    static constexpr bool O_STAGE = QBUF == 1 && CONSUMERS == 2 && !FP8;
    // The previous tile's O buffer (Q's) given back under the tile's first S, not at its start (wg_consume), where a
    // shape says O_LATE: d 96, d 128's 128-key blocks, d 192's 64-key ones (+1..+3% at 512 / 1k); d 64's three and
    // two warpgroups lost up to 3.4% (PERF.md step 203). Not through a stage (O_STAGE: wg_skip may wait for it first).
    static constexpr bool O_LATE = wg_o_late_of<shape>(0) && !O_STAGE;
    // Each warpgroup skips the key blocks its own rows cannot see (wg_blocks_unseen) where a causal tile has
    // such blocks: blocks under 128 keys (d 192, 256: the first warpgroup's last block; +2-7% causal 512-2k).
    // With 128-key blocks and two warpgroups both end in the tile's last block, and the check alone cost 1.5-4%
    // at 512 keys; d 64's three warpgroups gained 2.5% at 4k causal and lost as much without a mask (PERF.md
    // step 83), so they skip on the grid walk only (wg_skips: masked calls whose rounds do not fill the GPU).
    static constexpr bool SKIP = BN < 128;
    // A warpgroup whose rows all lie outside the sequence skips its blocks on every walk (wg_blocks_unseen): d 64's three
    // serial warpgroups, whose last tile at 512 / 1k / 2k keys has one or two such (+2.7 / +4.0%, PERF.md step 182; 2k
    // then on them, +1.6%: step 186); on the overlapped three the two others' softmax sets a tile's time all the same.
    static constexpr bool SKIP_EMPTY = CONSUMERS == 3 && SERIAL;
    static constexpr int BM = 64 * CONSUMERS, THREADS = 128 * (CONSUMERS + 1);
    static constexpr int MT = 1, ROWS = 2, NWARPS = 4 * CONSUMERS; // fwd_kernel's view of a consumer warp
    static constexpr bool HEAD_MAJOR = false;
    static constexpr int DCH = DS * EB / 16, DVCH = DVS * EB / 16;  // 16-byte chunks per stored row
    static constexpr int Q_BYTES = BM * DS * EB, K_BYTES = BN * DS * EB, V_BYTES = BN * DVS * EB;
    // FP8's Vt (DV rows of BN keys): past 128 keys in 128-byte atoms of DV rows (tile/fp8.cuh), so 192 keys take two
    static constexpr int VT_BYTES = FP8 && BN > 128 ? (BN + 127) / 128 * DVS * 128 : V_BYTES;
    static constexpr int STAGE_BYTES = K_BYTES + VT_BYTES;
    static constexpr int RPT = (BN + 127) / 128;                     // key rows a producer thread locates a block
    static constexpr int LAND_BYTES = FP8 ? 2 * V_BYTES : 0;          // FP8: V's landing ring
    static constexpr int BAR_BYTES = (2 * QBUF + 4 * STAGES + 2) * 8;
    static constexpr int TILES_BYTES = QBUF * Q_BYTES + STAGES * STAGE_BYTES + LAND_BYTES + BAR_BYTES;
    // Row tables (K and V element offsets of BN rows): two sets, alternating by block, or one where two do not
    // fit (d 256's 80-key blocks: the producer then waits for every reader of a set before it writes it again)
    static constexpr int TABLE_SETS = TILES_BYTES + 2 * 2 * BN * 8 <= 227 * 1024 ? 2 : 1;
    static constexpr int TABLE_BYTES = TABLE_SETS * 2 * BN * 8;
    static constexpr int SMEM_BYTES = TILES_BYTES + TABLE_BYTES;
    static constexpr int PRODUCER_REGS = shape::PRODUCER_REGS, CONSUMER_REGS = shape::CONSUMER_REGS;
    static_assert(D % 32 == 0 && DV % 32 == 0, "wgmma tiles: d and d_v multiples of 32 (P·V: one wgmma of N = d_v)");
    static_assert(!FP8 || (D == DV && (BN == 128 || BN == 64 || BN == 192)), "FP8: Vt rows of 128-byte atoms or 64 keys (64-byte)");
    static_assert(BN == 64 || BN == 80 || BN == 96 || BN == 112 || BN == 128 || (!FP8 && BN == 176) || (FP8 && BN == 192),
                  "S = Q K^T is one wgmma of N = BN (tile/wgmma.cuh's sizes)");
    static_assert(QBUF == 1 || QBUF == 2, "Q buffers");
    static_assert(!SERIAL || (!O_STAGE && !FP8), "SERIAL: the bf16 / fp16 kernel, O not through a stage");
    static_assert(!O_TMA || QBUF == 2 || O_STAGE, "O by TMA store: through a second Q buffer or a stage");
    static_assert(!O_STAGE || (64 * DVS * (int)sizeof(T) <= K_BYTES && 64 * DVS * (int)sizeof(T) <= V_BYTES),
                  "O_STAGE: a warpgroup's O fits the K (warpgroup 0) and the V (warpgroup 1) part of a stage");
    static_assert(SMEM_BYTES <= 227 * 1024, "shared memory of one CTA");
    static_assert(CONSUMERS == 2 || CONSUMERS == 3, "consumer warpgroups: named barriers 2 + g (epilogue), 5-7 (O_STAGE), 8 + g (turns)");
    static_assert(wg_regs_fit(CONSUMERS, PRODUCER_REGS, CONSUMER_REGS), "setmaxnreg.inc waits forever for registers the CTA does not have");
    // A kernel for plain calls only (wg_plain): set by that wrapper, false here; PLAIN_KEYS, the most keys of a call it
    // runs (wg_plain_call), and HAS_PLAIN, whether C has one.
    static constexpr bool PLAIN = false;
    static constexpr int PLAIN_KEYS = FP8 ? 0 : wg_plain_keys_of<shape>(0);
    static constexpr bool HAS_PLAIN = PLAIN_KEYS > 0;
};

// Config C's kernel for plain calls (the host's wg_plain_call: dense Q / K / V by TMA with no length to check, O by TMA,
// plain scores, no ALiBi, sinks, rotary or FP8, and every tile with a key block): the kernel's other paths (general
// scores, the row-table and cp.async producers, rotary, ALiBi, sinks, the store from registers) compiled out, so that
// the code a tile runs is only what such calls need. Where the tiles are short their edges stalled on instruction
// fetch six to seven times as long as cuDNN's kernel (ncu no_instruction 0.61 against 0.08 at d 128 512; PERF.md step 190):
// 512 / 1k +0.6..+5.1%. On longer tiles the block loops set the time, and ptxas schedules the same loop code
// differently in the two kernels: the plain one is faster at every length on d 96 and on d 128's 128-key blocks
// (steps 198, 201), to 8k on d 256's 80-key blocks, up to 5% slower past 1k on d 192 and d 64 (steps 193, 194). So
// each shape says up to how many keys its plain kernel runs (wg_shape's PLAIN_KEYS, 1k by default; the host's
// wg_plain_call), and the shapes used only past 1k keys and d 192v128's (-0.9 / -2.0% at 512 / 1k) have none.
// With Q_REGS its producer takes 40 registers and the consumers 232 (at 24 / 240 the producer's walk spilled, at the
// consumers' 216 ptxas serialised the wgmmas for want of registers).
template <class C> struct wg_plain : C {
    static constexpr bool PLAIN = true, Q_REGS = C::Q_REGS_PLAIN;
    static constexpr int PRODUCER_REGS = Q_REGS ? 40 : C::PRODUCER_REGS, CONSUMER_REGS = Q_REGS ? 232 : C::CONSUMER_REGS;
    static_assert(wg_regs_fit(C::CONSUMERS, PRODUCER_REGS, CONSUMER_REGS), "setmaxnreg.inc waits forever for registers the CTA does not have");
};

// TMA descriptors of K and V (built on the host, fwd_launch.cuh), in boxes of 64 features x 1 head x box_rows keys
// with the 128-byte swizzle: dense (d, h_k, s_k, b), varlen (d, h_k, total_k, 1), paged (d, h_k,
// page_size, num_pages) when pages are a multiple or a divisor of BN of at least 64 rows (box_rows =
// min(page_size, BN)). kind = WG_TMA_OFF when K/V do not suit TMA.
enum { WG_TMA_OFF = 0, WG_TMA_DENSE, WG_TMA_VARLEN, WG_TMA_PAGED };
struct wg_tma {
    CUtensorMap k, v, q, o;
    int kind, box_rows;
    int q_kind; // Q by TMA (WG_TMA_DENSE or _VARLEN: boxes of 64 features x group heads x BM / group rows), else off
    int o_kind; // O by TMA store (boxes of 64 features x group heads x 64 / group rows: one warpgroup's), else off
    int solo;   // every Q tile and key block by TMA, no length to check: the producer's warp 0 alone runs (wg_produce),
                // and every tile takes its sequence's lengths from p (wg_tile_at: seqlen_dense)
    int shift;  // the masked walk's tiles end at the sequence's last row, the first cut short (wg_tile_at): BM x
                // tiles - packed rows in whole 64-row boxes, where the host allows rows < 0 (wg_end_shift), else 0
    // The walk's divisors (wg_tile_at): a head's query tiles ms, ms x splits, splits, h_k, the GQA group, and
    // the masked persistent walk's heads a round (W)
    fastdiv ms, units_per_head, splits, h_k, group, w;
};

// Where things live in shared memory (from its base, 1024-byte aligned as the swizzle needs: fwd_wgmma_kernel).
struct wg_smem {
    char *q, *stages, *land; // land: FP8's V landing ring (2 buffers)
    int64_t *tables;
    uint64_t *q_full, *q_empty, *k_full, *v_full, *k_empty, *v_empty; // q_*[QBUF], the others [STAGES]
    uint64_t *v_land;                                                  // [2]: FP8, V landed in land
    bool fence; // a full barrier's waiters fence the copies for wgmma (wg_acquire)
};

template <class C>
__device__ __forceinline__ wg_smem wg_smem_of(char *raw) {
    wg_smem s;
    char *base = raw; // 1024-byte aligned, as the swizzle needs (the kernel's declaration of it)
    s.q = base;
    s.stages = base + C::QBUF * C::Q_BYTES;
    s.land = s.stages + C::STAGES * C::STAGE_BYTES;
    s.tables = (int64_t *)(s.land + C::LAND_BYTES);
    s.q_full = (uint64_t *)((char *)s.tables + C::TABLE_BYTES);
    s.q_empty = s.q_full + C::QBUF;
    s.k_full = s.q_empty + C::QBUF;
    s.v_full = s.k_full + C::STAGES;
    s.k_empty = s.v_full + C::STAGES;
    s.v_empty = s.k_empty + C::STAGES;
    s.v_land = s.v_empty + C::STAGES;
    return s;
}

// Two walks of the work units (query tile, split, sequence x KV head), each the same in the producer and
// the consumers, so the pipeline runs on from one tile into the next for the CTA's whole life; the host
// picks one per call (fwd_launch.cuh, wg_persistent), each a kernel of its own (P):
// - the grid (P false): (X, splits, sequence x KV head), X = query tiles / (4 or 2: the host's wg_grid_tiles);
//   CTA x takes its head's tiles x, 2X - 1 - x, 2X + x, ... (a snake: under a causal mask each pair of its
//   tiles adds up to about the same number of key blocks), and the hardware hands CTAs to SMs as they free
//   up, which balances the rest.
// - persistent (P true): X = as many CTAs as fit on the GPU at once; without a mask (every tile as long),
//   step k of CTA x takes unit kX + x of the head-major order (a (sequence, KV head)'s tiles in a row: the
//   CTAs running at once share its K/V in L2). One pipeline fill per SM instead of one per four tiles.
//   Under a mask, where a head's tiles divide the slots evenly (the host's wg_walk_ctas): rounds of W heads,
//   longest tile first, in snake pairs (wg_tile_at). (A static walk over rounds that do not line up with
//   the heads cannot balance causal tiles: measured 6-60% slower, PERF.md step 53b.)
// Whether every Q tile and key block comes by TMA with no length to check (tm.solo; always, in a plain kernel).
template <class C> __device__ __forceinline__ bool wg_solo(const wg_tma &tm) { return C::PLAIN || tm.solo; }

__host__ __device__ __forceinline__ bool wg_masked(const fc_problem &p) {
    return p.window_left >= 0 || p.window_right >= 0;
}

__host__ __device__ __forceinline__ int64_t wg_query_tiles(const fc_problem &p, int bm) {
    return ((int64_t)p.s_q * (p.h_q / p.h_k) + bm - 1) / bm;
}

// Query rows of pm packed rows, pm a multiple of the group, negative where the masked walk's first tile starts before
// the sequence (tm.shift): its rows < 0 come as zeros (Q's TMA box: a load may start before row 0, a store may not)
// and are not stored (wg_store_tma skips their warpgroups' boxes, the lse store their rows).
__device__ __forceinline__ int wg_rows_of(int pm, const fastdiv &group) {
    return pm >= 0 ? (int)div_of((unsigned)pm, group) : -(int)div_of((unsigned)-pm, group);
}

// A value the same in every lane of the warp, by a warp reduction: ptxas takes its result as warp-uniform (a value
// from threadIdx.x it does not), which keeps what is computed from it on the uniform datapath.
__device__ __forceinline__ int wg_uniform(int v) { return (int)__reduce_min_sync(0xffffffffu, (unsigned)v); }

// The consumer warpgroup of this thread (wg_uniform): the Q tile's address and with it the block loops' descriptor
// arithmetic stay on the uniform datapath (d 256's block 635 -> 550 instructions, d 192 -69, R2UR 355 -> 35 a kernel:
// PERF.md step 109; d 64 +350 spill instructions with threadIdx.x / 128 in wg_blocks_unseen).
__device__ __forceinline__ int wg_index() { return wg_uniform(threadIdx.x / 128); }

// Steps of this CTA's walk.
template <class C, bool P>
__device__ __forceinline__ int wg_steps(const fc_problem &p, const wg_tma &tm) {
    if constexpr (!P) return (int)((tm.ms.d + gridDim.x - 1) / gridDim.x);
    if (wg_masked(p)) // rounds of W heads' tiles (wg_tile_at)
        return (int)div_of((unsigned)(p.batch * p.h_k) + tm.w.d - 1, tm.w);
    unsigned units = tm.units_per_head.d * p.batch * p.h_k; // < 2^31 (fwd_launch.cuh)
    return units > blockIdx.x ? (units - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
}

// Tile t's query rows [r_lo, r_hi) and key blocks [n_lo, n_hi) of its split, from m0 (< packed_rows) and its
// sequence's lengths.
template <class C>
__device__ __forceinline__ void wg_rows_and_blocks(const fc_problem &p, const wg_tma &tm, fwd_tile &t) {
    t.r_lo = (int)div_of(max(t.m0, 0), tm.group); // (m0 < 0: tm.shift)
    t.r_hi = (int)div_of(min(t.m0 + C::BM, t.packed_rows) - 1, tm.group) + 1;
    int j0, j1;
    fc_key_range(&p, t.s.s_q, t.s.s_k, t.r_lo, t.r_hi, &j0, &j1);
    int nb_lo = j0 / C::BN, nb_hi = j1 > j0 ? (j1 + C::BN - 1) / C::BN : nb_lo;
    int per = (int)div_of(nb_hi - nb_lo + tm.splits.d - 1, tm.splits);
    t.n_lo = min(nb_hi, nb_lo + t.split * per);
    t.n_hi = min(nb_hi, t.n_lo + per);
}

// The tile of this CTA's step k: false when it has no rows (a varlen sequence shorter than the longest, or
// past the last tile). Otherwise as fwd_tile_of.
template <class C, bool P>
__device__ __forceinline__ bool wg_tile_at(const fc_problem &p, const wg_tma &tm, int k, fwd_tile &t) {
    if constexpr (!P) {
        int x = blockIdx.x, X = gridDim.x;
        t.m0 = (k % 2 ? (k + 1) * X - 1 - x : k * X + x) * C::BM;
        t.split = blockIdx.y;
        t.hk = (int)mod_of(blockIdx.z, tm.h_k);
        t.b = (int)div_of(blockIdx.z, tm.h_k);
    } else if (wg_masked(p)) {
        // Masked (one split; the host makes gridDim.x = W ms, ms the query tiles of a head): round k takes W
        // heads, k W .. k W + W - 1, their tiles longest first (the last tile sees the most keys under a
        // causal mask) at positions q = 0, 1, ..., the tiles of one length W in a row; CTA x takes position
        // x in even rounds and X - 1 - x in odd ones, so two rounds add up to two tiles of lengths summing to
        // about the longest plus the shortest (LPT pairs, as the grid's snake), and the CTAs at work share the
        // round's W heads' K/V in L2.
        unsigned w = tm.w.d, z = (unsigned)(p.batch * p.h_k);
        unsigned q = k % 2 ? gridDim.x - 1 - blockIdx.x : blockIdx.x, qw = div_of(q, tm.w), zi = (unsigned)k * w + q - qw * w;
        bool some = zi < z;
        t.m0 = some ? (int)(tm.ms.d - 1 - qw) * C::BM - tm.shift : 0x3fffffff; // a round past the last head: no rows
        t.split = 0;
        t.hk = some ? (int)mod_of(zi, tm.h_k) : 0;
        t.b = some ? (int)div_of(zi, tm.h_k) : 0;
    } else {
        // 32-bit (the host keeps units under 2^31), by the host's divisors: runtime divisions were ~1k cycles
        // of the gap between two tiles (PERF.md step 71)
        unsigned g = blockIdx.x + (unsigned)k * gridDim.x, zi = div_of(g, tm.units_per_head);
        unsigned r = g - zi * tm.units_per_head.d, rs = div_of(r, tm.splits);
        t.m0 = (int)rs * C::BM;
        t.split = (int)(r - rs * tm.splits.d);
        t.hk = (int)mod_of(zi, tm.h_k);
        t.b = (int)div_of(zi, tm.h_k);
    }
    t.group = (int)tm.group.d;
    t.bad = 0;
    t.s = wg_solo<C>(tm) ? seqlen_dense(p, t.b) : seqlen_checked(p, t.b, &t.bad);
    t.packed_rows = t.s.s_q * t.group;
    if (t.m0 >= t.packed_rows) return false;
    wg_rows_and_blocks<C>(p, tm, t);
    return true;
}

// The masked solo walk's tile geometry (wg_tile_at with tm.solo: every sequence has p's lengths, so a tile's rows
// and key blocks depend only on its position q, and a CTA's positions alternate between two): worked out once a CTA
// by the consumers (wg_consume), each tile then decoding only its head (wg_tile_of_parity). Uniform across the
// warp (wg_uniform): held in vector registers, the block loops' bounds made ptxas serialise
// their wgmmas (C7518; PERF.md step 180).
struct wg_geom {
    int m0, r_lo, r_hi, n_lo, n_hi; // as fwd_tile's
    unsigned zi0;                   // the position's head in its round: round k's head is k W + zi0
};

template <class C>
__device__ __forceinline__ wg_geom wg_geom_at(const fc_problem &p, const wg_tma &tm, unsigned q) {
    fwd_tile t;
    unsigned qw = div_of(q, tm.w);
    t.m0 = (int)(tm.ms.d - 1 - qw) * C::BM - tm.shift;
    t.split = 0;
    t.group = (int)tm.group.d;
    t.s = seqlen_dense(p, 0);
    t.packed_rows = t.s.s_q * t.group;
    wg_rows_and_blocks<C>(p, tm, t);
    wg_geom g;
    g.m0 = wg_uniform(t.m0), g.r_lo = wg_uniform(t.r_lo), g.r_hi = wg_uniform(t.r_hi);
    g.n_lo = wg_uniform(t.n_lo), g.n_hi = wg_uniform(t.n_hi), g.zi0 = (unsigned)wg_uniform((int)(q - qw * tm.w.d));
    return g;
}

// The CTA's step k on the masked solo walk from its two positions' geometry (g: step k's parity's, by value: a
// selected struct passed by pointer went to local memory). As wg_tile_at.
template <class C>
__device__ __forceinline__ bool wg_tile_of_parity(const fc_problem &p, const wg_tma &tm, int k, wg_geom g, fwd_tile &t) {
    unsigned zi = (unsigned)k * tm.w.d + g.zi0;
    if (zi >= (unsigned)(p.batch * p.h_k)) return false; // a round past the last head
    t.hk = (int)mod_of(zi, tm.h_k);
    t.b = (int)div_of(zi, tm.h_k);
    t.split = 0;
    t.group = (int)tm.group.d;
    t.bad = 0;
    t.s = seqlen_dense(p, t.b);
    t.packed_rows = t.s.s_q * t.group;
    t.m0 = g.m0, t.r_lo = g.r_lo, t.r_hi = g.r_hi, t.n_lo = g.n_lo, t.n_hi = g.n_hi;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Producer (128 threads, tid 0 .. 127). Ring positions count key blocks over all tiles of the CTA.

// Q tile: BM packed rows x D, gathered from (row, head) pairs.
template <class C>
__device__ __forceinline__ void wg_load_q(const fc_problem &p, const fwd_tile &t, const fastdiv &group, char *sq, int tid) {
    typedef typename C::E E;
    constexpr int PER = 16 / C::EB; // elements per 16-byte chunk
    const E *q = (const E *)p.q.data;
    for (int i = tid; i < C::BM * C::DCH; i += 128) {
        int m = i / C::DCH, c = i % C::DCH, pm = t.m0 + m;
        bool valid = pm < t.packed_rows && c < p.d / PER; // features past d: zeros (a padded head dim)
        const E *src = q;
        if (valid) {
            int r = (int)div_of(pm, group), h = t.hk * t.group + pm - r * t.group;
            src = q + fc_q_row_offset(&p.q, &t.s, t.b, r) + h * p.q.sh + c * PER;
        }
        cp_async_16(sq + sw128_offset(m, c, C::BM), src, valid);
    }
}

// Q tile t by TMA (thread 0; the others only arrive on bar): D / FA boxes of its BM / group query rows x the
// group's heads. The producer's cp.async copies (wg_load_q) of a tile's Q took 7-11k cycles to issue at d 128
// under the K/V stream, 13-24k at d 256, holding back the tile's key blocks (PERF.md step 58).
template <class C>
__device__ __forceinline__ void wg_tma_q(const wg_tma &tm, const fwd_tile &t, char *sq, uint64_t *bar, int tid) {
    if (tid != 0) {
        if (!wg_solo<C>(tm)) mbar_arrive(bar);
        return;
    }
    fence_proxy_async(); // the consumers' rotary may have written this buffer before (generic proxy)
    mbar_arrive_expect_tx(bar, C::Q_BYTES);
    int row = (int)t.s.q_row0 + wg_rows_of(t.m0, tm.group), outer = tm.q_kind == WG_TMA_DENSE ? t.b : 0;
    for (int f = 0; f < C::DS / C::FA; f++)
        tma_load_4d(sq + f * C::BM * 128, &tm.q, C::FA * f, t.hk * t.group, row, outer, bar);
}

// Location of key row r of block `it` (row < 0: past the end, no such block, or r >= BN); a paged outer is the
// page-table entry as read, checked where it is used (page_checked).
template <class C>
__device__ __forceinline__ fc_kv_loc wg_locate(const fc_problem &p, const fwd_tile &t, int it, int n_blocks, int r) {
    int j = (t.n_hi - 1 - it) * C::BN + r;
    return it < n_blocks && r < C::BN && j < t.s.s_k ? fc_kv_locate(&p, &t.s, t.b, j) : fc_kv_loc{0, -1};
}

// The key rows producer thread tid locates in block `it`: tid, tid + 128, ... (RPT of them: two past 128 keys).
template <class C>
__device__ __forceinline__ void wg_locate_rows(const fc_problem &p, const fwd_tile &t, int it, int n_blocks, int tid,
                                               fc_kv_loc (&loc)[C::RPT]) {
#pragma unroll
    for (int h = 0; h < C::RPT; h++) loc[h] = wg_locate<C>(p, t, it, n_blocks, tid + 128 * h);
}

// Block of BN rows x CH chunks of K or V from the row table, the first `used` chunks of each row read (the
// rest zeros: a head dim padded to the kernel's), zero-filled past the end. When CH divides 128, each
// thread keeps chunk column tid % CH and walks rows tid / CH, + 128 / CH, ...
template <class C, int CH>
__device__ __forceinline__ void wg_load_rows(const void *base, const int64_t *rows, char *dst, int tid, int used) {
    constexpr int PER = 16 / C::EB; // elements per chunk
    const typename C::E *src = (const typename C::E *)base;
    if constexpr (128 % CH == 0) {
        int c = tid % CH;
        bool col = c < used;
#pragma unroll 4
        for (int r = tid / CH; r < C::BN; r += 128 / CH) {
            int64_t off = rows[r];
            bool valid = off >= 0 && col;
            cp_async_16(dst + sw128_offset(r, c, C::BN), src + (valid ? off + c * PER : 0), valid);
        }
    } else {
#pragma unroll 4
        for (int i = tid; i < C::BN * CH; i += 128) {
            int r = i / CH, c = i % CH;
            int64_t off = rows[r];
            bool valid = off >= 0 && c < used;
            cp_async_16(dst + sw128_offset(r, c, C::BN), src + (valid ? off + c * PER : 0), valid);
        }
    }
}

// Block n of tile t (K or V, `dim` features) by TMA into dst, counted on bar; thread 0 only. Paged: one box
// per piece of box_rows keys, each within one page, at the (page, row) the row table pr holds for its
// first key.
template <class C>
__device__ __forceinline__ void wg_tma_block(const wg_tma &tm, const CUtensorMap *map, const fwd_tile &t, int n, int dim,
                                             const int64_t *pr, char *dst, uint64_t *bar) {
    for (int f = 0; f < dim / C::FA; f++) {
        char *d = dst + f * C::BN * 128;
        if (tm.kind == WG_TMA_DENSE)
            tma_load_4d(d, map, C::FA * f, t.hk, (int)t.s.k_row0 + n * C::BN, t.s.kv_b, bar);
        else if (tm.kind == WG_TMA_VARLEN)
            tma_load_4d(d, map, C::FA * f, t.hk, (int)t.s.k_row0 + n * C::BN, 0, bar);
        else
            for (int i = 0; i < C::BN; i += tm.box_rows)
                tma_load_4d(d + i * 128, map, C::FA * f, t.hk, (int)(pr[i] & 0xffffffff), (int)(pr[i] >> 32), bar);
    }
}

// FP8: block g's V, landed in land buffer g % 2 ([key][feature], as a T block would sit in the stage), into
// the stage's V buffer transposed (Vt: [feature][key], in P's key order: tile/fp8.cuh) by every producer
// thread once the consumers gave the buffer back, then signalled on v_full. The barrier after it: every
// thread's reads of the land buffer are done before the block after next lands there.
template <class C>
__device__ __forceinline__ void wg_finish_v(const wg_smem &sm, int g, int tid) {
    int stage = g % C::STAGES;
    char *vt = sm.stages + stage * C::STAGE_BYTES + C::K_BYTES;
    mbar_wait(&sm.v_land[g % 2], (g / 2) & 1);
    if (g >= C::STAGES) mbar_wait(&sm.v_empty[stage], (g / C::STAGES - 1) & 1);
    transpose_v_e4m3<C::BN, C::DV>(sm.land + g % 2 * C::V_BYTES, vt, tid);
    fence_proxy_async(); // the transposed Vt (generic proxy) before wgmma's reads; the land reads before TMA's writes
    named_bar_sync(1, 128);
    mbar_arrive(&sm.v_full[stage]);
}

// Where block g's V goes first and the barrier that says it is there: the stage (waiting for the consumers to
// give it back) or, FP8, the land buffer (wg_finish_v waits for the stage).
template <class C>
__device__ __forceinline__ char *wg_v_dst(const wg_smem &sm, int g, uint64_t **bar) {
    int stage = g % C::STAGES;
    if constexpr (C::FP8) {
        *bar = &sm.v_land[g % 2];
        return sm.land + g % 2 * C::V_BYTES;
    }
    if (g >= C::STAGES) mbar_wait(&sm.v_empty[stage], (g / C::STAGES - 1) & 1);
    *bar = &sm.v_full[stage];
    return sm.stages + stage * C::STAGE_BYTES + C::K_BYTES;
}

// Every key block of tile t, ring positions pos .., all by cp.async (a cache TMA cannot take: pages under 64
// rows, odd strides): write the row table (a barrier: every thread reads all rows), then for K and for V
// wait for the buffer, copy, and have the copies' arrival signalled on the buffer's barrier. A loop of its
// own: sharing one loop with the TMA path below cost pages of 16 ~7% (PERF.md step 35).
template <class C>
__device__ void wg_produce_rows(const fc_problem &p, const fwd_tile &t, const wg_smem &sm, int tid, int pos, int *bad) {
    int n_blocks = t.n_hi - t.n_lo;
    fc_kv_loc loc[C::RPT];
    wg_locate_rows<C>(p, t, 0, n_blocks, tid, loc);
    for (int it = 0; it < n_blocks; it++) {
        int g = pos + it, stage = g % C::STAGES;
        int64_t *rows = sm.tables + (g % C::TABLE_SETS) * 2 * C::BN; // two sets: one barrier per block suffices
#pragma unroll
        for (int h = 0; h < C::RPT; h++)
            if (loc[h].row >= 0) loc[h].outer = page_checked(p, loc[h].outer, bad);
        if (C::TABLE_SETS == 1 && it > 0) named_bar_sync(1, 128); // every thread is done reading the set
#pragma unroll
        for (int h = 0, r = tid; h < C::RPT; h++, r += 128)
            if (r < C::BN) {
                bool valid = loc[h].row >= 0;
                rows[r] = valid ? fc_kv_offset(&p.k, loc[h]) + t.hk * p.k.sh : -1;
                rows[C::BN + r] = valid ? fc_kv_offset(&p.v, loc[h]) + t.hk * p.v.sh : -1;
            }
        wg_locate_rows<C>(p, t, it + 1, n_blocks, tid, loc); // the next block's page-table reads, in flight meanwhile
        named_bar_sync(1, 128);
        char *k = sm.stages + stage * C::STAGE_BYTES;
        int parity = (g / C::STAGES - 1) & 1;
        if (g >= C::STAGES) mbar_wait(&sm.k_empty[stage], parity);
        wg_load_rows<C, C::DCH>(p.k.data, rows, k, tid, p.d / (16 / C::EB));
        mbar_cp_async_arrive(&sm.k_full[stage]);
        uint64_t *v_bar;
        char *v = wg_v_dst<C>(sm, g, &v_bar);
        wg_load_rows<C, C::DVCH>(p.v.data, rows + C::BN, v, tid, p.d_v / (16 / C::EB));
        mbar_cp_async_arrive(v_bar);
        if constexpr (C::FP8) // the previous block's V, while this one lands
            if (it > 0) wg_finish_v<C>(sm, g - 1, tid);
    }
    if constexpr (C::FP8)
        if (n_blocks > 0) wg_finish_v<C>(sm, pos + n_blocks - 1, tid);
}

// Every key block of tile t, ring positions pos ..: a block whose keys all lie in the sequence (or past the
// end of a dense cache) comes by TMA where the cache allows (wg_tma): one thread copies, the others only
// arrive; otherwise every thread copies its row by cp.async from a row table of element offsets. Paged TMA
// reads (page, row) from the row table too. A table is written, then a barrier (every thread's entry is
// read), then for K and for V: wait for the buffer, copy, and have the copies' arrival signalled on the
// buffer's barrier.
template <class C>
__device__ void wg_produce_blocks(const fc_problem &p, const fwd_tile &t, const wg_smem &sm, const wg_tma &tm, int tid,
                                  int pos, int *bad) {
    int n_blocks = t.n_hi - t.n_lo;
    // A dense sequence that ends where the cache does: its partial last block by TMA too, the rows past the
    // map's end zero-filled (as cp.async would; rows of a cache past the sequence's length are not read).
    bool tail_zero = tm.kind == WG_TMA_DENSE && t.s.k_row0 + t.s.s_k == p.s_k;
    fc_kv_loc loc[C::RPT];
    wg_locate_rows<C>(p, t, 0, n_blocks, tid, loc);
    for (int it = 0; it < n_blocks; it++) {
        int g = pos + it, stage = g % C::STAGES, n = t.n_hi - 1 - it;
        bool bulk = tm.kind != WG_TMA_OFF && ((n + 1) * C::BN <= t.s.s_k || tail_zero), table = !bulk || tm.kind == WG_TMA_PAGED;
        int64_t *rows = sm.tables + (g % C::TABLE_SETS) * 2 * C::BN; // two sets: one barrier per block suffices
        if (C::TABLE_SETS == 1 && table && it > 0) named_bar_sync(1, 128); // every thread is done reading the set
#pragma unroll
        for (int h = 0, r = tid; h < C::RPT; h++, r += 128)
            if (table && r < C::BN) {
                bool valid = loc[h].row >= 0;
                if (valid) loc[h].outer = page_checked(p, loc[h].outer, bad);
                rows[r] = bulk ? loc[h].outer << 32 | loc[h].row : valid ? fc_kv_offset(&p.k, loc[h]) + t.hk * p.k.sh : -1;
                rows[C::BN + r] = valid ? fc_kv_offset(&p.v, loc[h]) + t.hk * p.v.sh : -1;
            }
        wg_locate_rows<C>(p, t, it + 1, n_blocks, tid, loc); // the next block's page-table reads, in flight meanwhile
        if (table) named_bar_sync(1, 128);
        char *k = sm.stages + stage * C::STAGE_BYTES;
        int parity = (g / C::STAGES - 1) & 1;
        if (g >= C::STAGES) mbar_wait(&sm.k_empty[stage], parity);
        if (!bulk) {
            wg_load_rows<C, C::DCH>(p.k.data, rows, k, tid, p.d / (16 / C::EB));
            mbar_cp_async_arrive(&sm.k_full[stage]);
        } else if (tid == 0) {
            fence_proxy_async(); // cp.async (generic proxy) may have written this buffer before
            mbar_arrive_expect_tx(&sm.k_full[stage], C::K_BYTES);
            wg_tma_block<C>(tm, &tm.k, t, n, C::DS, rows, k, &sm.k_full[stage]);
        } else if (!wg_solo<C>(tm)) {
            mbar_arrive(&sm.k_full[stage]);
        }
        uint64_t *v_bar;
        char *v = wg_v_dst<C>(sm, g, &v_bar);
        if (!bulk) {
            wg_load_rows<C, C::DVCH>(p.v.data, rows + C::BN, v, tid, p.d_v / (16 / C::EB));
            mbar_cp_async_arrive(v_bar);
        } else if (tid == 0) {
            if (C::FP8) fence_proxy_async(); // cp.async may have written this land buffer before
            mbar_arrive_expect_tx(v_bar, C::V_BYTES);
            wg_tma_block<C>(tm, &tm.v, t, n, C::DVS, rows, v, v_bar);
        } else if (!wg_solo<C>(tm)) {
            mbar_arrive(v_bar);
        }
        if constexpr (C::FP8) // the previous block's V, while this one lands
            if (it > 0) wg_finish_v<C>(sm, g - 1, tid);
    }
    if constexpr (C::FP8)
        if (n_blocks > 0) wg_finish_v<C>(sm, pos + n_blocks - 1, tid);
}

// Every key block of tile t by TMA where the host set solo (dense K/V of p's s_k keys for every sequence: each block
// whole or cut at the map's end, zero-filled; no row table, no length to check): thread 0 alone waits for each
// buffer and issues its copy. wg_produce_blocks' general loop (row tables, page reads, partial blocks) spilled at the
// producer's register budget (d 64's three consumers: 6-15 spill instructions a block).
template <class C>
__device__ __forceinline__ void wg_produce_solo(const wg_tma &tm, const fwd_tile &t, const wg_smem &sm, int pos) {
    for (int it = 0; it < t.n_hi - t.n_lo; it++) {
        int g = pos + it, stage = g % C::STAGES, n = t.n_hi - 1 - it, parity = (g / C::STAGES - 1) & 1;
        char *k = sm.stages + stage * C::STAGE_BYTES;
        if (g >= C::STAGES) mbar_wait(&sm.k_empty[stage], parity);
        fence_proxy_async(); // (as wg_produce_blocks: the stage may have held O, written by the generic proxy)
        mbar_arrive_expect_tx(&sm.k_full[stage], C::K_BYTES);
        wg_tma_block<C>(tm, &tm.k, t, n, C::DS, nullptr, k, &sm.k_full[stage]);
        if (g >= C::STAGES) mbar_wait(&sm.v_empty[stage], parity);
        mbar_arrive_expect_tx(&sm.v_full[stage], C::V_BYTES);
        wg_tma_block<C>(tm, &tm.v, t, n, C::DVS, nullptr, k + C::K_BYTES, &sm.v_full[stage]);
    }
}

// The CTA's tiles: tile k's Q into buffer k % QBUF once the consumers are done with its previous tile there
// (q_empty; uses0, uses1: tiles that went through buffers 0 and 1), then its key blocks; with two buffers the next tile's Q
// and first blocks load while the consumers finish the previous tile (with one, its key blocks still do).
template <class C, bool P>
__device__ void wg_produce(const fc_problem &p, fc_split_ws ws, const wg_smem &sm, const wg_tma &tm) {
    int tid = threadIdx.x - 128 * C::CONSUMERS, pos = 0, uses0 = 0, uses1 = 0; // scalars: an array would live in local memory
    // FC_BAD_*: what is wrong with sequence bad_b (the grid walk: the CTA's one sequence; persistent: the first
    // flagged), reported at the end; cut: bad_b's lengths were cut (its rows past them are cleared once)
    int bad = 0, bad_b = -1, cut = 0;
    // solo: thread 0 alone issues every copy (the full barriers count one arrival; wg_produce_solo): the other three
    // warps' walk of the tiles and their arrivals were a tenth of the kernel's instructions at 512 keys (PERF.md step
    // 108), and warp 0's other lanes only followed thread 0's loop.
    if (wg_solo<C>(tm) && tid >= 1) return;
    int steps = wg_steps<C, P>(p, tm);
    for (int k = 0; k < steps; k++) {
        fwd_tile t;
        bool some = wg_tile_at<C, P>(p, tm, k, t);
        if constexpr (P) {
            if (t.bad && t.m0 == 0 && t.split == 0 && t.hk == 0) clear_cut_rows(p, ws, t.b, tid, 128); // once per b
            if (t.bad && bad_b < 0) bad_b = t.b;
        } else {
            bad_b = t.b, cut |= t.bad;
        }
        bad |= tid == 0 ? t.bad : 0;
        if (!some || t.n_hi == t.n_lo) continue;
        // Every producer thread is done reading the previous tile's row tables before any writes this
        // tile's (a TMA tile writes a table only for its partial last block, so no per-block barrier
        // stands between the two).
        if (pos > 0 && !wg_solo<C>(tm)) named_bar_sync(1, 128);
        int qb = k % C::QBUF, n = qb ? uses1++ : uses0++;
        if (n > 0) mbar_wait(&sm.q_empty[qb], (n - 1) & 1);
        if (tm.q_kind != WG_TMA_OFF)
            wg_tma_q<C>(tm, t, sm.q + qb * C::Q_BYTES, &sm.q_full[qb], tid);
        else {
            wg_load_q<C>(p, t, tm.group, sm.q + qb * C::Q_BYTES, tid);
            mbar_cp_async_arrive(&sm.q_full[qb]);
        }
        if (!C::FP8 && wg_solo<C>(tm)) // (FP8 is never solo: its V is transposed by every producer thread)
            wg_produce_solo<C>(tm, t, sm, pos);
        else if (tm.kind == WG_TMA_OFF)
            wg_produce_rows<C>(p, t, sm, tid, pos, &bad);
        else
            wg_produce_blocks<C>(p, t, sm, tm, tid, pos, &bad);
        if (P && bad && bad_b < 0) bad_b = t.b;
        pos += t.n_hi - t.n_lo;
    }
    cp_async_wait<0>();
    if (bad) report_sequence(p, bad_b, bad);
    if (!P && cut && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z % p.h_k == 0) clear_cut_rows(p, ws, bad_b, tid, 128);
}

// ---------------------------------------------------------------------------------------------
// Consumers (warpgroup g = threadIdx.x / 128).

// Rotary on warpgroup g's 64 rows of the (128-byte swizzled) Q tile.
template <class C>
__device__ void wg_rotate_q(const fc_problem &p, const fwd_tile &t, char *sq, int g) {
    auto offset = [](int m, int c) { return sw128_offset(m, c, C::BM); };
    rotate_q_rows<typename C::T>(p, t, sq, 64 * g, 64 * (g + 1), threadIdx.x % 128, 128, offset);
}

// Issue S = Q(warpgroup's 64 rows at sq) K(block at sk)^T: D x EB / 32 k-steps (of 32 bytes), one commit group.
template <class C>
__device__ __forceinline__ void wg_qk(const char *sq, const uint32_t (*qa)[4], const char *sk, float *s) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < C::QK_STEPS; kk++) // k-steps of 32 bytes
        if constexpr (C::Q_REGS)
            wgmma_rs<typename C::E, C::BN, 0>(s, qa[kk], wgmma_desc_k(sk, C::BN, kk), kk > 0);
        else
            wgmma_ss<typename C::E, C::BN, 0>(s, wgmma_desc_k(sq, C::BM, kk), wgmma_desc_k(sk, C::BN, kk), kk > 0);
    wgmma_commit();
}

// Q_REGS: the warpgroup's 64 rows of Q (at sq, in the tile's swizzled layout) as the A fragments of S's k-steps:
// ldmatrix x4, lane l addressing row l % 16 of the warp's 16 at chunk 2 kk + l / 16 (matrices: rows 0-7 / 8-15 of
// the k-step's low eight features, then of its high eight: mma.sync's m16n8k16 A fragment, tile/wgmma.cuh).
template <class C>
__device__ __forceinline__ void wg_load_qa(const char *sq, uint32_t (*qa)[4]) {
    int lane = threadIdx.x % 32, row = (threadIdx.x / 32) % 4 * 16 + lane % 16;
#pragma unroll
    for (int kk = 0; kk < C::QK_STEPS; kk++) ldmatrix_x4(qa[kk], sq + sw128_offset(row, 2 * kk + lane / 16, C::BM));
}

// Issue O += P V(block at sv), or O = P V for the tile's first PV (first: its first k-step does not accumulate, so O
// needs no zeroing in the setup): BN / PK k-steps of one wgmma of N = DV each, one commit group. V as it landed
// (MN-major), or FP8 the transposed Vt (K-major; 64-key blocks in 64-byte rows: wgmma_desc_k64).
template <class C>
__device__ __forceinline__ void wg_pv(uint32_t (*pa)[4], const char *sv, float *o, bool first) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < C::BN / C::PK; kk++) {
        int acc = kk > 0 || !first;
        if constexpr (C::FP8)
            wgmma_rs<typename C::E, C::DV, 0>(o, pa[kk], C::BN == 64 ? wgmma_desc_k64(sv, kk) : wgmma_desc_k(sv, C::DV, kk), acc);
        else
            wgmma_rs<typename C::T, C::DV, 1>(o, pa[kk], wgmma_desc_mn(sv, C::BN, kk), acc);
    }
    wgmma_commit();
}

// P (this thread's scores, after softmax) rounded to T (FP8: e4m3), as the A fragments of the BN / PK k-steps.
template <class C>
__device__ __forceinline__ void wg_pack_p(float (*s)[4], uint32_t (*pa)[4]) {
    typedef typename C::T T;
    if constexpr (C::FP8) {
        pack_p_e4m3<C::BN>(s, pa);
    } else {
#pragma unroll
        for (int kk = 0; kk < C::BN / 16; kk++) {
            pa[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
            pa[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
            pa[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        }
    }
}

__device__ __forceinline__ void wg_release(uint64_t *empty) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(empty);
}

// A buffer the warpgroup's O went out of by TMA store (wg_store_tma) given back once the store has read it: thread 0
// waits for that, then its warp arrives with the others.
__device__ __forceinline__ void wg_release_stored(uint64_t *empty) {
    if (threadIdx.x % 128 == 0) tma_store_wait_read();
    wg_release(empty); // warp 0 of the warpgroup only after its thread 0 saw the boxes read
}

// Wait for a buffer's copies, then order them (generic proxy: cp.async) before wgmma's reads (async proxy). TMA's
// writes need no fence (the barrier's completion makes them visible to wgmma), so the serial kernel fed by TMA alone
// skips it (sm.fence: a few hundred cycles a block off its chain, PERF.md step 171); the overlapped kernels keep it
// (step 146: without it their long calls' CTAs drift out of step and L2 merges fewer reads, -2%).
__device__ __forceinline__ void wg_acquire(const wg_smem &sm, uint64_t *full, int parity) {
    mbar_wait(full, parity);
    if (sm.fence) fence_proxy_async();
}

// A consumer thread's registers: scores (then probabilities) of the current block, P of the previous
// block as A fragments, the output accumulator, and its two rows' score and softmax state.
template <class C>
struct wg_regs {
    float s[1][C::BN / 8][4];
    uint32_t pa[C::BN / C::PK][4];
    float o[1][C::DV / 8][4];
    uint32_t qa[C::Q_REGS ? C::QK_STEPS : 1][4]; // Q_REGS: the warpgroup's Q as S's A fragments
    row_scores rs[2];
    row_softmax st[2];
    float inv[2]; // 1 / the rows' sums, for the epilogue by TMA store (wg_finish_rows)
};

// Skip the exp2 of a masked block's hidden end (plain scores) only where it measured faster: d 64's two warpgroups
// (causal up to 1k keys: +3-4%); d 192 lost 9-18% and d 64's three warpgroups spilled (PERF.md step 88). Not in the
// serial order's one loop, whose unmasked blocks would take the skip's branches too (PERF.md step 157).
template <class C>
__device__ __forceinline__ constexpr bool wg_skip_dead() { return C::D == 64 && C::CONSUMERS == 2 && !C::SERIAL; }

// Plain scores (no softcap, no ALiBi, scale > 0): raw dot products, -inf where key block n hides them.
// Each row's visible range once (visible_range), then per score the fragment column c = 8 f + e % 2
// (key j0 + c) against it: one compare with a constant where no left window can hide a key, else two.
// Returns the fragments before the warp's last visible key (from there on every score of the warp is masked:
// under a causal mask a quarter to all of the diagonal block's, by warp), by a warp reduction (uniform).
// DEAD_ZERO: the hidden scores of the groups of fragments from there on (softmax_update's) get 0, not -inf: their
// p, which softmax_update then leaves alone (one select a score either way).
template <class C, bool DEAD_ZERO>
__device__ __forceinline__ int wg_mask_raw(const score_consts &sc, const row_scores *rs, int n, float (*s)[4]) {
    constexpr int NF = C::BN / 8, G = softmax_group(NF);
    int j0 = n * C::BN + 2 * (threadIdx.x % 4), lo[2], hi[2];
#pragma unroll
    for (int k = 0; k < 2; k++) visible_range(sc, rs[k].r, j0, &lo[k], &hi[k]);
    int live = min((__reduce_max_sync(0xffffffffu, max(hi[0], hi[1])) + 8) / 8, NF); // hi >= -1
    float fill[NF / G];
#pragma unroll
    for (int g = 0; g < NF / G; g++) fill[g] = DEAD_ZERO && g * G >= live ? 0.0f : -INFINITY;
    if (sc.wl < 0) { // no left window (lo = -1): only the right edge hides keys (causal, the sequence's end)
#pragma unroll
        for (int f = 0; f < NF; f++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (8 * f + e % 2 > hi[e / 2]) s[f][e] = fill[f / G];
    } else {
#pragma unroll
        for (int f = 0; f < NF; f++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int c = 8 * f + e % 2;
                if (c < lo[e / 2] || c > hi[e / 2]) s[f][e] = fill[f / G];
            }
    }
    return live;
}

// Scores of key block n, masked when MASK; PLAIN: the scores are scaled dot products alone (softmax_update folds
// the scale into exp2), else softcap / ALiBi apply (scores_block). Returns the fragments whose exp2 the warp computes.
template <class C, bool MASK, bool PLAIN>
__device__ __forceinline__ int wg_scores(const score_consts &sc, int n, wg_regs<C> &w) {
    int live = C::BN / 8;
    if (PLAIN) {
        if (MASK) {
            int seen = wg_mask_raw<C, wg_skip_dead<C>()>(sc, w.rs, n, w.s[0]);
            if (wg_skip_dead<C>()) live = seen;
        }
    } else {
        scores_block<C, MASK>(sc, w.rs, n, w.s);
    }
    return live;
}

// Scores of key block n and the online-softmax step of the thread's two rows.
template <class C, bool MASK, bool PLAIN>
__device__ __forceinline__ void wg_softmax(const score_consts &sc, int n, wg_regs<C> &w, float rescale[2]) {
    int live = wg_scores<C, MASK, PLAIN>(sc, n, w);
    float mul = PLAIN ? sc.mul : 1.0f;
#pragma unroll
    for (int k = 0; k < 2; k++)
        rescale[k] = softmax_update<C::BN / 8, C::LAZY, PLAIN && wg_skip_dead<C>()>(w.st[k], w.s[0], k, mul, live);
}

// FlashAttention-3's order: the consumer warpgroups take turns issuing a block's GEMMs, in a ring (named
// barrier 8 + wg: warpgroup wg's turn, passed on by wg - 1), so one's softmax runs while another's GEMMs do.
// The ring runs on over the CTA's tiles: each block's turn (the first's S included) passes to the next
// warpgroup, the last warpgroup's last turn of a tile to the first warpgroup's first of the next tile, so
// the warpgroups start a tile half a turn apart and one's epilogue runs under another's GEMMs (a ring
// opened and closed per tile started each tile's warpgroups in step: PERF.md steps 71, 79). The last
// warpgroup opens the ring once (wg_turns_open) and the first closes it once at the end (wg_turns_close),
// so each barrier sees as many arrivals as waits. (d 64's three without turns measured the same: step 70.)
template <class C>
__device__ __forceinline__ void wg_turns_open(int wg) {
    if (wg == C::CONSUMERS - 1) named_bar_arrive(8, 256);
}
__device__ __forceinline__ void wg_turn_wait(int wg) { named_bar_sync(8 + wg, 256); }
// The turn's wait once the block's two row maxima are in (wg_serial_block: the turn covers the exponentials, not the max)
__device__ __forceinline__ void wg_turn_wait_after(int wg, const float *mx) { named_bar_sync_after(8 + wg, 256, mx[0], mx[1]); }
template <class C>
__device__ __forceinline__ void wg_turn_pass(int wg) { named_bar_arrive(8 + (wg + 1) % C::CONSUMERS, 256); }
__device__ __forceinline__ void wg_turns_close(int wg) {
    if (wg == 0) wg_turn_wait(0);
}

// O_STAGE: the K of the tile's last block (iteration it of t's) is not given back when its S is in; wg_last and the
// epilogue give it back (O may go there).
template <class C>
__device__ __forceinline__ bool wg_holds_k(const fwd_tile &t, int it) {
    return C::O_STAGE && it == t.n_hi - t.n_lo - 1;
}

// O_STAGE's named barriers: warpgroup 1 has done its last S (the stage's K part is free for warpgroup 0's O);
// warpgroup 0 has done its last PV (the V part is free for warpgroup 1's O), two by the tile's parity (warpgroup 0
// may finish a short tile's last PV before warpgroup 1 has passed the previous tile's).
enum { WG_BAR_K_FREE = 5, WG_BAR_V_FREE = 6 };

// The warpgroup's first block (iteration it of the tile's blocks, ring position g = pos + it): S in this
// warpgroup's turn, softmax, P.
template <class C, bool MASK, bool PLAIN>
__device__ __forceinline__ void wg_first(const score_consts &sc, const fwd_tile &t, const wg_smem &sm, const char *sq,
                                         int pos, int it, uint64_t *stored, wg_regs<C> &w) {
    int g = pos + it, cur = g % C::STAGES, wg = threadIdx.x / 128;
    float rescale[2];
    if constexpr (C::Q_REGS) wg_load_qa<C>(sq, w.qa);
    wg_acquire(sm, &sm.k_full[cur], (g / C::STAGES) & 1);
    wg_turn_wait(wg);
    wg_qk<C>(sq, w.qa, sm.stages + cur * C::STAGE_BYTES, &w.s[0][0][0]);
    wg_turn_pass<C>(wg);
    if (stored) wg_release_stored(stored); // (under the S: wg_consume)
    wgmma_wait<0>();
    wgmma_hold<C::BN / 2>(&w.s[0][0][0]);
    if (!wg_holds_k<C>(t, it)) wg_release(&sm.k_empty[cur]);
    wg_softmax<C, MASK, PLAIN>(sc, t.n_hi - 1 - it, w, rescale); // O is still 0: no rescale
    wg_pack_p<C>(w.s[0], w.pa);
}

// A key block none of the warpgroup's rows can see (ring position g): its turn passed on, K and V given back
// unread once they are in (each arrival then counts towards this block's use of the buffer, not the last one's).
template <class C>
__device__ __forceinline__ void wg_skip(const wg_smem &sm, int g) {
    int cur = g % C::STAGES, wg = threadIdx.x / 128;
    wg_turn_wait(wg);
    wg_turn_pass<C>(wg);
    mbar_wait(&sm.k_full[cur], (g / C::STAGES) & 1);
    wg_release(&sm.k_empty[cur]);
    mbar_wait(&sm.v_full[cur], (g / C::STAGES) & 1);
    wg_release(&sm.v_empty[cur]);
}

// wgmma.wait_group 0 once the softmax of the thread's rows is done (their sums st[].l): ptxas moves a wait
// up to the start of its basic block, and with the softmax in the same block it put every instruction of
// the softmax after the wait, so no MUFU.EX2 ran while PV(it - 1) did (SASS at 3a436f6). A branch on the
// sums ends the block here; it is never taken (a sum of exponentials is >= 0, or NaN).
// tests/sass_overlap.py checks the compiled code of every instantiation.
__device__ __forceinline__ void wg_wait_after_softmax(const row_softmax *st) {
    if (st[0].l + st[1].l < -1.0f) asm volatile("nanosleep.u32 0;");
    wgmma_wait<0>();
}

// O rescaled by its rows' factors after a block's softmax (every block, or LAZY: only when a row max of the warp moved,
// rare with the lazy max).
template <class C>
__device__ __forceinline__ void wg_rescale_o(wg_regs<C> &w, const float rescale[2]) {
    if (!C::LAZY || __any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f))
#pragma unroll
        for (int f = 0; f < C::DV / 8; f++)
#pragma unroll
            for (int e = 0; e < 4; e++) w.o[0][f][e] *= rescale[e / 2];
}

// Block it >= 1 (ring position g = pos + it): issue S(it) and PV(it - 1) in this warpgroup's turn; the
// softmax of S(it) runs while PV(it - 1) and the other warpgroup's GEMMs do; then O is rescaled and P(it)
// packed. K(it) goes back once S(it) is in, V(it - 1) once PV(it - 1) is done.
template <class C, bool MASK, bool PLAIN>
__device__ __forceinline__ void wg_step(const score_consts &sc, const fwd_tile &t, const wg_smem &sm, const char *sq,
                                        int pos, int it, wg_regs<C> &w) {
    int g = pos + it, cur = g % C::STAGES, prev = (g - 1) % C::STAGES, wg = threadIdx.x / 128;
    float rescale[2];
    wg_acquire(sm, &sm.k_full[cur], (g / C::STAGES) & 1);
    wg_acquire(sm, &sm.v_full[prev], ((g - 1) / C::STAGES) & 1);
    wg_turn_wait(wg);
    wg_qk<C>(sq, w.qa, sm.stages + cur * C::STAGE_BYTES, &w.s[0][0][0]);
    wg_pv<C>(w.pa, sm.stages + prev * C::STAGE_BYTES + C::K_BYTES, &w.o[0][0][0], it == 1);
    wg_turn_pass<C>(wg);
    wgmma_wait<1>(); // S(it) is in; PV(it - 1) may still run
    wgmma_hold<C::BN / 2>(&w.s[0][0][0]);
    if (!wg_holds_k<C>(t, it)) wg_release(&sm.k_empty[cur]);
    wg_softmax<C, MASK, PLAIN>(sc, t.n_hi - 1 - it, w, rescale);
    wg_wait_after_softmax(w.st);
    wgmma_hold<C::DV / 2>(&w.o[0][0][0]);
    wgmma_hold<C::PA>(&w.pa[0][0]); // P stays live until the PV reading it is done
    wg_release(&sm.v_empty[prev]);
    wg_rescale_o<C>(w, rescale);
    wg_pack_p<C>(w.s[0], w.pa);
}

// SERIAL: issue the S of the key block at ring position g (its K waited for).
template <class C>
__device__ __forceinline__ void wg_serial_s(const wg_smem &sm, const char *sq, int g, wg_regs<C> &w) {
    int cur = g % C::STAGES;
    wg_acquire(sm, &sm.k_full[cur], (g / C::STAGES) & 1);
    wg_qk<C>(sq, w.qa, sm.stages + cur * C::STAGE_BYTES, &w.s[0][0][0]);
}

// SERIAL (cuDNN's order, which its kernel for d 64's short causal calls runs): each block's S, softmax and PV one after
// another in the warpgroup, no GEMM of its own under its softmax; the turn ring guards the exponentials instead, so one
// warpgroup's exponentials run while the other's GEMMs and row maxima do. In the SASS the turn holds the exponentials,
// the sums and O's rescale; ptxas issues the pass before P's packing, and it may move register-only code across either
// barrier (tests/sass_overlap.py checks that the exponentials stay between the wait and the pass; fencing them by
// memory order cost 2%, PERF.md step 155; a loose turn 16%, step 172). K(it) goes back once S(it) is in, V(it) once
// PV(it) is done. S(it + 1) is issued right behind PV(it), so that the tensor cores run the two back to back (PERF.md
// step 167); the tile's first S before the loop (wg_run_serial). mask: the block needs one (a branch in the block, so
// that one copy of its code serves every block: PERF.md step 157).
template <class C, bool PLAIN>
__device__ __forceinline__ void wg_serial_block(const score_consts &sc, const fwd_tile &t, const wg_smem &sm,
                                                const char *sq, int pos, int it, bool mask, wg_regs<C> &w) {
    int g = pos + it, cur = g % C::STAGES, wg = threadIdx.x / 128, par = (g / C::STAGES) & 1;
    float mul = PLAIN ? sc.mul : 1.0f, mx[2], rescale[2];
    wgmma_wait<0>(); // S(it), issued after PV(it - 1) (or before the loop)
    wgmma_hold<C::BN / 2>(&w.s[0][0][0]);
    wg_release(&sm.k_empty[cur]);
    int live = mask ? wg_scores<C, true, PLAIN>(sc, t.n_hi - 1 - it, w) : wg_scores<C, false, PLAIN>(sc, t.n_hi - 1 - it, w);
#pragma unroll
    for (int k = 0; k < 2; k++) mx[k] = softmax_max<C::BN / 8, C::LAZY>(w.st[k], w.s[0], k, mul, live);
    wg_turn_wait_after(wg, mx); // (ptxas may move a few exponentials above it: tests/sass_overlap.py)
#pragma unroll
    for (int k = 0; k < 2; k++)
        rescale[k] = softmax_exp<C::BN / 8, PLAIN && wg_skip_dead<C>()>(w.st[k], w.s[0], k, mx[k], mul, live);
    if (it > 0) wg_rescale_o<C>(w, rescale); // (no PV has written O yet at 0)
    wg_pack_p<C>(w.s[0], w.pa);
    wg_turn_pass<C>(wg);
    wg_acquire(sm, &sm.v_full[cur], par);
    wg_pv<C>(w.pa, sm.stages + cur * C::STAGE_BYTES + C::K_BYTES, &w.o[0][0][0], it == 0);
    if (it + 1 < t.n_hi - t.n_lo) { // S(it + 1) right behind PV(it): the tensor cores run the two back to back
        wg_serial_s<C>(sm, sq, g + 1, w);
        wgmma_wait<1>();
    } else {
        wgmma_wait<0>();
    }
    wgmma_hold<C::DV / 2>(&w.o[0][0][0]);
    wgmma_hold<C::PA>(&w.pa[0][0]);
    wg_release(&sm.v_empty[cur]);
}

// Whether O goes by TMA store (wg_store_tma): the host made the map only where every tile can (wg_tma_of).
// A kernel parameter alone, on purpose: with a condition that depends on the thread (this warpgroup's rows
// in the sequence), ptxas moved the block loops' ring and descriptor arithmetic off the uniform datapath
// (d 128: 608 -> 628 instructions a block, masked 824 -> 1006; PERF.md step 58).
template <class C> __device__ __forceinline__ bool wg_o_by_tma(const wg_tma &tm) { return C::PLAIN || tm.o_kind != WG_TMA_OFF; }

// The rows' final sums (w.inv: their inverses) and LSE (stored), which need only the softmax state: issued after
// the last PV for the epilogue by TMA store, which is then left with O (d 96 / 128 / 256 512-1k +1-4%, the d 128
// kernel's spills 59 -> 0; the PV does not cover the chain, step 100), or in the epilogue where that measured
// slower (C::LATE_FINISH: d 64 -2%, d 192 causal 512 -3%; PERF.md step 96). log2 and 1 / sum by the SFU (+1.9% at
// 512-1k, step 100).
template <class C>
__device__ __forceinline__ constexpr bool wg_finish_early() { return !C::FP8 && !C::LATE_FINISH; }

template <class C>
__device__ __forceinline__ void wg_finish_rows(const fc_problem &p, const fwd_tile &t, const wg_tma &tm, wg_regs<C> &w) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        float sum = quad_sum(w.st[k].l);
        w.inv[k] = sum > 0.0f ? fast_rcp(sum) : 0.0f; // (O rounded to T next: 2 ulp of fp32 do not show)
        int pm = t.m0 + slot_row<C>(k);
        // (pm < 0: tm.shift's rows before the sequence; the host's divisor: a division here was ~30 instructions; the
        // log only where an LSE is stored: ptxas computed it ahead of the test, on the epilogue's chain, PERF.md step 202)
        if (p.lse && lane % 4 == 0 && pm >= 0 && pm < t.packed_rows) {
            int r = (int)div_of(pm, tm.group);
            store_lse(p, t, r, t.hk * t.group + pm - r * t.group, softmax_lse<true>(w.st[k], sum));
        }
    }
}

// The last PV (ring position g; uses: the tile's use of its Q buffer, whose parity picks O_STAGE's barrier; first: it is
// also the warpgroup's first, its only block). Every
// S is in, so Q goes back first (q_empty: the next tile's Q into it), unless the epilogue stores O through Q's
// buffer (keep_q: wg_store_tma gives it back), and then the rows' sums and LSE are issued while the PV runs.
// O_STAGE with O by TMA: warpgroup 1 gives the block's K back and signals it free for warpgroup 0's O, keeping
// the V part for its own; warpgroup 0 keeps the K part and signals the V part free once its PV is done.
template <class C>
__device__ __forceinline__ void wg_last(const fc_problem &p, const fwd_tile &t, const wg_tma &tm, const wg_smem &sm,
                                        uint64_t *q_empty, int g, int uses, bool first, wg_regs<C> &w) {
    int last = g % C::STAGES, wg = wg_index();
    bool o_tma = wg_o_by_tma<C>(tm), keep_q = o_tma && !C::O_STAGE, v_keep = C::O_STAGE && o_tma && wg == 1;
    if (!keep_q) wg_release(q_empty);
    if (C::O_STAGE && (!o_tma || wg == 1)) wg_release(&sm.k_empty[last]); // (warpgroup 0's goes back after its O)
    if (C::O_STAGE && o_tma && wg == 1) named_bar_arrive(WG_BAR_K_FREE, 256);
    wg_acquire(sm, &sm.v_full[last], (g / C::STAGES) & 1);
    wg_pv<C>(w.pa, sm.stages + last * C::STAGE_BYTES + C::K_BYTES, &w.o[0][0][0], first);
    if (wg_finish_early<C>() && o_tma) wg_finish_rows<C>(p, t, tm, w); // (a branch: ptxas keeps the wait below it)
    wgmma_wait<0>();
    wgmma_hold<C::DV / 2>(&w.o[0][0][0]);
    wgmma_hold<C::PA>(&w.pa[0][0]);
    if (!v_keep) wg_release(&sm.v_empty[last]); // (warpgroup 1's goes back after its O)
    if (C::O_STAGE && o_tma && wg == 0) named_bar_arrive(WG_BAR_V_FREE + (uses & 1), 256);
}

// Whether warpgroups skip the blocks their rows cannot see (wg_blocks_unseen): C::SKIP, and d 64's three
// warpgroups on the grid walk (P false: a masked call whose heads' tiles do not fill the slots in rounds, or
// is ragged; a non-causal call takes it only for ragged lengths past 2k rows, where no block is skipped): d 64
// causal 4k / 8k +4% when those took the grid (PERF.md step 89), where the same check on every walk had lost
// 2.4% without a mask (step 83).
template <class C, bool P>
__device__ __forceinline__ constexpr bool wg_skips() {
    return C::SKIP || (C::CONSUMERS == 3 && !P);
}

// How many of the tile's key blocks, from its last (n_hi - 1) down, warpgroup g's rows cannot see, at most all but
// one, and the rows' query range [*r_lo, *r_hi) (the tile's when it has none). C::SKIP_EMPTY: a warpgroup whose rows
// all lie past the sequence's last (or before its first: tm.shift) skips all but one whether the shape skips or not
// (on d 64's two serial warpgroups the same check let ptxas hoist 17 of 64 exponentials above the turn: a loose
// turn, PERF.md step 172; there, as on every 128-row tile, no warpgroup is empty at lengths of 64-row multiples).
// Under a causal mask the first warpgroup's rows end a block or so before the tile's last row (blocks of 80 or 112
// keys, or three warpgroups), so it skips the tile's last block instead of computing it masked out. A warpgroup that
// sees none of the blocks computes the first masked (its rows see nothing, or are past the tile's and not stored):
// so every warpgroup runs the same code from its first block on, and O stays in the registers the loops keep it in
// (a branch around them cost ~140 register moves a tile, -4% at 512 keys). (Blocks at a left window edge are
// computed, masked.)
template <class C, bool P>
__device__ __forceinline__ int wg_blocks_unseen(const fc_problem &p, const fwd_tile &t, const wg_tma &tm, int g, int *r_lo,
                                                int *r_hi) {
    int pm0 = max(t.m0 + 64 * g, 0), pm1 = min(t.m0 + 64 * g + 64, t.packed_rows), j0 = 0, j1 = 0;
    *r_lo = t.r_lo;
    *r_hi = t.r_hi;
    if (!wg_skips<C, P>()) return C::SKIP_EMPTY && pm0 >= pm1 ? max(t.n_hi - t.n_lo - 1, 0) : 0;
    if (pm0 >= pm1) return max(t.n_hi - t.n_lo - 1, 0);
    *r_lo = (int)div_of(pm0, tm.group);
    *r_hi = (int)div_of(pm1 - 1, tm.group) + 1;
    fc_key_range(&p, t.s.s_q, t.s.s_k, *r_lo, *r_hi, &j0, &j1);
    int hi = j1 > j0 ? (j1 + C::BN - 1) / C::BN : 0;
    return max(t.n_hi - max(t.n_lo + 1, min(t.n_hi, hi)), 0);
}

// Key blocks n_hi - 1 down to n_lo of tile t (ring positions pos ..): the masked ones (sequence end, causal
// diagonal, right window edge) come first, those at a left window edge last, so three loops cover them with
// one mask choice each; rows r_lo .. r_hi - 1 decide which need a mask.
template <class C, bool PLAIN>
__device__ __forceinline__ void wg_run_blocks(const score_consts &sc, const fwd_tile &t, const wg_smem &sm, const char *sq,
                                              int pos, int r_lo, int r_hi, uint64_t *stored, wg_regs<C> &w) {
    int n_blocks = t.n_hi - t.n_lo;
    auto masked = [&](int it) { return block_needs_mask(sc, r_lo, r_hi, (t.n_hi - 1 - it) * C::BN, C::BN); };
    if (masked(0))
        wg_first<C, true, PLAIN>(sc, t, sm, sq, pos, 0, stored, w);
    else
        wg_first<C, false, PLAIN>(sc, t, sm, sq, pos, 0, stored, w);
    int it = 1;
#pragma unroll 1
    for (; it < n_blocks && masked(it); it++) wg_step<C, true, PLAIN>(sc, t, sm, sq, pos, it, w);
    // (the plain kernel has no left window, wg_plain_call: past the first unmasked block every block is unmasked, so its
    // loop runs on without block_needs_mask's dozen uniform instructions a block; PERF.md step 199)
#pragma unroll 1
    for (; it < n_blocks && (C::PLAIN || !masked(it)); it++) wg_step<C, false, PLAIN>(sc, t, sm, sq, pos, it, w);
#pragma unroll 1
    for (; it < n_blocks; it++) wg_step<C, true, PLAIN>(sc, t, sm, sq, pos, it, w);
}

// SERIAL: key blocks n_hi - 1 down to n_lo of tile t by wg_serial_block, in one loop (the mask a branch inside it: one
// copy of the block's code, half the instructions the warps fetch; PERF.md step 157).
template <class C, bool PLAIN>
__device__ __forceinline__ void wg_run_serial(const score_consts &sc, const fwd_tile &t, const wg_smem &sm, const char *sq,
                                              int pos, int r_lo, int r_hi, uint64_t *stored, wg_regs<C> &w) {
    wg_serial_s<C>(sm, sq, pos, w); // (each block issues the next one's S behind its PV)
    if (stored) wg_release_stored(stored); // (under the S: wg_consume)
#pragma unroll 1
    for (int it = 0; it < t.n_hi - t.n_lo; it++) {
        bool mask = block_needs_mask(sc, r_lo, r_hi, (t.n_hi - 1 - it) * C::BN, C::BN);
        wg_serial_block<C, PLAIN>(sc, t, sm, sq, pos, it, mask, w);
    }
}

// The split's key blocks, last to first, as this warpgroup's rows see them: those past its rows' last key
// skipped (wg_skip: the turns and the buffers go on), the others by wg_run_blocks, then the last PV.
template <class C, bool PLAIN>
__device__ __forceinline__ void wg_blocks(const fc_problem &p, const score_consts &sc, const fwd_tile &t, const wg_smem &sm,
                                          const wg_tma &tm, const char *sq, uint64_t *q_empty, int pos, int uses, int skip,
                                          int r_lo, int r_hi, uint64_t *stored, wg_regs<C> &w) {
#pragma unroll 1
    for (int it = 0; it < skip; it++) wg_skip<C>(sm, pos + it);
    fwd_tile u = t; // the warpgroup's blocks
    u.n_hi = t.n_hi - skip;
    if constexpr (C::SERIAL) {
        wg_run_serial<C, PLAIN>(sc, u, sm, sq, pos + skip, r_lo, r_hi, stored, w);
        bool o_tma = wg_o_by_tma<C>(tm);
        if (!o_tma) wg_release(q_empty); // (else the epilogue stores O through Q's buffer: wg_store_tma gives it back)
        if (wg_finish_early<C>() && o_tma) wg_finish_rows<C>(p, t, tm, w);
    } else {
        wg_run_blocks<C, PLAIN>(sc, u, sm, sq, pos + skip, r_lo, r_hi, stored, w);
        wg_last<C>(p, t, tm, sm, q_empty, pos + t.n_hi - t.n_lo - 1, uses, u.n_hi - t.n_lo == 1, w);
    }
}

// The epilogue by TMA store (tm.o_kind: dense, one split; rows past s_q are outside the map): its O,
// normalised and rounded to T, written by stmatrix (+0.6% in A/B, 512 keys +0.2..+3%: PERF.md step 124) into its
// own rows of the tile's Q buffer (its last S is in; the layout the Q boxes came in) or, O_STAGE, of the last
// block's stage (g 0: its K part once warpgroup 1's last S is in;
// g 1: its V part once warpgroup 0's last PV is done: 64-row boxes), then one thread stores them, DV / 64
// boxes. The buffer goes back once they are read (wg_release_stored, *stored: the barrier to arrive on then), at
// the warpgroup's next tile's start or under its first S (O_LATE; wg_consume).
// store_rows' four-byte stores from registers took 3-16k cycles a tile under the K/V stream (step 58).

template <class C>
__device__ __forceinline__ void wg_store_tma(const fc_problem &p, const fwd_tile &t, const wg_tma &tm, wg_regs<C> &w,
                                             const wg_smem &sm, char *q, uint64_t *q_empty, int last, int uses,
                                             uint64_t *&stored) {
    typedef typename C::T T;
    int lane = threadIdx.x % 32;
    constexpr int rows = C::O_STAGE ? 64 : C::BM; // of a box in shared memory
    int wg = wg_index();
    char *o = C::O_STAGE ? sm.stages + last * C::STAGE_BYTES + wg * C::K_BYTES : q + 64 * wg * 128;
    if (!wg_finish_early<C>()) wg_finish_rows<C>(p, t, tm, w);
    if (C::O_STAGE) named_bar_sync(wg ? WG_BAR_V_FREE + (uses & 1) : WG_BAR_K_FREE, 256);
    // stmatrix x4: matrices (chunk f, rows 0-7 / 8-15 of the warp's 16), (f + 1, the same): lane l addresses row l % 8 of
    // matrix l / 8, and its registers hold the accumulator fragment's own row and column pairs (tile/copy.cuh stsm_x4)
    uint32_t o_base = smem_u32(o);
    int row = (threadIdx.x / 32) % 4 * 16 + 8 * (lane / 8 % 2) + lane % 8;
#pragma unroll
    for (int f = 0; f < C::DV / 8; f += 2) {
        uint32_t r[4] = {pack2<T>(w.o[0][f][0] * w.inv[0], w.o[0][f][1] * w.inv[0]),
                         pack2<T>(w.o[0][f][2] * w.inv[1], w.o[0][f][3] * w.inv[1]),
                         pack2<T>(w.o[0][f + 1][0] * w.inv[0], w.o[0][f + 1][1] * w.inv[0]),
                         pack2<T>(w.o[0][f + 1][2] * w.inv[1], w.o[0][f + 1][3] * w.inv[1])};
        stsm_x4(o_base + sw128_offset(row, f + lane / 16, rows), r);
    }
    fence_proxy_async();
    named_bar_sync(2 + wg, 128);
    // (A box of rows before 0, tm.shift's, is not stored: a TMA store at a negative row faults, illegal instruction)
    if (threadIdx.x % 128 == 0 && t.m0 + 64 * wg >= 0) {
        int row = (int)t.s.q_row0 + (int)div_of(t.m0 + 64 * wg, tm.group), outer = tm.o_kind == WG_TMA_DENSE ? t.b : 0;
        for (int f = 0; f < C::DVS / 64; f++) // a box past d_v (d 96: features 96-127) is clipped by the map
            tma_store_4d(&tm.o, o + f * rows * 128, 64 * f, t.hk * t.group, row, outer);
        tma_store_commit();
    }
    stored = !C::O_STAGE ? q_empty : wg ? &sm.v_empty[last] : &sm.k_empty[last];
}

// A warpgroup's state for one tile: its scores' constants, its rows' query range, the blocks it skips
// (wg_blocks_unseen), the output's scale (FP8).
struct wg_tile_state {
    score_consts sc;
    int r_lo, r_hi, skip;
    float out_scale;
};

// Warpgroup g's setup of tile t: its rows' score and softmax state, the blocks it skips, worked out while
// its Q may still be loading.
template <class C, bool P>
__device__ __forceinline__ wg_tile_state wg_tile_setup(const fc_problem &p, const fwd_tile &t, const wg_tma &tm, wg_regs<C> &w) {
    wg_tile_state ts;
    ts.sc = score_consts_of(p, t.s.s_q, t.s.s_k);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        int pm = min(max(t.m0 + slot_row<C>(k), 0), t.packed_rows - 1), r = (int)div_of(pm, tm.group);
        int h = t.hk * t.group + pm - r * t.group;
        w.rs[k].r = r;
        w.rs[k].slope = !C::PLAIN && p.alibi ? p.alibi[t.b * p.alibi_sb + h * p.alibi_sh] * FC_LOG2E : 0.0f;
        bool sink = !C::PLAIN && p.sinks && t.split == 0;
        w.st[k] = softmax_init(sink, sink ? p.sinks[h * p.sinks_sh] * FC_LOG2E : 0.0f);
    }
    ts.out_scale = 1.0f; // (O is not zeroed: the tile's first PV overwrites it, wg_pv; a tile of no blocks zeroes it, wg_tile_epilogue)
    if constexpr (C::FP8) ts.out_scale = apply_descales(p, t, ts.sc);
    ts.skip = wg_blocks_unseen<C, P>(p, t, tm, wg_index(), &ts.r_lo, &ts.r_hi);
    return ts;
}

// Tile t's Q (the CTA's tile k, in buffer k % QBUF, filled there for the uses-th time) waited for, rotated where
// asked; the warpgroup's 64 rows of it (at a uniform address: wg_index).
template <class C>
__device__ __forceinline__ const char *wg_tile_q(const fc_problem &p, const fwd_tile &t, const wg_smem &sm, int k, int uses) {
    int b = k % C::QBUF, g = wg_index();
    char *q = sm.q + b * C::Q_BYTES;
    mbar_wait(&sm.q_full[b], uses & 1);
    if (!C::FP8 && !C::PLAIN && p.rotary_cos) { // (FP8 q: no rotary, fwd.cu)
        wg_rotate_q<C>(p, t, q, g);
        fence_proxy_async();
        named_bar_sync(2 + g, 128);
    }
    return q + g * 64 * 128;
}

// Tile t's key blocks against the warpgroup's rows (ring positions from pos), then the last PV. Plain scores (no
// softcap, no ALiBi, scale > 0: the common case) take the path with the scale folded into the exponent.
template <class C>
__device__ __forceinline__ void wg_tile_blocks(const fc_problem &p, const fwd_tile &t, const wg_smem &sm, const wg_tma &tm,
                                               const wg_tile_state &ts, const char *sq, int k, int uses, int pos,
                                               uint64_t *stored, wg_regs<C> &w) {
    uint64_t *q_empty = &sm.q_empty[k % C::QBUF];
    if (C::PLAIN || plain_scores<C::FP8>(p, ts.sc))
        wg_blocks<C, true>(p, ts.sc, t, sm, tm, sq, q_empty, pos, uses, ts.skip, ts.r_lo, ts.r_hi, stored, w);
    else
        wg_blocks<C, false>(p, ts.sc, t, sm, tm, sq, q_empty, pos, uses, ts.skip, ts.r_lo, ts.r_hi, stored, w);
}

// Tile t's epilogue: O by TMA store (stored: the barrier of the buffer it goes through, given back once read) or
// from registers.
template <class C>
__device__ __forceinline__ void wg_tile_epilogue(const fc_problem &p, const fwd_tile &t, fc_split_ws ws, const wg_smem &sm,
                                                 const wg_tma &tm, const wg_tile_state &ts, int k, int uses, int pos,
                                                 wg_regs<C> &w, uint64_t *&stored) {
    if (!C::FP8 && (C::PLAIN || (t.n_hi > t.n_lo && wg_o_by_tma<C>(tm)))) { // (a plain call's tiles all have blocks)
        int last = (pos + t.n_hi - t.n_lo - 1) % C::STAGES;
        wg_store_tma<C>(p, t, tm, w, sm, sm.q + k % C::QBUF * C::Q_BYTES, &sm.q_empty[k % C::QBUF], last, uses, stored);
    } else {
        if (t.n_hi <= t.n_lo) // no key blocks, so no PV wrote O: its rows see no key
#pragma unroll
            for (int f = 0; f < C::DV / 8; f++) w.o[0][f][0] = w.o[0][f][1] = w.o[0][f][2] = w.o[0][f][3] = 0.0f;
        store_rows<C>(p, t, ws, w.o, w.st, ts.out_scale);
    }
}

// The consumers' walk of the CTA's tiles: each tile's setup, Q, key blocks and epilogue. stored: the barrier of the
// buffer (Q's, or O_STAGE a stage's part) whose O the previous tile stored by TMA, given back once read: at the next
// tile's start, or where C::O_LATE right after its first S is issued (wg_first, wg_run_serial), so that thread 0's wait
// for the store's read (~1k cycles from the store, PERF.md step 71) runs beside that S instead of holding warp 0, and
// with it the S, which waits for all four warps (step 203; the next tile's Q is in the other buffer). (Chaining the
// tiles, the next tile's first S issued before the epilogue, measured 4-10% slower: PERF.md step 109.)
template <class C, bool P>
__device__ __forceinline__ void wg_consume(const fc_problem &p, fc_split_ws ws, const wg_smem &sm, const wg_tma &tm) {
    int pos = 0, uses0 = 0, uses1 = 0; // tiles through Q buffers 0 and 1
    uint64_t *stored = nullptr;        // the barrier of a buffer holding O on its way out (wg_store_tma)
    int steps = wg_steps<C, P>(p, tm);
    // The masked solo walk: the two positions' geometry once (wg_geom_at), each tile then only its head (d 64-192:
    // at d 256, whose O alone takes 128 registers a thread, the six fields pushed the block loops' ring and descriptor
    // arithmetic onto the vector datapath, 216-222 R2UR, -3..-4% at 512 keys: PERF.md step 180)
    bool parity_walk = P && C::DV < 256 && wg_masked(p) && wg_solo<C>(tm);
    wg_geom even = {}, odd = {};
    if (parity_walk) {
        even = wg_geom_at<C>(p, tm, blockIdx.x);
        odd = wg_geom_at<C>(p, tm, gridDim.x - 1 - blockIdx.x);
    }
    wg_turns_open<C>(threadIdx.x / 128);
    for (int k = 0; k < steps; k++) {
        fwd_tile t;
        if (parity_walk ? !wg_tile_of_parity<C>(p, tm, k, k % 2 ? odd : even, t) : !wg_tile_at<C, P>(p, tm, k, t)) continue;
        int uses = k % C::QBUF ? uses1 : uses0;
        wg_regs<C> w;
        wg_tile_state ts = wg_tile_setup<C, P>(p, t, tm, w);
        uint64_t *prev = stored; // (given back under this tile's first S)
        stored = nullptr;
        if (!C::O_LATE && prev) { // (O_STAGE: its stage may be the next block's of a warpgroup that skips it, wg_skip)
            wg_release_stored(prev);
            prev = nullptr;
        }
        if (t.n_hi > t.n_lo)
            wg_tile_blocks<C>(p, t, sm, tm, ts, wg_tile_q<C>(p, t, sm, k, uses), k, uses, pos, prev, w);
        else if (prev)
            wg_release_stored(prev);
        wg_tile_epilogue<C>(p, t, ws, sm, tm, ts, k, uses, pos, w, stored);
        if (t.n_hi > t.n_lo) (k % C::QBUF ? uses1 : uses0)++; // the producer loads Q only for tiles with key blocks
        pos += t.n_hi - t.n_lo;
    }
    if (stored) wg_release_stored(stored); // (shared memory must outlive the store's reads)
    wg_turns_close(threadIdx.x / 128);
}

// ---------------------------------------------------------------------------------------------
// The kernel. Grid: (query tiles / 4 or 2, splits, batch * h_k), or persistent CTAs (P; wg_tile_at). Block: 128 (CONSUMERS + 1) threads.

template <class C, bool P>
__global__ void __launch_bounds__(C::THREADS, 1) fwd_wgmma_kernel(const __grid_constant__ fc_problem p, fc_split_ws ws,
                                                                  const __grid_constant__ wg_tma tm) {
    // Declared 1024-byte aligned (the kernel has no static shared memory), where it had been rounded up within 1 KB
    // of slack: ptxas knows every tile's base is aligned (block loops 10-13 instructions shorter at d 64 / 128)
    extern __shared__ __align__(1024) char wg_smem_raw[];
    wg_smem sm = wg_smem_of<C>(wg_smem_raw);
    sm.fence = !(C::SERIAL && wg_solo<C>(tm)); // (wg_acquire)
    if (threadIdx.x == 0) {
        int producers = wg_solo<C>(tm) ? 1 : 128; // arrivals on a full barrier (wg_produce)
        for (int b = 0; b < C::QBUF; b++) {
            mbar_init(&sm.q_full[b], producers);
            mbar_init(&sm.q_empty[b], 4 * C::CONSUMERS);
        }
        for (int i = 0; i < C::STAGES; i++) {
            mbar_init(&sm.k_full[i], producers);
            mbar_init(&sm.v_full[i], producers);
            mbar_init(&sm.k_empty[i], 4 * C::CONSUMERS); // one arrival per consumer warp
            mbar_init(&sm.v_empty[i], 4 * C::CONSUMERS);
        }
        if (C::FP8)
            for (int i = 0; i < 2; i++) mbar_init(&sm.v_land[i], 128);
        mbar_fence_init();
    }
    __syncthreads();
    // Launched early (PDL): resident and set up while the previous kernel in the stream ends, then wait for it
    // before any global access; the next kernel may start launching at once (its CTAs wait likewise).
    pdl_wait();
    pdl_launch_dependents();
    if (threadIdx.x >= 128 * C::CONSUMERS) {
        setmaxnreg_dec<C::PRODUCER_REGS>();
        wg_produce<C, P>(p, ws, sm, tm);
    } else {
        setmaxnreg_inc<C::CONSUMER_REGS>();
        wg_consume<C, P>(p, ws, sm, tm);
    }
}
