#!/usr/bin/env bash
# lm-eval-harness's local-completions against `python -m ensemble serve`, on the local GSM8K task beside this
# script (20 questions), for single:qwen and the default ensemble. `make lm-eval` builds .venv-lmeval and runs it.
# Usage: scripts/lm_eval/run.sh [MODEL ...]   (default: single:qwen safe-unite@qwen+smollm2)
# An interrupted run resumes: each answer is cached in $OUT/cache/MODEL as it comes.
# Env: LMEVAL_PORT (8011), LMEVAL_OUT (eval-out/lm-eval), LMEVAL_LIMIT (all 20), ENSEMBLE_PY (.venv/bin/python),
# LMEVAL_SAMPLES (lm-eval's --samples JSON: only these questions; scripts/lm_eval/cached.py names the cached ones).
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT=${LMEVAL_PORT:-8011}
OUT=${LMEVAL_OUT:-eval-out/lm-eval}
PY=${ENSEMBLE_PY:-.venv/bin/python}
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(single:qwen safe-unite@qwen+smollm2)
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
# One llama.cpp thread per member, as the committed evaluate run: with all cores per context, a machine that also runs
# other work stalls each pass on descheduled threads (an answer took 3-15 minutes here, against 13 s on one thread).
export ENSEMBLE_LENS_LLAMA_THREADS=${ENSEMBLE_LENS_LLAMA_THREADS:-1}
mkdir -p "$OUT/cache"
SERVER=""
if ! curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null; then
  "$PY" -m ensemble serve --port "$PORT" --runtime llamacpp --backend local --traces "$OUT/traces" >"$OUT/serve.log" 2>&1 &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null || true' EXIT
  for _ in $(seq 60); do curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break; sleep 1; done
fi
for MODEL in "${MODELS[@]}"; do
  .venv-lmeval/bin/lm_eval --model local-completions \
    --model_args "model=$MODEL,base_url=http://127.0.0.1:$PORT/v1/completions,tokenized_requests=False,tokenizer_backend=None,num_concurrent=1,max_retries=1,timeout=3600" \
    --include_path scripts/lm_eval --tasks gsm8k_ensemble_lens ${LMEVAL_LIMIT:+--limit $LMEVAL_LIMIT} \
    ${LMEVAL_SAMPLES:+--samples "$LMEVAL_SAMPLES"} \
    --output_path "$OUT/$MODEL" --log_samples --use_cache "$OUT/cache/$MODEL"  # the cache: a rerun resumes
done
