#!/usr/bin/env bash
# Issue #14's CPU evidence, end to end with the `dilemmax finetune` commands: a tiny causal LM
# (random weights, tokenizer fit to the prompts) learns one condition of the moral-hazard game by
# LoRA SFT on brief prompts, then RLOO from that adapter raises its mean reward on held-out prompts.
#
#   bash benchmarks/finetune/cpu_demo_brief.sh [OUT] [WORK]
#     OUT  (default benchmarks/finetune/results/cpu_demo_brief): small results (json, md, png, logs)
#     WORK (default /tmp/ft_brief): data, model, checkpoints and adapters (tens of MB)
#
# Every override of a paper default is on the command line and explained in
# benchmarks/finetune/README.md (lr, batch, steps, LoRA size, trained modules). Heavy steps are
# pinned to one core with one torch thread (CORE=0 by default; set CORE="" to not pin).
set -euo pipefail
OUT=${1:-benchmarks/finetune/results/cpu_demo_brief}
W=${2:-/tmp/ft_brief}
CORE=${CORE-0}
SFT_STEPS=${SFT_STEPS:-3000}
RLOO_STEPS=${RLOO_STEPS:-25}
RLOO_LR=${RLOO_LR:-1e-4}
EVAL_EPISODES=${EVAL_EPISODES:-100}
SAMPLES=${SAMPLES:-4}
mkdir -p "$OUT" "$W"
pin=(); [ -n "$CORE" ] && pin=(taskset -c "$CORE")
run() {
  echo "+ $*" | tee -a "$OUT/commands.txt"
  echo "  $(uptime)" | tee -a "$OUT/commands.txt" "$OUT/uptime.txt"
  /usr/bin/time -f "  wall %es, max RSS %MkB" -a -o "$OUT/commands.txt" "${pin[@]}" "$@"
}

# 1. teacher data: one condition (n=2, k=0, w_T=1, anonymous), unsafe options placed at random
#    ("uninformative": the warning is the only way to the target), brief prompts; 1,000 episodes
#    split 800/100/100 by episode -> 4,800 / 600 / 600 records
[ -f "$W/data/spec.json" ] || run dilemmax finetune data "$W/data" --episodes 1000 --costs 0.0 \
  --team-weights 1.0 --num-agents 2 --provenances anonymous --mapping uninformative \
  --fractions 0.8,0.1,0.1 --protocol brief=true --no-progress
# 2. tiny Llama-style model: 4 layers, hidden 128, 1,024-token byte-level BPE fit to the prompts
[ -f "$W/tiny/config.json" ] || run dilemmax finetune tiny-model "$W/tiny" --data "$W/data" \
  --vocab 1024 --hidden 128 --layers 4 --text-stride 4
# 3. SFT: LoRA r 32 / alpha 64 on the MLP layers; the attention projections, embeddings, output
#    layer and norms trained whole beside it (a random model has no attention worth keeping: with
#    LoRA on attention too, 1,250 steps never learnt to look facts up), lr 2e-3, batch 8 x 1
run dilemmax finetune sft --model "$W/tiny" --data "$W/data" --out "$W/sft" --steps "$SFT_STEPS" \
  --lr 2e-3 --batch 8 --accum 1 --warmup 50 --lora-r 32 --lora-alpha 64 \
  --lora-targets gate_proj,up_proj,down_proj \
  --lora-save lm_head,norm,embed_tokens,q_proj,k_proj,v_proj,o_proj \
  --threads 1 --save-steps 150 --logging-steps 25
cp "$W/sft/checkpoint-$SFT_STEPS/trainer_state.json" "$OUT/sft_trainer_state.json"
run python benchmarks/finetune/results/cpu_demo_brief/per_stage.py "$W/tiny" "$W/sft/adapter" \
  "$W/data" "$OUT/per_stage_sft.json" 30
# 4. RLOO from the SFT adapter: K=5 samples at T=1.0, top-p 1.0, beta 0.03, 128 tokens (the
#    paper's); demo overrides: 24 prompts (120 samples) per step, lr $RLOO_LR, dropout off,
#    $RLOO_STEPS steps
run dilemmax finetune rloo --model "$W/tiny" --adapter "$W/sft/adapter" --data "$W/data" \
  --out "$W/sft_rloo" --steps "$RLOO_STEPS" --lr "$RLOO_LR" --batch 120 --accum 1 --warmup 2 \
  --threads 1 --save-steps 5 --logging-steps 5 --set disable_dropout=True
cp "$W/sft_rloo/checkpoint-$RLOO_STEPS/trainer_state.json" "$OUT/rloo_trainer_state.json"
# 5. mean RLOO reward on all 600 held-out prompts at T=1.0 ($SAMPLES replies each; the random
#    base model, whose reward is 0, one reply each)
for m in base sft sft_rloo; do
  adapter=(); samples=1; [ "$m" = base ] || { adapter=(--adapter "$W/$m/adapter"); samples=$SAMPLES; }
  baseline=(); [ "$m" = sft_rloo ] && baseline=(--baseline "$OUT/reward_sft.json")
  run dilemmax finetune reward --model "$W/tiny" "${adapter[@]}" --data "$W/data" \
    --split heldout --samples "$samples" --batch 64 --threads 1 --json "$OUT/reward_$m.json" \
    "${baseline[@]}"
done
# 6. play the trained condition with fresh cases (seed 7), greedy, every seat the same model
run dilemmax finetune evaluate --model "$W/tiny" --adapter sft="$W/sft/adapter" \
  --adapter sft_rloo="$W/sft_rloo/adapter" --conditions "$W/data" --episodes "$EVAL_EPISODES" \
  --seed 7 --max-tokens 96 --threads 1 --out "$OUT/eval" --no-progress
# 7. RLOO from the weaker SFT checkpoint of step 1,650 (the run that raised the reward), and the
#    reward of that checkpoint and of its RLOO adapter
run dilemmax finetune rloo --model "$W/tiny" --adapter "$W/sft/checkpoint-1650" --data "$W/data" \
  --out "$W/sft1650_rloo" --steps "$RLOO_STEPS" --lr "$RLOO_LR" --batch 120 --accum 1 --warmup 2 \
  --threads 1 --save-steps 5 --logging-steps 5 --set disable_dropout=True
for m in sft/checkpoint-1650 sft1650_rloo/adapter; do
  name=$(echo "$m" | sed 's#sft/checkpoint-1650#sft1650#; s#sft1650_rloo/adapter#sft1650_rloo#')
  baseline=(); [ "$name" = sft1650_rloo ] && baseline=(--baseline "$OUT/reward_sft1650.json")
  run dilemmax finetune reward --model "$W/tiny" --adapter "$W/$m" --data "$W/data" \
    --split heldout --samples "$SAMPLES" --batch 64 --threads 1 --json "$OUT/reward_$name.json" \
    "${baseline[@]}"
done
