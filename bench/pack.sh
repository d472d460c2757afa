# pack.sh — paths (built trees, build/ binaries) into one xz tar for the device tool's carry, which caps what travels at
# 64 MiB: a slim tree of ~15 MB (bench/build_trees.sh) packs to ~3-5 MB, main's build/ binaries to ~5 MB.
# usage (development machine, repo root): sh bench/pack.sh .dev/pack.tar.xz build/libflashc.so build/libflashc.so.0 \
#            build/tests/gpu_attn ... abtrees/NAME ...
# .dev/ and abtrees/ listed in .git/info/exclude (they then travel only when carry names them: carry [".dev"]).
# On the GPU machine (no xz needed):  python3 -c "import tarfile; tarfile.open('.dev/pack.tar.xz').extractall('.')"
out=${1:?usage: pack.sh OUT.tar.xz PATH...}
shift
mkdir -p "$(dirname "$out")"
tar cf - "$@" | xz -T0 -6 >"$out" && echo "$out: $(du -h "$out" | cut -f1) from $(du -shc "$@" | tail -1 | cut -f1)"
