# One venv at the repository root; both targets install into it on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-full test test-slow install lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Every study at the size that shows its result (`--quick`: shorter horizons, fewer seeds and
# restarts, the same results keys); `make demo-full` runs the studies' full sizes into out-full/.
demo: $(STAMP)
	$(BIN)/diffmb reproduce all --quick --jobs 2 --out out

demo-full: $(STAMP)
	$(BIN)/diffmb reproduce all --jobs 2 --out out-full

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests

# The long checks (every published URDF against Pinocchio, the studies' long runs); CI runs them
# after `make test`.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m slow tests

lint: $(STAMP)
	$(BIN)/ruff check diffmb tests

bench: $(STAMP)
	$(BIN)/diffmb bench --out out/bench

clean:
	rm -rf $(VENV) out out-full .pytest_cache
