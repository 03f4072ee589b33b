# Everything a fresh machine with only Go needs is built here from pinned Go
# modules (test/tools/*/go.mod) into bin/, which git ignores. A second run finds
# the binaries and skips the builds.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(CURDIR)
BIN := $(ROOT)/bin
TOOLS := $(BIN)/tools
ENVTEST_ASSETS := $(BIN)/envtest

# The Equinix SDK's checksum is pinned in go.sum; the public checksum database
# does not know every release of it.
export GONOSUMDB := github.com/equinix
export KUBEBUILDER_ASSETS := $(ENVTEST_ASSETS)

KUBE_APISERVER := $(ENVTEST_ASSETS)/kube-apiserver
ETCD := $(ENVTEST_ASSETS)/etcd
CONTROLLER_GEN := $(TOOLS)/controller-gen
GOLANGCI_LINT := $(TOOLS)/golangci-lint
DEADCODE := $(TOOLS)/deadcode
GOTESTSUM := $(TOOLS)/gotestsum
INCLUSTER_MANAGER := $(TOOLS)/incluster-manager
KUSTOMIZE := $(TOOLS)/kustomize
CLUSTERCTL := $(TOOLS)/clusterctl

# tool-build builds the Go package $(2) from the tools module in $(1) into $@.
define tool-build
	@echo "building $(notdir $@) from test/tools/$(1) (once; cached in $(dir $@))"
	cd test/tools/$(1) && go build -o $@ $(2)
endef

ARGS ?=
# The race detector runs with every test: allocation is concurrent by design.
TEST_FLAGS ?= -race
# Programs the tests run besides the Go code; each part of the project adds
# what its tests need.
TEST_DEPS := envtest $(INCLUSTER_MANAGER) $(GOTESTSUM)
# The Debian programs the CAPP rendering tests need (see $(NODE_TOOLS) below);
# REQUIRE_NODE_TOOLS makes those tests fail rather than skip without them.
NODE_TOOLS := $(BIN)/.node-tools
TEST_DEPS += $(NODE_TOOLS)
test bench: export REQUIRE_NODE_TOOLS := 1
# The node boot test (test/node) boots a Debian image built from Debian's
# packages with debootstrap, once, under qemu's software emulation.
NODE_IMAGE := $(BIN)/node
NODE_BOOT_TOOLS := $(BIN)/.node-boot-tools
# The clusterctl packaging test (test/e2e/clusterctl) renders config/ipam with
# kustomize and installs it with clusterctl.
TEST_DEPS += $(KUSTOMIZE) $(CLUSTERCTL)
test: export KUSTOMIZE := $(KUSTOMIZE)
test: export CLUSTERCTL := $(CLUSTERCTL)
# The whole flow (test/e2e/flow) runs Cluster API's own core manager, built
# from the pinned module, over a MachineDeployment of PacketMachines.
CAPI_MANAGER := $(TOOLS)/capi-core-manager
TEST_DEPS += $(CAPI_MANAGER)
test: export CAPI_MANAGER := $(CAPI_MANAGER)
# Kubernetes' garbage collector and namespace controller run beside envtest
# where a test depends on them (test/e2e/move): the kube-controller-manager
# test-cluster runs, from the same one build of the node's binaries.
CLUSTER_BIN := $(BIN)/cluster
KUBE_NODE := $(addprefix $(CLUSTER_BIN)/,kubelet kube-controller-manager kube-scheduler kube-proxy kubeadm kubectl)
TEST_DEPS += $(KUBE_NODE)
test: export KUBE_CONTROLLER_MANAGER := $(CLUSTER_BIN)/kube-controller-manager
# The operators' alerts (config/monitoring) are checked by promtool's rule
# unit tests and the dashboard's queries by promqlnames (test/e2e/capp), both
# built from the pinned Prometheus module.
PROMTOOL := $(TOOLS)/promtool
PROMQLNAMES := $(TOOLS)/promqlnames
TEST_DEPS += $(PROMTOOL) $(PROMQLNAMES)
test: export PROMTOOL := $(PROMTOOL)
test: export PROMQLNAMES := $(PROMQLNAMES)
# The default components must install on the oldest Kubernetes minor Cluster
# API v1.14 supports on a management cluster (1.33; its book's support
# matrix): test/e2e/clusterctl runs clusterctl init against a kube-apiserver
# of that minor, built from its module. Only `make test` needs it.
OLDEST_KUBE_VERSION := v1.33.3
OLDEST_ENVTEST_ASSETS := $(BIN)/envtest-$(OLDEST_KUBE_VERSION)
OLDEST_ENVTEST := $(OLDEST_ENVTEST_ASSETS)/kube-apiserver $(OLDEST_ENVTEST_ASSETS)/etcd
test: export OLDEST_KUBEBUILDER_ASSETS := $(OLDEST_ENVTEST_ASSETS)
BENCH_FLAGS ?= -benchtime=1x -count=1

##@ Main

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-13s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: run
run: envtest $(CAPI_MANAGER) ## Run the local environment: API server, Cluster API's core manager, our managers, samples (ARGS=--once to exit after printing).
	CAPI_MANAGER=$(CAPI_MANAGER) go run ./test/localenv $(ARGS)

