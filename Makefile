# gpud: every target works on a fresh machine with only Go installed.
GO        ?= go
BIN       := bin/gpud
STATICCHECK_VERSION := v0.8.2
PKGS      := ./...
# go-nvml's cgo bindings call deprecated NVML symbols; keep the build quiet.
export CGO_CFLAGS ?= -O2 -Wno-deprecated-declarations

.PHONY: all build test test-short run lint bench vet fmt-check staticcheck tools clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/gpud

## run: the agent on the embedded simulated DGX H100 (Ctrl-C to stop).
run: build
	./$(BIN) agent --simulate dgx-h100 --http-addr 127.0.0.1:9400

## test: lint, then every test with the race detector.
test: lint
	$(GO) test -race -timeout 20m $(PKGS)

test-short:
	$(GO) test -short $(PKGS)

lint: fmt-check vet staticcheck

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

clean:
	rm -rf bin .run
