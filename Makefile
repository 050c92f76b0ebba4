# gpud: every target works on a fresh machine with only Go installed.
GO        ?= go
BIN       := bin/gpud
STATICCHECK_VERSION := v0.8.2
PKGS      := ./...
# go-nvml's cgo bindings call deprecated NVML symbols; keep the build quiet.
export CGO_CFLAGS ?= -O2 -Wno-deprecated-declarations

.PHONY: traces k8s-bins all build gpud kubectl-gpud release test test-gpu test-short run lint bench vet fmt-check staticcheck purity codelint clean fuzz fuzz-list sched-bench scale-bench proto stream-scale fgd-table fgd-families predict-table objectives-table tidy-check

all: build

# APP_VERSION is the chart's appVersion: the version the chart, the plain
# manifests in deploy/ and `make image` use. BUILD_VERSION is what `make
# build` stamps into the binaries (gpud version, kubectl gpud version).
APP_VERSION := $(shell sed -n 's/^appVersion: *"*\([^"]*\)"* *$$/\1/p' deploy/helm/gpud/Chart.yaml)
BUILD_VERSION ?= $(APP_VERSION)-dev

build: gpud kubectl-gpud

## gpud: bin/gpud alone (what `make run` needs: kubectl-gpud's static
## CGO_ENABLED=0 build compiles its dependencies a second time, minutes on
## a fresh machine).
gpud:
	$(GO) build -ldflags "-X main.version=$(BUILD_VERSION)" -o $(BIN) ./cmd/gpud

## kubectl-gpud: the kubectl plugin, bin/kubectl-gpud. Put it on PATH and
## run `kubectl gpud nodes` (kubectl finds plugins by their name).
kubectl-gpud:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(BUILD_VERSION)" -o bin/kubectl-gpud ./cmd/kubectl-gpud

## release: everything a release ships, into bin/release (emptied first):
## the image tarball (make image, tagged VERSION; IMAGE_REPO to name
## another registry), the Helm chart packaged at version and appVersion
## VERSION, the CRDs to apply before helm upgrade, deploy/'s plain
## manifests with the image at VERSION, kubectl-gpud for RELEASE_PLATFORMS,
## and SHA256SUMS. `make release VERSION=1.2.3`.
IMAGE_REPO ?= ghcr.io/gpud/gpud
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64
release:
	@[ -n "$(VERSION)" ] || { echo "release: set VERSION, e.g. make release VERSION=1.2.3"; exit 1; }
	@set -e; out=bin/release; rm -rf $$out; mkdir -p $$out; \
	mtime=$$(git log -1 --format=%ct 2>/dev/null || echo 0); \
	$(GO) run ./hack/release --version "$(VERSION)" --out $$out --image "$(IMAGE_REPO)" --mtime $$mtime; \
	$(MAKE) --no-print-directory image IMAGE="$(IMAGE_REPO):$(VERSION)"; \
	cp bin/image/gpud.tar $$out/gpud-image-$(VERSION).tar; \
	for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		echo "release: kubectl-gpud for $$os/$$arch"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" \
			-o $$out/kubectl-gpud-$(VERSION)-$$os-$$arch ./cmd/kubectl-gpud; \
	done; \
	(cd $$out && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS); \
	echo "release: $(VERSION) in $$out"

## proto: regenerate api/'s Go code (protoc from Debian's protobuf-compiler,
## the Go plugins at go.mod's tool versions).
proto:
	./hack/proto.sh

## stream-scale: one telemetry server with 1,000 simulated agents (real
## clients over mutual TLS, 8 GPUs each, 1 sample/s, in a child process):
## prints server CPU per 1,000 samples/s and memory per stream, and the
## agents' CPU and memory; fails above 5% of a core or 50 KiB per stream.
stream-scale:
	GPUD_STREAM_SCALE=1000 $(GO) test -count=1 -run '^TestScaleStreams$$' -v ./pkg/stream

