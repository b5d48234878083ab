"""The CMake flags ``make deps`` builds llama-cpp-python with: this CPU's instruction sets, named one by one
(``GGML_NATIVE=OFF``), and AMX always off.

``-march=native`` would also compile llama.cpp's AMX kernels on CPUs that have AMX, and with them the first
``llama_decode`` crashed (SIGSEGV in ``ggml_backend_amx_mul_mat``) on this project's Xeon; naming the other
instruction sets keeps everything else native, including the repacked GEMM kernels that make prompt processing
fast. Reads ``/proc/cpuinfo``; prints nothing where it cannot (the build then uses llama.cpp's defaults).
"""

from __future__ import annotations

from pathlib import Path

FLAGS = {  # /proc/cpuinfo flag -> ggml CMake option
    "sse4_2": "GGML_SSE42",
    "avx": "GGML_AVX",
    "avx2": "GGML_AVX2",
    "fma": "GGML_FMA",
    "f16c": "GGML_F16C",
    "bmi2": "GGML_BMI2",
    "avx_vnni": "GGML_AVX_VNNI",
    "avx512f": "GGML_AVX512",
    "avx512vbmi": "GGML_AVX512_VBMI",
    "avx512_vnni": "GGML_AVX512_VNNI",
    "avx512_bf16": "GGML_AVX512_BF16",
}


def main() -> None:
    try:
        line = next(row for row in Path("/proc/cpuinfo").read_text().splitlines() if row.startswith("flags"))
    except (OSError, StopIteration):
        return
    have = set(line.split(":", 1)[1].split())
    args = ["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
    args += [f"-D{option}={'ON' if flag in have else 'OFF'}" for flag, option in FLAGS.items()]
    print(" ".join(args))


if __name__ == "__main__":
    main()
