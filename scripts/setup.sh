#!/usr/bin/env bash
# Installs every build and runtime dependency of fbt from Debian 12's packages.
set -euo pipefail
pkgs=(cmake g++ make git libtorch-dev sentencepiece
      nlohmann-json3-dev libcli11-dev libgtest-dev libssl-dev zlib1g-dev fortunes
      python3  # runs HumanEval/MBPP programs in the sandbox (fbt eval)
      libgloo-dev  # headers of Gloo, the CPU collectives of libtorch's c10d (distributed training)
      libopenblas0-pthread  # optimised BLAS: libtorch-dev alone pulls the reference BLAS
      libblas-dev  # links the CPU decode step to that BLAS (src/infer/cpu_decoder.cpp)
      python3-torch)  # the PyTorch reference of bench/reference/ and its cross-check test
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