## run: the agent on the embedded simulated DGX H100 (Ctrl-C to stop).
## Everything it writes goes under .run/, which the agent creates.
RUN_HTTP_ADDR ?= 127.0.0.1:9400
run: gpud
	./$(BIN) agent --simulate dgx-h100 --http-addr $(RUN_HTTP_ADDR) \
		--device-plugin-dir $(CURDIR)/.run/device-plugins --cdi-dir $(CURDIR)/.run/cdi \
		--admin-socket $(CURDIR)/.run/admin.sock --mig-journal $(CURDIR)/.run/mig-journal.json \
		--sim-state-file $(CURDIR)/.run/simnode-state.json

# HOST_PATHS are what the agent owns on a node. Tests keep to their temp
# dirs: `make test` fails if one of these appears while it runs (checked
# for the ones absent before, so a node running gpud can still run it).
HOST_PATHS := /run/gpud /var/lib/gpud /var/run/cdi /var/lib/kubelet /var/run/kubernetes

## test: lint, every package's tests with the race detector and, at the
## same time, ./test's end-to-end tests without it (hack/tests.sh says
## why), then pkg/simulate's whole-trace replays; fails if the run left
## anything at HOST_PATHS. Each phase prints when it ended. Every fuzz
## test's seed corpus runs as a test; `make fuzz` fuzzes (a 3-second pass
## of each target cost a fresh machine about 10 minutes of instrumented
## builds, most of CI's margin, for little search).
##
## TEST_P is the race run's go test -p: how many builds or test binaries
## run at once, one per core (./test's run, mostly waiting on the API
## servers and nodes it starts, is the one more).
TEST_P ?= $(shell nproc 2>/dev/null || echo 2)
test: lint
	@echo "make test: lint done at $$(date +%T)"; \
	absent=""; for p in $(HOST_PATHS); do [ -e "$$p" ] || absent="$$absent $$p"; done; \
	rc=0; { GO="$(GO)" TEST_P=$(TEST_P) ./hack/tests.sh && \
		echo "make test: tests done at $$(date +%T)" && \
		$(GO) test -count=1 -timeout 10m ./pkg/simulate/ && \
		echo "make test: replays done at $$(date +%T)"; } || rc=$$?; \
	for p in $$absent; do \
		if [ -e "$$p" ]; then echo "make test: $$p appeared during the run: a test reached outside its temp dir"; rc=1; fi; \
	done; \
	exit $$rc

# fuzz-list prints "<package dir> <FuzzName>" for every fuzz test in the
# module, tracked or not.
FUZZ_LIST = grep -rE -o --include='*_test.go' --exclude-dir=.git --exclude-dir=testdata --exclude-dir=vendor \
	'^func Fuzz[A-Za-z0-9_]+\(' . | sed -E 's|^(.*)/[^/]+:func (Fuzz[A-Za-z0-9_]+)\($$|\1 \2|' | sort -u
fuzz-list:
	@$(FUZZ_LIST)

## fuzz: run every fuzz test in the module for FUZZTIME each (go test
## -fuzz takes one package and one target at a time; hack/fuzz-one.sh
## retries once a run Go's -fuzztime deadline race failed with no input).
## A failing input is saved under the package's testdata/fuzz/ for go test
## to replay.
FUZZTIME ?= 60s
fuzz:
	@list="$$($(FUZZ_LIST))"; \
	if [ -z "$$list" ]; then echo "fuzz: no fuzz tests in the module"; exit 0; fi; \
	echo "$$list" | while read -r dir name; do \
		echo "fuzz: $$name in $$dir for $(FUZZTIME)"; \
		GO="$(GO)" ./hack/fuzz-one.sh "$$dir" "$$name" $(FUZZTIME) || { echo "fuzz: $$name in $$dir failed"; exit 1; }; \
	done

## traces: Alibaba's public GPU-sharing trace (cluster-trace-gpu-v2023 in
## alibaba/clusterdata: the openb node and pod lists the FGD paper, ATC'23,
## evaluates on) into data/openb-gpu-v2023, where the README's `gpud sim`
## examples read it. Needs curl and access to github.com; elsewhere, copy
## the csv/ files there by hand (or point GPUD_OPENB_DIR at them for tests).
TRACE_DIR ?= data/openb-gpu-v2023
TRACE_URL ?= https://raw.githubusercontent.com/alibaba/clusterdata/master/cluster-trace-gpu-v2023
TRACE_FILES := openb_node_list_all_node openb_node_list_gpu_node openb_pod_list_default \
	openb_pod_list_cpu0 openb_pod_list_cpu037 openb_pod_list_cpu050 openb_pod_list_cpu072 openb_pod_list_cpu100 \
	openb_pod_list_cpu200 openb_pod_list_cpu235 openb_pod_list_cpu250 openb_pod_list_cpu300 \
	openb_pod_list_gpushare20 openb_pod_list_gpushare40 openb_pod_list_gpushare60 openb_pod_list_gpushare80 openb_pod_list_gpushare100
