# ncu_stalls.sh — where one decode shape's kernels spend their time (ncu): time, DRAM read and its share of peak,
# instructions, issue activity and the main stall reasons a issued instruction, one line a kernel launch.
# usage (GPU machine, repo root, after make): [FLASHC_LIB=...] sh bench/ncu_stalls.sh b s_k [page] [splits] [fp8]
# (bench/ncu_decode.py's arguments: flashc's three calls, then cuDNN's three on the same K/V in bf16.)
export PATH=$PATH:/usr/local/cuda/bin
lib=${FLASHC_LIB:-$PWD/build/libflashc.so}
st=smsp__average_warps_issue_stalled
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum
m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
m=$m,launch__registers_per_thread,launch__grid_size
for s in long_scoreboard short_scoreboard barrier mio_throttle math_pipe_throttle wait not_selected lg_throttle; do
    m=$m,${st}_${s}_per_issue_active.ratio
done
csv=${TMPDIR:-/tmp}/stalls-$$.csv
FLASHC_LIB=$lib timeout 300 ncu --clock-control none --launch-skip 0 --launch-count 40 --metrics "$m" --csv \
    --page details python3 bench/ncu_decode.py "$@" >"$csv" 2>/dev/null </dev/null
python3 - "$csv" <<'PY'
import csv, io, sys
text = open(sys.argv[1]).read()
if '"ID"' not in text:
    print("ncu gave no row"); sys.exit(0)
runs = {}
for r in csv.DictReader(io.StringIO(text[text.index('"ID"'):])):
    if r.get("Metric Name"):
        runs.setdefault((int(r["ID"]), r["Kernel Name"][:28]), {})[r["Metric Name"]] = float(r["Metric Value"].replace(",", "") or 0)
short = {"long_scoreboard": "long", "short_scoreboard": "short", "barrier": "bar", "mio_throttle": "mio",
         "math_pipe_throttle": "math", "wait": "wait", "not_selected": "nsel", "lg_throttle": "lg"}
for (i, name), m in sorted(runs.items()):
    if m.get("gpu__time_duration.sum", 0) < 2000: continue  # the small kernels (the combine, copies)
    stalls = " ".join("%s %.2f" % (v, m.get("smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" % k, 0))
                      for k, v in short.items())
    print("%3d %-28s %8.1f us DRAM %7.1f MB %4.0f%% inst %6.1f M issue %4.1f%% warps %4.1f%% regs %3.0f grid %5.0f | %s" % (
        i, name, m["gpu__time_duration.sum"] / 1e3, m["dram__bytes_read.sum"] / 1e6,
        m["dram__throughput.avg.pct_of_peak_sustained_elapsed"], m["sm__inst_executed.sum"] / 1e6,
        m["smsp__issue_active.avg.pct_of_peak_sustained_active"], m["sm__warps_active.avg.pct_of_peak_sustained_active"],
        m["launch__registers_per_thread"], m["launch__grid_size"], stalls))
PY
