#!/usr/bin/env bash
# Installs every build and runtime dependency of fbt from Debian 12's packages.
#   scripts/setup.sh            the default build: Debian's libtorch 1.13 (CPU)
#   scripts/setup.sh --torch2   also the second build's PyTorch 2.x (PyPI, CUDA 13) in a project
#                               venv, $FBT_VENV (default .venv); reused when it already holds it
set -euo pipefail
cd "$(dirname "$0")/.."
torch2=0
for a in "$@"; do
  case "$a" in
    --torch2) torch2=1 ;;
    *) echo "scripts/setup.sh: unknown argument $a (expected --torch2)" >&2; exit 2 ;;
  esac
done
pkgs=(cmake g++ make git libtorch-dev sentencepiece
      nlohmann-json3-dev libcli11-dev libgtest-dev libssl-dev zlib1g-dev fortunes
      libpcre2-dev libicu-dev pkg-config  # HF tokenizers: Unicode regexes (PCRE2) and NFC (ICU)
      python3  # runs HumanEval/MBPP programs in the sandbox (fbt eval)
      bubblewrap  # that sandbox: bwrap, namespaces + read-only system (include/fbt/eval/sandbox.h)
      libgloo-dev  # headers of Gloo, the CPU collectives of libtorch's c10d (distributed training)
      libopenblas0-openmp  # optimised BLAS on libtorch's OpenMP threads (below); libtorch-dev alone pulls the reference BLAS
      libblas-dev  # links the CPU decode step to that BLAS (src/infer/cpu_decoder.cpp)
      clang-format-14  # the formatting check of the sources (tests/clang_format_check.py)
      tmux  # the scripted terminal sessions of fbt chat's tests (tests/tools/test_chat_cli.cpp)
      libcpp-httplib-dev  # fbt serve's HTTP server (src/serve/http_server.cpp)
      chromium  # the headless-browser test of fbt serve's chat page (tests/serve/check_chat_page.py)
      python3-torch)  # the PyTorch reference of bench/reference/ and its cross-check test
[ $torch2 = 1 ] && pkgs+=(python3-venv)  # the project venv of the PyTorch 2.x build
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# OpenBLAS's pthreads build (the higher-priority alternative, if installed) keeps a thread pool of
# its own beside libtorch's OpenMP one; with --threads 2 on two cores the two pools spin against
# each other and prefill runs at a third of its one-thread speed (docs/LOG.md, 2026-12-03). The
# OpenMP build runs its sgemm on libtorch's threads: select it.
arch=$(gcc -print-multiarch)
for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
  want_lib=/usr/lib/$arch/openblas-openmp/$lib
  have_lib=$(update-alternatives --query "$lib-$arch" 2>/dev/null | sed -n 's/^Value: //p' || true)
  [ "$have_lib" = "$want_lib" ] || $sudo_cmd update-alternatives --quiet --set "$lib-$arch" "$want_lib"
done
[ $torch2 = 1 ] || exit 0

# PyTorch 2.x: the release the GPU machine runs (2.11.0). PyPI's Linux x86_64 wheel of 2.11.0 is
# the CUDA 13.0 build (it pulls cuda-toolkit 13.0.2, cuDNN 9, NCCL 2.28 as nvidia-* wheels,
# ~4.7 GB installed); it also runs on machines without a GPU or driver.
venv=${FBT_VENV:-.venv}
want=$(sed -n 's/^torch==//p' scripts/requirements-torch2.txt)
have=$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have" != "$want" ]; then
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r scripts/requirements-torch2.txt
fi
# The libraries and clients the cross-checks compare with (scripts/requirements-check.txt): transformers, ..., openai, lm_eval
"$venv/bin/python" -c 'import transformers, tokenizers, safetensors, gguf, accelerate, openai, lm_eval' 2>/dev/null ||
  "$venv/bin/pip" install -q -r scripts/requirements-check.txt
"$venv/bin/python" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "in '"$venv"'")'
