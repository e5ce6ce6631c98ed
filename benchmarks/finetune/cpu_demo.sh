#!/usr/bin/env bash
# End-to-end fine-tuning demo on CPU with a tiny model (issue #14's evidence), using only the
# `dilemmax finetune` commands. Give MODEL=<folder of a real causal LM> to run the same commands
# on it (then drop the tiny-model step and the --lora-save / --lr overrides; see README.md).
#
#   bash benchmarks/finetune/cpu_demo.sh [OUT]      (default OUT=benchmarks/finetune/results/cpu_demo)
set -euo pipefail
OUT=${1:-benchmarks/finetune/results/cpu_demo}
SFT_STEPS=${SFT_STEPS:-600}
RLOO_STEPS=${RLOO_STEPS:-30}
RLOO_LR=${RLOO_LR:-2e-5}
EPISODES=${EPISODES:-2}       # evaluation episodes per condition (15 conditions)
REWARD_RECORDS=${REWARD_RECORDS:-60}
THREADS=${THREADS:-1}
mkdir -p "$OUT"
run() { echo "+ $*" | tee -a "$OUT/commands.txt"; /usr/bin/time -f "  wall %es, max RSS %MkB" "$@"; }
uptime | tee "$OUT/uptime_start.txt"

# 1. teacher data: the full SFT grid (150 conditions), 5 episodes each, 3/1/1 split by episode
[ -f "$OUT/data/spec.json" ] || run dilemmax finetune data "$OUT/data" --episodes 5 --fractions 0.6,0.2,0.2 --no-progress
# 2. a tiny Llama-style model (2 layers, hidden 64) with a tokenizer fit to the prompts
MODEL=${MODEL:-$OUT/tiny}
[ -f "$MODEL/config.json" ] || run dilemmax finetune tiny-model "$OUT/tiny" --data "$OUT/data"
# 3. LoRA SFT (tiny-model overrides: lr 3e-3, batch 4 x 1, output layer and norms trained beside LoRA)
run dilemmax finetune sft --model "$MODEL" --data "$OUT/data" --out "$OUT/sft" --steps "$SFT_STEPS" \
  --lr 3e-3 --batch 4 --accum 1 --warmup 10 --lora-save lm_head,norm --threads "$THREADS" --save-steps 100
# 4. RLOO from the SFT adapter (K=5, T=1.0, top-p 1.0, beta 0.03, 128 tokens; demo lr $RLOO_LR)
run dilemmax finetune rloo --model "$MODEL" --adapter "$OUT/sft/adapter" --data "$OUT/data" \
  --out "$OUT/sft_rloo" --steps "$RLOO_STEPS" --lr "$RLOO_LR" --warmup 2 --threads "$THREADS" --save-steps 20 \
  --logging-steps 5
# 5. mean RLOO reward on held-out prompts (one sampled reply each, T=1.0): base, SFT, SFT+RLOO
for m in base sft sft_rloo; do
  adapter=(); [ "$m" = base ] || adapter=(--adapter "$OUT/$m/adapter")
  run dilemmax finetune reward --model "$MODEL" "${adapter[@]}" --data "$OUT/data" --split heldout \
    --max-records "$REWARD_RECORDS" --threads "$THREADS" --json "$OUT/reward_$m.json"
done
# 6. game outcomes on the 15-condition grid through the play harness (greedy replies)
run dilemmax finetune evaluate --model "$MODEL" --adapter sft="$OUT/sft/adapter" \
  --adapter sft_rloo="$OUT/sft_rloo/adapter" --episodes "$EPISODES" --max-tokens 96 \
  --threads "$THREADS" --out "$OUT/eval" --no-progress
uptime | tee "$OUT/uptime_end.txt"
