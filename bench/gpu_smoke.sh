#!/usr/bin/env bash
# A short check that the sandboxed verifier works on a GPU machine: the isolation probe,
# an honest Triton kernel and an honest load_inline CUDA kernel under --require-isolation,
# and one seed skill timed. Writes verdicts under $1 (default: ./.out/smoke).
set -u
out=${1:-.out/smoke}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -c "from kernelrag.verify import isolation; print(isolation.probe().describe())"
for pair in "relu positive/relu.py" "relu positive/relu_load_inline.py"; do
  set -- $pair
  s=$(date +%s.%N)
  python3 -m kernelrag.verify tests/fixtures/verify/tasks/$1.py tests/fixtures/verify/$2 --device cuda \
      --require-isolation --json > "$out/$(basename $2 .py).json" 2> "$out/$(basename $2 .py).err"
  echo "$2 rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")"
  python3 -c "import json; d=json.load(open('$out/$(basename $2 .py).json')); print(' ', d.get('status'), d.get('isolation'), (d.get('reason') or '')[:200])" 2>/dev/null || tail -5 "$out/$(basename $2 .py).err"
done
s=$(date +%s.%N)
python3 -m kernelrag.verify bench/tasks/softmax.py skills/softmax/softmax_online/kernel.py --device cuda --json > "$out/softmax.json" 2> "$out/softmax.err"
echo "softmax rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")"
python3 -c "import json; d=json.load(open('$out/softmax.json')); print(' ', d.get('status'), d.get('isolation'), (d.get('reason') or '')[:200], d.get('speedup_vs_compile'))" 2>/dev/null || tail -5 "$out/softmax.err"
