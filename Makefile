# Makefile — builds libflashc (.so/.a), flashc-bench and the tests; CUDA parts when nvcc is found.
#   make            library + CLI          make test      CPU test suite (no GPU needed)
#   make run        build, then a demo     make test-gpu  GPU suite (needs a GPU)
#   make sanitize-gpu  compute-sanitizer memcheck, racecheck, synccheck, initcheck on reduced GPU sweeps
#   make test-asan  make test's C programs under ASan + UBSan (CPU only, in build-asan/)
#   make test-tsan  the same under TSan with 4 worker threads (CPU only, in build-tsan/)
#   make fuzz       the libFuzzer target over the API (clang, in build-fuzz/); make fuzz-run runs it
#   make install PREFIX=/usr/local         make clean
#   FLASHC_CUDA=0   force a CPU-only build.  CFLAGS and LDFLAGS are honoured (LDFLAGS on every link).
#   The build runs on any x86-64 (CFLAGS default -O3, no -march): the CPU backend's hot loops are also
#   built for x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512) and the best the CPU has is chosen at run
#   time (CPU_ISAS= builds the baseline only; CFLAGS="-O3 -march=native" tunes everything for this CPU).

CC      ?= cc
CFLAGS  ?= -O3
PREFIX  ?= /usr/local
B       := build

NVCC := $(shell command -v nvcc 2>/dev/null)
ifeq ($(FLASHC_CUDA),0)
NVCC :=
endif

WARN     := -Wall -Wextra -Wno-unused-parameter
FC_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) $(CFLAGS) -fPIC -Iinclude -Isrc -pthread
LDLIBS   := -lm -pthread
comma    := ,
# LDFLAGS for links that nvcc drives: -Wl,x becomes -Xlinker x, -L/-l pass as they are, anything else
# goes to the host compiler through -Xcompiler (its commas escaped: nvcc would split on them).
NV_LDFLAGS = $(foreach f,$(LDFLAGS),$(if $(filter -Wl$(comma)%,$(f)),-Xlinker $(patsubst -Wl$(comma)%,%,$(f)),$(if $(filter -L% -l%,$(f)),$(f),-Xcompiler '$(subst $(comma),\$(comma),$(f))')))