traces:
	@command -v curl >/dev/null || { echo "traces: needs curl (apt-get install curl)"; exit 1; }
	@mkdir -p $(TRACE_DIR)
	@for f in $(TRACE_FILES); do \
		[ -s $(TRACE_DIR)/$$f.csv ] && continue; \
		echo "traces: $$f.csv"; \
		curl -fsSL --retry 2 -o $(TRACE_DIR)/$$f.csv.part $(TRACE_URL)/csv/$$f.csv && mv $(TRACE_DIR)/$$f.csv.part $(TRACE_DIR)/$$f.csv || \
			{ rm -f $(TRACE_DIR)/$$f.csv.part; echo "traces: could not fetch $(TRACE_URL)/csv/$$f.csv; copy the trace's csv/ files to $(TRACE_DIR) by hand"; exit 1; }; \
	done
	@[ -s $(TRACE_DIR)/README.trace.md ] || curl -fsSL -o $(TRACE_DIR)/README.trace.md $(TRACE_URL)/README.md || true
	@echo "traces: in $(TRACE_DIR)"

## k8s-bins: kube-apiserver and kube-scheduler for the real-Kubernetes tests,
## built once per version into ~/.cache/gpud/k8s-bins (GPUD_K8S_BINS).
k8s-bins:
	./hack/k8s-bins.sh

## test-gpu: the real-NVML tests, on a machine with NVIDIA GPUs and a driver
## (driver memory limits on a real cgroup: r615 or later, cgroup v2, root).
test-gpu:
	$(GO) test -tags gpu -count=1 -v -run RealGPU ./test ./pkg/memlimit

test-short:
	$(GO) test -short $(PKGS)

lint: fmt-check vet staticcheck purity codelint tidy-check

## tidy-check: go.mod and go.sum are as go mod tidy leaves them (a
## directly imported module marked // indirect, or a missing go.sum line,
## fails here rather than on a user's go get).
tidy-check:
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum differ from go mod tidy's: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }

## codelint: the house rules go vet and staticcheck do not know
## (internal/codelint: error prefixes, cmd/gpud only wires).
codelint:
	$(GO) test -count=1 ./internal/codelint/

## purity: the pure packages import only the standard library and each other.
PURE_PKGS := ./pkg/gpu/... ./pkg/gputel/... ./pkg/topology/... ./pkg/allocator/... ./pkg/timeslice/... ./pkg/predict/... ./pkg/scheduler/heal/... ./pkg/scheduler/podgroup/autogang/...
purity:
	@bad="$$($(GO) list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' $(PURE_PKGS) | grep -v '^github.com/gpud/gpud/' || true)"; \
	if [ -n "$$bad" ]; then echo "pure packages import non-stdlib packages:"; echo "$$bad"; exit 1; fi

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

# fgd-table runs the FGD paper's protocol (10 seeds, tune 1.3) for every pod
# list in FGD_DATA and prints ours next to the published table ("-" where it
# has no row; the vsFGD column is each policy minus our FGD; gpud's must be
# negative), then runs the same 10-seed checks as tests (GPUD_SIM_LONG=1).
FGD_DATA ?= $(firstword $(wildcard data/openb-gpu-v2023) ../shared/data/openb-gpu-v2023)
fgd-table:
	@go build -o bin/gpud-sim ./cmd/gpud
	@for w in $$(cd $(FGD_DATA) && ls openb_pod_list_*.csv | sed 's/\.csv$$//'); do \
		./bin/gpud-sim sim openb --nodes $(FGD_DATA)/openb_node_list_gpu_node.csv --pods $(FGD_DATA)/$$w.csv \
			--policy all --seeds 42-51 --tune 1.3 -o csv -q --published $(FGD_DATA)/fgd-published-unallocated.csv \
			> /dev/null || exit 1; \
	done 2>&1
	GPUD_SIM_LONG=1 $(GO) test -count=1 -timeout 30m -run 'TestBaselinesMatchPublished|TestGpudBeatsFGD' ./pkg/simulate