.PHONY: test
# The longest envtest suite (test/e2e/capp, about 116 specs under -race)
# takes most of go test's default 10 minutes on a loaded 2-core machine
# while the other packages run beside it. The envtest suites mostly wait
# (on the API server, the simulator's delays): go test runs four packages
# at once (-p 4) rather than GOMAXPROCS (2), which took `make test` from
# about 22 to 16 minutes on a loaded machine (docs/contributing.md).
test: $(TEST_DEPS) $(OLDEST_ENVTEST) ## Run every test: unit, fuzz seed corpora, envtest suites.
	INCLUSTER_MANAGER=$(INCLUSTER_MANAGER) $(GOTESTSUM) --format pkgname-and-test-fails -- -timeout 30m -p 4 $(TEST_FLAGS) ./...

# -parallel 4: go test runs at most GOMAXPROCS (2 here) parallel tests at
# once. Here three run side by side: two qemu guests at a time (each test
# boots two, one after the other; a third guest would only slow the others)
# and the devices-as-machines test, which mostly waits.
.PHONY: test-node
test-node: envtest $(NODE_IMAGE)/rootfs.img $(NODE_IMAGE)/kube ## Boot the rendered node configuration in Debian VMs under qemu, and devices as machines in namespaces on this host (image built once into bin/node).
	REQUIRE_NODE_BOOT=1 NODE_IMAGE=$(NODE_IMAGE) go test -count=1 -timeout 40m -parallel 4 -v ./test/node/

# The workload cluster test (test/workload, a Go module of its own) runs
# Cluster API's kubeadm bootstrap and control plane managers beside its core,
# built from test/tools/capi-providers.
CAPI_KUBEADM_BOOTSTRAP_MANAGER := $(TOOLS)/capi-kubeadm-bootstrap-manager
CAPI_KUBEADM_CONTROL_PLANE_MANAGER := $(TOOLS)/capi-kubeadm-control-plane-manager

# Its management clusters are made with clusterctl init from a local
# repository (kustomize) and run Kubernetes' garbage collector beside
# envtest, and the incluster flavor's pools need the in-cluster provider.
# Its clusters come up side by side: they wait on Cluster API's managers
# rather than compute (-parallel: see test-node). TestRealNodes boots
# its control plane and worker as machines of this host from the node image (the one
# test-node uses, built once): it runs here, where the management cluster,
# Cluster API's managers and root's network namespace already are.
WORKLOAD_PARTS = envtest $(CAPI_MANAGER) $(CAPI_KUBEADM_BOOTSTRAP_MANAGER) $(CAPI_KUBEADM_CONTROL_PLANE_MANAGER) $(CLUSTERCTL) $(KUSTOMIZE) $(INCLUSTER_MANAGER) $(KUBE_NODE) $(NODE_IMAGE)/rootfs.img $(NODE_IMAGE)/kube
WORKLOAD_ENV = REQUIRE_WORKLOAD=1 CAPI_MANAGER=$(CAPI_MANAGER) CLUSTERCTL=$(CLUSTERCTL) KUSTOMIZE=$(KUSTOMIZE) \
	CAPI_KUBEADM_BOOTSTRAP_MANAGER=$(CAPI_KUBEADM_BOOTSTRAP_MANAGER) CAPI_KUBEADM_CONTROL_PLANE_MANAGER=$(CAPI_KUBEADM_CONTROL_PLANE_MANAGER) \
	INCLUSTER_MANAGER=$(INCLUSTER_MANAGER) KUBE_CONTROLLER_MANAGER=$(CLUSTER_BIN)/kube-controller-manager KUBECTL=$(CLUSTER_BIN)/kubectl \
	NODE_IMAGE=$(NODE_IMAGE)
.PHONY: test-workload
test-workload: $(WORKLOAD_PARTS) ## Run Cluster API's e2e specs (QuickStart, MachineDeployment and KubeadmControlPlane scale, rollout, clusterctl move) on clusters of every flavor, on emulated nodes (in-memory workload clusters), and QuickStart on real nodes (machines of this host; root, own network namespace; docs/workload.md).
	cd test/workload && $(WORKLOAD_ENV) go test -count=1 -timeout 25m -parallel 5 -v ./...

# The test binary runs itself, not under go test, which reports an
# interrupted run as failed even when the test then passed.
.PHONY: run-cluster
run-cluster: $(WORKLOAD_PARTS) ## QuickStart's workload cluster on real nodes (machines of this host), kept with its kubeconfig printed until Ctrl-C, then deleted (root, Debian; docs/workload.md).
	cd test/workload && go test -c -o $(BIN)/workload.test . && \
		$(WORKLOAD_ENV) WORKLOAD_KEEP=1 $(BIN)/workload.test -test.v -test.timeout 0 -test.run '^TestRealNodes$$'

.PHONY: test-chaos
test-chaos: envtest ## Run two replicas of the IPAM manager while their leader is killed or frozen, and without leader election (minutes; docs/reliability.md).
	REQUIRE_CHAOS=1 go test -count=1 -timeout 20m -v ./test/chaos/

.PHONY: bench
bench: $(TEST_DEPS) ## Run the benchmarks (allocator; claims and CAPP machines against a real API server).
	go test -run '^$$' -bench . -benchmem ./shared/cidr/
	go test -run '^$$' -bench . -benchtime 1x -timeout 60m ./ipam/internal/records/
	INCLUSTER_MANAGER=$(INCLUSTER_MANAGER) go test -run '^$$' -bench . -timeout 60m $(BENCH_FLAGS) ./test/bench/

