#!/usr/bin/env bash
# SFT steps per second of the CPU demo's tiny model in one process and under
# `accelerate launch` with two processes (DDP over gloo), at the same global batch of 8
# (1 x 8 and 2 x 4), each process with one torch thread. A ratio of two runs of one script on a
# loaded, shared 2-core machine: `uptime` is written before each run.
#
#   bash benchmarks/finetune/distributed_cpu.sh [OUT] [WORK]
#     OUT  (default benchmarks/finetune/results/distributed_cpu): commands, logs, summary.md
#     WORK (default /tmp/ft_distributed): data, model and run folders
set -euo pipefail
OUT=${1:-benchmarks/finetune/results/distributed_cpu}
W=${2:-/tmp/ft_distributed}
STEPS=${STEPS:-40}
mkdir -p "$OUT" "$W"
: > "$OUT/commands.txt"
run() {
  local log=$1; shift
  echo "+ $*" | tee -a "$OUT/commands.txt"
  echo "  $(uptime)" | tee -a "$OUT/commands.txt"
  OMP_NUM_THREADS=1 /usr/bin/time -f "  wall %es" -a -o "$OUT/commands.txt" "$@" > "$OUT/$log" 2>&1
}

[ -f "$W/data/spec.json" ] || dilemmax finetune data "$W/data" --episodes 200 --costs 0.0 \
  --team-weights 1.0 --num-agents 2 --provenances anonymous --mapping uninformative \
  --fractions 0.8,0.1,0.1 --protocol brief=true --no-progress > /dev/null
[ -f "$W/tiny/config.json" ] || dilemmax finetune tiny-model "$W/tiny" --data "$W/data" \
  --vocab 1024 --hidden 128 --layers 4 --text-stride 4 > /dev/null

common=(--model "$W/tiny" --data "$W/data" --steps "$STEPS" --accum 1 --warmup 0
  --logging-steps 10 --save-steps "$STEPS" --lora-dropout 0 --threads 1 --no-resume
  --lora-save lm_head,norm --max-length 1024)
rm -rf "$W/one" "$W/two"
run one.log dilemmax finetune sft "${common[@]}" --out "$W/one" --batch 8
run two.log python -m accelerate.commands.launch \
  --config_file examples/accelerate/cpu_two_processes.yaml --num_processes 2 \
  -m dilemmax.cli finetune sft "${common[@]}" --out "$W/two" --batch 4

rate() { grep -o "'train_steps_per_second': '[0-9.]*'" "$OUT/$1" | head -1 | grep -o "[0-9.]*'$" | tr -d "'"; }
loss() { grep -o "'train_loss': '[0-9.]*'" "$OUT/$1" | head -1 | grep -o "[0-9.]*'$" | tr -d "'"; }
one=$(rate one.log); two=$(rate two.log)
{
  echo "| processes | per-process batch | steps | steps/s (Trainer's train_steps_per_second) | mean train loss |"
  echo "| --- | --- | --- | --- | --- |"
  echo "| 1 | 8 | $STEPS | $one | $(loss one.log) |"
  echo "| 2 | 4 | $STEPS | $two | $(loss two.log) |"
  echo
  echo "two / one: $(python -c "print(f'{$two / $one:.2f}')")"
  echo
  echo "load before each run:"
  grep "load average" "$OUT/commands.txt"
} | tee "$OUT/summary.md"