# fgd-families runs FGD and gpud with the same protocol on the workload
# families derived from openb_pod_list_default (pkg/tracefamily:
# GPU-model-constrained gpuspec*, multi-GPU-heavy multigpu*) and prints
# unallocated GPU % at 90/100/130% arrived and gpud minus FGD, then runs the
# same checks as tests. gpud's weights were chosen on seeds 60-69; the
# reporting seeds are 42-51 (FAMILY_SEEDS).
FAMILY_SEEDS ?= 42-51
fgd-families:
	@go build -o bin/gpud-sim ./cmd/gpud
	@./bin/gpud-sim sim openb --nodes $(FGD_DATA)/openb_node_list_gpu_node.csv --pods $(FGD_DATA)/openb_pod_list_default.csv \
		--family all --policy FGD,gpud --seeds $(FAMILY_SEEDS) --tune 1.3 -o csv -q > bin/fgd-families.csv
	@awk -F, 'NR > 1 && ($$3 == 90 || $$3 == 100 || $$3 == 130) { k = $$1 " " $$3; if ($$2 == "06-FGD") f[k] = $$5; else g[k] = $$5; if (!(k in seen)) { seen[k] = 1; o[++n] = k } } \
		END { printf "%-42s %4s %8s %8s %8s\n", "workload", "arr%", "FGD", "gpud", "gpud-FGD"; \
			for (i = 1; i <= n; i++) { split(o[i], p, " "); printf "%-42s %4s %8.3f %8.3f %+8.3f\n", p[1], p[2], f[o[i]], g[o[i]], g[o[i]] - f[o[i]] } }' bin/fgd-families.csv
	GPUD_SIM_LONG=1 $(GO) test -count=1 -timeout 30m -run 'TestGpudBeatsFGDOnFamilies' ./pkg/simulate

# predict-table generates a job trace from the openb pod list
# (PREDICT_JOBS jobs, PREDICT_SEED) and replays it under gpud's policy with
# no, user, learned, user+learned and oracle runtime estimates (backfill's wait and JCT,
# prediction error), then with GPU failures at PREDICT_FAILURES per GPU-day
# and at PREDICT_FAILURES_HIGH with 10 % node bursts, healing vs manual
# (docs/job-trace.md). The whole openb cluster is rarely full, so the
# estimate table is repeated on its first PREDICT_SMALL_NODES nodes with a
# PREDICT_SMALL_JOBS trace sized to them, where backfill matters more.
# About 14 replays: 10-20 minutes.
PREDICT_JOBS ?= 20000
PREDICT_SEED ?= 42
PREDICT_FAILURES ?= 0.001
PREDICT_FAILURES_HIGH ?= 0.01
PREDICT_SMALL_NODES ?= 200
PREDICT_SMALL_JOBS ?= 10000
predict-table:
	@mkdir -p bin && $(GO) build -o bin/gpud-sim ./cmd/gpud
	@./bin/gpud-sim sim jobs-gen --pods $(FGD_DATA)/openb_pod_list_default.csv --nodes $(FGD_DATA)/openb_node_list_gpu_node.csv \
		--seed $(PREDICT_SEED) --jobs $(PREDICT_JOBS) -o bin/predict-jobs.csv
	./bin/gpud-sim sim jobs --nodes $(FGD_DATA)/openb_node_list_gpu_node.csv --jobs bin/predict-jobs.csv -q \
		--policies gpud --estimates none,user,learned,user+learned,oracle
	@head -n $$(( $(PREDICT_SMALL_NODES) + 1 )) $(FGD_DATA)/openb_node_list_gpu_node.csv > bin/predict-nodes-small.csv
	@./bin/gpud-sim sim jobs-gen --pods $(FGD_DATA)/openb_pod_list_default.csv --nodes bin/predict-nodes-small.csv \
		--seed $(PREDICT_SEED) --jobs $(PREDICT_SMALL_JOBS) -o bin/predict-jobs-small.csv
	./bin/gpud-sim sim jobs --nodes bin/predict-nodes-small.csv --jobs bin/predict-jobs-small.csv -q \
		--policies gpud --estimates none,user,learned,user+learned,oracle
	./bin/gpud-sim sim jobs --nodes $(FGD_DATA)/openb_node_list_gpu_node.csv --jobs bin/predict-jobs.csv -q \
		--policies gpud --gpu-failures $(PREDICT_FAILURES)
	./bin/gpud-sim sim jobs --nodes $(FGD_DATA)/openb_node_list_gpu_node.csv --jobs bin/predict-jobs.csv -q \
		--policies gpud --gpu-failures $(PREDICT_FAILURES_HIGH) --failure-bursts 0.1