##@ Build

.PHONY: build
build: ## Build the managers and the simulator into bin/.
	go build -o $(BIN)/ipam-manager ./ipam
	go build -o $(BIN)/metalsim ./cmd/metalsim
	go build -o $(BIN)/capp-manager ./capp
	go build -o $(BIN)/metal-vrf-ccm ./ccm

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code, CRDs, RBAC and webhook manifests.
	$(CONTROLLER_GEN) object paths=./ipam/api/...
	$(CONTROLLER_GEN) paths=./ipam/... \
		crd output:crd:artifacts:config=config/ipam/crd/bases \
		rbac:roleName=manager-role output:rbac:artifacts:config=config/ipam/rbac \
		webhook output:webhook:artifacts:config=config/ipam/webhook
	$(CONTROLLER_GEN) object paths=./capp/api/...
	$(CONTROLLER_GEN) paths=./capp/... \
		crd output:crd:artifacts:config=config/capp/crd/bases \
		rbac:roleName=capp-manager-role output:rbac:artifacts:config=config/capp/rbac

.PHONY: verify
verify: $(GOLANGCI_LINT) $(DEADCODE) ## Check generated files are current, formatting, vet, lint, and that production code has no function only tests reach.
	$(MAKE) generate
	@changed=$$(git status --porcelain -- config ipam capp); [ -z "$$changed" ] || { echo "$$changed"; echo "generated files are out of date: run 'make generate' and commit"; exit 1; }
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt needed: $$out"; exit 1; }
	go vet ./...
	$(GOLANGCI_LINT) run ./...
	@out=$$($(DEADCODE) ./capp ./ipam ./ccm ./cmd/...); [ -z "$$out" ] || { echo "$$out"; echo "functions no program of the providers reaches (only tests call them): move them to the tests' own files or simtest"; exit 1; }

.PHONY: envtest
envtest: $(KUBE_APISERVER) $(ETCD) ## Build kube-apiserver and etcd for envtest.

# kube-apiserver built from its module reports v0.0.0-master unless told its
# version; clusterctl and Cluster API's core manager refuse a server whose
# version they cannot read, so each build is stamped as a release is.
# version-ldflags takes the version, e.g. v1.36.3.
version-ldflags = -X k8s.io/component-base/version.gitVersion=$(1) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(1:v%=%))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(1:v%=%)))
KUBE_VERSION := $(shell sed -n 's/^\tk8s.io\/kubernetes \(v[0-9.]*\).*/\1/p' test/tools/kube-apiserver/go.mod)

$(KUBE_APISERVER): test/tools/kube-apiserver/go.mod
	$(call tool-build,kube-apiserver,-ldflags '$(call version-ldflags,$(KUBE_VERSION))' k8s.io/kubernetes/cmd/kube-apiserver)

$(ETCD): test/tools/etcd/go.mod
	$(call tool-build,etcd,go.etcd.io/etcd/server/v3)

$(OLDEST_ENVTEST_ASSETS)/kube-apiserver: test/tools/kube-apiserver-1.33/go.mod
	$(call tool-build,kube-apiserver-1.33,-ldflags '$(call version-ldflags,$(OLDEST_KUBE_VERSION))' k8s.io/kubernetes/cmd/kube-apiserver)

# envtest wants both programs in one folder; etcd is the same for every version.
$(OLDEST_ENVTEST_ASSETS)/etcd: $(ETCD)
	@mkdir -p $(dir $@)
	ln -sf $(ETCD) $@

$(CONTROLLER_GEN): test/tools/controller-gen/go.mod
	$(call tool-build,controller-gen,sigs.k8s.io/controller-tools/cmd/controller-gen)

$(GOLANGCI_LINT): test/tools/golangci-lint/go.mod
	$(call tool-build,golangci-lint,github.com/golangci/golangci-lint/v2/cmd/golangci-lint)

$(DEADCODE): test/tools/deadcode/go.mod
	$(call tool-build,deadcode,golang.org/x/tools/cmd/deadcode)

$(GOTESTSUM): test/tools/gotestsum/go.mod
	$(call tool-build,gotestsum,gotest.tools/gotestsum)

$(CAPI_MANAGER): test/tools/capi-core/go.mod
	$(call tool-build,capi-core,sigs.k8s.io/cluster-api/core)

$(CAPI_KUBEADM_BOOTSTRAP_MANAGER): test/tools/capi-providers/go.mod
	$(call tool-build,capi-providers,sigs.k8s.io/cluster-api/bootstrap/kubeadm)

$(CAPI_KUBEADM_CONTROL_PLANE_MANAGER): test/tools/capi-providers/go.mod
	$(call tool-build,capi-providers,sigs.k8s.io/cluster-api/controlplane/kubeadm)

$(INCLUSTER_MANAGER): test/tools/incluster/go.mod
	$(call tool-build,incluster,sigs.k8s.io/cluster-api-ipam-provider-in-cluster)

$(KUSTOMIZE): test/tools/kustomize/go.mod
	$(call tool-build,kustomize,sigs.k8s.io/kustomize/kustomize/v5)

