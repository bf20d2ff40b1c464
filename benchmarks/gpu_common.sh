# Shared by benchmarks/gpu_*.sh (source it): the output folder, a timed step runner and the
# machine's description.
OUT=${1:-out}; mkdir -p "$OUT" runs
export PYTHONUNBUFFERED=1
step() {  # step NAME CMD...: run with a time limit, log, report status and seconds
  local name=$1; shift
  local t0=$(date +%s%N)
  timeout "${STEP_TIMEOUT:-420}" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-28s rc=%-3s %6d ms\n' "$name" "$rc" "$ms" | tee -a "$OUT/steps.txt"
  tail -n "${STEP_TAIL:-25}" "$OUT/$name.log"
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])" | tee -a "$OUT/gpu.txt"