# objectives-table replays an openb-derived trace on the first
# OBJ_NODES nodes of the openb cluster (OBJ_JOBS jobs, OBJ_SEED), a
# cluster busy enough for the order and placement to matter: first gpud's
# policy under each weight setting of OBJ_SWEEP (one column each:
# unallocated %, wait, JCT, Jain fairness, kWh, cost with the illustrative
# prices of docs/gpu-models-example.csv), then FIFO, shortest predicted job
# first, least attained service and gpud with learned runtime estimates
# (docs/job-trace.md). About 11 replays: 5-15 minutes.
OBJ_JOBS ?= 10000
OBJ_SEED ?= 42
OBJ_NODES ?= 200
OBJ_SWEEP ?= default;util=1;util=1,wait=1;wait=1;fair=1;energy=1;cost=1
objectives-table:
	@mkdir -p bin && $(GO) build -o bin/gpud-sim ./cmd/gpud
	@head -n $$(( $(OBJ_NODES) + 1 )) $(FGD_DATA)/openb_node_list_gpu_node.csv > bin/objectives-nodes.csv
	@./bin/gpud-sim sim jobs-gen --pods $(FGD_DATA)/openb_pod_list_default.csv --nodes bin/objectives-nodes.csv \
		--seed $(OBJ_SEED) --jobs $(OBJ_JOBS) -o bin/objectives-jobs.csv
	./bin/gpud-sim sim jobs --nodes bin/objectives-nodes.csv --jobs bin/objectives-jobs.csv -q \
		--policies gpud --objectives '$(OBJ_SWEEP)' --gpu-models docs/gpu-models-example.csv
	./bin/gpud-sim sim jobs --nodes bin/objectives-nodes.csv --jobs bin/objectives-jobs.csv -q \
		--policies gpud,fifo,sjf,las --estimates learned --gpu-models docs/gpu-models-example.csv

# sched-bench runs gpud scheduler and kube-scheduler in turn on one real API
# server (test/schedbench; binaries from make k8s-bins), with the same nodes,
# ResourceSlices and pods (SCHED_BENCH_PODS sampled from an openb trace, as
# DRA claims), and prints pods bound per second, their ratio and unallocated
# GPU % for each. Logs and the table go to .run/sched-bench.
SCHED_BENCH_PODS ?= 1500
# SCHED_BENCH_CONSTRAINED: share of the pods, in groups of 4 replicas, with
# required pod anti-affinity or a DoNotSchedule spread on hostnames.
SCHED_BENCH_CONSTRAINED ?= 0.2
sched-bench: build
	@mkdir -p .run/sched-bench
	$(GO) test -c -o bin/schedbench.test ./test/schedbench
	GPUD_REQUIRE_K8S=1 ./bin/schedbench.test -test.run '^TestCompare$$' -test.v -test.timeout 30m -compare \
		-gpud $(CURDIR)/$(BIN) -data $(FGD_DATA) -pods $(SCHED_BENCH_PODS) -constrained $(SCHED_BENCH_CONSTRAINED) \
		-logdir $(CURDIR)/.run/sched-bench -out $(CURDIR)/.run/sched-bench/table.txt $(SCHED_BENCH_ARGS)

