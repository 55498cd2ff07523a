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

.PHONY: all build generate test lint bench bench-veth demo clean provider install-provider

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

# xdpfab bench over veth, side by side: AF_XDP vs kernel UDP socket, each
# blocking, busy-polling and with FI_PROGRESS_MANUAL (root needed).
bench-veth:
	GO=$(GO) sh scripts/bench-veth.sh

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
