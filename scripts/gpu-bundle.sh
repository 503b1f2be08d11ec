#!/usr/bin/env bash
# Prepares a GPU check for a machine that has the accelerator but none of the
# Debian -dev packages (the lent device machines): builds here with CUDA and
# packs the CUDA test and benchmark binaries, plus every shared library they
# load that is not part of the C runtime, into .gpu/ (git-ignored).
#
#   scripts/gpu-bundle.sh [BUILD_DIR=build-gpu]  then, on the GPU machine:
#   bash .gpu/run.sh                        results under ${OUT:-out/gpu}
set -euo pipefail
build_dir=${1:-build-gpu}
cd "$(dirname "$0")/.."
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGIFT_ENABLE_CUDA=ON >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target codec_cuda_test transform_cuda_test gift_bench
rm -rf .gpu && mkdir -p .gpu/lib
cp "$build_dir/tests/kernels/codec_cuda_test" "$build_dir/tests/kernels/transform_cuda_test" \
  "$build_dir/bench/gift-bench" .gpu/
for bin in .gpu/codec_cuda_test .gpu/transform_cuda_test .gpu/gift-bench; do
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*) ;;
      # cuBLAS (libcublasLt is ~540 MB, over what a device run carries) comes
      # from the GPU machine's own CUDA libraries; run.sh finds them.
      libcublas.so*|libcublasLt.so*) ;;
      *) cp -Ln "$lib" .gpu/lib/ ;;
    esac
  done
done
cat > .gpu/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs the GPU tests and the codec benchmark; writes logs and JSON to $OUT.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-out/gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# libcublas.so.13 / libcublasLt.so.13: the toolkit's or a pip nvidia-cublas wheel's.
cublas=$(find /usr/local/cuda*/lib64 /usr/local/lib /usr/lib /opt -name 'libcublasLt.so.13' 2>/dev/null | head -1)
[ -n "$cublas" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$cublas")"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
"$here/codec_cuda_test" --gtest_brief=1 >"$out/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?" | tee -a "$out/gpu_tests.txt"
tail -3 "$out/gpu_tests.txt"
"$here/gift-bench" codec --mib 256 --reps 10 --json "$out/codec_bench.json" 2>&1 | tee "$out/codec_bench.txt"
"$here/transform_cuda_test" --gtest_brief=1 >"$out/transform_tests.txt" 2>&1
echo "transform tests rc=$?" | tee -a "$out/transform_tests.txt"
tail -3 "$out/transform_tests.txt"
"$here/gift-bench" transform --no-cpu --reps 20 --json "$out/transform_bench.json" 2>&1 |
  tee "$out/transform_bench.txt"
RUN
chmod +x .gpu/run.sh
du -sh .gpu
