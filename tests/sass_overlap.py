"""sass_overlap.py — reads the compiled wgmma prefill kernels and checks that the softmax overlaps the P·V GEMM.

fwd_wgmma.cuh's main loop issues S(j) = Q K(j)^T and O += P(j-1) V(j-1), waits for S(j) alone
(`wgmma.wait_group 1`), computes the softmax of S(j), and only then waits for the P·V (`wait_group 0`).
ptxas may legally sink register-only arithmetic below the second wait, which serialises the softmax
after the GEMM (it did, on the plain-score path). This test disassembles every fwd_wgmma_kernel
instantiation in the library (cuobjdump -sass; no GPU needed) and, at every `WARPGROUP.DEPBAR.LE gsb0, 0x1`
(the first wait), counts the MUFU.EX2 before the next WARPGROUP.DEPBAR: the exponentials of the thread's
two rows of a key block, BN / 2 of them (BN read from the S wgmma's shape: HGMMA.64xBNx16, or the FP8
kernels' QGMMA.64xBNx32), must be there. And the block loops (the innermost loop around each first wait) must
have no R2UR: their ring and descriptor arithmetic stays on the uniform datapath (a branch on a value ptxas cannot
take as warp-uniform moved it to the vector datapath, each wgmma's descriptors then moved back by R2UR:
docs/PERF.md steps 58, 125).
A kernel with no first wait runs the serial order (fwd_wgmma.cuh's SERIAL shapes: S, softmax, PV one after another,
the warpgroups taking turns at the exponentials): there, at every wait for an S (`DEPBAR.LE gsb0, 0x0` after a wgmma
of N = BN), three quarters of the BN / 2 exponentials at least must come after the turn's BAR.SYNC and before the
turn's pass (the next BAR.ARV): ptxas moves register code across both barriers at will, since it sees no register of
them; a handful outside is its usual schedule, most of them below the pass runs the warpgroups' exponentials side by
side and cost 16% (docs/PERF.md step 172), most above the sync likewise (step 176). With a softcap, whose tanh ptxas
lays out in branches elsewhere, only the turn is checked. And no shuffle (SHFL.BFLY: the row max's, the only ones
in a block) may come inside the turn: a barrier hoisted into the max put its shuffles' latency on every warpgroup's
turn (d 64 2k -7.6%, docs/PERF.md step 193).

usage: python3 tests/sass_overlap.py [LIB]   (default build/libflashc.so)
Exit: 0 all passed, 1 a kernel failed, 2 nothing checked (no cuobjdump, or no wgmma kernel in LIB).
"""
import os
import re
import shutil
import subprocess
import sys


def find_cuobjdump():
    for d in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if d and os.access(os.path.join(d, "bin", "cuobjdump"), os.X_OK):
            return os.path.join(d, "bin", "cuobjdump")
    return shutil.which("cuobjdump")


def functions(sass):
    """(name, [instruction lines]) of every function in cuobjdump -sass output."""
    out, name, body = [], None, []
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                out.append((name, body))
            name, body = m.group(1), []
        elif name and "/*" in line:
            body.append(line)
    if name:
        out.append((name, body))
    return out


def check_kernel(body):
    """(sites, fewest MUFU.EX2 at a site, BN) over the kernel's first waits; sites = 0 when there is none."""
    sites, fewest, bn = 0, None, None
    for i, line in enumerate(body):
        m = re.search(r"[HQ]GMMA\.64x(\d+)x(16|32)", line)
        if m and bn is None:
            bn = int(m.group(1))  # the first wgmma of the consumer is an S = Q K^T of N = BN
        if re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1", line):
            n = 0
            for nxt in body[i + 1:]:
                if "WARPGROUP.DEPBAR" in nxt:
                    break
                n += "MUFU.EX2" in nxt
            sites += 1
            fewest = n if fewest is None else min(fewest, n)
    return sites, fewest, bn