## scale-bench: issue 25's side-by-side run at a node count of its own:
## NODES GPU nodes built from openb's node models (the same model mix, its
## 1,213 GPU nodes repeated), PODS pods sampled from its pod list (copied past
## its length), ResourceSlices written directly (no agents). Both schedulers
## run in turn on one kube-apiserver and print one table: pods/s and the ratio
## to kube-scheduler, the longest pause between binds, the time from start to
## the first bind, feed latency p50/p99 (SCALE_BENCH_FEED pods, one at a
## time), peak RSS, CPU-seconds per 1,000 pods, unallocated GPU % at the first
## failure. `make scale-bench NODES=2000 PODS=4000`; logs and the table go to
## .run/scale-bench.
NODES ?= 1000
PODS ?= 2000
SCALE_BENCH_FEED ?= 200
SCALE_BENCH_IDLE ?= 30s
scale-bench: build
	@mkdir -p .run/scale-bench
	$(GO) test -c -o bin/schedbench.test ./test/schedbench
	GPUD_REQUIRE_K8S=1 ./bin/schedbench.test -test.run '^TestCompare$$' -test.v -test.timeout 60m -compare \
		-gpud $(CURDIR)/$(BIN) -data $(FGD_DATA) -nodes $(NODES) -pods $(PODS) -feed $(SCALE_BENCH_FEED) -idle $(SCALE_BENCH_IDLE) \
		-logdir $(CURDIR)/.run/scale-bench -out $(CURDIR)/.run/scale-bench/table.txt $(SCALE_BENCH_ARGS)

## image: gpud's container image without a container engine (hack/image):
## an OCI image layout in bin/image/oci and a `docker load` tarball
## bin/image/gpud.tar. IMAGE defaults to ghcr.io/gpud/gpud:<the chart's
## appVersion>, the image the Helm chart deploys; its tag is the version
## built in. `make image IMAGE=registry.example.com/gpud:1.2.3`; push with
## `crane push bin/image/oci <ref>` or `skopeo copy oci:bin/image/oci ...`.
## With Docker, the Dockerfile builds the same image.
.PHONY: image
image:
	@set -e; \
	app=$$(sed -n 's/^appVersion: *"*\([^"]*\)"* *$$/\1/p' deploy/helm/gpud/Chart.yaml); \
	image="$(IMAGE)"; image="$${image:-ghcr.io/gpud/gpud:$$app}"; \
	last="$${image##*/}"; \
	case "$$last" in *:*) version="$${last##*:}";; *) version="$$app"; image="$$image:$$app";; esac; \
	echo "image: gpud $$version as $$image"; \
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags "-s -w -X main.version=$$version" -o bin/image/gpud ./cmd/gpud; \
	$(GO) run ./hack/image --binary bin/image/gpud --image "$$image" --layout bin/image/oci --tar bin/image/gpud.tar \
		--revision "$$(git rev-parse HEAD 2>/dev/null || true)"

## promtool-rules: the alerts' promtool unit tests and the dashboard's
## PromQL check (deploy/monitoring), needing Debian's prometheus package.
.PHONY: promtool-rules
promtool-rules:
	GPUD_REQUIRE_PROMTOOL=1 $(GO) test -count=1 ./deploy/monitoring

## node-bins: what test/nodeenv's real node runs (hack/node-bins.sh): the
## kubelet and kube-controller-manager from k8s.io/kubernetes at the pinned
## version and containerd 2.x, built once per version into
## ~/.cache/gpud/node-bins (GPUD_NODE_BINS); runc and the CNI plugins come
## from Debian (apt-get install runc containernetworking-plugins). Needs Go
## and the module proxy; the kubelet reuses most of make k8s-bins' packages.
.PHONY: node-bins
node-bins:
	./hack/node-bins.sh

## test-node: only the real-node tests (test/nodeenv and test/node_*_test.go:
## kubelet + containerd + runc with gpud agent), failing instead of skipping
## when their binaries are missing. Needs root; make test runs them too.
.PHONY: test-node
test-node:
	GPUD_REQUIRE_K8S=1 GPUD_REQUIRE_NODE=1 $(GO) test -race -count=1 -timeout 20m -run 'TestNode|TestScriptBuildsVersion|TestHostPath' -skip 'TestNodeLabels' ./test/nodeenv ./test
