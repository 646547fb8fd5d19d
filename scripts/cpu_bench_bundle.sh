#!/usr/bin/env bash
# The CPU benchmarks that need more cores than the 2-core development VM, packed for the lent
# GPU machine (16 cores, no network, none of tide's Debian libraries; a run call of its own):
#
#   bash scripts/cpu_bench_bundle.sh   here: packs bench_dp, bench_gpt_cpu, bench/vs_torch.py
#                                      and torch_gpt.py with every library they load (not libc)
#                                      and a relocated copy of Debian's OpenMPI (mpirun, orted,
#                                      its plugins and PMIx; OPAL_PREFIX) into .cpu/ and its
#                                      archive .cpu.tar.gz (git-ignored; what a run call carries)
#   tar xzf .cpu.tar.gz && bash .cpu/run.sh OUT [--quick]
#                                      there, from the repository root with .cpu.tar.gz carried:
#                                      writes JSON lines into OUT and a summary OUT/cpu_bench.md
#
# What run.sh measures (bench/RESULTS.md records it with the CPU's name):
#   1. bench_dp on 4 ranks, one per core group (--bind-to core), pp 1 x dp 4 and pp 2 x dp 2:
#      the hidden fraction of the stage's data-parallel reduction under pipeline parallelism
#      (issue #25), which 4 ranks on 2 cores cannot show;
#   2. bench/vs_torch.py, tide's CPU training against PyTorch eager (installed there) in f32
#      and bf16 at 4 and 8 threads (issue #26's targets), on a quiet machine.
# --quick: one round of each, few steps (the local check below).
# Checked here with the system's OpenMPI hidden (unshare -m, bind mounts): TIDE_CPU_BUNDLE_SELFTEST=1
# bash scripts/cpu_bench_bundle.sh runs `.cpu/run.sh /tmp/cpu_bench_selftest --quick` that way.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bundle_common.sh
[ -f build/CMakeCache.txt ] || bash scripts/setup.sh
cmake --build build -j "$(nproc)" --target bench_dp bench_gpt_cpu
rm -rf .cpu && mkdir -p .cpu/lib .cpu/ompi/bin .cpu/ompi/lib .cpu/ompi/share
cp build/bench/bench_dp build/bench/bench_gpt_cpu bench/vs_torch.py bench/torch_gpt.py .cpu/

# OpenMPI relocated under .cpu/ompi with Debian's layout below the prefix (its install
# directories are ${prefix}-relative, so OPAL_PREFIX moves them); PMIx beside it.
multiarch=lib/x86_64-linux-gnu
cp -L /usr/bin/orterun .cpu/ompi/bin/mpirun
cp -L /usr/bin/orted .cpu/ompi/bin/
mkdir -p ".cpu/ompi/$multiarch/openmpi/lib"
cp -a /usr/$multiarch/openmpi/lib/openmpi3 ".cpu/ompi/$multiarch/openmpi/lib/"
cp -a /usr/$multiarch/pmix2 ".cpu/ompi/$multiarch/"
cp -a /usr/share/openmpi .cpu/ompi/share/

