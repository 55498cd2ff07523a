# xdpfab build, test and demo entry points. `make test` is exactly what CI
# runs (.ci/run); `make demo` is the main job. Both, and generate, first
# install what the machine lacks (scripts/deps.sh, scripts/deps.txt).
GO      ?= go
TIMEOUT ?= 30m

# Go's usual home, for a root shell whose PATH lacks it (tests that build
# binaries run `go` from PATH too).
export PATH := $(PATH):/usr/local/go/bin

# The allocation guards: tests named *Allocs, *NoAlloc(s), *ZeroAlloc(s),
# *DoesNotAllocate or *ZeroCopy. Those that count allocations across
# goroutines skip under -race, whose instrumentation allocates, so `make
# test` runs them all once more without it. Name a new guard to match.
GUARDS = Allocs$$|NoAllocs?$$|ZeroAllocs?$$|DoesNotAllocate$$|ZeroCopy

.PHONY: all build generate test lint bench bench-veth bench-incast bench-peers bench-control bench-fabtests demo demo-mpi clean provider install-provider

all: build

build:
	$(GO) build ./...

# Rebuild the XDP object and its Go bindings from bpf/*.c (needs clang,
# llvm and libbpf-dev), then record the source hash the staleness test
# checks.
generate:
	GO=$(GO) sh scripts/deps.sh generate
	cd bpf && $(GO) generate . && sha256sum gen.go xdpfab.c xdpfab.h kserve.h > sources.sha256

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Every package, including the privileged tests/veth suite (root needed;
# XDPFAB_REQUIRE_PRIV=1 makes a privilege skip a failure).
test:
	GO=$(GO) sh scripts/deps.sh test
	$(MAKE) --no-print-directory lint
	$(GO) test -race -count=1 -timeout $(TIMEOUT) ./...
	$(GO) test -count=1 -timeout $(TIMEOUT) -run '$(GUARDS)' ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout $(TIMEOUT) ./...

# Two network namespaces joined by veth, xdpfab attached on both ends,
# examples/remote-atomics between them, then xdpfab bench (root needed).
demo:
	GO=$(GO) sh scripts/deps.sh demo
	GO=$(GO) sh scripts/demo.sh

# fabtests' benchmarks over xdpfab beside udp;ofi_rxd and tcp;ofi_rxm on
# one veth pair, spin and sread, medians of 3 and ratios (root needed;
# REPS=N for another count).
bench-fabtests:
	GO=$(GO) sh scripts/deps.sh test
	GO=$(GO) sh scripts/bench-fabtests.sh

# Open MPI over xdpfab: two ranks in two namespaces joined by veth, a
# one-sided program through osc rdma + btl ofi and a point-to-point one
# through pml cm + mtl ofi, libfabric restricted to xdpfab (root, Open MPI
# and libfabric-dev needed).
demo-mpi:
	GO=$(GO) sh scripts/deps.sh demo-mpi
	GO=$(GO) sh scripts/demo-mpi.sh

# xdpfab bench over veth, side by side: AF_XDP vs kernel UDP socket, each
# blocking, busy-polling and with FI_PROGRESS_MANUAL, in each PLACEMENT
# (split: a CPU each, shared: one CPU; default both) (root needed).
bench-veth:
	GO=$(GO) sh scripts/bench-veth.sh

# Incast: 16 and 64 initiators, each in its own namespace, on a Linux
# bridge to one AF_XDP target; the best single initiator, the aggregates,
# Jain's fairness, the target's XDP_STATISTICS, and 5 % loss in the bridge
# (root needed; ARGS for more flags, e.g. ARGS='--duration 5s').
bench-incast:
	$(GO) build -o build/xdpfab ./cmd/xdpfab
	build/xdpfab bench incast $(ARGS)

# Many peers (issue 17): the rate, the target's memory and CPU per
# operation, and exactly-once, against the number of initiator endpoints
# (1, 100, 1,000, 10,000) on one target over the kernel UDP socket on
# loopback, one run (no root needed; ARGS for more flags, e.g.
# ARGS='--peers 1,10000 --ops 60 --rx shared,tgtspin', or, as root,
# ARGS='--net lo,veth' for the target on AF_XDP over a veth too).
bench-peers:
	$(GO) build -o build/xdpfab ./cmd/xdpfab
	build/xdpfab bench peers $(ARGS)

# Control-plane costs (MR reg+close, AV open/insert/lookup, CQ and counter
# open+close) beside libfabric's udp;ofi_rxd, tcp;ofi_rxm and sockets and a
# BPF map syscall baseline, one run (root, gcc, libfabric-dev).
bench-control:
	GO=$(GO) sh scripts/deps.sh bench-control
	GO=$(GO) sh scripts/bench-control.sh

# xdpfab's libfabric provider: libxdpfab-fi.so (the C shim libfabric
# loads, exporting fi_prov_ini only) and libxdpfab-go.so (the Go part it
# loads when a process asks for xdpfab), into PROVIDER_OUT. Needs gcc and
# libfabric-dev. Use: FI_PROVIDER_PATH=$(PROVIDER_OUT) fi_info -p xdpfab
PROVIDER_OUT ?= build/provider
# libfabric's default provider directory (Debian's libfabric).
LIBFABRIC_PROVDIR ?= /usr/lib/$(shell gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/libfabric

provider:
	GO=$(GO) LIBDIR=$(LIBFABRIC_PROVDIR) sh scripts/build-provider.sh $(PROVIDER_OUT)

install-provider: provider
	install -d $(DESTDIR)$(LIBFABRIC_PROVDIR)
	install -m 0644 $(PROVIDER_OUT)/libxdpfab-fi.so $(PROVIDER_OUT)/libxdpfab-go.so $(DESTDIR)$(LIBFABRIC_PROVDIR)/

clean:
	$(GO) clean -testcache
	rm -rf build
