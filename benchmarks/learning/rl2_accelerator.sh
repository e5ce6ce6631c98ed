#!/usr/bin/env bash
# Recurrent PPO (RL^2) on the two OpenSocialJax games at full size, for a machine with an
# accelerator (a GPU or TPU; jax picks it up). The CNN torso (3x3 convolutions 16 and 32 over
# 8-dim code embeddings, then 128 units) replaces the CPU default (embedding + MLP), and a
# 128-unit GRU carries the memory across the 5 trials of an episode.
#
# Sizes are a starting point, not a tuned recipe: 256 envs x 128 steps per update (32,768
# env steps), 200M env steps per run. Nothing here was run on an accelerator yet (no device was
# available to this work); the CPU runs and their results are in
# benchmarks/results/learning_*_rl2_*.md.
#
#   bash benchmarks/learning/rl2_accelerator.sh            # both games' curricula, up to the paper's
#   STEPS=50000000 bash benchmarks/learning/rl2_accelerator.sh
#
# Knobs (environment variables; benchmarks/gpu/bench.py runs a time-boxed slice of this):
# STEPS, SEEDS (per stage); PYTHON (the interpreter); GAMES (which curricula, in order);
# STAGES (at most this many stages per game); EPISODES (held-out evaluation episodes per
# population); RUNS (folder of the run folders); PAGES (folder of the results pages; default
# benchmarks/results); EXTRA_SETS (more space-separated key=value training overrides, last).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-200000000}
SEEDS=${SEEDS:-3}
PYTHON=${PYTHON:-python}
GAMES=${GAMES:-open_harvest open_cleanup}
STAGES=${STAGES:-99}
EPISODES=${EPISODES:-64}
RUNS=${RUNS:-runs}
PAGES=${PAGES:-}
read -r -a EXTRA <<< "${EXTRA_SETS:-}"
EXTRA_ARGS=()
for pair in "${EXTRA[@]}"; do EXTRA_ARGS+=(--set "$pair"); done
page() {  # the results page of run folder $1 (rl2_grid.py's default name, in PAGES)
  if [ -n "$PAGES" ]; then echo --out "$PAGES/learning_${2}_rl2_$(basename "$1").md"; fi
}
CNN=(--set recurrent=True --set gru_hidden=128 --set 'conv_features=[16,32]' --set embed_dim=8
     --set hidden=128 --set num_envs=256 --set num_steps=128 --set num_minibatches=8
     --set lr=3e-4 --set num_seeds="$SEEDS" --set total_timesteps="$STEPS" --set log_every=10
     --set eval_every=20 --set eval_episodes=8 --set progress=false)

# open_harvest curriculum (what reached both targets on a CPU, benchmarks/results/learning_rl2.md,
# attempt 4): a wrong stage that costs (pays 1 / 0 / -0.5) and one pay order for every colour,
# then each colour its own order, then the paper's pays and rule space; each stage warm-started
# from the one before. 5 trials of 100 steps and individual reward until the last stage.
if [[ " $GAMES " == *" open_harvest "* ]]; then
previous=""; count=0
for stage in 'shared:{"stage_orders":2,"trial_steps":100,"pay_levels":[1,0,-0.5],"shared_pay_order":true}:individual' \
             'percolour:{"stage_orders":2,"trial_steps":100,"pay_levels":[1,0,-0.5]}:individual' \
             'paper:{}:team'; do
  count=$((count + 1)); if [ "$count" -gt "$STAGES" ]; then break; fi
  name=${stage%%:*}; rest=${stage#*:}; options=${rest%:*}; reward=${rest##*:}
  warm=()
  if [ -n "$previous" ]; then warm=(--set "init_from=$previous"); fi
  run="$RUNS/rl2-open_harvest-cnn-$name"
  "$PYTHON" benchmarks/learning/rl2_grid.py --env open_harvest --train \
    --run-dir "$run" "${CNN[@]}" "${warm[@]}" \
    --set "env_kwargs=$options" --set "reward=$reward" "${EXTRA_ARGS[@]}" \
    --episodes "$EPISODES" --references $(page "$run" open_harvest)
  previous="$run"
done
fi

# open_cleanup curriculum (what reached apples on a CPU, benchmarks/results/learning_rl2.md,
# attempt 3): one-pick-up recipes and one waste hue with 3 tools, then 4 tools, then two-pick-up
# recipes, then the paper's rules, each stage warm-started from the one before (init_from).
# Stages 1-3 also ease the river (waste reappears at p_spawn 0.02, apples grow below a polluted
# share of 0.6); the last stage is the paper's game. clean_reward=0.5 shaping in training only.
if [[ " $GAMES " == *" open_cleanup "* ]]; then
previous=""; count=0
for stage in 't3:{"recipe_length":1,"num_tools":3,"num_hues":1,"p_spawn":0.02}:0.6' \
             't4:{"recipe_length":1,"num_tools":4,"num_hues":1,"p_spawn":0.02}:0.6' \
             'pairs:{"recipe_length":2,"num_tools":4,"num_hues":1,"p_spawn":0.02}:0.6' \
             'paper:{}:0.4'; do
  count=$((count + 1)); if [ "$count" -gt "$STAGES" ]; then break; fi
  name=${stage%%:*}; rest=${stage#*:}; options=${rest%:*}; threshold=${rest##*:}
  train_options=$("$PYTHON" -c "import json,sys; d=json.loads(sys.argv[1]); d['clean_reward']=0.5; print(json.dumps(d))" "$options")
  eval_options=$("$PYTHON" -c "import json,sys; d=json.loads(sys.argv[1]); d.update(split='held_out', clean_reward=0.0); print(json.dumps(d))" "$options")
  warm=()
  if [ -n "$previous" ]; then warm=(--set "init_from=$previous"); fi
  run="$RUNS/rl2-open_cleanup-cnn-$name"
  "$PYTHON" benchmarks/learning/rl2_grid.py --env open_cleanup --train \
    --run-dir "$run" "${CNN[@]}" "${warm[@]}" \
    --set "env_kwargs=$train_options" --set "eval_env_kwargs=$eval_options" \
    --set "env_config={\"pollution_threshold\":$threshold}" "${EXTRA_ARGS[@]}" \
    --episodes "$EPISODES" --references $(page "$run" open_cleanup)
  previous="$run"
done
fi
