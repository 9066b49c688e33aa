#!/bin/bash
# usage: BASE=<checkout at 0470531> NEW=<checkout at ca54b99> ab.sh BEAMS SECONDS ROUNDS SENTENCES_PER_CALL
# alternates the two checkouts, one process each, and prints sentences per CPU second
for r in $(seq $3); do
  for side in base main; do
    if [ $side = base ]; then dir=$BASE; else dir=$NEW; fi
    out=$(cd $dir && PYTHONPATH=$dir $NEW/.venv/bin/python $NEW/bench/results/int8-call-2026-11-28/ca54b99/prof_greedy.py $1 $2 $4 2>&1 | grep sent/s)
    echo "round $r $side $out"
  done
done
