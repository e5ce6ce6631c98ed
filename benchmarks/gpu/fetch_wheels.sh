#!/usr/bin/env bash
# Downloads the wheels benchmarks/gpu/run.sh installs on the GPU machine into .whl/ (ignored
# through .git/info/exclude; about 8.5 MiB): what dilemmax imports that the machine's image
# lacks (distrax, pettingzoo, gymnasium) and what those need that it lacks. Versions are the
# ones this project's environment resolves; the machine runs Python 3.12 on x86-64.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .git/info
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d .whl \
  distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 dm-tree==0.1.10 gast==0.7.0 decorator==5.3.1 \
  pettingzoo==1.27.0 gymnasium==1.4.0 farama-notifications==0.0.6
du -sh .whl
