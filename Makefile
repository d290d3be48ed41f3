# demo-controller. The two commands a newcomer needs are `make demo` and
# `make test`; everything else is for working on it or shipping it.
IMAGE ?= demo-controller:dev
KUBECTL ?= kubectl
ARGS ?=
N ?=
NODE ?=
DURATION ?= 10m
# Which cluster a target acts on is said on make's command line only, never
# taken from the environment: some CI systems export CONTEXT=production, and a
# CLUSTER_DIR or NODE_DIR exported for something else would pick a cluster
# unasked. ($(origin V) is `command line` for `make demo CONTEXT=kind-dev`.)
from_command_line = $(if $(filter command line,$(origin $(1))),$($(1)),$(2))
override CONTEXT := $(call from_command_line,CONTEXT,)
override CLUSTER_DIR := $(call from_command_line,CLUSTER_DIR,target/local-cluster)
override NODE_DIR := $(call from_command_line,NODE_DIR,target/local-node)

.PHONY: build run demo chapter test lint book book-serve book-check image push deploy undeploy cluster-up cluster-down bench soak node-up node-down node-test

build: ## Build the release binary
	bash cluster/cargo.sh build --release --locked

run: ## Run against the current kubeconfig context (pass flags with ARGS="-n default")
	bash cluster/cargo.sh run --release --locked -- $(ARGS)

demo: ## Show onAdd/onUpdate/onDelete: on your cluster (CONTEXT=name, or a kind/k3d/minikube/... current context whose server is on this machine) in a namespace of its own; else on a local one it starts and removes (one running from cluster-up/node-up is used and left running)
	@NODE_DIR='$(NODE_DIR)' bash cluster/demo.sh --dir '$(CLUSTER_DIR)' --context '$(CONTEXT)'

chapter: ## Run chapter N of the book (N=1..5, 7, 8 or 9) on the local control plane (started if needed, left running); prints the kubectl line that makes a pod appear (for 7: installs its CRD, prints the lines that create a PodSummary and a pod; for 8: the lines that label a namespace and create a source; for 9: makes three Nodes, runs an agent for each and the controller, prints the lines that ask for a reboot)
	@N=$(N) ARGS="$(ARGS)" bash cluster/chapter.sh --dir $(CLUSTER_DIR)

test: lint book-check ## Lint, build the book (warnings are errors), then every unit and end-to-end test against a real local control plane (as root the node tests too; NODE=skip leaves them out)
	NODE=$(NODE) bash cluster/test.sh

book: ## Build the book into book/book/ (mdbook, pinned, installed on first use by book/mdbook.sh)
	bash book/mdbook.sh build book

book-serve: ## Serve the book at http://localhost:3000, rebuilt on every change
	bash book/mdbook.sh serve book

book-check: ## Build the book, failing on a warning (the code pages show is checked by tests/figures.rs)
	bash book/check.sh

lint: ## cargo fmt --check and clippy with warnings as errors (the workspace's crates/ and the bench harness too)
	bash cluster/cargo.sh fmt --all -- --check
	bash cluster/cargo.sh fmt --manifest-path bench/harness/Cargo.toml --all -- --check
	bash cluster/cargo.sh clippy --all-targets --locked --workspace -- -D warnings
	bash cluster/cargo.sh --shared-target clippy --manifest-path bench/harness/Cargo.toml --all-targets --locked -- -D warnings

image: ## Build the container image from the Dockerfile (docker or podman; local stand-in bases where none can be pulled)
	bash cluster/image.sh $(IMAGE)

push: ## Push the container image (refused for one built on local stand-in bases)
	bash cluster/image.sh --push $(IMAGE)

deploy: ## Apply demo-controller.yaml with IMAGE (an image reference, checked) as the container image, to the cluster CONTEXT=name names, else to the local node when it runs; any other (a current context, an exported KUBECONFIG's) is named and refused; prints the server first (cluster/deploy.sh)
	@KUBECTL='$(KUBECTL)' bash cluster/deploy.sh apply --image "$$DEPLOY_IMAGE" --node-dir '$(NODE_DIR)' --context '$(CONTEXT)'

# IMAGE may come from the environment: it reaches the script as a value in
# its environment, never as text of the shell command above.
deploy: export DEPLOY_IMAGE := $(IMAGE)

undeploy: ## Remove what demo-controller.yaml created, from the cluster make deploy picks by the same rule; prints the server first
	@KUBECTL='$(KUBECTL)' bash cluster/deploy.sh delete --node-dir '$(NODE_DIR)' --context '$(CONTEXT)'

cluster-up: ## Start the local control plane (prints export KUBECONFIG=...)
	bash cluster/up.sh --dir $(CLUSTER_DIR)

cluster-down: ## Stop the local control plane and remove its state
	bash cluster/down.sh --dir $(CLUSTER_DIR)

bench: ## Benchmark against client-go, kube-rs and the floors, and two replicas with --leader-elect (prints its estimated run time; ARGS=--with-100k; writes bench/results.{md,json,svg})
	bash bench/run.sh $(ARGS)

soak: ## Chaos soak: three replicas with --leader-elect on a local control plane of its own, a writer, leader kills, pauses, lease deletes and API server restarts for DURATION (default 10m); an oracle checks the logs, prints the figures and exits non-zero on a violation (bench/soak.sh; ARGS=--faults=leader-kill,apiserver-kill picks faults; logs and report.txt/.json in target/soak; ARGS=--record makes a complete run the committed record, bench/soak.json, the book's soak figures come from)
	DURATION=$(DURATION) bash bench/soak.sh $(ARGS)

node-up: ## As root: start a real one-node cluster (containerd + kubelet; prints export KUBECONFIG=...)
	bash cluster/node/up.sh --dir $(NODE_DIR)

node-down: ## Stop the local node and remove what it made (its namespaces, cgroups, directory)
	bash cluster/node/down.sh --dir $(NODE_DIR)

node-test: ## As root: only the node tests (image, node, tests/node.rs, teardown check)
	bash cluster/node/test.sh $(ARGS)
