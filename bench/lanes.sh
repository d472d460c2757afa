# lanes.sh — several GPU jobs at once on a machine of several GPUs (the device tool's -x2 / -x4 kinds), one lane a GPU.
# usage (GPU machine, repo root): OUT=DIR [LANES_LIMIT=560] sh bench/lanes.sh 'commands for lane 0' 'commands for lane 1' ...
# Lane i runs its commands in sh under CUDA_VISIBLE_DEVICES=(i mod the GPUs there) with OUT=$OUT/lane$i (made for it),
# its output in $OUT/lane$i/lane.log, stopped after LANES_LIMIT seconds so that what it wrote still comes back. Lanes
# that share a GPU (fewer GPUs than lanes) run one after another, so no two jobs ever share one. At the end every
# lane's folder goes into one $OUT/lanes.tar.gz; LANES_DEADLINE (seconds from the start, default 580) cuts a lane that
# waits behind others on its GPU short, or skips it, so that the whole call ends in time for the folder to come back
# (the tool returns at most 8 files); each log's tail is printed.
# Timings of one lane are comparable within the lane (each A/B runs its trees on one GPU); across lanes, different GPUs.
out=${OUT:?OUT: the folder that comes back}
limit=${LANES_LIMIT:-560}
deadline=$(($(date +%s) + ${LANES_DEADLINE:-580}))
nvidia-smi -L
gpus=$(nvidia-smi -L | grep -c '^GPU')
[ "$gpus" -ge 1 ] || gpus=1
# One lane: its number, then its commands.
run_lane() {
    mkdir -p "$out/lane$1"
    left=$((deadline - $(date +%s)))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -le 5 ]; then echo "lane $1 skipped: no time left before LANES_DEADLINE" >"$out/lane$1/lane.log"; return; fi
    CUDA_VISIBLE_DEVICES=$(($1 % gpus)) OUT=$out/lane$1 timeout "$limit" sh -c "$2" >"$out/lane$1/lane.log" 2>&1
    echo "lane $1 exit $? (GPU $(($1 % gpus)))" >>"$out/lane$1/lane.log"
}
g=0
while [ "$g" -lt "$gpus" ]; do
    (i=0
     for cmds in "$@"; do
         [ $((i % gpus)) -eq "$g" ] && run_lane "$i" "$cmds"
         i=$((i + 1))
     done) &
    g=$((g + 1))
done
wait
(cd "$out" && tar czf lanes.tar.gz lane[0-9]* && rm -rf lane[0-9]*)
rm -rf /tmp/lanes-out && mkdir -p /tmp/lanes-out && tar xzf "$out/lanes.tar.gz" -C /tmp/lanes-out
for l in /tmp/lanes-out/lane[0-9]*; do echo "=== $(basename "$l")"; tail -n "${LANES_TAIL:-25}" "$l/lane.log"; done
