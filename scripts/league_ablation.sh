#!/usr/bin/env bash
# The league ablation (issue 52, docs/reference/league.md "Does the league pay?"): four arms from one
# imitation start, the same seeds, steps and games; only the opponents differ.
#   scripts/league_ablation.sh OUT_DIR [ARM ...]     (arms: selfplay fixed pfsp pfsp_exploiter)
# OUT_DIR/bc1.pt is made first when missing (the imitation stage of the shipped `pretrained`,
# src/leaguezero/diplomacy/pretrained/README.md stage 1). Each arm resumes when killed.
# Stage 2's recipe of the shipped policy: 5-year games, 300 steps, lr 3e-4, KL 0.05.
set -euo pipefail
out=${1:?usage: scripts/league_ablation.sh OUT_DIR [ARM ...]}; shift
arms=("$@"); [ ${#arms[@]} -gt 0 ] || arms=(selfplay fixed pfsp pfsp_exploiter)
lz=${LEAGUEZERO:-leaguezero}
mkdir -p "$out"
if [ ! -f "$out/bc1.pt" ]; then
  $lz diplomacy pretrain-policy --out "$out/bc1.pt" --games 600 --max-years 5 --epochs 20 \
    --val-games 40 --threads 1
fi
common=(--config configs/diplomacy_local_cpu.yaml --set max_years=5 --set train.steps=300
        --set train.lr=0.0003 --set train.kl_coef=0.05 --set league.eval_every=100
        --set league.eval_games=7 --set run.seed=5201 --set run.threads=1 --set games_dir=null)
for arm in "${arms[@]}"; do
  case $arm in
    selfplay) shares=(--set league.mirror_share=1 --set league.peers_share=0
                      --set league.exploitable_share=0 --set league.baselines_share=0
                      --set league.min_checkpoints=0) ;;
    fixed) shares=(--set league.mirror_share=0 --set league.peers_share=0
                   --set league.exploitable_share=0 --set league.baselines_share=1) ;;
    pfsp) shares=() ;;  # the spec's 30/40/20/10
    pfsp_exploiter) shares=(--set league.exploiters.main=1) ;;
    *) echo "unknown arm $arm (selfplay fixed pfsp pfsp_exploiter)" >&2; exit 2 ;;
  esac
  run="$out/$arm"
  if [ -f "$run/state.pt" ]; then  # a killed arm goes on with its own config.yaml
    echo "== $arm: resumed"
    $lz diplomacy train --out "$run" --resume
  else
    echo "== $arm: $lz diplomacy train ${common[*]} ${shares[*]} --out $run --init-from $out/bc1.pt"
    $lz diplomacy train "${common[@]}" "${shares[@]}" --out "$run" --init-from "$out/bc1.pt"
  fi
done
