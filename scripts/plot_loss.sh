#!/usr/bin/env bash
# plot_loss.sh: train and val loss curves from a trainer log (DIR/log.txt) into DIR/loss.png.
#   bash scripts/plot_loss.sh out          (installs gnuplot-nox when it is missing)
set -euo pipefail
dir=${1:-out}
log="$dir/log.txt"
[ -f "$log" ] || { echo "error: $log not found; train with -out $dir first" >&2; exit 1; }
command -v gnuplot >/dev/null || { apt-get update -qq && apt-get install -y -qq gnuplot-nox; }
awk '$1 == "step" && $3 == "train_loss" { print $2, $4 }' "$log" > "$dir/train_loss.dat"
awk '$1 == "step" && $3 == "val_loss" { print $2, $4 }' "$log" > "$dir/val_loss.dat"
gnuplot <<GP
set terminal pngcairo size 800,450 font ",11"
set output "$dir/loss.png"
set xlabel "step"; set ylabel "loss (nats)"; set grid; set key top right
plot "$dir/train_loss.dat" with lines lw 1 title "train", "$dir/val_loss.dat" with linespoints lw 2 pt 7 title "val"
GP
echo "$dir/loss.png"
