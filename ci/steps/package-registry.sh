# shellcheck shell=bash
# Sourced by ci/steps/package (not a step): cargo package's verification, and the registry folder
# it leaves behind.
#
# Cargo's verification builds cuda-event against a local registry holding the packaged
# cuda-event-sys, which cargo unpacks under $CARGO_HOME/registry/src/-<hash of the registry's path>/
# and, if that folder already exists, does not unpack again: a clone at a fixed path (CI's) would
# verify against the cuda-event-sys an earlier run packaged. So the target dir is new to each run
# (and so is its registry's folder), and that folder is removed after, whatever the verification
# says: cargo's build script output of the packaged cuda-event-sys names it (rerun-if-changed).

# Packages both crates with cargo's verification in a new target dir under $1, which it leaves in
# $verify (the .crate files in $verify/package/), and removes the registry folder; exits if cargo
# package fails.
package_verified() {
  verify=$(mktemp -d "$1/package.XXXXXX")
  local packaged_ok=0
  CARGO_TARGET_DIR="$verify" cargo package -p cuda-event-sys -p cuda-event --locked --quiet || packaged_ok=$?
  forget_unpacked_sys "$verify"
  [ "$packaged_ok" = 0 ] || { echo "cargo package failed"; exit 1; }
}

# Removes the registry folder (named "-<hash>") in which cargo package's local registry under
# target dir $1 unpacked the packaged cuda-event-sys, as its build script's output names it.
forget_unpacked_sys() {
  local outputs registry
  outputs=$(cat "$1"/debug/build/cuda-event-sys-*/output 2>/dev/null || true)
  sed -n 's|^cargo:rerun-if-changed=\(.*/registry/src/-[0-9a-f]*\)/cuda-event-sys-[0-9][^/]*/.*|\1|p' \
    <<<"$outputs" | sort -u | while IFS= read -r registry; do
    rm -rf "$registry"
  done
}
