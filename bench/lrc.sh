# lrc.sh — how much of the prefill's K/V reads L2's request coalescer merged, per shape (ncu; PERF.md steps 114-116).
# usage (GPU machine, repo root, after make): [FLASHC_LIB=.../libflashc.so] [SHAPES="b s h d causal;..."] sh bench/lrc.sh
# One line per shape: flashc's third call (bench/ncu_cmp.py) under ncu --clock-control none: its time, the share of
# the coalescable read sectors merged (lrc__..._coalescing_achieved_type_hardware over ..._coalescable: reads of the
# same sector from different SMs close together in time, served once), L2 sectors (all, from the SMs, hits), L2 busy
# (% of peak), DRAM bytes read. Read it beside any A/B whose times move where the code did not change.
export PATH=$PATH:/usr/local/cuda/bin
lib=${FLASHC_LIB:-$PWD/build/libflashc.so}
m=lrc__request_sectors_op_read_coalescable.sum,lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum
m=$m,lts__t_sectors.sum,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_lookup_hit.sum,dram__bytes_read.sum
m=$m,lts__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
csv=${TMPDIR:-/tmp}/lrc-$$.csv
echo "${SHAPES:-32 512 32 64 0;32 512 32 64 1;32 512 16 128 0;32 512 16 128 1;1 16384 16 128 0;1 16384 16 128 1}" |
    tr ';' '\n' | while read -r shape; do
    [ -n "$shape" ] || continue
    FLASHC_LIB=$lib timeout 120 ncu --clock-control none -k regex:fwd_wgmma --launch-skip 2 --launch-count 1 --metrics "$m" \
        --csv --page details python3 bench/ncu_cmp.py $shape >"$csv" 2>/dev/null </dev/null
    python3 - "$shape" "$csv" <<'PY'
import csv, io, sys
text = open(sys.argv[2]).read()
if '"ID"' not in text:
    print("%-18s ncu gave no row" % sys.argv[1]); sys.exit(0)
rows = csv.DictReader(io.StringIO(text[text.index('"ID"'):]))
m = {r["Metric Name"]: float(r["Metric Value"].replace(",", "")) for r in rows if r.get("Metric Name")}
merged = m["lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum"]
can = max(m["lrc__request_sectors_op_read_coalescable.sum"], 1)
print("%-18s %9.1f us  merged %5.1f%%  L2 sectors %7.1f M (SMs %7.1f M, hits %7.1f M)  L2 busy %5.1f%%  DRAM read %7.1f MB" % (
    sys.argv[1], m["gpu__time_duration.sum"] / 1e3, 100 * merged / can, m["lts__t_sectors.sum"] / 1e6,
    m["lts__t_sectors_srcunit_tex.sum"] / 1e6, m["lts__t_sectors_lookup_hit.sum"] / 1e6,
    m["lts__throughput.avg.pct_of_peak_sustained_elapsed"], m["dram__bytes_read.sum"] / 1e6))
PY
done
rm -f "$csv"
