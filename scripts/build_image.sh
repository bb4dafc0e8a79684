#!/usr/bin/env bash
# Build deploy/Dockerfile without a Docker engine or a registry: a Debian bookworm base
# made with debootstrap, then buildah (vfs storage, chroot isolation), as root.
#
#   scripts/build_image.sh DIR [TAG]      # TAG default: localhost/bloomswarm:test
#
# Everything lives under DIR: DIR/base.tar (the debootstrap root file system, reused when
# present), DIR/storage and DIR/run (buildah's storage, which keeps the base image). No
# layer cache: with vfs storage every layer is a full copy of the file system, so one
# commit per stage is faster than caching each instruction. The tests
# (tests/deploy/test_deploy_image_run.py) call this with their own directory. Prints
# "build_seconds=N" and "image_size=N MB" (unpacked) last.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [TAG]" >&2; exit 2; }
dir=$(mkdir -p "$1" && cd "$1" && pwd)
tag=${2:-localhost/bloomswarm:test}
base=localhost/bloomswarm-base:bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cd "$(dirname "$0")/.."
exec 9>"$dir/.lock" && flock 9   # one build at a time in DIR (concurrent test runs)
buildah=(buildah --root "$dir/storage" --runroot "$dir/run" --storage-driver vfs)
start=$(date +%s)

if [ ! -s "$dir/base.tar" ]; then
  echo "== debootstrap --variant=minbase bookworm ($mirror)"
  rm -rf "$dir/rootfs"
  debootstrap --variant=minbase bookworm "$dir/rootfs" "$mirror" >"$dir/debootstrap.log" 2>&1 \
    || { tail -20 "$dir/debootstrap.log" >&2; exit 1; }
  rm -rf "$dir/rootfs"/var/cache/apt/archives/*.deb "$dir/rootfs"/var/lib/apt/lists/*
  tar -C "$dir/rootfs" -cf "$dir/base.tar.part" . && mv "$dir/base.tar.part" "$dir/base.tar"
  rm -rf "$dir/rootfs"
fi

if ! "${buildah[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  echo "== base image $base"
  ctr=$("${buildah[@]}" from scratch)
  "${buildah[@]}" add "$ctr" "$dir/base.tar" / >/dev/null
  "${buildah[@]}" config --cmd /bin/bash "$ctr"
  "${buildah[@]}" commit --quiet --rm "$ctr" "$base" >/dev/null
fi

# A host CA bundle (a TLS-intercepting proxy's) reaches pip in the build, not the image.
ca=()
ca_file=${PIP_CERT:-${SSL_CERT_FILE:-}}
if [ -n "$ca_file" ] && [ -s "$ca_file" ]; then
  ca=(--volume "$ca_file:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
fi

echo "== buildah bud deploy/Dockerfile -> $tag"
"${buildah[@]}" bud --isolation chroot --network host --quiet "${ca[@]}" \
  --ignorefile deploy/Dockerfile.dockerignore --build-arg "BASE_IMAGE=$base" \
  -f deploy/Dockerfile -t "$tag" . >/dev/null
"${buildah[@]}" rmi --prune >/dev/null 2>&1 || true
echo "build_seconds=$(( $(date +%s) - start ))"
echo "image_size=$("${buildah[@]}" images --noheading --format '{{.Size}}' "$tag")"
