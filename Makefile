# The two commands of the README, plus the setup steps they share.
.PHONY: run test setup lint help

help:
	@echo "make run    start the vLLM engine and the gateway (Ctrl-C stops both)"
	@echo "make test   install what the tests need, run unit then integration tests"
	@echo "make setup  create both environments and build the embedded model"
	@echo "make lint   ruff, the import contracts, shellcheck (make test lints too)"

run:
	./run.sh

test:
	scripts/test.sh

setup:
	scripts/setup_gateway_env.sh
	./launch_vllm.sh --install-only

lint:
	.venvs/gateway/bin/ruff check gateway marketplace bench tests scripts engine
	.venvs/gateway/bin/lint-imports
	shellcheck launch_vllm.sh run.sh scripts/*.sh .ci/run