# Every library the programs load, but libc's family (the GPU machine has them).
system='/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux-x86-64)\.so'
# (OpenMPI's PMIx component and PMIx itself too: mpirun cannot start without them.)
ldd .cpu/bench_dp .cpu/bench_gpt_cpu .cpu/ompi/bin/* \
  ".cpu/ompi/$multiarch/openmpi/lib/openmpi3/mca_pmix_ext3x.so" \
  ".cpu/ompi/$multiarch/pmix2/lib/libpmix.so.2" | awk '/=>/ {print $3}' | sort -u |
  grep -v -E "$system" | xargs -I{} cp -L {} .cpu/lib/
# Plugins whose libraries are not bundled (InfiniBand, UCX, libfabric, Slurm's PMI...) would
# fail to load there: drop them (shared memory and TCP within one node need none of them).
for plugin in $(find .cpu/ompi -name '*.so'); do
  missing=""
  for dep in $(ldd "$plugin" | awk '/=>/ {print $3}'); do
    name=$(basename "$dep")
    dep=$(readlink -f "$dep")  # libpmix.so.2 lives in pmix2/lib
    [[ "$dep" =~ $system ]] || [ -e ".cpu/lib/$name" ] || [[ "$dep" == *"/openmpi/"* ]] ||
      [[ "$dep" == *"/pmix2/"* ]] || missing+=" $name"
  done
  [ -z "$missing" ] || rm -f "$plugin"
done

cat >.cpu/run.sh <<'RUN'
#!/usr/bin/env bash
# scripts/cpu_bench_bundle.sh's runner: bash .cpu/run.sh OUT [--quick]
set -uo pipefail
out=$(mkdir -p "${1:-cpu_bench_out}" && cd "${1:-cpu_bench_out}" && pwd)
quick=${2:-}
[ -z "$quick" ] || [ "$quick" = --quick ] ||
  { echo "run.sh: unknown option '$quick'; usage: bash .cpu/run.sh OUT [--quick]"; exit 2; }
cd "$(dirname "$0")"
here=$PWD
ompi=$here/ompi
export OPAL_PREFIX=$ompi PMIX_INSTALL_PREFIX=$ompi/lib/x86_64-linux-gnu/pmix2
export PMIX_MCA_mca_base_component_path=$ompi/lib/x86_64-linux-gnu/pmix2/lib/pmix
export PATH=$ompi/bin:$PATH
export LD_LIBRARY_PATH=$here/lib:$ompi/lib/x86_64-linux-gnu/pmix2/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
cores=$(nproc)
echo "CPU: $cpu, $cores cores"
rc=0
steps=5 rounds=3 threads=4,8 shapes=l4,l6 torch_steps=6
[ "$quick" = --quick ] && steps=2 rounds=1 threads=1 shapes=l4 torch_steps=2
# 1. bench_dp: 4 ranks, each its own cores (threads per rank: a quarter of the machine, at
#    most 4); pp 1 x dp 4, then pp 2 x dp 2 (2P micro-batches of 1F1B per replica).
per_rank=$((cores / 4)); [ "$per_rank" -gt 4 ] && per_rank=4; [ "$per_rank" -lt 1 ] && per_rank=1
bind=(--bind-to core --map-by "slot:PE=$per_rank")
[ "$cores" -lt 4 ] && bind=(--bind-to none)
for pp in 1 2; do
  mpirun -np 4 "${bind[@]}" ./bench_dp --pipeline-stages "$pp" --steps "$steps" \
    --algorithm mpi --zero-stages 0 --threads "$per_rank" >>"$out/bench_dp.jsonl" \
    2>>"$out/bench_dp.log" || { echo "FAILED: bench_dp --pipeline-stages $pp"; rc=1; }
done
# 2. tide against PyTorch eager, f32 and bf16.
for dtype in f32 bf16; do
  python3 vs_torch.py --tide ./bench_gpt_cpu --torch-script ./torch_gpt.py --shapes "$shapes" \
    --threads "$threads" --rounds "$rounds" --steps "$torch_steps" --dtype "$dtype" \
    >"$out/vs_torch_$dtype.jsonl" \
    2>"$out/vs_torch_$dtype.log" || { echo "FAILED: vs_torch --dtype $dtype"; rc=1; }
done
python3 - "$out" "$cpu" "$cores" <<'PY'
import json, sys
out, cpu, cores = sys.argv[1], sys.argv[2], sys.argv[3]
def lines(name):
    try:
        return [json.loads(l) for l in open(f"{out}/{name}") if l.startswith("{")]
    except OSError:
        return []
md = [f"CPU benchmarks on {cpu} ({cores} cores)", ""]
for r in lines("bench_dp.jsonl"):
    md.append(f"- bench_dp pp {r['pipeline_stages']} x dp {r['dp']}: step {r['step_s']} s, exposed "
              f"{r['exposed_s']} s, blocking {r['blocking_s']} s, hidden {r['hidden']}, bytes "
              f"{r['bytes_sent']} (ratio {r['ratio']})")
for dtype in ("f32", "bf16"):
    for r in lines(f"vs_torch_{dtype}.jsonl"):
        if r.get("kind") == "summary":
            md.append(f"- vs_torch {dtype} {r.get('shape')} threads {r.get('threads')}: tide "
                      f"{r.get('tide_tokens_per_s')} tok/s, torch {r.get('torch_tokens_per_s')}, "
                      f"ratio median {r.get('ratio_median')}")
open(f"{out}/cpu_bench.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
exit $rc
RUN
chmod +x .cpu/run.sh
pack_bundle .cpu
if [ "${TIDE_CPU_BUNDLE_SELFTEST:-0}" = 1 ]; then
  # The system's OpenMPI and PMIx hidden: the bundle must bring its own.
  empty=$(mktemp -d)
  unshare -m bash -c "
    for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
             /usr/share/openmpi /etc/openmpi; do mount --bind '$empty' \$d; done
    PATH=$PWD/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      bash .cpu/run.sh /tmp/cpu_bench_selftest --quick"
fi
