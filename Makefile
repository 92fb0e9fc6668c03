# wanda — see README.md. Every target works on a fresh clone.
GO        ?= go
BIN       := bin/wanda
VERSION   := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/wanda-fed/wanda/internal/cli.Version=$(VERSION)
# Every timestamp in the packages and the image: the commit's time.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
REVISION  := $(shell git rev-parse HEAD 2>/dev/null)
DIST      ?= dist
export CGO_ENABLED ?= 0

.PHONY: all build demo packages test test-unit test-interop test-packages check fmt vet staticcheck tidy-check fuzz bench bench-quick bench-go bench-serve bench-s3 clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/wanda

## demo: sample data + a server on loopback + the client verbs; Ctrl-C to stop.
demo: build
	./$(BIN) demo

## packages: the .deb and .rpm packages (amd64, arm64), the OCI image, the
## SBOM and SHA256SUMS in dist/ (docs/install.md). Reproducible.
packages:
	rm -rf $(DIST)
	$(GO) run ./internal/dist/mkdist -version '$(VERSION)' -epoch '$(SOURCE_DATE_EPOCH)' -revision '$(REVISION)' -ldflags '$(LDFLAGS)' -out '$(DIST)'

## test: unit tests with the race detector, then integration and interop
## tests, then the packages installed on this machine (root: CI).
test: test-unit test-interop test-packages

test-unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 25m $$($(GO) list ./... | grep -v /internal/interop)

test-interop: build
	$(GO) test -count=1 -timeout 15m ./internal/interop/...

## test-packages: installs, runs, upgrades and purges the .deb on THIS
## machine (root only; it refuses a machine that has wanda installed),
## inspects the .rpm and the image, rebuilds to check reproducibility.
test-packages: packages
	$(GO) test -tags packaging -count=1 -timeout 20m ./internal/dist/ -args -dist '$(CURDIR)/$(DIST)' -version '$(VERSION)'

## check: what CI's core is made of.
check: fmt vet staticcheck tidy-check test

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags packaging ./internal/dist/

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags packaging ./internal/dist/

tidy-check:
	$(GO) mod tidy && git diff --exit-code go.mod go.sum

## fuzz: a short run of every fuzz target.
fuzz:
	$(GO) test -run=^$$ -fuzz=FuzzParse -fuzztime=30s ./internal/httprange
	$(GO) test -run=^$$ -fuzz=FuzzCleanPath -fuzztime=30s ./internal/storage
	$(GO) test -run=^$$ -fuzz=FuzzReadRangeBody -fuzztime=30s ./internal/client
	$(GO) test -run=^$$ -fuzz=FuzzPlanReadV -fuzztime=30s ./internal/client
	$(GO) test -run=^$$ -fuzz=FuzzParallelPutHeaders -fuzztime=30s ./internal/httpserve
	$(GO) test -run=^$$ -fuzz=FuzzParse -fuzztime=30s ./internal/wan
	$(GO) test -run=^$$ -fuzz=FuzzVerify -fuzztime=30s ./internal/auth/token
	$(GO) test -run=^$$ -fuzz=FuzzParseScopes -fuzztime=30s ./internal/auth/token
	$(GO) test -run=^$$ -fuzz=FuzzGridMap -fuzztime=30s ./internal/auth/x509auth
	$(GO) test -run=^$$ -fuzz=FuzzParseZtn -fuzztime=30s ./internal/xrootd/server
	$(GO) test -run=^$$ -fuzz=FuzzPagesInPlace -fuzztime=30s ./internal/xrootd

## bench-go: hot-path micro benchmarks.
bench-go:
	$(GO) test -run=^$$ -bench=. -benchmem ./internal/httprange ./internal/httpserve ./internal/client ./internal/wan ./internal/auth ./internal/auth/token ./internal/bufpool ./internal/cache ./internal/monitor

## bench-serve: wanda vs nginx vs iperf3 on loopback (see BENCHMARKS.md).
bench-serve: build
	./scripts/bench-serve.sh

## bench-s3: an S3 export and s3:// against MinIO (BENCHMARKS.md; builds MinIO first if needed).
bench-s3: build
	$(GO) test -count=1 -run TestParseURL ./internal/storage/s3
	./scripts/bench-s3.sh

## bench: the micro benchmarks, the scripts, and every experiment's full run (wanda bench all).
bench: bench-go bench-serve build
	./$(BIN) bench all

## bench-quick: every experiment's --quick preset (< 15 min on 2 cores).
bench-quick: build
	./$(BIN) bench all --quick --out bench-results/quick

clean:
	rm -rf bin dist