# remove_all_sd (Prometheus's own build tag) leaves out the cloud service
# discoveries the rule tests never use, most of the build; what remains is
# niced to leave the machine usable.
$(PROMTOOL): test/tools/promtool/go.mod
	@echo "building promtool from test/tools/promtool (once, minutes; cached in $(dir $@))"
	cd test/tools/promtool && nice -n 10 go build -tags remove_all_sd -o $@ github.com/prometheus/prometheus/cmd/promtool

$(PROMQLNAMES): test/tools/promtool/go.mod test/tools/promtool/promqlnames/main.go
	$(call tool-build,promtool,./promqlnames)

# clusterctl comes from the CAPI module the provider itself is built against
# (the main go.mod, where it is a tool), so the two always agree on the contract.
$(CLUSTERCTL): go.mod
	@echo "building clusterctl from the pinned Cluster API module (once; cached in $(dir $@))"
	go build -o $@ sigs.k8s.io/cluster-api/cmd/clusterctl

RELEASE_DIR := $(ROOT)/out

##@ Images

# The images the release's components name. `make release` writes these names
# into the components (the clusterctl variables IPAM_METAL_VRF_IMAGE and
# CAPP_METAL_VRF_IMAGE still override them at install time) and the cloud
# controller manager's into the cluster templates (CCM_IMAGE); `make images`
# builds them and `make push` pushes them. For your own registry:
# make images release push REGISTRY=registry.example.com/metal-vrf TAG=v0.1.0
REGISTRY ?= ghcr.io/metal-vrf
TAG ?= dev
IPAM_IMAGE := $(REGISTRY)/ipam-metal-vrf-manager:$(TAG)
CAPP_IMAGE := $(REGISTRY)/capp-metal-vrf-manager:$(TAG)
METALSIM_IMAGE := $(REGISTRY)/metal-vrf-metalsim:$(TAG)
CCM_IMAGE := $(REGISTRY)/metal-vrf-ccm:$(TAG)
PLATFORMS ?= linux/amd64 linux/arm64
IMAGES_DIR := $(RELEASE_DIR)/images
IMAGEBUILD := $(TOOLS)/imagebuild
# Every timestamp in the images is the commit's, so a commit always gives the
# same digests.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct)
SOURCE_URL := https://github.com/metal-vrf/cluster-api-metal-vrf
IMAGE_LABELS = --label org.opencontainers.image.source=$(SOURCE_URL) \
	--label org.opencontainers.image.revision=$(shell git rev-parse HEAD) \
	--label org.opencontainers.image.version=$(TAG)
# Static binaries without build IDs, paths or VCS stamps: the same source
# gives the same bytes on every machine with the same Go.
IMAGE_GOFLAGS := -trimpath -buildvcs=false -ldflags=-buildid=

$(IMAGEBUILD): test/tools/imagebuild/go.mod test/tools/imagebuild/main.go
	$(call tool-build,imagebuild,.)

