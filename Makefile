# kured-host. `make` lists the targets; `make test` is what CI runs.

GO      ?= go
DIST    ?= dist
ARCHES  ?= amd64 arm64
VERSION ?= $(shell packaging/version.sh)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
PKG     := github.com/kured-host/kured-host
LDFLAGS := -s -w -X $(PKG)/daemon/version.Version=$(VERSION) -X $(PKG)/daemon/version.Commit=$(COMMIT)
# nfpm is pinned in tools/go.mod, apart from the product's own go.mod.
NFPM    := $(GO) tool -modfile=tools/go.mod nfpm
SHELL_FILES := packaging/version.sh packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm packaging/rpm/* tools/*.sh test/vm/*.sh .ci/run

export CGO_ENABLED ?= 0

.DEFAULT_GOAL := help
.PHONY: help demo build test unit fuzz lint sim drive sim-cost cover package test-packages test-integration test-vm test-vm-full model-full bench-lock bench bench-idle tools clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

demo: ## watch kured-host reboot simulated nodes on an embedded cluster (DEMO_FLAGS="--fast", "--help")
	@tools/need.sh gcc:gcc
	@tools/demo.sh $(DEMO_FLAGS)

build: ## build bin/kured-host for this machine (static, version from git)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/kured-host ./cmd/kured-host

test: tools lint unit sim fuzz test-packages test-integration ## everything CI runs: lint, unit (race, model check), the simulator, fuzz, packages, cluster tests

# The alert blocker's tests start real Prometheus and VictoriaMetrics
# servers: Debian's binaries, unpacked here rather than installed.
BACKENDS := $(CURDIR)/.cache/backends

# test/sim runs in `make sim`, without the race detector: its scenarios
# are the daemon's code under synctest, which the race run of ./daemon/...
# already covers, and under -race they took 8 of CI's minutes.
unit: ## unit tests with the race detector (fetches Prometheus and VictoriaMetrics from Debian once)
	@tools/backends.sh $(BACKENDS)
	PATH="$(BACKENDS)/bin:$$PATH" CGO_ENABLED=1 $(GO) test -race -count=1 $$($(GO) list ./... | grep -v '/test/sim')

# The seed corpora run with the unit tests; these add a short random search,
# bounded by executions rather than time: a time bound ends in "context
# deadline exceeded" when a loaded machine stalls a worker at the end.
fuzz: ## short fuzz runs of the claim parser and the lock's rules
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 200000x ./daemon/claim/
	$(GO) test -run '^$$' -fuzz '^FuzzRules$$' -fuzztime 300000x ./daemon/claim/

# The simulator (test/sim): the real daemon on simulated clusters, virtual
# time, faults drawn per seed. SEED=N replays one seed; SEEDS=N runs N.
SEEDS ?= 1000
sim: ## the simulators: the queue's and the cycle's cores driven from one loop (daemon/queue's drive), then the real daemon's scenarios and SEEDS seeds (1000) under faults; SEED=N replays one of the latter
	$(if $(SEED),,DRIVE_SEEDS=$(SEEDS) $(GO) test -count=1 -timeout 30m -run '^TestDrive' ./daemon/queue/ && )cd test/sim && $(if $(SEED),,$(GO) test -count=1 -timeout 30m ./... && )SIM_SEEDS=$(SEEDS) SIM_SEED=$(SEED) $(GO) test -count=1 -timeout 30m -run '^TestSim$$'

# The drive (daemon/queue): the queue's and the cycle's cores on rolls
# drawn from seeds, from one loop; a seed's trace is the same every time.
drive: ## the cores' simulator alone: SEEDS seeds (1000) of rolls drawn from them; SEED=N replays one and prints its trace
	DRIVE_SEEDS=$(SEEDS) DRIVE_SEED=$(SEED) $(GO) test -count=1 -timeout 30m $(if $(SEED),-v) -run '^TestDriveSeeds$$' ./daemon/queue/

# A measurement, not a test: what a roll costs the API server, on the
# simulator (requests, bytes per node, makespan against the ideal). 100
# nodes take seconds, 1,000 about 3 to 5 minutes on 2 cores.
# SIM_COST_HEAP=file writes the heap profile at its peak (file.N).
SIM_COST_NODES ?= 100,1000
sim-cost: ## what a whole roll of 100 and 1,000 nodes costs the API server, on the simulator, about 3 minutes (SIM_COST_NODES=5000: about an hour; SIM_COST_FOR=1h: the first hour only)
	cd test/sim && SIM_COST_NODES=$(SIM_COST_NODES) SIM_COST_FOR=$(SIM_COST_FOR) SIM_COST_HEAP=$(SIM_COST_HEAP) $(GO) test -count=1 -timeout 6h -run '^TestRollCost$$' -v .

# The cycle and the lock in the product module: their own tests, the
# simulator's regression scenarios and COVER_SEEDS seeds, one profile.
COVER_SEEDS ?= 200
cover: ## statement coverage of daemon and daemon/lock: unit tests, the simulator's scenarios and 200 seeds (about 1 minute)
	@d=$$(mktemp -d) && \
	  SIM_SEEDS=$(COVER_SEEDS) $(GO) test -count=1 -coverpkg=./daemon,./daemon/lock ./daemon ./daemon/lock ./test/sim \
	    -args -test.gocoverdir=$$d >/dev/null && \
	  $(GO) tool covdata percent -i=$$d -pkg=github.com/kured-host/kured-host/daemon,github.com/kured-host/kured-host/daemon/lock; \
	  rc=$$?; rm -rf $$d; exit $$rc

# staticcheck is pinned in tools/go.mod, as nfpm is.
lint: tools ## gofmt, go vet, staticcheck and shellcheck
	@out=$$(gofmt -l . 2>/dev/null); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool -modfile=tools/go.mod staticcheck ./...
	shellcheck $(SHELL_FILES)

# The harness is its own module (k8s.io/kubernetes stays out of go.mod).
# CGO on, as in the build cache; no -trimpath: the test API server finds
# its certificate fixtures by source path.
test-integration: ## tests against a real kube-apiserver (test/cluster)
	@echo "cluster harness: the first build on a machine compiles k8s.io/kubernetes"
	@echo "(about 20 minutes and 3 GB on 2 cores); later builds take about 20 s."
	cd test/cluster && CGO_ENABLED=1 $(GO) vet ./... && CGO_ENABLED=1 $(GO) test -count=1 -timeout 30m ./...

# The VM test installs this build's .deb and upgrades it to the same build
# under a higher version. Root, qemu; the image is cached (test/vm/README.md).
VM_DIST := $(DIST)/vm
VM_UPGRADE_VERSION = $(VERSION)$(if $(findstring +,$(VERSION)),.,+)vm.upgrade

# .ci/run's share of the VM scenarios; test-vm-full adds the two that only
# vary a reboot already covered (an apt inhibitor, a restart mid-drain), to
# keep CI under its 45 minutes under TCG.
VM_CI_RUN := ^(TestInstallAndEnable|TestBadConfiguration|TestRealReboot|TestSlowKubelet|TestUpgradeAndRemove|TestRealKubelet)$$

test-vm: ## a real Debian VM: apt install, systemctl enable, a real logind reboot, the real kubelet: six scenarios (root, qemu; VM_RUN=TestName for one)
	@tools/need.sh qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils mmdebstrap:mmdebstrap \
	  zstd:zstd mkfs.ext4:e2fsprogs ip:iproute2 flock:util-linux gcc:gcc
	@rm -rf $(VM_DIST) && mkdir -p $(VM_DIST)/upgrade
	@$(MAKE) --no-print-directory package ARCHES=amd64 VERSION='$(VM_UPGRADE_VERSION)'
	@cp $(DIST)/kured-host_*_amd64.deb $(VM_DIST)/upgrade/
	@$(MAKE) --no-print-directory package ARCHES=amd64
	@cp $(DIST)/kured-host_*_amd64.deb $(VM_DIST)/
	image=$$(test/vm/image.sh) && cd test/cluster && \
	  KURED_HOST_VM=1 KURED_HOST_VM_IMAGE="$$image" KURED_HOST_VM_DEBS=$(abspath $(VM_DIST)) \
	  CGO_ENABLED=1 $(GO) test -count=1 -v -timeout 60m -run '$(or $(VM_RUN),$(VM_CI_RUN))' ./vmtest/

test-vm-full: ## every VM scenario (test-vm's six, the apt inhibitor and the restart mid-drain)
	@$(MAKE) --no-print-directory test-vm VM_RUN=.

model-full: tools ## the spin model with every fault at once (minutes, 3 GB); make test runs the rest
	KURED_HOST_MODEL_FULL=1 $(GO) test -count=1 -v -timeout 60m -run 'TestModel/safety_with_crashes,_lost' ./model/

bench-lock: ## hand-off latency and API requests per acquisition, 20 and 50 nodes
	cd test/cluster && CGO_ENABLED=1 $(GO) test -run '^$$' -bench Handoff -benchtime 1x ./locktest/

# Every case rolls twice on the harness: with the slot lock and with a
# kured-style baseline (one shared lock object, polling). One table on
# stdout, and the same as JSON in results/ (not committed). BENCH=Roll/N=50
# picks cases; BENCH_T sets the simulated time per node (default 2s).
BENCH ?= Roll
bench: ## roll 10 to 500 nodes against the ideal and a kured-style baseline: one table, JSON in results/ (about 27 min)
	cd test/cluster && BENCH_RESULTS=$(abspath results) CGO_ENABLED=1 \
	  $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 60m ./benchtest/

bench-idle: ## the real binary idle for a minute: requests, RSS, CPU, binary size (IDLE_FOR=5m)
	cd test/cluster && CGO_ENABLED=1 $(GO) test -run '^$$' -bench IdleDaemon -benchtime 1x -v ./footprint/

package: ## build dist/*.deb and dist/*.rpm for amd64 and arm64
	@rm -f $(DIST)/*.deb $(DIST)/*.rpm
	@for arch in $(ARCHES); do \
	  echo "build linux/$$arch $(VERSION)"; \
	  GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' \
	    -o $(DIST)/linux_$$arch/kured-host ./cmd/kured-host || exit 1; \
	  for fmt in deb rpm; do \
	    ARCH=$$arch VERSION=$(VERSION) $(NFPM) package --config nfpm.yaml \
	      --packager $$fmt --target $(DIST)/ || exit 1; \
	  done; \
	done
	@ls -l $(DIST)/*.deb $(DIST)/*.rpm

test-packages: package ## inspect the built packages with dpkg-deb, rpm and lintian
	KURED_HOST_DIST=$(abspath $(DIST)) KURED_HOST_VERSION=$(VERSION) \
	  $(GO) test -count=1 -v -run 'TestPackages' ./packaging/

tools: ## install the Debian tools the tests use, when missing
	@tools/need.sh shellcheck:shellcheck rpm:rpm lintian:lintian spin:spin dbus-daemon:dbus \
	  systemd-analyze:systemd dpkg-deb:dpkg gcc:gcc

clean: ## remove build output
	rm -rf bin $(DIST)
