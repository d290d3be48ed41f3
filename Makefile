# demo-controller. The two commands a newcomer needs are `make demo` and
# `make test`; everything else is for working on it or shipping it.
IMAGE ?= demo-controller:dev
CLUSTER_DIR ?= target/local-cluster
KUBECTL ?= kubectl
ARGS ?=

.PHONY: build run demo test lint image push deploy undeploy cluster-up cluster-down bench

build: ## Build the release binary
	cargo build --release --locked

run: ## Run against the current kubeconfig context (pass flags with ARGS="-n default")
	cargo run --release --locked -- $(ARGS)

demo: ## No cluster? Start a local one, show onAdd/onUpdate/onDelete, clean up
	bash cluster/demo.sh

test: lint ## Lint, then every unit and end-to-end test against a real local control plane
	bash cluster/test.sh

lint: ## cargo fmt --check and clippy with warnings as errors (the bench harness too)
	cargo fmt --all -- --check
	cargo fmt --manifest-path bench/harness/Cargo.toml --all -- --check
	cargo clippy --all-targets --locked -- -D warnings
	CARGO_TARGET_DIR=$(CURDIR)/target cargo clippy --manifest-path bench/harness/Cargo.toml --all-targets --locked -- -D warnings

image: ## Build the container image
	docker build -t $(IMAGE) .

push: ## Push the container image
	docker push $(IMAGE)

deploy: ## Apply demo-controller.yaml with IMAGE as the container image
	sed 's|image: demo-controller:dev|image: $(IMAGE)|' demo-controller.yaml | $(KUBECTL) apply -f -

undeploy: ## Remove everything demo-controller.yaml created
	$(KUBECTL) delete -f demo-controller.yaml --ignore-not-found

cluster-up: ## Start the local control plane (prints export KUBECONFIG=...)
	bash cluster/up.sh --dir $(CLUSTER_DIR)

cluster-down: ## Stop the local control plane and remove its state
	bash cluster/down.sh --dir $(CLUSTER_DIR)

bench: ## Benchmark against client-go, kube-rs and the floors (~30 min; ARGS=--with-100k; writes bench/results.md)
	bash bench/run.sh $(ARGS)