.PHONY: images
images: $(IMAGEBUILD) ## Build the OCI images (ipam-manager, capp-manager, metalsim, metal-vrf-ccm) for $(PLATFORMS) into out/images/*.tar, without a container engine.
	@mkdir -p $(IMAGES_DIR)
	@set -e; for image in ipam,ipam-manager,./ipam,$(IPAM_IMAGE),/manager \
		capp,capp-manager,./capp,$(CAPP_IMAGE),/manager \
		metalsim,metalsim,./cmd/metalsim,$(METALSIM_IMAGE),/metalsim \
		ccm,metal-vrf-ccm,./ccm,$(CCM_IMAGE),/metal-vrf-ccm; do \
		IFS=, read -r archive binary pkg ref entry <<<"$$image"; \
		binaries=; \
		for platform in $(PLATFORMS); do \
			out=$(RELEASE_DIR)/bin/$${platform/\//-}/$$binary; \
			CGO_ENABLED=0 GOOS=$${platform%/*} GOARCH=$${platform#*/} go build $(IMAGE_GOFLAGS) -o $$out $$pkg; \
			binaries="$$binaries --binary $$platform=$$out"; \
		done; \
		SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(IMAGEBUILD) build --ref $$ref --entrypoint $$entry \
			--out $(IMAGES_DIR)/$$archive.tar $$binaries $(IMAGE_LABELS); \
	done

# PUSH_FLAGS=--insecure for a registry that speaks plain HTTP.
PUSH_FLAGS ?=
# Two builds of the images of one commit, into two folders, must be
# byte-identical: every timestamp, order and path inside is fixed. Both
# platforms are built, so a change that breaks the arm64 build fails too.
.PHONY: test-images
test-images: $(IMAGEBUILD) ## Build the images twice for $(PLATFORMS) and check the archives are byte-identical.
	rm -rf $(RELEASE_DIR)/reproduce
	$(MAKE) images RELEASE_DIR=$(RELEASE_DIR)/reproduce/first
	$(MAKE) images RELEASE_DIR=$(RELEASE_DIR)/reproduce/second
	cd $(RELEASE_DIR)/reproduce && for archive in first/images/*.tar; do \
		cmp "$$archive" "second/images/$${archive#first/images/}" || { echo "$$archive differs between two builds of one commit"; exit 1; }; \
		sha256sum "$$archive"; \
	done

.PHONY: push
push: $(IMAGEBUILD) ## Push the images from out/images to $(REGISTRY) as $(TAG) (run `make images` with the same REGISTRY and TAG first).
	$(IMAGEBUILD) push --archive $(IMAGES_DIR)/ipam.tar --ref $(IPAM_IMAGE) $(PUSH_FLAGS)
	$(IMAGEBUILD) push --archive $(IMAGES_DIR)/capp.tar --ref $(CAPP_IMAGE) $(PUSH_FLAGS)
	$(IMAGEBUILD) push --archive $(IMAGES_DIR)/metalsim.tar --ref $(METALSIM_IMAGE) $(PUSH_FLAGS)
	$(IMAGEBUILD) push --archive $(IMAGES_DIR)/ccm.tar --ref $(CCM_IMAGE) $(PUSH_FLAGS)

##@ Release

# default-image makes the clusterctl variable $(1) default to the image $(2).
default-image = sed 's|$${$(1):=[^}]*}|$${$(1):=$(2)}|'

.PHONY: release
# Both providers are released together, as one release of this repository
# with one version: clusterctl reads the metadata.yaml of that release for
# either provider, so the two share metadata.yaml. The cluster templates are
# the infrastructure provider's (clusterctl looks for them beside its
# components), naming the cloud controller manager's image of this release;
# the operators' alerts and dashboard are opt-in files of their own.
release: $(KUSTOMIZE) ## Write the release assets into out/: both providers' components (naming $(REGISTRY)/...:$(TAG)), metadata.yaml, the cluster templates (naming $(REGISTRY)/metal-vrf-ccm:$(TAG)), metal-vrf-alerts.yaml, metal-vrf-dashboard.json.
	@mkdir -p $(RELEASE_DIR)
	$(KUSTOMIZE) build config/ipam/default | $(call default-image,IPAM_METAL_VRF_IMAGE,$(IPAM_IMAGE)) > $(RELEASE_DIR)/ipam-components.yaml.tmp
	mv $(RELEASE_DIR)/ipam-components.yaml.tmp $(RELEASE_DIR)/ipam-components.yaml
	$(KUSTOMIZE) build config/capp/default | $(call default-image,CAPP_METAL_VRF_IMAGE,$(CAPP_IMAGE)) > $(RELEASE_DIR)/infrastructure-components.yaml.tmp
	mv $(RELEASE_DIR)/infrastructure-components.yaml.tmp $(RELEASE_DIR)/infrastructure-components.yaml
	cp metadata.yaml $(RELEASE_DIR)/metadata.yaml
	for template in templates/cluster-template*.yaml; do \
		$(call default-image,CCM_IMAGE,$(CCM_IMAGE)) $$template > $(RELEASE_DIR)/$${template#templates/}; \
	done
	cp config/monitoring/alerts.yaml $(RELEASE_DIR)/metal-vrf-alerts.yaml
	cp config/monitoring/dashboard.json $(RELEASE_DIR)/metal-vrf-dashboard.json

.PHONY: clean
clean: ## Remove build output (keeps the envtest and tool binaries).
	rm -f $(BIN)/ipam-manager $(BIN)/capp-manager $(BIN)/metalsim $(BIN)/metal-vrf-ccm

# cloud-init (schema), shellcheck, ifupdown (ifquery, ifup --no-act) and
# iproute2 (addresses and routes in a network namespace) check the node
# configuration CAPP renders. apt-get runs only when one is missing; the stamp
# makes a second run a no-op.
$(NODE_TOOLS):
	@mkdir -p $(dir $@)
	@missing=; for tool in cloud-init shellcheck ifquery ifup ip; do command -v $$tool >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
		echo "installing cloud-init shellcheck ifupdown iproute2 with apt-get (once)"; \
		apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cloud-init shellcheck ifupdown iproute2 >/dev/null; \
	fi
	@touch $@

# The one-node cluster of test-cluster: etcd and kube-apiserver are envtest's;
# the rest of Kubernetes comes from test/tools/kube-node, the same
# k8s.io/kubernetes version, in one go build (the four share most of their
# compile: KUBE_NODE, above, as make test runs the collector too); the
# node's runtime, CNI plugins and registry are Debian's.
CLUSTER_TOOLS := $(BIN)/.cluster-tools
CLUSTER_OUT := $(RELEASE_DIR)/cluster
CLUSTER_REGISTRY := 127.0.0.1:5000
CAPI_VERSION := $(shell sed -n 's/^\tsigs.k8s.io\/cluster-api \(v[0-9.]*\).*/\1/p' go.mod)

$(KUBE_NODE) &: test/tools/kube-node/go.mod
	@echo "building kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubeadm, kubectl from test/tools/kube-node (once; cached in $(CLUSTER_BIN))"
	@mkdir -p $(CLUSTER_BIN)
	cd test/tools/kube-node && go build -ldflags '$(call version-ldflags,$(KUBE_VERSION))' -o $(CLUSTER_BIN)/ \
		k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl

$(CLUSTER_TOOLS):
	@mkdir -p $(dir $@)
	@missing=; for tool in containerd runc docker-registry iptables conntrack unshare; do command -v $$tool >/dev/null || missing=1; done; \
	[ -x /usr/lib/cni/bridge ] || missing=1; \
	if [ -n "$$missing" ]; then \
		echo "installing containerd runc containernetworking-plugins docker-registry iptables conntrack with apt-get (once)"; \
		apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containerd runc containernetworking-plugins docker-registry iptables conntrack util-linux >/dev/null; \
	fi
	@touch $@

# The images the cluster runs besides ours: Cluster API's three providers
# that clusterctl init installs (built from test/tools/capi-providers, the
# pinned Cluster API) and the Pods' sandbox (test/cluster/pause), named for
# the test's registry.
CAPI_IMAGES := $(addprefix $(CLUSTER_OUT)/base-images/,core.tar bootstrap-kubeadm.tar control-plane-kubeadm.tar)
# cert-manager's controller and CA injector, built from its module by
# test/tools/cert-manager and named as cert-manager names its images, for
# clusterctl to install from test/cluster/cert-manager.yaml.
CERT_MANAGER_IMAGES := $(addprefix $(CLUSTER_OUT)/base-images/,cert-manager-controller.tar cert-manager-cainjector.tar)
CERT_MANAGER_VERSION := $(shell sed -n 's/^\tgithub.com\/cert-manager\/cert-manager \(v[0-9.]*\).*/\1/p' test/tools/cert-manager/go.mod)
CLUSTER_IMAGES := $(CAPI_IMAGES) $(CERT_MANAGER_IMAGES) $(CLUSTER_OUT)/base-images/pause.tar
# <image>: <its main package in Cluster API> <the image name its components give>
capi-image.core := core cluster-api-controller
capi-image.bootstrap-kubeadm := bootstrap/kubeadm kubeadm-bootstrap-controller
capi-image.control-plane-kubeadm := controlplane/kubeadm kubeadm-control-plane-controller
$(CAPI_IMAGES): $(CLUSTER_OUT)/base-images/%.tar: test/tools/capi-providers/go.mod $(IMAGEBUILD)
	@mkdir -p $(@D)
	cd test/tools/capi-providers && CGO_ENABLED=0 go build $(IMAGE_GOFLAGS) -o $(CLUSTER_OUT)/bin/$* sigs.k8s.io/cluster-api/$(word 1,$(capi-image.$*))
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(IMAGEBUILD) build --ref $(CLUSTER_REGISTRY)/cluster-api/$(word 2,$(capi-image.$*)):$(CAPI_VERSION) \
		--entrypoint /manager --binary linux/amd64=$(CLUSTER_OUT)/bin/$* --out $@

$(CERT_MANAGER_IMAGES): $(CLUSTER_OUT)/base-images/cert-manager-%.tar: test/tools/cert-manager/go.mod test/tools/cert-manager/%/main.go $(IMAGEBUILD)
	@mkdir -p $(@D)
	cd test/tools/cert-manager && CGO_ENABLED=0 go build $(IMAGE_GOFLAGS) -o $(CLUSTER_OUT)/bin/cert-manager-$* ./$*
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(IMAGEBUILD) build --ref $(CLUSTER_REGISTRY)/cert-manager/cert-manager-$*:$(CERT_MANAGER_VERSION) \
		--entrypoint /$* --binary linux/amd64=$(CLUSTER_OUT)/bin/cert-manager-$* --out $@

$(CLUSTER_OUT)/base-images/pause.tar: test/cluster/pause/main.go $(IMAGEBUILD)
	@mkdir -p $(@D)
	CGO_ENABLED=0 go build $(IMAGE_GOFLAGS) -o $(CLUSTER_OUT)/bin/pause ./test/cluster/pause
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(IMAGEBUILD) build --ref $(CLUSTER_REGISTRY)/pause:test \
		--entrypoint /pause --binary linux/amd64=$(CLUSTER_OUT)/bin/pause --out $@

# cluster-api-operator, which test-operator installs the providers with,
# built from its module by test/tools/capi-operator: a module of its own, as
# the operator is built against an older Cluster API than ours. Its image is
# named for the test's registry, and its manifests are its module's
# config/default (CRDs, RBAC, Deployment, webhooks and their cert-manager
# Certificate) rendered by our kustomize through an overlay that names that
# image. The overlay lives in out/ and reaches the module cache by a relative
# path: kustomize refuses an absolute one.
CAPI_OPERATOR_VERSION := $(shell sed -n 's/^\tsigs.k8s.io\/cluster-api-operator \(v[0-9.]*\).*/\1/p' test/tools/capi-operator/go.mod)
OPERATOR_OUT := $(CLUSTER_OUT)/operator
OPERATOR_IMAGE := $(OPERATOR_OUT)/capi-operator.tar
OPERATOR_IMAGE_NAME := $(CLUSTER_REGISTRY)/capi-operator/cluster-api-operator
OPERATOR_IMAGE_REF := $(OPERATOR_IMAGE_NAME):$(CAPI_OPERATOR_VERSION)
OPERATOR_COMPONENTS := $(OPERATOR_OUT)/capi-operator-components.yaml

$(OPERATOR_IMAGE): test/tools/capi-operator/go.mod $(IMAGEBUILD)
	@mkdir -p $(@D)
	cd test/tools/capi-operator && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags='-buildid= -X sigs.k8s.io/cluster-api-operator/version.gitVersion=$(CAPI_OPERATOR_VERSION)' \
		-o $(OPERATOR_OUT)/manager sigs.k8s.io/cluster-api-operator/cmd
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(IMAGEBUILD) build --ref $(OPERATOR_IMAGE_REF) \
		--entrypoint /manager --binary linux/amd64=$(OPERATOR_OUT)/manager --out $@

$(OPERATOR_COMPONENTS): test/tools/capi-operator/go.mod $(KUSTOMIZE)
	@mkdir -p $(OPERATOR_OUT)/overlay
	config=$$(cd test/tools/capi-operator && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api-operator)/config/default; \
	printf 'resources:\n- %s\nimages:\n- name: gcr.io/k8s-staging-capi-operator/cluster-api-operator\n  newName: %s\n  newTag: %s\n' \
		"$$(realpath --relative-to=$(OPERATOR_OUT)/overlay "$$config")" $(OPERATOR_IMAGE_NAME) $(CAPI_OPERATOR_VERSION) \
		> $(OPERATOR_OUT)/overlay/kustomization.yaml
	$(KUSTOMIZE) build $(OPERATOR_OUT)/overlay > $@.tmp
	@grep -qF 'image: $(OPERATOR_IMAGE_REF)' $@.tmp || { echo "the operator's Deployment does not name $(OPERATOR_IMAGE_REF): did its config/default change its image?"; exit 1; }
	mv $@.tmp $@

CLUSTER_PARTS := envtest $(KUBE_NODE) $(CLUSTER_TOOLS) $(CLUSTERCTL) $(KUSTOMIZE) $(IMAGEBUILD) $(CLUSTER_IMAGES)
CLUSTER_TEST_ENV = REQUIRE_CLUSTER=1 CLUSTER_BIN=$(CLUSTER_BIN) CLUSTER_IMAGES=$(CLUSTER_OUT)/base-images CLUSTER_RELEASE=$(CLUSTER_OUT) \
	CAPI_VERSION=$(CAPI_VERSION) IMAGEBUILD=$(IMAGEBUILD) CLUSTERCTL=$(CLUSTERCTL) KUSTOMIZE=$(KUSTOMIZE)
CLUSTER_TEST = $(CLUSTER_TEST_ENV) go test -count=1 -v ./test/cluster/ -run '^TestCluster$$'

.PHONY: test-cluster
test-cluster: $(CLUSTER_PARTS) ## Install both providers with clusterctl on a real one-node cluster running their images and run a MachineDeployment on the simulator (root, Debian; docs/cluster.md).
	$(MAKE) images release PLATFORMS=linux/amd64 REGISTRY=$(CLUSTER_REGISTRY)/metal-vrf TAG=test RELEASE_DIR=$(CLUSTER_OUT)
	$(CLUSTER_TEST) -timeout 45m

# The previous release of this project (docs/images.md, "Releases"): its tag
# and the commit the tag names, so that a clone without tags builds it too.
# Its own Makefile builds its images and components from a clone of that
# commit, with tools of its own pins in its own bin.
PREVIOUS_RELEASE := v0.1.0
PREVIOUS_RELEASE_COMMIT := 003d266ba3f0b77a782da654d5a4ac2a927749d8
PREVIOUS_OUT := $(CLUSTER_OUT)/previous/$(PREVIOUS_RELEASE)

$(PREVIOUS_OUT)/.built:
	@echo "building the previous release $(PREVIOUS_RELEASE) ($(PREVIOUS_RELEASE_COMMIT)) from git (once; cached in $(PREVIOUS_OUT))"
	rm -rf $(PREVIOUS_OUT)
	git clone --quiet --no-checkout $(ROOT) $(PREVIOUS_OUT)/src
	git -C $(PREVIOUS_OUT)/src checkout --quiet --detach $(PREVIOUS_RELEASE_COMMIT)
	$(MAKE) -C $(PREVIOUS_OUT)/src images release BIN=$(PREVIOUS_OUT)/bin PLATFORMS=linux/amd64 \
		REGISTRY=$(CLUSTER_REGISTRY)/metal-vrf TAG=$(PREVIOUS_RELEASE) RELEASE_DIR=$(PREVIOUS_OUT)/release
	@touch $@

.PHONY: test-upgrade
test-upgrade: $(CLUSTER_PARTS) $(PREVIOUS_OUT)/.built ## Install the previous release with clusterctl, run pools of every source, claims and machines, then `clusterctl upgrade apply` to this tree's build: nothing renumbered or re-created (root, Debian; docs/upgrade.md).
	$(MAKE) images release PLATFORMS=linux/amd64 REGISTRY=$(CLUSTER_REGISTRY)/metal-vrf TAG=test RELEASE_DIR=$(CLUSTER_OUT)
	CLUSTER_PREVIOUS=$(PREVIOUS_OUT)/release PREVIOUS_RELEASE=$(PREVIOUS_RELEASE) $(CLUSTER_TEST_ENV) \
		go test -count=1 -v ./test/cluster/ -run '^TestUpgrade$$' -timeout 45m

.PHONY: test-operator
test-operator: $(CLUSTER_PARTS) $(OPERATOR_IMAGE) $(OPERATOR_COMPONENTS) ## Install cert-manager, cluster-api-operator and, through it, Cluster API and both providers from ConfigMaps on the one-node cluster, then run test-cluster's flow (root, Debian; docs/cluster.md).
	$(MAKE) images release PLATFORMS=linux/amd64 REGISTRY=$(CLUSTER_REGISTRY)/metal-vrf TAG=test RELEASE_DIR=$(CLUSTER_OUT)
	$(CLUSTER_TEST_ENV) OPERATOR_IMAGE=$(OPERATOR_IMAGE) OPERATOR_COMPONENTS=$(OPERATOR_COMPONENTS) \
		go test -count=1 -v ./test/cluster/ -run '^TestOperator$$' -timeout 45m

.PHONY: run-management
run-management: $(CLUSTER_PARTS) ## The demo of test-cluster, a real management cluster kept running with its machines until Ctrl-C, then torn down (root, Debian; docs/cluster.md).
	$(MAKE) images release PLATFORMS=linux/amd64 REGISTRY=$(CLUSTER_REGISTRY)/metal-vrf TAG=test RELEASE_DIR=$(CLUSTER_OUT)
	CLUSTER_KEEP=1 $(CLUSTER_TEST) -timeout 0

# qemu, socat (which connects each of the guest's connections to the
# simulator), debootstrap and e2fsprogs (mkfs.ext4 -d to build the disk
# without a loop mount, debugfs to seed it and read it back) for the node
# boot test; ping for its machines (test/nodeagent), which ping each other
# over the VLAN bridges.
$(NODE_BOOT_TOOLS):
	@mkdir -p $(dir $@)
	@missing=; for tool in qemu-system-x86_64 socat debootstrap mkfs.ext4 debugfs ping xtables-nft-multi; do command -v $$tool >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
		echo "installing qemu-system-x86 socat debootstrap e2fsprogs iputils-ping iptables with apt-get (once)"; \
		apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-x86 socat debootstrap e2fsprogs iputils-ping iptables >/dev/null; \
	fi
	@touch $@

$(NODE_IMAGE)/rootfs.img: test/node/image.sh | $(NODE_BOOT_TOOLS)
	@echo "building the Debian node image with debootstrap (once; cached in $(NODE_IMAGE))"
	test/node/image.sh $(NODE_IMAGE)

# The layer the node agent lays over the image for each machine: kubelet,
# kubeadm and the control plane's images from this repository's binaries
# (test/node/kubelayer.sh; seconds, apart from building the binaries). Its
# etcd is the version this kubeadm runs (3.6), not envtest's.
NODE_ETCD := $(NODE_IMAGE)/etcd
$(NODE_ETCD): test/tools/etcd-node/go.mod
	$(call tool-build,etcd-node,go.etcd.io/etcd/server/v3)

# The pod network: the reference CNI plugins (test/tools/cni-plugins) and
# the route agent's DaemonSet (test/tools/routeagent).
NODE_CNI := $(NODE_IMAGE)/cni
NODE_ROUTEAGENT := $(NODE_IMAGE)/routeagent
$(NODE_CNI): test/tools/cni-plugins/go.mod
	@mkdir -p $@
	cd test/tools/cni-plugins && CGO_ENABLED=0 go build -o $@/ github.com/containernetworking/plugins/plugins/ipam/host-local \
		github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/main/loopback \
		github.com/containernetworking/plugins/plugins/meta/portmap
$(NODE_ROUTEAGENT): test/tools/routeagent/go.mod test/tools/routeagent/main.go
	cd test/tools/routeagent && CGO_ENABLED=0 go build -o $@ .
# The cluster DNS: CoreDNS, the version kubeadm lists, with only the
# plugins of kubeadm's Corefile (test/tools/coredns).
NODE_COREDNS := $(NODE_IMAGE)/coredns
$(NODE_COREDNS): test/tools/coredns/go.mod test/tools/coredns/main.go
	cd test/tools/coredns && CGO_ENABLED=0 go build $(IMAGE_GOFLAGS) -o $@ .
# The cloud controller manager's image in the layer (test/workload's real
# nodes run it).
NODE_CCM := $(NODE_IMAGE)/metal-vrf-ccm
$(NODE_CCM): go.mod $(shell find ccm shared -name "*.go" -not -name "*_test.go")
	CGO_ENABLED=0 go build $(IMAGE_GOFLAGS) -o $@ ./ccm

$(NODE_IMAGE)/kube: test/node/kubelayer.sh test/cluster/pause/main.go $(KUBE_NODE) $(KUBE_APISERVER) $(NODE_ETCD) $(NODE_CNI) $(NODE_ROUTEAGENT) $(NODE_CCM) $(NODE_COREDNS) | $(NODE_BOOT_TOOLS)
	@mkdir -p $(NODE_IMAGE)
	CGO_ENABLED=0 go build $(IMAGE_GOFLAGS) -o $(NODE_IMAGE)/pause ./test/cluster/pause
	test/node/kubelayer.sh $@ $(CLUSTER_BIN)/kubeadm $(CLUSTER_BIN)/kubelet $(KUBE_APISERVER) \
		$(CLUSTER_BIN)/kube-controller-manager $(CLUSTER_BIN)/kube-scheduler $(NODE_ETCD) $(NODE_IMAGE)/pause \
		$(CLUSTER_BIN)/kube-proxy $(NODE_CNI) $(NODE_ROUTEAGENT) $(NODE_CCM) $(NODE_COREDNS)
