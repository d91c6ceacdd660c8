#!/usr/bin/env bash
# bench/sass.sh FILE.cu [KERNEL] [-- NVCC ARGS]: the SASS of a CUDA file's kernels, counted on this machine (no GPU):
# per kernel whose mangled name contains KERNEL, its registers and spills (ptxas), its instruction count, and its
# largest straight-line blocks with their instructions by opcode. A change to a hot loop can be weighed here, in
# instructions, before an A/B spends device time (the GPU comparator's finite8: 275 -> 220 instructions, 2026-11-27).
# cuobjdump and the nvdisasm it calls are not in the CUDA toolkit the CPU machines have: they come from the wheels
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, unpacked once into a directory of their own under PARITY_HOME (not
# the project's venv; nothing the build or the tests use).
# SASS lands in ${OUT:-/tmp}/sass/<file>.sass.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,8p' "$0"; exit 2; }
file=$1 kernel=${2:-}
shift $(( $# >= 2 ? 2 : 1 ))
[ "${1:-}" = "--" ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
tools=${PARITY_HOME:-$HOME/.cache/parity}/sass-tools
python=${PARITY_PYTHON:-python3}
bin=$tools/nvidia/cu13/bin
if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  mkdir -p "$tools"
  "$python" -m pip download --quiet --no-deps --dest "$tools" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  for w in "$tools"/nvidia_cuda_*.whl; do "$python" -m zipfile -e "$w" "$tools"; done
  chmod +x "$bin/cuobjdump" "$bin/nvdisasm"
fi
work=${OUT:-/tmp}/sass
mkdir -p "$work"
stem=$(basename "$file" .cu)
nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I"$root" -cubin -Xptxas=-v \
  "$@" -o "$work/$stem.cubin" "$file" 2>"$work/$stem.ptxas" || { grep -v '^ptxas info' "$work/$stem.ptxas"; exit 2; }
PATH=$bin:$PATH cuobjdump -sass "$work/$stem.cubin" >"$work/$stem.sass"
"$python" - "$work/$stem.sass" "$work/$stem.ptxas" "$kernel" <<'EOF'
import collections, re, sys
sass, ptxas, wanted = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
usage = dict(re.findall(r"Compiling entry function '(\S+)'.*?\n(?:.*\n)*?ptxas info\s+: (Used \d+ registers)", ptxas))
spills = dict(re.findall(r"Compiling entry function '(\S+)'.*?\n(?:.*\n)*?\s+(\d+ bytes stack frame, \d+ bytes spill stores)", ptxas))
for fn in re.split(r"\n\s*Function : ", open(sass).read())[1:]:
    name = fn.split("\n", 1)[0].strip()
    if wanted not in name:
        continue
    ins = [(int(a, 16), t) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", fn)]
    targets = {int(m, 16) for _, t in ins for m in re.findall(r"BRA[^;]*?0x([0-9a-f]+)", t)}
    blocks, cur = [], []
    for a, t in ins:
        if a in targets and cur:
            blocks.append(cur); cur = []
        cur.append((a, t))
        if re.search(r"\b(BRA|EXIT|RET|CALL)\b", t):
            blocks.append(cur); cur = []
    blocks.append(cur)
    print(f"{name}\n  {usage.get(name, '?')}, {spills.get(name, '?')}; {len(ins)} instructions")
    for b in sorted((b for b in blocks if b), key=len, reverse=True)[:3]:
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for _, t in b)
        print(f"  block {b[0][0]:#x}: {len(b)} instructions: " + ", ".join(f"{o} {n}" for o, n in ops.most_common(12)))
EOF
