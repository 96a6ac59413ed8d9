#!/usr/bin/env bash
# Measures the four arms of scripts/league_ablation.sh (issue 52, docs/reference/league.md "Does the
# league pay?"): each final hero (and the imitation start, bc1.pt) against six dumb_bots,
# a round robin among the arms, and each arm's exploitability.
#   scripts/league_ablation_eval.sh OUT_DIR SEED [strength|roundrobin|exploit|exploit_sampled ...]
# SEED is drawn after training (say how in the docs); every arm plays the same seeds, so the
# strength figures are paired game by game. Results: OUT_DIR/eval/*.json; a part whose file
# exists is not played again (the script resumes). Summarise with
# scripts/league_ablation_table.py OUT_DIR.
set -euo pipefail
out=${1:?usage: scripts/league_ablation_eval.sh OUT_DIR SEED [strength roundrobin exploit]}
seed=${2:?a seed drawn after training}; shift 2
parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=(strength roundrobin exploit)
lz=${LEAGUEZERO:-leaguezero}
arms=(${ARMS:-selfplay fixed pfsp pfsp_exploiter})
games=${GAMES:-280}
steps=${EXPLOIT_STEPS:-100}
mkdir -p "$out/eval"

final() {  # the arm's final hero: its newest checkpoint (the schedule keeps the last step)
  ls "$out/$1/checkpoints"/ckpt_*.pt | sort | tail -1
}

exploit_arm() {  # ARM PREFIX EXTRA...: one exploiter run, skipped once it has its final figure
  local arm=$1 run="$out/$2_$1"; shift 2
  if [ -f "$run/exploit.json" ] && python -c 'import json, sys
sys.exit(json.load(open(sys.argv[1])).get("final") is None)' "$run/exploit.json"; then return; fi
  echo "== exploit ($run) $arm"
  local resume=(); [ -f "$run/state.pt" ] && resume=(--resume)
  $lz diplomacy exploit --target "$(final "$arm")" --out "$run" --steps "$steps" "$@" \
    --eval-every 25 --final-seed "$seed" --set train.lr=0.0003 "${resume[@]}"
}

for part in "${parts[@]}"; do
  case $part in
    strength)  # 10-year games against six dumb_bots, common seeds, paired by game
      for arm in start "${arms[@]}"; do
        f="$out/eval/strength_$arm.json"; [ -s "$f" ] && continue
        hero=$([ "$arm" = start ] && echo "$out/bc1.pt" || final "$arm")
        echo "== strength $arm: $hero"
        $lz diplomacy eval --hero "$hero" --opponents dumb_bot --games "$games" --seed "$seed" \
          --set max_years=10 --no-save --json --per-game > "$f.tmp" && mv "$f.tmp" "$f"
      done ;;
    roundrobin)  # each arm against six copies of another; all greedy: 7 games, one a power
      for a in "${arms[@]}"; do for b in "${arms[@]}"; do
        [ "$a" = "$b" ] && continue
        f="$out/eval/rr_${a}__${b}.json"; [ -s "$f" ] && continue
        echo "== round robin $a vs six $b"
        $lz diplomacy eval --hero "$(final "$a")" --opponents "$(final "$b")" --games 7 \
          --seed "$seed" --set max_years=10 --no-save --json --per-game > "$f.tmp" && mv "$f.tmp" "$f"
      done; done ;;
    exploit)  # the same exploiter budget against each final hero (greedy games, as for pretrained)
      for arm in "${arms[@]}"; do
        exploit_arm "$arm" exploit --eval-games 7 --final-games 7
      done ;;
    exploit_sampled)  # the same, the target's copies sampling (games differ by seed: an SE)
      for arm in "${arms[@]}"; do
        exploit_arm "$arm" exploit_sampled --sample --eval-games 70 --final-games 140
      done ;;
    *) echo "unknown part $part (strength roundrobin exploit exploit_sampled)" >&2; exit 2 ;;
  esac
done
