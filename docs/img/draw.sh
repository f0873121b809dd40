#!/usr/bin/env bash
# Draws the pictures of docs/09_pictures.md: every built-in schedule at p = 4, m = 8 and a
# measured train_mlp step above its simulation, as PNGs beside this script.
# Needs rsvg-convert (Debian: librsvg2-bin). Usage: bash docs/img/draw.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v rsvg-convert >/dev/null || { echo "draw.sh: needs rsvg-convert (apt-get install librsvg2-bin)" >&2; exit 2; }
cmake --preset release >/dev/null
cmake --build --preset release --target pipetype-explore train_mlp >/dev/null
bin=build/release/examples
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for s in gpipe 1f1b interleaved-1f1b looped-bfs zb-h1 zb-h2 zb-v dualpipe-v dualpipe zb-auto; do
  "$bin/pipetype-explore" --schedule "$s" --ranks 4 --microbatches 8 --svg "$tmp/$s.svg" >/dev/null
  rsvg-convert "$tmp/$s.svg" -o "docs/img/$s.png"
done
"$bin/train_mlp" --schedule 1f1b --steps 5 --json --svg "$tmp/train_mlp.svg" >/dev/null
rsvg-convert "$tmp/train_mlp.svg" -o docs/img/train_mlp.png
ls -l docs/img/*.png
