// gather_ceiling.cu — read ceiling of a paged KV cache gathered as decode does (no attention math).
//
// K and V pools: (pages, page_size, h_k, d) bf16, the page table a random permutation (as compare.py).
// Access patterns over batch b x s_k tokens, each byte of K and V read once:
//   per-head:  a warp walks one (sequence, KV head) range: 256-byte rows, one per token (flashc's decode);
//   all-heads: a warp walks a token range reading every head's row: 2 KB contiguous per token;
//   per-head with the L2::256B prefetch-size hint on its loads;
//   per-head x2: per-head with twice the loads in flight (8 tokens a lane group: 256 B a lane);
//   head pairs: a warp reads two neighbouring heads' rows of a token in one access (512 contiguous bytes at 256-byte
//   rows: a decode CTA of two KV heads);
//   per-head x4 warps: per-head with CTAs of four warps (consecutive splits of one head) and four times the splits:
//   64 warps an SM, the all-heads copy's count;
//   heads-in-CTA: per-head warps, but a CTA's HK warps take the HK heads of one token range (warp w, head w), so the
//   rows a CTA reads at once are each token's HK heads side by side (a decode CTA of one warp per KV head).
// build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o gather_ceiling bench/gather_ceiling.cu
// usage: gather_ceiling [b s_k [row_bytes]]   prints GB/s per (pattern, page size), median of 20 runs; row_bytes: a
//        head's row, 256 (d 128 in bf16, the default) or 128 (d 128 in fp8: an e4m3 cache's row).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int HK = 8, D = 128;
__constant__ int ROW; // bytes per head row: 256 or 128 (fp8)