def check_serial(body, bn):
    """(sites, fewest MUFU.EX2 between the turn's BAR.SYNC and its pass, BAR.ARV) over a serial kernel's waits for an
    S. A site whose scores take a softcap (tanh: MUFU.RCP beside its MUFU.EX2, branchy code that ptxas lays out apart)
    must have the turn; its exponentials are not counted. A wait with no exponential before the next wgmma is not a
    softmax's (ptxas puts one before the epilogue's first use of O). Also returns the sites' addresses (for block_loop_r2ur)
    and the most SHFL.BFLY inside a turn."""
    sites, fewest, last_n, where, shuffles = 0, None, None, [], 0
    for i, line in enumerate(body):
        # S: A and B from shared memory (a serial kernel never takes Q from registers: fwd_wgmma.cuh wg_cfg Q_REGS)
        m = re.search(r"[HQ]GMMA\.64x(\d+)x(16|32)\S* R\d+, gdesc", line)
        if re.search(r"[HQ]GMMA\.", line):
            last_n = int(m.group(1)) if m else None  # (P V: A from registers)
        if re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0", line) and last_n == bn:
            n, turn, passed, tanh, exps, shfl = 0, False, False, False, 0, 0
            for nxt in body[i + 1:]:
                if "WARPGROUP.ARRIVE" in nxt or "WARPGROUP.DEPBAR" in nxt:
                    break
                turn = turn or "BAR.SYNC" in nxt
                passed = passed or (turn and "BAR.ARV" in nxt)
                tanh = tanh or "MUFU.RCP" in nxt
                n += turn and not passed and "MUFU.EX2" in nxt
                exps += "MUFU.EX2" in nxt
                shfl += turn and not passed and "SHFL.BFLY" in nxt
            if exps == 0:
                continue
            n = n if not tanh else (bn // 2 if turn else 0)
            sites += 1
            fewest = n if fewest is None else min(fewest, n)
            shuffles = max(shuffles, shfl)
            where.append(line)
    return sites, fewest, where, shuffles


def block_loop_r2ur(body, wait=r"DEPBAR.LE gsb0, 0x1", only=None):
    """R2UR instructions inside the block loops: the innermost loop (backward branch) around each first wait (only:
    the body lines of the waits to take, where not every such wait is a block's)."""
    ins = []
    for line in body:
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2)))
    at = {a: i for i, (a, _) in enumerate(ins)}
    loops = []  # (first, last) instruction index of every backward branch's loop
    for i, (a, text) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        stub = i >= 2 and "TRYWAIT" in ins[i - 2][1]  # the way back from an mbarrier wait's out-of-line retry: no loop
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at and not stub:
            loops.append((at[int(m.group(1), 16)], i))
    inner = set()
    addrs = None if only is None else {int(re.match(r"\s*/\*([0-9a-f]+)\*/", l).group(1), 16) for l in only}
    for w, (a, text) in enumerate(ins):
        if re.search(wait, text) and (addrs is None or a in addrs):
            around = [l for l in loops if l[0] <= w <= l[1]]
            if around:
                inner.add(min(around, key=lambda l: l[1] - l[0]))
    return sum("R2UR" in ins[k][1] for lo, hi in inner for k in range(lo, hi + 1))


def main():
    lib = sys.argv[1] if len(sys.argv) > 1 else "build/libflashc.so"
    tool = find_cuobjdump()
    if not tool:
        print("sass_overlap: no cuobjdump (CUDA toolkit): nothing checked, not passed")
        return 2
    if not os.path.exists(lib):
        print("sass_overlap: %s not built" % lib)
        print("0 passed, 1 failed")
        return 1
    sass = subprocess.run([tool, "-sass", lib], capture_output=True, text=True).stdout
    kernels = [(n, b) for n, b in functions(sass) if "fwd_wgmma_kernel" in n]
    if not kernels:
        print("sass_overlap: no fwd_wgmma_kernel in %s (built without sm_90a?): nothing checked, not passed" % lib)
        return 2
    passed = failed = 0
    for name, body in kernels:
        sites, fewest, bn = check_kernel(body)
        want = bn // 2 if bn else 1
        # Serial (wg_serial_block): no exponentials between a first and a second wait, or none at all, while its waits for
        # an S have them after the turn (an overlapped kernel's waits for S are followed by its GEMMs' issue, not a turn)
        ssites, sfewest, swhere, sshfl = check_serial(body, bn) if bn else (0, None, [], 0)
        paths = 1 if "wg_plain" in name else 2 # score paths: a plain kernel (fwd_wgmma.cuh wg_plain) has one
        serial = bn is not None and (sites == 0 or (fewest == 0 and ssites >= paths and sfewest >= bn * 3 // 8))
        if serial:  # (ptxas moves a few exponentials across the turn's barriers, whose registers it does not see: 3/4)
            sites, fewest = ssites, sfewest
            want = bn * 3 // 8
        r2ur = block_loop_r2ur(body, r"DEPBAR.LE gsb0, 0x0", swhere) if serial else block_loop_r2ur(body)
        # Two score paths (plain, softcap/ALiBi) x three loops (masked, unmasked, masked): six main loops; a plain
        # kernel (fwd_wgmma.cuh wg_plain) has the plain path alone: three. (A serial kernel in one block loop a score
        # path, the mask a branch inside it: two, or one.)
        ok = sites >= (paths if serial else 3 * paths) and fewest is not None and fewest >= want and r2ur == 0
        ok = ok and not (serial and sshfl)
        what = ("serial: %d waits for S, shuffles in a turn %d (want 0), fewest exponentials in the turn" % (sites, sshfl)
                if serial else "%d first waits, fewest exponentials before the second" % sites)
        print("%s %s: %s %s (want >= %d, BN %s); R2UR in the block loops %d (want 0)"
              % ("ok  " if ok else "FAIL", name, what, fewest, want, bn, r2ur))
        passed += ok
        failed += not ok
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
