#!/usr/bin/env bash
# Every accelerator figure in one call (issue #39): installs the carried wheels, then runs
# benchmarks/gpu/bench.py within BUDGET seconds (default 530, so the call ends inside 9 minutes),
# everything it measures under $OUT (rows.jsonl, results.json, results.md, env_throughput.png,
# nvidia-smi.txt, log.txt). Extra arguments go to bench.py (--parts, --tiny, ...).
#
# On the lent GPU machine, from this machine (wheels fetched first: benchmarks/gpu/fetch_wheels.sh):
#   run(command="bash benchmarks/gpu/run.sh", carry=[".whl"], timeout_s=600)
# Anywhere else:
#   OUT=/tmp/gpu-results bash benchmarks/gpu/run.sh --tiny
set -uo pipefail
start=$(date +%s)
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# The GPU machine's image has jax, flax, optax, chex and orbax; distrax, pettingzoo and
# gymnasium (and what they need that it lacks) travel as wheels in .whl/. Installing them is
# part of the call and of its time.
if compgen -G ".whl/*.whl" > /dev/null; then
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/dilemmax-site .whl/*.whl; then
    export PYTHONPATH=/tmp/dilemmax-site${PYTHONPATH:+:$PYTHONPATH}
  else
    echo "installing the carried wheels failed; parts that need them will fail" >&2
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
# One compile cache for every part's process: the A/B's default variant and the training
# part's env-alone programs reuse the env part's compiled programs.
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/dilemmax-jax-cache}
installed=$(( $(date +%s) - start ))
echo "wheels installed in ${installed} s"
"$PY" benchmarks/gpu/bench.py --out "$OUT" --budget $(( ${BUDGET:-530} - installed )) "$@" \
  2>&1 | tee "$OUT/log.txt"
