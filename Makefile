# The two commands of the README, plus the setup steps they share.
.PHONY: run test setup lint constraints constraints-upgrade help

help:
	@echo "make run    start the vLLM engine and the gateway (Ctrl-C stops both)"
	@echo "make test   install what the tests need, run unit then integration tests"
	@echo "make setup  create both environments and build the embedded model"
	@echo "make lint   ruff, the import contracts, shellcheck (make test lints too)"
	@echo "make constraints          pin what a new dependency of pyproject.toml brings (constraints.txt)"
	@echo "make constraints-upgrade  every pin of constraints.txt at its newest version"

run:
	./run.sh

test:
	scripts/test.sh

setup:
	scripts/setup_gateway_env.sh
	./launch_vllm.sh --install-only

lint:
	scripts/lint.sh

# constraints.txt: every installed package's version (docs/testing.md#dependencies).
constraints:
	$(or $(GATEWAY_PYTHON),python3) scripts/constraints.py update

constraints-upgrade:
	$(or $(GATEWAY_PYTHON),python3) scripts/constraints.py update --upgrade