// 16 bytes past L1; HINT: with the L2::256B prefetch-size hint (L2 fetches the 256 bytes around p from DRAM at once).
template <bool HINT = false> __device__ __forceinline__ int4 ld_cg(const int4 *p) {
    int4 r;
    if (HINT)
        asm volatile("ld.global.cg.L2::256B.v4.s32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    else
        asm volatile("ld.global.cg.v4.s32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// One warp's walk: tokens [t0, t1) of sequence b, heads hk .. hk + HP - 1 of each (HP x ROW contiguous bytes a token),
// U tokens (K and V) per row's lanes in flight; returns a value of what it read (so the loads are kept).
template <bool HINT, int U, int HP>
__device__ __forceinline__ int walk_heads(const char *k, const char *v, const int *table, int pps, int ps, int b, int hk,
                                          int t0, int t1, int lane) {
    int acc = 0, lpr = HP * ROW / 16, rows = 32 / lpr; // lanes a row, rows a warp access
    for (int t = t0 + lane / lpr; t < t1; t += U * rows) {
        int4 x[2 * U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int tt = min(t + rows * u, t1 - 1);
            long long page = table[b * pps + tt / ps];
            long long off = ((page * ps + tt % ps) * HK + hk) * ROW + (lane % lpr) * 16;
            x[2 * u] = ld_cg<HINT>((const int4 *)(k + off));
            x[2 * u + 1] = ld_cg<HINT>((const int4 *)(v + off));
        }
#pragma unroll
        for (int u = 0; u < 2 * U; u++) acc ^= x[u].x ^ x[u].w;
    }
    return acc;
}

// grid (HK / HP * splits / warps, b), warps of 32 threads: warp w of CTA x walks split x / (HK / HP) * warps + w of
// sequence y, heads from x % (HK / HP) * HP (a CTA's warps: consecutive splits of one head group).
template <bool HINT, int U = 4, int HP = 1>
__global__ void per_head(const char *k, const char *v, const int *table, int pps, int ps, int s_k, int splits, int *sink) {
    int hk = blockIdx.x % (HK / HP) * HP, b = blockIdx.y, lane = threadIdx.x % 32;
    int split = blockIdx.x / (HK / HP) * (blockDim.x / 32) + threadIdx.x / 32;
    int per = (s_k + splits - 1) / splits, t0 = split * per, t1 = min(s_k, t0 + per);
    int acc = walk_heads<HINT, U, HP>(k, v, table, pps, ps, b, hk, t0, t1, lane);
    if (acc == 0x12345678) sink[0] = acc;
}

// grid (splits, b), 32 HK threads: warp w walks head w of tokens [split * per, +per) of sequence y, as per_head does.
__global__ void heads_in_cta(const char *k, const char *v, const int *table, int pps, int ps, int s_k, int splits, int *sink) {
    int per = (s_k + splits - 1) / splits, t0 = blockIdx.x * per, t1 = min(s_k, t0 + per);
    int acc = walk_heads<false, 4, 1>(k, v, table, pps, ps, blockIdx.y, threadIdx.x / 32, t0, t1, threadIdx.x % 32);
    if (acc == 0x12345678) sink[0] = acc;
}

// grid (splits, b), 128 threads: tokens [split * per, +per) of sequence y, all heads (2 KB rows).
__global__ void all_heads(const char *k, const char *v, const int *table, int pps, int ps, int s_k, int splits, int *sink) {
    int split = blockIdx.x, b = blockIdx.y;
    int per = (s_k + splits - 1) / splits, t0 = split * per, t1 = min(s_k, t0 + per);
    int acc = 0, tpt = HK * ROW / 16; // threads a token (all heads)
    for (int t = t0 + threadIdx.x / tpt * 4; t < t1; t += 4 * (512 / tpt)) {
        int4 x[8];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int tt = min(t + u, t1 - 1);
            long long page = table[b * pps + tt / ps];
            long long off = (page * ps + tt % ps) * HK * ROW + (threadIdx.x % tpt) * 16;
            x[2 * u] = ld_cg((const int4 *)(k + off));
            x[2 * u + 1] = ld_cg((const int4 *)(v + off));
        }
#pragma unroll
        for (int u = 0; u < 8; u++) acc ^= x[u].x ^ x[u].w;
    }
    if (acc == 0x12345678) sink[0] = acc;
}

int main(int argc, char **argv) {
    int b = argc > 2 ? atoi(argv[1]) : 8, s_k = argc > 2 ? atoi(argv[2]) : 32768, row = argc > 3 ? atoi(argv[3]) : 256;
    if (row != 256 && row != 128) { printf("row_bytes: 256 or 128\n"); return 1; }
    CK(cudaMemcpyToSymbol(ROW, &row, sizeof row));
    size_t bytes = (size_t)b * s_k * HK * row; // per K or V
    char *k, *v;
    int *sink, *table;
    CK(cudaMalloc(&k, bytes)); CK(cudaMalloc(&v, bytes)); CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(k, 1, bytes)); CK(cudaMemset(v, 2, bytes));
    CK(cudaMalloc(&table, (size_t)b * s_k * 4));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    printf("gather ceiling: b %d x s_k %d, h_k %d, d %d, %d-byte rows: %.0f MB of K+V\n", b, s_k, HK, D, row, 2.0 * bytes / 1e6);
    for (int ps : {1, 16, 256, s_k}) { // s_k: one page a sequence, the dense (b, s_k, h_k, d) layout
        int pps = s_k / ps;
        std::vector<int> h(b * pps);
        for (int i = 0; i < b * pps; i++) h[i] = i;
        srand(1);
        for (int i = b * pps - 1; i > 0; i--) std::swap(h[i], h[rand() % (i + 1)]);
        CK(cudaMemcpy(table, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        for (int pat = 0; pat < 7; pat++) { // per head, all heads, L2::256B hint, heads in a CTA, per head x2, head pairs, x4 warps
            int splits = pat == 0 || pat == 2 || pat == 4 ? std::max(1, sms * 16 / (b * HK)) : pat == 1 ? std::max(1, sms * 8 / b)
                       : pat == 5 ? std::max(1, sms * 32 / (b * HK)) : pat == 6 ? 4 * std::max(1, sms * 16 / (b * HK))
                                                                     : std::max(1, sms * 2 / b);
            std::vector<float> ms;
            for (int rep = 0; rep < 23; rep++) {
                CK(cudaEventRecord(e0));
                if (pat == 0) per_head<false><<<dim3(HK * splits, b), 32>>>(k, v, table, pps, ps, s_k, splits, sink);
                else if (pat == 1) all_heads<<<dim3(splits, b), 512>>>(k, v, table, pps, ps, s_k, splits, sink);
                else if (pat == 2) per_head<true><<<dim3(HK * splits, b), 32>>>(k, v, table, pps, ps, s_k, splits, sink);
                else if (pat == 4) per_head<false, 8><<<dim3(HK * splits, b), 32>>>(k, v, table, pps, ps, s_k, splits, sink);
                else if (pat == 6) per_head<false><<<dim3(HK * splits / 4, b), 128>>>(k, v, table, pps, ps, s_k, splits, sink);
                else if (pat == 5) per_head<false, 4, 2><<<dim3(HK / 2 * splits, b), 32>>>(k, v, table, pps, ps, s_k, splits, sink);
                else heads_in_cta<<<dim3(splits, b), 32 * HK>>>(k, v, table, pps, ps, s_k, splits, sink);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float t; CK(cudaEventElapsedTime(&t, e0, e1));
                if (rep >= 3) ms.push_back(t);
            }
            std::sort(ms.begin(), ms.end());
            float med = ms[ms.size() / 2];
            const char *name[] = {"per-head", "all-heads", "per-head, L2::256B", "heads-in-CTA", "per-head x2", "head pairs", "per-head x4 warps"};
            printf("  %-18s page %5d: %7.1f us  %6.0f GB/s\n", name[pat], ps, med * 1e3, 2.0 * bytes / (med * 1e-3) / 1e9);
        }
    }
    return 0;
}
