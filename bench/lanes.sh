# lanes.sh — several GPU jobs at once on a machine of several GPUs (the device tool's -x2 / -x4 kinds), one lane a GPU.
# usage (GPU machine, repo root): OUT=DIR [LANES_LIMIT=560] sh bench/lanes.sh 'commands for GPU 0' 'commands for GPU 1' ...
# Lane i runs its commands in sh under CUDA_VISIBLE_DEVICES=i with OUT=$OUT/lane$i (made for it), its output in
# $OUT/lane$i/lane.log, stopped after LANES_LIMIT seconds so that what it wrote still comes back. At the end every
# lane's folder goes into one $OUT/lanes.tar.gz (the tool returns at most 8 files) and each log's tail is printed.
# Timings of one lane are comparable within the lane (each A/B runs its trees on one GPU); across lanes, different GPUs.
out=${OUT:?OUT: the folder that comes back}
limit=${LANES_LIMIT:-560}
nvidia-smi -L
i=0
for cmds in "$@"; do
    mkdir -p "$out/lane$i"
    (CUDA_VISIBLE_DEVICES=$i OUT=$out/lane$i timeout "$limit" sh -c "$cmds" >"$out/lane$i/lane.log" 2>&1
     echo "lane $i exit $?" >>"$out/lane$i/lane.log") &
    i=$((i + 1))
done
wait
(cd "$out" && tar czf lanes.tar.gz lane* && rm -rf lane[0-9]*)
tar xzf "$out/lanes.tar.gz" -C /tmp
for l in /tmp/lane[0-9]*; do echo "=== $(basename "$l")"; tail -n "${LANES_TAIL:-25}" "$l/lane.log"; done
