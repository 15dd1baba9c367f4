# The two commands: `make run` and `make test`. Both set up what they need.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install run test lint typecheck bench system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# `pip install freshindex` alone is the thin HTTP client; the service needs the `server` extra.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[server]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[server,test]'
	touch $@ $(VENV)/.installed-run

# OCR of the scanned sample PDF needs tesseract with English data; the tests
# also read Simplified Chinese. Install them when this machine lets us (root or
# sudo with apt-get); otherwise a scanned PDF is recorded as a per-document
# error (ocr_unavailable) and everything else is indexed.
OCR_PACKAGES := tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim
system-deps:
	@if tesseract --list-langs 2>/dev/null | grep -qx chi_sim && tesseract --list-langs 2>/dev/null | grep -qx eng; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get install -y -qq $(OCR_PACKAGES) >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $(OCR_PACKAGES) >/dev/null)) \
	  || echo "warning: could not install tesseract; scanned PDFs will be reported as errors"; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	  sudo apt-get install -y -qq $(OCR_PACKAGES) >/dev/null \
	  || echo "warning: could not install tesseract; scanned PDFs will be reported as errors"; \
	else echo "note: tesseract data missing; scanned PDFs will be reported as errors (apt-get install $(OCR_PACKAGES))"; fi

# The full service (workers, beat, serve and every command) in $(VENV), and tesseract when it can.
install: $(VENV)/.installed-run system-deps

run: $(VENV)/.installed-run system-deps
	FRESHINDEX=$(BIN)/freshindex sh examples/demo.sh

# Two processes, a test file each (module fixtures such as a long-lived worker deployment stay in one): most of
# the suite waits on subprocesses, brokers and databases.  TEST_PROCESSES=0 runs it in this process alone.
TEST_PROCESSES ?= 2
test: $(VENV)/.installed-test system-deps
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

# mypy against a real (non-editable) install of the package, where every import path is real: the
# card's four parts sit under freshindex/ as in the wheel.  Error paths are mapped back to the repository.
TYPECHECK_DIR ?= $(VENV)/typecheck
typecheck: $(VENV)/.installed-test
	rm -rf $(TYPECHECK_DIR) build
	PYTHONWARNINGS=ignore $(BIN)/pip install --quiet --no-deps --no-build-isolation --no-compile \
	  --target $(TYPECHECK_DIR) .
	rm -rf build
	cd $(TYPECHECK_DIR) && $(abspath $(BIN))/mypy --config-file $(CURDIR)/pyproject.toml \
	  --cache-dir $(abspath $(VENV))/.mypy_cache -p freshindex > mypy.out; \
	  rc=$$?; sed -E 's#^freshindex/(workers|schedules|snapshots|acl)/#\1/#' mypy.out; exit $$rc

bench: $(VENV)/.installed-test
	$(BIN)/python -m bench.build
	$(BIN)/python -m bench.snapshots

clean:
	rm -rf .freshindex .freshindex-demo bench/out