LIB_C   := $(filter-out src/cuda_none.c,$(wildcard src/*.c src/cpu/*.c))
LIB_OBJ := $(LIB_C:%.c=$(B)/%.o)

# Extra builds of src/cpu/tile.c for these x86-64 levels (src/cpu/isa.c picks one at run time).
ifeq ($(shell uname -m),x86_64)
CPU_ISAS ?= v3 v4
endif
LIB_OBJ += $(foreach i,$(CPU_ISAS),$(B)/src/cpu/tile_$(i).o)

ifneq ($(NVCC),)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# -Xfatbin=-compress-all: the forward kernels come in one object per head dim (src/cuda/fwd_d*.cu, compiled at
# once by make -j), whose fatbins nvcc would not compress by itself (12 MB of library instead of 3).
NVCCFLAGS  ?= -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xfatbin=-compress-all \
              -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter
CU_SRC     := $(wildcard src/cuda/*.cu)
LIB_OBJ    += $(CU_SRC:%.cu=$(B)/%.o)
# The CUDA runtime linked in statically: libflashc.so needs no libcudart.so (nor a driver, for CPU use).
LDLIBS     += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
PC_PRIVATE := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++ -lm -pthread
else
LIB_OBJ    += $(B)/src/cuda_none.o
PC_PRIVATE := -lm -pthread
endif

REF_OBJ    := $(B)/tests/ref64.o
PROB_OBJ   := $(B)/tests/problem.o
TEST_C     := $(filter-out tests/ref64.c tests/problem.c tests/gpu_%.c,$(wildcard tests/*.c))
TEST_BIN   := $(TEST_C:tests/%.c=$(B)/tests/%)
ifneq ($(NVCC),)
GPUTEST_C  := $(wildcard tests/gpu_*.c)
GPUTEST_CU := $(wildcard tests/gpu_*.cu)
endif
GPUTEST_BIN:= $(GPUTEST_C:tests/%.c=$(B)/tests/%) $(GPUTEST_CU:tests/%.cu=$(B)/tests/%)

.PHONY: all run test test-gpu sanitize-gpu test-asan test-tsan test-san fuzz fuzz-run install clean
# Keep every intermediate object (make would otherwise delete them after the link and print it last).
.SECONDARY:
all: $(B)/libflashc.so $(B)/libflashc.a $(B)/flashc-bench

$(B)/%.o: %.c include/flashc.h src/internal.h $(wildcard src/cpu/*.h tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(FC_CFLAGS) -c $< -o $@

# Extra flags of the CPU backend's objects only (the fuzzer build drops comparison tracing there).
$(B)/src/cpu/%.o: FC_CFLAGS += $(CPU_CFLAGS)
$(B)/src/cpu/isa.o: FC_CFLAGS += $(foreach i,$(CPU_ISAS),-DFC_CPU_HAS_$(i))

$(B)/src/cpu/tile_%.o: src/cpu/tile.c include/flashc.h src/internal.h $(wildcard src/cpu/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(FC_CFLAGS) $(CPU_CFLAGS) -march=x86-64-$* -DFC_CPU_ISA=$* -c $< -o $@

$(B)/%.o: %.cu include/flashc.h src/internal.h $(wildcard src/cuda/*.cuh src/cuda/tile/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iinclude -Isrc -c $< -o $@

$(B)/src/cuda_none.o: src/cuda_none.c include/flashc.h src/internal.h
	@mkdir -p $(dir $@)
	$(CC) $(FC_CFLAGS) -c $< -o $@

# The shared library: SONAME libflashc.so.0 (build/ holds the link of that name too), exports flashc.h's
# functions only (src/flashc.map).
$(B)/libflashc.so: $(LIB_OBJ) src/flashc.map Makefile
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libflashc.so.0 -Wl,--version-script=src/flashc.map -o $@ $(LIB_OBJ) $(LDLIBS)
	ln -sf libflashc.so $(B)/libflashc.so.0

$(B)/libflashc.a: $(LIB_OBJ) Makefile
	rm -f $@ && ar rcs $@ $(LIB_OBJ)

# The bench's CUDA path (device buffers, cudaEvent timing) compiles where nvcc was found.
ifneq ($(NVCC),)
BENCH_CUDA := -DFLASHC_HAVE_CUDA -I$(CUDA_HOME)/include
endif
$(B)/tools/flashc-bench.o: tools/flashc-bench.c include/flashc.h tests/ref64.h
	@mkdir -p $(dir $@)
	$(CC) $(FC_CFLAGS) $(BENCH_CUDA) -c $< -o $@

$(B)/flashc-bench: $(B)/tools/flashc-bench.o $(REF_OBJ) $(B)/libflashc.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/tests/%: $(B)/tests/%.o $(REF_OBJ) $(PROB_OBJ) $(B)/libflashc.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# GPU tests: host programs over the public API (C, with the CUDA runtime), and device unit tests (.cu).
$(B)/tests/gpu_%: tests/gpu_%.c $(REF_OBJ) $(PROB_OBJ) $(B)/libflashc.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(FC_CFLAGS) -I$(CUDA_HOME)/include $(LDFLAGS) -o $@ $< $(REF_OBJ) $(PROB_OBJ) $(B)/libflashc.a $(LDLIBS)

# gpu_spec: a device kernel of its own next to calls of the public API (links the library).
$(B)/tests/gpu_spec: tests/gpu_spec.cu $(B)/libflashc.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iinclude -Itests $(NV_LDFLAGS) -o $@ $< $(B)/libflashc.a -L$(CUDA_HOME)/lib64 -lcudart -lm -Xcompiler -pthread -Xlinker -rpath,$(CUDA_HOME)/lib64

$(B)/tests/gpu_%: tests/gpu_%.cu $(wildcard src/cuda/*.cu src/cuda/*.cuh src/cuda/tile/*.cuh src/cpu/*.c src/cpu/*.h tests/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iinclude -Isrc -Itests $(NV_LDFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64 -lcudart -lm -Xcompiler -pthread -Xlinker -rpath,$(CUDA_HOME)/lib64

run: all
	./$(B)/flashc-bench --demo

$(B)/examples/%: examples/%.c $(B)/libflashc.a
	@mkdir -p $(dir $@)
	$(CC) $(FC_CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libflashc.a $(LDLIBS)

test: all $(TEST_BIN) $(B)/examples/quickstart
	./$(B)/examples/quickstart
	@sh tests/run_tests.sh $(TEST_BIN)

test-gpu: all $(GPUTEST_BIN)
	@sh tests/run_tests.sh --gpu $(GPUTEST_BIN)

sanitize-gpu: all $(GPUTEST_BIN)
	sh tests/gpu_sanitize.sh

# ---------------------------------------------------------------------------------------------- #
# Sanitizers. Each runs make test's C programs (and the quickstart) in a CPU-only build of its own
# directory, so build/ is left alone; any report fails the run. The Python tests are left out: the
# interpreter would have to load the sanitizer runtime first (LD_PRELOAD), which they do not need.
SAN_OPT_asan   ?= -O1 -g -march=native
SAN_OPT_tsan   ?= -O2 -g -march=native
SAN_FLAGS_asan := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_FLAGS_tsan := -fsanitize=thread
# The extra test_cpu runs per CPU instruction set (run_tests.sh): ASan the baseline's only, TSan none (the
# same code compiled for another ISA; threads do not depend on it; they cost CI minutes). ASan's test_random: 1000
# of the 2000 cases (seeds 1-1000): on an Intel CI machine the 2000 took 392 of ASan's 704 s (2026-11-29).
SAN_ENV_asan   := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                  FLASHC_TEST_CPU_ISAS=baseline FLASHC_TEST_RANDOM_CASES=1000
# TSan with more workers than the 2 cores CI has, so the pool's threads really interleave; setarch -R
# (no address randomization) where it works: TSan's shadow mapping fails under some kernels' ASLR.
# test_random's 2000 cases took 513 of TSan's 776 s in CI; 500 of them (seeds 1-500) exercise the same
# threaded paths.
SAN_ENV_tsan   := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 FLASHC_NUM_THREADS=4 FLASHC_TEST_CPU_ISAS= \
                  FLASHC_TEST_RANDOM_CASES=500 \
                  $(shell setarch $$(uname -m) -R true 2>/dev/null && echo setarch $$(uname -m) -R)

test-asan: SAN := asan
test-tsan: SAN := tsan
test-asan test-tsan:
	$(MAKE) --no-print-directory B=build-$(SAN) FLASHC_CUDA=0 CFLAGS="$(SAN_OPT_$(SAN)) $(SAN_FLAGS_$(SAN))" \
	    LDFLAGS="$(LDFLAGS) $(SAN_FLAGS_$(SAN))" SAN_ENV="$(SAN_ENV_$(SAN))" test-san

# The body of test-asan/test-tsan (run by them with B, CFLAGS, LDFLAGS and SAN_ENV set).
test-san: $(TEST_BIN) $(B)/examples/quickstart
	$(SAN_ENV) ./$(B)/examples/quickstart
	@$(SAN_ENV) sh tests/run_tests.sh --no-python $(TEST_BIN)

# ---------------------------------------------------------------------------------------------- #
# libFuzzer target over the API (tests/fuzz/fuzz_api.c): clang, ASan + UBSan, CPU only, build-fuzz/.
#   make fuzz       build it            make fuzz-run FUZZ_RUNS=n   n executions from the seed corpus
# FUZZ_SKIP lists defect classes the harness stops producing (see known_classes in fuzz_api.c), for digging
# past a known defect; empty: every issue-10 class is fixed (tests/fuzz/replay.sh replays their reproducers).
FUZZ_CC    ?= clang
FUZZ_OPT   ?= -O2 -g -march=native
FUZZ_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_RUNS  ?= 200000
FUZZ_SKIP  ?=
FUZZ_ARGS  ?= -max_len=1024 -timeout=60 -rss_limit_mb=4096 -print_final_stats=1

fuzz:
	@printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' | \
	    $(FUZZ_CC) -fsanitize=fuzzer,address,undefined -x c - -o /dev/null 2>/dev/null || \
	    { echo "fuzz: $(FUZZ_CC) cannot link -fsanitize=fuzzer,address,undefined: install clang and its" \
	      "libFuzzer runtime (Debian: libclang-rt-<version>-dev)"; exit 1; }
	$(MAKE) --no-print-directory B=build-fuzz FLASHC_CUDA=0 CC=$(FUZZ_CC) \
	    CFLAGS="$(FUZZ_OPT) -fsanitize=fuzzer-no-link $(FUZZ_FLAGS)" CPU_CFLAGS=-fno-sanitize-coverage=trace-cmp \
	    FUZZ_HARNESS_CFLAGS="$(FUZZ_OPT) $(FUZZ_FLAGS)" build-fuzz/fuzz_api

# The library is instrumented for coverage (comparison tracing only in api.c and plan.c: in the
# kernels' loops it cost most of each execution), the harness only for ASan/UBSan (its own loops
# would otherwise cost as much and steer the fuzzer toward the harness's branches).
$(B)/fuzz_api: tests/fuzz/fuzz_api.c tests/testutil.h $(B)/libflashc.a
	$(CC) -std=c11 -D_POSIX_C_SOURCE=200809L $(WARN) $(FUZZ_HARNESS_CFLAGS) -Iinclude -Itests -c $< -o $@.o
	$(CC) $(FC_CFLAGS) -fsanitize=fuzzer $(LDFLAGS) -o $@ $@.o $(B)/libflashc.a $(LDLIBS)

# New inputs go to build-fuzz/corpus (the seeds stay as they are); a crash leaves build-fuzz/crash-*.
fuzz-run: fuzz
	@mkdir -p build-fuzz/corpus
	FLASHC_FUZZ_SKIP=$(FUZZ_SKIP) ./build-fuzz/fuzz_api -runs=$(FUZZ_RUNS) $(FUZZ_ARGS) \
	    -artifact_prefix=build-fuzz/ build-fuzz/corpus tests/fuzz/corpus

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/flashc.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(B)/libflashc.so $(DESTDIR)$(PREFIX)/lib/libflashc.so.0
	ln -sf libflashc.so.0 $(DESTDIR)$(PREFIX)/lib/libflashc.so
	install -m 644 $(B)/libflashc.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(B)/flashc-bench $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@PRIVATE@|$(PC_PRIVATE)|' flashc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/flashc.pc

clean:
	rm -rf $(B) build-asan build-tsan build-fuzz
