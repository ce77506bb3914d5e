# shellcheck shell=bash
# Sourced by ci/test and by each step in ci/steps/ (not a step): the repository's root as the
# working folder, the build settings of every step, and what several steps share.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit
# What CI's builds keep on disk: no incremental state (a fresh clone never reuses it) and no debug
# info. Even line tables were most of a target dir, on a machine where a full disk fails a run
# anywhere, and a good part of every debug build's time. A failing test still says where: a panic's
# message names its file and line without debug info; only a backtrace's frames lose theirs (their
# functions stay named). A caller's settings win: CARGO_PROFILE_DEV_DEBUG=line-tables-only
# CARGO_PROFILE_TEST_DEBUG=line-tables-only ci/test STEP gives the frames their lines back.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-0}
export CARGO_PROFILE_TEST_DEBUG=${CARGO_PROFILE_TEST_DEBUG:-0}

# Each CUDA to test: a provisioned wheel of each major, or else whatever toolkit the build finds.
cudas=()
find_cudas() {
  cudas=()
  for dir in .cuda/nvidia/cu13 .cuda/nvidia/cuda_runtime; do
    [ -d "$dir" ] && cudas+=("$root/$dir")
  done
  [ ${#cudas[@]} -gt 0 ] || cudas=("")
}
find_cudas

# A command's environment with CUDA hidden from the build's search, for the steps that need it
# (hidden-cuda, docs-rs): no variable that names a CUDA or a Python environment, and a PATH of the
# system's folders and cargo's only.
# shellcheck disable=SC2034 # read by the steps that source this
without_cuda=(env -u CUDA_PATH -u CUDA_HOME -u CUDA_ROOT -u CUDA_TOOLKIT_ROOT_DIR -u CUDA_EVENT_SYS_CUDA_DIR
  -u VIRTUAL_ENV -u CONDA_PREFIX "PATH=/usr/bin:/bin:$(dirname "$(command -v cargo)")")

# A copy of the tracked files, for the steps that hide CUDA from a build (hidden-cuda, docs-rs);
# it goes when the step exits, whatever it says.
hidden=""
hidden_copy() {
  [ -z "$hidden" ] || return 0
  hidden=$(mktemp -d)
  trap 'rm -rf "$hidden"' EXIT
  git ls-files -z | xargs -0 cp --parents -t "$hidden"
  cp Cargo.lock "$hidden/" 2>/dev/null || true
}
